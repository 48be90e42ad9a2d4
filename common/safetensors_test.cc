// File: common/safetensors_test.cc
//
// Round trip, byte determinism, exact byte layout of a tiny file, and the
// errors for bad arguments and malformed files.
#include "common/safetensors.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;

// A file with the given header text (padded) and `data_bytes` zero bytes.
std::string RawFile(std::string header, size_t data_bytes) {
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  out += header;
  out.append(data_bytes, '\0');
  return out;
}

struct Model {
  std::vector<TensorSpec> tensors;
  std::vector<float> flat;
};

Model MakeModel() {
  Model m;
  m.tensors = {{"fc1.w", {3, 4}}, {"fc1.b", {4}}, {"scalar", {}},
               {"empty", {0, 5}}, {"w \"quoted\"\\\n\xc3\xa9", {2}}};
  for (int i = 0; i < 12 + 4 + 1 + 0 + 2; ++i) {
    m.flat.push_back(static_cast<float>(i) * 0.37f - 2.0f);
  }
  m.flat[1] = -0.0f;
  m.flat[2] = std::numeric_limits<float>::infinity();
  m.flat[3] = std::numeric_limits<float>::denorm_min();
  return m;
}

TEST(SafetensorsTest, RoundTrip) {
  const Model m = MakeModel();
  const std::map<std::string, std::string> meta = {
      {"step", "100"}, {"format", "pt"}, {"note", "tab\there \"q\" \x01"}};
  const std::string path = TestTmpPath("round.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, m.tensors, m.flat, meta).ok());
  EXPECT_TRUE(ReadBytes(path + ".tmp").empty());  // Renamed away.

  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors, m.tensors);
  EXPECT_EQ(f->metadata, meta);
  ASSERT_EQ(f->flat.size(), m.flat.size());
  for (size_t i = 0; i < m.flat.size(); ++i) {
    EXPECT_EQ(std::memcmp(&f->flat[i], &m.flat[i], 4), 0) << i;  // Bit-exact.
  }
  EXPECT_TRUE(std::signbit(f->flat[1]));
}

TEST(SafetensorsTest, ExactLayoutAndAlignment) {
  const std::string path = TestTmpPath("tiny.safetensors");
  const float data[] = {1.0f, -2.0f};
  ASSERT_TRUE(
      WriteSafetensors(path, {{"a", {2}}}, data, {{"k", "v"}}).ok());
  const std::string header =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  std::string want = RawFile(header, 0);
  want += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(ReadBytes(path), want);
  EXPECT_EQ((want.size() - 8) % 8, 0u);
}

TEST(SafetensorsTest, TensorsReturnedInDataOffsetOrder) {
  // Header order differs from data order; the reader sorts by offset.
  const std::string header =
      "{ \"b\" : {\"data_offsets\":[4,12],\"dtype\":\"F32\",\"shape\":[2]},\n"
      "  \"a\" : {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "  \"__metadata__\": {\"x\\u00e9\\ud83d\\ude00\": \"\\/y\"} }";
  std::string bytes = RawFile(header, 0);
  const float vals[] = {1.5f, 2.5f, 3.5f};
  bytes.append(reinterpret_cast<const char*>(vals), sizeof(vals));  // x86: LE.
  const std::string path = TestTmpPath("order.safetensors");
  WriteBytes(path, bytes);
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[0].name, "a");
  EXPECT_EQ(f->tensors[1].name, "b");
  EXPECT_EQ(f->flat, (std::vector<float>{1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(f->metadata.at("x\xc3\xa9\xf0\x9f\x98\x80"), "/y");
}

TEST(SafetensorsTest, WritesAreByteIdentical) {
  const Model m = MakeModel();
  const std::map<std::string, std::string> meta = {{"z", "1"}, {"a", "2"}};
  const std::string p1 = TestTmpPath("det1.safetensors");
  const std::string p2 = TestTmpPath("det2.safetensors");
  ASSERT_TRUE(WriteSafetensors(p1, m.tensors, m.flat, meta).ok());
  ASSERT_TRUE(WriteSafetensors(p2, m.tensors, m.flat, meta).ok());
  const std::string a = ReadBytes(p1);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, ReadBytes(p2));
  // Overwriting an existing file works and gives the same bytes.
  ASSERT_TRUE(WriteSafetensors(p1, m.tensors, m.flat, meta).ok());
  EXPECT_EQ(a, ReadBytes(p1));
}

TEST(SafetensorsTest, EmptyModel) {
  const std::string path = TestTmpPath("empty.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}, {}, {}).ok());
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->tensors.empty());
  EXPECT_TRUE(f->flat.empty());
  EXPECT_TRUE(f->metadata.empty());
}

TEST(SafetensorsTest, SizeMismatch) {
  const std::string path = TestTmpPath("mismatch.safetensors");
  const std::vector<float> flat(5, 1.0f);
  absl::Status s = WriteSafetensors(path, {{"a", {2, 3}}}, flat, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path));
  s = WriteSafetensors(path, {{"a", {2}}}, flat, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("2 elements but 5"));
  EXPECT_TRUE(ReadBytes(path).empty());  // Nothing written.
}

