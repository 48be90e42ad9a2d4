// File: worker/nn/test_util.h
//
// Test-only helpers shared by the backend and model tests: seeded random
// vectors and the convolution cases both backends are checked on.
//
//   const ConvCase p{2, 3, 9, 7, 5, 3, 2, 2, 1};
//   const ConvDesc d = ToConvDesc(p);
//   std::vector<float> x = RandomVec(ConvSizes(d).x, /*seed=*/10);
#ifndef DOWNPOUR_WORKER_NN_TEST_UTIL_H_
#define DOWNPOUR_WORKER_NN_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "worker/nn/backend.h"

namespace downpour {

// n values uniform in [lo, hi), the same for the same seed on every machine.
inline std::vector<float> RandomVec(int64_t n, uint64_t seed, float lo = -1.f,
                                    float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = lo + (hi - lo) * static_cast<float>((rng() >> 40) * 0x1.0p-24);
  }
  return v;
}

// A convolution to test: batch, input channels and size, output channels,
// kernel, stride, padding (and, for the CPU backend, its thread count).
struct ConvCase {
  int batch, c, h, w, o, kh, kw, stride, pad;
  int threads = 1;
};

inline ConvDesc ToConvDesc(const ConvCase& p) {
  ConvDesc d;
  d.batch = p.batch;
  d.in_channels = p.c;
  d.in_h = p.h;
  d.in_w = p.w;
  d.out_channels = p.o;
  d.kernel_h = p.kh;
  d.kernel_w = p.kw;
  d.stride = p.stride;
  d.pad = p.pad;
  return d;
}

// Element counts of a convolution's input, weights and output.
struct ConvElements {
  int64_t x, w, y;
};
inline ConvElements ConvSizes(const ConvDesc& d) {
  return {int64_t{d.batch} * d.in_channels * d.in_h * d.in_w,
          int64_t{d.out_channels} * d.in_channels * d.kernel_h * d.kernel_w,
          int64_t{d.batch} * d.out_channels * d.OutH() * d.OutW()};
}

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_TEST_UTIL_H_
