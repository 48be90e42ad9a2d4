// File: worker/nn/openblas_backend.h
//
// The OpenBLAS CPU backend: matrix products (dense layers, and convolutions
// lowered with im2col) go through OpenBLAS sgemm; everything else is a
// simple loop the compiler can vectorize. Its memory is ordinary host memory
// in the interface's layouts. The default CPU backend is the oneDNN one
// (onednn_backend.h); this one is selected with `--cpu_backend=openblas`,
// and the oneDNN backend runs its bias, loss and elementwise loops.
//
// Usage (in main, or in a test):
//   std::unique_ptr<Backend> cpu = NewOpenblasBackend(/*num_threads=*/2);
//
// Thread-safety: as every Backend, one thread at a time.
#ifndef DOWNPOUR_WORKER_NN_OPENBLAS_BACKEND_H_
#define DOWNPOUR_WORKER_NN_OPENBLAS_BACKEND_H_

#include <memory>

#include "worker/nn/backend.h"

namespace downpour {

// Name() is "cpu".
//
// With num_threads > 0 the backend parallelizes over images (convolutions,
// pooling), over elements (ReLU) and over output rows (GEMM) with its own
// num_threads - 1 helper threads, and every OpenBLAS call is single-threaded:
// per-image GEMMs are too small for OpenBLAS's own threading to pay off, and
// OpenBLAS threads would oversubscribe the cores when our workers call it
// concurrently. openblas_set_num_threads is process-wide, so all backends of
// a process should be created with the same setting.
// With num_threads <= 0 the backend runs on the caller's thread only and
// OpenBLAS keeps its default threading.
std::unique_ptr<Backend> NewOpenblasBackend(int num_threads);

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_OPENBLAS_BACKEND_H_
