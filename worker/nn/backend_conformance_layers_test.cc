// The backend conformance suite, layers part: every layer of model.h forward
// and backward, and fashion_cnn's ComputeGradients, on each implementation
// (OpenBLAS, oneDNN, CUDA) against the reference backend on random inputs
// (criteria in backend_conformance.h). CUDA cases skip without a usable GPU.
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "worker/nn/backend.h"
#include "worker/nn/backend_conformance.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/test_backends.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

// One layer's outputs on one backend.
struct LayerRun {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
};

class LayerVsReferenceTest : public VsReferenceTest {
 protected:
  // Configures a fresh layer from `make` on `be`, binds it to backend
  // buffers holding `params`, runs Forward on x and Backward with dy.
  void Run(Backend* be, const std::function<std::unique_ptr<Layer>()>& make,
           Dims in, int batch, const std::vector<std::vector<float>>& params,
           const std::vector<float>& x, const std::vector<float>& dy,
           LayerRun* out) {
    std::unique_ptr<Layer> layer = make();
    absl::StatusOr<Dims> dims = layer->Configure(in);
    ASSERT_TRUE(dims.ok()) << dims.status();
    std::vector<DeviceBuffer> p, g;
    std::vector<float*> pp, gp;
    for (size_t i = 0; i < params.size(); ++i) {
      p.push_back(UploadTo(be, params[i]));
      g.push_back(UploadTo(be, RandomVec(params[i].size(), 50 + i)));
      pp.push_back(p.back().data());
      gp.push_back(g.back().data());
    }
    ASSERT_TRUE(layer->Bind(be, pp, gp, batch).ok());
    DeviceBuffer xb = UploadTo(be, x);
    DeviceBuffer yb = UploadTo(be, RandomVec(batch * dims->Size(), 60));
    DeviceBuffer dyb = UploadTo(be, dy);
    DeviceBuffer dxb = UploadTo(be, RandomVec(x.size(), 61));
    absl::Status s = layer->Forward(batch, xb.data(), yb.data());
    ASSERT_TRUE(s.ok()) << be->Name() << ": " << s;
    s = layer->Backward(batch, xb.data(), yb.data(), dyb.data(), dxb.data());
    ASSERT_TRUE(s.ok()) << be->Name() << ": " << s;
    out->y = DownloadFrom(be, yb);
    out->dx = DownloadFrom(be, dxb);
    for (const DeviceBuffer& b : g) out->grads.push_back(DownloadFrom(be, b));
  }

  void Compare(const std::string& name,
               const std::function<std::unique_ptr<Layer>()>& make, Dims in,
               int batch, bool exact = false) {
    std::unique_ptr<Layer> probe = make();
    absl::StatusOr<Dims> out = probe->Configure(in);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<std::vector<float>> params;
    for (const ParamSpec& spec : probe->Params()) {
      int64_t n = 1;
      for (int64_t dim : spec.shape) n *= dim;
      params.push_back(RandomVec(n, 70 + params.size(), -0.5f, 0.5f));
    }
    const std::vector<float> x = RandomVec(batch * in.Size(), 80);
    const std::vector<float> dy = RandomVec(batch * out->Size(), 81);
    LayerRun ref, got;
    ASSERT_NO_FATAL_FAILURE(
        Run(ref_.get(), make, in, batch, params, x, dy, &ref));
    ASSERT_NO_FATAL_FAILURE(
        Run(be_.get(), make, in, batch, params, x, dy, &got));
    auto check = exact ? ExpectExact : ExpectClose;
    check(got.y, ref.y, name + " forward");
    check(got.dx, ref.dx, name + " dx");
    ASSERT_EQ(got.grads.size(), ref.grads.size());
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      check(got.grads[i], ref.grads[i], absl::StrCat(name, " grad ", i));
    }
  }
};

TEST_P(LayerVsReferenceTest, Conv2dPad0) {
  Compare(
      "conv pad 0", [] { return NewConv2d("c", 8, 3, 0); }, Dims{3, 12, 11}, 5);
}

TEST_P(LayerVsReferenceTest, Conv2dPad1) {
  Compare(
      "conv pad 1", [] { return NewConv2d("c", 6, 3, 1); }, Dims{4, 9, 10}, 3);
}

TEST_P(LayerVsReferenceTest, Relu) {
  Compare(
      "relu", [] { return NewRelu("r"); }, Dims{3, 7, 5}, 4,
      /*exact=*/true);
}

TEST_P(LayerVsReferenceTest, MaxPool) {
  Compare(
      "maxpool", [] { return NewMaxPool("p", 2); }, Dims{3, 7, 9}, 4,
      /*exact=*/true);
}

TEST_P(LayerVsReferenceTest, Flatten) {
  Compare(
      "flatten", [] { return NewFlatten("f"); }, Dims{3, 4, 5}, 4,
      /*exact=*/true);
}

TEST_P(LayerVsReferenceTest, Dense) {
  Compare(
      "dense", [] { return NewDense("d", 33); }, Dims{40, 2, 3}, 17);
}

INSTANTIATE_TEST_SUITE_P(All, LayerVsReferenceTest,
                         ::testing::ValuesIn(AllBackendImpls()),
                         BackendImplName());

// ---- The whole model --------------------------------------------------------

