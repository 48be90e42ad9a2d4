// File: worker/nn/onednn_backend.h
//
// The oneDNN CPU backend (Debian's libdnnl 2.6, issue 18): convolutions
// (forward with fused bias, backward-data, backward-weights with fused bias
// gradient) and max pooling run as oneDNN primitives; matrix products go
// through oneDNN's sgemm; memory, elementwise ops and the loss reuse the
// OpenBLAS backend's loops (single-threaded: they are memory-bound, and a
// second pool of threads would fight oneDNN's spinning OpenMP threads). It is the default CPU backend; the OpenBLAS one
// stays selectable (`--cpu_backend=openblas`).
//
// Layouts: the interface is NCHW / OIHW. Each convolution primitive is
// created with `format_tag::any`, so oneDNN picks its preferred blocked
// layouts; the backend reorders at the primitive's edges into buffers it owns
// (allocated once per shape). Primitives are created once per shape and kept
// in a cache; one scratchpad, owned by the backend and only grown, serves
// all of them (user scratchpad mode), so steady-state training allocates
// nothing.
//
// Threads: Debian builds oneDNN with OpenMP. Its thread count is the
// calling thread's OpenMP `nthreads-var`, which is per thread; every
// operation sets it to `num_threads` on entry, so two backends with different
// thread counts can live in one process and nothing process-wide is set.
//
// Usage (in main):
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu, NewOnednnBackend(1));
//
// Thread-safety: as every Backend, one thread at a time.
#ifndef DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_H_
#define DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/nn/backend.h"

namespace downpour {

// `num_threads` <= 0 means 1. Errors: Internal when oneDNN cannot create a
// CPU engine.
absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(int num_threads);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_H_
