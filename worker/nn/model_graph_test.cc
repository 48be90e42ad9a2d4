// Tests of graph models (model.h's GraphNode API and model_builder.h): the
// gradients of a branching, residual network with batch norm against
// central finite differences, fan-out gradients, conv + ReLU fusion on a
// graph, batch norm's running statistics in training, evaluation and
// UpdateStatistics, dropout, graph errors, and the built-in fashion_cnn spec
// against the sequential network it replaces. On each CPU backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/test_backends.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

class ModelGraphTest : public ::testing::TestWithParam<BackendImpl> {
 protected:
  void SetUp() override { be_ = MakeBackendOrDie(GetParam(), /*threads=*/1); }
  std::unique_ptr<Backend> be_;
};

// Input 2x6x6: a stem conv + batch norm + ReLU read by two branches
// (1x1 conv + ReLU, 3x3 conv) that are concatenated, projected and added to
// the stem (a residual), then average pooling, batch norm, max pooling with
// stride 1 and padding 1, global average pooling, dropout and dense 3.
std::vector<GraphNode> BranchyGraph(float dropout_rate) {
  std::vector<GraphNode> g;
  g.push_back({NewConv2d("stem", 4, 3, 1), {-1}});                 // 0
  g.push_back({NewBatchNorm("bn1"), {0}});                         // 1
  g.push_back({NewRelu("relu1"), {1}});                            // 2
  g.push_back({NewConv2d("a", 3, 1, 0), {2}});                     // 3
  g.push_back({NewRelu("relu_a"), {3}});                           // 4
  g.push_back({NewConv2d("b", 2, 3, 1, 1, /*bias=*/false), {2}});  // 5
  g.push_back({NewConcat("cat"), {4, 5}});                         // 6
  g.push_back({NewConv2d("proj", 4, 1, 0), {6}});                  // 7
  g.push_back({NewAdd("sum"), {7, 2}});                            // 8
  g.push_back({NewAvgPool("ap", 2), {8}});                         // 9
  g.push_back({NewBatchNorm("bn2"), {9}});                         // 10
  g.push_back({NewMaxPool("mp", 3, 1, 1), {10}});                  // 11
  g.push_back({NewGlobalAvgPool("gap"), {11}});                    // 12
  g.push_back({NewDropout("drop", dropout_rate), {12}});           // 13
  g.push_back({NewDense("fc", 3), {13}});                          // 14
  return g;
}

constexpr Dims kIn{2, 6, 6};
constexpr int kBatch = 4;

