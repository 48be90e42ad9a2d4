// libFuzzer target: model specs (worker/nn/model_spec.h), the whole input as
// the text of a spec, through ParseModelSpec and ResolveModel. A spec that
// resolves must keep the bounds the executor relies on: every activation at
// most kMaxActivation floats per example, the parameters at most
// kMaxParameters and equal to the sum of its trainable tensors, every input
// an earlier layer, the last layer giving `classes` values.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "worker/nn/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace downpour;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(text, "fuzz.prototxt");
  if (!spec.ok()) return 0;
  absl::StatusOr<ResolvedModel> m = ResolveModel(*spec, "fuzz.prototxt");
  if (!m.ok()) return 0;
  if (m->layers.empty() || m->num_parameters > kMaxParameters) __builtin_trap();
  for (size_t i = 0; i < m->layers.size(); ++i) {
    const ResolvedLayer& l = m->layers[i];
    if (l.out.Size() < 1 || l.out.Size() > kMaxActivation) __builtin_trap();
    if (l.inputs.empty() || l.inputs.size() != l.in_dims.size())
      __builtin_trap();
    for (int in : l.inputs) {
      if (in < -1 || in >= static_cast<int>(i)) __builtin_trap();
    }
  }
  if (m->layers.back().out.Size() != m->classes) __builtin_trap();
  int64_t trainable = 0;
  for (const ModelTensor& t : ModelTensors(*m)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.trainable) trainable += n;
  }
  if (trainable != m->num_parameters) __builtin_trap();
  (void)CheckModelFitsData(*m, 1, 28, 28, 10);
  return 0;
}
