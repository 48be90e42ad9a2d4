// The backend conformance suite, ops part: every Backend operation of every
// implementation (OpenBLAS, oneDNN, CUDA) against naive host references,
// then against the reference backend on more shapes (see
// backend_conformance.h for the criteria). The layers and the model are in
// backend_conformance_layers_test.cc. CUDA cases skip without a usable GPU.
#include "worker/nn/backend_conformance.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/host_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/test_backends.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- Memory -----------------------------------------------------------------

TEST_P(BackendTest, AllocateIsZeroedAlignedAndNamed) {
  EXPECT_THAT(be_->Name(), StartsWith(GetParam().name_prefix));
  for (int64_t n : {0, 1, 7, 1000, 12345, 123457}) {
    absl::StatusOr<float*> p = be_->Allocate(n);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_NE(*p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 64, 0u);
    if (GetParam().host_memory) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ((*p)[i], 0.f);
    }
    std::vector<float> host(n, 1.f);
    ASSERT_TRUE(be_->CopyToHost(*p, host.data(), n).ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 0.f) << n << " " << i;
    be_->Free(*p);
  }
  EXPECT_EQ(be_->Allocate(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be_->CopyToHost(nullptr, nullptr, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendTest, CopiesRoundTrip) {
  const std::vector<float> v = RandomVec(4099, 1);
  DeviceBuffer d = Upload(v);
  ExpectExact(Download(d), v, "pageable round trip");
  // Through the backend's staging memory (pinned on a GPU).
  HostAllocator* staging = be_->staging_allocator();
  ASSERT_NE(staging, nullptr);
  absl::StatusOr<HostArray<float>> src_or =
      HostArray<float>::Create(staging, v.size());
  absl::StatusOr<HostArray<float>> dst_or =
      HostArray<float>::Create(staging, v.size());
  ASSERT_TRUE(src_or.ok()) << src_or.status();
  ASSERT_TRUE(dst_or.ok()) << dst_or.status();
  std::copy(v.begin(), v.end(), src_or->begin());
  DeviceBuffer d2 = Zeros(v.size());
  ASSERT_TRUE(be_->CopyToDevice(src_or->data(), d2.data(), v.size()).ok());
  ASSERT_TRUE(be_->Synchronize().ok());
  ASSERT_TRUE(be_->CopyToHost(d2.data(), dst_or->data(), v.size()).ok());
  ExpectExact(std::vector<float>(dst_or->begin(), dst_or->end()), v,
              "staging round trip");
  ASSERT_TRUE(be_->CopyToDevice(v.data(), d2.data(), 0).ok());
  // Copy between backend buffers.
  DeviceBuffer d3 = Zeros(v.size());
  ASSERT_TRUE(be_->Copy(d.data(), d3.data(), v.size()).ok());
  ExpectExact(Download(d3), v, "copy");
}

// A backend of host memory takes values the host wrote into its buffer
// once told by a CopyToDevice onto itself, even where its last op left a
// layout of its own (the oneDNN backend's blocked convolution output): the
// way a sync worker's pulls land in the model (worker/exchange.cc).
TEST_P(BackendTest, HostMemoryWrittenInPlaceIsTaken) {
  if (!be_->HostMemory()) GTEST_SKIP() << be_->Name() << ": device memory";
  const ConvDesc d = ToConvDesc(ConvCase{2, 3, 10, 10, 32, 3, 3, 1, 1});
  const auto [xs, ws, ys] = ConvSizes(d);
  DeviceBuffer x = Upload(RandomVec(xs, 21)), w = Upload(RandomVec(ws, 22));
  DeviceBuffer y = Zeros(ys);
  ASSERT_TRUE(be_->Conv2dForward(d, x.data(), w.data(), nullptr, y.data()).ok());
  const std::vector<float> v = RandomVec(ys, 23);
  std::copy(v.begin(), v.end(), y.data());
  ASSERT_TRUE(be_->CopyToDevice(y.data(), y.data(), ys).ok());
  ExpectExact(Download(y), v, "written in place");
}

TEST_P(BackendTest, DeviceBufferMoves) {
  auto a = DeviceBuffer::Create(be_.get(), 10);
  ASSERT_TRUE(a.ok());
  float* p = a->data();
  DeviceBuffer b = std::move(*a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(a->data(), nullptr);
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
}

// ---- Against naive references -----------------------------------------------

TEST_P(BackendTest, FillAxpyCopy) {
  std::vector<float> x = RandomVec(37, 1), y = RandomVec(37, 2);
  DeviceBuffer dx = Upload(x), dy = Upload(y);
  ASSERT_TRUE(be_->Axpy(37, -0.5f, dx.data(), dy.data()).ok());
  std::vector<float> want(37);
  for (int i = 0; i < 37; ++i) want[i] = y[i] - 0.5f * x[i];
  ExpectNear(Download(dy), want, 1e-6f, "axpy");
  ASSERT_TRUE(be_->Fill(dy.data(), 37, 2.5f).ok());
  ExpectNear(Download(dy), std::vector<float>(37, 2.5f), 0, "fill");
  ASSERT_TRUE(be_->Synchronize().ok());
}

TEST_P(BackendTest, GemmAllTransposes) {
  // The second shape is large enough to be split over the workers.
  for (auto [m, n, k] : {std::tuple<int, int, int>{5, 7, 3}, {67, 129, 150}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        std::vector<float> a = RandomVec(m * k, 3), b = RandomVec(k * n, 4),
                           c = RandomVec(m * n, 5);
        std::vector<float> want(m * n);
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int l = 0; l < k; ++l) {
              const float av = ta ? a[l * m + i] : a[i * k + l];
              const float bv = tb ? b[j * k + l] : b[l * n + j];
              s += double{av} * bv;
            }
            want[i * n + j] = static_cast<float>(1.5 * s + 0.25 * c[i * n + j]);
          }
        }
        DeviceBuffer da = Upload(a), db = Upload(b), dc = Upload(c);
        ASSERT_TRUE(be_->Gemm(ta, tb, m, n, k, 1.5f, da.data(), db.data(),
                              0.25f, dc.data())
                        .ok());
        ExpectNear(Download(dc), want, 1e-5f * std::sqrt(float(k)), "gemm");
      }
    }
  }
}

