#include "tests/bench/security_cost.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

}  // namespace

std::vector<SecuritySetting> SecuritySettings(const std::string& certs_dir) {
  TransportSecurityOptions tls;
  tls.mode = TransportSecurityOptions::Mode::kTls;
  tls.tls_cert_file = certs_dir + "/server.pem";
  tls.tls_key_file = certs_dir + "/server.key";
  tls.tls_ca_file = certs_dir + "/ca.pem";
  TransportSecurityOptions token;
  token.auth_token_file = certs_dir + "/token";
  TransportSecurityOptions both = tls;
  both.auth_token_file = token.auth_token_file;
  return {{"plaintext", TransportSecurityOptions(), {}},
          {"token", token, {}},
          {"mTLS", tls, {}},
          {"mTLS + token", both, {}}};
}

absl::StatusOr<std::vector<SecuritySetting>> RunSecurityCost(
    const std::string& certs_dir, int trials,
    const std::function<absl::StatusOr<double>(const TransportSecurityOptions&)>& cell) {
  std::vector<SecuritySetting> settings = SecuritySettings(certs_dir);
  for (int t = 0; t < trials; ++t) {
    for (SecuritySetting& s : settings) {
      absl::StatusOr<double> bytes_per_second = cell(s.options);
      if (!bytes_per_second.ok()) {
        return absl::Status(bytes_per_second.status().code(),
                            absl::StrCat(s.name, ": ", bytes_per_second.status().message()));
      }
      s.trials.push_back(*bytes_per_second);
    }
  }
  return settings;
}

std::string SecurityCostTable(const std::vector<SecuritySetting>& settings) {
  std::string out =
      "| setting | best GB/s | median GB/s | best vs plaintext |\n|---|---|---|---|\n";
  const double base = settings.empty() ? 0 : Best(settings[0].trials);
  for (const SecuritySetting& s : settings) {
    absl::StrAppendFormat(&out, "| %s | %.2f | %.2f | %.2f |\n", s.name,
                          Best(s.trials) / 1e9, Median(s.trials) / 1e9,
                          base > 0 ? Best(s.trials) / base : 0);
  }
  return out;
}

}  // namespace downpour
