// decode_bench: images/sec of the input pipeline over an image folder:
// read, decode (libpng / libjpeg-turbo), random crop + flip and normalize,
// by the Batcher's threads into batches of 64, one epoch per pass. The
// PyTorch DataLoader with PIL and torchvision transforms doing the same
// work is tests/bench/torch_decode_bench.py; decode_bench.sh runs both.
//
//   bazel-bin/tests/bench/decode_bench --decode_dir=/tmp/fm_png/test \
//       --decode_threads=2
// prints "decode_bench: threads=2 images=10000 best_seconds=... images/sec=..."
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/data/batcher.h"
#include "worker/data/image_folder_reader.h"

ABSL_FLAG(std::string, decode_dir, "", "An image folder split (<class>/*).");
ABSL_FLAG(int, decode_threads, 1, "Batcher threads decoding.");
ABSL_FLAG(int, decode_passes, 3, "Epochs timed; the best is reported.");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace downpour;
  ImageFolderOptions fo;
  fo.shape = {1, 28, 28};
  fo.num_classes = 10;
  absl::StatusOr<std::unique_ptr<ExampleSource>> src =
      OpenImageFolder(absl::GetFlag(FLAGS_decode_dir), fo);
  if (!src.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", src.status().ToString().c_str());
    return 1;
  }
  const int threads = absl::GetFlag(FLAGS_decode_threads);
  double best = 1e30;
  for (int pass = 0; pass < absl::GetFlag(FLAGS_decode_passes); ++pass) {
    BatcherOptions o;
    o.batch_size = 64;
    o.seed = static_cast<uint64_t>(pass + 1);
    o.num_threads = threads;
    o.prefetch = 2 * threads + 2;
    o.augment.horizontal_flip = true;
    o.augment.random_crop_padding = 4;
    o.normalize_mean = {0.2860f};
    o.normalize_std = {0.3530f};
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Batcher>> b = Batcher::Create(src->get(), o);
    if (!b.ok()) {
      std::fprintf(stderr, "decode_bench: %s\n", b.status().ToString().c_str());
      return 1;
    }
    while (std::optional<Batch> batch = (*b)->Next()) {
    }
    if (!(*b)->status().ok()) {
      std::fprintf(stderr, "decode_bench: %s\n",
                   (*b)->status().ToString().c_str());
      return 1;
    }
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - start));
  }
  const double n = static_cast<double>((*src)->size());
  std::printf("decode_bench: threads=%d images=%.0f best_seconds=%.3f "
              "images/sec=%.0f per_thread=%.0f\n",
              threads, n, best, n / best, n / best / threads);
  return 0;
}