std::unique_ptr<Model> MakeModel(Backend* be, std::vector<GraphNode> g,
                                 int max_batch = kBatch) {
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Create(be, std::move(g), kIn, max_batch);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<float> Gradients(Model* m) {
  std::vector<float> g(m->num_parameters());
  EXPECT_TRUE(m->backend()->CopyToHost(m->gradients(), g.data(), g.size()).ok());
  EXPECT_TRUE(m->backend()->Synchronize().ok());
  return g;
}

TEST_P(ModelGraphTest, GradientsMatchFiniteDifferences) {
  std::unique_ptr<Model> m = MakeModel(be_.get(), BranchyGraph(0.f));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->num_classes(), 3);
  // Batch norm: weight and bias are parameters, the statistics state.
  ASSERT_EQ(m->state_specs().size(), 4u);
  EXPECT_EQ(m->state_specs()[0].name, "bn1.running_mean");
  std::vector<float> params = m->InitialParameters(5);
  // Random batch-norm affine values, so their gradients are not special.
  for (float& p : params) p += 0.1f * std::sin(7.f * (&p - params.data()));
  const std::vector<float> x = RandomVec(kBatch * kIn.Size(), 11);
  const std::vector<int32_t> y = {0, 2, 1, 2};

  ASSERT_TRUE(m->SetParameters(params).ok());
  ASSERT_TRUE(m->ComputeGradients(x.data(), y.data(), kBatch).ok());
  const std::vector<float> grad = Gradients(m.get());
  auto loss_at = [&](const std::vector<float>& p) {
    EXPECT_TRUE(m->SetParameters(p).ok());
    absl::StatusOr<StepResult> r = m->ComputeGradients(x.data(), y.data(), kBatch);
    EXPECT_TRUE(r.ok()) << r.status();
    return static_cast<double>(r->loss);
  };
  const double eps = 2e-3;
  int checked = 0;
  for (int64_t i = 0; i < m->num_parameters(); i += 7) {
    std::vector<float> p = params;
    p[i] = params[i] + eps;
    const double lp = loss_at(p);
    p[i] = params[i] - eps;
    const double lm = loss_at(p);
    const double num = (lp - lm) / (2 * eps);
    EXPECT_NEAR(grad[i], num, 3e-3 + 3e-2 * std::fabs(num))
        << "parameter " << i;
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

TEST_P(ModelGraphTest, FusedGraphMatchesUnfused) {
  std::vector<GraphNode> fused_graph = FuseConvReluGraph(BranchyGraph(0.f));
  // relu_a is folded into conv a, relu1 into batch norm bn1.
  EXPECT_EQ(fused_graph.size(), BranchyGraph(0.f).size() - 2);
  std::unique_ptr<Model> fused = MakeModel(be_.get(), std::move(fused_graph));
  std::unique_ptr<Model> plain = MakeModel(be_.get(), BranchyGraph(0.f));
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(fused->param_specs(), plain->param_specs());
  const std::vector<float> params = plain->InitialParameters(3);
  ASSERT_TRUE(fused->SetParameters(params).ok());
  ASSERT_TRUE(plain->SetParameters(params).ok());
  const std::vector<float> x = RandomVec(kBatch * kIn.Size(), 12);
  const std::vector<int32_t> y = {1, 0, 2, 1};
  absl::StatusOr<StepResult> a = fused->ComputeGradients(x.data(), y.data(), kBatch);
  absl::StatusOr<StepResult> b = plain->ComputeGradients(x.data(), y.data(), kBatch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->loss, b->loss, 1e-5);
  const std::vector<float> ga = Gradients(fused.get());
  const std::vector<float> gb = Gradients(plain.get());
  for (size_t i = 0; i < ga.size(); ++i) {
    ASSERT_NEAR(ga[i], gb[i], 1e-4 + 1e-4 * std::fabs(gb[i])) << i;
  }
  // Evaluation (the fused inference forwards) agrees too.
  absl::StatusOr<StepResult> ea = fused->Evaluate(x.data(), y.data(), kBatch);
  absl::StatusOr<StepResult> eb = plain->Evaluate(x.data(), y.data(), kBatch);
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_NEAR(ea->loss, eb->loss, 1e-5);
}

// Per-channel batch mean and unbiased / biased variance of an NCHW batch.
struct Moments {
  std::vector<double> mean, unbiased, biased;
};
Moments ChannelMoments(const std::vector<float>& x, int batch, Dims d) {
  Moments m;
  const int64_t hw = int64_t{d.h} * d.w;
  const double n = static_cast<double>(batch * hw);
  for (int c = 0; c < d.c; ++c) {
    double s = 0, s2 = 0;
    for (int b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < hw; ++i) {
        const double v = x[(int64_t{b} * d.c + c) * hw + i];
        s += v;
        s2 += v * v;
      }
    }
    const double mean = s / n;
    const double ss = s2 - n * mean * mean;
    m.mean.push_back(mean);
    m.biased.push_back(ss / n);
    m.unbiased.push_back(ss / (n - 1));
  }
  return m;
}

// Input -> batch norm -> global average pooling -> dense 2.
std::vector<GraphNode> NormGraph() {
  std::vector<GraphNode> g;
  g.push_back({NewBatchNorm("bn"), {-1}});
  g.push_back({NewGlobalAvgPool("gap"), {0}});
  g.push_back({NewDense("fc", 2), {1}});
  return g;
}

TEST_P(ModelGraphTest, BatchNormStatistics) {
  const Dims in{3, 4, 4};
  absl::StatusOr<std::unique_ptr<Model>> made =
      Model::Create(be_.get(), NormGraph(), in, 8);
  ASSERT_TRUE(made.ok()) << made.status();
  Model* m = made->get();
  ASSERT_EQ(m->state_size(), 6);
  EXPECT_EQ(m->InitialState(), std::vector<float>({0, 0, 0, 1, 1, 1}));
  ASSERT_TRUE(m->SetParameters(m->InitialParameters(1)).ok());
  std::vector<float> state(6);

  // A training step moves the statistics by momentum 0.1 (unbiased var).
  const std::vector<float> x = RandomVec(8 * in.Size(), 21, -1.f, 3.f);
  const std::vector<int32_t> y = {0, 1, 1, 0, 1, 0, 0, 1};
  ASSERT_TRUE(m->ComputeGradients(x.data(), y.data(), 8).ok());
  ASSERT_TRUE(m->GetState(absl::MakeSpan(state)).ok());
  const Moments mo = ChannelMoments(x, 8, in);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(state[c], 0.1 * mo.mean[c], 1e-5) << c;
    EXPECT_NEAR(state[3 + c], 0.9 + 0.1 * mo.unbiased[c], 1e-4) << c;
  }

  // UpdateStatistics with momentum 1 / (k + 1): the plain mean over batches.
  std::vector<float> all;
  std::vector<double> mean(3, 0), var(3, 0);
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> xb = RandomVec(8 * in.Size(), 30 + k, -2.f, 1.f);
    ASSERT_TRUE(m->UpdateStatistics(xb.data(), 8, 1.f / (k + 1)).ok());
    const Moments mk = ChannelMoments(xb, 8, in);
    for (int c = 0; c < 3; ++c) {
      mean[c] += mk.mean[c] / 3;
      var[c] += mk.unbiased[c] / 3;
    }
  }
  ASSERT_TRUE(m->GetState(absl::MakeSpan(state)).ok());
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(state[c], mean[c], 1e-5) << c;
    EXPECT_NEAR(state[3 + c], var[c], 1e-4) << c;
  }

  // Evaluation normalizes with the state: with the batch's own mean and
  // biased variance there, it gives the training pass's loss.
  std::vector<float> own(6);
  for (int c = 0; c < 3; ++c) {
    own[c] = static_cast<float>(mo.mean[c]);
    own[3 + c] = static_cast<float>(mo.biased[c]);
  }
  ASSERT_TRUE(m->SetState(own).ok());
  absl::StatusOr<StepResult> eval = m->Evaluate(x.data(), y.data(), 8);
  absl::StatusOr<StepResult> train = m->ComputeGradients(x.data(), y.data(), 8);
  ASSERT_TRUE(eval.ok() && train.ok());
  EXPECT_NEAR(eval->loss, train->loss, 1e-5);
  EXPECT_FALSE(m->SetState(std::vector<float>(5)).ok());
}