TEST_P(BackendTest, RowBiasAndColumnSum) {
  const int rows = 4, cols = 9;
  std::vector<float> y = RandomVec(rows * cols, 6), bias = RandomVec(cols, 7);
  DeviceBuffer dy = Upload(y), dbias = Upload(bias);
  ASSERT_TRUE(be_->AddRowBias(rows, cols, dbias.data(), dy.data()).ok());
  std::vector<float> want = y;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want[r * cols + c] += bias[c];
  ExpectNear(Download(dy), want, 1e-6f, "bias");

  DeviceBuffer sums = Upload(RandomVec(cols, 8));  // Must be overwritten.
  ASSERT_TRUE(be_->ColumnSum(rows, cols, dy.data(), sums.data()).ok());
  std::vector<float> want_sums(cols, 0.f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want_sums[c] += want[r * cols + c];
  ExpectNear(Download(sums), want_sums, 1e-5f, "colsum");
}

// ---- Convolution reference --------------------------------------------------

float XAt(const ConvDesc& d, const std::vector<float>& x, int n, int c, int h,
          int w) {
  if (h < 0 || h >= d.in_h || w < 0 || w >= d.in_w) return 0.f;
  return x[((n * d.in_channels + c) * d.in_h + h) * d.in_w + w];
}

std::vector<float> RefConvForward(const ConvDesc& d,
                                  const std::vector<float>& x,
                                  const std::vector<float>& w,
                                  const std::vector<float>* b) {
  const int oh_n = d.OutH(), ow_n = d.OutW();
  std::vector<float> y(d.batch * d.out_channels * oh_n * ow_n);
  for (int n = 0; n < d.batch; ++n)
    for (int o = 0; o < d.out_channels; ++o)
      for (int oh = 0; oh < oh_n; ++oh)
        for (int ow = 0; ow < ow_n; ++ow) {
          double s = b ? (*b)[o] : 0.0;
          for (int c = 0; c < d.in_channels; ++c)
            for (int i = 0; i < d.kernel_h; ++i)
              for (int j = 0; j < d.kernel_w; ++j)
                s += double{w[((o * d.in_channels + c) * d.kernel_h + i) *
                                  d.kernel_w +
                              j]} *
                     XAt(d, x, n, c, oh * d.stride - d.pad + i,
                         ow * d.stride - d.pad + j);
          y[((n * d.out_channels + o) * oh_n + oh) * ow_n + ow] =
              static_cast<float>(s);
        }
  return y;
}

// Reference gradients by scattering dy through the forward loop nest.
void RefConvBackward(const ConvDesc& d, const std::vector<float>& x,
                     const std::vector<float>& w, const std::vector<float>& dy,
                     std::vector<float>* dx, std::vector<float>* dw,
                     std::vector<float>* db) {
  const int oh_n = d.OutH(), ow_n = d.OutW();
  std::vector<double> gx(x.size(), 0.0), gw(w.size(), 0.0),
      gb(d.out_channels, 0.0);
  for (int n = 0; n < d.batch; ++n)
    for (int o = 0; o < d.out_channels; ++o)
      for (int oh = 0; oh < oh_n; ++oh)
        for (int ow = 0; ow < ow_n; ++ow) {
          const double g =
              dy[((n * d.out_channels + o) * oh_n + oh) * ow_n + ow];
          gb[o] += g;
          for (int c = 0; c < d.in_channels; ++c)
            for (int i = 0; i < d.kernel_h; ++i)
              for (int j = 0; j < d.kernel_w; ++j) {
                const int h = oh * d.stride - d.pad + i;
                const int ww = ow * d.stride - d.pad + j;
                const int wi =
                    ((o * d.in_channels + c) * d.kernel_h + i) * d.kernel_w + j;
                gw[wi] += g * XAt(d, x, n, c, h, ww);
                if (h >= 0 && h < d.in_h && ww >= 0 && ww < d.in_w) {
                  gx[((n * d.in_channels + c) * d.in_h + h) * d.in_w + ww] +=
                      g * w[wi];
                }
              }
        }
  dx->assign(gx.begin(), gx.end());
  dw->assign(gw.begin(), gw.end());
  db->assign(gb.begin(), gb.end());
}

// Parameters: the implementation and the convolution (with the backend's
// thread count).
class ConvTest
    : public BackendFixture,
      public ::testing::WithParamInterface<std::tuple<BackendImpl, ConvCase>> {
 protected:
  void SetUp() override {
    Open(std::get<0>(GetParam()), std::get<1>(GetParam()).threads);
  }
};

TEST_P(ConvTest, MatchesNaiveReference) {
  const ConvCase& p = std::get<1>(GetParam());
  const ConvDesc d = ToConvDesc(p);
  const auto [xs, ws, ys] = ConvSizes(d);
  std::vector<float> x = RandomVec(xs, 10), w = RandomVec(ws, 11),
                     b = RandomVec(d.out_channels, 12), dy = RandomVec(ys, 13);
  DeviceBuffer dx_in = Upload(x), dw_in = Upload(w), db_in = Upload(b),
               ddy = Upload(dy);
  const float tol = 2e-5f * std::sqrt(static_cast<float>(ws));

  for (bool with_bias : {true, false}) {
    DeviceBuffer y = Upload(RandomVec(ys, 14));  // Must be overwritten.
    ASSERT_TRUE(be_->Conv2dForward(d, dx_in.data(), dw_in.data(),
                                   with_bias ? db_in.data() : nullptr, y.data())
                    .ok());
    std::vector<float> want = RefConvForward(d, x, w, with_bias ? &b : nullptr);
    ExpectNear(Download(y), want, tol, "conv forward");

    // The same with the ReLU fused in (on the oneDNN backend, its post-op).
    for (float& v : want) v = v > 0.f ? v : 0.f;
    DeviceBuffer yr = Upload(RandomVec(ys, 18));  // Must be overwritten.
    ASSERT_TRUE(be_->Conv2dReluForward(d, dx_in.data(), dw_in.data(),
                                       with_bias ? db_in.data() : nullptr,
                                       yr.data())
                    .ok());
    ExpectNear(Download(yr), want, tol, "conv + relu forward");
  }

  std::vector<float> rdx, rdw, rdb;
  RefConvBackward(d, x, w, dy, &rdx, &rdw, &rdb);
  DeviceBuffer gx = Upload(RandomVec(xs, 15));
  ASSERT_TRUE(
      be_->Conv2dBackwardData(d, dw_in.data(), ddy.data(), gx.data()).ok());
  ExpectNear(Download(gx), rdx, tol, "conv backward data");

  DeviceBuffer gw = Upload(RandomVec(ws, 16)), gb = Upload(RandomVec(p.o, 17));
  ASSERT_TRUE(be_->Conv2dBackwardFilter(d, dx_in.data(), ddy.data(), gw.data(),
                                        gb.data())
                  .ok());
  const float ftol = 2e-5f * std::sqrt(static_cast<float>(ys));
  ExpectNear(Download(gw), rdw, ftol, "conv backward filter");
  ExpectNear(Download(gb), rdb, ftol, "conv backward bias");
  // db may be null.
  ASSERT_TRUE(
      be_->Conv2dBackwardFilter(d, dx_in.data(), ddy.data(), gw.data(), nullptr)
          .ok());
  ExpectNear(Download(gw), rdw, ftol, "conv backward filter (no db)");
}

// E.g. "oneDNN_2x3x9x7_o5_k3x2_s2_p1_t1".
std::string ConvTestName(
    const ::testing::TestParamInfo<std::tuple<BackendImpl, ConvCase>>& info) {
  const ConvCase& p = std::get<1>(info.param);
  return absl::StrCat(std::get<0>(info.param).name, "_", p.batch, "x", p.c, "x",
                      p.h, "x", p.w, "_o", p.o, "_k", p.kh, "x", p.kw, "_s",
                      p.stride, "_p", p.pad, "_t", p.threads);
}

INSTANTIATE_TEST_SUITE_P(
    All, ConvTest,
    ::testing::Combine(
        ::testing::ValuesIn(AllBackendImpls()),
        ::testing::Values(ConvCase{2, 1, 5, 5, 3, 3, 3, 1, 0},
                          ConvCase{3, 2, 7, 6, 4, 3, 3, 1, 1},  // pad 1, odd.
                          ConvCase{2, 3, 9, 7, 5, 3, 2, 2, 1},  // stride 2.
                          ConvCase{1, 2, 4, 4, 2, 1, 1, 1, 0},  // 1x1 kernel.
                          ConvCase{2, 1, 3, 3, 2, 5, 5, 1,
                                   2},  // kernel > input.
                          ConvCase{9, 32, 30, 30, 8, 3, 3, 1, 1},
                          // Split over workers, including empty blocks.
                          ConvCase{5, 3, 8, 9, 4, 3, 3, 1, 1, 2},
                          ConvCase{2, 3, 8, 9, 4, 3, 3, 1, 0, 3},
                          ConvCase{7, 2, 6, 5, 3, 3, 3, 2, 1, 0},
                          // Channels multiples of 16, 3x3, stride 1: oneDNN's
                          // blocked layouts without padding, and its Winograd
                          // kernels where the CPU has them.
                          ConvCase{3, 32, 7, 8, 64, 3, 3, 1, 0},
                          ConvCase{2, 16, 6, 5, 16, 3, 3, 1, 1, 2})),
    ConvTestName);

// A conv -> ReLU -> pool -> conv chain whose intermediate tensors stay in
// backend memory (the oneDNN backend keeps them in its blocked layout):
// every read back, whole or in part, after whole or partial writes by other
// ops, must see the NCHW values of the reference.
TEST_P(BackendTest, ChainedOpsReadBackAsNchw) {
  ConvDesc c1 = ToConvDesc(ConvCase{2, 3, 10, 10, 32, 3, 3, 1, 1});
  PoolDesc p1;
  p1.batch = 2;
  p1.channels = 32;
  p1.in_h = p1.in_w = 10;
  ConvDesc c2 = ToConvDesc(ConvCase{2, 32, 5, 5, 16, 3, 3, 1, 0});
  const auto [x_n, w1_n, y1_n] = ConvSizes(c1);
  const auto [q_n, w2_n, y2_n] = ConvSizes(c2);
  const std::vector<float> x = RandomVec(x_n, 40), w1 = RandomVec(w1_n, 41),
                           b1 = RandomVec(32, 42), w2 = RandomVec(w2_n, 43);
  // Reference, on the host.
  std::vector<float> r1 = RefConvForward(c1, x, w1, &b1);
  for (float& v : r1) v = v > 0.f ? v : 0.f;
  std::vector<float> rp(q_n);
  for (int pl = 0; pl < 2 * 32; ++pl)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) {
        float m = r1[(pl * 10 + 2 * i) * 10 + 2 * j];
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b)
            m = std::max(m, r1[(pl * 10 + 2 * i + a) * 10 + 2 * j + b]);
        rp[(pl * 5 + i) * 5 + j] = m;
      }
  const std::vector<float> r2 = RefConvForward(c2, rp, w2, nullptr);

  DeviceBuffer dx = Upload(x), dw1 = Upload(w1), db1 = Upload(b1),
               dw2 = Upload(w2), y1 = Zeros(y1_n), a1 = Zeros(y1_n),
               q = Zeros(q_n), y2 = Zeros(y2_n), flat = Zeros(y2_n);
  ASSERT_TRUE(
      be_->Conv2dForward(c1, dx.data(), dw1.data(), db1.data(), y1.data())
          .ok());
  ASSERT_TRUE(be_->ReluForward(y1_n, y1.data(), a1.data()).ok());
  ASSERT_TRUE(be_->MaxPoolForward(p1, a1.data(), q.data()).ok());
  ASSERT_TRUE(
      be_->Conv2dForward(c2, q.data(), dw2.data(), nullptr, y2.data()).ok());
  ASSERT_TRUE(be_->Copy(y2.data(), flat.data(), y2_n).ok());  // Flatten.
  const float tol = 2e-5f * std::sqrt(static_cast<float>(w2_n));
  ExpectNear(Download(flat), r2, tol, "conv2 via Copy");
  ExpectNear(Download(y2), r2, tol, "conv2");
  ExpectNear(Download(a1), r1, tol, "relu1");
  ExpectNear(Download(q), rp, tol, "pool1");

  // Part of a tensor read back, and part overwritten: the rest keeps its
  // values.
  std::vector<float> part(7);
  ASSERT_TRUE(be_->CopyToHost(q.data() + 30, part.data(), 7).ok());
  ExpectNear(part, std::vector<float>(rp.begin() + 30, rp.begin() + 37), tol,
             "pool1 slice");
  ASSERT_TRUE(be_->Fill(a1.data() + 100, 50, -3.f).ok());
  std::vector<float> want_a1 = r1;
  std::fill(want_a1.begin() + 100, want_a1.begin() + 150, -3.f);
  ExpectNear(Download(a1), want_a1, tol, "relu1 after a partial fill");
  ASSERT_TRUE(be_->Axpy(5, 2.f, dx.data(), y2.data() + 3).ok());
  std::vector<float> want_y2 = r2;
  for (int i = 0; i < 5; ++i) want_y2[3 + i] += 2.f * x[i];
  ExpectNear(Download(y2), want_y2, tol, "conv2 after a partial axpy");

  // Backward through the chain's blocked tensors: pool, then ReLU.
  const std::vector<float> dq = RandomVec(q_n, 44);
  DeviceBuffer ddq = Upload(dq), da1 = Zeros(y1_n), dy1 = Zeros(y1_n);
  ASSERT_TRUE(be_->MaxPoolForward(p1, a1.data(), q.data()).ok());
  ASSERT_TRUE(
      be_->MaxPoolBackward(p1, a1.data(), q.data(), ddq.data(), da1.data())
          .ok());
  ASSERT_TRUE(be_->ReluBackward(y1_n, a1.data(), da1.data(), dy1.data()).ok());
  std::vector<float> got = Download(dy1);
  double routed = 0, want_routed = 0;
  for (float v : got) routed += v;
  // Every dq lands on one window maximum; the ReLU passes those that are
  // positive (the filled -3 region is not).
  for (int pl = 0; pl < 2 * 32; ++pl)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) {
        int best = -1;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const int idx = (pl * 10 + 2 * i + a) * 10 + 2 * j + b;
            if (best < 0 || want_a1[idx] > want_a1[best]) best = idx;
          }
        if (want_a1[best] > 0.f) want_routed += dq[(pl * 5 + i) * 5 + j];
      }
  EXPECT_NEAR(routed, want_routed, 1e-3);

  // Discard: a buffer reused for a tensor of another shape.
  ASSERT_TRUE(be_->Discard(a1.data(), y1_n).ok());
  ASSERT_TRUE(be_->CopyToDevice(x.data(), a1.data(), x_n).ok());
  std::vector<float> head(x_n);
  ASSERT_TRUE(be_->CopyToHost(a1.data(), head.data(), x_n).ok());
  ExpectNear(head, x, 0, "written after Discard");
}

