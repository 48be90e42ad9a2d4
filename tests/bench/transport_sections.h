// File: tests/bench/transport_sections.h
//
// One full transport_bench run: every section in order, (b) raw loopback
// TCP, (h) the headline cell interleaved with TCP trials and its context,
// (a) the goodput table and small-op latency, (c) apply vs memcpy, (d) the
// user-space stages, (b) once more, then one line of JSON with the ratios
// (goodput_vs_tcp, apply_vs_memcpy, ...). See transport_bench_main.cc's file
// comment for what each section measures.
//
//   return RunTransportBench(options);   // from main, after the flags
//
// Prints to stdout; not thread-safe (measures the whole process).
#ifndef DOWNPOUR_TESTS_BENCH_TRANSPORT_SECTIONS_H_
#define DOWNPOUR_TESTS_BENCH_TRANSPORT_SECTIONS_H_

#include "tests/bench/transport_bench_util.h"

namespace downpour {
namespace transport_bench {

// Runs and prints every section; returns the process exit code (0).
int RunTransportBench(const BenchOptions& o);

}  // namespace transport_bench
}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_TRANSPORT_SECTIONS_H_
