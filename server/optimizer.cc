#include "server/optimizer.h"

#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

// Value i of a float32 array at any alignment; compiles to a plain
// (unaligned) vector load in the loops below.
inline float Load(const char* __restrict p, int64_t i) {
  float v;
  std::memcpy(&v, p + 4 * i, sizeof v);
  return v;
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 0; }
  float InitialState() const override { return 0; }
  void Apply(int64_t n, const void* grad_bytes, float scale,
             float* __restrict params, float*) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float step = lr_ * scale;
    for (int64_t i = 0; i < n; ++i) params[i] -= step * Load(grad, i);
  }

 private:
  const std::string name_ = "sgd";
  const float lr_;
};

class Momentum final : public Optimizer {
 public:
  Momentum(float lr, float mu) : lr_(lr), mu_(mu) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 1; }
  float InitialState() const override { return 0; }
  // v = mu * v + g; w -= lr * v  (PyTorch's SGD-with-momentum form).
  void Apply(int64_t n, const void* grad_bytes, float scale,
             float* __restrict params, float* __restrict v) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    for (int64_t i = 0; i < n; ++i) {
      v[i] = mu_ * v[i] + scale * Load(grad, i);
      params[i] -= lr_ * v[i];
    }
  }

 private:
  const std::string name_ = "momentum";
  const float lr_, mu_;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(float lr, float init) : lr_(lr), init_(init) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 1; }
  float InitialState() const override { return init_; }
  // a += g^2; w -= lr * g / sqrt(a).
  void Apply(int64_t n, const void* grad_bytes, float scale,
             float* __restrict params, float* __restrict acc) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    for (int64_t i = 0; i < n; ++i) {
      const float g = scale * Load(grad, i);
      acc[i] += g * g;
      params[i] -= lr_ * g / std::sqrt(acc[i]);
    }
  }

 private:
  const std::string name_ = "adagrad";
  const float lr_, init_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& o) {
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning rate must be a positive finite number, got ",
        o.learning_rate));
  }
  if (o.name == "sgd") return std::make_unique<Sgd>(o.learning_rate);
  if (o.name == "momentum") {
    if (!(o.momentum >= 0 && o.momentum < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("momentum must be in [0, 1), got ", o.momentum));
    }
    return std::make_unique<Momentum>(o.learning_rate, o.momentum);
  }
  if (o.name == "adagrad") {
    if (!(o.adagrad_initial_accumulator > 0)) {
      return absl::InvalidArgumentError(
          "adagrad initial accumulator must be positive");
    }
    return std::make_unique<Adagrad>(o.learning_rate,
                                     o.adagrad_initial_accumulator);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown optimizer '", o.name, "' (known: sgd, momentum, adagrad)"));
}

}  // namespace downpour
