// convert_dataset: writes an IDX data set (Fashion-MNIST, MNIST) in the two
// file formats a job can also train on, so that there is real data in both:
//
//   OUT/train/<label>/<index>.png|jpg, OUT/test/<label>/<index>.png|jpg
//       (--dataset=image_folder; class folders "0".."9", so that their
//       sorted order is the IDX label order)
//   OUT/train.safetensors, OUT/test.safetensors
//       (--dataset=safetensors; images uint8 [N, 1, 28, 28], labels uint8)
//
//   bazel-bin/deploy/convert_dataset \
//       --idx_dir=/usr/share/datasets/fashion-mnist --out_dir=/tmp/fm
//   bazel-bin/deploy/launch --dataset=image_folder --data_dir=/tmp/fm ...
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/command_line.h"
#include "worker/data/data.h"
#include "worker/data/image_encode.h"

ABSL_FLAG(std::string, idx_dir, "/usr/share/datasets/fashion-mnist",
          "Folder of the IDX files ({train,t10k}-{images-idx3,labels-idx1}-"
          "ubyte[.gz]).");
ABSL_FLAG(std::string, out_dir, "", "Where to write the data sets.");
ABSL_FLAG(std::string, image_format, "png",
          "png, jpeg, or mixed (even indices PNG, odd JPEG).");
ABSL_FLAG(int, jpeg_quality, 95, "JPEG quality, 1-100.");
ABSL_FLAG(int64_t, max_train, 0, "Convert the first N training examples (0: all).");
ABSL_FLAG(int64_t, max_test, 0, "Convert the first N test examples (0: all).");
ABSL_FLAG(bool, write_images, true, "Write the image folder.");
ABSL_FLAG(bool, write_safetensors, true, "Write the safetensors files.");

namespace downpour {
namespace {

absl::Status Convert(const Dataset& d, const std::string& split,
                     const std::string& out, const std::string& format,
                     int quality) {
  const int64_t n = d.ExampleSize();
  std::vector<uint8_t> pixels(static_cast<size_t>(d.size * n));
  for (size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<uint8_t>(std::lround(d.images[i] * 255.0f));
  }
  if (absl::GetFlag(FLAGS_write_images)) {
    for (int64_t i = 0; i < d.size; ++i) {
      const bool jpeg = format == "jpeg" || (format == "mixed" && i % 2 == 1);
      const uint8_t* p = pixels.data() + i * n;
      absl::StatusOr<std::string> bytes =
          jpeg ? EncodeJpeg(p, d.width, d.height, d.channels, quality)
               : EncodePng(p, d.width, d.height, d.channels);
      if (!bytes.ok()) return bytes.status();
      const std::string path =
          absl::StrFormat("%s/%s/%d/%05d.%s", out, split, d.labels[i], i,
                          jpeg ? "jpg" : "png");
      if (absl::Status s = WriteWholeFile(path, *bytes); !s.ok()) return s;
    }
  }
  if (absl::GetFlag(FLAGS_write_safetensors)) {
    RawTensor images{"images", "U8", {d.size, d.channels, d.height, d.width},
                     std::string(pixels.begin(), pixels.end())};
    RawTensor labels{"labels", "U8", {d.size}, ""};
    for (int32_t l : d.labels) labels.bytes.push_back(static_cast<char>(l));
    if (absl::Status s = WriteWholeFile(
            absl::StrCat(out, "/", split, ".safetensors"),
            SafetensorsBytes({images, labels}));
        !s.ok()) {
      return s;
    }
  }
  std::printf("convert_dataset: %s: %lld examples\n", split.c_str(),
              static_cast<long long>(d.size));
  return absl::OkStatus();
}

int Main() {
  const std::string in = absl::GetFlag(FLAGS_idx_dir);
  const std::string out = absl::GetFlag(FLAGS_out_dir);
  const std::string format = absl::GetFlag(FLAGS_image_format);
  const int quality = absl::GetFlag(FLAGS_jpeg_quality);
  if (out.empty() || (format != "png" && format != "jpeg" && format != "mixed") ||
      quality < 1 || quality > 100) {
    std::fprintf(stderr,
                 "convert_dataset: needs --out_dir, --image_format=png|jpeg|"
                 "mixed and --jpeg_quality in 1-100\n");
    return 2;
  }
  for (const bool train : {true, false}) {
    absl::StatusOr<Dataset> d = LoadMnistSplit(
        in, train, absl::GetFlag(train ? FLAGS_max_train : FLAGS_max_test));
    absl::Status s = d.status();
    if (s.ok()) s = Convert(*d, train ? "train" : "test", out, format, quality);
    if (!s.ok()) {
      std::fprintf(stderr, "convert_dataset: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace downpour

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes an IDX data set as an image folder and safetensors files.");
  downpour::ParseCommandLineOrExit(argc, argv);
  return downpour::Main();
}
