// The backend conformance suite, normalization part: pooling with stride and
// padding (max and average), batch normalization, dropout masks, Multiply and
// CopyRows on every implementation (OpenBLAS, oneDNN, CUDA): against naive
// host references written here, by finite differences, against the reference
// backend on more shapes, and through a residual block whose intermediate
// tensors stay in backend memory (the oneDNN backend's blocked layouts). See
// backend_conformance.h for the criteria. CUDA cases skip without a usable
// GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/backend_conformance.h"
#include "worker/nn/test_backends.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

struct PoolCase {
  int batch, channels, h, w, window, stride, pad;
};

PoolDesc ToPoolDesc(const PoolCase& c) {
  PoolDesc d;
  d.batch = c.batch;
  d.channels = c.channels;
  d.in_h = c.h;
  d.in_w = c.w;
  d.window = c.window;
  d.stride = c.stride;
  d.pad = c.pad;
  return d;
}

std::string PoolName(const PoolCase& c) {
  return absl::StrCat(c.batch, "x", c.channels, "x", c.h, "x", c.w, " window ",
                      c.window, " stride ", c.stride, " pad ", c.pad);
}

int64_t InSize(const PoolDesc& d) {
  return int64_t{d.batch} * d.channels * d.in_h * d.in_w;
}
int64_t OutSize(const PoolDesc& d) {
  return int64_t{d.batch} * d.channels * d.OutH() * d.OutW();
}

// Naive pooling in double precision, straight from PyTorch's definitions:
// window (oh, ow) covers rows oh * s - pad + [0, window) (cols alike); max
// over the cells inside the image (first maximum for the gradient); average
// over window^2 (count_include_pad).
void NaivePool(const PoolDesc& d, bool max, const std::vector<float>& x,
               const std::vector<float>& dy, std::vector<float>* y,
               std::vector<float>* dx) {
  const int s = d.Stride();
  y->assign(OutSize(d), 0.f);
  std::vector<double> g(InSize(d), 0.0);
  for (int pl = 0; pl < d.batch * d.channels; ++pl)
    for (int oh = 0; oh < d.OutH(); ++oh)
      for (int ow = 0; ow < d.OutW(); ++ow) {
        const int64_t o = (int64_t{pl} * d.OutH() + oh) * d.OutW() + ow;
        double sum = 0;
        int64_t best = -1;
        std::vector<int64_t> cells;
        for (int i = 0; i < d.window; ++i)
          for (int j = 0; j < d.window; ++j) {
            const int h = oh * s - d.pad + i, w = ow * s - d.pad + j;
            if (h < 0 || h >= d.in_h || w < 0 || w >= d.in_w) continue;
            const int64_t idx = (int64_t{pl} * d.in_h + h) * d.in_w + w;
            cells.push_back(idx);
            sum += x[idx];
            if (best < 0 || x[idx] > x[best]) best = idx;
          }
        if (max) {
          (*y)[o] = x[best];
          g[best] += dy[o];
        } else {
          const double area = d.window * d.window;
          (*y)[o] = static_cast<float>(sum / area);
          for (int64_t idx : cells) g[idx] += dy[o] / area;
        }
      }
  dx->assign(g.begin(), g.end());
}

// Naive batch-norm training forward and backward in double precision.
struct NaiveBn {
  std::vector<float> y, mean, invstd, run_mean, run_var, dx, dgamma, dbeta;
};
NaiveBn NaiveBatchNorm(const BatchNormDesc& d, const std::vector<float>& x,
                       const std::vector<float>& gamma,
                       const std::vector<float>& beta,
                       const std::vector<float>& run_mean,
                       const std::vector<float>& run_var, float momentum,
                       const std::vector<float>& dy) {
  NaiveBn r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  const int64_t m = int64_t{d.batch} * d.spatial;
  auto at = [&](int n, int c, int s) {
    return (int64_t{n} * d.channels + c) * d.spatial + s;
  };
  for (int c = 0; c < d.channels; ++c) {
    double sum = 0, sq = 0, sdy = 0, sdyx = 0;
    for (int n = 0; n < d.batch; ++n)
      for (int s = 0; s < d.spatial; ++s) sum += x[at(n, c, s)];
    const double mean = sum / m;
    for (int n = 0; n < d.batch; ++n)
      for (int s = 0; s < d.spatial; ++s) {
        const double t = x[at(n, c, s)] - mean;
        sq += t * t;
      }
    const double var = sq / m, inv = 1.0 / std::sqrt(var + d.eps);
    for (int n = 0; n < d.batch; ++n)
      for (int s = 0; s < d.spatial; ++s) {
        const int64_t i = at(n, c, s);
        const double xh = (x[i] - mean) * inv;
        r.y[i] = static_cast<float>(gamma[c] * xh + beta[c]);
        sdy += dy[i];
        sdyx += dy[i] * xh;
      }
    for (int n = 0; n < d.batch; ++n)
      for (int s = 0; s < d.spatial; ++s) {
        const int64_t i = at(n, c, s);
        const double xh = (x[i] - mean) * inv;
        r.dx[i] = static_cast<float>(gamma[c] * inv *
                                     (dy[i] - sdy / m - xh * sdyx / m));
      }
    r.mean.push_back(static_cast<float>(mean));
    r.invstd.push_back(static_cast<float>(inv));
    r.run_mean.push_back(
        static_cast<float>((1 - momentum) * run_mean[c] + momentum * mean));
    r.run_var.push_back(static_cast<float>((1 - momentum) * run_var[c] +
                                           momentum * sq / (m - 1)));
    r.dgamma.push_back(static_cast<float>(sdyx));
    r.dbeta.push_back(static_cast<float>(sdy));
  }
  return r;
}

