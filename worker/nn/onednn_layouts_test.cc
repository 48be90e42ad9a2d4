// Tests of the oneDNN backend's layout tracker on real oneDNN reorders:
// regions recorded, found, converted back to plain in place when read or
// partly overwritten, dropped when wholly overwritten or freed.
#include "worker/nn/onednn_layouts.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/nn/onednn_context.h"

namespace downpour {
namespace onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// 2 images of 16 channels, 2x3: nChw16c has no padding here, so the blocked
// tensor has the plain one's size but another order.
const memory::dims kDims = {2, 16, 2, 3};
constexpr int64_t kN = 2 * 16 * 2 * 3;

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

class LayoutTrackerTest : public ::testing::Test {
 protected:
  LayoutTrackerTest()
      : plain_(Plain(kDims, Tag::nchw)),
        blocked_(Plain(kDims, Tag::nChw16c)),
        layouts_(&ctx_) {}

  // Writes the plain values v into p in layout `blocked_`, as a primitive
  // would, and records it.
  void StoreBlocked(const std::vector<float>& v, float* p) {
    layouts_.Overwrite(p, kN);
    ctx_.Reorder(plain_, v.data(), blocked_, p);
    layouts_.Set(p, blocked_);
  }

  Context ctx_;
  const memory::desc plain_, blocked_;
  LayoutTracker layouts_;
};

TEST_F(LayoutTrackerTest, BlockedLayoutFitsThePlainBytes) {
  ASSERT_EQ(blocked_.get_size(), plain_.get_size());
  ASSERT_NE(blocked_, plain_);
  EXPECT_EQ(PlainOf(blocked_), plain_);
}

TEST_F(LayoutTrackerTest, SetFindAndLayoutOf) {
  EXPECT_TRUE(layouts_.empty());
  std::vector<float> buf(kN);
  EXPECT_EQ(layouts_.LayoutOf(buf.data(), plain_), plain_);
  const std::vector<float> v = Iota(kN, 1.f);
  StoreBlocked(v, buf.data());
  EXPECT_FALSE(layouts_.empty());
  EXPECT_NE(buf, v);  // Stored in another order.

  const memory::desc* found = layouts_.Find(buf.data(), blocked_.get_size());
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(*found, blocked_);
  EXPECT_EQ(layouts_.Find(buf.data(), blocked_.get_size() - 4), nullptr);
  EXPECT_EQ(layouts_.Find(buf.data() + 1, blocked_.get_size()), nullptr);
  EXPECT_EQ(layouts_.LayoutOf(buf.data(), plain_), blocked_);
  EXPECT_FALSE(layouts_.empty());  // Reading it as it is converts nothing.
}

TEST_F(LayoutTrackerTest, LayoutOfOtherDimsConvertsToPlain) {
  std::vector<float> buf(kN);
  const std::vector<float> v = Iota(kN, 1.f);
  StoreBlocked(v, buf.data());
  // The same bytes seen as another tensor: converted, then plain.
  const memory::desc flat = Plain({kN}, Tag::x);
  EXPECT_EQ(layouts_.LayoutOf(buf.data(), flat), flat);
  EXPECT_TRUE(layouts_.empty());
  EXPECT_EQ(buf, v);
}

TEST_F(LayoutTrackerTest, ReadPlainOfAPartConvertsTheWholeRegion) {
  std::vector<float> buf(kN + 10, -1.f);
  const std::vector<float> v = Iota(kN, 1.f);
  StoreBlocked(v, buf.data() + 5);
  layouts_.ReadPlain(buf.data() + 5 + 30, 7);
  EXPECT_TRUE(layouts_.empty());
  EXPECT_EQ(std::vector<float>(buf.begin() + 5, buf.begin() + 5 + kN), v);
  EXPECT_EQ(buf[4], -1.f);  // Outside the region: untouched.
  EXPECT_EQ(buf[5 + kN], -1.f);
}

TEST_F(LayoutTrackerTest, ReadPlainOutsideTheRegionConvertsNothing) {
  std::vector<float> buf(2 * kN);
  StoreBlocked(Iota(kN, 1.f), buf.data());
  const std::vector<float> stored(buf.begin(), buf.begin() + kN);
  layouts_.ReadPlain(buf.data() + kN, kN);
  layouts_.Overwrite(buf.data() + kN, kN);
  EXPECT_FALSE(layouts_.empty());
  EXPECT_EQ(std::vector<float>(buf.begin(), buf.begin() + kN), stored);
}

TEST_F(LayoutTrackerTest, WholeOverwriteDropsWithoutConverting) {
  std::vector<float> buf(kN);
  StoreBlocked(Iota(kN, 1.f), buf.data());
  const std::vector<float> stored = buf;
  layouts_.Overwrite(buf.data(), kN);
  EXPECT_TRUE(layouts_.empty());
  EXPECT_EQ(buf, stored);  // The caller writes it next; nothing reordered.
}

TEST_F(LayoutTrackerTest, PartialOverwriteKeepsTheRestReadable) {
  std::vector<float> buf(kN);
  const std::vector<float> v = Iota(kN, 1.f);
  StoreBlocked(v, buf.data());
  layouts_.Overwrite(buf.data() + 10, 5);
  EXPECT_TRUE(layouts_.empty());
  EXPECT_EQ(buf, v);  // Plain again, ready for the partial write.
}

TEST_F(LayoutTrackerTest, ForgetDropsRegionsStartingInside) {
  std::vector<float> a(kN), b(kN);
  StoreBlocked(Iota(kN, 1.f), a.data());
  StoreBlocked(Iota(kN, 1000.f), b.data());
  layouts_.Forget(a.data(), kN * sizeof(float));
  EXPECT_EQ(layouts_.Find(a.data(), blocked_.get_size()), nullptr);
  EXPECT_NE(layouts_.Find(b.data(), blocked_.get_size()), nullptr);
  layouts_.Forget(b.data(), 4);  // Only b's first float: b starts in it.
  EXPECT_TRUE(layouts_.empty());
}

TEST_F(LayoutTrackerTest, SetReplacesTheLayoutAtAnAddress) {
  std::vector<float> buf(kN);
  StoreBlocked(Iota(kN, 1.f), buf.data());
  const memory::desc blocked8 = Plain(kDims, Tag::nChw8c);
  layouts_.Set(buf.data(), blocked8);
  const memory::desc* found = layouts_.Find(buf.data(), blocked8.get_size());
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(*found, blocked8);
}

}  // namespace
}  // namespace onednn
}  // namespace downpour
