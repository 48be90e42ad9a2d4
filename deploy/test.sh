#!/usr/bin/env bash
# Runs Downpour's whole test suite on a fresh machine: installs what is
# missing (deploy/setup.sh), builds everything and runs `bazel test //...`,
# then prints one summary line "N passed, N failed, N skipped" counted from
# the JUnit XML each test leaves in bazel-testlogs/.
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh || exit 1

bazel test //... "$@"
rc=$?

passed=0; failed=0; skipped=0
while IFS= read -r -d '' xml; do
  cases=$(grep -o '<testcase ' "$xml" | wc -l)
  fails=$(grep -o '<failure' "$xml" | wc -l)
  skips=$(grep -o 'result="skipped"' "$xml" | wc -l)
  # A test that crashed before writing cases still counts as one failure.
  if ((cases == 0)) && grep -q '<error' "$xml"; then cases=1; fails=1; fi
  failed=$((failed + fails))
  skipped=$((skipped + skips))
  passed=$((passed + cases - fails - skips))
done < <(find -L bazel-testlogs/ -name test.xml -print0 2>/dev/null)

if ((rc != 0 && failed == 0)); then
  # The build broke, or a test target failed without a readable result.
  failed=1
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $rc
