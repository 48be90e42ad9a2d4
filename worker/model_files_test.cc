// Tests of worker/model_files.h on the OpenBLAS backend: a saved model
// reads back through --init_from with its running statistics, mismatching
// files are refused naming the tensor, and the statistics are recomputed
// as the plain mean over batches.
#include "worker/model_files.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// resnet20 has batch norm; fashion_cnn has not.
std::unique_ptr<Model> Build(Backend* be, const std::string& name, int batch) {
  absl::StatusOr<std::unique_ptr<Model>> m = BuildModel(name, be, batch);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

Dataset Images(int64_t n, uint64_t seed) {
  Dataset d;
  d.size = n;
  d.channels = 1;
  d.height = d.width = 28;
  d.images.resize(n * 784);
  uint64_t x = seed;
  for (float& v : d.images) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(x >> 40) * 0x1.0p-24f;
  }
  d.labels.assign(n, 3);
  return d;
}

TEST(ModelFilesTest, SavedModelReadsBackWithItsStatistics) {
  std::unique_ptr<Backend> be = NewOpenblasBackend(1);
  std::unique_ptr<Model> m = Build(be.get(), "resnet20", 16);
  ASSERT_NE(m, nullptr);
  ASSERT_GT(m->state_size(), 0);
  const std::vector<float> params = m->InitialParameters(4);
  ASSERT_TRUE(m->SetParameters(params).ok());
  const Dataset train = Images(40, 1);
  ASSERT_TRUE(RecomputeStatistics(m.get(), train, 0).ok());
  std::vector<float> state(m->state_size());
  ASSERT_TRUE(m->GetState(absl::MakeSpan(state)).ok());
  EXPECT_NE(state, m->InitialState());

  const std::string path = TempPath("resnet.safetensors");
  ASSERT_TRUE(SaveModel(path, *m, params, {{"model", "resnet20"}}).ok());
  std::unique_ptr<Model> fresh = Build(be.get(), "resnet20", 16);
  absl::StatusOr<InitialValues> v = ReadInitFrom(path, *fresh);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->parameters, params);
  EXPECT_EQ(v->state, state);
}

TEST(ModelFilesTest, StatisticsAreThePlainMeanOverBatches) {
  std::unique_ptr<Backend> be = NewOpenblasBackend(1);
  std::unique_ptr<Model> a = Build(be.get(), "resnet20", 10);
  std::unique_ptr<Model> b = Build(be.get(), "resnet20", 10);
  ASSERT_TRUE(a->SetParameters(a->InitialParameters(2)).ok());
  ASSERT_TRUE(b->SetParameters(b->InitialParameters(2)).ok());
  // 25 examples with a cap of 20: two batches of 10, by hand and through
  // RecomputeStatistics.
  const Dataset train = Images(25, 9);
  ASSERT_TRUE(RecomputeStatistics(a.get(), train, 20).ok());
  ASSERT_TRUE(b->UpdateStatistics(train.images.data(), 10, 1.f).ok());
  ASSERT_TRUE(b->UpdateStatistics(train.images.data() + 10 * 784, 10, 0.5f).ok());
  std::vector<float> sa(a->state_size()), sb(b->state_size());
  ASSERT_TRUE(a->GetState(absl::MakeSpan(sa)).ok());
  ASSERT_TRUE(b->GetState(absl::MakeSpan(sb)).ok());
  EXPECT_EQ(sa, sb);
  // A model without state: nothing to do.
  std::unique_ptr<Model> plain = Build(be.get(), "fashion_cnn", 10);
  EXPECT_TRUE(RecomputeStatistics(plain.get(), train, 0).ok());
}

TEST(ModelFilesTest, MismatchingFilesAreRefusedNamingTheTensor) {
  std::unique_ptr<Backend> be = NewOpenblasBackend(1);
  std::unique_ptr<Model> fashion = Build(be.get(), "fashion_cnn", 4);
  const std::string path = TempPath("fashion.safetensors");
  ASSERT_TRUE(SaveModel(path, *fashion, fashion->InitialParameters(1), {}).ok());

  std::unique_ptr<Model> resnet = Build(be.get(), "resnet20", 4);
  absl::StatusOr<InitialValues> v = ReadInitFrom(path, *resnet);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("conv1.weight"), std::string::npos)
      << v.status();

  // One tensor of another shape.
  std::vector<TensorSpec> specs = fashion->param_specs();
  specs[3].shape = {63};
  std::vector<float> flat(fashion->num_parameters() - 1, 0.f);
  const std::string bad = TempPath("bad_shape.safetensors");
  ASSERT_TRUE(WriteSafetensors(bad, specs, flat, {}).ok());
  v = ReadInitFrom(bad, *fashion);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("conv2.bias"), std::string::npos)
      << v.status();

  // An extra tensor, and a missing file.
  specs = fashion->param_specs();
  specs.push_back({"extra.weight", {2}});
  flat.assign(fashion->num_parameters() + 2, 0.f);
  ASSERT_TRUE(WriteSafetensors(bad, specs, flat, {}).ok());
  v = ReadInitFrom(bad, *fashion);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("extra.weight"), std::string::npos);
  v = ReadInitFrom(TempPath("missing.safetensors"), *fashion);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("--init_from"), std::string::npos);
}

}  // namespace
}  // namespace downpour
