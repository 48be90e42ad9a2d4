// Tests of ModelOptions::defer_weight_gradients: which layers defer, the
// flat order, the order in which the hooks see the gradients, and that the
// gradients are the same bits as without deferral, on each CPU backend.
#include <cstdint>
#include <cstring>
#include <map>
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

class DeferredGradientsTest : public ::testing::TestWithParam<BackendImpl> {
 protected:
  static constexpr int kBatch = 8;

  std::unique_ptr<Model> Build(Backend* be, const std::string& name,
                               bool defer, bool fuse = true) {
    BuildModelOptions o;
    o.defer_weight_gradients = defer;
    o.fuse_conv_relu = fuse;
    absl::StatusOr<std::unique_ptr<Model>> m =
        BuildModel(name, be, kBatch, o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  // The model's flat vector by tensor name.
  static std::map<std::string, std::vector<float>> ByName(
      const Model& m, const std::vector<float>& flat) {
    std::map<std::string, std::vector<float>> out;
    int64_t offset = 0;
    for (const TensorSpec& t : m.param_specs()) {
      out[t.name].assign(flat.begin() + offset,
                         flat.begin() + offset + t.NumElements());
      offset += t.NumElements();
    }
    return out;
  }

  static std::vector<float> Gradients(Backend* be, Model* m) {
    std::vector<float> g(m->num_parameters());
    EXPECT_TRUE(be->CopyToHost(m->gradients(), g.data(), g.size()).ok());
    EXPECT_TRUE(be->Synchronize().ok());
    return g;
  }
};

TEST_P(DeferredGradientsTest, TheLayerAboveTheFirstLeadsTheFlatVector) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto plain = Build(be.get(), "fashion_cnn", false);
  auto deferred = Build(be.get(), "fashion_cnn", true);
  ASSERT_TRUE(plain && deferred);
  const std::vector<TensorSpec> want = {
      {"conv2.weight", {64, 32, 3, 3}}, {"conv2.bias", {64}},
      {"conv1.weight", {32, 1, 3, 3}},  {"conv1.bias", {32}},
      {"fc1.weight", {128, 1600}},      {"fc1.bias", {128}},
      {"fc2.weight", {10, 128}},        {"fc2.bias", {10}},
  };
  EXPECT_EQ(deferred->param_specs(), want);
  EXPECT_EQ(deferred->graph_order(), (std::vector<int>{2, 3, 0, 1, 4, 5, 6, 7}));
  EXPECT_EQ(plain->graph_order(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(deferred->leading_deferred_tensors(), 2);
  EXPECT_EQ(deferred->first_layer_tensors(), 2);
  EXPECT_EQ(plain->leading_deferred_tensors(), 0);
  EXPECT_EQ(plain->first_layer_tensors(), 2);
  EXPECT_EQ(plain->param_specs().front().name, "conv1.weight");
  EXPECT_EQ(deferred->num_parameters(), plain->num_parameters());
}

// An unfused convolution keeps its backward whole (its dy lives in a buffer
// that later layers reuse), so nothing is deferred.
TEST_P(DeferredGradientsTest, UnfusedConvolutionsAreNotDeferred) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto m = Build(be.get(), "fashion_cnn", true, /*fuse=*/false);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->leading_deferred_tensors(), 0);
  EXPECT_EQ(m->param_specs().front().name, "conv1.weight");
}

// The same initial values by name give the same loss and gradients, bit for
// bit, over two steps (the second reuses every buffer).
TEST_P(DeferredGradientsTest, GradientsAreTheSameBits) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  for (const char* name : {"fashion_cnn", "cifar_vgg"}) {
    SCOPED_TRACE(name);
    auto plain = Build(be.get(), name, false);
    auto deferred = Build(be.get(), name, true);
    ASSERT_TRUE(plain && deferred);
    EXPECT_GT(deferred->leading_deferred_tensors(), 0);
    const std::vector<float> init = plain->InitialParameters(11);
    ASSERT_TRUE(plain->SetParameters(init).ok());
    // InitialParameters is per tensor: the same values by name.
    const std::vector<float> init_d = deferred->InitialParameters(11);
    ASSERT_EQ(ByName(*plain, init), ByName(*deferred, init_d));
    ASSERT_TRUE(deferred->SetParameters(init_d).ok());
    const int64_t in = plain->input_dims().Size();
    for (int step = 0; step < 2; ++step) {
      std::vector<float> x = RandomVec(kBatch * in, 40 + step, 0.f, 1.f);
      std::vector<int32_t> labels(kBatch);
      for (int i = 0; i < kBatch; ++i) labels[i] = (i * 7 + step) % 10;
      auto rp = plain->ComputeGradients(x.data(), labels.data(), kBatch);
      auto rd = deferred->ComputeGradients(x.data(), labels.data(), kBatch);
      ASSERT_TRUE(rp.ok() && rd.ok());
      EXPECT_EQ(std::memcmp(&rp->loss, &rd->loss, sizeof(float)), 0);
      const auto gp = ByName(*plain, Gradients(be.get(), plain.get()));
      const auto gd = ByName(*deferred, Gradients(be.get(), deferred.get()));
      for (const auto& [tensor, g] : gp) {
        const std::vector<float>& d = gd.at(tensor);
        ASSERT_EQ(g.size(), d.size());
        EXPECT_EQ(std::memcmp(g.data(), d.data(), g.size() * sizeof(float)),
                  0)
            << tensor << " differs at step " << step;
      }
    }
  }
}

