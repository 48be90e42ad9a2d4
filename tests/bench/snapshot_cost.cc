#include "tests/bench/snapshot_cost.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "server/snapshotter.h"

namespace downpour {
namespace {

double Best(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

// One Snapshotter per shard of the cell's cluster while it runs; collects
// the times each one logs ("... (step S, X MiB): copy C ms, write W ms").
class SnapshotAttachment {
 public:
  SnapshotAttachment(absl::Duration every, int shards, SnapshotCost* cost)
      : every_(every), shards_(shards), cost_(cost) {}

  absl::Status status() const { return status_; }

  void operator()(InProcessCluster* cluster) {
    if (cluster == nullptr) {
      snapshotters_.clear();  // Stops them; a write in progress finishes.
      if (!dir_.empty()) std::filesystem::remove_all(dir_);
      return;
    }
    char tmpl[] = "/tmp/downpour-bench-snapshots-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      status_ = absl::InternalError("mkdtemp failed for the snapshot folder");
      return;
    }
    dir_ = tmpl;
    for (int k = 0; k < shards_; ++k) {
      SnapshotterOptions o;
      o.dir = absl::StrCat(dir_, "/shard", k);
      o.every = every_;
      o.log = [this](const std::string& line) { Record(line); };
      snapshotters_.push_back(std::make_unique<Snapshotter>(o, cluster->store(k)));
    }
  }

 private:
  void Record(const std::string& line) {
    absl::MutexLock l(&mu_);
    const size_t at = line.rfind("MiB): copy ");
    double mib = 0, copy = 0, write = 0;
    const size_t open = line.rfind(", ", at);
    if (at == std::string::npos || open == std::string::npos ||
        std::sscanf(line.c_str() + open, ", %lf MiB): copy %lf ms, write %lf ms",
                    &mib, &copy, &write) != 3) {
      ++cost_->failed;  // "snapshot failed: ..."
      std::fprintf(stderr, "transport_bench: %s\n", line.c_str());
      return;
    }
    cost_->mib.push_back(mib);
    cost_->copy_ms.push_back(copy);
    cost_->write_ms.push_back(write);
  }

  const absl::Duration every_;
  const int shards_;
  SnapshotCost* const cost_;  // Not owned.
  absl::Mutex mu_;
  absl::Status status_;
  std::string dir_;
  std::vector<std::unique_ptr<Snapshotter>> snapshotters_;
};

}  // namespace

absl::StatusOr<SnapshotCost> RunSnapshotCost(absl::Duration every, int shards,
                                             int trials, const SnapshotCell& cell) {
  SnapshotCost cost;
  cost.every = every;
  for (int t = 0; t < trials; ++t) {
    absl::StatusOr<double> off = cell({});
    if (!off.ok()) return off.status();
    cost.off.push_back(*off);
    SnapshotAttachment attach(every, shards, &cost);
    absl::StatusOr<double> on = cell([&attach](InProcessCluster* c) { attach(c); });
    if (!attach.status().ok()) return attach.status();
    if (!on.ok()) return on.status();
    cost.on.push_back(*on);
  }
  return cost;
}

std::string SnapshotCostTable(const SnapshotCost& c) {
  std::string out =
      "| snapshots | best GB/s | median GB/s | best vs off |\n|---|---|---|---|\n";
  const double base = Best(c.off);
  absl::StrAppendFormat(&out, "| off | %.2f | %.2f | 1.00 |\n", base / 1e9,
                        Median(c.off) / 1e9);
  absl::StrAppendFormat(&out, "| every %s | %.2f | %.2f | %.2f |\n",
                        absl::FormatDuration(c.every), Best(c.on) / 1e9,
                        Median(c.on) / 1e9, base > 0 ? Best(c.on) / base : 0);
  absl::StrAppendFormat(
      &out,
      "snapshots: %d written (%.1f MiB each), %d failed; copy %.1f ms mean, "
      "%.1f ms max; write %.1f ms mean, %.1f ms max\n",
      static_cast<int>(c.write_ms.size()), Mean(c.mib), c.failed, Mean(c.copy_ms),
      Best(c.copy_ms), Mean(c.write_ms), Best(c.write_ms));
  return out;
}

}  // namespace downpour
