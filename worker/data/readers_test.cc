// The readers of worker/data through one conformance suite (the same pixels
// as an in-memory Dataset, a PNG image folder, a JPEG image folder and
// safetensors files of each dtype must read alike), then each format's own
// errors: corrupt, truncated and oversized images, missing and empty
// folders, wrong dtypes, shapes and labels.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "worker/data/batcher.h"
#include "worker/data/dataset_info.h"
#include "worker/data/example_source.h"
#include "worker/data/image_decode.h"
#include "worker/data/image_encode.h"
#include "worker/data/image_folder.h"
#include "worker/data/image_folder_reader.h"
#include "worker/data/split_reader.h"
#include "worker/data/tensor_file_reader.h"

namespace downpour {
namespace {

constexpr int kSide = 8;
constexpr int kClasses = 3;
constexpr int kPerClass = 4;

// A smooth gray image (JPEG keeps it close) that differs per example.
std::vector<uint8_t> GrayPixels(int example, int side = kSide) {
  std::vector<uint8_t> p(static_cast<size_t>(side) * side);
  for (int y = 0; y < side; ++y) {
    for (int x = 0; x < side; ++x) {
      p[y * side + x] = static_cast<uint8_t>(40 + 10 * example + 4 * x + 3 * y);
    }
  }
  return p;
}

std::vector<uint8_t> RgbPixels(int side = kSide) {
  std::vector<uint8_t> p(static_cast<size_t>(side) * side * 3);
  for (size_t i = 0; i < p.size(); i += 3) {
    p[i] = 200;
    p[i + 1] = 100;
    p[i + 2] = 50;
  }
  return p;
}

std::string Dir(const std::string& name) {
  const std::string d = TestTmpPath(name);
  mkdir(d.c_str(), 0755);
  return d;
}

void Write(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(WriteWholeFile(path, bytes).ok()) << path;
}

std::string Png(const std::vector<uint8_t>& p, int side = kSide, int c = 1) {
  absl::StatusOr<std::string> s = EncodePng(p.data(), side, side, c);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

std::string Jpeg(const std::vector<uint8_t>& p, int side = kSide, int c = 1) {
  absl::StatusOr<std::string> s = EncodeJpeg(p.data(), side, side, c, 95);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

// Example e (class e / kPerClass) of the reference set.
Dataset Reference() {
  Dataset d;
  d.size = kClasses * kPerClass;
  d.height = d.width = kSide;
  d.num_classes = kClasses;
  for (int e = 0; e < d.size; ++e) {
    for (uint8_t v : GrayPixels(e)) d.images.push_back(v / 255.0f);
    d.labels.push_back(e / kPerClass);
  }
  return d;
}

// The reference set as an image folder: class folders "c0".."c2", files
// named so that sorted order is example order.
std::string WriteFolder(const std::string& name, bool jpeg) {
  const std::string root = Dir(name);
  for (int e = 0; e < kClasses * kPerClass; ++e) {
    const std::string file =
        absl::StrCat(root, "/train/c", e / kPerClass, "/", e % kPerClass,
                     jpeg ? ".JPG" : ".png");
    Write(file, jpeg ? Jpeg(GrayPixels(e)) : Png(GrayPixels(e)));
  }
  return root;
}

std::string Bytes(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

// The reference set as DIR/train.safetensors with the given dtypes.
std::string WriteTensorFile(const std::string& name, const std::string& im,
                            const std::string& lb) {
  const Dataset ref = Reference();
  RawTensor images{"images", im, {ref.size, 1, kSide, kSide}, ""};
  for (float v : ref.images) {
    if (im == "U8") {
      images.bytes.push_back(static_cast<char>(std::lround(v * 255)));
    } else {
      images.bytes += Bytes(&v, 4);
    }
  }
  RawTensor labels{"labels", lb, {ref.size}, ""};
  for (int32_t l : ref.labels) {
    const int64_t w = l;
    labels.bytes += lb == "U8" ? std::string(1, static_cast<char>(l))
                    : lb == "I32" ? Bytes(&l, 4)
                                  : Bytes(&w, 8);
  }
  const std::string root = Dir(name);
  Write(root + "/train.safetensors", SafetensorsBytes({labels, images}));
  return root;
}

SplitRequest Request(DatasetKind kind, const std::string& dir) {
  SplitRequest r;
  r.dataset = kind;
  r.data_dir = dir;
  r.shape = {1, kSide, kSide};
  r.num_classes = kClasses;
  return r;
}

// --- The conformance suite: one fixture per reader. ---

struct InMemory {
  static constexpr float kTolerance = 0;
  std::unique_ptr<ExampleSource> Open() {
    return std::make_unique<DatasetSource>(Reference());
  }
};
struct PngFolder {
  static constexpr float kTolerance = 0;
  std::unique_ptr<ExampleSource> Open() {
    return *OpenSplit(Request(DatasetKind::kImageFolder,
                              WriteFolder("png_folder", false)));
  }
};
struct JpegFolder {
  static constexpr float kTolerance = 6 / 255.0f;  // Quality 95.
  std::unique_ptr<ExampleSource> Open() {
    return *OpenSplit(Request(DatasetKind::kImageFolder,
                              WriteFolder("jpeg_folder", true)));
  }
};
template <const char* kImages, const char* kLabels>
struct TensorFile {
  static constexpr float kTolerance = 0;
  std::unique_ptr<ExampleSource> Open() {
    return *OpenSplit(Request(
        DatasetKind::kSafetensors,
        WriteTensorFile(absl::StrCat("st_", kImages, kLabels), kImages,
                        kLabels)));
  }
};
constexpr char kU8[] = "U8";
constexpr char kF32[] = "F32";
constexpr char kI32[] = "I32";
constexpr char kI64[] = "I64";

template <typename T>
class ReaderConformanceTest : public testing::Test {};

using Readers =
    testing::Types<InMemory, PngFolder, JpegFolder, TensorFile<kU8, kU8>,
                   TensorFile<kF32, kI32>, TensorFile<kU8, kI64>>;
TYPED_TEST_SUITE(ReaderConformanceTest, Readers);

TYPED_TEST(ReaderConformanceTest, ReadsTheReferenceExamples) {
  TypeParam reader;
  std::unique_ptr<ExampleSource> src = reader.Open();
  const Dataset ref = Reference();
  ASSERT_EQ(src->size(), ref.size);
  ASSERT_EQ(src->ExampleSize(), ref.ExampleSize());
  std::vector<float> x(static_cast<size_t>(src->ExampleSize()));
  for (int64_t i = 0; i < ref.size; ++i) {
    int32_t label = -1;
    ASSERT_TRUE(src->Read(i, x.data(), &label).ok());
    EXPECT_EQ(label, ref.labels[i]);
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_NEAR(x[k], ref.images[i * x.size() + k], TypeParam::kTolerance)
          << "example " << i << " value " << k;
    }
  }
}

TYPED_TEST(ReaderConformanceTest, BatchesAreTheSameForAnyThreadCount) {
  TypeParam reader;
  std::unique_ptr<ExampleSource> src = reader.Open();
  auto run = [&](int threads) {
    BatcherOptions o;
    o.batch_size = 5;
    o.epochs = 2;
    o.num_threads = threads;
    o.augment.horizontal_flip = true;
    std::vector<float> all;
    std::unique_ptr<Batcher> b = *Batcher::Create(src.get(), o);
    while (std::optional<Batch> batch = b->Next()) {
      all.insert(all.end(), batch->images.data(),
                 batch->images.data() + batch->size * src->ExampleSize());
    }
    EXPECT_TRUE(b->status().ok());
    return all;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(one.size(), 2u * kClasses * kPerClass * kSide * kSide);
  EXPECT_EQ(one, run(3));
}

TYPED_TEST(ReaderConformanceTest, ReadAllExamplesKeepsTheOrder) {
  TypeParam reader;
  std::unique_ptr<ExampleSource> src = reader.Open();
  absl::StatusOr<Dataset> d = ReadAllExamples(*src, 2, kClasses);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->labels, Reference().labels);
}

// --- Decoding. ---

// Every length (the vector loops' tails) and start (unaligned loads and
// stores) gives each pixel's p / 255.0f, bit for bit, in the version the
// CPU picks and in the baseline one; each input is a buffer of exactly its
// length, so that a read past it is an ASan error, and guards around the
// output catch a write past it.
TEST(PixelsToFloatsTest, EveryPixelIsItsDivisionAtAnyLengthAndStart) {
  std::vector<unsigned char> pixels(300);
  for (size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<unsigned char>((i * 37 + 11) % 256);
  }
  for (int v = 0; v < 256; ++v) pixels[v] = static_cast<unsigned char>(v);
  using Fn = void (*)(const unsigned char*, size_t, float*);
  for (Fn fn : {Fn{PixelsToFloats}, Fn{data_internal::PixelsToFloatsBaseline}}) {
    for (size_t start : {0, 1, 3, 7}) {
      for (size_t n = 0; n + start <= pixels.size(); n += (n < 40 ? 1 : 29)) {
        // The first `start` bytes only shift the input off its alignment.
        const std::vector<unsigned char> buf(pixels.begin(),
                                             pixels.begin() + start + n);
        const unsigned char* in = buf.data() + start;
        std::vector<float> out(n + 2, -1.0f);
        fn(in, n, out.data() + 1);
        ASSERT_EQ(out[0], -1.0f) << "start " << start << " n " << n;
        ASSERT_EQ(out[n + 1], -1.0f) << "start " << start << " n " << n;
        for (size_t k = 0; k < n; ++k) {
          const float want = static_cast<float>(in[k]) / 255.0f;
          uint32_t got_bits, want_bits;
          std::memcpy(&got_bits, &out[k + 1], 4);
          std::memcpy(&want_bits, &want, 4);
          ASSERT_EQ(got_bits, want_bits)
              << "pixel " << int{in[k]} << " at " << k << " of " << n;
        }
      }
    }
  }
}

TEST(ImageDecodeTest, GrayAndRgbConvertAsPilDoes) {
  DecodedImage img;
  ASSERT_TRUE(DecodeImage(Png(RgbPixels(), kSide, 3), "rgb.png", &img).ok());
  EXPECT_EQ(img.channels, 3);
  std::vector<float> out(kSide * kSide), scratch;
  ASSERT_TRUE(ImageToInput(img, {1, kSide, kSide}, ImageResize::kNone,
                           "rgb.png", &scratch, out.data())
                  .ok());
  // PIL: (200 * 19595 + 100 * 38470 + 50 * 7471 + 0x8000) >> 16 = 124.
  EXPECT_FLOAT_EQ(out[0], 124 / 255.0f);

  ASSERT_TRUE(DecodeImage(Jpeg(GrayPixels(0)), "g.jpg", &img).ok());
  EXPECT_EQ(img.channels, 1);
  std::vector<float> rgb(3 * kSide * kSide);
  ASSERT_TRUE(ImageToInput(img, {3, kSide, kSide}, ImageResize::kNone, "g.jpg",
                           &scratch, rgb.data())
                  .ok());
  for (int c = 1; c < 3; ++c) {
    for (int k = 0; k < kSide * kSide; ++k) {
      ASSERT_EQ(rgb[c * kSide * kSide + k], rgb[k]);
    }
  }
}

TEST(ImageDecodeTest, ResizesBilinearlyOrRefuses) {
  DecodedImage img;
  std::vector<uint8_t> flat(16 * 16, 128);
  ASSERT_TRUE(DecodeImage(Png(flat, 16), "big.png", &img).ok());
  std::vector<float> out(kSide * kSide), scratch;
  ASSERT_TRUE(ImageToInput(img, {1, kSide, kSide}, ImageResize::kBilinear,
                           "big.png", &scratch, out.data())
                  .ok());
  for (float v : out) ASSERT_NEAR(v, 128 / 255.0f, 1e-5);
  // Enlarging a 2-pixel ramp: the half-pixel-centred interpolation.
  img.width = 2;
  img.height = 1;
  img.channels = 1;
  img.pixels = {0, 255};
  std::vector<float> wide(4);
  ASSERT_TRUE(ImageToInput(img, {1, 1, 4}, ImageResize::kBilinear, "ramp",
                           &scratch, wide.data())
                  .ok());
  EXPECT_NEAR(wide[0], 0, 1e-6);
  EXPECT_NEAR(wide[1], 0.25, 1e-6);
  EXPECT_NEAR(wide[2], 0.75, 1e-6);
  EXPECT_NEAR(wide[3], 1, 1e-6);
  const absl::Status s = ImageToInput(img, {1, 1, 4}, ImageResize::kNone,
                                      "dir/ramp.png", &scratch, wide.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "dir/ramp.png")) << s;
}

TEST(ImageDecodeTest, CorruptTruncatedAndForeignFilesAreErrorsNamingThem) {
  DecodedImage img;
  const std::string png = Png(GrayPixels(1));
  const std::string jpeg = Jpeg(RgbPixels(), kSide, 3);
  std::string flipped = png;
  flipped[png.size() / 2] ^= 0x55;
  for (const auto& [name, bytes] :
       std::vector<std::pair<std::string, std::string>>{
           {"cut.png", png.substr(0, png.size() / 2)},
           {"cut.jpg", jpeg.substr(0, jpeg.size() / 2)},
           {"header_only.jpg", jpeg.substr(0, 20)},
           {"flipped.png", flipped},
           {"text.png", "not an image at all"},
           {"empty.jpg", ""}}) {
    const absl::Status s = DecodeImage(bytes, "d/" + name, &img);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << name << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "d/" + name)) << s;
  }
}

TEST(ImageDecodeTest, AbsurdSizesAreRefusedFromTheHeader) {
  // The JPEG's SOF0 frame header: FF C0, length, precision, height, width.
  std::string jpeg = Jpeg(GrayPixels(0));
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = jpeg[sof + 7] = static_cast<char>(0x7F);  // 32k x 32k.
  jpeg[sof + 6] = jpeg[sof + 8] = static_cast<char>(0xF0);
  DecodedImage img;
  EXPECT_EQ(DecodeImage(jpeg, "huge.jpg", &img).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(img.pixels.empty());
}

// --- Image folders. ---

TEST(ImageFolderTest, ClassesAreTheSortedFolderNames) {
  const std::string root = Dir("sorted");
  Write(root + "/train/zebra/a.png", Png(GrayPixels(0)));
  Write(root + "/train/ant/b.jpeg", Jpeg(GrayPixels(1)));
  Write(root + "/train/ant/sub/c.png", Png(RgbPixels(), kSide, 3));
  Write(root + "/train/ant/notes.txt", "ignored");
  absl::StatusOr<ImageFolderIndex> index = ListImageFolder(root + "/train");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->classes, (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(index->files.size(), 3u);
  EXPECT_EQ(index->labels, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_TRUE(absl::EndsWith(index->files[1], "ant/sub/c.png"));
  EXPECT_EQ(*CountTrainingExamples(DatasetKind::kImageFolder, root, 0), 3);
  EXPECT_EQ(*CountTrainingExamples(DatasetKind::kImageFolder, root, 2), 2);
}

TEST(ImageFolderTest, BadFoldersAreClearErrorsAtOpen) {
  const std::string root = Dir("bad_folders");
  SplitRequest r = Request(DatasetKind::kImageFolder, root);
  absl::StatusOr<std::unique_ptr<ExampleSource>> s = OpenSplit(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.status().message(), root + "/train"));

  Write(root + "/train/a/0.png", Png(GrayPixels(0)));
  mkdir((root + "/train/b").c_str(), 0755);
  s = OpenSplit(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), root + "/train/b"))
      << s.status();

  for (const char* c : {"b", "c", "d"}) {
    Write(absl::StrCat(root, "/train/", c, "/0.png"), Png(GrayPixels(0)));
  }
  s = OpenSplit(r);  // 4 class folders for a model of 3 classes.
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "3 classes"))
      << s.status();
}

