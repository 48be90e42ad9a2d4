#include "worker/data/example_source.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace downpour {

void PixelsToFloats(const unsigned char* p, size_t n, float* dst) {
  static const auto* const kTable = [] {
    auto* t = new float[256];
    for (int v = 0; v < 256; ++v) t[v] = static_cast<float>(v) / 255.0f;
    return t;
  }();
  for (size_t k = 0; k < n; ++k) dst[k] = kTable[p[k]];
}

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
