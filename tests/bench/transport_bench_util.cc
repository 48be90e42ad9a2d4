#include "tests/bench/transport_bench_util.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace downpour {
namespace transport_bench {

Usage GetUsage() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  Usage u;
  u.user_s = r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6;
  u.sys_s = r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6;
  u.minor_faults = r.ru_minflt;
  return u;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  return v[i];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

std::string JoinGBps(const std::vector<double>& bytes_per_second) {
  return absl::StrJoin(bytes_per_second, ", ", [](std::string* out, double b) {
    absl::StrAppendFormat(out, "%.2f", GBps(b));
  });
}

std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "unknown";
  return absl::StrFormat("%.2f %.2f %.2f", load[0], load[1], load[2]);
}

ModelLayout OneTensorLayout(int64_t floats, int shards, int64_t max_chunk_bytes) {
  ModelLayout layout;
  layout.tensors = {{"w", {floats}}};
  layout.num_shards = shards;
  layout.max_chunk_bytes = max_chunk_bytes;
  return layout;
}

OptimizerOptions TinySgd() {
  OptimizerOptions o;
  o.name = "sgd";
  o.learning_rate = 1e-6f;
  return o;
}

}  // namespace transport_bench
}  // namespace downpour