// ---- Against naive references -----------------------------------------------

class NormPoolTest : public BackendTest {};

TEST_P(NormPoolTest, PoolingMatchesNaiveReference) {
  for (const PoolCase& c :
       {PoolCase{2, 3, 7, 9, 3, 2, 1}, PoolCase{1, 2, 5, 5, 3, 1, 1},
        PoolCase{2, 2, 6, 7, 2, 1, 0}, PoolCase{1, 1, 4, 5, 4, 2, 2},
        PoolCase{2, 3, 5, 7, 2, 0, 0}, PoolCase{1, 2, 9, 6, 2, 3, 1}}) {
    // All negative too: a padded cell must not pass for a zero maximum.
    for (float offset : {0.f, -5.f}) {
      const PoolDesc d = ToPoolDesc(c);
      std::vector<float> x =
          RandomVec(InSize(d), 60, offset - 1.f, offset + 1.f);
      x[0] = x[1] = offset + 3.f;  // A tie: the first maximum gets dy.
      const std::vector<float> dy = RandomVec(OutSize(d), 61);
      DeviceBuffer bx = Upload(x), bdy = Upload(dy);
      for (bool max : {true, false}) {
        const std::string what = absl::StrCat(max ? "max " : "avg ",
                                              PoolName(c), " offset ", offset);
        std::vector<float> want_y, want_dx;
        NaivePool(d, max, x, dy, &want_y, &want_dx);
        DeviceBuffer y = Upload(RandomVec(OutSize(d), 62)),  // Overwritten.
            dx = Upload(RandomVec(InSize(d), 63));
        if (max) {
          ASSERT_TRUE(be_->MaxPoolForward(d, bx.data(), y.data()).ok()) << what;
          ASSERT_TRUE(be_->MaxPoolBackward(d, bx.data(), y.data(), bdy.data(),
                                           dx.data())
                          .ok())
              << what;
        } else {
          ASSERT_TRUE(be_->AvgPoolForward(d, bx.data(), y.data()).ok()) << what;
          ASSERT_TRUE(be_->AvgPoolBackward(d, bdy.data(), dx.data()).ok())
              << what;
        }
        ExpectNear(Download(y), want_y, max ? 0.f : 1e-6f,
                   ("forward " + what).c_str());
        ExpectNear(Download(dx), want_dx, 1e-6f, ("backward " + what).c_str());
      }
    }
  }
}

TEST_P(NormPoolTest, DefaultStrideIsTheWindow) {
  PoolDesc d;
  d.in_h = 7;
  d.in_w = 9;
  d.window = 3;
  EXPECT_EQ(d.Stride(), 3);
  EXPECT_EQ(d.OutH(), 2);
  EXPECT_EQ(d.OutW(), 3);
  d.pad = 1;
  d.stride = 2;
  EXPECT_EQ(d.OutH(), 4);
  EXPECT_EQ(d.OutW(), 5);
}