// fashion_cnn on both backends with identical parameters and batch.
//
// Forward values decide ReLU and max-pool branches; a value within float
// rounding of a kink (|x| ~ 1e-7 at a ReLU, two near-equal maxima) could go
// different ways on the two backends and move a gradient contribution by far
// more than 1e-4. So inputs and the parameters up to fc1 are small multiples
// of powers of two: every product is exact, and every partial sum stays
// below 2^24 units, so both backends compute bit-identical activations up to
// fc1's output whatever their summation order. That needs convolutions that
// sum products directly (BackendImpl::make_direct: the CUDA backend's
// default GEMM-like algorithms, the oneDNN backend without Winograd, whose
// transforms round). Exact ties then break the same way on both. fc2 and
// the backward pass use ordinary floats.
//   x in {0, 1}; conv1.w = j/8, j in [-2, 2]; conv1.b = j/8, j in [-1, 1]
//     -> conv1 outputs are multiples of 1/8, |.| <= 9*2 + 1 = 19 units;
//   conv2.w = j/64, j in [-1, 1]; conv2.b = j/512, j in [-8, 8]
//     -> multiples of 1/512, |.| <= 288*19 + 8 = 5480 units;
//   fc1.w = j/256, j in [-1, 1]; fc1.b = j/2^17, j in [-64, 64]
//     -> multiples of 2^-17, |.| <= 1600*5480 + 64 < 2^24 units.
class ModelVsReferenceTest : public VsReferenceFixture,
                             public ::testing::WithParamInterface<BackendImpl> {
 protected:
  void SetUp() override { OpenBoth(GetParam(), /*direct=*/true); }
};

TEST_P(ModelVsReferenceTest, FashionCnnComputeGradients) {
  const int batch = 32;
  absl::StatusOr<std::unique_ptr<Model>> ref_model =
      BuildModel("fashion_cnn", ref_.get(), batch);
  absl::StatusOr<std::unique_ptr<Model>> model =
      BuildModel("fashion_cnn", be_.get(), batch);
  ASSERT_TRUE(ref_model.ok()) << ref_model.status();
  ASSERT_TRUE(model.ok()) << model.status();
  Model& rm = **ref_model;
  Model& m = **model;

  struct Quant {
    const char* name;
    double unit;
    int max_j;  // 0: ordinary random floats.
  };
  const std::vector<Quant> quants = {
      {"conv1.weight", 1.0 / 8, 2},  {"conv1.bias", 1.0 / 8, 1},
      {"conv2.weight", 1.0 / 64, 1}, {"conv2.bias", 1.0 / 512, 8},
      {"fc1.weight", 1.0 / 256, 1},  {"fc1.bias", 0x1.0p-17, 64},
      {"fc2.weight", 0, 0},          {"fc2.bias", 0, 0}};
  std::vector<float> params;
  std::mt19937_64 rng(5);
  ASSERT_EQ(rm.param_specs().size(), quants.size());
  for (size_t t = 0; t < quants.size(); ++t) {
    const TensorSpec& spec = rm.param_specs()[t];
    ASSERT_EQ(spec.name, quants[t].name);
    for (int64_t i = 0; i < spec.NumElements(); ++i) {
      const Quant& q = quants[t];
      if (q.max_j == 0) {
        params.push_back(
            static_cast<float>(((rng() >> 11) * 0x1.0p-53 * 2 - 1) * 0.2));
      } else {
        const int j = static_cast<int>(rng() % (2 * q.max_j + 1)) - q.max_j;
        params.push_back(static_cast<float>(j * q.unit));
      }
    }
  }
  ASSERT_TRUE(rm.SetParameters(params).ok());
  ASSERT_TRUE(m.SetParameters(params).ok());

  std::vector<float> x(batch * 784);
  for (float& v : x) v = static_cast<float>(rng() % 2);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;

  absl::StatusOr<StepResult> rr =
      rm.ComputeGradients(x.data(), labels.data(), batch);
  absl::StatusOr<StepResult> r =
      m.ComputeGradients(x.data(), labels.data(), batch);
  ASSERT_TRUE(rr.ok()) << rr.status();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(std::fabs(r->loss - rr->loss), 1e-4 * std::max(1.f, rr->loss))
      << "got " << r->loss << " reference " << rr->loss;
  EXPECT_EQ(r->correct, rr->correct);

  const int64_t n = rm.num_parameters();
  std::vector<float> rg(n), g(n);
  ASSERT_TRUE(ref_->CopyToHost(rm.gradients(), rg.data(), n).ok());
  ASSERT_TRUE(be_->CopyToHost(m.gradients(), g.data(), n).ok());
  int64_t offset = 0;
  for (const TensorSpec& spec : rm.param_specs()) {
    const int64_t size = spec.NumElements();
    ExpectClose(
        std::vector<float>(g.begin() + offset, g.begin() + offset + size),
        std::vector<float>(rg.begin() + offset, rg.begin() + offset + size),
        "gradient of " + spec.name);
    offset += size;
  }

  absl::StatusOr<StepResult> re = rm.Evaluate(x.data(), labels.data(), 20);
  absl::StatusOr<StepResult> e = m.Evaluate(x.data(), labels.data(), 20);
  ASSERT_TRUE(re.ok() && e.ok());
  EXPECT_LE(std::fabs(e->loss - re->loss), 1e-4 * std::max(1.f, re->loss));
  EXPECT_EQ(e->correct, re->correct);

  std::vector<float> back(n);
  ASSERT_TRUE(m.GetParameters(absl::MakeSpan(back)).ok());
  ExpectExact(back, params, "parameter round trip");
}

INSTANTIATE_TEST_SUITE_P(All, ModelVsReferenceTest,
                         ::testing::ValuesIn(AllBackendImpls()),
                         BackendImplName());

}  // namespace
}  // namespace downpour
