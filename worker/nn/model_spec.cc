// File: worker/nn/model_spec.cc
//
// Parsing (protobuf's text format with an error collector that keeps
// positions), the checks and shape inference of a spec, and the built-in
// specs compiled in from models/ (builtin_model_specs.inc, generated).
#include "worker/nn/model_spec.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace downpour {
namespace {

struct BuiltinSpec {
  const char* name;
  const char* text;
};

// {"fashion_cnn", R"(...)"}, ... from models/*.prototxt, sorted by name.
constexpr BuiltinSpec kBuiltins[] = {
#include "worker/nn/builtin_model_specs.inc"
};

// The layer kinds as LayerSpec's oneof cases; a kind's name is its field's.
struct KindCase {
  LayerSpec::KindCase oneof_case;
  LayerKind kind;
};
constexpr KindCase kKinds[] = {
    {LayerSpec::kConv, LayerKind::kConv},
    {LayerSpec::kBatchNorm, LayerKind::kBatchNorm},
    {LayerSpec::kRelu, LayerKind::kRelu},
    {LayerSpec::kMaxPool, LayerKind::kMaxPool},
    {LayerSpec::kAvgPool, LayerKind::kAvgPool},
    {LayerSpec::kDense, LayerKind::kDense},
    {LayerSpec::kDropout, LayerKind::kDropout},
    {LayerSpec::kAdd, LayerKind::kAdd},
    {LayerSpec::kConcat, LayerKind::kConcat},
    {LayerSpec::kGlobalAvgPool, LayerKind::kGlobalAvgPool},
};

// Brace nesting beyond any valid spec (ModelSpec > layer > conv is 3 deep).
// Checked before protobuf parses, so that skipping deeply nested unknown
// fields cannot exhaust the stack.
constexpr int kMaxNesting = 16;
constexpr int64_t kMaxFileBytes = int64_t{64} << 20;

std::string DimsStr(const Dims& d) {
  return absl::StrCat(d.c, "x", d.h, "x", d.w);
}

int64_t SatMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::numeric_limits<int64_t>::max();
  return r;
}

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::numeric_limits<int64_t>::max();
  return r;
}

// Keeps the first error and every warning (unknown fields, when the parser
// allows them), with 0-based positions as protobuf reports them.
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  struct Entry {
    int line, column;
    std::string message;
  };
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!error_) error_ = Entry{line, column, message};
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    warnings_.push_back(Entry{line, column, message});
  }
  const std::optional<Entry>& error() const { return error_; }
  const std::vector<Entry>& warnings() const { return warnings_; }

 private:
  std::optional<Entry> error_;
  std::vector<Entry> warnings_;
};

std::string Position(absl::string_view source, int line, int column) {
  if (line < 0) return std::string(source);
  return absl::StrCat(source, ":", line + 1, ":", column + 1);
}

