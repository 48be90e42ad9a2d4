// PNG through libpng's simplified API (its own setjmp stays inside libpng);
// JPEG through libjpeg's, whose errors longjmp back to DecodeJpegFrame. That
// function holds no object with a destructor, so the jump skips nothing that
// needed cleaning up; the messages become Status values in its caller.
#include "worker/data/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

// A progressive JPEG may have any number of scans, each a pass over the
// whole image; a hostile file uses that to take minutes. Real encoders write
// about ten.
constexpr int kMaxJpegScans = 256;
// libjpeg's working memory for one image (coefficient buffers of a
// progressive file are the big part).
constexpr long kMaxJpegMemory = 512L << 20;

struct JpegErrorManager {
  jpeg_error_mgr pub;  // First: libjpeg casts cinfo->err to this.
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegFail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) are corrupt data libjpeg would paper over with gray,
// e.g. a file cut short; PIL refuses those, and so do we. Trace messages
// (level >= 0) are dropped.
void JpegMessage(j_common_ptr cinfo, int level) {
  if (level < 0) JpegFail(cinfo);
}

void JpegProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message),
                  "more than %d progressive scans", kMaxJpegScans);
    std::longjmp(err->jump, 1);
  }
}

enum class JpegResult { kOk, kCorrupt, kTooLarge };

// The libjpeg part of DecodeJpeg: no object here has a destructor, so a
// longjmp from inside libjpeg back to the setjmp below skips none.
JpegResult DecodeJpegFrame(const unsigned char* data, size_t size,
                           DecodedImage* out, JpegErrorManager* err) {
  jpeg_decompress_struct cinfo;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = JpegFail;
  err->pub.emit_message = JpegMessage;
  err->message[0] = '\0';
  jpeg_create_decompress(&cinfo);
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::kCorrupt;
  }
  progress.progress_monitor = JpegProgress;
  cinfo.progress = &progress;
  cinfo.mem->max_memory_to_use = kMaxJpegMemory;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (int64_t{cinfo.image_width} * cinfo.image_height > kMaxImagePixels) {
    out->width = static_cast<int>(cinfo.image_width);
    out->height = static_cast<int>(cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::kTooLarge;
  }
  cinfo.out_color_space =
      cinfo.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->width = static_cast<int>(cinfo.output_width);
  out->height = static_cast<int>(cinfo.output_height);
  out->channels = cinfo.output_components;
  const size_t stride = size_t{cinfo.output_width} * cinfo.output_components;
  out->pixels.resize(stride * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return JpegResult::kOk;
}

absl::Status DecodeJpeg(absl::string_view bytes, const std::string& name,
                        DecodedImage* out) {
  JpegErrorManager err;
  switch (DecodeJpegFrame(reinterpret_cast<const unsigned char*>(bytes.data()),
                          bytes.size(), out, &err)) {
    case JpegResult::kOk:
      return absl::OkStatus();
    case JpegResult::kTooLarge:
      return absl::ResourceExhaustedError(
          absl::StrCat(name, ": JPEG of ", out->width, "x", out->height,
                       " pixels is above the limit of ", kMaxImagePixels));
    case JpegResult::kCorrupt:
      break;
  }
  return absl::DataLossError(
      absl::StrCat(name, ": corrupt JPEG: ", err.message));
}

// The name of the first chunk whose CRC does not match its bytes, or "" when
// all do. libpng's simplified reader lets some corruption through (a byte
// flipped inside IDAT can still inflate); a checked CRC catches it, as PIL's
// reader does.
std::string FirstBadPngChunk(absl::string_view bytes) {
  size_t at = 8;
  while (at + 12 <= bytes.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
    const uint64_t len = (uint64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    if (len > bytes.size() - at - 12) return "";  // Truncated: libpng says.
    const uint32_t want = (uint32_t{p[8 + len]} << 24) | (p[9 + len] << 16) |
                          (p[10 + len] << 8) | p[11 + len];
    const uLong got = crc32(0, p + 4, static_cast<uInt>(len + 4));
    if (got != want) return std::string(bytes.data() + at + 4, 4);
    if (std::memcmp(p + 4, "IEND", 4) == 0) return "";
    at += 12 + len;
  }
  return "";
}

absl::Status DecodePng(absl::string_view bytes, const std::string& name,
                       DecodedImage* out) {
  if (const std::string chunk = FirstBadPngChunk(bytes); !chunk.empty()) {
    return absl::DataLossError(absl::StrCat(
        name, ": corrupt PNG: CRC error in a ", absl::CHexEscape(chunk),
        " chunk"));
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    const std::string message = image.message;
    png_image_free(&image);
    return absl::DataLossError(
        absl::StrCat(name, ": corrupt PNG: ", message));
  }
  if (int64_t{image.width} * image.height > kMaxImagePixels) {
    png_image_free(&image);
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": PNG of ", image.width, "x", image.height,
                     " pixels is above the limit of ", kMaxImagePixels));
  }
  const bool color = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  image.format = color ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  out->width = static_cast<int>(image.width);
  out->height = static_cast<int>(image.height);
  out->channels = color ? 3 : 1;
  out->pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, /*background=*/nullptr,
                             out->pixels.data(), /*row_stride=*/0,
                             /*colormap=*/nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    return absl::DataLossError(
        absl::StrCat(name, ": corrupt PNG: ", message));
  }
  png_image_free(&image);
  return absl::OkStatus();
}

// PIL's resampling coefficients (Imaging's precompute_coeffs) for a
// triangle (bilinear) filter from `in` to `out` samples: output i is
// sum_k weights[i * taps + k] * input[first[i] + k].
struct Coeffs {
  int taps = 0;
  std::vector<int> first;
  std::vector<float> weights;
};

