#include "worker/data/example_source.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>


namespace downpour {

namespace {

// p / 255.0f for every pixel, compiled below for the baseline instruction
// set (SSE4.1 in x86-64-v2) and for AVX2 (this file is built with -O3, so
// the loop vectorizes; AVX-512 gave the same 256-bit code), AVX2 picked
// once when the CPU has it, as the servers' Adam loop is. The vector
// division rounds as the scalar one: every version gives the same bits.
__attribute__((always_inline)) inline void PixelsBody(
    const unsigned char* __restrict p, size_t n, float* __restrict dst) {
  for (size_t k = 0; k < n; ++k) dst[k] = static_cast<float>(p[k]) / 255.0f;
}

using PixelsFn = void (*)(const unsigned char*, size_t, float*);

void PixelsBaseline(const unsigned char* p, size_t n, float* dst) {
  PixelsBody(p, n, dst);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void PixelsAvx2(const unsigned char* p,
                                                size_t n, float* dst) {
  PixelsBody(p, n, dst);
}
#endif

PixelsFn PickPixels() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return PixelsAvx2;
#endif
  return PixelsBaseline;
}

}  // namespace

void PixelsToFloats(const unsigned char* p, size_t n, float* dst) {
  static const PixelsFn fn = PickPixels();
  fn(p, n, dst);
}

namespace data_internal {
void PixelsToFloatsBaseline(const unsigned char* p, size_t n, float* dst) {
  PixelsBaseline(p, n, dst);
}
}  // namespace data_internal

absl::Status DatasetSource::Read(int64_t index, float* dst,
                                 int32_t* label) const {
  const int64_t n = data_->ExampleSize();
  std::memcpy(dst, data_->images.data() + index * n, n * sizeof(float));
  *label = data_->labels[static_cast<size_t>(index)];
  return absl::OkStatus();
}

absl::StatusOr<Dataset> ReadAllExamples(const ExampleSource& source,
                                        int threads, int num_classes,
                                        bool skip_bad, int64_t* skipped) {
  const int64_t n = source.size();
  const int64_t example = source.ExampleSize();
  std::vector<float> images(static_cast<size_t>(n * example));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  std::vector<absl::Status> status(static_cast<size_t>(n));
  // Examples are handed out in blocks, so that threads write apart.
  constexpr int64_t kBlock = 64;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (;;) {
      const int64_t begin = next.fetch_add(kBlock);
      if (begin >= n || failed.load()) return;
      for (int64_t i = begin; i < std::min(n, begin + kBlock); ++i) {
        status[i] = source.Read(i, images.data() + i * example, &labels[i]);
        if (!status[i].ok() &&
            (!skip_bad || status[i].code() != absl::StatusCode::kDataLoss)) {
          failed = true;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  Dataset d;
  d.channels = source.channels();
  d.height = source.height();
  d.width = source.width();
  d.num_classes = num_classes;
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      if (!skip_bad || status[i].code() != absl::StatusCode::kDataLoss) {
        return status[i];
      }
      if (skipped != nullptr) ++*skipped;
      continue;
    }
    if (kept != i) {
      std::memmove(images.data() + kept * example,
                   images.data() + i * example, example * sizeof(float));
      labels[kept] = labels[i];
    }
    ++kept;
  }
  images.resize(static_cast<size_t>(kept * example));
  labels.resize(static_cast<size_t>(kept));
  d.size = kept;
  d.images = std::move(images);
  d.labels = std::move(labels);
  return d;
}

}  // namespace downpour
