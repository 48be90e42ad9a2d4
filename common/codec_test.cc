#include "common/codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kHalfMax = 65504.0f;
constexpr float kHalfMinNormal = 6.103515625e-05f;      // 2^-14
constexpr float kHalfMinSubnormal = 5.9604644775390625e-08f;  // 2^-24

std::unique_ptr<Codec> MustCreate(const std::string& name) {
  auto codec = CreateCodec(name);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return std::move(codec).value();
}

// Encodes and decodes `in` with `codec`.
std::vector<float> RoundTrip(const Codec& codec, const std::vector<float>& in) {
  const int64_t n = static_cast<int64_t>(in.size());
  std::string wire(codec.EncodedBytes(n), '\x5a');
  codec.Encode(in.data(), n, wire.data());
  std::vector<float> out(n, -1.0f);
  const absl::Status s = codec.Decode(wire.data(), wire.size(), out.data(), n);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random values whose magnitudes span [2^lo_exp, 2^hi_exp), both signs.
std::vector<float> RandomAcrossMagnitudes(int n, int lo_exp, int hi_exp,
                                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> exponent(lo_exp, hi_exp);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<float>(std::exp2(exponent(rng)));
    if (negative(rng)) x = -x;
  }
  return v;
}

TEST(CodecTest, FactoryKnowsNamesAndSizes) {
  EXPECT_EQ(KnownCodecNames(), (std::vector<std::string>{"none", "fp16", "bf16"}));
  for (const std::string& name : KnownCodecNames()) {
    auto codec = MustCreate(name);
    EXPECT_EQ(codec->name(), name);
    EXPECT_EQ(codec->EncodedBytes(0), 0);
    EXPECT_EQ(codec->EncodedBytes(7), name == "none" ? 28 : 14);
  }
}

TEST(CodecTest, UnknownNameListsKnownCodecs) {
  for (const char* bad : {"fp8", "", "FP16", "none "}) {
    auto codec = CreateCodec(bad);
    ASSERT_FALSE(codec.ok()) << bad;
    EXPECT_EQ(codec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(codec.status().message(),
                HasSubstr(absl::StrCat("'", bad, "'")));
    EXPECT_THAT(codec.status().message(), HasSubstr("none, fp16, bf16"));
  }
}

TEST(CodecTest, NoneIsExactBitForBit) {
  auto codec = MustCreate("none");
  std::vector<float> in = RandomAcrossMagnitudes(1001, -140, 127, 1);
  in.insert(in.end(), {0.0f, -0.0f, kInf, -kInf, FromBits(0x7fc12345u),
                       FromBits(0x7f812345u), FromBits(1), 3.4028235e38f});
  const std::vector<float> out = RoundTrip(*codec, in);
  ASSERT_EQ(out.size(), in.size());
  EXPECT_EQ(std::memcmp(out.data(), in.data(), in.size() * 4), 0);
}

TEST(CodecTest, Fp16RelativeErrorWithinHalfUlpInNormalRange) {
  auto codec = MustCreate("fp16");
  // [2^-14, 2^15] plus values up to the largest half.
  std::vector<float> in = RandomAcrossMagnitudes(20000, -14, 15, 2);
  for (float x : {kHalfMinNormal, kHalfMax, 1.0f, -1.0f, 65519.0f, 0.1f})
    in.push_back(x);
  const std::vector<float> out = RoundTrip(*codec, in);
  for (size_t i = 0; i < in.size(); ++i) {
    const double rel = std::fabs(static_cast<double>(out[i]) - in[i]) /
                       std::fabs(static_cast<double>(in[i]));
    ASSERT_LE(rel, std::ldexp(1.0, -11)) << "x = " << in[i] << " -> " << out[i];
    ASSERT_EQ(std::signbit(out[i]), std::signbit(in[i]));
  }
}

TEST(CodecTest, Fp16SubnormalRangeAbsoluteErrorWithinHalfStep) {
  auto codec = MustCreate("fp16");
  const std::vector<float> in = RandomAcrossMagnitudes(5000, -30, -14, 3);
  const std::vector<float> out = RoundTrip(*codec, in);
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_LE(std::fabs(static_cast<double>(out[i]) - in[i]),
              std::ldexp(1.0, -25))
        << "x = " << in[i] << " -> " << out[i];
  }
}

