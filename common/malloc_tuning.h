// File: common/malloc_tuning.h
//
// Keeps large buffers (transport slices, staging buffers, up to 32 MiB) in
// glibc's main heap (one arena) and keeps freed heap memory mapped, so the
// steady state of pulls and pushes reuses warm pages instead of mmap-ing,
// page-faulting and unmapping fresh ones on every message. The transport
// benchmark measured the first touch of fresh pages at well under memcpy
// speed on this machine. A process-wide setting, so only `main` functions
// call it, before any thread starts.
#ifndef DOWNPOUR_COMMON_MALLOC_TUNING_H_
#define DOWNPOUR_COMMON_MALLOC_TUNING_H_

namespace downpour {

// Returns false if the C library refused a setting (nothing else changes).
bool TuneMallocForLargeBuffers();

}  // namespace downpour

#endif  // DOWNPOUR_COMMON_MALLOC_TUNING_H_
