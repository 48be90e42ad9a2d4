#include "worker/nn/model_spec.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace downpour {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kHead[] =
    "name: \"t\"\ninput { channels: 1 height: 28 width: 28 classes: 10 }\n";

absl::StatusOr<ResolvedModel> Resolve(const std::string& text) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(text, "t.prototxt");
  if (!spec.ok()) return spec.status();
  return ResolveModel(*spec, "t.prototxt");
}

// The error of a spec (kHead + layers) that must not resolve.
std::string ErrorOf(const std::string& layers,
                    const std::string& head = kHead) {
  absl::StatusOr<ResolvedModel> m = Resolve(head + layers);
  EXPECT_FALSE(m.ok()) << layers;
  if (m.ok()) return "";
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(m.status().message());
}

std::string Tensors(const ResolvedModel& m) {
  std::vector<std::string> out;
  for (const ModelTensor& t : ModelTensors(m)) {
    out.push_back(absl::StrCat(t.name, "[", absl::StrJoin(t.shape, ","), "]",
                               t.trainable ? "" : "*"));
  }
  return absl::StrJoin(out, " ");
}

TEST(ModelSpecTest, EveryBuiltinResolvesAndMatchesItsFile) {
  const std::vector<std::string> names = BuiltinModelNames();
  EXPECT_THAT(names, ElementsAre("cifar_vgg", "fashion_cnn", "inception_small",
                                 "resnet20"));
  for (const std::string& name : names) {
    absl::StatusOr<ResolvedModel> m = LoadModel(name);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->name, name);
    EXPECT_EQ(m->source, "built-in " + name);
    EXPECT_EQ(m->classes, 10);
    int64_t sum = 0;
    for (const ModelTensor& t : ModelTensors(*m)) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (t.trainable) sum += n;
    }
    EXPECT_EQ(sum, m->num_parameters) << name;
    // The embedded text is the file's, and the file loads by path too.
    const std::string path = "models/" + name + ".prototxt";
    std::ifstream f(path);
    ASSERT_TRUE(f) << path;
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(*BuiltinModelText(name), ss.str());
    absl::StatusOr<ResolvedModel> by_path = LoadModel(path);
    ASSERT_TRUE(by_path.ok()) << by_path.status();
    EXPECT_EQ(by_path->source, path);
    EXPECT_EQ(by_path->num_parameters, m->num_parameters);
  }
}

TEST(ModelSpecTest, FashionCnnKeepsItsParameters) {
  absl::StatusOr<ResolvedModel> m = LoadModel("fashion_cnn");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->num_parameters, 225034);
  EXPECT_EQ(m->input, (Dims{1, 28, 28}));
  EXPECT_EQ(Tensors(*m),
            "conv1.weight[32,1,3,3] conv1.bias[32] conv2.weight[64,32,3,3] "
            "conv2.bias[64] fc1.weight[128,1600] fc1.bias[128] "
            "fc2.weight[10,128] fc2.bias[10]");
  EXPECT_EQ(m->layers[5].out, (Dims{64, 5, 5}));  // pool2.
  EXPECT_EQ(m->layers[5].stride, 2);
}

TEST(ModelSpecTest, CifarVggKeepsItsParameters) {
  absl::StatusOr<ResolvedModel> m = LoadModel("cifar_vgg");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->num_parameters, 2196810);
  EXPECT_EQ(m->input, (Dims{3, 32, 32}));
  EXPECT_EQ(Tensors(*m),
            "conv1.weight[64,3,3,3] conv1.bias[64] conv2.weight[64,64,3,3] "
            "conv2.bias[64] conv3.weight[128,64,3,3] conv3.bias[128] "
            "conv4.weight[128,128,3,3] conv4.bias[128] "
            "conv5.weight[256,128,3,3] conv5.bias[256] "
            "conv6.weight[256,256,3,3] conv6.bias[256] fc1.weight[256,4096] "
            "fc1.bias[256] fc2.weight[10,256] fc2.bias[10]");
}

