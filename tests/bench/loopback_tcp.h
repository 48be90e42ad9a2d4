// File: tests/bench/loopback_tcp.h
//
// The raw TCP bandwidth of this machine over loopback, as the ceiling any
// RPC stack on it can reach: one thread writes `total_bytes` in
// `write_bytes` send() calls on a plain socket to 127.0.0.1, another thread
// reads them with recv() into a buffer of the same size. Nothing else (no
// framing, no serialization) is on the path; each byte is still copied by the
// kernel twice (user -> socket buffer -> user), as it is for gRPC.
//
//   DP_ASSIGN_OR_RETURN(LoopbackTcpResult r,
//                       MeasureLoopbackTcp({.total_bytes = int64_t{1} << 30}));
//   r.bytes_per_second;
#ifndef DOWNPOUR_TESTS_BENCH_LOOPBACK_TCP_H_
#define DOWNPOUR_TESTS_BENCH_LOOPBACK_TCP_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace downpour {

struct LoopbackTcpOptions {
  int64_t total_bytes = int64_t{1} << 30;
  int64_t write_bytes = int64_t{4} << 20;
  // Size of the memory each end walks through (send() and recv() move along
  // it write_bytes at a time and wrap). 0: write_bytes, the usual iperf-style
  // test, whose buffers stay in the CPU cache; a model-sized span makes both
  // ends stream from and to main memory, as moving a model does.
  int64_t span_bytes = 0;
  // Independent connections running at once, each moving total_bytes /
  // streams. Two are a stand-in for traffic in both directions at once (on
  // loopback, direction is only which thread sends).
  int streams = 1;
};

struct LoopbackTcpResult {
  int64_t bytes = 0;
  double seconds = 0;
  double bytes_per_second = 0;
};

// Errors from socket calls are returned with the failing call and errno text.
absl::StatusOr<LoopbackTcpResult> MeasureLoopbackTcp(
    const LoopbackTcpOptions& options);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_LOOPBACK_TCP_H_