TEST_P(ModelGraphTest, DropoutTrainsAndEvaluatesDifferently) {
  std::unique_ptr<Layer> drop = NewDropout("d", 0.5f);
  const Dims in{1, 1, 1000};
  ASSERT_TRUE(drop->Configure(in).ok());
  ASSERT_TRUE(drop->Bind(be_.get(), {}, {}, 1).ok());
  const std::vector<float> x(1000, 1.f);
  std::vector<float> yt(1000), ye(1000), dx(1000);
  ForwardPass train;
  train.training = true;
  train.seed = 99;
  ASSERT_TRUE(drop->Forward(train, 1, {x.data()}, yt.data()).ok());
  int zeros = 0;
  for (float v : yt) {
    ASSERT_TRUE(v == 0.f || v == 2.f) << v;
    zeros += v == 0.f;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  // The backward pass masks like the forward one.
  ASSERT_TRUE(drop->Backward(1, {x.data()}, yt.data(), x.data(), {dx.data()}).ok());
  EXPECT_EQ(dx, yt);
  ASSERT_TRUE(drop->Forward(ForwardPass{}, 1, {x.data()}, ye.data()).ok());
  EXPECT_EQ(ye, x);
}

TEST_P(ModelGraphTest, BadGraphsAreRejected) {
  {
    std::vector<GraphNode> g;
    g.push_back({NewRelu("r"), {1}});  // Reads a later node.
    g.push_back({NewDense("fc", 2), {0}});
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Create(be_.get(), std::move(g), kIn, 2);
    EXPECT_FALSE(m.ok());
  }
  {
    std::vector<GraphNode> g;
    g.push_back({NewRelu("unused"), {-1}});
    g.push_back({NewDense("fc", 2), {-1}});
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Create(be_.get(), std::move(g), kIn, 2);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("unused"), std::string::npos);
  }
  {
    std::vector<GraphNode> g;
    g.push_back({NewMaxPool("p", 2), {-1}});
    g.push_back({NewConcat("cat"), {0, -1}});  // 3x3 and 6x6.
    g.push_back({NewDense("fc", 2), {1}});
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Create(be_.get(), std::move(g), kIn, 2);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("cat"), std::string::npos);
  }
  {
    std::vector<GraphNode> g;
    g.push_back({NewConv2d("c", 3, 1, 0), {-1}});
    g.push_back({NewAdd("sum"), {0, -1}});  // 3 and 2 channels.
    g.push_back({NewDense("fc", 2), {1}});
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Create(be_.get(), std::move(g), kIn, 2);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("sum"), std::string::npos);
  }
}

