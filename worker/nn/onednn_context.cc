// File: worker/nn/onednn_context.cc (see onednn_context.h).
#include "worker/nn/onednn_context.h"

#include <algorithm>
#include <memory>

namespace downpour {
namespace onednn {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

memory::desc Plain(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, Dt::f32, tag);
}

memory::desc PlainOf(const memory::desc& md) {
  const memory::dims dims = md.dims();
  switch (dims.size()) {
    case 1:
      return Plain(dims, Tag::a);
    case 2:
      return Plain(dims, Tag::ab);
    case 3:
      return Plain(dims, Tag::abc);
    case 4:
      return Plain(dims, Tag::abcd);
    default:
      return Plain(dims, Tag::abcde);
  }
}

memory& Spare(std::unique_ptr<memory>& slot, const memory::desc& md,
              const dnnl::engine& e) {
  if (slot == nullptr || slot->get_desc() != md) {
    slot = std::make_unique<memory>(md, e);
  }
  return *slot;
}

Context::Context() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

void Context::Reorder(const memory::desc& smd, const void* src,
                      const memory::desc& dmd, void* dst) {
  CachedReorder* r = nullptr;
  for (CachedReorder& c : reorders_) {
    if (c.src == smd && c.dst == dmd) {
      r = &c;
      break;
    }
  }
  memory s(smd, engine_, const_cast<void*>(src));
  memory d(dmd, engine_, dst);
  if (r == nullptr) {
    reorders_.push_back({smd, dmd, dnnl::reorder(s, d)});
    r = &reorders_.back();
  }
  r->prim.execute(stream_, s, d);
  stream_.wait();
}

memory Context::Scratch(const memory::desc& desc, size_t bytes) {
  if (bytes > scratch_size_ || scratch_ == nullptr) {
    const memory::dim n = static_cast<memory::dim>(std::max<size_t>(bytes, 64));
    scratch_ =
        std::make_unique<memory>(memory::desc({n}, Dt::u8, Tag::x), engine_);
    scratch_size_ = static_cast<size_t>(n);
  }
  return memory(desc, engine_, scratch_->get_data_handle());
}

}  // namespace onednn
}  // namespace downpour
