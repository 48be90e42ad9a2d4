#include "worker/data/image_encode.h"

#include <sys/stat.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace downpour {
namespace {

struct JpegEncodeError {
  jpeg_error_mgr pub;  // First: libjpeg casts cinfo->err to this.
  jmp_buf jump;
};

[[noreturn]] void JpegEncodeFail(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegEncodeError*>(cinfo->err)->jump, 1);
}

// The libjpeg part of EncodeJpeg: nothing here has a destructor, so the
// longjmp of an error skips nothing. *out and *out_size are libjpeg's
// malloc'ed buffer, freed by the caller.
bool EncodeJpegFrame(const uint8_t* pixels, int width, int height,
                     int channels, int quality, unsigned char** out,
                     unsigned long* out_size) {
  jpeg_compress_struct cinfo;
  JpegEncodeError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegEncodeFail;
  jpeg_create_compress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_mem_dest(&cinfo, out, out_size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(width) * channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + stride * cinfo.next_scanline);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

absl::Status CheckShape(int width, int height, int channels) {
  if (width < 1 || height < 1 || (channels != 1 && channels != 3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot encode an image of ", width, "x", height, "x", channels));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodePng(const uint8_t* pixels, int width,
                                      int height, int channels) {
  if (absl::Status s = CheckShape(width, height, channels); !s.ok()) return s;
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0,
                                 nullptr)) {
    return absl::InternalError(absl::StrCat("PNG: ", image.message));
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0,
                                 nullptr)) {
    return absl::InternalError(absl::StrCat("PNG: ", image.message));
  }
  out.resize(size);
  return out;
}

absl::StatusOr<std::string> EncodeJpeg(const uint8_t* pixels, int width,
                                       int height, int channels, int quality) {
  if (absl::Status s = CheckShape(width, height, channels); !s.ok()) return s;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const bool ok =
      EncodeJpegFrame(pixels, width, height, channels, quality, &buf, &size);
  std::string out;
  if (ok) out.assign(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  if (!ok) return absl::InternalError("JPEG: encoding failed");
  return out;
}

std::string SafetensorsBytes(const std::vector<RawTensor>& tensors) {
  std::string header = "{";
  std::string data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const RawTensor& t = tensors[i];
    absl::StrAppend(&header, i ? "," : "", "\"", t.name, "\":{\"dtype\":\"",
                    t.dtype, "\",\"shape\":[", absl::StrJoin(t.shape, ","),
                    "],\"data_offsets\":[", data.size(), ",",
                    data.size() + t.bytes.size(), "]}");
    data += t.bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

absl::Status WriteWholeFile(const std::string& path, const std::string& bytes) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    mkdir(path.substr(0, slash).c_str(), 0755);  // Exists already: fine.
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot create"));
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::UnavailableError(absl::StrCat(path, ": write error"));
  }
  return absl::OkStatus();
}

}  // namespace downpour