// The deepest {} or <> nesting outside strings and comments.
int MaxNesting(absl::string_view text) {
  int depth = 0, max_depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      for (++i; i < text.size() && text[i] != c && text[i] != '\n'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '{' || c == '<') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

std::string KnownKinds() {
  std::vector<std::string> names;
  const auto* oneof = LayerSpec::descriptor()->FindOneofByName("kind");
  for (int i = 0; i < oneof->field_count(); ++i) {
    names.push_back(oneof->field(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

// "layer \"conv1\"", or "layer #3" for a layer without a name.
std::string LayerLabel(const LayerSpec& l, int index) {
  if (l.name().empty()) return absl::StrCat("layer #", index + 1, " (unnamed)");
  return absl::StrCat("layer \"", l.name(), "\"");
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

class Resolver {
 public:
  Resolver(const ModelSpec& spec, absl::string_view source)
      : spec_(spec), source_(source) {}

  absl::StatusOr<ResolvedModel> Run();

 private:
  absl::Status Fail(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", what));
  }
  absl::Status LayerError(const std::string& what) const {
    return Fail(absl::StrCat(label_, ": ", what));
  }
  std::string InputName(int index) const {
    return absl::StrCat("\"", index < 0 ? "input" : m_.layers[index].name,
                        "\"");
  }
  absl::Status CheckInput();
  absl::Status CheckNames();
  absl::Status ResolveInputs(int i, ResolvedLayer* l);
  absl::Status Window(ResolvedLayer* l, bool pool, int64_t channels);
  absl::Status Shape(const LayerSpec& spec, ResolvedLayer* l);

  const ModelSpec& spec_;
  const std::string source_;
  ResolvedModel m_;
  absl::flat_hash_map<std::string, int> index_;  // Name -> first layer index.
  std::string label_;                            // Of the layer being resolved.
};

absl::Status Resolver::CheckInput() {
  if (!spec_.has_input()) {
    return Fail(
        "input: missing (input { channels: C height: H width: W classes: K })");
  }
  const InputSpec& in = spec_.input();
  const struct {
    const char* field;
    bool set;
    int value, max;
  } fields[] = {{"channels", in.has_channels(), in.channels(), kMaxChannels},
                {"height", in.has_height(), in.height(), kMaxSpatial},
                {"width", in.has_width(), in.width(), kMaxSpatial},
                {"classes", in.has_classes(), in.classes(), kMaxChannels}};
  for (const auto& f : fields) {
    if (!f.set) return Fail(absl::StrCat("input: ", f.field, " is not set"));
    if (f.value < 1 || f.value > f.max) {
      return Fail(absl::StrCat("input: ", f.field, " ", f.value,
                               " is not in [1, ", f.max, "]"));
    }
  }
  m_.input = Dims{in.channels(), in.height(), in.width()};
  m_.classes = in.classes();
  if (m_.input.Size() > kMaxActivation) {
    return Fail(absl::StrCat("input: ", DimsStr(m_.input), " is more than ",
                             kMaxActivation, " values per example"));
  }
  return absl::OkStatus();
}

absl::Status Resolver::CheckNames() {
  if (spec_.layer_size() == 0) return Fail("no layers");
  if (spec_.layer_size() > kMaxLayers) {
    return Fail(
        absl::StrCat(spec_.layer_size(), " layers; at most ", kMaxLayers));
  }
  for (int i = 0; i < spec_.layer_size(); ++i) {
    const LayerSpec& l = spec_.layer(i);
    label_ = LayerLabel(l, i);
    if (l.name().empty()) return LayerError("name is missing or empty");
    if (l.name().size() > static_cast<size_t>(kMaxNameLength)) {
      return LayerError(
          absl::StrCat("name longer than ", kMaxNameLength, " characters"));
    }
    if (!IsIdentifier(l.name())) {
      return LayerError(
          "name is not an identifier ([A-Za-z_][A-Za-z0-9_]*, as a PyTorch "
          "module name)");
    }
    if (l.name() == "input") {
      return LayerError("the name \"input\" is reserved for the model's input");
    }
    const auto [it, inserted] = index_.emplace(l.name(), i);
    if (!inserted) {
      return LayerError(absl::StrCat("duplicate name (layer #", it->second + 1,
                                     " has it too)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Resolver::ResolveInputs(int i, ResolvedLayer* l) {
  const LayerSpec& spec = spec_.layer(i);
  if (spec.inputs_size() == 0) {
    l->inputs.push_back(i - 1);
  }
  for (const std::string& name : spec.inputs()) {
    if (name == "input") {
      l->inputs.push_back(-1);
      continue;
    }
    const auto it = index_.find(name);
    if (it == index_.end()) {
      return LayerError(absl::StrCat("input \"", name, "\" names no layer"));
    }
    if (it->second == i) return LayerError("lists itself as an input");
    if (it->second > i) {
      return LayerError(
          absl::StrCat("input \"", name,
                       "\" is a later layer (a layer reads only the "
                       "input and layers above it)"));
    }
    l->inputs.push_back(it->second);
  }
  const bool many = l->kind == LayerKind::kAdd || l->kind == LayerKind::kConcat;
  const int n = static_cast<int>(l->inputs.size());
  if (many && n < 2) {
    return LayerError(absl::StrCat(LayerKindName(l->kind),
                                   " needs two or more inputs, has ", n));
  }
  if (!many && n != 1) {
    return LayerError(
        absl::StrCat(LayerKindName(l->kind), " takes one input, has ", n));
  }
  for (int in : l->inputs) {
    l->in_dims.push_back(in < 0 ? m_.input : m_.layers[in].out);
  }
  return absl::OkStatus();
}

// The window of a conv or pool (kernel, stride, padding already set in l):
// checks them against the input and sets l->out.
absl::Status Resolver::Window(ResolvedLayer* l, bool pool, int64_t channels) {
  const Dims& in = l->in_dims[0];
  if (l->kernel < 1)
    return LayerError(
        absl::StrCat("kernel ", l->kernel, " must be >= 1 (is it set?)"));
  if (l->stride < 1)
    return LayerError(absl::StrCat("stride ", l->stride, " must be >= 1"));
  if (l->padding < 0)
    return LayerError(absl::StrCat("padding ", l->padding, " must be >= 0"));
  if (pool && l->padding > l->kernel / 2) {
    return LayerError(absl::StrCat(
        "padding ", l->padding, " is more than half the kernel ", l->kernel,
        " (PyTorch's pools require padding <= kernel / 2)"));
  }
  const int64_t ph = int64_t{in.h} + 2 * int64_t{l->padding};
  const int64_t pw = int64_t{in.w} + 2 * int64_t{l->padding};
  if (l->kernel > ph || l->kernel > pw) {
    return LayerError(absl::StrCat("kernel ", l->kernel,
                                   " is larger than its input ", DimsStr(in),
                                   " with padding ", l->padding));
  }
  const int64_t oh = (ph - l->kernel) / l->stride + 1;
  const int64_t ow = (pw - l->kernel) / l->stride + 1;
  if (oh < 1 || ow < 1) return LayerError("output would be empty");
  if (SatMul(SatMul(channels, oh), ow) > kMaxActivation) {
    return LayerError(absl::StrCat("output ", channels, "x", oh, "x", ow,
                                   " is more than ", kMaxActivation,
                                   " values per example"));
  }
  l->out = Dims{static_cast<int>(channels), static_cast<int>(oh),
                static_cast<int>(ow)};
  return absl::OkStatus();
}

absl::Status Resolver::Shape(const LayerSpec& spec, ResolvedLayer* l) {
  const Dims in = l->in_dims[0];
  switch (l->kind) {
    case LayerKind::kConv: {
      const ConvSpec& c = spec.conv();
      l->out_channels = c.out_channels();
      l->kernel = c.kernel();
      l->stride = c.stride();
      l->padding = c.padding();
      l->bias = c.bias();
      if (l->out_channels < 1 || l->out_channels > kMaxChannels) {
        return LayerError(absl::StrCat("out_channels ", l->out_channels,
                                       " is not in [1, ", kMaxChannels,
                                       "] (is it set?)"));
      }
      DP_RETURN_IF_ERROR(Window(l, /*pool=*/false, l->out_channels));
      const int64_t k2 = SatMul(l->kernel, l->kernel);
      l->num_parameters = SatAdd(SatMul(SatMul(l->out_channels, in.c), k2),
                                 l->bias ? l->out_channels : 0);
      break;
    }
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool: {
      const PoolSpec& p =
          l->kind == LayerKind::kMaxPool ? spec.max_pool() : spec.avg_pool();
      l->kernel = p.kernel();
      l->stride = p.has_stride() ? p.stride() : p.kernel();
      l->padding = p.padding();
      DP_RETURN_IF_ERROR(Window(l, /*pool=*/true, in.c));
      break;
    }
    case LayerKind::kBatchNorm: {
      l->eps = spec.batch_norm().eps();
      l->momentum = spec.batch_norm().momentum();
      if (!(l->eps > 0) || !std::isfinite(l->eps)) {
        return LayerError(absl::StrCat("eps ", l->eps, " must be > 0"));
      }
      if (!(l->momentum >= 0 && l->momentum <= 1)) {
        return LayerError(
            absl::StrCat("momentum ", l->momentum, " is not in [0, 1]"));
      }
      l->out = in;
      l->num_parameters = 2 * int64_t{in.c};
      break;
    }
    case LayerKind::kDropout:
      l->rate = spec.dropout().rate();
      if (!(l->rate >= 0 && l->rate < 1)) {
        return LayerError(absl::StrCat("rate ", l->rate, " is not in [0, 1)"));
      }
      l->out = in;
      break;
    case LayerKind::kRelu:
      l->out = in;
      break;
    case LayerKind::kDense: {
      l->out_features = spec.dense().out_features();
      l->bias = spec.dense().bias();
      if (l->out_features < 1 || l->out_features > kMaxChannels) {
        return LayerError(absl::StrCat("out_features ", l->out_features,
                                       " is not in [1, ", kMaxChannels,
                                       "] (is it set?)"));
      }
      l->out = Dims{l->out_features, 1, 1};
      l->num_parameters = SatAdd(SatMul(l->out_features, in.Size()),
                                 l->bias ? l->out_features : 0);
      break;
    }
    case LayerKind::kAdd:
      for (size_t k = 1; k < l->in_dims.size(); ++k) {
        if (!(l->in_dims[k] == in)) {
          return LayerError(
              absl::StrCat("add of different shapes: ", InputName(l->inputs[k]),
                           " is ", DimsStr(l->in_dims[k]), " but ",
                           InputName(l->inputs[0]), " is ", DimsStr(in)));
        }
      }
      l->out = in;
      break;
    case LayerKind::kConcat: {
      int64_t channels = 0;
      for (size_t k = 0; k < l->in_dims.size(); ++k) {
        const Dims& d = l->in_dims[k];
        if (d.h != in.h || d.w != in.w) {
          return LayerError(absl::StrCat(
              "concat of different spatial sizes: ", InputName(l->inputs[k]),
              " is ", DimsStr(d), " but ", InputName(l->inputs[0]), " is ",
              DimsStr(in),
              " (concat joins channels; height and width must match)"));
        }
        channels += d.c;
        if (channels > kMaxChannels) {
          return LayerError(
              absl::StrCat("more than ", kMaxChannels, " channels"));
        }
      }
      l->out = Dims{static_cast<int>(channels), in.h, in.w};
      break;
    }
    case LayerKind::kGlobalAvgPool:
      l->out = Dims{in.c, 1, 1};
      break;
  }
  if (l->out.Size() > kMaxActivation) {
    return LayerError(absl::StrCat("output ", DimsStr(l->out), " is more than ",
                                   kMaxActivation, " values per example"));
  }
  if (l->num_parameters > kMaxParameters) {
    return LayerError(
        absl::StrCat("more than ", kMaxParameters, " parameters"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResolvedModel> Resolver::Run() {
  m_.name = spec_.name();
  m_.source = source_;
  DP_RETURN_IF_ERROR(CheckInput());
  DP_RETURN_IF_ERROR(CheckNames());
  std::vector<bool> used(spec_.layer_size(), false);
  for (int i = 0; i < spec_.layer_size(); ++i) {
    const LayerSpec& spec = spec_.layer(i);
    label_ = LayerLabel(spec, i);
    ResolvedLayer l;
    l.name = spec.name();
    const auto* kind = std::find_if(
        std::begin(kKinds), std::end(kKinds),
        [&](const KindCase& k) { return k.oneof_case == spec.kind_case(); });
    if (kind == std::end(kKinds)) {
      return LayerError(
          absl::StrCat("no layer kind set (one of ", KnownKinds(), ")"));
    }
    l.kind = kind->kind;
    DP_RETURN_IF_ERROR(ResolveInputs(i, &l));
    for (int in : l.inputs) {
      if (in >= 0) used[in] = true;
    }
    DP_RETURN_IF_ERROR(Shape(spec, &l));
    m_.num_parameters = SatAdd(m_.num_parameters, l.num_parameters);
    if (m_.num_parameters > kMaxParameters) {
      return LayerError(absl::StrCat("the model has more than ", kMaxParameters,
                                     " parameters up to here"));
    }
    m_.layers.push_back(std::move(l));
  }
  const ResolvedLayer& last = m_.layers.back();
  if (last.out.Size() != m_.classes) {
    return Fail(absl::StrCat("classes ", m_.classes, " but the last layer \"",
                             last.name, "\" gives ", last.out.Size(),
                             " values (", DimsStr(last.out), ")"));
  }
  for (size_t i = 0; i + 1 < m_.layers.size(); ++i) {
    if (!used[i]) {
      return Fail(
          absl::StrCat("layer \"", m_.layers[i].name,
                       "\": its output is read by no later layer (only the "
                       "last layer's output may go unread)"));
    }
  }
  return std::move(m_);
}

}  // namespace

const char* LayerKindName(LayerKind kind) {
  for (const KindCase& k : kKinds) {
    if (k.kind == kind) {
      return LayerSpec::descriptor()
          ->FindFieldByNumber(k.oneof_case)
          ->name()
          .c_str();
    }
  }
  return "unknown";
}

absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view text,
                                         absl::string_view source) {
  if (MaxNesting(text) > kMaxNesting) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": blocks nested more than ", kMaxNesting, " deep"));
  }
  ModelSpec spec;
  Collector errors;
  google::protobuf::TextFormat::ParseInfoTree tree;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  // Unknown fields come back as warnings with their position, so that an
  // unknown layer kind can name its layer; each is still an error below.
  parser.AllowUnknownField(true);
  parser.SetRecursionLimit(kMaxNesting);
  const bool ok = parser.ParseFromString(std::string(text), &spec);
  if (!ok || errors.error()) {
    const Collector::Entry e = errors.error()
                                   ? *errors.error()
                                   : Collector::Entry{-1, 0, "cannot parse"};
    return absl::InvalidArgumentError(
        absl::StrCat(Position(source, e.line, e.column), ": ", e.message));
  }
  if (!errors.warnings().empty()) {
    Collector::Entry w = errors.warnings().front();
    // The parser reports the position after the field's name: point at it.
    const std::string quoted = "has no field named \"";
    if (const size_t q = w.message.find(quoted); q != std::string::npos) {
      const std::string field = w.message.substr(
          q + quoted.size(),
          w.message.find('"', q + quoted.size()) - q - quoted.size());
      size_t start = 0;
      for (int l = 0; l < w.line && start != absl::string_view::npos; ++l) {
        start = text.find('\n', start);
        if (start != absl::string_view::npos) ++start;
      }
      if (start != absl::string_view::npos) {
        const absl::string_view line =
            text.substr(start, text.find('\n', start) - start);
        const size_t at =
            line.rfind(field, static_cast<size_t>(std::max(w.column, 0)));
        if (at != absl::string_view::npos) w.column = static_cast<int>(at);
      }
    }
    const std::string pos = Position(source, w.line, w.column);
    // The layer whose text holds the unknown field, if any.
    const auto* layer_field = ModelSpec::descriptor()->FindFieldByName("layer");
    int layer = -1;
    for (int i = 0; i < spec.layer_size(); ++i) {
      const auto r = tree.GetLocationRange(layer_field, i);
      const auto before = [](int l1, int c1, int l2, int c2) {
        return l1 < l2 || (l1 == l2 && c1 <= c2);
      };
      if (before(r.start.line, r.start.column, w.line, w.column) &&
          before(w.line, w.column, r.end.line, r.end.column)) {
        layer = i;
        break;
      }
    }
    const std::string in_layer =
        absl::StrCat("Message type \"", LayerSpec::descriptor()->full_name(),
                     "\" has no field named \"");
    if (layer >= 0 && absl::StartsWith(w.message, in_layer)) {
      std::string field = w.message.substr(in_layer.size());
      field = field.substr(0, field.find('"'));
      return absl::InvalidArgumentError(
          absl::StrCat(pos, ": ", LayerLabel(spec.layer(layer), layer),
                       ": unknown layer kind or field \"", field,
                       "\" (kinds: ", KnownKinds(), ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        pos, ": ",
        layer >= 0 ? LayerLabel(spec.layer(layer), layer) + ": " : "",
        w.message));
  }
  return spec;
}

absl::StatusOr<ResolvedModel> ResolveModel(const ModelSpec& spec,
                                           absl::string_view source) {
  return Resolver(spec, source).Run();
}

absl::StatusOr<ResolvedModel> LoadModel(const std::string& name_or_path) {
  std::string text, source;
  if (absl::StatusOr<std::string> builtin = BuiltinModelText(name_or_path);
      builtin.ok()) {
    text = *std::move(builtin);
    source = absl::StrCat("built-in ", name_or_path);
  } else {
    struct stat st {};
    int err = stat(name_or_path.c_str(), &st) != 0 ? errno
              : S_ISDIR(st.st_mode)                ? EISDIR
                                                   : 0;
    std::ifstream f;
    if (err == 0) {
      f.open(name_or_path, std::ios::binary);
      if (!f.is_open()) err = errno != 0 ? errno : EIO;
    }
    if (err != 0) {
      return absl::NotFoundError(absl::StrCat(
          "model \"", name_or_path, "\": not a built-in model (",
          absl::StrJoin(BuiltinModelNames(), ", "),
          ") and cannot read it as a spec file: ", std::strerror(err)));
    }
    if (st.st_size > kMaxFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_or_path, ": more than ", kMaxFileBytes,
                       " bytes; not a model spec"));
    }
    std::ostringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    source = name_or_path;
  }
  DP_ASSIGN_OR_RETURN(ModelSpec spec, ParseModelSpec(text, source));
  DP_ASSIGN_OR_RETURN(ResolvedModel m, ResolveModel(spec, source));
  if (m.name.empty()) m.name = source;
  return m;
}

absl::Status CheckModelFitsData(const ResolvedModel& m, int channels,
                                int height, int width, int classes) {
  const Dims data{channels, height, width};
  if (m.input == data && m.classes == classes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model \"", m.name, "\" (", m.source, ") takes ", DimsStr(m.input),
      " inputs in ", m.classes, " classes, but the data set has ",
      DimsStr(data), " images in ", classes, " classes"));
}

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (const BuiltinSpec& b : kBuiltins) names.push_back(b.name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> BuiltinModelText(absl::string_view name) {
  for (const BuiltinSpec& b : kBuiltins) {
    if (name == b.name) return std::string(b.text);
  }
  return absl::NotFoundError(absl::StrCat(
      "no built-in model \"", name,
      "\"; built-in models: ", absl::StrJoin(BuiltinModelNames(), ", ")));
}

std::vector<ModelTensor> ModelTensors(const ResolvedModel& m) {
  std::vector<ModelTensor> out;
  for (const ResolvedLayer& l : m.layers) {
    const int64_t in_c = l.in_dims.empty() ? 0 : l.in_dims[0].c;
    const auto add = [&](const char* suffix, std::vector<int64_t> shape,
                         bool trainable) {
      out.push_back(ModelTensor{absl::StrCat(l.name, ".", suffix),
                                std::move(shape), trainable});
    };
    switch (l.kind) {
      case LayerKind::kConv:
        add("weight", {l.out_channels, in_c, l.kernel, l.kernel}, true);
        if (l.bias) add("bias", {l.out_channels}, true);
        break;
      case LayerKind::kDense:
        add("weight", {l.out_features, l.in_dims[0].Size()}, true);
        if (l.bias) add("bias", {l.out_features}, true);
        break;
      case LayerKind::kBatchNorm:
        add("weight", {in_c}, true);
        add("bias", {in_c}, true);
        add("running_mean", {in_c}, false);
        add("running_var", {in_c}, false);
        break;
      default:
        break;
    }
  }
  return out;
}

}  // namespace downpour
