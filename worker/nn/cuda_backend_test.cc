// Tests of the CUDA backend against the CPU backend (the reference): every
// Backend operation, every layer of model.h forward and backward, and
// fashion_cnn's ComputeGradients, on random inputs.
//
// Agreement criterion, per output tensor:
//   RelErr(gpu, cpu) = max_i |gpu_i - cpu_i| / max(1e-3, max_i |cpu_i|)
// must be <= 1e-4. (Normalizing by the tensor's largest magnitude makes the
// bound scale-free; the 1e-3 floor keeps all-but-zero tensors from turning
// float noise into large ratios.) Operations without arithmetic (copies,
// ReLU, max pooling) must agree exactly, and integer outputs (correct counts)
// exactly.
//
// Every GPU test skips, with ProbeCuda()'s reason, when no usable CUDA device
// exists. The NoGpu* tests run everywhere and check the no-GPU paths (or, on
// a GPU machine, the device name).
#include "worker/nn/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
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
#include "worker/nn/model.h"
#include "worker/nn/test_util.h"

namespace downpour {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr double kTol = 1e-4;
constexpr double kFloor = 1e-3;

const CudaProbe& Probe() {
  static const CudaProbe* const probe = new CudaProbe(ProbeCuda());
  return *probe;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& want,
              int64_t* worst = nullptr) {
  double max_diff = 0, max_want = 0;
  int64_t at = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(double{got[i]} - want[i]);
    if (!(diff <= max_diff)) {  // Also catches NaN.
      max_diff = std::isnan(diff) ? INFINITY : diff;
      at = static_cast<int64_t>(i);
    }
    max_want = std::max(max_want, std::fabs(double{want[i]}));
  }
  if (worst != nullptr) *worst = at;
  return max_diff / std::max(kFloor, max_want);
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t worst = -1;
  const double err = RelErr(got, want, &worst);
  EXPECT_LE(err, kTol) << what << ": worst at " << worst << ": gpu "
                       << (worst >= 0 ? got[worst] : 0.f) << " cpu "
                       << (worst >= 0 ? want[worst] : 0.f);
}

void ExpectExact(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << " at " << i;
  }
}

// ---- No-GPU paths (run everywhere) ------------------------------------------

