// Tests of the layers and Model: gradients against central finite
// differences, the fashion_cnn and cifar_vgg layouts, determinism, training
// and errors, on each CPU backend (test_backends.h). The CUDA backend's
// layers and model are checked against the CPU in
// backend_conformance_test.cc.
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/test_backends.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

// Holds one layer bound to host-visible CPU buffers, and evaluates
// L = sum(y * r) for a fixed random r so gradients can be checked numerically.
class LayerHarness {
 public:
  LayerHarness(Backend* be, std::unique_ptr<Layer> layer, Dims in, int batch)
      : be_(be), layer_(std::move(layer)), in_(in), batch_(batch) {
    absl::StatusOr<Dims> out = layer_->Configure(in);
    EXPECT_TRUE(out.ok()) << out.status();
    out_ = *out;
    for (const ParamSpec& p : layer_->Params()) {
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      params_.push_back(RandomVec(n, 100 + params_.size(), -0.5f, 0.5f));
      grads_.push_back(std::vector<float>(n, 0.f));
    }
    std::vector<float*> pp, gp;
    for (auto& p : params_) pp.push_back(p.data());
    for (auto& g : grads_) gp.push_back(g.data());
    absl::Status s = layer_->Bind(be_, pp, gp, batch);
    EXPECT_TRUE(s.ok()) << s;
    r_ = RandomVec(batch * out_.Size(), 7);
    y_.resize(batch * out_.Size());
  }

  // The CPU backend's memory is host memory, so host vectors serve directly.
  double Loss(const std::vector<float>& x) {
    EXPECT_TRUE(layer_->Forward(batch_, x.data(), y_.data()).ok());
    double l = 0;
    for (size_t i = 0; i < y_.size(); ++i) l += double{y_[i]} * r_[i];
    return l;
  }

  // Analytic gradients: dx and (into grads_) parameter gradients.
  std::vector<float> Backward(const std::vector<float>& x) {
    Loss(x);
    std::vector<float> dx(x.size(), 123.f);  // Must be overwritten.
    for (auto& g : grads_) std::fill(g.begin(), g.end(), 456.f);
    absl::Status s =
        layer_->Backward(batch_, x.data(), y_.data(), r_.data(), dx.data());
    EXPECT_TRUE(s.ok()) << s;
    return dx;
  }

  // Checks every component of dx and of each parameter gradient.
  void Check(std::vector<float> x, double eps, double tol) {
    const std::vector<float> dx = Backward(x);
    for (size_t i = 0; i < x.size(); ++i) {
      const float keep = x[i];
      x[i] = keep + eps;
      const double lp = Loss(x);
      x[i] = keep - eps;
      const double lm = Loss(x);
      x[i] = keep;
      const double num = (lp - lm) / (2 * eps);
      ASSERT_NEAR(dx[i], num, tol * (1 + std::fabs(num)))
          << layer_->name() << " dx[" << i << "]";
    }
    for (size_t t = 0; t < params_.size(); ++t) {
      std::vector<float>& p = params_[t];
      for (size_t i = 0; i < p.size(); ++i) {
        const float keep = p[i];
        p[i] = keep + eps;
        const double lp = Loss(x);
        p[i] = keep - eps;
        const double lm = Loss(x);
        p[i] = keep;
        const double num = (lp - lm) / (2 * eps);
        ASSERT_NEAR(grads_[t][i], num, tol * (1 + std::fabs(num)))
            << layer_->name() << " param " << t << "[" << i << "]";
      }
    }
  }

  Dims out() const { return out_; }

 private:
  Backend* be_;
  std::unique_ptr<Layer> layer_;
  Dims in_, out_;
  int batch_;
  std::vector<std::vector<float>> params_, grads_;
  std::vector<float> r_, y_;
};

// Inputs whose entries are at least `gap` apart from each other in magnitude
// and from zero, so ReLU kinks and max-pool ties are not crossed by the
// finite-difference step.
std::vector<float> SpreadInput(int64_t n, uint64_t seed, float gap) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = (static_cast<float>(i) + 1.f) * gap * (i % 2 ? 1.f : -1.f);
  }
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  return v;
}

// The tests below run on each CPU backend (test_backends.h): the harness
// above uses host vectors as backend memory.
class LayerGradTest : public ::testing::TestWithParam<BackendImpl> {
 protected:
  std::unique_ptr<Backend> be_ = MakeBackendOrDie(GetParam(), 1);
};

