#include "common/cluster_spec.h"

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

// No job has more tasks than this; a larger count is a typo, and capping it
// keeps a bad nodelist such as "n[1-999999999]" from eating memory.
constexpr int64_t kMaxTasks = 100000;

absl::Status Invalid(absl::string_view a, absl::string_view b = "",
                     absl::string_view c = "", absl::string_view d = "",
                     absl::string_view e = "", absl::string_view f = "") {
  return absl::InvalidArgumentError(absl::StrCat(a, b, c, d, e, f));
}

// A run of 1..9 decimal digits and nothing else (no sign, no spaces).
bool ParseDigits(absl::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 9) return false;
  int64_t v = 0;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

bool IsHostNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.' || c == '_';
}

bool IsIpv6Char(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' ||
         c == '.';
}

std::string JoinHosts(const std::vector<std::string>& hosts) {
  return absl::StrCat("[", absl::StrJoin(hosts, ","), "]");
}

// ---------------------------------------------------------------- TF_CONFIG

// cluster.<job>: a list of "host:port" strings, normalized. A missing job is
// an empty list.
absl::StatusOr<std::vector<std::string>> TfConfigJob(
    const nlohmann::json& cluster, const std::string& job) {
  std::vector<std::string> out;
  auto it = cluster.find(job);
  if (it == cluster.end() || it->is_null()) return out;
  const std::string where = absl::StrCat("TF_CONFIG cluster.", job);
  if (!it->is_array()) {
    return Invalid(where, " must be a list of \"host:port\" strings, got ",
                   it->type_name());
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& entry = (*it)[i];
    const std::string what = absl::StrCat(where, "[", i, "]");
    if (!entry.is_string()) {
      return Invalid(what, " must be a \"host:port\" string, got ",
                     entry.type_name());
    }
    DP_ASSIGN_OR_RETURN(HostPort hp,
                        ParseHostPort(entry.get<std::string>(), what));
    out.push_back(absl::StrCat(hp.host, ":", hp.port));
  }
  return out;
}