TEST(NoGpuTest, ProbeAndFactoryFailCleanlyOrNameTheDevice) {
  const CudaProbe probe = ProbeCuda();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      NewCudaBackend(0, CudaBackendOptions());
  if (probe.device_count == 0) {
    EXPECT_FALSE(probe.reason.empty());
    EXPECT_TRUE(probe.names.empty());
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr("no usable CUDA device"));
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr(probe.reason));
    std::printf("no GPU here, as expected on CPU machines: %s\n",
                std::string(backend.status().message()).c_str());
  } else {
    EXPECT_TRUE(probe.reason.empty());
    ASSERT_EQ(static_cast<int>(probe.names.size()), probe.device_count);
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->Name(), "cuda:0 (" + probe.names[0] + ")");
    std::printf("backend: %s\n", (*backend)->Name().c_str());
  }
  // Bad ordinals and options fail either way, without crashing.
  EXPECT_FALSE(NewCudaBackend(-1, CudaBackendOptions()).ok());
  EXPECT_FALSE(NewCudaBackend(probe.device_count, CudaBackendOptions()).ok());
  CudaBackendOptions bad;
  bad.workspace_limit_bytes = -1;
  EXPECT_EQ(NewCudaBackend(0, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NoGpuTest, PinnedAllocator) {
  std::unique_ptr<HostAllocator> alloc = NewCudaPinnedHostAllocator();
  ASSERT_NE(alloc, nullptr);
  EXPECT_STREQ(alloc->Name(), "cuda-pinned");
  alloc->Free(nullptr);  // A no-op.
  void* p = alloc->Allocate(1000);
  if (Probe().device_count == 0) {
    EXPECT_EQ(p, nullptr);  // No silent fallback to pageable memory.
    return;
  }
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(p, 0x5a, 1000);
  alloc->Free(p);
  void* empty = alloc->Allocate(0);
  EXPECT_NE(empty, nullptr);
  alloc->Free(empty);
}

// ---- GPU vs CPU -------------------------------------------------------------

class CudaVsCpuTest : public ::testing::Test {
 protected:
  // The same data in a buffer of each backend.
  struct Pair {
    DeviceBuffer cpu, gpu;
  };

  void SetUp() override {
    const CudaProbe& probe = Probe();
    if (probe.device_count <= 0) {
      GTEST_SKIP() << "no usable CUDA device: " << probe.reason;
    }
    absl::StatusOr<std::unique_ptr<Backend>> gpu =
        NewCudaBackend(0, CudaBackendOptions());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    cpu_ = NewCpuBackend(2);
  }

  DeviceBuffer UploadTo(Backend* be, const std::vector<float>& v) {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Create(be, v.size());
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return DeviceBuffer();
    absl::Status s = be->CopyToDevice(v.data(), b->data(), v.size());
    EXPECT_TRUE(s.ok()) << s;
    return std::move(*b);
  }
  Pair Upload(const std::vector<float>& v) {
    return Pair{UploadTo(cpu_.get(), v), UploadTo(gpu_.get(), v)};
  }
  // Random contents: outputs that must be overwritten start as garbage.
  Pair Garbage(int64_t n, uint64_t seed) {
    return Upload(RandomVec(n, seed, -7.f, 7.f));
  }
  std::vector<float> Download(Backend* be, const DeviceBuffer& b) {
    std::vector<float> v(b.size());
    absl::Status s = be->CopyToHost(b.data(), v.data(), b.size());
    EXPECT_TRUE(s.ok()) << s;
    return v;
  }
  std::vector<float> Gpu(const Pair& p) { return Download(gpu_.get(), p.gpu); }
  std::vector<float> Cpu(const Pair& p) { return Download(cpu_.get(), p.cpu); }
  void ExpectSame(const Pair& p, const std::string& what) {
    ExpectClose(Gpu(p), Cpu(p), what);
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

// Runs `op` on both backends; it gets the backend and whether it is the GPU.
#define BOTH(op)                                                      \
  do {                                                                \
    for (int dp_gpu = 0; dp_gpu < 2; ++dp_gpu) {                      \
      Backend* be = dp_gpu ? gpu_.get() : cpu_.get();                 \
      auto pick = [dp_gpu](auto& pair) -> auto& {                     \
        return dp_gpu ? pair.gpu : pair.cpu;                          \
      };                                                              \
      absl::Status dp_s = (op);                                       \
      ASSERT_TRUE(dp_s.ok()) << (dp_gpu ? "gpu: " : "cpu: ") << dp_s; \
      (void)pick;                                                     \
    }                                                                 \
  } while (0)

TEST_F(CudaVsCpuTest, AllocateZeroedCopyAndName) {
  EXPECT_THAT(gpu_->Name(), StartsWith("cuda:0 ("));
  for (int64_t n : {0, 1, 7, 1000, 123457}) {
    absl::StatusOr<float*> p = gpu_->Allocate(n);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_NE(*p, nullptr);
    std::vector<float> host(n, 1.f);
    ASSERT_TRUE(gpu_->CopyToHost(*p, host.data(), n).ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 0.f) << n << " " << i;
    gpu_->Free(*p);
  }
  EXPECT_EQ(gpu_->Allocate(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyToHost(nullptr, nullptr, -1).code(),
            absl::StatusCode::kInvalidArgument);

  // Round trips through pageable and pinned host memory.
  const std::vector<float> v = RandomVec(4099, 1);
  DeviceBuffer d = UploadTo(gpu_.get(), v);
  ExpectExact(Download(gpu_.get(), d), v, "pageable round trip");
  std::unique_ptr<HostAllocator> pinned = NewCudaPinnedHostAllocator();
  absl::StatusOr<HostArray<float>> src_or =
      HostArray<float>::Create(pinned.get(), v.size());
  absl::StatusOr<HostArray<float>> dst_or =
      HostArray<float>::Create(pinned.get(), v.size());
  ASSERT_TRUE(src_or.ok()) << src_or.status();
  ASSERT_TRUE(dst_or.ok()) << dst_or.status();
  HostArray<float>& src = *src_or;
  HostArray<float>& dst = *dst_or;
  std::copy(v.begin(), v.end(), src.begin());
  DeviceBuffer d2 = UploadTo(gpu_.get(), std::vector<float>(v.size(), 0.f));
  ASSERT_TRUE(gpu_->CopyToDevice(src.data(), d2.data(), v.size()).ok());
  ASSERT_TRUE(gpu_->Synchronize().ok());
  ASSERT_TRUE(gpu_->CopyToHost(d2.data(), dst.data(), v.size()).ok());
  ExpectExact(std::vector<float>(dst.begin(), dst.end()), v,
              "pinned round trip");
  ASSERT_TRUE(gpu_->CopyToDevice(v.data(), d2.data(), 0).ok());
}

TEST_F(CudaVsCpuTest, FillAndAxpy) {
  for (int64_t n : {1, 37, 100003}) {
    Pair x = Upload(RandomVec(n, 2)), y = Upload(RandomVec(n, 3));
    BOTH(be->Axpy(n, -0.75f, pick(x).data(), pick(y).data()));
    ExpectSame(y, absl::StrCat("axpy n=", n));
    BOTH(be->Fill(pick(y).data(), n, 2.5f));
    ExpectExact(Gpu(y), std::vector<float>(n, 2.5f), "fill");
  }
}

TEST_F(CudaVsCpuTest, GemmAllTransposes) {
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

TEST_F(CudaVsCpuTest, RowBiasAndColumnSum) {
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

class CudaConvTest : public CudaVsCpuTest,
                     public ::testing::WithParamInterface<ConvCase> {};

TEST_P(CudaConvTest, MatchesCpu) {
  const ConvCase& p = GetParam();
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
    Shapes, CudaConvTest,
    ::testing::Values(ConvCase{2, 1, 5, 5, 3, 3, 3, 1, 0},
                      ConvCase{3, 2, 7, 6, 4, 3, 3, 1, 1},  // pad 1, odd.
                      ConvCase{2, 3, 9, 7, 5, 3, 2, 2, 1},  // stride 2.
                      ConvCase{1, 2, 4, 4, 2, 1, 1, 1, 0},  // 1x1 kernel.
                      ConvCase{2, 1, 3, 3, 2, 5, 5, 1, 2},  // kernel > input.
                      ConvCase{9, 32, 30, 30, 8, 3, 3, 1, 1},
                      // fashion_cnn's two convolutions at batch 64.
                      ConvCase{64, 1, 28, 28, 32, 3, 3, 1, 0},
                      ConvCase{64, 32, 13, 13, 64, 3, 3, 1, 0}));

TEST_F(CudaVsCpuTest, ConvEmptyBatchAndBadDesc) {
  ConvDesc d;
  d.batch = 0;
  d.in_channels = 2;
  d.in_h = d.in_w = 5;
  d.out_channels = 3;
  Pair dw = Garbage(3 * 2 * 9, 19), db = Garbage(3, 20);
  BOTH(be->Conv2dBackwardFilter(d, nullptr, nullptr, pick(dw).data(),
                                pick(db).data()));
  ExpectExact(Gpu(dw), std::vector<float>(54, 0.f), "empty-batch dw");
  ExpectExact(Gpu(db), std::vector<float>(3, 0.f), "empty-batch db");
  d.batch = 1;
  d.stride = 0;
  EXPECT_EQ(gpu_->Conv2dForward(d, nullptr, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaVsCpuTest, Relu) {
  const int64_t n = 100001;
  std::vector<float> x = RandomVec(n, 21);
  x[0] = 0.f;  // y == 0 exactly: no gradient, as on the CPU.
  x[1] = -0.f;
  x[2] = 1e-30f;
  Pair xin = Upload(x), y = Garbage(n, 22), dy = Upload(RandomVec(n, 23)),
       dx = Garbage(n, 24);
  BOTH(be->ReluForward(n, pick(xin).data(), pick(y).data()));
  BOTH(be->ReluBackward(n, pick(y).data(), pick(dy).data(), pick(dx).data()));
  ExpectExact(Gpu(y), Cpu(y), "relu forward");
  ExpectExact(Gpu(dx), Cpu(dx), "relu backward");
}

TEST_F(CudaVsCpuTest, MaxPool) {
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
    ExpectExact(Gpu(y), Cpu(y), "pool forward " + what);
    ExpectExact(Gpu(dx), Cpu(dx), "pool backward " + what);
  }
}

TEST_F(CudaVsCpuTest, SoftmaxCrossEntropy) {
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
      BOTH(be->SoftmaxCrossEntropy(c.batch, c.classes, pick(z).data(),
                                   pick(lab).data(), eps,
                                   with_grad ? pick(g).data() : nullptr,
                                   &loss[dp_gpu], &correct[dp_gpu]));
      const std::string what =
          absl::StrCat("batch ", c.batch, " classes ", c.classes,
                       " smoothing ", eps, with_grad ? "" : " no grad");
      EXPECT_TRUE(std::isfinite(loss[1])) << what;
      EXPECT_LE(std::fabs(loss[1] - loss[0]), kTol * std::max(1.f, loss[0]))
          << what << ": gpu " << loss[1] << " cpu " << loss[0];
      EXPECT_EQ(correct[1], correct[0]) << what;
      if (with_grad) {
        ExpectSame(g, "dlogits " + what);
      } else {
        ExpectExact(Gpu(g), Cpu(g), "untouched dlogits " + what);
      }
    }
  }
}

TEST_F(CudaVsCpuTest, SoftmaxCrossEntropyRejectsBadLabels) {
  Pair z = Upload(RandomVec(3 * 4, 42)), g = Garbage(12, 43);
  for (float bad : {-1.f, 4.f, 1.5f, NAN}) {
    Pair lab = Upload({0.f, 2.f, bad});
    float loss = 0;
    int64_t correct = 0;
    absl::Status s = gpu_->SoftmaxCrossEntropy(
        3, 4, z.gpu.data(), lab.gpu.data(), 0.0f, g.gpu.data(), &loss,
        &correct);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("of example 2")) << s;
  }
  EXPECT_EQ(gpu_->SoftmaxCrossEntropy(0, 4, z.gpu.data(), z.gpu.data(), 0.0f,
                                      nullptr, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Layers -----------------------------------------------------------------

// One layer's outputs on one backend.
struct LayerRun {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
};

class CudaLayerTest : public CudaVsCpuTest {
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
    out->y = Download(be, yb);
    out->dx = Download(be, dxb);
    for (const DeviceBuffer& b : g) out->grads.push_back(Download(be, b));
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
    LayerRun cpu, gpu;
    ASSERT_NO_FATAL_FAILURE(
        Run(cpu_.get(), make, in, batch, params, x, dy, &cpu));
    ASSERT_NO_FATAL_FAILURE(
        Run(gpu_.get(), make, in, batch, params, x, dy, &gpu));
    auto check = exact ? ExpectExact : ExpectClose;
    check(gpu.y, cpu.y, name + " forward");
    check(gpu.dx, cpu.dx, name + " dx");
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    for (size_t i = 0; i < cpu.grads.size(); ++i) {
      check(gpu.grads[i], cpu.grads[i], absl::StrCat(name, " grad ", i));
    }
  }
};

TEST_F(CudaLayerTest, Conv2dPad0) {
  Compare(
      "conv pad 0", [] { return NewConv2d("c", 8, 3, 0); }, Dims{3, 12, 11}, 5);
}

TEST_F(CudaLayerTest, Conv2dPad1) {
  Compare(
      "conv pad 1", [] { return NewConv2d("c", 6, 3, 1); }, Dims{4, 9, 10}, 3);
}

TEST_F(CudaLayerTest, Relu) {
  Compare(
      "relu", [] { return NewRelu("r"); }, Dims{3, 7, 5}, 4,
      /*exact=*/true);
}

TEST_F(CudaLayerTest, MaxPool) {
  Compare(
      "maxpool", [] { return NewMaxPool("p", 2); }, Dims{3, 7, 9}, 4,
      /*exact=*/true);
}

TEST_F(CudaLayerTest, Flatten) {
  Compare(
      "flatten", [] { return NewFlatten("f"); }, Dims{3, 4, 5}, 4,
      /*exact=*/true);
}

TEST_F(CudaLayerTest, Dense) {
  Compare(
      "dense", [] { return NewDense("d", 33); }, Dims{40, 2, 3}, 17);
}

// ---- The whole model --------------------------------------------------------

// fashion_cnn on both backends with identical parameters and batch.
//
// Forward values decide ReLU and max-pool branches; a value within float
// rounding of a kink (|x| ~ 1e-7 at a ReLU, two near-equal maxima) could go
// different ways on the two backends and move a gradient contribution by far
// more than 1e-4. So inputs and the parameters up to fc1 are small multiples
// of powers of two: every product is exact, and every partial sum stays
// below 2^24 units, so both backends compute bit-identical activations up to
// fc1's output whatever their summation order (this also needs the GEMM-like
// convolution algorithms, the CudaBackendOptions default). Exact ties then
// break the same way on both. fc2 and the backward pass use ordinary floats.
//   x in {0, 1}; conv1.w = j/8, j in [-2, 2]; conv1.b = j/8, j in [-1, 1]
//     -> conv1 outputs are multiples of 1/8, |.| <= 9*2 + 1 = 19 units;
//   conv2.w = j/64, j in [-1, 1]; conv2.b = j/512, j in [-8, 8]
//     -> multiples of 1/512, |.| <= 288*19 + 8 = 5480 units;
//   fc1.w = j/256, j in [-1, 1]; fc1.b = j/2^17, j in [-64, 64]
//     -> multiples of 2^-17, |.| <= 1600*5480 + 64 < 2^24 units.
class CudaModelTest : public CudaVsCpuTest {};

TEST_F(CudaModelTest, FashionCnnComputeGradients) {
  const int batch = 32;
  absl::StatusOr<std::unique_ptr<Model>> cpu_model =
      BuildModel("fashion_cnn", cpu_.get(), batch);
  absl::StatusOr<std::unique_ptr<Model>> gpu_model =
      BuildModel("fashion_cnn", gpu_.get(), batch);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  Model& cm = **cpu_model;
  Model& gm = **gpu_model;

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
  ASSERT_EQ(cm.param_specs().size(), quants.size());
  for (size_t t = 0; t < quants.size(); ++t) {
    const TensorSpec& spec = cm.param_specs()[t];
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
  ASSERT_TRUE(cm.SetParameters(params).ok());
  ASSERT_TRUE(gm.SetParameters(params).ok());

  std::vector<float> x(batch * 784);
  for (float& v : x) v = static_cast<float>(rng() % 2);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;

  absl::StatusOr<StepResult> cr =
      cm.ComputeGradients(x.data(), labels.data(), batch);
  absl::StatusOr<StepResult> gr =
      gm.ComputeGradients(x.data(), labels.data(), batch);
  ASSERT_TRUE(cr.ok()) << cr.status();
  ASSERT_TRUE(gr.ok()) << gr.status();
  EXPECT_LE(std::fabs(gr->loss - cr->loss), kTol * std::max(1.f, cr->loss))
      << "gpu " << gr->loss << " cpu " << cr->loss;
  EXPECT_EQ(gr->correct, cr->correct);

  const int64_t n = cm.num_parameters();
  std::vector<float> cg(n), gg(n);
  ASSERT_TRUE(cpu_->CopyToHost(cm.gradients(), cg.data(), n).ok());
  ASSERT_TRUE(gpu_->CopyToHost(gm.gradients(), gg.data(), n).ok());
  int64_t offset = 0;
  for (const TensorSpec& spec : cm.param_specs()) {
    const int64_t size = spec.NumElements();
    ExpectClose(
        std::vector<float>(gg.begin() + offset, gg.begin() + offset + size),
        std::vector<float>(cg.begin() + offset, cg.begin() + offset + size),
        "gradient of " + spec.name);
    offset += size;
  }

  absl::StatusOr<StepResult> ce = cm.Evaluate(x.data(), labels.data(), 20);
  absl::StatusOr<StepResult> ge = gm.Evaluate(x.data(), labels.data(), 20);
  ASSERT_TRUE(ce.ok() && ge.ok());
  EXPECT_LE(std::fabs(ge->loss - ce->loss), kTol * std::max(1.f, ce->loss));
  EXPECT_EQ(ge->correct, ce->correct);

  std::vector<float> back(n);
  ASSERT_TRUE(gm.GetParameters(absl::MakeSpan(back)).ok());
  ExpectExact(back, params, "parameter round trip");
}

}  // namespace
}  // namespace downpour
