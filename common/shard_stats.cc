#include "common/shard_stats.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace downpour {
namespace {

// One appender per kind of DOWNPOUR_SHARD_STATS_FIELDS.
void AppendNumber(int64_t v, std::string* out) { absl::StrAppend(out, v); }
void AppendBool(bool v, std::string* out) {
  out->append(v ? "true" : "false");
}
void AppendMean(double v, std::string* out) {
  absl::StrAppendFormat(out, "%.4f", v);
}
void AppendText(const std::string& v, std::string* out) {
  absl::StrAppend(out, "\"", v, "\"");
}
void AppendCounts(const ShardStats::Counts& v, std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [reason, n] : v) {
    absl::StrAppend(out, first ? "" : ",", "\"", reason, "\":", n);
    first = false;
  }
  out->push_back('}');
}
void AppendIds(const std::vector<int32_t>& v, std::string* out) {
  absl::StrAppend(out, "[", absl::StrJoin(v, ","), "]");
}
void AppendFlag(const std::string& v, std::string* out) {
  AppendBool(!v.empty(), out);
}

}  // namespace

std::string ShardStatsToJson(const ShardStats& s) {
  std::string out = "{";
  const char* sep = "";
#define DOWNPOUR_SHARD_STATS_JSON(type, name, json_key, kind) \
  absl::StrAppend(&out, sep, "\"", json_key, "\":");          \
  Append##kind(s.name, &out);                                 \
  sep = ",";
  DOWNPOUR_SHARD_STATS_FIELDS(DOWNPOUR_SHARD_STATS_JSON)
#undef DOWNPOUR_SHARD_STATS_JSON
  out.push_back('}');
  return out;
}

}  // namespace downpour