// The built-in fashion_cnn, from its spec, is the sequential network it
// replaced: the same layout, initial values and, bit for bit, gradients.
TEST_P(ModelGraphTest, FashionCnnSpecIsTheSequentialNetwork) {
  absl::StatusOr<std::unique_ptr<Model>> spec =
      BuildModel("fashion_cnn", be_.get(), 8);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(NewConv2d("conv1", 32, 3, 0));
  layers.push_back(NewRelu("relu1"));
  layers.push_back(NewMaxPool("pool1", 2));
  layers.push_back(NewConv2d("conv2", 64, 3, 0));
  layers.push_back(NewRelu("relu2"));
  layers.push_back(NewMaxPool("pool2", 2));
  layers.push_back(NewFlatten("flatten"));
  layers.push_back(NewDense("fc1", 128));
  layers.push_back(NewRelu("relu3"));
  layers.push_back(NewDense("fc2", 10));
  absl::StatusOr<std::unique_ptr<Model>> seq = Model::Create(
      be_.get(), FuseConvRelu(std::move(layers)), Dims{1, 28, 28}, 8);
  ASSERT_TRUE(seq.ok()) << seq.status();
  Model& a = **spec;
  Model& b = **seq;
  EXPECT_EQ(a.num_parameters(), 225034);
  EXPECT_EQ(a.param_specs(), b.param_specs());
  EXPECT_EQ(a.InitialParameters(7), b.InitialParameters(7));
  EXPECT_EQ(a.state_size(), 0);
  ASSERT_TRUE(a.SetParameters(a.InitialParameters(7)).ok());
  ASSERT_TRUE(b.SetParameters(b.InitialParameters(7)).ok());
  const std::vector<float> x = RandomVec(8 * 784, 4, 0.f, 1.f);
  const std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
  absl::StatusOr<StepResult> ra = a.ComputeGradients(x.data(), y.data(), 8);
  absl::StatusOr<StepResult> rb = b.ComputeGradients(x.data(), y.data(), 8);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->loss, rb->loss);
  EXPECT_EQ(Gradients(&a), Gradients(&b));
}

INSTANTIATE_TEST_SUITE_P(Cpu, ModelGraphTest,
                         ::testing::ValuesIn(CpuBackendImpls()),
                         BackendImplName());

}  // namespace
}  // namespace downpour