TEST_P(LayerGradTest, Conv2dPad0) {
  const Dims in{2, 5, 6};
  LayerHarness h(be_.get(), NewConv2d("c", 3, 3, 0), in, 2);
  EXPECT_EQ(h.out(), (Dims{3, 3, 4}));
  h.Check(RandomVec(2 * in.Size(), 1), 1e-2, 2e-3);
}

TEST_P(LayerGradTest, Conv2dPad1OddSize) {
  const Dims in{3, 5, 7};
  LayerHarness h(be_.get(), NewConv2d("c", 2, 3, 1), in, 3);
  EXPECT_EQ(h.out(), (Dims{2, 5, 7}));
  h.Check(RandomVec(3 * in.Size(), 2), 1e-2, 2e-3);
}

TEST_P(LayerGradTest, Relu) {
  const Dims in{2, 3, 3};
  LayerHarness h(be_.get(), NewRelu("r"), in, 2);
  EXPECT_EQ(h.out(), in);
  h.Check(SpreadInput(2 * in.Size(), 3, 0.1f), 1e-2, 2e-3);
}

TEST_P(LayerGradTest, MaxPoolOddSize) {
  const Dims in{2, 5, 7};
  LayerHarness h(be_.get(), NewMaxPool("p", 2), in, 2);
  EXPECT_EQ(h.out(), (Dims{2, 2, 3}));
  h.Check(SpreadInput(2 * in.Size(), 4, 0.05f), 1e-2, 2e-3);
}

TEST_P(LayerGradTest, Flatten) {
  const Dims in{3, 2, 4};
  LayerHarness h(be_.get(), NewFlatten("f"), in, 2);
  EXPECT_EQ(h.out(), (Dims{24, 1, 1}));
  h.Check(RandomVec(2 * in.Size(), 5), 1e-2, 2e-3);
}

TEST_P(LayerGradTest, Dense) {
  const Dims in{2, 3, 2};  // Dense also accepts unflattened input.
  LayerHarness h(be_.get(), NewDense("d", 5), in, 4);
  EXPECT_EQ(h.out(), (Dims{5, 1, 1}));
  h.Check(RandomVec(4 * in.Size(), 6), 1e-2, 2e-3);
}

INSTANTIATE_TEST_SUITE_P(Cpu, LayerGradTest,
                         ::testing::ValuesIn(CpuBackendImpls()),
                         BackendImplName());

// ---- Conv2d + ReLU fusion --------------------------------------------------

// Backend buffers of a layer's tensors, read and written through the backend
// (the oneDNN backend keeps activations in its own layout).
class BackendHarness {
 public:
  explicit BackendHarness(Backend* be) : be_(be) {}
  float* Upload(const std::vector<float>& v) {
    float* p = Zeros(static_cast<int64_t>(v.size()));
    EXPECT_TRUE(be_->CopyToDevice(v.data(), p, v.size()).ok());
    return p;
  }
  float* Zeros(int64_t n) {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Create(be_, n);
    EXPECT_TRUE(b.ok()) << b.status();
    bufs_.push_back(std::move(*b));
    return bufs_.back().data();
  }
  std::vector<float> Download(const float* p, int64_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE(be_->CopyToHost(p, v.data(), n).ok());
    return v;
  }

 private:
  Backend* const be_;  // Not owned.
  std::vector<DeviceBuffer> bufs_;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
        << what << " at " << i;
  }
}

class ConvReluFusionTest : public ::testing::TestWithParam<BackendImpl> {};

