// A short end-to-end check of the CUDA backend: fashion_cnn trained with
// plain in-process SGD (a model and a backend, no parameter servers) for the
// same steps, data order and initial parameters on the CPU and on the GPU
// must reach test accuracies within 0.02 of each other, both above 0.75.
// The trajectories are not bitwise identical (float summation order differs),
// so the comparison is on accuracy rather than on parameters.
//
// Data: Fashion-MNIST from $DOWNPOUR_FASHION_MNIST_DIR if set, else from
// /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist); when
// neither has it, a synthetic 10-class set of noisy prototype images. Skips
// without a usable CUDA device.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"
#include "worker/nn/backend.h"
#include "worker/nn/cuda_backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_builder.h"
#include "worker/nn/openblas_backend.h"

namespace downpour {
namespace {

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// 28x28 images: class k is a fixed random prototype plus per-example noise.
Dataset Synthetic(int64_t size, uint64_t seed) {
  Dataset d;
  d.size = size;
  d.channels = 1;
  d.height = d.width = 28;
  d.num_classes = 10;
  std::mt19937_64 proto_rng(1234);  // Same prototypes for train and test.
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> protos(10 * 784);
  for (float& v : protos) v = u(proto_rng) < 0.3f ? 1.f : 0.f;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.35f);
  d.images.resize(size * 784);
  d.labels.resize(size);
  for (int64_t i = 0; i < size; ++i) {
    const int label = static_cast<int>(rng() % 10);
    d.labels[i] = label;
    for (int p = 0; p < 784; ++p) {
      const float v = protos[label * 784 + p] + noise(rng);
      d.images[i * 784 + p] = v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
    }
  }
  return d;
}

struct TrainResult {
  float final_loss = 0;
  double test_accuracy = 0;
};

// `steps` SGD steps over consecutive batches of `train` (wrapping around),
// then accuracy on all of `test`.
absl::StatusOr<TrainResult> Train(Backend* be, const Dataset& train,
                                  const Dataset& test, int steps, int batch,
                                  float lr) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      BuildModel("fashion_cnn", be, batch);
  if (!model.ok()) return model.status();
  Model& m = **model;
  absl::Status s = m.SetParameters(m.InitialParameters(/*seed=*/1));
  if (!s.ok()) return s;
  const int64_t ex = train.ExampleSize();
  TrainResult result;
  int64_t next = 0;
  for (int step = 0; step < steps; ++step) {
    if (next + batch > train.size) next = 0;
    absl::StatusOr<StepResult> r = m.ComputeGradients(
        train.images.data() + next * ex, train.labels.data() + next, batch);
    if (!r.ok()) return r.status();
    result.final_loss = r->loss;
    s = be->Axpy(m.num_parameters(), -lr, m.gradients(), m.parameters());
    if (!s.ok()) return s;
    next += batch;
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size; i += batch) {
    const int n = static_cast<int>(std::min<int64_t>(batch, test.size - i));
    absl::StatusOr<StepResult> r =
        m.Evaluate(test.images.data() + i * ex, test.labels.data() + i, n);
    if (!r.ok()) return r.status();
    correct += r->correct;
  }
  result.test_accuracy = static_cast<double>(correct) / test.size;
  return result;
}

TEST(CudaTrainTest, FashionCnnSgdMatchesCpu) {
  const CudaProbe probe = ProbeCuda();
  if (probe.device_count <= 0) {
    GTEST_SKIP() << "no usable CUDA device: " << probe.reason;
  }
  const char* env_dir = std::getenv("DOWNPOUR_FASHION_MNIST_DIR");
  const std::string dir = env_dir != nullptr ? env_dir : kFashionMnistDir;
  absl::StatusOr<Dataset> train = LoadMnistSplit(dir, true, 25600);
  absl::StatusOr<Dataset> test = LoadMnistSplit(dir, false, 2000);
  std::string source = "Fashion-MNIST from " + dir;
  if (!train.ok() || !test.ok()) {
    source = "synthetic data (Fashion-MNIST not found: " +
             std::string(!train.ok() ? train.status().message()
                                     : test.status().message()) +
             ")";
    train = Synthetic(25600, 1);
    test = Synthetic(2000, 2);
  }
  std::printf("training on %s\n", source.c_str());

  const int steps = 600, batch = 64;
  const float lr = 0.1f;
  std::unique_ptr<Backend> cpu = NewOpenblasBackend(4);
  absl::StatusOr<std::unique_ptr<Backend>> gpu =
      NewCudaBackend(0, CudaBackendOptions());
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  absl::StatusOr<TrainResult> c =
      Train(cpu.get(), *train, *test, steps, batch, lr);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainResult> g =
      Train(gpu->get(), *train, *test, steps, batch, lr);
  ASSERT_TRUE(g.ok()) << g.status();
  std::printf(
      "%d steps: cpu loss %.4f accuracy %.4f; %s loss %.4f accuracy %.4f\n",
      steps, c->final_loss, c->test_accuracy, (*gpu)->Name().c_str(),
      g->final_loss, g->test_accuracy);
  EXPECT_GT(c->test_accuracy, 0.75);
  EXPECT_GT(g->test_accuracy, 0.75);
  EXPECT_NEAR(g->test_accuracy, c->test_accuracy, 0.02);
}

}  // namespace
}  // namespace downpour