// The hooks: the forward's in graph order; gradients final as suffixes of
// the flat vector, the first layer's before the deferred conv2's, which is
// still the previous step's when the first layer's is announced.
TEST_P(DeferredGradientsTest, TheFirstLayersGradientIsFinalBeforeTheDeferred) {
  auto be = MakeBackendOrDie(GetParam(), 1);
  auto m = Build(be.get(), "fashion_cnn", true);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->SetParameters(m->InitialParameters(5)).ok());
  const int64_t conv2 = 64 * 32 * 9 + 64;  // Leads the flat vector.
  const int64_t conv1 = 32 * 9 + 32;
  std::vector<float> x = RandomVec(kBatch * 784, 3, 0.f, 1.f);
  std::vector<int32_t> labels(kBatch, 4);
  ASSERT_TRUE(m->ComputeGradients(x.data(), labels.data(), kBatch).ok());
  const std::vector<float> before = Gradients(be.get(), m.get());

  std::vector<std::pair<int64_t, int64_t>> forward;
  std::vector<int64_t> ready;
  std::vector<float> conv2_at_conv1;
  StepHooks hooks;
  hooks.before_forward = [&](int64_t b, int64_t e) {
    forward.push_back({b, e});
    return absl::OkStatus();
  };
  hooks.gradients_ready = [&](int64_t from) {
    ready.push_back(from);
    if (from == conv2) {
      const std::vector<float> g = Gradients(be.get(), m.get());
      conv2_at_conv1.assign(g.begin(), g.begin() + conv2);
    }
    return absl::OkStatus();
  };
  std::vector<float> x2 = RandomVec(kBatch * 784, 4, 0.f, 1.f);
  ASSERT_TRUE(m->ComputeGradients(x2.data(), labels.data(), kBatch, hooks).ok());
  const std::vector<float> after = Gradients(be.get(), m.get());

  const std::vector<std::pair<int64_t, int64_t>> want_forward = {
      {conv2, conv2 + conv1},           // conv1
      {0, conv2},                       // conv2
      {conv2 + conv1, conv2 + conv1 + 1600 * 128 + 128},  // fc1
      {conv2 + conv1 + 1600 * 128 + 128, m->num_parameters()},  // fc2
  };
  EXPECT_EQ(forward, want_forward);
  const std::vector<int64_t> want_ready = {
      conv2 + conv1 + 1600 * 128 + 128, conv2 + conv1, conv2, 0};
  EXPECT_EQ(ready, want_ready);
  // At conv1's announcement conv2's gradient was the first step's.
  ASSERT_EQ(conv2_at_conv1.size(), static_cast<size_t>(conv2));
  EXPECT_TRUE(std::equal(conv2_at_conv1.begin(), conv2_at_conv1.end(),
                         before.begin()));
  EXPECT_FALSE(std::equal(conv2_at_conv1.begin(), conv2_at_conv1.end(),
                          after.begin()));
}

INSTANTIATE_TEST_SUITE_P(Cpu, DeferredGradientsTest,
                         ::testing::ValuesIn(CpuBackendImpls()),
                         BackendImplName());

}  // namespace
}  // namespace downpour
