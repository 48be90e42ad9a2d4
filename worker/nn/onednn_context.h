// File: worker/nn/onednn_context.h
//
// What every part of the oneDNN backend (onednn_backend.h) shares: the CPU
// engine and its stream, the cache of reorder primitives, the one scratchpad
// all primitives run with (user scratchpad mode, only grown), and small
// helpers for memory descriptors and oneDNN's exceptions.
//
// oneDNN's C++ API (dnnl.hpp) reports errors by throwing dnnl::error. The
// helpers here that may throw say so; Guard() turns such an exception into a
// Status at the backend's interface, so no exception leaves the backend.
//
// Like the layout tracker (onednn_layouts.h) and the primitive cache
// (onednn_primitives.h), this is a part of the backend, in namespace
// downpour::onednn; other code uses onednn_backend.h only.
//
// Usage:
//   onednn::Context ctx;  // Throws dnnl::error without a CPU engine.
//   absl::Status s = onednn::Guard("CopyToHost", [&] {
//     ctx.Reorder(blocked_md, src, PlainOf(blocked_md), host_dst);
//     return absl::OkStatus();
//   });
//
// Thread-safety: none; owned by one backend, used by one thread at a time.
#ifndef DOWNPOUR_WORKER_NN_ONEDNN_CONTEXT_H_
#define DOWNPOUR_WORKER_NN_ONEDNN_CONTEXT_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace downpour {
namespace onednn {

// Runs f (returning absl::Status), turning a oneDNN exception into Internal
// naming the operation `op`.
template <typename F>
absl::Status Guard(const char* op, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(
        op, ": oneDNN error ", static_cast<int>(e.status), ": ", e.what()));
  }
}

// An f32 descriptor of `dims` in layout `tag` (format_tag::any lets a
// primitive choose).
dnnl::memory::desc Plain(const dnnl::memory::dims& dims,
                         dnnl::memory::format_tag tag);

// The interface's plain (row-major) layout of md's dimensions.
dnnl::memory::desc PlainOf(const dnnl::memory::desc& md);

// A buffer of layout `md` owned by `slot`, created (or re-created for another
// layout) on use: for the rare arguments whose layout differs from the
// primitive's, and for outputs whose preferred layout is padded and so does
// not fit the caller's buffer. Throws dnnl::error.
dnnl::memory& Spare(std::unique_ptr<dnnl::memory>& slot,
                    const dnnl::memory::desc& md, const dnnl::engine& e);

// The CPU engine, its stream, the reorders between layouts and the
// scratchpad.
class Context {
 public:
  // Throws dnnl::error when oneDNN cannot create a CPU engine.
  Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // Copies the tensor at `src` in layout `smd` to `dst` in layout `dmd` (the
  // same dimensions), waiting for it; the reorder primitive of each pair of
  // layouts is made once. src and dst must not overlap. Throws dnnl::error.
  void Reorder(const dnnl::memory::desc& smd, const void* src,
               const dnnl::memory::desc& dmd, void* dst);

  // The scratchpad as `desc`, grown to at least `bytes` first (the largest
  // scratchpad of the primitive's family). Every primitive runs on this one
  // buffer: they run one at a time. Throws dnnl::error.
  dnnl::memory Scratch(const dnnl::memory::desc& desc, size_t bytes);

 private:
  struct CachedReorder {
    dnnl::memory::desc src, dst;
    dnnl::reorder prim;
  };

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<CachedReorder> reorders_;
  std::unique_ptr<dnnl::memory> scratch_;  // u8 buffer, only grown.
  size_t scratch_size_ = 0;
};

}  // namespace onednn
}  // namespace downpour

#endif  // DOWNPOUR_WORKER_NN_ONEDNN_CONTEXT_H_