absl::StatusOr<ClusterSpec> FromTfConfigJson(const nlohmann::json& root) {
  if (!root.is_object()) {
    return Invalid("TF_CONFIG must be a JSON object, got ", root.type_name());
  }
  auto cluster_it = root.find("cluster");
  if (cluster_it == root.end()) {
    return Invalid("TF_CONFIG has no \"cluster\" object");
  }
  if (!cluster_it->is_object()) {
    return Invalid("TF_CONFIG \"cluster\" must be an object, got ",
                   cluster_it->type_name());
  }
  const nlohmann::json& cluster = *cluster_it;
  for (auto it = cluster.begin(); it != cluster.end(); ++it) {
    const std::string& job = it.key();
    if (job != "ps" && job != "worker" && job != "chief" &&
        job != "evaluator") {
      return Invalid("TF_CONFIG cluster has a job '", job,
                     "' that Downpour does not run; the jobs are ps, chief "
                     "and worker (evaluator is ignored)");
    }
  }

  ClusterSpec spec;
  spec.source = "TF_CONFIG";
  DP_ASSIGN_OR_RETURN(spec.ps, TfConfigJob(cluster, "ps"));
  DP_ASSIGN_OR_RETURN(std::vector<std::string> chief,
                      TfConfigJob(cluster, "chief"));
  DP_ASSIGN_OR_RETURN(std::vector<std::string> worker,
                      TfConfigJob(cluster, "worker"));
  if (spec.ps.empty()) {
    return Invalid(
        "TF_CONFIG cluster.ps is missing or empty; Downpour needs at least "
        "one parameter server");
  }
  if (chief.size() > 1) {
    return Invalid("TF_CONFIG cluster.chief has ", absl::StrCat(chief.size()),
                   " entries; a job has at most one chief");
  }
  if (chief.empty() && worker.empty()) {
    return Invalid(
        "TF_CONFIG cluster has neither chief nor worker entries; Downpour "
        "needs at least one worker");
  }
  spec.workers = chief;
  spec.workers.insert(spec.workers.end(), worker.begin(), worker.end());

  auto task_it = root.find("task");
  if (task_it == root.end()) {
    return Invalid("TF_CONFIG has no \"task\" object (type and index)");
  }
  if (!task_it->is_object()) {
    return Invalid("TF_CONFIG \"task\" must be an object, got ",
                   task_it->type_name());
  }
  auto type_it = task_it->find("type");
  if (type_it == task_it->end()) return Invalid("TF_CONFIG task.type is missing");
  if (!type_it->is_string()) {
    return Invalid("TF_CONFIG task.type must be a string, got ",
                   type_it->type_name());
  }
  const std::string type = type_it->get<std::string>();
  auto index_it = task_it->find("index");
  if (index_it == task_it->end()) {
    return Invalid("TF_CONFIG task.index is missing");
  }
  if (!index_it->is_number_integer()) {
    return Invalid("TF_CONFIG task.index must be an integer, got ",
                   index_it->type_name());
  }
  int64_t index = 0;
  if (index_it->is_number_unsigned()) {
    uint64_t u = index_it->get<uint64_t>();
    index = u > static_cast<uint64_t>(kMaxTasks) ? kMaxTasks : u;
  } else {
    index = index_it->get<int64_t>();
  }
  const std::string index_text = index_it->dump();

  auto out_of_range = [&](const char* job, size_t n) {
    if (n == 0) {
      return Invalid("TF_CONFIG task.index ", index_text, " is out of range: ",
                     "cluster.", job, " is missing or empty");
    }
    return Invalid("TF_CONFIG task.index ", index_text, " is out of range: ",
                   absl::StrCat("cluster.", job, " has ", n,
                                " entries (valid 0..", n - 1, ")"));
  };
  if (type == "ps") {
    if (index < 0 || index >= static_cast<int64_t>(spec.ps.size())) {
      return out_of_range("ps", spec.ps.size());
    }
    spec.task_type = TaskType::kPs;
    spec.task_index = static_cast<int>(index);
  } else if (type == "chief") {
    if (chief.empty()) {
      return Invalid(
          "TF_CONFIG task.type is 'chief' but cluster.chief is missing or "
          "empty");
    }
    if (index != 0) {
      return Invalid("TF_CONFIG task.index ", index_text,
                     " is out of range for the chief: it must be 0");
    }
    spec.task_type = TaskType::kWorker;
    spec.task_index = 0;
  } else if (type == "worker") {
    if (index < 0 || index >= static_cast<int64_t>(worker.size())) {
      return out_of_range("worker", worker.size());
    }
    spec.task_type = TaskType::kWorker;
    spec.task_index = static_cast<int>(index) + (chief.empty() ? 0 : 1);
  } else if (type == "evaluator") {
    return Invalid(
        "TF_CONFIG task.type 'evaluator' is not supported: Downpour has no "
        "evaluator role (the chief, worker 0, evaluates at the end); drop "
        "the Evaluator replicas");
  } else {
    return Invalid("TF_CONFIG task.type '", type,
                   "' is unknown; expected ps, worker or chief");
  }
  DP_RETURN_IF_ERROR(ValidateClusterSpec(spec));
  return spec;
}

// -------------------------------------------------------------------- Slurm