TEST_P(NormPoolTest, BatchNormMatchesNaiveReference) {
  struct Case {
    int batch, channels, spatial;
  };
  for (const Case& c : {Case{4, 3, 25}, Case{1, 5, 9}, Case{8, 6, 1},
                        Case{2, 1, 2}, Case{3, 16, 49}}) {
    BatchNormDesc d;
    d.batch = c.batch;
    d.channels = c.channels;
    d.spatial = c.spatial;
    const std::string what =
        absl::StrCat(c.batch, "x", c.channels, "x", c.spatial);
    const int64_t n = d.Size();
    // An offset mean and a large scale: a one-pass variance would lose
    // digits here.
    const std::vector<float> x = RandomVec(n, 70, 30.f, 50.f),
                             gamma = RandomVec(c.channels, 71, 0.5f, 2.f),
                             beta = RandomVec(c.channels, 72),
                             rm = RandomVec(c.channels, 73),
                             rv = RandomVec(c.channels, 74, 0.5f, 2.f),
                             dy = RandomVec(n, 75);
    const float momentum = 0.1f;
    const NaiveBn want =
        NaiveBatchNorm(d, x, gamma, beta, rm, rv, momentum, dy);
    DeviceBuffer bx = Upload(x), bg = Upload(gamma), bb = Upload(beta),
                 brm = Upload(rm), brv = Upload(rv), bdy = Upload(dy),
                 y = Upload(RandomVec(n, 76)),
                 mean = Upload(RandomVec(c.channels, 77)),
                 inv = Upload(RandomVec(c.channels, 78)),
                 dx = Upload(RandomVec(n, 79)),
                 dg = Upload(RandomVec(c.channels, 80)),
                 db = Upload(RandomVec(c.channels, 81));
    ASSERT_TRUE(be_->BatchNormForwardTraining(
                       d, bx.data(), bg.data(), bb.data(), momentum, brm.data(),
                       brv.data(), y.data(), mean.data(), inv.data())
                    .ok())
        << what;
    ExpectNear(Download(y), want.y, 2e-5f, ("bn y " + what).c_str());
    ExpectNear(Download(mean), want.mean, 1e-6f, ("bn mean " + what).c_str());
    ExpectNear(Download(inv), want.invstd, 2e-5f,
               ("bn invstd " + what).c_str());
    ExpectNear(Download(brm), want.run_mean, 1e-6f,
               ("bn running mean " + what).c_str());
    ExpectNear(Download(brv), want.run_var, 2e-5f,
               ("bn running var " + what).c_str());
    ASSERT_TRUE(be_->BatchNormBackward(d, bx.data(), bdy.data(), bg.data(),
                                       mean.data(), inv.data(), dx.data(),
                                       dg.data(), db.data())
                    .ok())
        << what;
    ExpectNear(Download(dx), want.dx, 1e-4f, ("bn dx " + what).c_str());
    ExpectNear(Download(dg), want.dgamma, 1e-4f, ("bn dgamma " + what).c_str());
    ExpectNear(Download(db), want.dbeta, 1e-5f, ("bn dbeta " + what).c_str());

    // Inference with the running statistics (updated above).
    std::vector<float> rm2 = Download(brm), rv2 = Download(brv), want_inf(n);
    for (int b = 0; b < c.batch; ++b)
      for (int ch = 0; ch < c.channels; ++ch)
        for (int s = 0; s < c.spatial; ++s) {
          const int64_t i = (int64_t{b} * c.channels + ch) * c.spatial + s;
          want_inf[i] =
              static_cast<float>(gamma[ch] * (x[i] - double{rm2[ch]}) /
                                     std::sqrt(double{rv2[ch]} + d.eps) +
                                 beta[ch]);
        }
    ASSERT_TRUE(be_->BatchNormForwardInference(d, bx.data(), bg.data(),
                                               bb.data(), brm.data(),
                                               brv.data(), y.data())
                    .ok());
    ExpectNear(Download(y), want_inf, 2e-4f, ("bn inference " + what).c_str());

    // Without running statistics, in place.
    ASSERT_TRUE(be_->BatchNormForwardTraining(
                       d, bx.data(), bg.data(), bb.data(), momentum, nullptr,
                       nullptr, bx.data(), mean.data(), inv.data())
                    .ok());
    ExpectNear(Download(bx), want.y, 2e-5f, ("bn in place " + what).c_str());
  }
}

TEST_P(NormPoolTest, DropoutMultiplyCopyRows) {
  const int64_t n = 4099;
  for (float rate : {0.f, 0.5f, 0.9f}) {
    DeviceBuffer mask = Upload(RandomVec(n, 90));
    ASSERT_TRUE(be_->DropoutMask(n, rate, 1234, mask.data()).ok());
    const std::vector<float> got = Download(mask);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool drop = DropoutUniform(1234, i) < rate;
      ASSERT_EQ(got[i], drop ? 0.f : 1.f / (1.f - rate)) << i;
      kept += drop ? 0 : 1;
    }
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - rate, 0.03) << rate;
  }
  const std::vector<float> a = RandomVec(n, 91), b = RandomVec(n, 92);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] * b[i];
  DeviceBuffer ba = Upload(a), bb = Upload(b), y = Zeros(n);
  ASSERT_TRUE(be_->Multiply(n, ba.data(), bb.data(), y.data()).ok());
  ExpectNear(Download(y), want, 0, "multiply");
  ASSERT_TRUE(be_->Multiply(n, ba.data(), bb.data(), ba.data()).ok());
  ExpectNear(Download(ba), want, 0, "multiply in place");

  // A 5 x 3 block from rows of 7 into rows of 4: the gaps keep their values.
  const std::vector<float> src = RandomVec(5 * 7, 93);
  std::vector<float> dst = RandomVec(5 * 4, 94);
  DeviceBuffer bsrc = Upload(src), bdst = Upload(dst);
  ASSERT_TRUE(be_->CopyRows(5, 3, bsrc.data() + 2, 7, bdst.data(), 4).ok());
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 3; ++c) dst[r * 4 + c] = src[r * 7 + 2 + c];
  ExpectNear(Download(bdst), dst, 0, "copy rows");
  ASSERT_TRUE(be_->CopyRows(0, 3, bsrc.data(), 7, bdst.data(), 4).ok());
  ASSERT_TRUE(be_->CopyRows(5, 0, bsrc.data(), 7, bdst.data(), 4).ok());
  ExpectNear(Download(bdst), dst, 0, "empty copies");
}

