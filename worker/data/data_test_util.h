// File: worker/data/data_test_util.h
//
// Test-only helpers shared by the worker/data tests: writers of small IDX and
// CIFAR-10 files under TEST_TMPDIR, datasets whose pixels identify their
// examples, a counting (and optionally failing) HostAllocator, and a
// reference augmentation to check batches against.
//
// Thread-safety: CountingAllocator is thread-safe; the rest are plain
// functions over their arguments.
#ifndef DOWNPOUR_WORKER_DATA_DATA_TEST_UTIL_H_
#define DOWNPOUR_WORKER_DATA_DATA_TEST_UTIL_H_

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/host_allocator.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"

namespace downpour {
namespace data_testing {

inline constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

inline void PutBE32(std::string* s, uint32_t v) {
  s->push_back(static_cast<char>(v >> 24));
  s->push_back(static_cast<char>(v >> 16));
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}

inline std::string ImagesIdx(uint32_t n, uint32_t h, uint32_t w,
                      const std::vector<uint8_t>& pixels) {
  std::string s;
  PutBE32(&s, 0x00000803);
  PutBE32(&s, n);
  PutBE32(&s, h);
  PutBE32(&s, w);
  s.append(pixels.begin(), pixels.end());
  return s;
}

inline std::string LabelsIdx(const std::vector<uint8_t>& labels) {
  std::string s;
  PutBE32(&s, 0x00000801);
  PutBE32(&s, static_cast<uint32_t>(labels.size()));
  s.append(labels.begin(), labels.end());
  return s;
}

// Writes `bytes` to TEST_TMPDIR/name, gzipped when the name ends in ".gz".
inline std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TestTmpDir() + "/" + name;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
  } else {
    WriteBytes(path, bytes);
  }
  return path;
}

inline std::vector<uint8_t> Pixels(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return p;
}