// The fused convolution + ReLU's output feeds the next ops as the unfused
// pair's does (the oneDNN backend keeps it in its blocked layout): a ReLU
// backward from it and a pooling over it, then a read back.
TEST_P(BackendTest, ConvReluForwardFeedsTheNextOps) {
  const ConvDesc c = ToConvDesc(ConvCase{2, 16, 8, 8, 32, 3, 3, 1, 1});
  const auto [x_n, w_n, y_n] = ConvSizes(c);
  const std::vector<float> x = RandomVec(x_n, 50), w = RandomVec(w_n, 51),
                           b = RandomVec(32, 52), dy = RandomVec(y_n, 53);
  DeviceBuffer dx = Upload(x), dw = Upload(w), db = Upload(b), ddy = Upload(dy),
               pre = Zeros(y_n), unfused = Zeros(y_n), fused = Zeros(y_n),
               g_unfused = Zeros(y_n), g_fused = Zeros(y_n);
  ASSERT_TRUE(
      be_->Conv2dForward(c, dx.data(), dw.data(), db.data(), pre.data()).ok());
  ASSERT_TRUE(be_->ReluForward(y_n, pre.data(), unfused.data()).ok());
  ASSERT_TRUE(
      be_->Conv2dReluForward(c, dx.data(), dw.data(), db.data(), fused.data())
          .ok());
  ASSERT_TRUE(
      be_->ReluBackward(y_n, unfused.data(), ddy.data(), g_unfused.data())
          .ok());
  ASSERT_TRUE(
      be_->ReluBackward(y_n, fused.data(), ddy.data(), g_fused.data()).ok());
  PoolDesc p;
  p.batch = 2;
  p.channels = 32;
  p.in_h = p.in_w = 8;
  const int64_t q_n = 2 * 32 * 4 * 4;
  DeviceBuffer q_unfused = Zeros(q_n), q_fused = Zeros(q_n);
  ASSERT_TRUE(be_->MaxPoolForward(p, unfused.data(), q_unfused.data()).ok());
  ASSERT_TRUE(be_->MaxPoolForward(p, fused.data(), q_fused.data()).ok());
  const float tol = 2e-5f * std::sqrt(static_cast<float>(w_n));
  ExpectNear(Download(fused), Download(unfused), tol, "conv + relu");
  // The ReLU in place over the convolution's (blocked) output, as a backend
  // without the fused kernel runs it.
  ASSERT_TRUE(be_->ReluForward(y_n, pre.data(), pre.data()).ok());
  ExpectNear(Download(pre), Download(unfused), 0, "relu in place");
  ExpectNear(Download(g_fused), Download(g_unfused), 0, "relu backward");
  ExpectNear(Download(q_fused), Download(q_unfused), tol, "pool");
  for (float v : Download(fused)) ASSERT_GE(v, 0.f);
}