TEST_P(NormPoolTest, RejectsBadArguments) {
  DeviceBuffer buf = Zeros(4096);
  float* p = buf.data();
  const auto kBad = absl::StatusCode::kInvalidArgument;
  PoolDesc ok = ToPoolDesc(PoolCase{1, 2, 5, 5, 3, 2, 1});
  for (auto bad : std::vector<std::function<void(PoolDesc&)>>{
           [](PoolDesc& d) { d.pad = 2; },  // pad > window / 2.
           [](PoolDesc& d) { d.stride = -1; },
           [](PoolDesc& d) { d.channels = 0; },
           [](PoolDesc& d) { d.window = 0; },
           [](PoolDesc& d) { d.in_h = 0; },  // Window past the padded input.
           [](PoolDesc& d) { d.pad = -1; }}) {
    PoolDesc d = ok;
    bad(d);
    EXPECT_EQ(be_->MaxPoolForward(d, p, p).code(), kBad);
    EXPECT_EQ(be_->MaxPoolBackward(d, p, p, p, p).code(), kBad);
    EXPECT_EQ(be_->AvgPoolForward(d, p, p).code(), kBad);
    EXPECT_EQ(be_->AvgPoolBackward(d, p, p).code(), kBad);
  }
  BatchNormDesc bn;
  bn.batch = 2;
  bn.channels = 3;
  bn.spatial = 4;
  for (auto bad : std::vector<std::function<void(BatchNormDesc&)>>{
           [](BatchNormDesc& d) { d.batch = 0; },
           [](BatchNormDesc& d) { d.channels = 0; },
           [](BatchNormDesc& d) { d.spatial = 0; },
           [](BatchNormDesc& d) { d.eps = 0.f; },
           [](BatchNormDesc& d) { d.eps = NAN; }}) {
    BatchNormDesc d = bn;
    bad(d);
    EXPECT_EQ(
        be_->BatchNormForwardTraining(d, p, p, p, 0.1f, p, p, p, p, p).code(),
        kBad);
    EXPECT_EQ(be_->BatchNormForwardInference(d, p, p, p, p, p, p).code(), kBad);
    EXPECT_EQ(be_->BatchNormBackward(d, p, p, p, p, p, p, p, p).code(), kBad);
  }
  // One value per channel has no variance to speak of.
  BatchNormDesc one = bn;
  one.batch = 1;
  one.spatial = 1;
  EXPECT_EQ(
      be_->BatchNormForwardTraining(one, p, p, p, 0.1f, p, p, p, p, p).code(),
      kBad);
  EXPECT_EQ(
      be_->BatchNormForwardTraining(bn, p, p, p, NAN, p, p, p, p, p).code(),
      kBad);
  for (float rate : {-0.1f, 1.f, 2.f, NAN}) {
    EXPECT_EQ(be_->DropoutMask(10, rate, 1, p).code(), kBad) << rate;
  }
  EXPECT_EQ(be_->DropoutMask(-1, 0.5f, 1, p).code(), kBad);
  EXPECT_EQ(be_->Multiply(-1, p, p, p).code(), kBad);
  EXPECT_EQ(be_->CopyRows(2, 5, p, 4, p + 100, 8).code(), kBad);
  EXPECT_EQ(be_->CopyRows(2, 5, p, 8, p + 100, 4).code(), kBad);
  EXPECT_EQ(be_->CopyRows(-1, 5, p, 8, p + 100, 8).code(), kBad);
}

// ---- Finite differences -----------------------------------------------------

