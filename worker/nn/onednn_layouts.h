// File: worker/nn/onednn_layouts.h
//
// The oneDNN backend's record of which tensors in its memory are held in a
// layout other than the interface's plain one (NCHW / row-major), e.g.
// oneDNN's blocked nChw16c.
//
// The Backend interface is NCHW, but backend memory is opaque (read and
// written through Backend calls only), so the oneDNN backend keeps the
// activations it writes in the layout its primitives prefer and records each
// such tensor here as a region: its start address, byte size and layout. An
// op that reads a tensor in a recorded layout takes it as it is; one that
// reads or writes its bytes in the plain layout first has the tracker convert
// them (ReadPlain) or forget them (Overwrite). A region is only recorded for
// a layout without padding, so it covers exactly the bytes of the plain
// tensor.
//
// Usage:
//   onednn::LayoutTracker layouts(&ctx);
//   layouts.Overwrite(y, n);          // Before writing y's n floats.
//   ... a primitive writes y in layout md ...
//   layouts.Set(y, md);               // y now holds md.
//   layouts.ReadPlain(y, n);          // Before a plain loop reads y.
//
// Errors: the methods that convert a region call oneDNN reorders and throw
// dnnl::error when one fails (run them under onednn::Guard).
//
// Thread-safety: none; owned by one backend, used by one thread at a time.
#ifndef DOWNPOUR_WORKER_NN_ONEDNN_LAYOUTS_H_
#define DOWNPOUR_WORKER_NN_ONEDNN_LAYOUTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "worker/nn/onednn_context.h"

namespace downpour {
namespace onednn {

class LayoutTracker {
 public:
  // `ctx` runs the conversions. Not owned; must outlive the tracker.
  explicit LayoutTracker(Context* ctx) : ctx_(ctx) {}
  LayoutTracker(const LayoutTracker&) = delete;
  LayoutTracker& operator=(const LayoutTracker&) = delete;

  // True when no tensor is held in a layout of its own.
  bool empty() const { return regions_.empty(); }

  // The layout of the tensor of exactly `bytes` bytes at p, when one is
  // recorded (a region starting at p with that size); else null. Valid until
  // the next call that changes the tracker.
  const dnnl::memory::desc* Find(const void* p, size_t bytes) const;

  // The layout of the tensor of plain layout `plain` at p: a region's layout
  // when one starts at p with the same dimensions and size, else `plain`
  // (after converting any region that overlaps the tensor's bytes).
  dnnl::memory::desc LayoutOf(const float* p, const dnnl::memory::desc& plain);

  // Converts every region overlapping [p, p + n floats) to plain, in place,
  // and forgets it.
  void ReadPlain(const float* p, int64_t n);

  // Before [p, p + n floats) is written: regions inside it are dropped,
  // regions reaching beyond it converted to plain first.
  void Overwrite(const float* p, int64_t n);

  // Records that [p, p + md's size) now holds a tensor in layout md (not a
  // plain one). Call after Overwrite of those bytes.
  void Set(const void* p, const dnnl::memory::desc& md);

  // Drops the regions starting inside [p, p + bytes) (the memory is freed).
  void Forget(const void* p, size_t bytes);

 private:
  struct Region {
    size_t bytes;
    dnnl::memory::desc md;
  };

  Context* const ctx_;                   // Not owned.
  std::map<uintptr_t, Region> regions_;  // By start address.
  std::vector<float> convert_;           // In-place conversions go through it.
};

}  // namespace onednn
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_ONEDNN_LAYOUTS_H_
