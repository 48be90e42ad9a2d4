// Prints what a model spec resolves to: one line per layer (kind, inputs,
// output dims, parameters) and one per tensor of its state, as PyTorch names
// them, or the spec's error. tools/spec_to_torch_test.sh compares the tensor
// lines with the PyTorch module that tools/spec_to_torch.py builds.
//   bazel-bin/tools/model_spec_info resnet20
//   bazel-bin/tools/model_spec_info path/to/net.prototxt
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/nn/model_spec.h"

int main(int argc, char** argv) {
  using namespace downpour;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s NAME_OR_SPEC_FILE\nbuilt-in models: %s\n",
                 argv[0], absl::StrJoin(BuiltinModelNames(), ", ").c_str());
    return 2;
  }
  absl::StatusOr<ResolvedModel> m = LoadModel(argv[1]);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 1;
  }
  const auto dims = [](const Dims& d) {
    return absl::StrCat(d.c, "x", d.h, "x", d.w);
  };
  std::printf("model %s (%s): input %s, %d classes, %lld parameters\n",
              m->name.c_str(), m->source.c_str(), dims(m->input).c_str(),
              m->classes, static_cast<long long>(m->num_parameters));
  for (const ResolvedLayer& l : m->layers) {
    std::vector<std::string> ins;
    for (int i : l.inputs) ins.push_back(i < 0 ? "input" : m->layers[i].name);
    std::printf("layer %s %s <- %s -> %s (%lld parameters)\n", l.name.c_str(),
                LayerKindName(l.kind), absl::StrJoin(ins, ",").c_str(),
                dims(l.out).c_str(), static_cast<long long>(l.num_parameters));
  }
  for (const ModelTensor& t : ModelTensors(*m)) {
    std::printf("tensor %s %s\n", t.name.c_str(),
                absl::StrJoin(t.shape, ",").c_str());
  }
  return 0;
}