// d/dx_i of L = sum_o w_o f(x)_o, by central differences of `forward`
// (which writes f(x) for the x given), against the backend's gradient.
void ExpectGradient(
    const std::function<std::vector<float>(const std::vector<float>&)>& f,
    const std::vector<float>& x, const std::vector<float>& w,
    const std::vector<float>& grad, float h, float tol, const char* what) {
  ASSERT_EQ(grad.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<float> xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const std::vector<float> yp = f(xp), ym = f(xm);
    double lp = 0, lm = 0;
    for (size_t o = 0; o < w.size(); ++o) {
      lp += double{w[o]} * yp[o];
      lm += double{w[o]} * ym[o];
    }
    const double fd = (lp - lm) / (double{xp[i]} - xm[i]);
    ASSERT_NEAR(grad[i], fd, tol * (1.0 + std::fabs(fd)))
        << what << " at " << i;
  }
}

TEST_P(NormPoolTest, PoolingGradientsAreFiniteDifferences) {
  for (const PoolCase& c :
       {PoolCase{1, 2, 5, 6, 3, 2, 1}, PoolCase{2, 1, 4, 4, 2, 1, 1}}) {
    const PoolDesc d = ToPoolDesc(c);
    // Distinct values 0.1 apart: a step of 0.01 never changes an argmax.
    std::vector<float> x(InSize(d));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = 0.1f * static_cast<float>((i * 37) % x.size());
    }
    const std::vector<float> w = RandomVec(OutSize(d), 100);
    DeviceBuffer bw = Upload(w), y = Zeros(OutSize(d)), dx = Zeros(InSize(d));
    for (bool max : {true, false}) {
      auto f = [&](const std::vector<float>& v) {
        DeviceBuffer bv = Upload(v);
        absl::Status s = max ? be_->MaxPoolForward(d, bv.data(), y.data())
                             : be_->AvgPoolForward(d, bv.data(), y.data());
        EXPECT_TRUE(s.ok()) << s;
        return Download(y);
      };
      DeviceBuffer bx = Upload(x);
      if (max) {
        ASSERT_TRUE(be_->MaxPoolForward(d, bx.data(), y.data()).ok());
        ASSERT_TRUE(
            be_->MaxPoolBackward(d, bx.data(), y.data(), bw.data(), dx.data())
                .ok());
      } else {
        ASSERT_TRUE(be_->AvgPoolBackward(d, bw.data(), dx.data()).ok());
      }
      ExpectGradient(
          f, x, w, Download(dx), 1e-2f, 1e-3f,
          (std::string(max ? "max " : "avg ") + PoolName(c)).c_str());
    }
  }
}

