#include "common/cluster_spec.h"

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec_internal.h"
#include "common/slurm_env.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace downpour {
namespace {

using cluster_spec_internal::Invalid;
using cluster_spec_internal::IsHostNameChar;
using cluster_spec_internal::kMaxTasks;
using cluster_spec_internal::ParseDigits;

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

// Checks that the "cluster" object holds only jobs Downpour knows and reads
// them: ps into spec->ps, the chief and the workers into `chief` / `worker`.
absl::Status ReadTfConfigCluster(const nlohmann::json& root, ClusterSpec* spec,
                                 std::vector<std::string>* chief,
                                 std::vector<std::string>* worker) {
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
        job != "evaluator" && job != "ps_standby") {
      return Invalid("TF_CONFIG cluster has a job '", job,
                     "' that Downpour does not run; the jobs are ps, chief "
                     "and worker (evaluator is ignored)");
    }
  }
  DP_ASSIGN_OR_RETURN(spec->ps, TfConfigJob(cluster, "ps"));
  DP_ASSIGN_OR_RETURN(spec->ps_standby, TfConfigJob(cluster, "ps_standby"));
  if (!spec->ps_standby.empty() && spec->ps_standby.size() != spec->ps.size()) {
    return Invalid("TF_CONFIG cluster.ps_standby has ",
                   absl::StrCat(spec->ps_standby.size(), " entries but cluster.ps has ",
                                spec->ps.size(), "; a job has one standby per shard"));
  }
  DP_ASSIGN_OR_RETURN(*chief, TfConfigJob(cluster, "chief"));
  DP_ASSIGN_OR_RETURN(*worker, TfConfigJob(cluster, "worker"));
  if (spec->ps.empty()) {
    return Invalid(
        "TF_CONFIG cluster.ps is missing or empty; Downpour needs at least "
        "one parameter server");
  }
  if (chief->size() > 1) {
    return Invalid("TF_CONFIG cluster.chief has ", absl::StrCat(chief->size()),
                   " entries; a job has at most one chief");
  }
  if (chief->empty() && worker->empty()) {
    return Invalid(
        "TF_CONFIG cluster has neither chief nor worker entries; Downpour "
        "needs at least one worker");
  }
  spec->workers = *chief;
  spec->workers.insert(spec->workers.end(), worker->begin(), worker->end());
  return absl::OkStatus();
}

// TF_CONFIG's "task": its type, and its index (clamped to kMaxTasks when
// huge) with the index's JSON text for errors.
struct TfConfigTask {
  std::string type;
  int64_t index = 0;
  std::string index_text;
};

absl::StatusOr<TfConfigTask> ReadTfConfigTask(const nlohmann::json& root) {
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
  TfConfigTask task;
  task.type = type_it->get<std::string>();
  auto index_it = task_it->find("index");
  if (index_it == task_it->end()) {
    return Invalid("TF_CONFIG task.index is missing");
  }
  if (!index_it->is_number_integer()) {
    return Invalid("TF_CONFIG task.index must be an integer, got ",
                   index_it->type_name());
  }
  if (index_it->is_number_unsigned()) {
    uint64_t u = index_it->get<uint64_t>();
    task.index = u > static_cast<uint64_t>(kMaxTasks) ? kMaxTasks : u;
  } else {
    task.index = index_it->get<int64_t>();
  }
  task.index_text = index_it->dump();
  return task;
}

