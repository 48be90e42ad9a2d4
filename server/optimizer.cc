// File: server/optimizer.cc (see optimizer.h).
#include "server/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

// Value i of a float32 array at any alignment; compiles to a plain
// (unaligned) vector load in the loops below.
// A gradient value; a non-finite one reads as 0 (Optimizer::ApplyAt).
// Integer compares on the exponent bits, so the loops still vectorize.
inline float Load(const char* __restrict p, int64_t i) {
  uint32_t u;
  std::memcpy(&u, p + 4 * i, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) u = 0;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

class Sgd final : public Optimizer {
 public:
  Sgd(float lr, const LrSchedule& sched) : lr_(lr), sched_(sched) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 0; }
  float InitialState() const override { return 0; }
  void ApplyAt(int64_t t, int64_t n, const void* grad_bytes, float scale,
               float* __restrict params, float*) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float step = lr_ * LrFactor(sched_, t) * scale;
    for (int64_t i = 0; i < n; ++i) params[i] -= step * Load(grad, i);
  }

 private:
  const std::string name_ = "sgd";
  const float lr_;
  const LrSchedule sched_;
};

class Momentum final : public Optimizer {
 public:
  Momentum(float lr, float mu, const LrSchedule& sched)
      : lr_(lr), mu_(mu), sched_(sched) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 1; }
  float InitialState() const override { return 0; }
  // v = mu * v + g; w -= lr * v  (PyTorch's SGD-with-momentum form).
  void ApplyAt(int64_t t, int64_t n, const void* grad_bytes, float scale,
               float* __restrict params, float* __restrict v) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float lr = lr_ * LrFactor(sched_, t);
    for (int64_t i = 0; i < n; ++i) {
      v[i] = mu_ * v[i] + scale * Load(grad, i);
      params[i] -= lr * v[i];
    }
  }

 private:
  const std::string name_ = "momentum";
  const float lr_, mu_;
  const LrSchedule sched_;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(float lr, float init, const LrSchedule& sched)
      : lr_(lr), init_(init), sched_(sched) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 1; }
  float InitialState() const override { return init_; }
  // a += g^2; w -= lr * g / sqrt(a).
  void ApplyAt(int64_t t, int64_t n, const void* grad_bytes, float scale,
               float* __restrict params, float* __restrict acc) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float lr = lr_ * LrFactor(sched_, t);
    for (int64_t i = 0; i < n; ++i) {
      const float g = scale * Load(grad, i);
      acc[i] += g * g;
      params[i] -= lr * g / std::sqrt(acc[i]);
    }
  }

 private:
  const std::string name_ = "adagrad";
  const float lr_, init_;
  const LrSchedule sched_;
};

// One Adam update's constants.
struct AdamStep {
  float scale, keep, lr, eps, b1, b2, a1, a2;
};

// The Adam loop over n elements, m and v interleaved in mv. Compiled below
// for the baseline instruction set and for AVX2 and AVX-512, and picked once
// at start-up by what the CPU has (Adam's sqrt and division vectorize; with
// the file's -ffp-contract=off every version computes the same bits).
__attribute__((always_inline)) inline void AdamLoopBody(
    int64_t n, const char* __restrict grad, const AdamStep& s,
    float* __restrict params, float* __restrict mv) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = s.scale * Load(grad, i);
    const float m = s.b1 * mv[2 * i] + s.a1 * g;
    const float v = s.b2 * mv[2 * i + 1] + s.a2 * g * g;
    mv[2 * i] = m;
    mv[2 * i + 1] = v;
    params[i] = params[i] * s.keep - s.lr * m / (std::sqrt(v) + s.eps);
  }
}

using AdamLoopFn = void (*)(int64_t, const char*, const AdamStep&, float*,
                            float*);

void AdamLoopBaseline(int64_t n, const char* __restrict grad,
                      const AdamStep& s, float* __restrict params,
                      float* __restrict mv) {
  AdamLoopBody(n, grad, s, params, mv);
}

__attribute__((target("avx2"))) void AdamLoopAvx2(
    int64_t n, const char* __restrict grad, const AdamStep& s,
    float* __restrict params, float* __restrict mv) {
  AdamLoopBody(n, grad, s, params, mv);
}

__attribute__((target("avx512f"))) void AdamLoopAvx512(
    int64_t n, const char* __restrict grad, const AdamStep& s,
    float* __restrict params, float* __restrict mv) {
  AdamLoopBody(n, grad, s, params, mv);
}

AdamLoopFn PickAdamLoop() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return AdamLoopAvx512;
  if (__builtin_cpu_supports("avx2")) return AdamLoopAvx2;
  return AdamLoopBaseline;
}