TEST(CodecTest, Bf16RelativeErrorWithinHalfUlp) {
  auto codec = MustCreate("bf16");
  const std::vector<float> in = RandomAcrossMagnitudes(20000, -126, 127, 4);
  const std::vector<float> out = RoundTrip(*codec, in);
  for (size_t i = 0; i < in.size(); ++i) {
    const double rel = std::fabs(static_cast<double>(out[i]) - in[i]) /
                       std::fabs(static_cast<double>(in[i]));
    ASSERT_LE(rel, std::ldexp(1.0, -8)) << "x = " << in[i] << " -> " << out[i];
    // The result is the input with its low 16 bits rounded away.
    ASSERT_EQ(Bits(out[i]) & 0xffffu, 0u);
  }
}

TEST(CodecTest, Fp16Specials) {
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(kInf), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(-kInf), 0xfc00);
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(kHalfMax), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(kHalfMinNormal), 0x0400);
  EXPECT_EQ(FloatToHalfBits(kHalfMinSubnormal), 0x0001);
  EXPECT_EQ(FloatToHalfBits(-kHalfMinSubnormal), 0x8001);
  // Half of the smallest subnormal is a tie: to even, i.e. zero (sign kept).
  EXPECT_EQ(FloatToHalfBits(kHalfMinSubnormal / 2), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-kHalfMinSubnormal / 2), 0x8000);
  EXPECT_EQ(FloatToHalfBits(kHalfMinSubnormal * 0.75f), 0x0001);
  EXPECT_EQ(FloatToHalfBits(kHalfMinSubnormal * 1.5f), 0x0002);  // Tie to even.
  EXPECT_EQ(FloatToHalfBits(FromBits(1)), 0x0000);  // Float subnormal.
  // Beyond the half range: saturate, never Inf.
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(1e6f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(-3.4028235e38f), 0xfbff);
  // NaN: stays NaN, quiet, sign and top payload bits kept.
  EXPECT_EQ(FloatToHalfBits(FromBits(0x7fc00000u)), 0x7e00);
  EXPECT_EQ(FloatToHalfBits(FromBits(0xffc00000u)), 0xfe00);
  EXPECT_EQ(FloatToHalfBits(FromBits(0x7f800001u)), 0x7e00);  // sNaN, low payload.
  EXPECT_EQ(FloatToHalfBits(FromBits(0x7fa02000u)), 0x7f01);

  EXPECT_EQ(HalfBitsToFloat(0x7bff), kHalfMax);
  EXPECT_EQ(HalfBitsToFloat(0x0001), kHalfMinSubnormal);
  EXPECT_EQ(HalfBitsToFloat(0x03ff), kHalfMinNormal - kHalfMinSubnormal);
  EXPECT_EQ(HalfBitsToFloat(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7c01)));
  EXPECT_TRUE(std::signbit(HalfBitsToFloat(0x8000)));
  EXPECT_EQ(HalfBitsToFloat(0x8000), 0.0f);
}

TEST(CodecTest, Fp16EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // Quiet NaNs keep their bits; signalling ones come back quiet.
      ASSERT_EQ(FloatToHalfBits(f), h | 0x0200) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToHalfBits(f), h) << std::hex << h;
    }
  }
}

// For every pair of neighbouring finite positive halves, the float midpoint
// rounds to the even one and anything off the midpoint to the nearer one.
TEST(CodecTest, Fp16RoundsToNearestEvenEverywhere) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = HalfBitsToFloat(h);
    const float hi = HalfBitsToFloat(h + 1);
    const float mid = lo + (hi - lo) / 2;  // Exact in float32.
    const uint16_t even = (h & 1) == 0 ? h : h + 1;
    ASSERT_EQ(FloatToHalfBits(mid), even) << std::hex << h;
    ASSERT_EQ(FloatToHalfBits(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(FloatToHalfBits(std::nextafter(mid, kInf)), h + 1) << std::hex << h;
    ASSERT_EQ(FloatToHalfBits(-mid), even | 0x8000) << std::hex << h;
  }
}

TEST(CodecTest, Bf16Specials) {
  EXPECT_EQ(FloatToBf16Bits(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16Bits(kInf), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(-kInf), 0xff80);
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  // Ties to even on the dropped 16 bits.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808000u)), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f807fffu)), 0x3f80);
  // Float subnormals keep their top bits.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(FloatToBf16Bits(FromBits(1)), 0x0000);
  // Largest bf16 and the floats above it: saturate, never Inf.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f7f0000u)), 0x7f7f);
  EXPECT_EQ(FloatToBf16Bits(3.4028235e38f), 0x7f7f);
  EXPECT_EQ(FloatToBf16Bits(-3.4028235e38f), 0xff7f);
  // NaN preserved (and quiet), even with a payload only in the low bits.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7fc00000u)), 0x7fc0);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xffc00000u)), 0xffc0);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7fffffffu)), 0x7fff);
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(0x7f81)));
  EXPECT_EQ(Bits(Bf16BitsToFloat(0xbf80)), 0xbf800000u);
}

