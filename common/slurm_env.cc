#include "common/slurm_env.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec_internal.h"
#include "common/status_macros.h"

namespace downpour {
namespace {

using cluster_spec_internal::Invalid;
using cluster_spec_internal::IsHostNameChar;
using cluster_spec_internal::kMaxTasks;
using cluster_spec_internal::ParseDigits;

// "lo" or "lo-hi" inside a bracket group -> the numbers as text, appended to
// `values`; a zero-padded lower bound keeps its width (node[08-10]).
absl::Status ExpandRange(absl::string_view r, absl::string_view item,
                         absl::string_view what, int64_t budget,
                         std::vector<std::string>* values) {
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
  if (hi - lo + 1 + static_cast<int64_t>(values->size()) > budget) {
    return Invalid(what, " expands to more than ", absl::StrCat(kMaxTasks),
                   " node names");
  }
  // Slurm keeps the width of a zero-padded lower bound: node[08-10].
  const size_t width = lo_text.size();
  for (int64_t v = lo; v <= hi; ++v) {
    std::string digits = absl::StrCat(v);
    if (digits.size() < width) {
      digits.insert(0, width - digits.size(), '0');
    }
    values->push_back(std::move(digits));
  }
  return absl::OkStatus();
}

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
    DP_RETURN_IF_ERROR(ExpandRange(r, item, what, budget, &values));
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

// A job step as Slurm's variables describe it, checked for consistency.
struct SlurmStep {
  int64_t procid = 0;
  int64_t ntasks = 0;
  std::string ntasks_var;  // The variable `ntasks` came from.
  std::vector<std::string> nodes;
  std::vector<int> tasks_per_node;  // One count per node.
};

absl::Status CheckSlurmFlags(int num_ps, int base_port) {
  if (num_ps < 1) {
    return Invalid("--num_ps=", absl::StrCat(num_ps),
                   " must be at least 1 under Slurm (the first --num_ps ranks "
                   "are the servers)");
  }
  if (base_port < 1 || base_port > 65535) {
    return Invalid("--base_port=", absl::StrCat(base_port),
                   " is not a port in 1..65535");
  }
  return absl::OkStatus();
}

// SLURM_PROCID and the task count.
absl::Status ReadSlurmRank(const EnvLookup& env, SlurmStep* step) {
  auto procid_var = FirstSet(env, {"SLURM_PROCID"});
  if (!procid_var) return Invalid("SLURM_PROCID is not set");
  if (!ParseDigits(procid_var->second, &step->procid)) {
    return Invalid("SLURM_PROCID '", procid_var->second,
                   "' is not a non-negative integer");
  }
  auto ntasks_var = FirstSet(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  if (!ntasks_var) {
    return Invalid(
        "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set; start the "
        "tasks with srun -n N");
  }
  if (!ParseDigits(ntasks_var->second, &step->ntasks) || step->ntasks < 1) {
    return Invalid(ntasks_var->first, " '", ntasks_var->second,
                   "' is not a positive integer");
  }
  step->ntasks_var = ntasks_var->first;
  return absl::OkStatus();
}

// The node list and tasks per node, which must agree with each other and
// with the task count.
absl::Status ReadSlurmNodes(const EnvLookup& env, SlurmStep* step) {
  auto nodelist_var =
      FirstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  if (!nodelist_var) {
    return Invalid("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
  }
  DP_ASSIGN_OR_RETURN(
      step->nodes,
      ExpandSlurmNodeList(nodelist_var->second, nodelist_var->first));
  auto tpn_var =
      FirstSet(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!tpn_var) {
    return Invalid(
        "neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set");
  }
  DP_ASSIGN_OR_RETURN(step->tasks_per_node,
                      ExpandSlurmTasksPerNode(tpn_var->second, tpn_var->first));
  const std::vector<int>& tpn = step->tasks_per_node;
  if (tpn.size() != step->nodes.size()) {
    return Invalid(tpn_var->first, " '", tpn_var->second,
                   absl::StrCat("' describes ", tpn.size(), " nodes but "),
                   nodelist_var->first,
                   absl::StrCat(" '", nodelist_var->second, "' lists ",
                                step->nodes.size()));
  }
  int64_t sum = 0;
  for (int t : tpn) sum += t;
  if (sum != step->ntasks) {
    return Invalid(tpn_var->first, " '", tpn_var->second,
                   absl::StrCat("' sums to ", sum, " tasks but "),
                   step->ntasks_var, absl::StrCat(" is ", step->ntasks));
  }
  return absl::OkStatus();
}

absl::StatusOr<SlurmStep> ReadSlurmStep(const EnvLookup& env, int num_ps) {
  SlurmStep step;
  DP_RETURN_IF_ERROR(ReadSlurmRank(env, &step));
  DP_RETURN_IF_ERROR(ReadSlurmNodes(env, &step));
  if (step.procid >= step.ntasks) {
    return Invalid("SLURM_PROCID ", absl::StrCat(step.procid),
                   " is out of range: ", step.ntasks_var,
                   absl::StrCat(" is ", step.ntasks, " (valid 0..",
                                step.ntasks - 1, ")"));
  }
  if (num_ps >= step.ntasks) {
    return Invalid("--num_ps=", absl::StrCat(num_ps), " leaves no worker: ",
                   step.ntasks_var,
                   absl::StrCat(" is ", step.ntasks,
                                "; start more tasks than --num_ps"));
  }
  return step;
}

// Block placement: every rank's address into spec->ps / spec->workers, and
// where this task (step.procid) lands: its node and offset on that node.
absl::Status PlaceTasks(const SlurmStep& step, int num_ps, int base_port,
                        ClusterSpec* spec, int64_t* self_node,
                        int64_t* self_offset) {
  const std::vector<std::string>& nodes = step.nodes;
  const std::vector<int>& tpn = step.tasks_per_node;
  int64_t rank = 0;
  for (size_t node = 0; node < nodes.size(); ++node) {
    if (base_port + tpn[node] - 1 > 65535) {
      return Invalid("--base_port=", absl::StrCat(base_port), " plus ",
                     absl::StrCat(tpn[node], " tasks on node ", nodes[node],
                                  " runs past port 65535"));
    }
    for (int k = 0; k < tpn[node]; ++k, ++rank) {
      std::string addr = absl::StrCat(nodes[node], ":", base_port + k);
      if (rank == step.procid) {
        *self_node = static_cast<int64_t>(node);
        *self_offset = k;
      }
      if (rank < num_ps) {
        spec->ps.push_back(std::move(addr));
      } else {
        spec->workers.push_back(std::move(addr));
      }
    }
  }
  return absl::OkStatus();
}

// Slurm's own view of this task must match the block placement.
absl::Status CheckSlurmIds(const EnvLookup& env, const SlurmStep& step,
                           int64_t self_node, int64_t self_offset) {
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
                     step.procid, " on node ", self_node, " (",
                     step.nodes[self_node], ") as its task ", self_offset),
        "; launch with srun --distribution=block (the default)");
  }
  return absl::OkStatus();
}

// Splits a nodelist at the commas outside brackets, checking that the
// brackets balance and do not nest.
absl::StatusOr<std::vector<absl::string_view>> SplitNodeList(
    absl::string_view text, absl::string_view what) {
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
  return items;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(
    absl::string_view nodelist, absl::string_view what) {
  absl::string_view text = absl::StripAsciiWhitespace(nodelist);
  if (text.empty()) return Invalid(what, " is empty");
  DP_ASSIGN_OR_RETURN(std::vector<absl::string_view> items,
                      SplitNodeList(text, what));
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
  DP_RETURN_IF_ERROR(CheckSlurmFlags(num_ps, base_port));
  DP_ASSIGN_OR_RETURN(SlurmStep step, ReadSlurmStep(env, num_ps));
  ClusterSpec spec;
  spec.source = "slurm";
  int64_t self_node = -1, self_offset = -1;
  DP_RETURN_IF_ERROR(
      PlaceTasks(step, num_ps, base_port, &spec, &self_node, &self_offset));
  DP_RETURN_IF_ERROR(CheckSlurmIds(env, step, self_node, self_offset));
  if (step.procid < num_ps) {
    spec.task_type = TaskType::kPs;
    spec.task_index = static_cast<int>(step.procid);
  } else {
    spec.task_type = TaskType::kWorker;
    spec.task_index = static_cast<int>(step.procid - num_ps);
  }
  DP_RETURN_IF_ERROR(ValidateClusterSpec(spec));
  return spec;
}

}  // namespace downpour