// NewConv2dRelu against NewConv2d + NewRelu on the same parameters: the same
// parameter specs, forward output and gradients, at the bound batch and then
// a smaller one. 16/32 channels: the oneDNN backend's blocked layouts (and
// Winograd kernels, where the CPU has them) with the ReLU as post-op.
TEST_P(ConvReluFusionTest, LayerMatchesConvThenRelu) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  const Dims in{16, 6, 7};
  const int max_batch = 3;
  std::unique_ptr<Layer> conv = NewConv2d("c", 32, 3, 1);
  std::unique_ptr<Layer> relu = NewRelu("r");
  std::unique_ptr<Layer> fused = NewConv2dRelu("c", 32, 3, 1);
  absl::StatusOr<Dims> mid = conv->Configure(in);
  ASSERT_TRUE(mid.ok()) << mid.status();
  ASSERT_TRUE(relu->Configure(*mid).ok());
  absl::StatusOr<Dims> out = fused->Configure(in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, *mid);
  EXPECT_EQ(fused->name(), "c");
  const std::vector<ParamSpec> specs = conv->Params(),
                               fused_specs = fused->Params();
  ASSERT_EQ(fused_specs.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(fused_specs[i].suffix, specs[i].suffix);
    EXPECT_EQ(fused_specs[i].shape, specs[i].shape);
    EXPECT_EQ(fused_specs[i].init, specs[i].init);
    EXPECT_EQ(fused_specs[i].fan_in, specs[i].fan_in);
  }

  BackendHarness h(be.get());
  const int64_t w_n = 32 * 16 * 9, x_n = max_batch * in.Size(),
                y_n = max_batch * out->Size();
  float* w = h.Upload(RandomVec(w_n, 60, -0.2f, 0.2f));
  float* b = h.Upload(RandomVec(32, 61, -0.2f, 0.2f));
  float *dw1 = h.Zeros(w_n), *db1 = h.Zeros(32), *dw2 = h.Zeros(w_n),
        *db2 = h.Zeros(32);
  ASSERT_TRUE(conv->Bind(be.get(), {w, b}, {dw1, db1}, max_batch).ok());
  ASSERT_TRUE(relu->Bind(be.get(), {}, {}, max_batch).ok());
  ASSERT_TRUE(fused->Bind(be.get(), {w, b}, {dw2, db2}, max_batch).ok());
  float *x = h.Upload(RandomVec(x_n, 62)), *dy = h.Upload(RandomVec(y_n, 63));
  float *pre = h.Zeros(y_n), *y1 = h.Zeros(y_n), *y2 = h.Zeros(y_n),
        *g = h.Zeros(y_n), *dx1 = h.Zeros(x_n), *dx2 = h.Zeros(x_n);
  const double tol = 1e-5;
  for (int batch : {max_batch, 2}) {
    SCOPED_TRACE(batch);
    const int64_t xb = batch * in.Size(), yb = batch * out->Size();
    ASSERT_TRUE(conv->Forward(batch, x, pre).ok());
    ASSERT_TRUE(relu->Forward(batch, pre, y1).ok());
    ASSERT_TRUE(fused->Forward(batch, x, y2).ok());
    const std::vector<float> want_y = h.Download(y1, yb);
    ExpectClose(h.Download(y2, yb), want_y, tol, "forward");
    int positive = 0;
    for (float v : want_y) positive += v > 0.f;
    EXPECT_GT(positive, yb / 4);  // The mask is not trivial.
    EXPECT_LT(positive, 3 * yb / 4);

    ASSERT_TRUE(relu->Backward(batch, pre, y1, dy, g).ok());
    ASSERT_TRUE(conv->Backward(batch, x, pre, g, dx1).ok());
    ASSERT_TRUE(fused->Backward(batch, x, y2, dy, dx2).ok());
    ExpectClose(h.Download(dx2, xb), h.Download(dx1, xb), tol, "dx");
    ExpectClose(h.Download(dw2, w_n), h.Download(dw1, w_n), tol, "dw");
    ExpectClose(h.Download(db2, 32), h.Download(db1, 32), tol, "db");
    // dx may be null (the first layer).
    ASSERT_TRUE(fused->Backward(batch, x, y2, dy, nullptr).ok());
    ExpectClose(h.Download(dw2, w_n), h.Download(dw1, w_n), tol, "dw, no dx");
  }
}

// The layer names FuseConvRelu leaves: each conv directly followed by a relu
// absorbs it; nothing else changes.
TEST(FuseConvReluTest, FoldsOnlyConvThenRelu) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(NewConv2d("c1", 4, 3, 1));
  layers.push_back(NewRelu("r1"));
  layers.push_back(NewRelu("r1b"));  // A second ReLU stays.
  layers.push_back(NewConv2d("c2", 4, 3, 1));  // No ReLU after it.
  layers.push_back(NewMaxPool("p", 2));
  layers.push_back(NewConv2d("c3", 4, 3, 1));
  layers.push_back(NewRelu("r3"));
  layers.push_back(NewDense("d", 5));
  layers.push_back(NewRelu("rd"));  // After a dense layer: not fused.
  layers.push_back(NewConv2dRelu("c4", 4, 1, 0));
  layers.push_back(NewRelu("r4"));  // After a fused layer: stays.
  std::vector<std::unique_ptr<Layer>> fused = FuseConvRelu(std::move(layers));
  std::vector<std::string> names;
  for (const auto& l : fused) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"c1", "r1b", "c2", "p", "c3", "d",
                                             "rd", "c4", "r4"}));
  EXPECT_TRUE(FuseConvRelu({}).empty());
}

