#include "common/report.h"

#include <cmath>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

constexpr absl::string_view kDoneTag = "DONE";
constexpr absl::string_view kEvalTag = "EVAL";
constexpr absl::string_view kServerStatsTag = "SERVER_STATS";

// Consumes the longest prefix of *s made of number characters and parses it.
bool ConsumeNumber(absl::string_view* s, double* out) {
  size_t n = 0;
  while (n < s->size() &&
         (absl::ascii_isdigit((*s)[n]) || (*s)[n] == '.' || (*s)[n] == '-' ||
          (*s)[n] == '+' || (*s)[n] == 'e' || (*s)[n] == 'E')) {
    ++n;
  }
  if (n == 0 || !absl::SimpleAtod(s->substr(0, n), out)) return false;
  s->remove_prefix(n);
  return true;
}

// A JSON string literal for `s`; bytes that are not UTF-8 become U+FFFD.
std::string Quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false,
                                nlohmann::json::error_handler_t::replace);
}

// Reads `key` of `numbers` into *out; false when it is missing.
template <typename T>
bool Get(const JsonNumbers& numbers, const char* key, T* out) {
  auto it = numbers.find(key);
  if (it == numbers.end()) return false;
  if constexpr (std::is_integral_v<T>) {
    *out = static_cast<T>(std::llround(it->second));
  } else {
    *out = it->second;
  }
  return true;
}

// The object of a `<tag> {json}` line, or nullopt.
std::optional<nlohmann::json> TaggedObject(absl::string_view line,
                                           absl::string_view tag) {
  absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&s, tag) || !absl::ConsumePrefix(&s, " ")) {
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(s.begin(), s.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  return j;
}

JsonNumbers NumbersOf(const nlohmann::json& object) {
  JsonNumbers out;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (it.value().is_number()) out[it.key()] = it.value().get<double>();
  }
  return out;
}

}  // namespace

absl::StatusOr<JsonNumbers> ParseJsonNumbers(absl::string_view json) {
  try {
    nlohmann::json j = nlohmann::json::parse(json.begin(), json.end());
    if (!j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed JSON: expected an object, got ", j.type_name()));
    }
    return NumbersOf(j);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON: ", e.what()));
  }
}

std::optional<JsonNumbers> ParseTaggedJson(absl::string_view line,
                                           absl::string_view tag) {
  std::optional<nlohmann::json> j = TaggedObject(line, tag);
  if (!j) return std::nullopt;
  return NumbersOf(*j);
}

std::string FormatProgressLine(const WorkerProgress& p) {
  return absl::StrFormat(
      "worker %d: step %d, loss = %.3f (%.1f examples/sec; %.3f sec/batch) %s",
      p.worker, p.step, p.loss, p.examples_per_sec, p.sec_per_batch,
      p.shares);
}

std::optional<WorkerProgress> ParseProgressLine(absl::string_view line) {
  WorkerProgress p;
  absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&s, "worker ")) return std::nullopt;
  size_t colon = s.find(':');
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(s.substr(0, colon), &p.worker)) {
    return std::nullopt;
  }
  s.remove_prefix(colon + 1);
  if (!absl::ConsumePrefix(&s, " step ")) return std::nullopt;
  size_t comma = s.find(',');
  if (comma == absl::string_view::npos ||
      !absl::SimpleAtoi(s.substr(0, comma), &p.step)) {
    return std::nullopt;
  }
  s.remove_prefix(comma + 1);
  if (!absl::ConsumePrefix(&s, " loss = ")) return std::nullopt;
  if (!ConsumeNumber(&s, &p.loss)) {
    // Tolerate "nan"/"inf" losses: the rate is what the launcher needs.
    size_t sp = s.find(' ');
    if (sp == absl::string_view::npos) return std::nullopt;
    p.loss = NAN;
    s.remove_prefix(sp);
  }
  if (!absl::ConsumePrefix(&s, " (")) return std::nullopt;
  if (!ConsumeNumber(&s, &p.examples_per_sec)) return std::nullopt;
  if (!absl::StartsWith(s, " examples/sec")) return std::nullopt;
  return p;
}

std::string FormatDoneLine(const DoneReport& d) {
  std::string sandblaster;
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"portions", d.portions},
        {"backup_portions", d.backup_portions},
        {"iterations", d.iterations},
        {"line_search_evaluations", d.line_search_evaluations}}) {
    if (value >= 0) absl::StrAppend(&sandblaster, ",\"", key, "\":", value);
  }
  return absl::StrFormat(
      "%s {\"worker\":%d,\"steps\":%d,\"examples\":%d,\"pushes\":%d,"
      "\"final_loss\":%.5f,\"seconds\":%.3f,\"time_data\":%.3f,"
      "\"time_compute\":%.3f,\"time_pull\":%.3f,\"time_push\":%.3f,"
      "\"verdict\":%s,\"bad_images\":%d%s}",
      kDoneTag, d.worker, d.steps, d.examples, d.pushes, d.final_loss,
      d.seconds, d.time_data, d.time_compute, d.time_pull, d.time_push,
      Quote(d.verdict), d.bad_images, sandblaster);
}

std::optional<DoneReport> ParseDoneLine(absl::string_view line) {
  std::optional<nlohmann::json> j = TaggedObject(line, kDoneTag);
  if (!j) return std::nullopt;
  const JsonNumbers n = NumbersOf(*j);
  DoneReport d;
  if (!Get(n, "worker", &d.worker) || !Get(n, "steps", &d.steps) ||
      !Get(n, "examples", &d.examples) ||
      !Get(n, "final_loss", &d.final_loss) || !Get(n, "seconds", &d.seconds)) {
    return std::nullopt;
  }
  Get(n, "pushes", &d.pushes);
  Get(n, "time_data", &d.time_data);
  Get(n, "time_compute", &d.time_compute);
  Get(n, "time_pull", &d.time_pull);
  Get(n, "time_push", &d.time_push);
  Get(n, "bad_images", &d.bad_images);
  Get(n, "portions", &d.portions);
  Get(n, "backup_portions", &d.backup_portions);
  Get(n, "iterations", &d.iterations);
  Get(n, "line_search_evaluations", &d.line_search_evaluations);
  if (auto v = j->find("verdict"); v != j->end() && v->is_string()) {
    d.verdict = v->get<std::string>();
  }
  return d;
}

std::string FormatEvalLine(const EvalReport& e) {
  return absl::StrFormat(
      "%s {\"test_accuracy\":%.5f,\"test_loss\":%.5f,\"examples\":%d}",
      kEvalTag, e.test_accuracy, e.test_loss, e.examples);
}

std::optional<EvalReport> ParseEvalLine(absl::string_view line) {
  std::optional<JsonNumbers> n = ParseTaggedJson(line, kEvalTag);
  if (!n) return std::nullopt;
  EvalReport e;
  if (!Get(*n, "test_accuracy", &e.test_accuracy) ||
      !Get(*n, "test_loss", &e.test_loss)) {
    return std::nullopt;
  }
  Get(*n, "examples", &e.examples);
  return e;
}

std::string FormatServerStatsLine(const ShardStats& s) {
  return absl::StrCat(kServerStatsTag, " ", ShardStatsToJson(s));
}

std::optional<JsonNumbers> ParseServerStatsLine(absl::string_view line) {
  return ParseTaggedJson(line, kServerStatsTag);
}

}  // namespace downpour
