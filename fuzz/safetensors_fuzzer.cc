// libFuzzer target: common/safetensors.h's reader over arbitrary files. An
// accepted file's tensors must account for exactly its values.
#include <cstdint>
#include <string>

#include "common/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = downpour::fuzz::WriteScratchFile(
      "model.safetensors", std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<downpour::SafetensorsFile> f = downpour::ReadSafetensors(path);
  if (!f.ok()) return 0;
  int64_t total = 0;
  for (const downpour::TensorSpec& t : f->tensors) total += t.NumElements();
  if (total != static_cast<int64_t>(f->flat.size())) __builtin_trap();
  return 0;
}