TEST(CodecTest, Bf16EveryValueRoundTripsExactly) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Bf16BitsToFloat(static_cast<uint16_t>(b));
    const bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    ASSERT_EQ(FloatToBf16Bits(f), is_nan ? (b | 0x40) : b) << std::hex << b;
  }
}

TEST(CodecTest, SpecialsSurviveTheBulkPath) {
  const std::vector<float> in = {0.0f,  -0.0f, kInf, -kInf,
                                 std::numeric_limits<float>::quiet_NaN(),
                                 kHalfMinSubnormal, 1e-30f, 3.4028235e38f,
                                 -65536.0f};
  const std::vector<float> fp16 = RoundTrip(*MustCreate("fp16"), in);
  EXPECT_EQ(Bits(fp16[0]), 0x00000000u);
  EXPECT_EQ(Bits(fp16[1]), 0x80000000u);
  EXPECT_EQ(fp16[2], kInf);
  EXPECT_EQ(fp16[3], -kInf);
  EXPECT_TRUE(std::isnan(fp16[4]));
  EXPECT_EQ(fp16[5], kHalfMinSubnormal);
  EXPECT_EQ(fp16[6], 0.0f);
  EXPECT_EQ(fp16[7], kHalfMax);
  EXPECT_EQ(fp16[8], -kHalfMax);

  const std::vector<float> bf16 = RoundTrip(*MustCreate("bf16"), in);
  EXPECT_EQ(Bits(bf16[1]), 0x80000000u);
  EXPECT_EQ(bf16[2], kInf);
  EXPECT_EQ(bf16[3], -kInf);
  EXPECT_TRUE(std::isnan(bf16[4]));
  EXPECT_TRUE(std::isfinite(bf16[7]));
  EXPECT_EQ(bf16[8], -65536.0f);
}

// Bulk results equal the scalar functions for every size, including the odd
// tails a vectorized loop handles separately, and at unaligned offsets.
TEST(CodecTest, OddSizesAndUnalignedBuffers) {
  const std::vector<float> pool = RandomAcrossMagnitudes(64, -20, 20, 5);
  for (const std::string& name : KnownCodecNames()) {
    auto codec = MustCreate(name);
    for (int n : {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 33}) {
      const std::vector<float> in(pool.begin(), pool.begin() + n);
      std::string wire(codec->EncodedBytes(n) + 1, '\0');
      char* dst = wire.data() + 1;  // Deliberately misaligned.
      codec->Encode(in.data(), n, dst);
      std::vector<float> out(n + 1, 123.0f);  // One guard element.
      ASSERT_TRUE(codec->Decode(dst, codec->EncodedBytes(n), out.data(), n).ok());
      EXPECT_EQ(out[n], 123.0f) << name << " wrote past n = " << n;
      for (int i = 0; i < n; ++i) {
        const float expected = name == "none" ? in[i]
                               : name == "fp16"
                                   ? HalfBitsToFloat(FloatToHalfBits(in[i]))
                                   : Bf16BitsToFloat(FloatToBf16Bits(in[i]));
        ASSERT_EQ(out[i], expected) << name << " n = " << n << " i = " << i;
      }
    }
  }
}

TEST(CodecTest, DecodeRejectsWrongSizeAndWritesNothing) {
  for (const std::string& name : KnownCodecNames()) {
    auto codec = MustCreate(name);
    const std::string wire(codec->EncodedBytes(7), '\0');
    std::vector<float> out(8, 5.0f);
    for (int64_t bytes : {codec->EncodedBytes(7) - 1, codec->EncodedBytes(7) + 1,
                          codec->EncodedBytes(8), int64_t{0}}) {
      const absl::Status s = codec->Decode(wire.data(), bytes, out.data(), 7);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << bytes;
      EXPECT_THAT(s.message(), HasSubstr(name));
      EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("got ", bytes)));
    }
    EXPECT_EQ(codec->Decode(wire.data(), 0, out.data(), -1).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(out, std::vector<float>(8, 5.0f)) << name;
    EXPECT_TRUE(codec->Decode(nullptr, 0, nullptr, 0).ok()) << name;
  }
}

}  // namespace
}  // namespace downpour
