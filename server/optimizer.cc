#include "server/optimizer.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace downpour {
namespace {

class Sgd final : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}
  const std::string& name() const override { return name_; }
  int StateSize() const override { return 0; }
  float InitialState() const override { return 0; }
  void Apply(int64_t n, const float* __restrict grad, float scale,
             float* __restrict params, float*) const override {
    const float step = lr_ * scale;
    for (int64_t i = 0; i < n; ++i) params[i] -= step * grad[i];
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
  void Apply(int64_t n, const float* __restrict grad, float scale,
             float* __restrict params, float* __restrict v) const override {
    for (int64_t i = 0; i < n; ++i) {
      v[i] = mu_ * v[i] + scale * grad[i];
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
  void Apply(int64_t n, const float* __restrict grad, float scale,
             float* __restrict params, float* __restrict acc) const override {
    for (int64_t i = 0; i < n; ++i) {
      const float g = scale * grad[i];
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
