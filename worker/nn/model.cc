// File: worker/nn/model.cc
//
// Model::Create: the graph executor over a Backend (model.h).
#include "worker/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_allocator.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

// splitmix64 finalizer: decorrelates (seed, tensor index) pairs.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The backward pass's buffer plan, fixed at Init: node i's output gradient
// lives in pool buffer dy[i] (kLogits for the last node) from the first
// reader's backward (in reverse order) that writes it to node i's own
// backward, after which the buffer is free again. A second reader's
// contribution goes to a scratch buffer and is added (Axpy): fan-out
// gradients are summed.
constexpr int kLogits = -2;
constexpr int kNone = -1;

struct SlotPlan {
  int input = -1;       // The node read (-1: the model's input).
  int buffer = kNone;   // Pool buffer the backward writes dx into.
  bool accumulate = false;  // buffer is scratch, added into dy[input].
};

struct NodePlan {
  int dy = kNone;               // Pool buffer of this node's output gradient.
  bool run_backward = true;     // False: no parameters, no input gradient.
  std::vector<SlotPlan> slots;  // Per input.
};

class ModelImpl : public Model {
 public:
  ModelImpl(Backend* backend, std::vector<GraphNode> nodes, Dims input,
            int max_batch, const ModelOptions& options)
      : backend_(backend),
        nodes_(std::move(nodes)),
        input_(input),
        max_batch_(max_batch),
        options_(options) {}