Coeffs BilinearCoeffs(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // The triangle's support is 1.
  Coeffs c;
  c.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out);
  c.weights.assign(static_cast<size_t>(out) * c.taps, 0.0f);
  std::vector<double> w(static_cast<size_t>(c.taps));
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);
    double total = 0;
    const int n = std::min(hi - lo, c.taps);
    for (int k = 0; k < n; ++k) {
      const double x = std::fabs((lo + k - center + 0.5) / filter_scale);
      w[k] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[k];
    }
    c.first[i] = lo;
    for (int k = 0; k < n; ++k) {
      c.weights[static_cast<size_t>(i) * c.taps + k] =
          static_cast<float>(total > 0 ? w[k] / total : 0);
    }
  }
  return c;
}

// One plane of in_h x in_w floats to out_h x out_w, horizontally then
// vertically, through `tmp`.
void ResizePlane(const float* src, int in_h, int in_w, float* dst, int out_h,
                 int out_w, const Coeffs& ch, const Coeffs& cv,
                 std::vector<float>* tmp) {
  tmp->resize(static_cast<size_t>(in_h) * out_w);
  for (int y = 0; y < in_h; ++y) {
    const float* row = src + static_cast<size_t>(y) * in_w;
    for (int x = 0; x < out_w; ++x) {
      const float* w = &ch.weights[static_cast<size_t>(x) * ch.taps];
      const int lo = ch.first[x];
      const int n = std::min(ch.taps, in_w - lo);
      float s = 0;
      for (int k = 0; k < n; ++k) s += w[k] * row[lo + k];
      (*tmp)[static_cast<size_t>(y) * out_w + x] = s;
    }
  }
  for (int y = 0; y < out_h; ++y) {
    const float* w = &cv.weights[static_cast<size_t>(y) * cv.taps];
    const int lo = cv.first[y];
    const int n = std::min(cv.taps, in_h - lo);
    float* out_row = dst + static_cast<size_t>(y) * out_w;
    for (int x = 0; x < out_w; ++x) out_row[x] = 0;
    for (int k = 0; k < n; ++k) {
      const float* in_row = tmp->data() + static_cast<size_t>(lo + k) * out_w;
      for (int x = 0; x < out_w; ++x) out_row[x] += w[k] * in_row[x];
    }
  }
}

// The pixels of `img` as `channels` planes of floats in [0, 1] at `dst`.
void ToPlanes(const DecodedImage& img, int channels, float* dst) {
  const size_t hw = static_cast<size_t>(img.width) * img.height;
  const uint8_t* p = img.pixels.data();
  if (img.channels == channels) {
    for (int c = 0; c < channels; ++c) {
      float* plane = dst + c * hw;
      for (size_t i = 0; i < hw; ++i) plane[i] = p[i * channels + c] / 255.0f;
    }
  } else if (img.channels == 1) {  // Gray to RGB.
    for (size_t i = 0; i < hw; ++i) dst[i] = p[i] / 255.0f;
    for (int c = 1; c < channels; ++c) {
      std::memcpy(dst + c * hw, dst, hw * sizeof(float));
    }
  } else {  // RGB to gray, PIL's L24 rounding.
    for (size_t i = 0; i < hw; ++i) {
      const uint32_t l = (p[3 * i] * 19595u + p[3 * i + 1] * 38470u +
                          p[3 * i + 2] * 7471u + 0x8000u) >> 16;
      dst[i] = static_cast<float>(l) / 255.0f;
    }
  }
}

}  // namespace

absl::Status DecodeImage(absl::string_view bytes, const std::string& name,
                         DecodedImage* out) {
  static constexpr unsigned char kPngSignature[8] = {0x89, 'P',  'N',  'G',
                                                     '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) {
    return DecodePng(bytes, name, out);
  }
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
      static_cast<unsigned char>(bytes[1]) == 0xD8 &&
      static_cast<unsigned char>(bytes[2]) == 0xFF) {
    return DecodeJpeg(bytes, name, out);
  }
  return absl::DataLossError(
      absl::StrCat(name, ": neither a PNG nor a JPEG file (", bytes.size(),
                   " bytes)"));
}

absl::Status ImageToInput(const DecodedImage& img, const ImageShape& target,
                          ImageResize resize, const std::string& name,
                          std::vector<float>* scratch, float* dst) {
  if (img.channels != 1 && img.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", img.channels, " channels"));
  }
  if (target.channels != 1 && target.channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": the model takes ", target.channels,
        " channels; images convert only to 1 (gray) or 3 (RGB)"));
  }
  if (img.width == target.width && img.height == target.height) {
    ToPlanes(img, target.channels, dst);
    return absl::OkStatus();
  }
  if (resize == ImageResize::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": image is ", img.width, "x", img.height, " but the model "
        "takes ", target.width, "x", target.height,
        " (--image_resize=none)"));
  }
  const size_t in_hw = static_cast<size_t>(img.width) * img.height;
  const size_t out_hw = static_cast<size_t>(target.width) * target.height;
  scratch->resize(in_hw * target.channels);
  ToPlanes(img, target.channels, scratch->data());
  const Coeffs ch = BilinearCoeffs(img.width, target.width);
  const Coeffs cv = BilinearCoeffs(img.height, target.height);
  std::vector<float> tmp;
  for (int c = 0; c < target.channels; ++c) {
    ResizePlane(scratch->data() + c * in_hw, img.height, img.width,
                dst + c * out_hw, target.height, target.width, ch, cv, &tmp);
  }
  return absl::OkStatus();
}

}  // namespace downpour