// Adam (Kingma & Ba), m and v interleaved per element; the step count is
// the update number t, so bias correction needs no state of its own.
class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerOptions& o)
      : lr_(o.learning_rate),
        b1_(o.adam_beta1),
        b2_(o.adam_beta2),
        eps_(o.adam_epsilon),
        wd_(o.weight_decay),
        sched_(o.schedule) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 2; }
  float InitialState() const override { return 0; }
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // w -= lr_t * m / (sqrt(v) + eps_hat), with lr_t = lr sqrt(1-b2^t)/(1-b1^t)
  // and eps_hat = eps sqrt(1-b2^t) (the paper's efficient form); with
  // weight decay, w *= 1 - lr sched(t) wd first (AdamW).
  void ApplyAt(int64_t t, int64_t n, const void* grad_bytes, float scale,
               float* __restrict params, float* __restrict mv) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const double td = static_cast<double>(std::max<int64_t>(t, 1));
    const double c2 = std::sqrt(1.0 - std::pow(double{b2_}, td));
    const float factor = LrFactor(sched_, t);  // The schedule at t.
    const float lr = static_cast<float>(lr_ * factor * c2 /
                                        (1.0 - std::pow(double{b1_}, td)));
    const float eps = static_cast<float>(eps_ * c2);
    const float keep = static_cast<float>(1.0 - double{lr_} * factor * wd_);
    const AdamStep step{scale, keep, lr, eps, b1_, b2_, 1 - b1_, 1 - b2_};
    adam_loop_(n, grad, step, params, mv);
  }

 private:
  const std::string name_ = "adam";
  const float lr_, b1_, b2_, eps_, wd_;
  const LrSchedule sched_;
  const AdamLoopFn adam_loop_ = PickAdamLoop();
};

}  // namespace

float LrFactor(const LrSchedule& s, int64_t t) {
  if (t < 1) t = 1;
  if (t <= s.warmup_updates) {
    return static_cast<float>(t) / static_cast<float>(s.warmup_updates);
  }
  const int64_t after = t - s.warmup_updates;
  if (s.decay == "cosine" && s.decay_updates > s.warmup_updates) {
    const double span = static_cast<double>(s.decay_updates - s.warmup_updates);
    const double p = std::min(1.0, static_cast<double>(after) / span);
    constexpr double kPi = 3.14159265358979323846;
    return static_cast<float>(s.min_factor + (1.0 - s.min_factor) * 0.5 *
                                                 (1.0 + std::cos(kPi * p)));
  }
  if (s.decay == "step" && s.step_every > 0) {
    return static_cast<float>(
        std::pow(double{s.step_gamma}, static_cast<double>(after / s.step_every)));
  }
  return 1.0f;
}

absl::Status ValidateLrSchedule(const LrSchedule& s) {
  if (s.decay != "none" && s.decay != "cosine" && s.decay != "step") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown learning-rate decay '", s.decay, "' (known: none, cosine, step)"));
  }
  if (s.warmup_updates < 0) {
    return absl::InvalidArgumentError("lr warm-up updates must be >= 0");
  }
  if (s.decay == "cosine" &&
      !(s.decay_updates > s.warmup_updates && s.min_factor >= 0 &&
        s.min_factor <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cosine decay needs decay updates (", s.decay_updates,
        ") > warm-up updates (", s.warmup_updates,
        ") and a final factor in [0, 1] (", s.min_factor, ")"));
  }
  if (s.decay == "step" &&
      !(s.step_every > 0 && s.step_gamma > 0 && s.step_gamma <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step decay needs step_every > 0 (", s.step_every,
        ") and gamma in (0, 1] (", s.step_gamma, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> ScaleLearningRate(float lr, const std::string& scaling,
                                        bool aggregated, int workers) {
  if (workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr scaling needs >= 1 worker, got ", workers));
  }
  float f = 1.0f;
  if (scaling == "linear") {
    f = static_cast<float>(workers);
  } else if (scaling == "sqrt") {
    f = std::sqrt(static_cast<float>(workers));
  } else if (scaling != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown lr scaling '", scaling, "' (known: none, linear, sqrt)"));
  }
  return aggregated ? lr * f : lr / f;
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& o) {
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning rate must be a positive finite number, got ",
        o.learning_rate));
  }
  if (absl::Status st = ValidateLrSchedule(o.schedule); !st.ok()) return st;
  if (!(o.weight_decay >= 0 && o.weight_decay < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight decay must be in [0, 1), got ", o.weight_decay));
  }
  if (o.weight_decay > 0 && o.name != "adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight decay is implemented for adam only (AdamW), not '", o.name,
        "'"));
  }
  const LrSchedule& sched = o.schedule;
  if (o.name == "sgd") return std::make_unique<Sgd>(o.learning_rate, sched);
  if (o.name == "momentum") {
    if (!(o.momentum >= 0 && o.momentum < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("momentum must be in [0, 1), got ", o.momentum));
    }
    return std::make_unique<Momentum>(o.learning_rate, o.momentum, sched);
  }
  if (o.name == "adagrad") {
    if (!(o.adagrad_initial_accumulator > 0)) {
      return absl::InvalidArgumentError(
          "adagrad initial accumulator must be positive");
    }
    return std::make_unique<Adagrad>(o.learning_rate,
                                     o.adagrad_initial_accumulator, sched);
  }
  if (o.name == "adam") {
    if (!(o.adam_beta1 >= 0 && o.adam_beta1 < 1 && o.adam_beta2 >= 0 &&
          o.adam_beta2 < 1 && o.adam_epsilon > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "adam needs betas in [0, 1) and epsilon > 0, got ", o.adam_beta1,
          ", ", o.adam_beta2, ", ", o.adam_epsilon));
    }
    return std::make_unique<Adam>(o);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown optimizer '", o.name,
      "' (known: sgd, momentum, adagrad, adam)"));
}

}  // namespace downpour