// BuildModel's fused models (the default) against the unfused ones: the same
// parameter specs (names, shapes, flat order: checkpoints and the servers'
// layouts depend on them) and, on the same parameters and batch, the same
// loss, accuracy and gradients up to float rounding; twice, the second time
// at a smaller batch.
TEST_P(ConvReluFusionTest, BuiltModelsMatchUnfused) {
  for (const char* name : {"fashion_cnn", "cifar_vgg"}) {
    SCOPED_TRACE(name);
    auto be = MakeBackendOrDie(GetParam(), 1);
    const int max_batch = 3;
    BuildModelOptions unfused_options;
    unfused_options.fuse_conv_relu = false;
    auto fused = BuildModel(name, be.get(), max_batch);
    auto unfused = BuildModel(name, be.get(), max_batch, unfused_options);
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    Model &f = **fused, &u = **unfused;
    EXPECT_EQ(f.param_specs(), u.param_specs());
    ASSERT_EQ(f.num_parameters(), u.num_parameters());
    EXPECT_EQ(f.InitialParameters(8), u.InitialParameters(8));
    std::vector<float> params = f.InitialParameters(8);
    const std::vector<float> noise = RandomVec(params.size(), 9, -0.01f, 0.01f);
    for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
    ASSERT_TRUE(f.SetParameters(params).ok());
    ASSERT_TRUE(u.SetParameters(params).ok());
    const std::vector<float> x =
        RandomVec(max_batch * f.input_dims().Size(), 10, 0.f, 1.f);
    const std::vector<int32_t> labels = {1, 7, 4};
    for (int batch : {max_batch, 2}) {
      SCOPED_TRACE(batch);
      auto rf = f.ComputeGradients(x.data(), labels.data(), batch);
      auto ru = u.ComputeGradients(x.data(), labels.data(), batch);
      ASSERT_TRUE(rf.ok()) << rf.status();
      ASSERT_TRUE(ru.ok()) << ru.status();
      EXPECT_NEAR(rf->loss, ru->loss, 1e-5 * (1 + std::fabs(ru->loss)));
      EXPECT_EQ(rf->correct, ru->correct);
      std::vector<float> gf(f.num_parameters()), gu(u.num_parameters());
      ASSERT_TRUE(be->CopyToHost(f.gradients(), gf.data(), gf.size()).ok());
      ASSERT_TRUE(be->CopyToHost(u.gradients(), gu.data(), gu.size()).ok());
      double norm = 0;
      for (float v : gu) norm = std::max(norm, double{std::fabs(v)});
      ASSERT_GT(norm, 0);
      for (size_t i = 0; i < gu.size(); ++i) {
        ASSERT_NEAR(gf[i], gu[i], 1e-5 * norm + 1e-4 * std::fabs(gu[i]))
            << "gradient " << i;
      }
      auto ef = f.Evaluate(x.data(), labels.data(), batch);
      auto eu = u.Evaluate(x.data(), labels.data(), batch);
      ASSERT_TRUE(ef.ok() && eu.ok());
      EXPECT_NEAR(ef->loss, eu->loss, 1e-5 * (1 + std::fabs(eu->loss)));
      EXPECT_EQ(ef->correct, eu->correct);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, ConvReluFusionTest,
                         ::testing::ValuesIn(CpuBackendImpls()),
                         BackendImplName());

// ---- Models -----------------------------------------------------------------

// A small model exercising every layer type; with `fuse`, its conv and ReLU
// are one layer.
absl::StatusOr<std::unique_ptr<Model>> SmallModel(Backend* be, int max_batch,
                                                  int classes = 4,
                                                  bool fuse = false) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(NewConv2d("conv", 3, 3, 1));
  layers.push_back(NewRelu("relu"));
  layers.push_back(NewMaxPool("pool", 2));
  layers.push_back(NewFlatten("flat"));
  layers.push_back(NewDense("fc1", 6));
  layers.push_back(NewRelu("relu2"));
  layers.push_back(NewDense("fc2", classes));
  if (fuse) layers = FuseConvRelu(std::move(layers));
  return Model::Create(be, std::move(layers), Dims{2, 6, 5}, max_batch);
}

// Parameters: the backend, and whether the model's conv and ReLU are fused.
class SoftmaxGradientTest
    : public ::testing::TestWithParam<std::tuple<BackendImpl, bool>> {};

TEST_P(SoftmaxGradientTest, MatchFiniteDifferences) {
  auto be = MakeBackendOrDie(std::get<0>(GetParam()), 1);
  auto model = SmallModel(be.get(), 8, 4, /*fuse=*/std::get<1>(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  EXPECT_EQ(m.num_classes(), 4);
  const int batch = 5;
  std::vector<float> params = m.InitialParameters(3);
  // Non-zero biases so their gradients are exercised in a generic point.
  std::vector<float> noise = RandomVec(params.size(), 9, -0.05f, 0.05f);
  for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  ASSERT_TRUE(m.SetParameters(params).ok());
  const std::vector<float> x = RandomVec(batch * m.input_dims().Size(), 10);
  const std::vector<int32_t> labels = {0, 3, 1, 2, 3};

  auto r = m.ComputeGradients(x.data(), labels.data(), batch);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> grads(m.num_parameters());
  ASSERT_TRUE(be->CopyToHost(m.gradients(), grads.data(), grads.size()).ok());
  auto eval = m.Evaluate(x.data(), labels.data(), batch);
  ASSERT_TRUE(eval.ok());
  EXPECT_FLOAT_EQ(eval->loss, r->loss);
  EXPECT_EQ(eval->correct, r->correct);

  const double eps = 1e-3;
  int checked = 0, mismatched = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const float keep = params[i];
    params[i] = keep + eps;
    ASSERT_TRUE(m.SetParameters(params).ok());
    const double lp = m.Evaluate(x.data(), labels.data(), batch)->loss;
    params[i] = keep - eps;
    ASSERT_TRUE(m.SetParameters(params).ok());
    const double lm = m.Evaluate(x.data(), labels.data(), batch)->loss;
    params[i] = keep;
    const double num = (lp - lm) / (2 * eps);
    ++checked;
    // A step can cross a ReLU or max-pool kink; tolerate a handful of those.
    if (std::fabs(grads[i] - num) > 2e-3 + 1e-2 * std::fabs(num)) {
      ++mismatched;
      ADD_FAILURE_AT(__FILE__, __LINE__)
          << "param " << i << " analytic " << grads[i] << " numeric " << num;
      if (mismatched > 3) break;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(params.size()));
}

INSTANTIATE_TEST_SUITE_P(
    ConvRelu, SoftmaxGradientTest,
    ::testing::Combine(::testing::ValuesIn(CpuBackendImpls()),
                       ::testing::Values(false, true)),
    [](const ::testing::TestParamInfo<std::tuple<BackendImpl, bool>>& info) {
      return std::get<0>(info.param).name +
             (std::get<1>(info.param) ? "_Fused" : "_Unfused");
    });

class ModelTest : public ::testing::TestWithParam<BackendImpl> {};

// Label smoothing changes the training loss and its gradients only: the
// same batch gives a different ComputeGradients loss and gradient, the same
// Evaluate loss, and its logits' gradient rows still sum to zero (so the
// last layer's bias gradient sums to zero too: q and softmax both sum to 1).
TEST_P(ModelTest, LabelSmoothingChangesOnlyTheTrainingLoss) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  BuildModelOptions smooth;
  smooth.label_smoothing = 0.1f;
  auto plain = BuildModel("fashion_cnn", be.get(), 4);
  auto smoothed = BuildModel("fashion_cnn", be.get(), 4, smooth);
  ASSERT_TRUE(plain.ok() && smoothed.ok());
  const std::vector<float> w = (*plain)->InitialParameters(3);
  ASSERT_TRUE((*plain)->SetParameters(w).ok());
  ASSERT_TRUE((*smoothed)->SetParameters(w).ok());
  std::vector<float> x = RandomVec(4 * 28 * 28, 5, 0.f, 1.f);
  const std::vector<int32_t> labels = {0, 3, 9, 3};
  auto train_p = (*plain)->ComputeGradients(x.data(), labels.data(), 4);
  auto train_s = (*smoothed)->ComputeGradients(x.data(), labels.data(), 4);
  auto eval_p = (*plain)->Evaluate(x.data(), labels.data(), 4);
  auto eval_s = (*smoothed)->Evaluate(x.data(), labels.data(), 4);
  ASSERT_TRUE(train_p.ok() && train_s.ok() && eval_p.ok() && eval_s.ok());
  EXPECT_GT(std::fabs(train_s->loss - train_p->loss), 1e-4f);
  EXPECT_EQ(eval_s->loss, eval_p->loss);
  EXPECT_FLOAT_EQ(train_p->loss, eval_p->loss);
  const int64_t n = (*plain)->num_parameters();
  std::vector<float> gp(n), gs(n);
  ASSERT_TRUE(be->CopyToHost((*plain)->gradients(), gp.data(), n).ok());
  ASSERT_TRUE(be->CopyToHost((*smoothed)->gradients(), gs.data(), n).ok());
  EXPECT_NE(gp, gs);
  double bias_sum = 0;  // fc2.bias: the last 10 parameters.
  for (int64_t i = n - 10; i < n; ++i) bias_sum += gs[i];
  EXPECT_NEAR(bias_sum, 0.0, 1e-6);

  smooth.label_smoothing = 1.0f;
  EXPECT_EQ(BuildModel("fashion_cnn", be.get(), 4, smooth).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ModelTest, FashionCnnLayout) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto model = BuildModel("fashion_cnn", be.get(), 16);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<TensorSpec> want = {
      {"conv1.weight", {32, 1, 3, 3}},  {"conv1.bias", {32}},
      {"conv2.weight", {64, 32, 3, 3}}, {"conv2.bias", {64}},
      {"fc1.weight", {128, 1600}},      {"fc1.bias", {128}},
      {"fc2.weight", {10, 128}},        {"fc2.bias", {10}},
  };
  EXPECT_EQ((*model)->param_specs(), want);
  EXPECT_EQ((*model)->num_parameters(), 225034);
  EXPECT_EQ((*model)->input_dims(), (Dims{1, 28, 28}));
  EXPECT_EQ((*model)->num_classes(), 10);
  EXPECT_EQ((*model)->max_batch(), 16);
  EXPECT_EQ((*model)->backend(), be.get());

  auto bad = BuildModel("resnet9000", be.get(), 16);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("fashion_cnn"), std::string::npos);
}

TEST_P(ModelTest, CifarVggLayout) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto model = BuildModel("cifar_vgg", be.get(), 8);
  ASSERT_TRUE(model.ok()) << model.status();
  // Parameters, weights + biases (3x3 convs: out * in * 9 + out):
  //   conv1   64 *   3 * 9 +  64 =     1,792
  //   conv2   64 *  64 * 9 +  64 =    36,928
  //   conv3  128 *  64 * 9 + 128 =    73,856
  //   conv4  128 * 128 * 9 + 128 =   147,584
  //   conv5  256 * 128 * 9 + 256 =   295,168
  //   conv6  256 * 256 * 9 + 256 =   590,080
  //   fc1    256 * 4096    + 256 = 1,048,832   (4096 = 256 channels * 4 * 4)
  //   fc2     10 * 256     +  10 =     2,570
  //   total                        2,196,810
  const std::vector<TensorSpec> want = {
      {"conv1.weight", {64, 3, 3, 3}},    {"conv1.bias", {64}},
      {"conv2.weight", {64, 64, 3, 3}},   {"conv2.bias", {64}},
      {"conv3.weight", {128, 64, 3, 3}},  {"conv3.bias", {128}},
      {"conv4.weight", {128, 128, 3, 3}}, {"conv4.bias", {128}},
      {"conv5.weight", {256, 128, 3, 3}}, {"conv5.bias", {256}},
      {"conv6.weight", {256, 256, 3, 3}}, {"conv6.bias", {256}},
      {"fc1.weight", {256, 4096}},        {"fc1.bias", {256}},
      {"fc2.weight", {10, 256}},          {"fc2.bias", {10}},
  };
  EXPECT_EQ((*model)->param_specs(), want);
  EXPECT_EQ((*model)->num_parameters(), 2196810);
  EXPECT_EQ((*model)->input_dims(), (Dims{3, 32, 32}));
  EXPECT_EQ((*model)->num_classes(), 10);

  auto bad = BuildModel("resnet9000", be.get(), 16);
  EXPECT_NE(bad.status().message().find("cifar_vgg"), std::string::npos);
}