TEST_P(NormPoolTest, BatchNormGradientsAreFiniteDifferences) {
  struct Case {
    int batch, channels, spatial;
  };
  for (const Case& c : {Case{3, 2, 5}, Case{1, 2, 6}, Case{5, 3, 1}}) {
    BatchNormDesc d;
    d.batch = c.batch;
    d.channels = c.channels;
    d.spatial = c.spatial;
    const int64_t n = d.Size();
    const std::vector<float> x = RandomVec(n, 110, -2.f, 2.f),
                             gamma = RandomVec(c.channels, 111, 0.5f, 1.5f),
                             beta = RandomVec(c.channels, 112),
                             w = RandomVec(n, 113);
    DeviceBuffer bx = Upload(x), bg = Upload(gamma), bb = Upload(beta),
                 bw = Upload(w), y = Zeros(n), mean = Zeros(c.channels),
                 inv = Zeros(c.channels), dx = Zeros(n), dg = Zeros(c.channels),
                 db = Zeros(c.channels);
    // y(x, gamma, beta) as one function of the three, for the differences.
    auto forward = [&](const std::vector<float>& xv,
                       const std::vector<float>& gv,
                       const std::vector<float>& bv) {
      DeviceBuffer px = Upload(xv), pg = Upload(gv), pb = Upload(bv);
      absl::Status s = be_->BatchNormForwardTraining(
          d, px.data(), pg.data(), pb.data(), 0.1f, nullptr, nullptr, y.data(),
          mean.data(), inv.data());
      EXPECT_TRUE(s.ok()) << s;
      return Download(y);
    };
    forward(x, gamma, beta);
    DeviceBuffer m2 = Upload(Download(mean)), i2 = Upload(Download(inv));
    ASSERT_TRUE(be_->BatchNormBackward(d, bx.data(), bw.data(), bg.data(),
                                       m2.data(), i2.data(), dx.data(),
                                       dg.data(), db.data())
                    .ok());
    const std::string what =
        absl::StrCat(c.batch, "x", c.channels, "x", c.spatial);
    ExpectGradient(
        [&](const std::vector<float>& v) { return forward(v, gamma, beta); }, x,
        w, Download(dx), 5e-3f, 5e-3f, ("bn dx " + what).c_str());
    ExpectGradient(
        [&](const std::vector<float>& v) { return forward(x, v, beta); }, gamma,
        w, Download(dg), 5e-3f, 5e-3f, ("bn dgamma " + what).c_str());
    ExpectGradient(
        [&](const std::vector<float>& v) { return forward(x, gamma, v); }, beta,
        w, Download(db), 5e-3f, 5e-3f, ("bn dbeta " + what).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(All, NormPoolTest,
                         ::testing::ValuesIn(AllBackendImpls()),
                         BackendImplName());

// ---- Against the reference backend ------------------------------------------

// Direct convolutions (no Winograd) in the residual block: its ReLUs and
// max pooling must see the same signs and maxima as the reference.
class NormPoolVsReferenceTest
    : public VsReferenceFixture,
      public ::testing::WithParamInterface<BackendImpl> {
 protected:
  void SetUp() override { OpenBoth(GetParam(), /*direct=*/true); }
};

TEST_P(NormPoolVsReferenceTest, Pooling) {
  for (const PoolCase& c :
       {PoolCase{2, 3, 7, 9, 3, 2, 1}, PoolCase{8, 16, 16, 16, 3, 2, 1},
        PoolCase{3, 5, 11, 8, 3, 1, 1}, PoolCase{2, 32, 8, 8, 2, 0, 0},
        PoolCase{1, 1, 2, 2, 2, 0, 1}, PoolCase{4, 16, 8, 8, 8, 0, 0},
        PoolCase{2, 3, 6, 7, 2, 2, 1}}) {
    const PoolDesc d = ToPoolDesc(c);
    std::vector<float> x = RandomVec(InSize(d), 120);
    // Quantized values make ties common.
    for (int64_t i = InSize(d) / 2; i < InSize(d); ++i) {
      x[i] = std::round(x[i] * 2.f);
    }
    const bool overlap = d.Stride() < d.window;
    Pair xin = Upload(x), dy = Upload(RandomVec(OutSize(d), 121));
    for (bool max : {true, false}) {
      const std::string what = absl::StrCat(max ? "max " : "avg ", PoolName(c));
      Pair y = Garbage(OutSize(d), 122), dx = Garbage(InSize(d), 123);
      if (max) {
        BOTH(be->MaxPoolForward(d, pick(xin).data(), pick(y).data()));
        BOTH(be->MaxPoolBackward(d, pick(xin).data(), pick(y).data(),
                                 pick(dy).data(), pick(dx).data()));
        ExpectExact(Got(y), Ref(y), "forward " + what);
        // Overlapping windows add several dy into one cell, in an order of
        // the backend's.
        if (overlap) {
          ExpectSame(dx, "backward " + what);
        } else {
          ExpectExact(Got(dx), Ref(dx), "backward " + what);
        }
      } else {
        BOTH(be->AvgPoolForward(d, pick(xin).data(), pick(y).data()));
        BOTH(be->AvgPoolBackward(d, pick(dy).data(), pick(dx).data()));
        ExpectSame(y, "forward " + what);
        ExpectSame(dx, "backward " + what);
      }
    }
  }
}

TEST_P(NormPoolVsReferenceTest, BatchNorm) {
  struct Case {
    int batch, channels, spatial;
  };
  for (const Case& c : {Case{8, 16, 64}, Case{1, 16, 49}, Case{64, 10, 1},
                        Case{3, 7, 13}, Case{2, 3, 1}}) {
    BatchNormDesc d;
    d.batch = c.batch;
    d.channels = c.channels;
    d.spatial = c.spatial;
    d.eps = 1e-3f;
    const int64_t n = d.Size();
    const std::string what =
        absl::StrCat(c.batch, "x", c.channels, "x", c.spatial);
    Pair x = Upload(RandomVec(n, 130, -3.f, 5.f)),
         gamma = Upload(RandomVec(c.channels, 131, 0.5f, 2.f)),
         beta = Upload(RandomVec(c.channels, 132)),
         rm = Upload(RandomVec(c.channels, 133)),
         rv = Upload(RandomVec(c.channels, 134, 0.5f, 2.f)),
         dy = Upload(RandomVec(n, 135)), y = Garbage(n, 136),
         mean = Garbage(c.channels, 137), inv = Garbage(c.channels, 138),
         dx = Garbage(n, 139), dg = Garbage(c.channels, 140),
         db = Garbage(c.channels, 141), yi = Garbage(n, 142);
    for (int step = 0; step < 2; ++step) {  // The running stats move twice.
      BOTH(be->BatchNormForwardTraining(
          d, pick(x).data(), pick(gamma).data(), pick(beta).data(), 0.25f,
          pick(rm).data(), pick(rv).data(), pick(y).data(), pick(mean).data(),
          pick(inv).data()));
    }
    BOTH(be->BatchNormBackward(d, pick(x).data(), pick(dy).data(),
                               pick(gamma).data(), pick(mean).data(),
                               pick(inv).data(), pick(dx).data(),
                               pick(dg).data(), pick(db).data()));
    BOTH(be->BatchNormForwardInference(d, pick(x).data(), pick(gamma).data(),
                                       pick(beta).data(), pick(rm).data(),
                                       pick(rv).data(), pick(yi).data()));
    ExpectSame(y, "bn y " + what);
    ExpectSame(mean, "bn save_mean " + what);
    ExpectSame(inv, "bn save_invstd " + what);
    ExpectSame(rm, "bn running_mean " + what);
    ExpectSame(rv, "bn running_var " + what);
    ExpectSame(dx, "bn dx " + what);
    ExpectSame(dg, "bn dgamma " + what);
    ExpectSame(db, "bn dbeta " + what);
    ExpectSame(yi, "bn inference " + what);
  }
}

TEST_P(NormPoolVsReferenceTest, DropoutMultiplyCopyRows) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}}) {
    for (float rate : {0.f, 0.5f}) {
      Pair mask = Garbage(n, 150);
      BOTH(be->DropoutMask(n, rate, 99, pick(mask).data()));
      ExpectExact(Got(mask), Ref(mask), absl::StrCat("mask ", n, " ", rate));
      Pair a = Upload(RandomVec(n, 151)), y = Garbage(n, 152);
      BOTH(be->Multiply(n, pick(a).data(), pick(mask).data(), pick(y).data()));
      ExpectExact(Got(y), Ref(y), absl::StrCat("multiply ", n));
    }
  }
  // Concatenation along channels and its gradient: (2, 3, 5) and (2, 4, 5)
  // into (2, 7, 5), then the second part back out.
  const int64_t plane = 5;
  Pair a = Upload(RandomVec(2 * 3 * plane, 153)),
       b = Upload(RandomVec(2 * 4 * plane, 154)),
       cat = Garbage(2 * 7 * plane, 155), back = Garbage(2 * 4 * plane, 156);
  BOTH(be->CopyRows(2, 3 * plane, pick(a).data(), 3 * plane, pick(cat).data(),
                    7 * plane));
  BOTH(be->CopyRows(2, 4 * plane, pick(b).data(), 4 * plane,
                    pick(cat).data() + 3 * plane, 7 * plane));
  BOTH(be->CopyRows(2, 4 * plane, pick(cat).data() + 3 * plane, 7 * plane,
                    pick(back).data(), 4 * plane));
  ExpectExact(Got(cat), Ref(cat), "concatenation");
  ExpectExact(Got(back), Ref(b), "split");
}