TEST_P(BackendTest, ConvRejectsBadDesc) {
  ConvDesc d;
  d.batch = 1;
  d.in_channels = 1;
  d.in_h = d.in_w = 2;
  d.out_channels = 1;  // 3x3 kernel on a 2x2 unpadded input.
  DeviceBuffer buf = Zeros(64);
  EXPECT_EQ(
      be_->Conv2dForward(d, buf.data(), buf.data(), nullptr, buf.data()).code(),
      absl::StatusCode::kInvalidArgument);
  d.in_h = d.in_w = 5;
  d.stride = 0;
  EXPECT_EQ(
      be_->Conv2dForward(d, buf.data(), buf.data(), nullptr, buf.data()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      be_->Conv2dReluForward(d, buf.data(), buf.data(), nullptr, buf.data())
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendTest, Relu) {
  std::vector<float> x = RandomVec(101, 20), dy = RandomVec(101, 21);
  DeviceBuffer dx_in = Upload(x), y = Zeros(101), ddy = Upload(dy),
               dx = Zeros(101);
  ASSERT_TRUE(be_->ReluForward(101, dx_in.data(), y.data()).ok());
  ASSERT_TRUE(be_->ReluBackward(101, y.data(), ddy.data(), dx.data()).ok());
  std::vector<float> want_y(101), want_dx(101);
  for (int i = 0; i < 101; ++i) {
    want_y[i] = x[i] > 0 ? x[i] : 0.f;
    want_dx[i] = x[i] > 0 ? dy[i] : 0.f;
  }
  ExpectNear(Download(y), want_y, 0, "relu forward");
  ExpectNear(Download(dx), want_dx, 0, "relu backward");
  // In place.
  ASSERT_TRUE(be_->ReluBackward(101, y.data(), ddy.data(), ddy.data()).ok());
  ASSERT_TRUE(be_->ReluForward(101, dx_in.data(), dx_in.data()).ok());
  ExpectNear(Download(dx_in), want_y, 0, "relu forward in place");
  ExpectNear(Download(ddy), want_dx, 0, "relu backward in place");
}

TEST_P(BackendTest, MaxPoolOddSizes) {
  PoolDesc d;
  d.batch = 2;
  d.channels = 3;
  d.in_h = 5;
  d.in_w = 7;
  d.window = 2;
  const int oh = d.OutH(), ow = d.OutW();
  ASSERT_EQ(oh, 2);
  ASSERT_EQ(ow, 3);
  const int xs = d.batch * d.channels * d.in_h * d.in_w;
  const int ys = d.batch * d.channels * oh * ow;
  std::vector<float> x = RandomVec(xs, 30);
  // Ties: plant an equal maximum in one window; the first one gets dy.
  x[0] = x[1] = 5.f;
  std::vector<float> dy = RandomVec(ys, 31);

  std::vector<float> want_y(ys), want_dx(xs, 0.f);
  for (int p = 0; p < d.batch * d.channels; ++p)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        int best = -1;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const int idx = (p * d.in_h + 2 * i + a) * d.in_w + 2 * j + b;
            if (best < 0 || x[idx] > x[best]) best = idx;
          }
        want_y[(p * oh + i) * ow + j] = x[best];
        want_dx[best] += dy[(p * oh + i) * ow + j];
      }

  DeviceBuffer dxin = Upload(x), y = Zeros(ys), ddy = Upload(dy),
               dx = Upload(RandomVec(xs, 32));  // Must be overwritten.
  ASSERT_TRUE(be_->MaxPoolForward(d, dxin.data(), y.data()).ok());
  ExpectNear(Download(y), want_y, 0, "pool forward");
  ASSERT_TRUE(
      be_->MaxPoolBackward(d, dxin.data(), y.data(), ddy.data(), dx.data())
          .ok());
  ExpectNear(Download(dx), want_dx, 0, "pool backward");
  EXPECT_EQ(Download(dx)[1], 0.f);  // Second of the tied maxima.

  // A backward whose forward was on other buffers (the oneDNN backend keeps
  // the argmax of the last forward per shape, and must not use it here).
  DeviceBuffer x2 = Upload(x), y2 = Zeros(ys),
               other = Upload(RandomVec(xs, 33)), other_y = Zeros(ys),
               dx2 = Upload(RandomVec(xs, 34));
  ASSERT_TRUE(be_->MaxPoolForward(d, x2.data(), y2.data()).ok());
  ASSERT_TRUE(be_->MaxPoolForward(d, other.data(), other_y.data()).ok());
  ASSERT_TRUE(
      be_->MaxPoolBackward(d, x2.data(), y2.data(), ddy.data(), dx2.data())
          .ok());
  ExpectNear(Download(dx2), want_dx, 0, "pool backward after another forward");
}