// A dataset whose example i has every pixel and its label derived from i, so
// a batch's contents identify the examples in it.
inline Dataset MakeDataset(int64_t n) {
  Dataset d;
  d.size = n;
  d.height = 2;
  d.width = 1;
  for (int64_t i = 0; i < n; ++i) {
    d.images.push_back(static_cast<float>(i));
    d.images.push_back(static_cast<float>(i) + 0.5f);
    d.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

// Example indices in the order the batcher emits them, per epoch.
inline std::vector<std::vector<int64_t>> Drain(const Dataset& d,
                                        const BatcherOptions& o) {
  auto b = Batcher::Create(&d, o);
  EXPECT_TRUE(b.ok()) << b.status();
  std::vector<std::vector<int64_t>> per_epoch(o.epochs);
  while (std::optional<Batch> batch = (*b)->Next()) {
    EXPECT_EQ(batch->images.size(), static_cast<size_t>(batch->size) * 2);
    EXPECT_EQ(batch->labels.size(), static_cast<size_t>(batch->size));
    for (int k = 0; k < batch->size; ++k) {
      const int64_t idx = static_cast<int64_t>(batch->images[2 * k]);
      EXPECT_EQ(batch->images[2 * k + 1], static_cast<float>(idx) + 0.5f);
      EXPECT_EQ(batch->labels[k], idx % 10);
      per_epoch[batch->epoch].push_back(idx);
    }
  }
  return per_epoch;
}


// Counts what goes through it; optionally fails after `limit` allocations.
class CountingAllocator : public HostAllocator {
 public:
  explicit CountingAllocator(int64_t limit = -1) : limit_(limit) {}
  void* Allocate(size_t bytes) override {
    if (limit_ >= 0 && allocations_.load() >= limit_) return nullptr;
    ++allocations_;
    return DefaultHostAllocator()->Allocate(bytes);
  }
  void Free(void* p) override {
    ++frees_;
    DefaultHostAllocator()->Free(p);
  }
  const char* Name() const override { return "counting"; }
  int64_t allocations() const { return allocations_.load(); }
  int64_t frees() const { return frees_.load(); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> frees_{0};
};

// `n` examples of C x H x W; every pixel of example i is distinct and
// non-zero (it encodes i, c, y, x), the label is i % 10.
inline Dataset MakeImageDataset(int64_t n, int c, int h, int w) {
  Dataset d;
  d.size = n;
  d.channels = c;
  d.height = h;
  d.width = w;
  for (int64_t i = 0; i < n; ++i) {
    for (int ch = 0; ch < c; ++ch) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          d.images.push_back(static_cast<float>(1 + x + 16 * y + 256 * ch) +
                             static_cast<float>(i) / 1024.0f);
        }
      }
    }
    d.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

struct BatchCopy {
  int size, epoch;
  std::vector<float> images;
  std::vector<int32_t> labels;
  bool operator==(const BatchCopy& o) const {
    return size == o.size && epoch == o.epoch && labels == o.labels &&
           images.size() == o.images.size() &&
           std::memcmp(images.data(), o.images.data(),
                       images.size() * sizeof(float)) == 0;
  }
};

inline std::vector<BatchCopy> DrainCopies(const Dataset& d, const BatcherOptions& o) {
  auto b = Batcher::Create(&d, o);
  EXPECT_TRUE(b.ok()) << b.status();
  std::vector<BatchCopy> out;
  if (!b.ok()) return out;
  while (std::optional<Batch> batch = (*b)->Next()) {
    EXPECT_EQ(batch->images.size(),
              static_cast<size_t>(batch->size * d.ExampleSize()));
    EXPECT_EQ(batch->labels.size(), static_cast<size_t>(batch->size));
    out.push_back(BatchCopy{
        batch->size, batch->epoch,
        std::vector<float>(batch->images.begin(), batch->images.end()),
        std::vector<int32_t>(batch->labels.begin(), batch->labels.end())});
  }
  EXPECT_TRUE((*b)->status().ok()) << (*b)->status();
  return out;
}

// The reference transform: crop offset (dy, dx) relative to the unpadded
// image, then an optional mirror, then optional normalization.
inline std::vector<float> Reference(const Dataset& d, int64_t example, int dy, int dx,
                             bool flip, const std::vector<float>& mean,
                             const std::vector<float>& stddev) {
  const int c = d.channels, h = d.height, w = d.width;
  const float* in = d.images.data() + example * d.ExampleSize();
  std::vector<float> out(d.ExampleSize());
  for (int ch = 0; ch < c; ++ch) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
        float v = (sy >= 0 && sy < h && sx >= 0 && sx < w)
                      ? in[(ch * h + sy) * w + sx]
                      : 0.0f;
        if (!mean.empty()) v = (v - mean[ch]) / stddev[ch];
        out[(ch * h + y) * w + x] = v;
      }
    }
  }
  return out;
}

// Which example a batch slot holds: labels are i % 10 and the fractional
// part of any non-padding pixel is i / 1024, but the simplest robust key is
// the label plus a search over the candidates with that label.
struct Match {
  int64_t example = -1;
  int dy = 0, dx = 0;
  bool flip = false;
  int count = 0;  // How many (example, dy, dx, flip) candidates match.
};

inline Match FindTransform(const Dataset& d, const float* got, int32_t label, int pad,
                    bool try_flip, const std::vector<float>& mean,
                    const std::vector<float>& stddev) {
  Match m;
  for (int64_t i = label; i < d.size; i += 10) {
    for (int dy = -pad; dy <= pad; ++dy) {
      for (int dx = -pad; dx <= pad; ++dx) {
        for (int f = 0; f <= (try_flip ? 1 : 0); ++f) {
          const std::vector<float> want =
              Reference(d, i, dy, dx, f == 1, mean, stddev);
          bool same = true;
          for (size_t k = 0; k < want.size() && same; ++k) {
            same = want[k] == got[k];
          }
          if (same) {
            if (m.count == 0) {
              m.example = i;
              m.dy = dy;
              m.dx = dx;
              m.flip = f == 1;
            }
            ++m.count;
          }
        }
      }
    }
  }
  return m;
}


// A record whose label is `label` and whose pixel j is (seed + 7 j) mod 256.
inline std::string CifarRecord(uint8_t label, int seed) {
  std::string r(1, static_cast<char>(label));
  for (int j = 0; j < 3072; ++j) {
    r.push_back(static_cast<char>((seed + 7 * j) % 256));
  }
  return r;
}

}  // namespace data_testing
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_DATA_DATA_TEST_UTIL_H_
