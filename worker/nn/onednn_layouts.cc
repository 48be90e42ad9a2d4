// File: worker/nn/onednn_layouts.cc (see onednn_layouts.h).
#include "worker/nn/onednn_layouts.h"

#include <cstring>

namespace downpour {
namespace onednn {
namespace {

using dnnl::memory;

size_t Bytes(int64_t n) { return static_cast<size_t>(n) * 4; }
uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

const memory::desc* LayoutTracker::Find(const void* p, size_t bytes) const {
  auto it = regions_.find(Addr(p));
  if (it == regions_.end() || it->second.bytes != bytes) return nullptr;
  return &it->second.md;
}

memory::desc LayoutTracker::LayoutOf(const float* p,
                                     const memory::desc& plain) {
  if (regions_.empty()) return plain;
  auto it = regions_.find(Addr(p));
  if (it != regions_.end() && it->second.bytes == plain.get_size() &&
      it->second.md.dims() == plain.dims()) {
    return it->second.md;
  }
  ReadPlain(p, static_cast<int64_t>(plain.get_size() / 4));
  return plain;
}

void LayoutTracker::ReadPlain(const float* p, int64_t n) {
  const uintptr_t lo = Addr(p), hi = lo + Bytes(n);
  for (auto it = regions_.begin(); it != regions_.end();) {
    const uintptr_t rlo = it->first, rhi = rlo + it->second.bytes;
    if (rlo >= hi || rhi <= lo) {
      ++it;
      continue;
    }
    // Reorder to plain through convert_, then back in place.
    const memory::desc& md = it->second.md;
    const memory::desc plain = PlainOf(md);
    convert_.resize(it->second.bytes / 4);
    void* where = reinterpret_cast<void*>(rlo);
    ctx_->Reorder(md, where, plain, convert_.data());
    std::memcpy(where, convert_.data(), it->second.bytes);
    it = regions_.erase(it);
  }
}

void LayoutTracker::Overwrite(const float* p, int64_t n) {
  const uintptr_t lo = Addr(p), hi = lo + Bytes(n);
  for (auto it = regions_.begin(); it != regions_.end();) {
    const uintptr_t rlo = it->first, rhi = rlo + it->second.bytes;
    if (rlo >= hi || rhi <= lo) {
      ++it;
    } else if (rlo >= lo && rhi <= hi) {
      it = regions_.erase(it);  // Wholly overwritten.
    } else {
      // Partly overwritten: the rest must stay readable as plain.
      ReadPlain(reinterpret_cast<const float*>(rlo),
                static_cast<int64_t>(it->second.bytes / 4));
      it = regions_.begin();
    }
  }
}

void LayoutTracker::Set(const void* p, const memory::desc& md) {
  regions_[Addr(p)] = Region{md.get_size(), md};
}

void LayoutTracker::Forget(const void* p, size_t bytes) {
  const uintptr_t lo = Addr(p), hi = lo + bytes;
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->first >= lo && it->first < hi) {
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace onednn
}  // namespace downpour