// Central differences on a few coordinates of the full network: in each of
// several tensors, the coordinate with the largest analytic gradient (so the
// check is not lost in float32 rounding of the loss). The step is small
// enough not to cross ReLU / max-pool kinks here (3e-3 already does for
// conv4), large enough for float32 losses.
TEST_P(ModelTest, CifarVggGradientsMatchFiniteDifferences) {
  auto be = MakeBackendOrDie(GetParam(), 2);
  auto model = BuildModel("cifar_vgg", be.get(), 2);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  const int batch = 2;
  std::vector<float> params = m.InitialParameters(21);
  std::vector<float> noise = RandomVec(params.size(), 22, -0.01f, 0.01f);
  for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  ASSERT_TRUE(m.SetParameters(params).ok());
  const std::vector<float> x =
      RandomVec(batch * m.input_dims().Size(), 23, 0.f, 1.f);
  const std::vector<int32_t> labels = {3, 8};
  auto r = m.ComputeGradients(x.data(), labels.data(), batch);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(std::isfinite(r->loss));
  std::vector<float> grads(m.num_parameters());
  ASSERT_TRUE(be->CopyToHost(m.gradients(), grads.data(), grads.size()).ok());

  int64_t offset = 0;
  int checked = 0;
  for (const TensorSpec& t : m.param_specs()) {
    const int64_t n = t.NumElements();
    const bool wanted = t.name == "conv1.weight" || t.name == "conv4.weight" ||
                        t.name == "conv6.bias" || t.name == "fc1.weight" ||
                        t.name == "fc2.weight" || t.name == "fc2.bias";
    if (wanted) {
      int64_t best = offset;
      for (int64_t i = offset; i < offset + n; ++i) {
        if (std::fabs(grads[i]) > std::fabs(grads[best])) best = i;
      }
      const double eps = 1e-3;
      const float keep = params[best];
      params[best] = keep + eps;
      ASSERT_TRUE(m.SetParameters(params).ok());
      const double lp = m.Evaluate(x.data(), labels.data(), batch)->loss;
      params[best] = keep - eps;
      ASSERT_TRUE(m.SetParameters(params).ok());
      const double lm = m.Evaluate(x.data(), labels.data(), batch)->loss;
      params[best] = keep;
      const double num = (lp - lm) / (2 * eps);
      EXPECT_GT(std::fabs(grads[best]), 1e-3) << t.name;
      EXPECT_NEAR(grads[best], num, 1e-3 + 1e-2 * std::fabs(num))
          << t.name << " coordinate " << best - offset;
      ++checked;
    }
    offset += n;
  }
  EXPECT_EQ(checked, 6);
}