TEST(ModelSpecTest, ResnetAndInceptionSizes) {
  absl::StatusOr<ResolvedModel> r = LoadModel("resnet20");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_parameters, 272186);
  absl::StatusOr<ResolvedModel> inc = LoadModel("inception_small");
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(inc->num_parameters, 111162);
  EXPECT_THAT(Tensors(*r),
              HasSubstr("layer2_0_downsample_conv.weight[32,16,1,1] "
                        "layer2_0_downsample_bn.weight[32] "
                        "layer2_0_downsample_bn.bias[32] "
                        "layer2_0_downsample_bn.running_mean[32]* "
                        "layer2_0_downsample_bn.running_var[32]*"));
}

TEST(ModelSpecTest, ShapesAndDefaultsOfADag) {
  absl::StatusOr<ResolvedModel> m = Resolve(absl::StrCat(kHead, R"(
layer { name: "conv1" conv { out_channels: 32 kernel: 3 } }
layer { name: "bn1" batch_norm {} }
layer { name: "relu1" relu {} }
layer { name: "pool1" max_pool { kernel: 2 } }
layer { name: "branch_a" conv { out_channels: 16 kernel: 1 } inputs: "pool1" }
layer { name: "branch_b" conv { out_channels: 16 kernel: 3 padding: 1 } inputs: "pool1" }
layer { name: "cat" concat {} inputs: "branch_a" inputs: "branch_b" }
layer { name: "sum" add {} inputs: "cat" inputs: "pool1" }
layer { name: "ap" avg_pool { kernel: 2 } }
layer { name: "gap" global_avg_pool {} }
layer { name: "drop" dropout {} }
layer { name: "fc" dense { out_features: 10 bias: false } }
)"));
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& l = m->layers;
  ASSERT_EQ(l.size(), 12u);
  EXPECT_EQ(l[0].inputs, std::vector<int>{-1});
  EXPECT_EQ(l[0].out, (Dims{32, 26, 26}));
  EXPECT_TRUE(l[0].bias);
  EXPECT_EQ(l[0].stride, 1);
  EXPECT_EQ(l[0].num_parameters, 32 * 9 + 32);
  EXPECT_EQ(l[1].kind, LayerKind::kBatchNorm);
  EXPECT_FLOAT_EQ(l[1].eps, 1e-5f);
  EXPECT_FLOAT_EQ(l[1].momentum, 0.1f);
  EXPECT_EQ(l[1].num_parameters, 64);
  EXPECT_EQ(l[3].out, (Dims{32, 13, 13}));
  EXPECT_EQ(l[3].stride, 2);
  EXPECT_EQ(l[4].inputs, std::vector<int>{3});
  EXPECT_EQ(l[6].inputs, (std::vector<int>{4, 5}));
  EXPECT_EQ(l[6].out, (Dims{32, 13, 13}));
  EXPECT_EQ(l[7].in_dims.size(), 2u);
  EXPECT_EQ(l[8].out, (Dims{32, 6, 6}));
  EXPECT_EQ(l[9].out, (Dims{32, 1, 1}));
  EXPECT_FLOAT_EQ(l[10].rate, 0.5f);
  EXPECT_EQ(l[11].out, (Dims{10, 1, 1}));
  EXPECT_FALSE(l[11].bias);
  EXPECT_EQ(l[11].num_parameters, 320);
  EXPECT_EQ(m->num_parameters,
            320 + 64 + (16 * 32 + 16) + (16 * 32 * 9 + 16) + 320);
  EXPECT_EQ(LayerKindName(l[9].kind), std::string("global_avg_pool"));
}

TEST(ModelSpecTest, SyntaxErrorsNameFileLineAndColumn) {
  absl::StatusOr<ModelSpec> s = ParseModelSpec(
      "name: \"x\"\nlayer { name: \"a\" conv { kernel: } }\n", "f.prototxt");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("f.prototxt:2:"));
  s = ParseModelSpec(
      "name: \"x\"\n\nlayer { name: \"c1\" convolution { kernel: 3 } }\n",
      "f.prototxt");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("f.prototxt:3:"));
  EXPECT_THAT(
      s.status().message(),
      HasSubstr("layer \"c1\": unknown layer kind or field \"convolution\""));
  s = ParseModelSpec("layer {\n name: \"c1\"\n conv { kernal: 3 }\n}\n",
                     "f.prototxt");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("f.prototxt:3:"));
  EXPECT_THAT(s.status().message(), HasSubstr("layer \"c1\""));
  EXPECT_THAT(s.status().message(), HasSubstr("kernal"));
  s = ParseModelSpec("layer { name: \"c\" relu {} dense {} }", "f");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("oneof"));
  s = ParseModelSpec(std::string(40, '{'), "f");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("nested"));
}

