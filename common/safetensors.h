// File: common/safetensors.h
//
// Reads and writes float32 checkpoints in the safetensors format
// (https://github.com/huggingface/safetensors), so a model trained here can be
// opened by `safetensors.numpy.load_file` / `safetensors.torch.load_file`:
//
//   [u64 little-endian N][N bytes of JSON header, space-padded to a multiple
//   of 8][raw little-endian tensor data]
//
// with a header such as
//   {"__metadata__":{"step":"100"},
//    "fc1.w":{"dtype":"F32","shape":[784,128],"data_offsets":[0,401408]}, ...}
// where data_offsets are byte offsets relative to the start of the data.
//
// Usage:
//   DP_RETURN_IF_ERROR(WriteSafetensors(path, layout.tensors, params,
//                                       {{"step", "100"}}));
//   DP_ASSIGN_OR_RETURN(SafetensorsFile f, ReadSafetensors(path));
#ifndef DOWNPOUR_COMMON_SAFETENSORS_H_
#define DOWNPOUR_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding.h"

namespace downpour {

// The largest JSON header ReadSafetensors accepts (the reference
// implementation's limit too): a garbage length cannot make a reader
// allocate gigabytes. WriteSafetensors refuses to write a larger one.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Writes `tensors` (float32, data taken in order from `flat`, the
// concatenation of the tensors) and string `metadata` to `path`.
//
// Contract:
//  * Names must be unique, non-empty and not "__metadata__"; dims >= 0; the
//    element counts must sum to flat.size(). Otherwise InvalidArgument and
//    nothing is written. Names and metadata should be valid UTF-8 (JSON
//    requires it); they are escaped, not validated.
//  * The file is written to a fresh temporary file beside `path` and renamed
//    over it (common/atomic_file.h; mode 0600), so a crash leaves either the
//    old file or the new one, never half of one.
//  * A header above kMaxSafetensorsHeaderBytes is InvalidArgument and
//    nothing is written: no reader would accept the file.
//  * Output is a pure function of the arguments: tensors appear in the given
//    order, metadata in key order (std::map), "__metadata__" first and
//    omitted when empty.
//  * An I/O failure returns Unavailable naming the path; the temporary file
//    is removed.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorSpec>& tensors,
                              absl::Span<const float> flat,
                              const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  // Sorted by data offset, so `flat` is their concatenation in this order.
  std::vector<TensorSpec> tensors;
  std::vector<float> flat;
  std::map<std::string, std::string> metadata;
};

// Reads a safetensors file holding only F32 tensors.
//
// Errors (all naming the path): NotFound if `path` does not exist;
// Unimplemented for a dtype other than F32; DataLoss for a malformed file: bad
// header length or JSON, unknown keys, duplicate names, data_offsets that do
// not match the shape or do not tile the data section exactly.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_SAFETENSORS_H_