// Sets spec->task_type / task_index from the task, checking its index
// against the cluster's lists.
absl::Status AssignTfConfigTask(const TfConfigTask& task,
                                const std::vector<std::string>& chief,
                                const std::vector<std::string>& worker,
                                ClusterSpec* spec) {
  const std::string& type = task.type;
  const int64_t index = task.index;
  auto out_of_range = [&](const char* job, size_t n) {
    if (n == 0) {
      return Invalid("TF_CONFIG task.index ", task.index_text,
                     " is out of range: ", "cluster.", job,
                     " is missing or empty");
    }
    return Invalid("TF_CONFIG task.index ", task.index_text,
                   " is out of range: ",
                   absl::StrCat("cluster.", job, " has ", n,
                                " entries (valid 0..", n - 1, ")"));
  };
  if (type == "ps") {
    if (index < 0 || index >= static_cast<int64_t>(spec->ps.size())) {
      return out_of_range("ps", spec->ps.size());
    }
    spec->task_type = TaskType::kPs;
    spec->task_index = static_cast<int>(index);
  } else if (type == "ps_standby") {
    if (index < 0 || index >= static_cast<int64_t>(spec->ps_standby.size())) {
      return out_of_range("ps_standby", spec->ps_standby.size());
    }
    spec->task_type = TaskType::kPs;
    spec->standby = true;
    spec->task_index = static_cast<int>(index);
  } else if (type == "chief") {
    if (chief.empty()) {
      return Invalid(
          "TF_CONFIG task.type is 'chief' but cluster.chief is missing or "
          "empty");
    }
    if (index != 0) {
      return Invalid("TF_CONFIG task.index ", task.index_text,
                     " is out of range for the chief: it must be 0");
    }
    spec->task_type = TaskType::kWorker;
    spec->task_index = 0;
  } else if (type == "worker") {
    if (index < 0 || index >= static_cast<int64_t>(worker.size())) {
      return out_of_range("worker", worker.size());
    }
    spec->task_type = TaskType::kWorker;
    spec->task_index = static_cast<int>(index) + (chief.empty() ? 0 : 1);
  } else if (type == "evaluator") {
    return Invalid(
        "TF_CONFIG task.type 'evaluator' is not supported: Downpour has no "
        "evaluator role (the chief, worker 0, evaluates at the end); drop "
        "the Evaluator replicas");
  } else {
    return Invalid("TF_CONFIG task.type '", type,
                   "' is unknown; expected ps, worker or chief");
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> FromTfConfigJson(const nlohmann::json& root) {
  if (!root.is_object()) {
    return Invalid("TF_CONFIG must be a JSON object, got ", root.type_name());
  }
  ClusterSpec spec;
  spec.source = "TF_CONFIG";
  std::vector<std::string> chief, worker;
  DP_RETURN_IF_ERROR(ReadTfConfigCluster(root, &spec, &chief, &worker));
  DP_ASSIGN_OR_RETURN(TfConfigTask task, ReadTfConfigTask(root));
  DP_RETURN_IF_ERROR(AssignTfConfigTask(task, chief, worker, &spec));
  DP_RETURN_IF_ERROR(ValidateClusterSpec(spec));
  return spec;
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
      task_type == TaskType::kPs ? (standby ? ps_standby : ps) : workers;
  if (task_index < 0 || task_index >= static_cast<int>(list.size())) {
    return *kNone;
  }
  return list[task_index];
}

std::string ClusterSpecToString(const ClusterSpec& spec) {
  return absl::StrCat("cluster spec from ", spec.source, ": this task is ",
                      spec.standby ? "ps_standby"
                                   : TaskTypeName(spec.task_type),
                      " ", spec.task_index,
                      spec.IsChief() ? " (chief)" : "", " at ",
                      spec.SelfAddress(), "; ", spec.ps.size(), " ps ",
                      JoinHosts(spec.ps), ", ", spec.workers.size(),
                      " workers ", JoinHosts(spec.workers),
                      spec.ps_standby.empty()
                          ? std::string()
                          : absl::StrCat(", standbys ",
                                         JoinHosts(spec.ps_standby)));
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
  if (spec.standby && spec.ps_standby.size() != spec.ps.size()) {
    return Invalid(src, ": a ps_standby task needs one standby address per "
                        "shard (", absl::StrCat(spec.ps_standby.size(), " for ",
                                                spec.ps.size(), " shards)"));
  }
  for (int role = 0; role < 3; ++role) {
    const std::vector<std::string>& list =
        role == 0 ? spec.ps : role == 1 ? spec.workers : spec.ps_standby;
    const char* name = role == 0 ? "ps" : role == 1 ? "worker" : "ps_standby";
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

absl::StatusOr<std::optional<ClusterSpec>> ResolveClusterSpec(
    const ClusterSpecInputs& inputs, const EnvLookup& env) {
  const bool have_workers =
      !absl::StripAsciiWhitespace(inputs.worker_hosts).empty();
  const bool have_ps = !absl::StripAsciiWhitespace(inputs.ps_hosts).empty();
  if (have_workers) {
    const bool standby = inputs.task_type == "ps_standby";
    std::vector<std::string> standbys;
    if (!absl::StripAsciiWhitespace(inputs.ps_standby_hosts).empty()) {
      DP_ASSIGN_OR_RETURN(standbys, ParseHostList(inputs.ps_standby_hosts,
                                                  "--ps_standby_hosts"));
    } else if (standby) {
      return Invalid("--task_type=ps_standby needs --ps_standby_hosts");
    }
    DP_ASSIGN_OR_RETURN(
        ClusterSpec spec,
        FromFlags(inputs.ps_hosts, inputs.worker_hosts,
                  standby ? "ps" : inputs.task_type, inputs.task_index));
    if (!standbys.empty() && standbys.size() != spec.ps.size()) {
      return Invalid("--ps_standby_hosts has ",
                     absl::StrCat(standbys.size(), " entries but --ps_hosts has ",
                                  spec.ps.size(), "; one standby per shard"));
    }
    spec.ps_standby = std::move(standbys);
    spec.standby = standby;
    DP_RETURN_IF_ERROR(ValidateClusterSpec(spec));
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

absl::StatusOr<std::vector<std::string>> ResolveStandbyHosts(
    const ClusterSpecInputs& inputs, const std::optional<ClusterSpec>& spec,
    int num_shards) {
  std::vector<std::string> hosts;
  if (spec.has_value()) {
    hosts = spec->ps_standby;
  } else if (!absl::StripAsciiWhitespace(inputs.ps_standby_hosts).empty()) {
    DP_ASSIGN_OR_RETURN(hosts, ParseHostList(inputs.ps_standby_hosts,
                                             "--ps_standby_hosts"));
  }
  if (!hosts.empty() && static_cast<int>(hosts.size()) != num_shards) {
    return Invalid("--ps_standby_hosts has ",
                   absl::StrCat(hosts.size(), " entries for ", num_shards,
                                " shards; one standby per shard"));
  }
  return hosts;
}

}  // namespace downpour