TEST(ImageFolderTest, ACorruptImageStopsTheBatcherOrIsSkipped) {
  const std::string root = WriteFolder("corrupt", false);
  const std::string bad = root + "/train/c1/2.png";
  Write(bad, Png(GrayPixels(0)).substr(0, 40));
  std::unique_ptr<ExampleSource> src =
      *OpenSplit(Request(DatasetKind::kImageFolder, root));
  BatcherOptions o;
  o.batch_size = 4;
  o.epochs = 2;
  int64_t examples = 0;
  std::unique_ptr<Batcher> b = *Batcher::Create(src.get(), o);
  while (std::optional<Batch> batch = b->Next()) examples += batch->size;
  EXPECT_EQ(b->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(b->status().message(), bad)) << b->status();

  o.skip_bad_examples = true;
  b = *Batcher::Create(src.get(), o);
  examples = 0;
  while (std::optional<Batch> batch = b->Next()) examples += batch->size;
  EXPECT_TRUE(b->status().ok()) << b->status();
  EXPECT_EQ(examples, 2 * (kClasses * kPerClass - 1));
  EXPECT_EQ(b->bad_examples(), 1);

  int64_t skipped = 0;
  absl::StatusOr<Dataset> all =
      ReadAllExamples(*src, 2, kClasses, /*skip_bad=*/true, &skipped);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size, kClasses * kPerClass - 1);
  EXPECT_EQ(skipped, 1);
  EXPECT_FALSE(ReadAllExamples(*src, 2, kClasses).ok());
}