// A residual block as a ResNet builds it from these ops, forward and
// backward, with every intermediate tensor kept in backend memory (on the
// oneDNN backend in its blocked layout, 16 channels): conv -> BN -> ReLU ->
// conv -> BN -> + shortcut -> ReLU -> max pool (3, stride 2, pad 1) ->
// average pool -> dropout.
TEST_P(NormPoolVsReferenceTest, ResidualBlockChain) {
  const ConvDesc conv = ToConvDesc(ConvCase{4, 16, 8, 8, 16, 3, 3, 1, 1});
  BatchNormDesc bn;
  bn.batch = 4;
  bn.channels = 16;
  bn.spatial = 64;
  const PoolDesc mp = ToPoolDesc(PoolCase{4, 16, 8, 8, 3, 2, 1});
  const PoolDesc ap = ToPoolDesc(PoolCase{4, 16, 4, 4, 2, 0, 0});
  const int64_t n = bn.Size(), w_n = 16 * 16 * 9, q_n = OutSize(mp),
                r_n = OutSize(ap);
  Pair x = Upload(RandomVec(n, 160)),
       w1 = Upload(RandomVec(w_n, 161, -.2f, .2f)),
       w2 = Upload(RandomVec(w_n, 162, -.2f, .2f)),
       gamma = Upload(RandomVec(16, 163, 0.5f, 1.5f)),
       beta = Upload(RandomVec(16, 164)), rm = Upload(RandomVec(16, 165)),
       rv = Upload(RandomVec(16, 166, 0.5f, 2.f));
  Pair c1 = Garbage(n, 170), b1 = Garbage(n, 171), a1 = Garbage(n, 172),
       c2 = Garbage(n, 173), b2 = Garbage(n, 174), a2 = Garbage(n, 175),
       q = Garbage(q_n, 176), r = Garbage(r_n, 177), mask = Garbage(r_n, 178),
       out = Garbage(r_n, 179), m1 = Garbage(16, 180), i1 = Garbage(16, 181),
       m2 = Garbage(16, 182), i2 = Garbage(16, 183), inf = Garbage(n, 184);
  BOTH(be->Conv2dForward(conv, pick(x).data(), pick(w1).data(), nullptr,
                         pick(c1).data()));
  BOTH(be->BatchNormForwardTraining(bn, pick(c1).data(), pick(gamma).data(),
                                    pick(beta).data(), 0.1f, pick(rm).data(),
                                    pick(rv).data(), pick(b1).data(),
                                    pick(m1).data(), pick(i1).data()));
  BOTH(be->ReluForward(n, pick(b1).data(), pick(a1).data()));
  BOTH(be->Conv2dForward(conv, pick(a1).data(), pick(w2).data(), nullptr,
                         pick(c2).data()));
  BOTH(be->BatchNormForwardTraining(
      bn, pick(c2).data(), pick(gamma).data(), pick(beta).data(), 0.1f, nullptr,
      nullptr, pick(b2).data(), pick(m2).data(), pick(i2).data()));
  BOTH(be->Axpy(n, 1.f, pick(a1).data(), pick(b2).data()));  // Shortcut.
  BOTH(be->ReluForward(n, pick(b2).data(), pick(a2).data()));
  BOTH(be->MaxPoolForward(mp, pick(a2).data(), pick(q).data()));
  BOTH(be->AvgPoolForward(ap, pick(q).data(), pick(r).data()));
  BOTH(be->DropoutMask(r_n, 0.5f, 5, pick(mask).data()));
  BOTH(be->Multiply(r_n, pick(r).data(), pick(mask).data(), pick(out).data()));
  BOTH(be->BatchNormForwardInference(bn, pick(c2).data(), pick(gamma).data(),
                                     pick(beta).data(), pick(rm).data(),
                                     pick(rv).data(), pick(inf).data()));
  ExpectSame(out, "forward output");
  ExpectSame(inf, "inference on the second convolution");

  // Backward.
  Pair dout = Upload(RandomVec(r_n, 190)), dr = Garbage(r_n, 191),
       dq = Garbage(q_n, 192), da2 = Garbage(n, 193), db2 = Garbage(n, 194),
       dc2 = Garbage(n, 195), dg2 = Garbage(16, 196), dbe2 = Garbage(16, 197),
       da1 = Garbage(n, 198), db1 = Garbage(n, 199), dc1 = Garbage(n, 200),
       dg1 = Garbage(16, 201), dbe1 = Garbage(16, 202), dx = Garbage(n, 203),
       dw2 = Garbage(w_n, 204);
  BOTH(
      be->Multiply(r_n, pick(dout).data(), pick(mask).data(), pick(dr).data()));
  BOTH(be->AvgPoolBackward(ap, pick(dr).data(), pick(dq).data()));
  BOTH(be->MaxPoolBackward(mp, pick(a2).data(), pick(q).data(), pick(dq).data(),
                           pick(da2).data()));
  BOTH(
      be->ReluBackward(n, pick(a2).data(), pick(da2).data(), pick(db2).data()));
  BOTH(be->BatchNormBackward(bn, pick(c2).data(), pick(db2).data(),
                             pick(gamma).data(), pick(m2).data(),
                             pick(i2).data(), pick(dc2).data(),
                             pick(dg2).data(), pick(dbe2).data()));
  BOTH(be->Conv2dBackwardFilter(conv, pick(a1).data(), pick(dc2).data(),
                                pick(dw2).data(), nullptr));
  BOTH(be->Conv2dBackwardData(conv, pick(w2).data(), pick(dc2).data(),
                              pick(da1).data()));
  BOTH(be->Axpy(n, 1.f, pick(db2).data(), pick(da1).data()));  // Shortcut.
  BOTH(
      be->ReluBackward(n, pick(a1).data(), pick(da1).data(), pick(db1).data()));
  BOTH(be->BatchNormBackward(bn, pick(c1).data(), pick(db1).data(),
                             pick(gamma).data(), pick(m1).data(),
                             pick(i1).data(), pick(dc1).data(),
                             pick(dg1).data(), pick(dbe1).data()));
  BOTH(be->Conv2dBackwardData(conv, pick(w1).data(), pick(dc1).data(),
                              pick(dx).data()));
  ExpectSame(dq, "dq");
  ExpectSame(da2, "da2");
  ExpectSame(dc2, "dc2");
  ExpectSame(dg2, "dgamma2");
  ExpectSame(dbe2, "dbeta2");
  ExpectSame(dw2, "dw2");
  ExpectSame(dg1, "dgamma1");
  ExpectSame(dbe1, "dbeta1");
  ExpectSame(dx, "dx");
  ExpectSame(rm, "running mean");
  ExpectSame(rv, "running var");
  ExpectSame(a1, "a1 read back after the chain");
}

INSTANTIATE_TEST_SUITE_P(All, NormPoolVsReferenceTest,
                         ::testing::ValuesIn(AllBackendImpls()),
                         BackendImplName());

}  // namespace
}  // namespace downpour
