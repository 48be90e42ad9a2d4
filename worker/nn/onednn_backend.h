// File: worker/nn/onednn_backend.h
//
// The oneDNN CPU backend (Debian's libdnnl 2.6): convolutions (forward with
// fused bias, backward-data, backward-weights with fused bias gradient), max
// and average pooling, batch normalization and ReLU run as oneDNN
// primitives; matrix products go through
// oneDNN's sgemm; bias, loss and the rest reuse the OpenBLAS backend's loops
// (single-threaded: they are small, and a second pool of threads would fight
// oneDNN's spinning OpenMP threads). Conv2dReluForward runs the ReLU as the
// convolution's eltwise post-op (one primitive, the output written once)
// where oneDNN has that kernel for the shape, the same one as without the
// post-op; else convolution, then ReLU. It is the default CPU backend; the
// OpenBLAS one stays selectable (`--cpu_backend=openblas`).
//
// Layouts: the interface is NCHW / OIHW, but backend memory is opaque (read
// and written through the Backend calls only, as on a GPU), so this backend
// owns the layout of the activations it writes. A convolution, pooling,
// batch normalization or ReLU writes its output in the layout oneDNN prefers
// (e.g. nChw16c) when that layout has no padding, and records it for that
// buffer (onednn_layouts.h); the next op reads it as it is (Axpy and
// Multiply too, when both inputs share the layout). The reorders to and
// from NCHW happen at the model's edges only: CopyToHost and Copy (the
// flatten before the dense layers) return NCHW, and any other op that reads
// or partly writes a buffer in a blocked layout first converts it in place.
// Weights and their gradients are always OIHW (reordered into the
// primitive's layout each call: they are small). Primitives are created once
// per shape and cached (onednn_primitives.h; the fused convolution + ReLU
// forward on its first use); one scratchpad, owned by the backend and only
// grown, serves all of them (user scratchpad mode; onednn_context.h), so
// steady-state training allocates nothing.
//
// Algorithms: with `winograd` (default), 3x3 stride-1 convolutions whose
// channel counts are multiples of 16 use oneDNN's Winograd F(4x4, 3x3)
// kernels in each direction where this CPU has them (AVX-512), else direct
// convolution. Winograd computes the same convolution with a different
// rounding (within the tests' tolerance of the reference).
//
// Threads: Debian builds oneDNN with OpenMP. Its thread count is the
// calling thread's OpenMP `nthreads-var`, which is per thread; every
// operation sets it to `threads` on entry, so two backends with different
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

struct OnednnOptions {
  int threads = 1;        // <= 0 means 1.
  bool winograd = true;   // Winograd convolutions where they apply.
};

// Errors: Internal when oneDNN cannot create a CPU engine.
absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(
    const OnednnOptions& options);
// NewOnednnBackend with default options and `num_threads` threads.
absl::StatusOr<std::unique_ptr<Backend>> NewOnednnBackend(int num_threads);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_ONEDNN_BACKEND_H_