// Plain (eps 0) and with label smoothing: against the target
// q = (1 - eps) onehot + eps / classes, in double precision.
TEST_P(BackendTest, SoftmaxCrossEntropy) {
  for (const float eps : {0.0f, 0.1f}) {
    SCOPED_TRACE(testing::Message() << "label smoothing " << eps);
    const int batch = 6, classes = 5;
    std::vector<float> logits = RandomVec(batch * classes, 40, -3.f, 3.f);
    logits[2 * classes + 1] = 1000.f;  // Stability: must not overflow.
    std::vector<float> labels = {0, 1, 1, 4, 2, 3};
    double want_loss = 0;
    int64_t want_correct = 0;
    std::vector<float> want_d(batch * classes);
    for (int r = 0; r < batch; ++r) {
      const float* z = &logits[r * classes];
      double mx = z[0];
      int arg = 0;
      for (int c = 1; c < classes; ++c)
        if (z[c] > z[arg]) arg = c;
      mx = z[arg];
      double s = 0;
      for (int c = 0; c < classes; ++c) s += std::exp(z[c] - mx);
      const int l = static_cast<int>(labels[r]);
      want_correct += arg == l;
      for (int c = 0; c < classes; ++c) {
        const double q = (1.0 - eps) * (c == l) + double{eps} / classes;
        want_loss += q * (std::log(s) + mx - z[c]);  // q_c * -log p_c.
        want_d[r * classes + c] =
            static_cast<float>((std::exp(z[c] - mx) / s - q) / batch);
      }
    }
    want_loss /= batch;

    DeviceBuffer dl = Upload(logits), dlab = Upload(labels),
                 dd = Zeros(batch * classes);
    float loss = -1;
    int64_t correct = -1;
    ASSERT_TRUE(be_->SoftmaxCrossEntropy(batch, classes, dl.data(), dlab.data(),
                                         eps, dd.data(), &loss, &correct)
                    .ok());
    EXPECT_NEAR(loss, want_loss, 1e-5 * (1 + want_loss));
    EXPECT_EQ(correct, want_correct);
    EXPECT_TRUE(std::isfinite(loss));
    ExpectNear(Download(dd), want_d, 1e-6f, "dlogits");

    // Without dlogits.
    loss = -1;
    ASSERT_TRUE(be_->SoftmaxCrossEntropy(batch, classes, dl.data(), dlab.data(),
                                         eps, nullptr, &loss, &correct)
                    .ok());
    EXPECT_NEAR(loss, want_loss, 1e-5 * (1 + want_loss));
  }
}