TEST_P(ModelTest, InitialParametersDeterministic) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto model = BuildModel("fashion_cnn", be.get(), 4);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  const std::vector<float> a = m.InitialParameters(1);
  EXPECT_EQ(a, m.InitialParameters(1));
  EXPECT_NE(a, m.InitialParameters(2));
  ASSERT_EQ(static_cast<int64_t>(a.size()), m.num_parameters());

  // Weights lie in the He-uniform range and fill it; biases are zero.
  int64_t offset = 0;
  for (const TensorSpec& t : m.param_specs()) {
    const int64_t n = t.NumElements();
    const bool is_bias = t.name.find(".bias") != std::string::npos;
    double fan_in = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) fan_in *= t.shape[d];
    const double bound = std::sqrt(6.0 / fan_in);
    double lo = 0, hi = 0, sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = a[offset + i];
      if (is_bias) {
        ASSERT_EQ(v, 0.f) << t.name;
      } else {
        ASSERT_LE(std::fabs(v), bound) << t.name;
      }
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
      sum += v;
    }
    if (!is_bias) {
      EXPECT_LT(lo, -0.8 * bound) << t.name;
      EXPECT_GT(hi, 0.8 * bound) << t.name;
      EXPECT_LT(std::fabs(sum / n), 0.2 * bound) << t.name;
    }
    offset += n;
  }

  // Round trip through the parameter buffer.
  ASSERT_TRUE(m.SetParameters(a).ok());
  std::vector<float> back(a.size());
  ASSERT_TRUE(m.GetParameters(absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, a);
}

