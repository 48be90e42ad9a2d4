// libFuzzer target: the data readers (worker/data/idx_reader.h and
// cifar10_reader.h) over arbitrary files. The first byte picks the reader
// (IDX images + labels, plain or with a ".gz" name; or one or two CIFAR-10
// batch files) and a max_examples; two length bytes split the rest into the
// two files. An accepted data set must have one label per image, and IDX
// files read through OpenIdx must give the same examples.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "worker/data/cifar10_reader.h"
#include "worker/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace downpour;
  fuzz::FuzzInput in(data, size);
  const uint8_t which = in.Byte();
  const int64_t max_examples = (which >> 4) % 4;
  const size_t first = in.Byte() | (static_cast<size_t>(in.Byte()) << 8);
  const std::string a = in.Bytes(first);
  const std::string b = in.Rest();
  absl::StatusOr<Dataset> d;
  if (which % 3 == 2) {
    std::vector<std::string> paths = {fuzz::WriteScratchFile("batch1.bin", a)};
    if (which & 8) paths.push_back(fuzz::WriteScratchFile("batch2.bin", b));
    d = LoadCifar10Files(paths, max_examples);
  } else {
    const std::string gz = which % 3 == 1 ? ".gz" : "";
    const std::string images = fuzz::WriteScratchFile("images" + gz, a);
    const std::string labels = fuzz::WriteScratchFile("labels" + gz, b);
    d = LoadIdxDataset(images, labels, max_examples);
    // The source that keeps u8 pixels accepts the same files and reads
    // the same last example.
    absl::StatusOr<std::unique_ptr<ExampleSource>> src =
        OpenIdx(images, labels, max_examples);
    if (src.ok() != d.ok()) __builtin_trap();
    if (d.ok() && d->size > 0) {
      if ((*src)->size() != d->size) __builtin_trap();
      const int64_t n = d->ExampleSize();
      std::vector<float> x(static_cast<size_t>(n));
      int32_t label = -1;
      if (!(*src)->Read(d->size - 1, x.data(), &label).ok() ||
          label != d->labels.back() ||
          !std::equal(x.begin(), x.end(), d->images.end() - n)) {
        __builtin_trap();
      }
    }
  }
  if (d.ok() && (static_cast<int64_t>(d->labels.size()) != d->size ||
               static_cast<int64_t>(d->images.size()) != d->size * d->ExampleSize())) {
    __builtin_trap();
  }
  return 0;
}