TEST_P(BackendTest, SoftmaxCrossEntropyRejectsBadLabelSmoothing) {
  DeviceBuffer dl = Upload(RandomVec(2 * 3, 41)), dd = Zeros(6),
               dlab = Upload({0.f, 1.f});
  for (float bad : {-0.1f, 1.0f, NAN}) {
    float loss;
    int64_t correct;
    absl::Status s = be_->SoftmaxCrossEntropy(2, 3, dl.data(), dlab.data(), bad,
                                              dd.data(), &loss, &correct);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(s.message()).find("label smoothing"),
              std::string::npos)
        << s;
  }
}

TEST_P(BackendTest, SoftmaxCrossEntropyRejectsBadLabels) {
  DeviceBuffer dl = Upload(RandomVec(2 * 3, 41)), dd = Zeros(6);
  for (float bad : {-1.f, 3.f, 1.5f, NAN}) {
    DeviceBuffer dlab = Upload({0.f, bad});
    float loss;
    int64_t correct;
    absl::Status s = be_->SoftmaxCrossEntropy(2, 3, dl.data(), dlab.data(),
                                              0.0f, dd.data(), &loss, &correct);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // The message names the example.
  DeviceBuffer z = Upload(RandomVec(3 * 4, 42)), g = Zeros(12);
  for (float bad : {-1.f, 4.f, 1.5f, NAN}) {
    DeviceBuffer lab = Upload({0.f, 2.f, bad});
    float loss = 0;
    int64_t correct = 0;
    absl::Status s = be_->SoftmaxCrossEntropy(3, 4, z.data(), lab.data(), 0.0f,
                                              g.data(), &loss, &correct);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("of example 2")) << s;
  }
  EXPECT_EQ(be_->SoftmaxCrossEntropy(0, 4, z.data(), z.data(), 0.0f, nullptr,
                                     nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(All, BackendTest,
                         ::testing::ValuesIn(AllBackendImpls()),
                         BackendImplName());

// ---- Against the reference backend ------------------------------------------

TEST_P(VsReferenceTest, FillAndAxpy) {
  for (int64_t n : {1, 37, 100003}) {
    Pair x = Upload(RandomVec(n, 2)), y = Upload(RandomVec(n, 3));
    BOTH(be->Axpy(n, -0.75f, pick(x).data(), pick(y).data()));
    ExpectSame(y, absl::StrCat("axpy n=", n));
    BOTH(be->Fill(pick(y).data(), n, 2.5f));
    ExpectExact(Got(y), std::vector<float>(n, 2.5f), "fill");
  }
}

TEST_P(VsReferenceTest, GemmAllTransposes) {
  const std::vector<std::tuple<int, int, int>> shapes = {
      {1, 1, 1}, {5, 7, 3}, {67, 129, 150}, {64, 128, 1600}, {3, 4, 0}};
  for (const auto& [m, n, k] : shapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.f, 0.25f}) {
          Pair a = Upload(RandomVec(int64_t{m} * k, 4)),
               b = Upload(RandomVec(int64_t{k} * n, 5)),
               c = Upload(RandomVec(int64_t{m} * n, 6));
          BOTH(be->Gemm(ta, tb, m, n, k, 1.5f, pick(a).data(), pick(b).data(),
                        beta, pick(c).data()));
          ExpectSame(c, absl::StrCat("gemm m=", m, " n=", n, " k=", k,
                                     " ta=", ta, " tb=", tb, " beta=", beta));
        }
      }
    }
  }
}

