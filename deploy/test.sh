#!/usr/bin/env bash
# Runs Downpour's whole test suite on a fresh machine: installs what is
# missing (deploy/setup.sh), builds everything and runs `bazel test //...`,
# builds everything again with clang's thread-safety analysis
# (--config=thread_safety), runs the unit tests under ASan+UBSan, the
# concurrency-heavy tests under TSan and each fuzzer for a bounded time
# (deploy/sanitizer_checks.sh), then prints one
# summary line "N passed, N failed, N skipped" counted from the JUnit XML the
# tests leave (the thread-safety build and each fuzzer count as one test).
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh || exit 1

# DOWNPOUR_CI_SUITE=asan (issue 16): the whole suite runs once, under
# ASan+UBSan (deploy/sanitizer_checks.sh, SANITIZER_ASAN_ALL=1), instead of
# plainly and again partly instrumented; only the tests that cannot run
# instrumented run plainly here (PLAIN_ONLY). Opt-in until its cold time on
# the 2-core machine is shown to fit CI's 30 minutes.
PLAIN_ONLY=(
  //tests:cluster_train_test  # Accuracy band in a fixed time: too slow instrumented.
  //tests:heap_release_test   # glibc heap trimming; sanitizers replace the heap.
)
if [[ "${DOWNPOUR_CI_SUITE:-plain}" == asan ]]; then
  export SANITIZER_ASAN_ALL=1
  logs="$(bazel info bazel-testlogs 2>/dev/null)"
  [[ -n "$logs" ]] && rm -rf "$logs"  # Only this run's results count.
  bazel test "${PLAIN_ONLY[@]}" "$@"
else
  bazel test //... "$@"
fi
rc=$?

# The lock-annotation check: everything again with clang-14 and
# -Werror=thread-safety, in an output base of its own so that neither build
# throws the other's cache away. Package patterns, not //..., so that the gcc
# build's convenience symlinks (bazel-*) are not read as packages.
tsa_ok=1
if ! bazel --output_base="${HOME}/.cache/bazel_thread_safety" build \
    --config=thread_safety //common/... //rpc/... //server/... //worker/... \
    //deploy/... //tests/... //proto/... //fuzz/...; then
  echo "test: the thread-safety build (--config=thread_safety) failed" >&2
  tsa_ok=0
  rc=1
fi

# ASan+UBSan over the unit tests and fuzz seed replays, TSan over the
# concurrency-heavy tests, then each libFuzzer target for a bounded time
# (deploy/sanitizer_checks.sh says what runs and why); their tests are added
# to the counts below.
san_counts="$(mktemp)"
bash deploy/sanitizer_checks.sh "$san_counts" || rc=1

passed=0; failed=0; skipped=0
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
done < <(find -L bazel-testlogs/ -name test.xml -print0 2>/dev/null)

# The thread-safety build counts as one test.
if ((tsa_ok)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi
read -r san_p san_f san_s < "$san_counts" 2>/dev/null || { san_p=0; san_f=1; san_s=0; }
passed=$((passed + san_p)); failed=$((failed + san_f)); skipped=$((skipped + san_s))
rm -f "$san_counts"

if ((rc != 0 && failed == 0)); then
  # The build broke, or a test target failed without a readable result.
  failed=1
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $rc