TEST(SafetensorsTest, BadTensorNames) {
  const std::string path = TestTmpPath("names.safetensors");
  const std::vector<float> flat(2, 1.0f);
  EXPECT_EQ(WriteSafetensors(path, {{"a", {1}}, {"a", {1}}}, flat, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(path, {{"", {2}}}, flat, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(path, {{"__metadata__", {2}}}, flat, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(path, {{"a", {-1, -2}}}, flat, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, UnwritablePath) {
  const std::string path = TestTmpPath("no/such/dir/x.safetensors");
  absl::Status s = WriteSafetensors(path, {}, {}, {});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
}

TEST(SafetensorsTest, MissingFile) {
  const std::string path = TestTmpPath("missing.safetensors");
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr(path));
}

void ExpectCorrupt(const std::string& name, const std::string& bytes,
                   const std::string& what) {
  const std::string path = TestTmpPath(name);
  WriteBytes(path, bytes);
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << name;
  EXPECT_THAT(f.status().message(), HasSubstr(path)) << name;
  EXPECT_THAT(f.status().message(), HasSubstr(what)) << name;
}

TEST(SafetensorsTest, CorruptFiles) {
  const std::string ok_entry =
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  ExpectCorrupt("short.st", "abc", "too short");
  ExpectCorrupt("hugelen.st", std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8),
                "header length");
  ExpectCorrupt("notjson.st", RawFile("not json", 0), "expected '{'");
  ExpectCorrupt("unterminated.st", RawFile("{\"a", 0), "unterminated string");
  ExpectCorrupt("trailing.st", RawFile("{}x", 0), "after the header");
  ExpectCorrupt("badkey.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[0,8],\"extra\":[1]}}",
                        8),
                "extra");
  ExpectCorrupt("dup.st", RawFile("{" + ok_entry + "," + ok_entry + "}", 8),
                "duplicate tensor");
  ExpectCorrupt("negative.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],"
                        "\"data_offsets\":[0,8]}}",
                        8),
                "non-negative integer");
  ExpectCorrupt("span.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],"
                        "\"data_offsets\":[0,8]}}",
                        8),
                "data_offsets");
  ExpectCorrupt("gap.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[4,12]}}",
                        12),
                "should start at 0");
  ExpectCorrupt("leftover.st", RawFile("{" + ok_entry + "}", 12),
                "data section has 12");
  ExpectCorrupt("cut.st", RawFile("{" + ok_entry + "}", 4),
                "data section has 4");
  ExpectCorrupt("missingfield.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8),
                "needs dtype, shape and data_offsets");

  ExpectCorrupt("dupmeta.st",
                RawFile("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0),
                "duplicate metadata key \"k\"");
  ExpectCorrupt("dupmetaobj.st",
                RawFile("{\"__metadata__\":{},\"__metadata__\":{}}", 0),
                "duplicate \"__metadata__\"");
  ExpectCorrupt("dupfield.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\","
                        "\"shape\":[2],\"data_offsets\":[0,8]}}",
                        8),
                "repeated key \"dtype\" in tensor \"a\"");
  ExpectCorrupt("metanum.st", RawFile("{\"__metadata__\":{\"k\":1}}", 0),
                "metadata \"k\" must be a string");
  ExpectCorrupt("float.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],"
                        "\"data_offsets\":[0,8]}}",
                        8),
                "non-negative integer");
  ExpectCorrupt("oneoffset.st",
                RawFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[8]}}",
                        8),
                "two integers");

  // A real file with a flipped header byte.
  const std::string path = TestTmpPath("flip.safetensors");
  const float data[] = {1.0f, 2.0f};
  ASSERT_TRUE(WriteSafetensors(path, {{"a", {2}}}, data, {}).ok());
  std::string bytes = ReadBytes(path);
  bytes[8] = '[';
  ExpectCorrupt("flip.safetensors", bytes, "bad safetensors header");
}

TEST(SafetensorsTest, OtherDtypeIsUnimplemented) {
  const std::string path = TestTmpPath("f16.safetensors");
  WriteBytes(path, RawFile("{\"h\":{\"dtype\":\"F16\",\"shape\":[2],"
                           "\"data_offsets\":[0,4]}}",
                           4));
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(f.status().message(), HasSubstr("F16"));
  EXPECT_THAT(f.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace downpour