TEST_P(VsReferenceTest, RowBiasAndColumnSum) {
  const std::vector<std::pair<int, int>> shapes = {
      {4, 9}, {64, 128}, {1000, 10}, {3, 1000}, {0, 5}};
  for (const auto& [rows, cols] : shapes) {
    Pair y = Upload(RandomVec(int64_t{rows} * cols, 7)),
         bias = Upload(RandomVec(cols, 8));
    BOTH(be->AddRowBias(rows, cols, pick(bias).data(), pick(y).data()));
    ExpectSame(y, absl::StrCat("bias ", rows, "x", cols));
    Pair sums = Garbage(cols, 9);
    BOTH(be->ColumnSum(rows, cols, pick(y).data(), pick(sums).data()));
    ExpectSame(sums, absl::StrCat("colsum ", rows, "x", cols));
  }
}

TEST_P(VsReferenceTest, ConvEmptyBatchAndBadDesc) {
  ConvDesc d;
  d.batch = 0;
  d.in_channels = 2;
  d.in_h = d.in_w = 5;
  d.out_channels = 3;
  Pair dw = Garbage(3 * 2 * 9, 19), db = Garbage(3, 20);
  BOTH(be->Conv2dBackwardFilter(d, nullptr, nullptr, pick(dw).data(),
                                pick(db).data()));
  ExpectExact(Got(dw), std::vector<float>(54, 0.f), "empty-batch dw");
  ExpectExact(Got(db), std::vector<float>(3, 0.f), "empty-batch db");
  d.batch = 1;
  d.stride = 0;
  EXPECT_EQ(be_->Conv2dForward(d, nullptr, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(VsReferenceTest, Relu) {
  const int64_t n = 100001;
  std::vector<float> x = RandomVec(n, 21);
  x[0] = 0.f;  // y == 0 exactly: no gradient, as on the reference.
  x[1] = -0.f;
  x[2] = 1e-30f;
  Pair xin = Upload(x), y = Garbage(n, 22), dy = Upload(RandomVec(n, 23)),
       dx = Garbage(n, 24);
  BOTH(be->ReluForward(n, pick(xin).data(), pick(y).data()));
  BOTH(be->ReluBackward(n, pick(y).data(), pick(dy).data(), pick(dx).data()));
  ExpectExact(Got(y), Ref(y), "relu forward");
  ExpectExact(Got(dx), Ref(dx), "relu backward");
}

TEST_P(VsReferenceTest, MaxPool) {
  struct Case {
    int batch, channels, h, w, window;
  };
  for (const Case& c : {Case{2, 3, 5, 7, 2}, Case{64, 32, 26, 26, 2},
                        Case{3, 2, 8, 11, 3}, Case{1, 1, 2, 2, 2}}) {
    PoolDesc d;
    d.batch = c.batch;
    d.channels = c.channels;
    d.in_h = c.h;
    d.in_w = c.w;
    d.window = c.window;
    const int64_t xs = int64_t{c.batch} * c.channels * c.h * c.w;
    const int64_t ys = int64_t{c.batch} * c.channels * d.OutH() * d.OutW();
    std::vector<float> x = RandomVec(xs, 30);
    // Ties: the first maximum of a window gets the gradient.
    x[0] = x[1] = 5.f;
    if (c.w >= 2 * c.window)
      x[c.window] = x[c.window + 1] = x[c.w + c.window] = 6.f;
    // Quantized values elsewhere make ties common.
    for (int64_t i = xs / 2; i < xs; ++i) x[i] = std::round(x[i] * 2.f);
    Pair xin = Upload(x), y = Garbage(ys, 31), dy = Upload(RandomVec(ys, 32)),
         dx = Garbage(xs, 33);
    BOTH(be->MaxPoolForward(d, pick(xin).data(), pick(y).data()));
    BOTH(be->MaxPoolBackward(d, pick(xin).data(), pick(y).data(),
                             pick(dy).data(), pick(dx).data()));
    const std::string what = absl::StrCat(c.batch, "x", c.channels, "x", c.h,
                                          "x", c.w, " window ", c.window);
    ExpectExact(Got(y), Ref(y), "pool forward " + what);
    ExpectExact(Got(dx), Ref(dx), "pool backward " + what);
  }
}

TEST_P(VsReferenceTest, SoftmaxCrossEntropy) {
  struct Case {
    int batch, classes;
  };
  for (const Case& c : {Case{6, 5}, Case{64, 10}, Case{70, 37}, Case{1, 1},
                        Case{1000, 10}, Case{3, 100}}) {
    std::vector<float> logits =
        RandomVec(int64_t{c.batch} * c.classes, 40, -3.f, 3.f);
    logits[0] = 1000.f;  // Stability: must not overflow.
    if (c.classes > 1) logits[c.classes] = logits[c.classes + 1] = 7.f;  // Tie.
    std::vector<float> labels(c.batch);
    for (int r = 0; r < c.batch; ++r) {
      labels[r] = static_cast<float>((r * 7) % c.classes);
    }
    // Row 1 has its maximum twice, at classes 0 and 1; the first one is the
    // prediction, so labelling it 1 must not count as correct.
    if (c.batch > 1 && c.classes > 1) labels[1] = 1.f;
    Pair z = Upload(logits), lab = Upload(labels);
    for (const float eps : {0.0f, 0.2f})
      for (bool with_grad : {true, false}) {
        Pair g = Garbage(int64_t{c.batch} * c.classes, 41);
        float loss[2] = {-1, -1};
        int64_t correct[2] = {-1, -1};
        BOTH(be->SoftmaxCrossEntropy(
            c.batch, c.classes, pick(z).data(), pick(lab).data(), eps,
            with_grad ? pick(g).data() : nullptr, &loss[dp_i], &correct[dp_i]));
        const std::string what =
            absl::StrCat("batch ", c.batch, " classes ", c.classes,
                         " smoothing ", eps, with_grad ? "" : " no grad");
        EXPECT_TRUE(std::isfinite(loss[1])) << what;
        EXPECT_LE(std::fabs(loss[1] - loss[0]), 1e-4 * std::max(1.f, loss[0]))
            << what << ": got " << loss[1] << " reference " << loss[0];
        EXPECT_EQ(correct[1], correct[0]) << what;
        if (with_grad) {
          ExpectSame(g, "dlogits " + what);
        } else {
          ExpectExact(Got(g), Ref(g), "untouched dlogits " + what);
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(All, VsReferenceTest,
                         ::testing::ValuesIn(AllBackendImpls()),
                         BackendImplName());

// Parameters: the implementation and the convolution.
class ConvVsReferenceTest
    : public VsReferenceFixture,
      public ::testing::WithParamInterface<std::tuple<BackendImpl, ConvCase>> {
 protected:
  void SetUp() override { OpenBoth(std::get<0>(GetParam())); }
};

TEST_P(ConvVsReferenceTest, MatchesReference) {
  const ConvCase& p = std::get<1>(GetParam());
  const ConvDesc d = ToConvDesc(p);
  const auto [xs, ws, ys] = ConvSizes(d);
  Pair x = Upload(RandomVec(xs, 10)), w = Upload(RandomVec(ws, 11)),
       b = Upload(RandomVec(d.out_channels, 12)),
       dy = Upload(RandomVec(ys, 13));
  const std::string shape = absl::StrCat(
      " batch=", p.batch, " c=", p.c, " ", p.h, "x", p.w, " o=", p.o,
      " k=", p.kh, "x", p.kw, " s=", p.stride, " pad=", p.pad);

  // Twice: the second call reuses the cached plan and algorithms.
  for (int rep = 0; rep < 2; ++rep) {
    for (bool with_bias : {true, false}) {
      Pair y = Garbage(ys, 14);
      BOTH(be->Conv2dForward(d, pick(x).data(), pick(w).data(),
                             with_bias ? pick(b).data() : nullptr,
                             pick(y).data()));
      ExpectSame(y, "conv forward" + shape + (with_bias ? " +bias" : ""));
    }
    Pair dx = Garbage(xs, 15);
    BOTH(be->Conv2dBackwardData(d, pick(w).data(), pick(dy).data(),
                                pick(dx).data()));
    ExpectSame(dx, "conv backward data" + shape);

    Pair dw = Garbage(ws, 16), db = Garbage(p.o, 17);
    BOTH(be->Conv2dBackwardFilter(d, pick(x).data(), pick(dy).data(),
                                  pick(dw).data(), pick(db).data()));
    ExpectSame(dw, "conv backward filter" + shape);
    ExpectSame(db, "conv backward bias" + shape);
    Pair dw2 = Garbage(ws, 18);
    BOTH(be->Conv2dBackwardFilter(d, pick(x).data(), pick(dy).data(),
                                  pick(dw2).data(), nullptr));
    ExpectSame(dw2, "conv backward filter, no db" + shape);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, ConvVsReferenceTest,
    ::testing::Combine(
        ::testing::ValuesIn(AllBackendImpls()),
        ::testing::Values(ConvCase{2, 1, 5, 5, 3, 3, 3, 1, 0},
                          ConvCase{3, 2, 7, 6, 4, 3, 3, 1, 1},  // pad 1, odd.
                          ConvCase{2, 3, 9, 7, 5, 3, 2, 2, 1},  // stride 2.
                          ConvCase{1, 2, 4, 4, 2, 1, 1, 1, 0},  // 1x1 kernel.
                          ConvCase{2, 1, 3, 3, 2, 5, 5, 1,
                                   2},  // kernel > input.
                          ConvCase{9, 32, 30, 30, 8, 3, 3, 1, 1},
                          // fashion_cnn's two convolutions at batch 64.
                          ConvCase{64, 1, 28, 28, 32, 3, 3, 1, 0},
                          ConvCase{64, 32, 13, 13, 64, 3, 3, 1, 0})),
    ConvTestName);

}  // namespace
}  // namespace downpour
