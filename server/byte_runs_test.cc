#include "server/byte_runs.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace downpour {
namespace {

std::vector<float> Ramp(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.5f * i - 3.0f;
  return v;
}

// The bytes of `v` cut into pieces of the given sizes (cycled).
std::vector<absl::string_view> Cut(const std::vector<float>& v,
                                   const std::vector<size_t>& sizes) {
  const absl::string_view all(reinterpret_cast<const char*>(v.data()),
                              v.size() * 4);
  std::vector<absl::string_view> out;
  for (size_t at = 0, k = 0; at < all.size(); ++k) {
    const size_t n = std::min(sizes[k % sizes.size()], all.size() - at);
    out.push_back(all.substr(at, n));
    at += n;
  }
  return out;
}

TEST(ByteRunsTest, RunsCoverEveryValueOnceInOrderWhateverTheCut) {
  const std::vector<float> v = Ramp(37);
  for (const std::vector<size_t>& sizes :
       {std::vector<size_t>{1}, {3, 5}, {4}, {7, 0, 9}, {1000}}) {
    std::vector<absl::string_view> pieces = Cut(v, sizes);
    ChunkBytes c;
    c.num_bytes = static_cast<int64_t>(v.size() * 4);
    c.pieces = pieces;
    std::vector<float> seen;
    ForEachRun(c, [&](const char* p, int64_t n, int64_t first) {
      ASSERT_EQ(first, static_cast<int64_t>(seen.size()));
      for (int64_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, p + 4 * i, 4);
        seen.push_back(x);
      }
    });
    EXPECT_EQ(seen, v) << "cut " << sizes[0];
    std::vector<float> copy(v.size(), -1.0f);
    CopyValues(c, copy.data());
    EXPECT_EQ(copy, v);
    EXPECT_EQ(PiecesBytes(c), c.num_bytes);
  }
}

TEST(ByteRunsTest, ContiguousBytesAreOneRun) {
  const std::vector<float> v = Ramp(10);
  ChunkBytes c{0, 0, v.data(), 40, {}};
  int runs = 0;
  ForEachRun(c, [&](const char*, int64_t n, int64_t first) {
    ++runs;
    EXPECT_EQ(n, 10);
    EXPECT_EQ(first, 0);
  });
  EXPECT_EQ(runs, 1);
  std::vector<float> copy(10);
  CopyValues(c, copy.data());
  EXPECT_EQ(copy, v);
}

TEST(ByteRunsTest, AllFiniteFindsNanAndInfAnywhereEvenStraddling) {
  std::vector<float> v = Ramp(33);
  ChunkBytes whole{0, 0, v.data(), 33 * 4, {}};
  EXPECT_TRUE(AllFinite(whole));
  EXPECT_TRUE(AllFinite(reinterpret_cast<const char*>(v.data()) + 0, 33));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (int at : {0, 16, 32}) {
      std::vector<float> w = v;
      w[at] = bad;
      ChunkBytes c{0, 0, w.data(), 33 * 4, {}};
      EXPECT_FALSE(AllFinite(c)) << at;
      std::vector<absl::string_view> pieces = Cut(w, {5});
      c.data = nullptr;
      c.pieces = pieces;
      EXPECT_FALSE(AllFinite(c)) << at;
    }
  }
  // Large finite values and denormals are fine.
  v[3] = std::numeric_limits<float>::max();
  v[4] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(AllFinite(whole));
}

TEST(ByteRunsTest, PiecesBytesIsTheirTotal) {
  const std::vector<float> v = Ramp(8);
  std::vector<absl::string_view> pieces = Cut(v, {3});
  pieces.pop_back();
  ChunkBytes c;
  c.num_bytes = 32;
  c.pieces = pieces;
  EXPECT_EQ(PiecesBytes(c), 30);
}

}  // namespace
}  // namespace downpour