TEST_P(ModelTest, SgdReducesLossOnSeparableData) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  const int classes = 3, n = 24;
  auto model = SmallModel(be.get(), n, classes);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  ASSERT_TRUE(m.SetParameters(m.InitialParameters(5)).ok());

  // Class k: a bright horizontal band at rows 2k..2k+1, plus noise.
  const Dims in = m.input_dims();
  std::vector<float> x(n * in.Size());
  std::vector<int32_t> labels(n);
  std::mt19937_64 rng(11);
  for (int i = 0; i < n; ++i) {
    labels[i] = i % classes;
    for (int c = 0; c < in.c; ++c)
      for (int h = 0; h < in.h; ++h)
        for (int w = 0; w < in.w; ++w) {
          const float noise = ((rng() >> 40) * 0x1.0p-24f - 0.5f) * 0.2f;
          const bool on = h / 2 == labels[i];
          x[((i * in.c + c) * in.h + h) * in.w + w] = (on ? 1.f : 0.f) + noise;
        }
  }

  auto first = m.Evaluate(x.data(), labels.data(), n);
  ASSERT_TRUE(first.ok());
  float last = 0;
  for (int step = 0; step < 40; ++step) {
    auto r = m.ComputeGradients(x.data(), labels.data(), n);
    ASSERT_TRUE(r.ok()) << r.status();
    last = r->loss;
    ASSERT_TRUE(
        be->Axpy(m.num_parameters(), -0.2f, m.gradients(), m.parameters())
            .ok());
  }
  auto final_eval = m.Evaluate(x.data(), labels.data(), n);
  ASSERT_TRUE(final_eval.ok());
  EXPECT_LT(final_eval->loss, 0.5f * first->loss)
      << "initial " << first->loss << " last step " << last;
  EXPECT_EQ(final_eval->correct, n);
}