  // Checks the graph, configures and binds the layers and allocates every
  // buffer.
  absl::Status Init() {
    const int n = static_cast<int>(nodes_.size());
    std::vector<int> readers(n, 0);
    for (int i = 0; i < n; ++i) {
      if (nodes_[i].inputs.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", i, " (", nodes_[i].layer->name(),
                         ") has no inputs"));
      }
      for (int j : nodes_[i].inputs) {
        if (j < -1 || j >= i) {
          return absl::InvalidArgumentError(absl::StrCat(
              "node ", i, " (", nodes_[i].layer->name(), ") reads node ", j,
              ", which is not an earlier node or the input (-1)"));
        }
        if (j >= 0) ++readers[j];
      }
    }
    for (int i = 0; i + 1 < n; ++i) {
      if (readers[i] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", i, " (", nodes_[i].layer->name(),
                         ") is read by no later node"));
      }
    }

    // Shapes and parameter layout.
    std::set<std::string> names;
    std::vector<size_t> first_param, first_state;
    for (int i = 0; i < n; ++i) {
      Layer* layer = nodes_[i].layer.get();
      std::vector<Dims> in;
      for (int j : nodes_[i].inputs) in.push_back(j < 0 ? input_ : out_dims_[j]);
      absl::StatusOr<Dims> out = layer->Configure(in);
      if (!out.ok()) return out.status();
      if (out->Size() < 1 || out->Size() > (int64_t{1} << 30)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", layer->name(), ": output size out of range"));
      }
      out_dims_.push_back(*out);
      first_param.push_back(specs_.size());
      first_state.push_back(state_specs_.size());
      DP_RETURN_IF_ERROR(AddTensors(layer->name(), layer->Params(), &names,
                                    &specs_, &inits_, &offsets_, &num_params_));
      DP_RETURN_IF_ERROR(AddTensors(layer->name(), layer->State(), &names,
                                    &state_specs_, &state_inits_,
                                    &state_offsets_, &state_size_));
    }
    classes_ = static_cast<int>(out_dims_.back().Size());
    first_param.push_back(specs_.size());
    first_state.push_back(state_specs_.size());
    PlanDeferral(first_param);

    // Buffers.
    DP_ASSIGN_OR_RETURN(params_, DeviceBuffer::Create(backend_, num_params_));
    DP_ASSIGN_OR_RETURN(grads_, DeviceBuffer::Create(backend_, num_params_));
    if (state_size_ > 0) {
      DP_ASSIGN_OR_RETURN(state_, DeviceBuffer::Create(backend_, state_size_));
      const std::vector<float> init = InitialState();
      DP_RETURN_IF_ERROR(
          backend_->CopyToDevice(init.data(), state_.data(), state_size_));
    }
    DP_ASSIGN_OR_RETURN(
        input_buf_, DeviceBuffer::Create(backend_, max_batch_ * input_.Size()));
    DP_ASSIGN_OR_RETURN(labels_buf_,
                        DeviceBuffer::Create(backend_, max_batch_));
    DP_ASSIGN_OR_RETURN(
        dlogits_,
        DeviceBuffer::Create(backend_, int64_t{max_batch_} * classes_));
    for (int i = 0; i < n; ++i) {
      DP_ASSIGN_OR_RETURN(
          DeviceBuffer act,
          DeviceBuffer::Create(backend_, max_batch_ * out_dims_[i].Size()));
      acts_.push_back(std::move(act));
    }
    // Pinned on a GPU, so the label copy does not stall the host.
    DP_ASSIGN_OR_RETURN(host_labels_,
                        HostArray<float>::Create(backend_->staging_allocator(),
                                                 max_batch_));

    // Views.
    for (int i = 0; i < n; ++i) {
      std::vector<float*> p, g, st;
      for (size_t t = first_param[i]; t < first_param[i + 1]; ++t) {
        p.push_back(params_.data() + offsets_[t]);
        g.push_back(grads_.data() + offsets_[t]);
      }
      for (size_t t = first_state[i]; t < first_state[i + 1]; ++t) {
        st.push_back(state_.data() + state_offsets_[t]);
      }
      Layer* layer = nodes_[i].layer.get();
      DP_RETURN_IF_ERROR(layer->Bind(backend_, p, g, max_batch_));
      DP_RETURN_IF_ERROR(layer->BindState(st));
      has_params_.push_back(first_param[i + 1] > first_param[i]);
      // A node's tensors are adjacent in the flat vector, deferred or not.
      node_params_.push_back(first_param[i + 1] > first_param[i]
                                 ? offsets_[first_param[i]]
                                 : num_params_);
      node_params_end_.push_back(
          first_param[i + 1] > first_param[i]
              ? offsets_[first_param[i + 1] - 1] +
                    specs_[first_param[i + 1] - 1].NumElements()
              : num_params_);
    }
    return PlanBackward();
  }

  // With options_.defer_weight_gradients: picks the deferred nodes and puts
  // their tensors first in the flat vector (offsets_, flat_specs_).
  // first_param[i] is node i's first tensor (index into specs_), with one
  // more entry at the end.
  void PlanDeferral(const std::vector<size_t>& first_param) {
    const int n = static_cast<int>(nodes_.size());
    const auto params_of = [&](int i) {
      return first_param[i + 1] > first_param[i];
    };
    deferred_.assign(n, false);
    int first = -1;
    for (int i = 0; i < n && first < 0; ++i) {
      if (params_of(i)) first = i;
    }
    if (first >= 0) {
      first_layer_tensors_ =
          static_cast<int>(first_param[first + 1] - first_param[first]);
    }
    if (options_.defer_weight_gradients && first >= 0) {
      for (int i = first + 1; i < n; ++i) {
        if (!params_of(i) || !nodes_[i].layer->SplitsBackward()) continue;
        // Does node i's gradient reach `first` through parameterless nodes?
        std::vector<int> todo = nodes_[i].inputs;
        std::vector<bool> seen(n, false);
        while (!todo.empty() && !deferred_[i]) {
          const int j = todo.back();
          todo.pop_back();
          if (j < 0 || seen[j]) continue;
          seen[j] = true;
          if (j == first) {
            deferred_[i] = true;
          } else if (!params_of(j)) {
            todo.insert(todo.end(), nodes_[j].inputs.begin(),
                        nodes_[j].inputs.end());
          }
        }
      }
    }
    std::vector<size_t> order;  // Tensors (indices into specs_), flat order.
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < n; ++i) {
        if (deferred_[i] != (pass == 0)) continue;
        for (size_t t = first_param[i]; t < first_param[i + 1]; ++t) {
          order.push_back(t);
        }
        if (pass == 0) leading_deferred_tensors_ += static_cast<int>(
                           first_param[i + 1] - first_param[i]);
      }
    }
    int64_t offset = 0;
    graph_order_.assign(order.size(), 0);
    for (size_t t : order) {
      graph_order_[t] = static_cast<int>(flat_specs_.size());
      offsets_[t] = offset;
      offset += specs_[t].NumElements();
      flat_specs_.push_back(specs_[t]);
    }
  }

  const std::vector<TensorSpec>& param_specs() const override {
    return flat_specs_;
  }
  int leading_deferred_tensors() const override {
    return leading_deferred_tensors_;
  }
  int first_layer_tensors() const override { return first_layer_tensors_; }
  std::vector<int> graph_order() const override { return graph_order_; }
  int64_t num_parameters() const override { return num_params_; }
  Dims input_dims() const override { return input_; }
  int num_classes() const override { return classes_; }
  int max_batch() const override { return max_batch_; }
  Backend* backend() const override { return backend_; }

  std::vector<float> InitialParameters(uint64_t seed) const override {
    return InitialValues(inits_, specs_, offsets_, num_params_, seed);
  }

  absl::Status SetParameters(absl::Span<const float> host) override {
    DP_RETURN_IF_ERROR(CheckSize("SetParameters", host.size(), num_params_));
    return backend_->CopyToDevice(host.data(), params_.data(), num_params_);
  }

  absl::Status GetParameters(absl::Span<float> host) const override {
    DP_RETURN_IF_ERROR(CheckSize("GetParameters", host.size(), num_params_));
    DP_RETURN_IF_ERROR(
        backend_->CopyToHost(params_.data(), host.data(), num_params_));
    return backend_->Synchronize();
  }

  const std::vector<TensorSpec>& state_specs() const override {
    return state_specs_;
  }
  int64_t state_size() const override { return state_size_; }
  std::vector<float> InitialState() const override {
    return InitialValues(state_inits_, state_specs_, state_offsets_,
                         state_size_, /*seed=*/0);
  }
  absl::Status SetState(absl::Span<const float> host) override {
    DP_RETURN_IF_ERROR(CheckSize("SetState", host.size(), state_size_));
    if (state_size_ == 0) return absl::OkStatus();
    return backend_->CopyToDevice(host.data(), state_.data(), state_size_);
  }
  absl::Status GetState(absl::Span<float> host) const override {
    DP_RETURN_IF_ERROR(CheckSize("GetState", host.size(), state_size_));
    if (state_size_ == 0) return absl::OkStatus();
    DP_RETURN_IF_ERROR(
        backend_->CopyToHost(state_.data(), host.data(), state_size_));
    return backend_->Synchronize();
  }

  float* parameters() override { return params_.data(); }
  float* gradients() override { return grads_.data(); }

  // Waits for the device once, at the end: the loss is queued (deferred)
  // and settled by the final Synchronize.
  absl::StatusOr<StepResult> ComputeGradients(
      const float* host_x, const int32_t* host_labels, int batch,
      const StepHooks& hooks) override {
    StepResult r;
    // The gradient buffers are written below: after the last step's copies
    // out of them (StartGradientCopy) on the device.
    DP_RETURN_IF_ERROR(backend_->OrderAfterHostCopies());
    DP_RETURN_IF_ERROR(LoadBatch(host_x, host_labels, batch));
    DP_RETURN_IF_ERROR(Forward(TrainingPass(), batch, hooks.before_forward));
    DP_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropyDeferred(
        batch, classes_, acts_.back().data(), labels_buf_.data(),
        options_.label_smoothing, dlogits_.data(), &r.loss, &r.correct));
    if (hooks.gradients_ready) {
      // Gradients leave during the backward pass: none of a diverged step.
      DP_RETURN_IF_ERROR(backend_->Synchronize());
      if (!std::isfinite(r.loss)) return r;
    }
    DP_RETURN_IF_ERROR(Backward(batch, hooks.gradients_ready));
    DP_RETURN_IF_ERROR(backend_->Synchronize());
    return r;
  }

  absl::Status SetParameterRange(absl::Span<const float> host, int64_t begin,
                                 int64_t end) override {
    DP_RETURN_IF_ERROR(CheckSize("SetParameterRange", host.size(), num_params_));
    DP_RETURN_IF_ERROR(CheckRange("SetParameterRange", begin, end));
    return backend_->CopyToDevice(host.data() + begin, params_.data() + begin,
                                  end - begin);
  }

  absl::Status StartGradientCopy(int64_t begin, int64_t end,
                                 absl::Span<float> host) override {
    DP_RETURN_IF_ERROR(CheckSize("StartGradientCopy", host.size(), num_params_));
    DP_RETURN_IF_ERROR(CheckRange("StartGradientCopy", begin, end));
    return backend_->CopyToHostAsync(grads_.data() + begin,
                                     host.data() + begin, end - begin);
  }

  absl::Status WaitGradientCopies() override {
    return backend_->WaitHostCopies();
  }

  absl::StatusOr<StepResult> Evaluate(const float* host_x,
                                      const int32_t* host_labels,
                                      int batch) override {
    DP_RETURN_IF_ERROR(LoadBatch(host_x, host_labels, batch));
    DP_RETURN_IF_ERROR(Forward(ForwardPass{}, batch));
    StepResult r;
    DP_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(
        batch, classes_, acts_.back().data(), labels_buf_.data(),
        /*label_smoothing=*/0.0f, /*dlogits=*/nullptr, &r.loss, &r.correct));
    return r;
  }

  absl::Status UpdateStatistics(const float* host_x, int batch,
                                float momentum) override {
    if (!(momentum >= 0.f && momentum <= 1.f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "UpdateStatistics: momentum ", momentum, " is not in [0, 1]"));
    }
    DP_RETURN_IF_ERROR(LoadInput(host_x, batch));
    ForwardPass pass = TrainingPass();
    pass.stats_momentum = momentum;
    DP_RETURN_IF_ERROR(Forward(pass, batch));
    return backend_->Synchronize();
  }

 private:
  static absl::Status CheckSize(const char* op, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": got ", got, " values, model has ", want));
    }
    return absl::OkStatus();
  }
  absl::Status CheckRange(const char* op, int64_t begin, int64_t end) const {
    if (begin < 0 || begin > end || end > num_params_) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": range [", begin, ", ", end, ") is not within the model's ",
          num_params_, " parameters"));
    }
    return absl::OkStatus();
  }

  // Appends a layer's tensors ("<layer>.<suffix>") to a flat layout.
  static absl::Status AddTensors(const std::string& layer,
                                 std::vector<ParamSpec> tensors,
                                 std::set<std::string>* names,
                                 std::vector<TensorSpec>* specs,
                                 std::vector<ParamSpec>* inits,
                                 std::vector<int64_t>* offsets, int64_t* size) {
    for (ParamSpec& p : tensors) {
      TensorSpec t{absl::StrCat(layer, ".", p.suffix), p.shape};
      if (!names->insert(t.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate tensor name ", t.name));
      }
      offsets->push_back(*size);
      *size += t.NumElements();
      specs->push_back(std::move(t));
      inits->push_back(std::move(p));
    }
    return absl::OkStatus();
  }

  static std::vector<float> InitialValues(const std::vector<ParamSpec>& inits,
                                          const std::vector<TensorSpec>& specs,
                                          const std::vector<int64_t>& offsets,
                                          int64_t size, uint64_t seed) {
    std::vector<float> out(size, 0.f);
    for (size_t t = 0; t < inits.size(); ++t) {
      const ParamSpec& p = inits[t];
      float* dst = out.data() + offsets[t];
      const int64_t count = specs[t].NumElements();
      if (p.init == Init::kOnes) std::fill(dst, dst + count, 1.f);
      if (p.init != Init::kHeUniform) continue;  // kZeros: already zero.
      const double bound =
          std::sqrt(6.0 / static_cast<double>(std::max<int64_t>(1, p.fan_in)));
      std::mt19937_64 rng(Mix(seed) ^ Mix(0x1000 + t));
      for (int64_t i = 0; i < count; ++i) {
        // 53 random bits -> u in [0, 1), mapped to [-bound, bound).
        const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        dst[i] = static_cast<float>((2.0 * u - 1.0) * bound);
      }
    }
    return out;
  }

  // Simulates the backward pass once to assign gradient buffers (NodePlan).
  absl::Status PlanBackward() {
    const int n = static_cast<int>(nodes_.size());
    plan_.assign(n, NodePlan{});
    std::vector<int> grad_of(n, kNone);
    std::vector<int> free_list;
    int64_t largest = 1;  // Largest output of a node but the last.
    for (int i = 0; i + 1 < n; ++i) {
      largest = std::max(largest, max_batch_ * out_dims_[i].Size());
    }
    auto take = [&]() {
      if (!free_list.empty()) {
        const int b = free_list.back();
        free_list.pop_back();
        return b;
      }
      return pool_count_++;
    };
    grad_of[n - 1] = kLogits;
    for (int i = n - 1; i >= 0; --i) {
      NodePlan& p = plan_[i];
      p.dy = grad_of[i];
      bool any_dx = false;
      for (int j : nodes_[i].inputs) any_dx = any_dx || j >= 0;
      p.run_backward = has_params_[i] || any_dx;
      std::vector<int> scratch;
      for (int j : nodes_[i].inputs) {
        SlotPlan s;
        s.input = j;
        if (j >= 0) {
          if (grad_of[j] == kNone) {
            grad_of[j] = take();
            s.buffer = grad_of[j];
          } else {
            s.buffer = take();
            s.accumulate = true;
            scratch.push_back(s.buffer);
          }
        }
        p.slots.push_back(s);
      }
      for (int b : scratch) free_list.push_back(b);
      if (p.dy >= 0) free_list.push_back(p.dy);
    }
    for (int b = 0; b < pool_count_; ++b) {
      DP_ASSIGN_OR_RETURN(DeviceBuffer buf,
                          DeviceBuffer::Create(backend_, largest));
      grad_pool_.push_back(std::move(buf));
    }
    return absl::OkStatus();
  }

  ForwardPass TrainingPass() {
    ForwardPass pass;
    pass.training = true;
    pass.seed = Mix(options_.dropout_seed ^ Mix(++training_passes_));
    return pass;
  }

  absl::Status LoadInput(const float* host_x, int batch) {
    if (batch < 1 || batch > max_batch_) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch size ", batch, " not in [1, ", max_batch_, "]"));
    }
    if (host_x == nullptr) {
      return absl::InvalidArgumentError("null input pointer");
    }
    return backend_->CopyToDevice(host_x, input_buf_.data(),
                                  batch * input_.Size());
  }

  absl::Status LoadBatch(const float* host_x, const int32_t* host_labels,
                         int batch) {
    DP_RETURN_IF_ERROR(LoadInput(host_x, batch));
    if (host_labels == nullptr) {
      return absl::InvalidArgumentError("null label pointer");
    }
    // Labels are validated by SoftmaxCrossEntropy; the conversion is exact
    // for every valid index.
    for (int i = 0; i < batch; ++i) {
      host_labels_[i] = static_cast<float>(host_labels[i]);
    }
    return backend_->CopyToDevice(host_labels_.data(), labels_buf_.data(),
                                  batch);
  }

  std::vector<const float*> Inputs(int i) const {
    std::vector<const float*> x;
    for (int j : nodes_[i].inputs) {
      x.push_back(j < 0 ? input_buf_.data() : acts_[j].data());
    }
    return x;
  }

  using RangeHook = std::function<absl::Status(int64_t, int64_t)>;
  using ReadyHook = std::function<absl::Status(int64_t)>;

  absl::Status Forward(const ForwardPass& pass, int batch,
                       const RangeHook& before = nullptr) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (before && has_params_[i]) {
        DP_RETURN_IF_ERROR(before(node_params_[i], node_params_end_[i]));
      }
      // Last step's activation (of a possibly larger batch) is dead.
      DP_RETURN_IF_ERROR(backend_->Discard(acts_[i].data(), acts_[i].size()));
      ForwardPass node_pass = pass;
      node_pass.seed = Mix(pass.seed ^ Mix(0x2000 + i));
      DP_RETURN_IF_ERROR(nodes_[i].layer->Forward(node_pass, batch, Inputs(i),
                                                  acts_[i].data()));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(int batch, const ReadyHook& ready = nullptr) {
    for (size_t i = nodes_.size(); i-- > 0;) {
      const NodePlan& p = plan_[i];
      if (!p.run_backward) continue;
      const float* dy = p.dy == kLogits ? dlogits_.data()
                                        : grad_pool_[p.dy].data();
      std::vector<float*> dx;
      for (const SlotPlan& s : p.slots) {
        if (s.buffer == kNone) {
          dx.push_back(nullptr);
          continue;
        }
        DeviceBuffer& buf = grad_pool_[s.buffer];
        // The buffer's last tensor (of another node) is dead.
        DP_RETURN_IF_ERROR(backend_->Discard(buf.data(), buf.size()));
        dx.push_back(buf.data());
      }
      if (deferred_[i]) {
        DP_RETURN_IF_ERROR(nodes_[i].layer->BackwardInput(
            batch, Inputs(i), acts_[i].data(), dy, dx));
      } else {
        DP_RETURN_IF_ERROR(nodes_[i].layer->Backward(batch, Inputs(i),
                                                     acts_[i].data(), dy, dx));
      }
      for (size_t k = 0; k < p.slots.size(); ++k) {
        const SlotPlan& s = p.slots[k];
        if (!s.accumulate) continue;
        const int target = plan_[s.input].dy;
        DP_RETURN_IF_ERROR(backend_->Axpy(
            batch * out_dims_[s.input].Size(), 1.f, dx[k],
            grad_pool_[target].data()));
      }
      // Node i's parameter gradients, and those of every node after it in
      // the flat vector, are final (a deferred node's are not yet).
      if (ready && has_params_[i] && !deferred_[i] && node_params_[i] > 0) {
        DP_RETURN_IF_ERROR(ready(node_params_[i]));
      }
    }
    // The deferred nodes' parameter gradients: the front of the flat vector.
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (deferred_[i]) DP_RETURN_IF_ERROR(nodes_[i].layer->BackwardParams());
    }
    return ready ? ready(0) : absl::OkStatus();
  }

  Backend* const backend_;  // Not owned.
  std::vector<GraphNode> nodes_;
  const Dims input_;
  const int max_batch_;
  const ModelOptions options_;

  std::vector<Dims> out_dims_;     // Per node.
  std::vector<bool> has_params_;   // Per node.
  // Per node, its parameters' flat range [node_params_[i],
  // node_params_end_[i]) (num_params_ for both without parameters).
  std::vector<int64_t> node_params_;
  std::vector<int64_t> node_params_end_;
  // Per node: its parameter gradients are computed at the end of the
  // backward pass (ModelOptions::defer_weight_gradients).
  std::vector<bool> deferred_;
  int leading_deferred_tensors_ = 0;
  int first_layer_tensors_ = 0;
  std::vector<TensorSpec> flat_specs_;  // param_specs(): flat order.
  std::vector<int> graph_order_;        // Indices into flat_specs_.
  std::vector<TensorSpec> specs_;  // Graph order (flat order w/o deferral).
  std::vector<ParamSpec> inits_;   // Parallel to specs_.
  std::vector<int64_t> offsets_;   // Parallel to specs_: flat, in floats.
  int64_t num_params_ = 0;
  std::vector<TensorSpec> state_specs_;
  std::vector<ParamSpec> state_inits_;
  std::vector<int64_t> state_offsets_;
  int64_t state_size_ = 0;
  int classes_ = 0;
  std::vector<NodePlan> plan_;     // Per node.
  int pool_count_ = 0;
  uint64_t training_passes_ = 0;   // Seeds dropout.

  DeviceBuffer params_, grads_, state_;
  DeviceBuffer input_buf_;          // max_batch x input.
  DeviceBuffer labels_buf_;         // max_batch class indices as floats.
  DeviceBuffer dlogits_;            // max_batch x classes.
  std::vector<DeviceBuffer> acts_;  // Per node output, max_batch rows.
  std::vector<DeviceBuffer> grad_pool_;  // Output gradients (NodePlan).
  HostArray<float> host_labels_;    // Staging for the label conversion.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    Backend* backend, std::vector<GraphNode> nodes, Dims input, int max_batch,
    const ModelOptions& options) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Model::Create: null backend");
  }
  if (nodes.empty()) {
    return absl::InvalidArgumentError("Model::Create: no layers");
  }
  for (const GraphNode& node : nodes) {
    if (node.layer == nullptr) {
      return absl::InvalidArgumentError("Model::Create: null layer");
    }
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Model::Create: max_batch ", max_batch, " must be >= 1"));
  }
  if (input.c < 1 || input.h < 1 || input.w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Model::Create: bad input dims ", input.c, "x", input.h, "x", input.w));
  }
  DP_RETURN_IF_ERROR(ValidateLabelSmoothing(options.label_smoothing));
  auto model = std::make_unique<ModelImpl>(backend, std::move(nodes), input,
                                           max_batch, options);
  DP_RETURN_IF_ERROR(model->Init());
  return std::unique_ptr<Model>(std::move(model));
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    Backend* backend, std::vector<std::unique_ptr<Layer>> layers, Dims input,
    int max_batch, float label_smoothing) {
  std::vector<GraphNode> nodes;
  for (size_t i = 0; i < layers.size(); ++i) {
    nodes.push_back({std::move(layers[i]), {static_cast<int>(i) - 1}});
  }
  ModelOptions options;
  options.label_smoothing = label_smoothing;
  return Create(backend, std::move(nodes), input, max_batch, options);
}

}  // namespace downpour
