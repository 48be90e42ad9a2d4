#include "common/codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace downpour {
namespace {

static_assert(sizeof(float) == 4, "float32 codecs need a 4-byte float");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "common/codec.cc writes the wire format in host order; little-endian only"
#endif

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// float32 -> binary16 bits. Every case is computed and the answer picked with
// selects, so a loop over it has no branches and vectorizes (after Fabian
// Giesen's float_to_half_fast3_rtne, plus saturation).
inline uint16_t EncodeHalf(uint32_t u) {
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 16) & 0x8000u;
  // |f| >= 2^-14: rebias the exponent (127 -> 15) and round the 13 dropped
  // mantissa bits to nearest, ties to even. A carry out of the mantissa
  // correctly bumps the exponent.
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // |f| < 2^-14: adding 0.5 (whose ulp is 2^-24, the half subnormal step)
  // makes the FPU round to nearest even; the low bits are then the half
  // subnormal (or 0x400, the smallest normal, when it rounds up).
  const uint32_t sub = FloatBits(BitsFloat(a) + 0.5f) - (126u << 23);
  uint32_t h = a < (113u << 23) ? sub : normal;
  h = h > 0x7bffu ? 0x7bffu : h;  // Finite overflow saturates to 65504.
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // Quiet, top payload.
  h = a > 0x7f800000u ? nan : h;
  h = a == 0x7f800000u ? 0x7c00u : h;
  return static_cast<uint16_t>(h | sign);
}

// binary16 bits -> float32 bits; exact.
inline uint32_t DecodeHalf(uint16_t bits) {
  const uint32_t h = bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t em = (h & 0x7fffu) << 13;  // Exponent and mantissa, moved.
  const uint32_t exp = em & (0x1fu << 23);
  const uint32_t normal = em + (112u << 23);    // Rebias 15 -> 127.
  const uint32_t inf_nan = em + (224u << 23);   // Exponent 31 -> 255.
  // Zero and subnormals: m * 2^-24 computed as (2^-14 * (1 + m/1024)) - 2^-14.
  const uint32_t sub =
      FloatBits(BitsFloat(em + (113u << 23)) - BitsFloat(113u << 23));
  const uint32_t r = exp == (0x1fu << 23) ? inf_nan : (exp == 0 ? sub : normal);
  return r | sign;
}

// float32 -> bfloat16 bits: round the low 16 bits to nearest even.
inline uint16_t EncodeBf16(uint32_t u) {
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t r = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  r = r > 0x7f7fu ? 0x7f7fu : r;  // Finite overflow saturates to max bf16.
  r = a > 0x7f800000u ? ((a >> 16) | 0x40u) : r;  // NaN stays NaN, quiet.
  r = a == 0x7f800000u ? 0x7f80u : r;
  return static_cast<uint16_t>(r | sign);
}

absl::Status CheckDecodeSize(absl::string_view codec, int64_t num_bytes,
                             int64_t n, int64_t bytes_per_value) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(codec, " decode: negative element count ", n));
  }
  if (num_bytes != n * bytes_per_value) {
    return absl::InvalidArgumentError(absl::StrCat(
        codec, " decode: ", n, " values need ", n * bytes_per_value,
        " bytes (", bytes_per_value, " per value), got ", num_bytes));
  }
  return absl::OkStatus();
}

class NoneCodec final : public Codec {
 public:
  absl::string_view name() const override { return "none"; }
  int64_t EncodedBytes(int64_t n) const override { return n * 4; }
  void Encode(const float* src, int64_t n, char* dst) const override {
    if (n > 0) std::memcpy(dst, src, n * 4);
  }
  absl::Status Decode(const char* src, int64_t num_bytes, float* dst,
                      int64_t n) const override {
    if (absl::Status s = CheckDecodeSize(name(), num_bytes, n, 4); !s.ok()) {
      return s;
    }
    if (n > 0) std::memcpy(dst, src, n * 4);
    return absl::OkStatus();
  }
};

// Both 16-bit formats share the loops; only the scalar rule differs.
template <uint16_t (*kEncode)(uint32_t), uint32_t (*kDecode)(uint16_t)>
class SixteenBitCodec final : public Codec {
 public:
  explicit SixteenBitCodec(const char* name) : name_(name) {}
  absl::string_view name() const override { return name_; }
  int64_t EncodedBytes(int64_t n) const override { return n * 2; }
  void Encode(const float* src, int64_t n, char* dst) const override {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = kEncode(FloatBits(src[i]));
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
  absl::Status Decode(const char* src, int64_t num_bytes, float* dst,
                      int64_t n) const override {
    if (absl::Status s = CheckDecodeSize(name_, num_bytes, n, 2); !s.ok()) {
      return s;
    }
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = BitsFloat(kDecode(h));
    }
    return absl::OkStatus();
  }

 private:
  const char* const name_;
};

inline uint32_t DecodeBf16(uint16_t b) { return static_cast<uint32_t>(b) << 16; }

using HalfCodec = SixteenBitCodec<EncodeHalf, DecodeHalf>;
using Bf16Codec = SixteenBitCodec<EncodeBf16, DecodeBf16>;

}  // namespace

const std::vector<std::string>& KnownCodecNames() {
  static const auto* const kNames =
      new std::vector<std::string>{"none", "fp16", "bf16"};
  return *kNames;
}

absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view name) {
  if (name == "none") return std::unique_ptr<Codec>(new NoneCodec());
  if (name == "fp16") return std::unique_ptr<Codec>(new HalfCodec("fp16"));
  if (name == "bf16") return std::unique_ptr<Codec>(new Bf16Codec("bf16"));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec '", name, "'; known codecs: ",
                   absl::StrJoin(KnownCodecNames(), ", ")));
}

uint16_t FloatToHalfBits(float f) { return EncodeHalf(FloatBits(f)); }
float HalfBitsToFloat(uint16_t h) { return BitsFloat(DecodeHalf(h)); }
uint16_t FloatToBf16Bits(float f) { return EncodeBf16(FloatBits(f)); }
float Bf16BitsToFloat(uint16_t b) { return BitsFloat(DecodeBf16(b)); }

}  // namespace downpour
