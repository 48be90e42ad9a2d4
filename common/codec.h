// File: common/codec.h
//
// Codecs for float32 gradients and parameters on the wire: a small interface
// behind a name-based factory, so the client, the server and tools pick one
// by name ("none", "fp16", "bf16") and never depend on a concrete class.
//
//   "none"  raw little-endian float32, 4 bytes per value; exact.
//   "fp16"  IEEE 754 binary16, 2 bytes per value, round-to-nearest-even.
//           Relative error <= 2^-11 in the normal range [2^-14, 65504];
//           absolute error <= 2^-25 below it (subnormals are kept, not
//           flushed). Inf and NaN are preserved (NaN made quiet, sign and top
//           payload bits kept). FINITE VALUES BEYOND THE HALF RANGE SATURATE
//           to +-65504 (the largest half) instead of becoming Inf, so a finite
//           gradient always decodes finite and is never refused by the
//           server's non-finite check. Use loss scaling / clipping upstream
//           when magnitudes above 65504 matter.
//   "bf16"  bfloat16 (the top 16 bits of a float32), 2 bytes per value,
//           round-to-nearest-even on the dropped 16 bits. Relative error
//           <= 2^-8 for normal floats; same exponent range as float32.
//           Inf and NaN are preserved (NaN made quiet). For the same reason
//           as fp16, the few finite floats above the largest bf16
//           (~3.3895e38), which round-to-nearest would turn into Inf,
//           saturate to +-max bf16.
//
// The encoded form is little-endian on every host (this code assumes a
// little-endian host, checked at compile time). Encode and Decode are single
// branch-free passes that the compiler can vectorize; they never allocate.
//
// Usage:
//   DP_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, CreateCodec("fp16"));
//   std::string wire(codec->EncodedBytes(n), '\0');
//   codec->Encode(grads.data(), n, wire.data());
//   ...
//   DP_RETURN_IF_ERROR(codec->Decode(wire.data(), wire.size(), out.data(), n));
//
// Thread-safety: a Codec is immutable; one instance may be used from any
// number of threads at once.
#ifndef DOWNPOUR_COMMON_CODEC_H_
#define DOWNPOUR_COMMON_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace downpour {

class Codec {
 public:
  virtual ~Codec() = default;

  // The name CreateCodec accepts for this codec, e.g. "fp16".
  virtual absl::string_view name() const = 0;

  // Bytes of the encoded form of `n` >= 0 values.
  virtual int64_t EncodedBytes(int64_t n) const = 0;

  // Writes EncodedBytes(n) bytes to `dst`. Preconditions: n >= 0; `src` holds
  // n floats and `dst` EncodedBytes(n) bytes; they do not overlap. `dst`
  // needs no alignment.
  virtual void Encode(const float* src, int64_t n, char* dst) const = 0;

  // Decodes `num_bytes` bytes from `src` into `n` floats at `dst`.
  // InvalidArgument (and nothing written) when num_bytes != EncodedBytes(n)
  // or n < 0. `src` needs no alignment. Every byte pattern decodes to
  // something (fp16/bf16 NaN patterns decode to NaN); callers that need
  // finite values check them, as the parameter store does.
  virtual absl::Status Decode(const char* src, int64_t num_bytes, float* dst,
                              int64_t n) const = 0;
};

// The names CreateCodec accepts, in a stable order: {"none", "fp16", "bf16"}.
const std::vector<std::string>& KnownCodecNames();

// InvalidArgument naming the known codecs when `name` is not one of them.
absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view name);

// Scalar conversions with exactly the codecs' rounding, for tests and for
// code that converts a single value.
uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);
uint16_t FloatToBf16Bits(float f);
float Bf16BitsToFloat(uint16_t b);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_CODEC_H_
