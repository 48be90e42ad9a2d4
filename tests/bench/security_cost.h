// File: tests/bench/security_cost.h
//
// transport_bench's TLS mode (--security_cost): the same goodput cell run
// with plaintext, a bearer token, mutual TLS, and mutual TLS + token,
// trials interleaved so that the machine's drift hits every setting alike,
// printed side by side. The benchmark supplies the cell; this file supplies
// the settings (certificates from deploy/make_certs.sh) and the table.
//
//   auto table = RunSecurityCost(certs_dir, 3, [&](const TransportSecurityOptions& s) {
//     return RunCellWith(s);   // bytes per second, or an error
//   });
//
// Thread-compatible.
#ifndef DOWNPOUR_TESTS_BENCH_SECURITY_COST_H_
#define DOWNPOUR_TESTS_BENCH_SECURITY_COST_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/credentials.h"

namespace downpour {

struct SecuritySetting {
  std::string name;  // "plaintext", "token", "mTLS", "mTLS + token".
  TransportSecurityOptions options;
  std::vector<double> trials;  // Bytes per second.
};

// The four settings over the files in `certs_dir` (make_certs.sh's names).
std::vector<SecuritySetting> SecuritySettings(const std::string& certs_dir);

// Runs `trials` rounds over every setting; a cell's error aborts. Returns the
// settings with their trials.
absl::StatusOr<std::vector<SecuritySetting>> RunSecurityCost(
    const std::string& certs_dir, int trials,
    const std::function<absl::StatusOr<double>(const TransportSecurityOptions&)>& cell);

// A markdown table: best and median GB/s of each setting and its ratio to
// plaintext's best.
std::string SecurityCostTable(const std::vector<SecuritySetting>& settings);

}  // namespace downpour

#endif  // DOWNPOUR_TESTS_BENCH_SECURITY_COST_H_