TEST(ImageFolderTest, SubsetsSpreadOverTheClasses) {
  EXPECT_EQ(SubsetIndices(12, 4), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(SubsetIndices(3, 0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(SubsetIndices(3, 5), (std::vector<int64_t>{0, 1, 2}));
}

// --- Tensor files. ---

TEST(TensorFileTest, CountsFromTheHeader) {
  const std::string root = WriteTensorFile("count", "U8", "U8");
  EXPECT_EQ(*CountTrainingExamples(DatasetKind::kSafetensors, root, 0),
            kClasses * kPerClass);
}

TEST(TensorFileTest, WrongDtypesShapesAndLabelsAreClearErrors) {
  const std::string root = Dir("bad_tensors");
  const std::string path = root + "/train.safetensors";
  const SplitRequest r = Request(DatasetKind::kSafetensors, root);
  const std::string px(2 * kSide * kSide, '\x10');
  struct Case {
    std::string what;
    std::vector<RawTensor> tensors;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"int16 images",
       {{"images", "I16", {1, 1, kSide, kSide}, px.substr(0, 2 * kSide * kSide)},
        {"labels", "U8", {1}, "\x01"}},
       absl::StatusCode::kInvalidArgument, "images are I16"},
      {"float labels",
       {{"images", "U8", {2, 1, kSide, kSide}, px},
        {"labels", "F32", {2}, std::string(8, '\0')}},
       absl::StatusCode::kInvalidArgument, "labels are F32"},
      {"rank-3 images",
       {{"images", "U8", {2, kSide, kSide}, px}, {"labels", "U8", {2}, std::string("\0\1", 2)}},
       absl::StatusCode::kInvalidArgument, "expected [N, C, H, W]"},
      {"model size",
       {{"images", "U8", {2, 2, kSide / 2, kSide}, px},
        {"labels", "U8", {2}, std::string("\0\1", 2)}},
       absl::StatusCode::kInvalidArgument, "but the model takes 1x8x8"},
      {"label count",
       {{"images", "U8", {2, 1, kSide, kSide}, px}, {"labels", "U8", {1}, "\1"}},
       absl::StatusCode::kInvalidArgument, "one per image"},
      {"label range",
       {{"images", "U8", {2, 1, kSide, kSide}, px},
        {"labels", "U8", {2}, std::string("\0\7", 2)}},
       absl::StatusCode::kInvalidArgument, "label 7 of example 1"},
      {"no labels",
       {{"images", "U8", {2, 1, kSide, kSide}, px}},
       absl::StatusCode::kInvalidArgument, "no tensor named \"labels\""},
      {"short data",
       {{"images", "U8", {3, 1, kSide, kSide}, px},
        {"labels", "U8", {3}, std::string("\0\1\2", 3)}},
       absl::StatusCode::kDataLoss, "does not fill"},
  };
  for (const Case& c : cases) {
    Write(path, SafetensorsBytes(c.tensors));
    absl::StatusOr<std::unique_ptr<ExampleSource>> s = OpenSplit(r);
    EXPECT_EQ(s.status().code(), c.code) << c.what << ": " << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.message))
        << c.what << ": " << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), path)) << c.what;
  }
  const std::string good = SafetensorsBytes(
      {{"images", "U8", {2, 1, kSide, kSide}, px},
       {"labels", "U8", {2}, std::string("\0\1", 2)}});
  for (size_t cut : {size_t{0}, size_t{7}, size_t{20}, good.size() - 1}) {
    Write(path, good.substr(0, cut));
    EXPECT_EQ(OpenSplit(r).status().code(), absl::StatusCode::kDataLoss)
        << cut;
  }
  std::string huge_header = good;
  huge_header[5] = '\x7f';
  Write(path, huge_header);
  EXPECT_EQ(OpenSplit(r).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(OpenSplit(Request(DatasetKind::kSafetensors, root + "/none"))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace downpour
