// File: worker/nn/device_kind.h
//
// What a worker may ask to compute on (--device) and which CPU backend
// (--cpu_backend), as enums with one name table each (common/enum_names.h):
// the flags are parsed into these, so an unknown name is refused while the
// command line is read, and nothing below main compares strings.
#ifndef DOWNPOUR_WORKER_NN_DEVICE_KIND_H_
#define DOWNPOUR_WORKER_NN_DEVICE_KIND_H_

#include <string>

#include "absl/strings/string_view.h"
#include "common/enum_names.h"

namespace downpour {

// auto: CUDA when a GPU is usable, else the CPU; cpu; cuda (refuses to run
// without a GPU).
enum class DeviceKind { kAuto, kCpu, kCuda };

inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {
    {DeviceKind::kAuto, "auto"},
    {DeviceKind::kCpu, "cpu"},
    {DeviceKind::kCuda, "cuda"},
};

inline const char* DeviceKindName(DeviceKind d) {
  return EnumNameOf(kDeviceKindNames, d);
}

// oneDNN primitives (the default) or im2col + OpenBLAS GEMM.
enum class CpuBackendKind { kOnednn, kOpenblas };

inline constexpr EnumName<CpuBackendKind> kCpuBackendNames[] = {
    {CpuBackendKind::kOnednn, "onednn"},
    {CpuBackendKind::kOpenblas, "openblas"},
};

inline const char* CpuBackendName(CpuBackendKind b) {
  return EnumNameOf(kCpuBackendNames, b);
}

// The library's own name, for the log: "oneDNN" or "OpenBLAS".
inline const char* CpuLibraryName(CpuBackendKind b) {
  return b == CpuBackendKind::kOnednn ? "oneDNN" : "OpenBLAS";
}

// Both as flag types.
inline bool AbslParseFlag(absl::string_view text, DeviceKind* d,
                          std::string* error) {
  return ParseEnumFlag(kDeviceKindNames, text, d, error);
}
inline std::string AbslUnparseFlag(DeviceKind d) { return DeviceKindName(d); }
inline bool AbslParseFlag(absl::string_view text, CpuBackendKind* b,
                          std::string* error) {
  return ParseEnumFlag(kCpuBackendNames, text, b, error);
}
inline std::string AbslUnparseFlag(CpuBackendKind b) { return CpuBackendName(b); }

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_DEVICE_KIND_H_