TEST_P(ModelTest, RejectsBadBatchesAndLabels) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto model = SmallModel(be.get(), 4);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  const std::vector<float> x(5 * m.input_dims().Size(), 0.5f);
  std::vector<int32_t> labels = {0, 1, 2, 3, 0};
  for (int batch : {0, -1, 5}) {
    EXPECT_EQ(
        m.ComputeGradients(x.data(), labels.data(), batch).status().code(),
        absl::StatusCode::kInvalidArgument)
        << batch;
    EXPECT_EQ(m.Evaluate(x.data(), labels.data(), batch).status().code(),
              absl::StatusCode::kInvalidArgument)
        << batch;
  }
  for (int32_t bad : {4, -1, 1 << 30}) {
    labels[1] = bad;
    EXPECT_EQ(m.ComputeGradients(x.data(), labels.data(), 2).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  labels[1] = 3;
  EXPECT_TRUE(m.ComputeGradients(x.data(), labels.data(), 4).ok());

  std::vector<float> wrong(m.num_parameters() + 1);
  EXPECT_EQ(m.SetParameters(wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.GetParameters(absl::MakeSpan(wrong)).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(SmallModel(be.get(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::unique_ptr<Layer>> too_small;
  too_small.push_back(NewConv2d("c", 2, 5, 0));
  EXPECT_EQ(Model::Create(be.get(), std::move(too_small), Dims{1, 3, 3}, 2)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::unique_ptr<Layer>> dup;
  dup.push_back(NewDense("d", 3));
  dup.push_back(NewDense("d", 3));
  EXPECT_EQ(
      Model::Create(be.get(), std::move(dup), Dims{4, 1, 1}, 2).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_P(ModelTest, ThreadCountDoesNotChangeResults) {
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  for (int threads : {0, 1, 2, 3}) {
    auto be = MakeBackendOrDie(GetParam(), threads);
    auto model = BuildModel("fashion_cnn", be.get(), 8);
    ASSERT_TRUE(model.ok());
    Model& m = **model;
    ASSERT_TRUE(m.SetParameters(m.InitialParameters(4)).ok());
    const std::vector<float> x = RandomVec(7 * 784, 12, 0.f, 1.f);
    const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 5, 9};
    auto r = m.ComputeGradients(x.data(), labels.data(), 7);
    ASSERT_TRUE(r.ok()) << r.status();
    losses.push_back(r->loss);
    grads.emplace_back(m.num_parameters());
    ASSERT_TRUE(
        be->CopyToHost(m.gradients(), grads.back().data(), m.num_parameters())
            .ok());
  }
  for (size_t t = 1; t < grads.size(); ++t) {
    EXPECT_NEAR(losses[t], losses[0], 1e-5);
    for (size_t i = 0; i < grads[0].size(); ++i) {
      ASSERT_NEAR(grads[t][i], grads[0][i],
                  1e-5 + 1e-4 * std::fabs(grads[0][i]))
          << "threads variant " << t << " param " << i;
    }
  }
}

// Information only: fashion_cnn forward + backward time at batch 64.
TEST_P(ModelTest, FashionCnnTiming) {
  for (int threads : {1, 2}) {
    auto be = MakeBackendOrDie(GetParam(), threads);
    auto model = BuildModel("fashion_cnn", be.get(), 64);
    ASSERT_TRUE(model.ok());
    Model& m = **model;
    ASSERT_TRUE(m.SetParameters(m.InitialParameters(1)).ok());
    const std::vector<float> x = RandomVec(64 * 784, 3, 0.f, 1.f);
    std::vector<int32_t> labels(64);
    for (int i = 0; i < 64; ++i) labels[i] = i % 10;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(m.ComputeGradients(x.data(), labels.data(), 64).ok());
    }
    const int iters = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      ASSERT_TRUE(m.ComputeGradients(x.data(), labels.data(), 64).ok());
    }
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count() /
                      iters;
    std::printf(
        "fashion_cnn fwd+bwd batch 64, %s, %d backend thread(s): %.2f ms\n",
        GetParam().name.c_str(), threads, ms);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, ModelTest,
                         ::testing::ValuesIn(CpuBackendImpls()),
                         BackendImplName());

}  // namespace
}  // namespace downpour
