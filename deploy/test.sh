#!/usr/bin/env bash
# Runs Downpour's whole test suite on a fresh machine (the CI command):
# installs what is missing (deploy/setup.sh), then
#   1. with gcc, the optimized build the launcher runs: the benchmarks' build
#      and the tests that cannot run instrumented (PLAIN_ONLY below);
#   2. through deploy/sanitizer_checks.sh: every other test of the tree once,
#      under ASan+UBSan in a clang-14 build that also checks every lock
#      annotation (-Werror=thread-safety); the concurrency-heavy tests under
#      TSan; each libFuzzer target for a bounded time;
# then prints one summary line "N passed, N failed, N skipped" counted from
# the JUnit XML the tests leave (each fuzzer counts as one test).
#
# DOWNPOUR_CI_SUITE=plain runs the whole suite plainly with gcc instead, and
# only the unit tests and fuzz seed replays under ASan+UBSan (quicker to
# read a failure in).
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh || exit 1

# The tests that run plainly only: an accuracy band in a fixed time (too slow
# instrumented), and glibc's heap trimming (the sanitizers replace the heap).
PLAIN_ONLY=(//tests:cluster_train_test //tests:heap_release_test)

# The house rules (file sizes, layering on bazel's graph, one definition per
# flag, no history tags): one test in the count.
structure_failed=0
bash tests/structure_check.sh || structure_failed=1

start=$SECONDS
plain_logs="$(bazel info bazel-testlogs 2>/dev/null)"
[[ -n "$plain_logs" ]] && rm -rf "$plain_logs"  # Only this run's results count.
if [[ "${DOWNPOUR_CI_SUITE:-asan}" == plain ]]; then
  export SANITIZER_ASAN_SCOPE=unit
  bazel test //... "$@"
else
  export SANITIZER_ASAN_EXCLUDE="${PLAIN_ONLY[*]}"
  # The benchmarks are built here, as they are run (gcc, optimized); the
  # ASan stage builds tests only.
  bazel build //tests/bench/... && bazel test "${PLAIN_ONLY[@]}" "$@"
fi
rc=$?
echo "test: plain (gcc) stage took $((SECONDS - start)) s" >&2

# ASan+UBSan (with the lock analysis), TSan, fuzzing: deploy/sanitizer_checks.sh
# says what runs and why; their tests are added to the counts below.
san_counts="$(mktemp)"
bash deploy/sanitizer_checks.sh "$san_counts" || rc=1

passed=0; failed=0; skipped=0
# The plain stage's results, by the path bazel gives (the bazel-testlogs
# symlink follows whichever output base built last).
while IFS= read -r -d '' xml; do
  # A DISABLED_ test (result="suppressed") did not run: not counted.
  cases=$(($(grep -o '<testcase ' "$xml" | wc -l) - \
           $(grep -o 'result="suppressed"' "$xml" | wc -l)))
  fails=$(grep -o '<failure' "$xml" | wc -l)
  skips=$(grep -o 'result="skipped"' "$xml" | wc -l)
  # A test that crashed before writing cases still counts as one failure.
  if ((cases == 0)) && grep -q '<error' "$xml"; then cases=1; fails=1; fi
  failed=$((failed + fails))
  skipped=$((skipped + skips))
  passed=$((passed + cases - fails - skips))
done < <(find -L "${plain_logs:-/nonexistent}" -name test.xml -print0 2>/dev/null)

read -r san_p san_f san_s < "$san_counts" 2>/dev/null || { san_p=0; san_f=1; san_s=0; }
passed=$((passed + san_p)); failed=$((failed + san_f)); skipped=$((skipped + san_s))
rm -f "$san_counts"

if ((structure_failed)); then failed=$((failed + 1)); rc=1; else passed=$((passed + 1)); fi

if ((rc != 0 && failed == 0)); then
  # The build broke, or a test target failed without a readable result.
  failed=1
fi
echo "test: the whole run took $((SECONDS)) s" >&2
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $rc