TEST(ModelSpecTest, NamesAndInputs) {
  EXPECT_THAT(ErrorOf("layer { relu {} }"),
              HasSubstr("t.prototxt: layer #1 (unnamed): name"));
  EXPECT_THAT(ErrorOf("layer { name: \"input\" relu {} }"),
              HasSubstr("reserved"));
  EXPECT_THAT(ErrorOf("layer { name: \"a.b\" relu {} }"),
              HasSubstr("identifier"));
  EXPECT_THAT(
      ErrorOf("layer { name: \"a\" relu {} } layer { name: \"a\" relu {} }"),
      HasSubstr("layer \"a\": duplicate name"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" relu {} inputs: \"b\" } layer { "
                      "name: \"b\" relu {} }"),
              HasSubstr("layer \"a\": input \"b\" is a later layer"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" relu {} inputs: \"a\" }"),
              HasSubstr("itself"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" relu {} inputs: \"zz\" }"),
              HasSubstr("input \"zz\" names no layer"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" }"),
              HasSubstr("layer \"a\": no layer kind set"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" add {} }"),
              HasSubstr("add needs two or more"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" concat {} inputs: \"input\" }"),
              HasSubstr("concat needs two or more"));
  EXPECT_THAT(
      ErrorOf(
          "layer { name: \"a\" relu {} inputs: \"input\" inputs: \"input\" }"),
      HasSubstr("relu takes one input, has 2"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("no layers"));
  EXPECT_THAT(
      ErrorOf("layer { name: \"a\" relu {} }\nlayer { name: \"fc\" dense { "
              "out_features: 10 } inputs: \"input\" }"),
      HasSubstr("layer \"a\": its output is read by no later layer"));
}

TEST(ModelSpecTest, FieldRanges) {
  const std::string fc = "layer { name: \"fc\" dense { out_features: 10 } }";
  EXPECT_THAT(ErrorOf("layer { name: \"c\" conv { kernel: 3 } }" + fc),
              HasSubstr("layer \"c\": out_channels 0 is not in"));
  EXPECT_THAT(ErrorOf("layer { name: \"c\" conv { out_channels: 4 } }" + fc),
              HasSubstr("kernel 0 must be >= 1"));
  EXPECT_THAT(
      ErrorOf(
          "layer { name: \"c\" conv { out_channels: 4 kernel: 3 stride: 0 } }" +
          fc),
      HasSubstr("stride 0"));
  EXPECT_THAT(ErrorOf("layer { name: \"c\" conv { out_channels: 4 kernel: 3 "
                      "padding: -1 } }" +
                      fc),
              HasSubstr("padding -1"));
  EXPECT_THAT(
      ErrorOf("layer { name: \"p\" max_pool { kernel: 3 padding: 2 } }" + fc),
      HasSubstr("layer \"p\": padding 2 is more than half the kernel 3"));
  EXPECT_THAT(
      ErrorOf("layer { name: \"p\" avg_pool { kernel: 29 } }" + fc),
      HasSubstr("layer \"p\": kernel 29 is larger than its input 1x28x28"));
  EXPECT_THAT(ErrorOf("layer { name: \"d\" dropout { rate: 1 } }" + fc),
              HasSubstr("rate 1"));
  EXPECT_THAT(ErrorOf("layer { name: \"b\" batch_norm { eps: 0 } }" + fc),
              HasSubstr("eps 0"));
  EXPECT_THAT(ErrorOf("layer { name: \"b\" batch_norm { momentum: 2 } }" + fc),
              HasSubstr("momentum 2"));
  EXPECT_THAT(ErrorOf("layer { name: \"fc\" dense { } }"),
              HasSubstr("out_features 0"));
  EXPECT_THAT(
      ErrorOf(fc, "input { channels: 1 height: 28 width: 0 classes: 10 }"),
      HasSubstr("t.prototxt: input: width 0 is not in"));
  EXPECT_THAT(ErrorOf(fc, "input { channels: 1 height: 28 width: 28 }"),
              HasSubstr("classes is not set"));
  EXPECT_THAT(ErrorOf(fc, ""), HasSubstr("input: missing"));
}

TEST(ModelSpecTest, ShapeMismatches) {
  EXPECT_THAT(
      ErrorOf(R"(
layer { name: "a" conv { out_channels: 4 kernel: 3 } inputs: "input" }
layer { name: "b" conv { out_channels: 4 kernel: 1 } inputs: "input" }
layer { name: "s" add {} inputs: "a" inputs: "b" }
layer { name: "fc" dense { out_features: 10 } })"),
      HasSubstr("layer \"s\": add of different shapes: \"b\" is 4x28x28 but "
                "\"a\" is 4x26x26"));
  EXPECT_THAT(ErrorOf(R"(
layer { name: "a" conv { out_channels: 4 kernel: 3 } inputs: "input" }
layer { name: "b" conv { out_channels: 4 kernel: 1 } inputs: "input" }
layer { name: "c" concat {} inputs: "a" inputs: "b" }
layer { name: "fc" dense { out_features: 10 } })"),
              HasSubstr("layer \"c\": concat of different spatial sizes"));
  EXPECT_THAT(
      ErrorOf("layer { name: \"fc\" dense { out_features: 12 } }"),
      HasSubstr(
          "t.prototxt: classes 10 but the last layer \"fc\" gives 12 values"));
}

TEST(ModelSpecTest, SizesAreBounded) {
  // Activations, parameters and layer count.
  EXPECT_THAT(
      ErrorOf("layer { name: \"c\" conv { out_channels: 1048576 kernel: 1 } }"),
      HasSubstr("values per example"));
  EXPECT_THAT(
      ErrorOf(
          "layer { name: \"c\" conv { out_channels: 1048576 kernel: 3 padding: "
          "2147483647 } }"),
      HasSubstr("values per example"));
  EXPECT_THAT(ErrorOf("layer { name: \"a\" dense { out_features: 1048576 } }"
                      "layer { name: \"b\" dense { out_features: 4096 } }"),
              HasSubstr("layer \"b\": more than 2147483648 parameters"));
  std::string many;
  for (int i = 0; i <= kMaxLayers; ++i)
    absl::StrAppend(&many, "layer { name: \"r", i, "\" relu {} }");
  EXPECT_THAT(ErrorOf(many), HasSubstr("10001 layers; at most 10000"));
}

TEST(ModelSpecTest, ModelAgainstData) {
  absl::StatusOr<ResolvedModel> m = LoadModel("fashion_cnn");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(CheckModelFitsData(*m, 1, 28, 28, 10).ok());
  const absl::Status s = CheckModelFitsData(*m, 3, 32, 32, 10);
  EXPECT_THAT(s.message(),
              HasSubstr("takes 1x28x28 inputs in 10 classes, but the data "
                        "set has 3x32x32 images in 10 classes"));
  EXPECT_FALSE(CheckModelFitsData(*m, 1, 28, 28, 100).ok());
}

TEST(ModelSpecTest, LoadErrors) {
  absl::StatusOr<ResolvedModel> m = LoadModel("/nonexistent/net.prototxt");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("/nonexistent/net.prototxt"));
  absl::StatusOr<std::string> t = BuiltinModelText("vgg16");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("fashion_cnn"));
  const std::string path = absl::StrCat(testing::TempDir(), "/bad.pbtxt");
  std::ofstream(path) << kHead
                      << "layer { name: \"fc\" dense { out_features: 10 }\n";
  m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr(path + ":4:"));
}

}  // namespace
}  // namespace downpour