// Expands one bracket-free-at-top-level nodelist item: "pre[ranges]rest".
absl::Status ExpandNodeItem(absl::string_view item, absl::string_view what,
                            int64_t budget, std::vector<std::string>* out) {
  size_t open = item.find('[');
  if (open == absl::string_view::npos) {
    out->emplace_back(item);
    return absl::OkStatus();
  }
  const size_t close = item.find(']', open);  // balanced: checked by caller
  absl::string_view prefix = item.substr(0, open);
  absl::string_view ranges = item.substr(open + 1, close - open - 1);
  absl::string_view rest = item.substr(close + 1);
  if (ranges.empty()) {
    return Invalid(what, " has an empty bracket group in '", item, "'");
  }
  std::vector<std::string> values;
  for (absl::string_view r : absl::StrSplit(ranges, ',')) {
    if (r.empty()) {
      return Invalid(what, " has an empty range in '[", ranges, "]'");
    }
    size_t dash = r.find('-');
    absl::string_view lo_text = r.substr(0, dash);
    absl::string_view hi_text =
        dash == absl::string_view::npos ? lo_text : r.substr(dash + 1);
    int64_t lo = 0, hi = 0;
    if (!ParseDigits(lo_text, &lo) || !ParseDigits(hi_text, &hi)) {
      return Invalid(what, " has a bad range '", r, "' in '", item,
                     "': expected N or N-M with decimal N, M");
    }
    if (lo > hi) {
      return Invalid(what, " has a reversed range '", r, "' in '", item, "'");
    }
    if (hi - lo + 1 + static_cast<int64_t>(values.size()) > budget) {
      return Invalid(what, " expands to more than ",
                     absl::StrCat(kMaxTasks), " node names");
    }
    // Slurm keeps the width of a zero-padded lower bound: node[08-10].
    const size_t width = lo_text.size();
    for (int64_t v = lo; v <= hi; ++v) {
      std::string digits = absl::StrCat(v);
      if (digits.size() < width) {
        digits.insert(0, width - digits.size(), '0');
      }
      values.push_back(std::move(digits));
    }
  }
  std::vector<std::string> tails;
  DP_RETURN_IF_ERROR(ExpandNodeItem(rest, what, budget, &tails));
  if (static_cast<int64_t>(values.size() * tails.size() + out->size()) >
      budget) {
    return Invalid(what, " expands to more than ", absl::StrCat(kMaxTasks),
                   " node names");
  }
  for (const std::string& v : values) {
    for (const std::string& t : tails) {
      out->push_back(absl::StrCat(prefix, v, t));
    }
  }
  return absl::OkStatus();
}

// The first of `names` that is set and not blank: (name, trimmed value).
std::optional<std::pair<std::string, std::string>> FirstSet(
    const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    std::optional<std::string> v = env(name);
    if (!v) continue;
    absl::string_view t = absl::StripAsciiWhitespace(*v);
    if (!t.empty()) return std::make_pair(std::string(name), std::string(t));
  }
  return std::nullopt;
}

// An optional non-negative integer variable (SLURM_NODEID, SLURM_LOCALID).
absl::StatusOr<std::optional<int64_t>> OptionalIndex(const EnvLookup& env,
                                                     const char* name) {
  auto v = FirstSet(env, {name});
  if (!v) return std::optional<int64_t>();
  int64_t n = 0;
  if (!ParseDigits(v->second, &n)) {
    return Invalid(name, " '", v->second, "' is not a non-negative integer");
  }
  return std::optional<int64_t>(n);
}

bool IsBlank(const std::optional<std::string>& v) {
  return !v || absl::StripAsciiWhitespace(*v).empty();
}

}  // namespace

const char* TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kPs:
      return "ps";
    case TaskType::kWorker:
      return "worker";
  }
  return "unknown";
}

absl::StatusOr<TaskType> ParseTaskType(absl::string_view name,
                                       absl::string_view what) {
  if (name == "ps") return TaskType::kPs;
  if (name == "worker") return TaskType::kWorker;
  return Invalid(what, " '", name, "' is not a task type; expected ps or worker");
}

const std::string& ClusterSpec::SelfAddress() const {
  static const std::string* const kNone = new std::string();
  const std::vector<std::string>& list =
      task_type == TaskType::kPs ? ps : workers;
  if (task_index < 0 || task_index >= static_cast<int>(list.size())) {
    return *kNone;
  }
  return list[task_index];
}

std::string ClusterSpecToString(const ClusterSpec& spec) {
  return absl::StrCat("cluster spec from ", spec.source, ": this task is ",
                      TaskTypeName(spec.task_type), " ", spec.task_index,
                      spec.IsChief() ? " (chief)" : "", " at ",
                      spec.SelfAddress(), "; ", spec.ps.size(), " ps ",
                      JoinHosts(spec.ps), ", ", spec.workers.size(),
                      " workers ", JoinHosts(spec.workers));
}

absl::Status ValidateClusterSpec(const ClusterSpec& spec) {
  const std::string src = spec.source.empty() ? "cluster spec" : spec.source;
  if (spec.ps.empty()) {
    return Invalid(src, ": no parameter servers; a job needs at least one");
  }
  if (spec.workers.empty()) {
    return Invalid(src, ": no workers; a job needs at least one");
  }
  const size_t n = spec.task_type == TaskType::kPs ? spec.ps.size()
                                                   : spec.workers.size();
  if (spec.task_index < 0 || spec.task_index >= static_cast<int>(n)) {
    return Invalid(src, ": task index ", absl::StrCat(spec.task_index),
                   " is out of range for ",
                   absl::StrCat(n, " ", TaskTypeName(spec.task_type),
                                " tasks (valid 0..", n - 1, ")"));
  }
  std::map<std::string, std::string> seen;  // normalized address -> where
  for (int role = 0; role < 2; ++role) {
    const std::vector<std::string>& list = role == 0 ? spec.ps : spec.workers;
    const char* name = role == 0 ? "ps" : "worker";
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = absl::StrCat(name, "[", i, "]");
      DP_ASSIGN_OR_RETURN(HostPort hp,
                          ParseHostPort(list[i], absl::StrCat(src, " ", where)));
      std::string key = absl::StrCat(absl::AsciiStrToLower(hp.host), ":",
                                     hp.port);
      auto [it, inserted] = seen.emplace(key, where);
      if (!inserted) {
        return Invalid(src, ": address '", list[i], "' is given twice (",
                       absl::StrCat(it->second, " and ", where),
                       "); every task needs its own host:port");
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view entry,
                                       absl::string_view what) {
  auto bad = [&](absl::string_view why, absl::string_view more = "") {
    return Invalid(what, " '", entry, "': ", why, more);
  };
  if (entry.empty()) {
    return Invalid(what, " is empty; expected host:port");
  }
  HostPort out;
  absl::string_view port_text;
  if (entry.front() == '[') {
    const size_t close = entry.find(']');
    if (close == absl::string_view::npos) {
      return bad("missing ']' after the IPv6 address");
    }
    absl::string_view addr = entry.substr(1, close - 1);
    if (addr.empty() || addr.find(':') == absl::string_view::npos) {
      return bad("brackets must hold an IPv6 address, e.g. [::1]:5000");
    }
    for (char c : addr) {
      if (!IsIpv6Char(c)) {
        return bad("bad character in the IPv6 address: '",
                   absl::StrCat(absl::string_view(&c, 1), "'"));
      }
    }
    absl::string_view after = entry.substr(close + 1);
    if (after.empty() || after.front() != ':') {
      return bad("expected ':port' after ']'");
    }
    out.host = std::string(entry.substr(0, close + 1));
    port_text = after.substr(1);
  } else {
    const size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos) {
      return bad("no port; expected host:port");
    }
    if (entry.find(':') != colon) {
      return bad(
          "too many ':'; an IPv6 address must be in brackets, e.g. "
          "[::1]:5000");
    }
    absl::string_view host = entry.substr(0, colon);
    if (host.empty()) return bad("the host is empty");
    for (char c : host) {
      if (!IsHostNameChar(c)) {
        return bad("bad character in the host name: '",
                   absl::StrCat(absl::string_view(&c, 1), "'"));
      }
    }
    out.host = std::string(host);
    port_text = entry.substr(colon + 1);
  }
  int64_t port = 0;
  if (!ParseDigits(port_text, &port) || port < 1 || port > 65535) {
    return bad(absl::StrCat("port '", port_text,
                            "' is not a number in 1..65535"));
  }
  out.port = static_cast<int>(port);
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseHostList(absl::string_view list,
                                                       absl::string_view what) {
  absl::string_view trimmed = absl::StripAsciiWhitespace(list);
  if (trimmed.empty()) {
    return Invalid(what, " is empty; expected host:port[,host:port...]");
  }
  std::vector<std::string> out;
  int i = 0;
  for (absl::string_view raw : absl::StrSplit(trimmed, ',')) {
    absl::string_view entry = absl::StripAsciiWhitespace(raw);
    const std::string where = absl::StrCat(what, "[", i, "]");
    if (entry.empty()) {
      return Invalid(where, " is empty in '", trimmed, "' (a stray comma?)");
    }
    DP_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(entry, where));
    out.push_back(absl::StrCat(hp.host, ":", hp.port));
    ++i;
  }
  return out;
}

absl::StatusOr<ClusterSpec> FromFlags(absl::string_view ps_hosts,
                                      absl::string_view worker_hosts,
                                      absl::string_view task_type,
                                      int task_index) {
  ClusterSpec spec;
  spec.source = "flags";
  DP_ASSIGN_OR_RETURN(spec.ps, ParseHostList(ps_hosts, "--ps_hosts"));
  DP_ASSIGN_OR_RETURN(spec.workers,
                      ParseHostList(worker_hosts, "--worker_hosts"));
  DP_ASSIGN_OR_RETURN(spec.task_type, ParseTaskType(task_type, "--task_type"));
  const bool ps = spec.task_type == TaskType::kPs;
  const size_t n = ps ? spec.ps.size() : spec.workers.size();
  if (task_index < 0 || task_index >= static_cast<int>(n)) {
    return Invalid("--task_index=", absl::StrCat(task_index),
                   " is out of range for --task_type=", task_type, ": ",
                   absl::StrCat(ps ? "--ps_hosts" : "--worker_hosts", " has ",
                                n, " entries (valid 0..", n - 1, ")"));
  }
  spec.task_index = task_index;
  DP_RETURN_IF_ERROR(ValidateClusterSpec(spec));
  return spec;
}

absl::StatusOr<ClusterSpec> FromTfConfig(absl::string_view json_text) {
  if (absl::StripAsciiWhitespace(json_text).empty()) {
    return Invalid("TF_CONFIG is empty");
  }
  // nlohmann reports errors by exception; none may leave this function.
  try {
    nlohmann::json root = nlohmann::json::parse(json_text.begin(),
                                                json_text.end());
    return FromTfConfigJson(root);
  } catch (const nlohmann::json::parse_error& e) {
    return Invalid("TF_CONFIG is not valid JSON: ", e.what());
  } catch (const std::exception& e) {
    return Invalid("TF_CONFIG could not be read: ", e.what());
  }
}

EnvLookup ProcessEnvLookup() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(
    absl::string_view nodelist, absl::string_view what) {
  absl::string_view text = absl::StripAsciiWhitespace(nodelist);
  if (text.empty()) return Invalid(what, " is empty");
  // Split at the commas outside brackets, checking the brackets balance.
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (depth > 0) return Invalid(what, " '", text, "' has nested '['");
      ++depth;
    } else if (c == ']') {
      if (depth == 0) return Invalid(what, " '", text, "' has ']' without '['");
      --depth;
    } else if (c == ',' && depth == 0) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return Invalid(what, " '", text, "' has an unclosed '['");
  std::vector<std::string> out;
  for (absl::string_view item : items) {
    if (item.empty()) {
      return Invalid(what, " '", text, "' has an empty entry (a stray comma?)");
    }
    if (item.front() == '[') {
      return Invalid(what, " '", text, "' has a range with no name before it");
    }
    DP_RETURN_IF_ERROR(
        ExpandNodeItem(item, absl::StrCat(what, " '", text, "'"), kMaxTasks,
                       &out));
  }
  for (const std::string& name : out) {
    for (char c : name) {
      if (!IsHostNameChar(c)) {
        return Invalid(what, " '", text, "' has a bad character '",
                       absl::string_view(&c, 1),
                       absl::StrCat("' in node name '", name, "'"));
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(
    absl::string_view tasks_per_node, absl::string_view what) {
  absl::string_view text = absl::StripAsciiWhitespace(tasks_per_node);
  if (text.empty()) return Invalid(what, " is empty");
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    auto bad = [&]() {
      return Invalid(what, " '", text, "' has a bad entry '", item,
                     "': expected N or N(xM) with N, M >= 1");
    };
    absl::string_view count_text = item;
    int64_t repeat = 1;
    const size_t paren = item.find('(');
    if (paren != absl::string_view::npos) {
      count_text = item.substr(0, paren);
      absl::string_view tail = item.substr(paren);
      if (tail.size() < 4 || tail.substr(0, 2) != "(x" || tail.back() != ')' ||
          !ParseDigits(tail.substr(2, tail.size() - 3), &repeat) ||
          repeat < 1) {
        return bad();
      }
    }
    int64_t count = 0;
    if (!ParseDigits(count_text, &count) || count < 1) return bad();
    if (static_cast<int64_t>(out.size()) + repeat > kMaxTasks ||
        count > kMaxTasks) {
      return Invalid(what, " '", text, "' describes more than ",
                     absl::StrCat(kMaxTasks), " nodes or tasks");
    }
    out.insert(out.end(), repeat, static_cast<int>(count));
  }
  return out;
}

absl::StatusOr<ClusterSpec> FromSlurm(const EnvLookup& env, int num_ps,
                                      int base_port) {
  if (num_ps < 1) {
    return Invalid("--num_ps=", absl::StrCat(num_ps),
                   " must be at least 1 under Slurm (the first --num_ps ranks "
                   "are the servers)");
  }
  if (base_port < 1 || base_port > 65535) {
    return Invalid("--base_port=", absl::StrCat(base_port),
                   " is not a port in 1..65535");
  }
  auto procid_var = FirstSet(env, {"SLURM_PROCID"});
  if (!procid_var) return Invalid("SLURM_PROCID is not set");
  int64_t procid = 0;
  if (!ParseDigits(procid_var->second, &procid)) {
    return Invalid("SLURM_PROCID '", procid_var->second,
                   "' is not a non-negative integer");
  }
  auto ntasks_var = FirstSet(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  if (!ntasks_var) {
    return Invalid(
        "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set; start the "
        "tasks with srun -n N");
  }
  int64_t ntasks = 0;
  if (!ParseDigits(ntasks_var->second, &ntasks) || ntasks < 1) {
    return Invalid(ntasks_var->first, " '", ntasks_var->second,
                   "' is not a positive integer");
  }
  auto nodelist_var =
      FirstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  if (!nodelist_var) {
    return Invalid("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
  }
  DP_ASSIGN_OR_RETURN(
      std::vector<std::string> nodes,
      ExpandSlurmNodeList(nodelist_var->second, nodelist_var->first));
  auto tpn_var =
      FirstSet(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!tpn_var) {
    return Invalid(
        "neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set");
  }
  DP_ASSIGN_OR_RETURN(std::vector<int> tpn,
                      ExpandSlurmTasksPerNode(tpn_var->second, tpn_var->first));
  if (tpn.size() != nodes.size()) {
    return Invalid(tpn_var->first, " '", tpn_var->second,
                   absl::StrCat("' describes ", tpn.size(), " nodes but "),
                   nodelist_var->first,
                   absl::StrCat(" '", nodelist_var->second, "' lists ",
                                nodes.size()));
  }
  int64_t sum = 0;
  for (int t : tpn) sum += t;
  if (sum != ntasks) {
    return Invalid(tpn_var->first, " '", tpn_var->second,
                   absl::StrCat("' sums to ", sum, " tasks but "),
                   ntasks_var->first, absl::StrCat(" is ", ntasks));
  }
  if (procid >= ntasks) {
    return Invalid("SLURM_PROCID ", absl::StrCat(procid),
                   " is out of range: ", ntasks_var->first,
                   absl::StrCat(" is ", ntasks, " (valid 0..", ntasks - 1, ")"));
  }
  if (num_ps >= ntasks) {
    return Invalid("--num_ps=", absl::StrCat(num_ps), " leaves no worker: ",
                   ntasks_var->first,
                   absl::StrCat(" is ", ntasks,
                                "; start more tasks than --num_ps"));
  }

  ClusterSpec spec;
  spec.source = "slurm";
  int64_t rank = 0;
  int64_t self_node = -1, self_offset = -1;
  for (size_t node = 0; node < nodes.size(); ++node) {
    if (base_port + tpn[node] - 1 > 65535) {
      return Invalid("--base_port=", absl::StrCat(base_port), " plus ",
                     absl::StrCat(tpn[node], " tasks on node ", nodes[node],
                                  " runs past port 65535"));
    }
    for (int k = 0; k < tpn[node]; ++k, ++rank) {
      std::string addr = absl::StrCat(nodes[node], ":", base_port + k);
      if (rank == procid) {
        self_node = static_cast<int64_t>(node);
        self_offset = k;
      }
      if (rank < num_ps) {
        spec.ps.push_back(std::move(addr));
      } else {
        spec.workers.push_back(std::move(addr));
      }
    }
  }
  // Slurm's own view of this task must match the block placement.
  DP_ASSIGN_OR_RETURN(std::optional<int64_t> nodeid,
                      OptionalIndex(env, "SLURM_NODEID"));
  DP_ASSIGN_OR_RETURN(std::optional<int64_t> localid,
                      OptionalIndex(env, "SLURM_LOCALID"));
  if ((nodeid && *nodeid != self_node) ||
      (localid && *localid != self_offset)) {
    return Invalid(
        absl::StrCat("SLURM_NODEID/SLURM_LOCALID (",
                     nodeid ? absl::StrCat(*nodeid) : "unset", "/",
                     localid ? absl::StrCat(*localid) : "unset",
                     ") do not match block placement, which puts rank ",
                     procid, " on node ", self_node, " (", nodes[self_node],
                     ") as its task ", self_offset),
        "; launch with srun --distribution=block (the default)");
  }
  if (procid < num_ps) {
    spec.task_type = TaskType::kPs;
    spec.task_index = static_cast<int>(procid);
  } else {
    spec.task_type = TaskType::kWorker;
    spec.task_index = static_cast<int>(procid - num_ps);
  }
  DP_RETURN_IF_ERROR(ValidateClusterSpec(spec));
  return spec;
}

absl::StatusOr<std::optional<ClusterSpec>> ResolveClusterSpec(
    const ClusterSpecInputs& inputs, const EnvLookup& env) {
  const bool have_workers =
      !absl::StripAsciiWhitespace(inputs.worker_hosts).empty();
  const bool have_ps = !absl::StripAsciiWhitespace(inputs.ps_hosts).empty();
  if (have_workers) {
    DP_ASSIGN_OR_RETURN(ClusterSpec spec,
                        FromFlags(inputs.ps_hosts, inputs.worker_hosts,
                                  inputs.task_type, inputs.task_index));
    return std::optional<ClusterSpec>(std::move(spec));
  }
  if (have_ps) return std::optional<ClusterSpec>();
  std::optional<std::string> tf_config = env("TF_CONFIG");
  if (!IsBlank(tf_config)) {
    DP_ASSIGN_OR_RETURN(ClusterSpec spec, FromTfConfig(*tf_config));
    return std::optional<ClusterSpec>(std::move(spec));
  }
  if (!IsBlank(env("SLURM_PROCID"))) {
    DP_ASSIGN_OR_RETURN(ClusterSpec spec,
                        FromSlurm(env, inputs.num_ps, inputs.base_port));
    return std::optional<ClusterSpec>(std::move(spec));
  }
  return std::optional<ClusterSpec>();
}

}  // namespace downpour
