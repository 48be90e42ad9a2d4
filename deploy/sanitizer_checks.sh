#!/usr/bin/env bash
# The sanitizer and fuzzing stages of the CI run,
# called by deploy/test.sh. Each build has an output user root of its own
# (~/.cache/bazel_<config>; bazel keys the output base inside it by the
# workspace's path, so two clones never share runfiles), and no stage throws
# another's cache away.
#   1. ASan + UBSan (--config=asan, clang-14, which also turns every lock
#      annotation into a compile-time check: -Werror=thread-safety): the
#      whole tree, every test but those named in SANITIZER_ASAN_EXCLUDE
#      (deploy/test.sh runs those plainly). SANITIZER_ASAN_SCOPE=unit runs
#      only the unit tests of common/, rpc/, server/, worker/ and the fuzz
#      seed replays (deploy/test.sh's plain mode, which runs everything
#      plainly too).
#   2. TSan (--config=tsan): the concurrency-heavy tests (store and its
#      policies, call window, trainer, gRPC client, exactly-once, transport,
#      ps_host, standby replication) and the check of the TSan annotations themselves.
#      //third_party/tsan makes Debian's uninstrumented abseil locks and gRPC
#      completion queue visible to TSan and ignores the libc calls of those
#      libraries (docs/testing.md, "Sanitizers"), so a report is a race in our
#      code.
#      Two trainer tests that only train longer (one worker learning; the
#      same sync run twice) are left out: 90 s under TSan, no concurrency the
#      other trainer tests lack.
#   3. The libFuzzer targets of fuzz/, FUZZ_SECONDS (default 20) each; each
#      target counts as one test.
# Writes "passed failed skipped" to the file named by $1 and exits non-zero
# when a stage failed. SANITIZER_STAGES selects (default "asan tsan fuzz"):
#   SANITIZER_STAGES=tsan bash deploy/sanitizer_checks.sh /tmp/counts
set -uo pipefail
cd "$(dirname "$0")/.."
counts_file="$1"
stages="${SANITIZER_STAGES:-asan tsan fuzz}"
passed=0; failed=0; skipped=0; rc=0

# Adds the JUnit XML results under $1 to the counts.
count_xml() {
  while IFS= read -r -d '' xml; do
    local cases fails skips
    # A DISABLED_ test (result="suppressed") did not run: not counted.
    cases=$(($(grep -o '<testcase ' "$xml" | wc -l) - \
             $(grep -o 'result="suppressed"' "$xml" | wc -l)))
    fails=$(grep -o '<failure' "$xml" | wc -l)
    skips=$(grep -o 'result="skipped"' "$xml" | wc -l)
    if ((cases == 0)) && grep -q '<error' "$xml"; then cases=1; fails=1; fi
    failed=$((failed + fails)); skipped=$((skipped + skips))
    passed=$((passed + cases - fails - skips))
  done < <(find -L "$1" -name test.xml -print0 2>/dev/null)
}

# run_stage NAME CONFIG [BAZEL FLAGS...] -- TARGETS...: bazel test under
# --config=CONFIG.
run_stage() {
  local name="$1" config="$2"; shift 2
  local flags=()
  while (($#)) && [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  shift
  local root="${HOME}/.cache/bazel_${config}" start=$SECONDS
  local logs
  logs="$(bazel --output_user_root="$root" info --config="$config" bazel-testlogs 2>/dev/null)"
  [[ -n "$logs" ]] && rm -rf "$logs"  # Only this run's results count.
  # --symlink_prefix=/: the workspace's bazel-bin and friends keep pointing
  # at the default build, so the docs' bazel-bin/... paths stay right.
  if ! bazel --output_user_root="$root" test --config="$config" \
      --symlink_prefix=/ "${flags[@]}" -- "$@"; then
    echo "test: the ${name} run (--config=${config}) failed" >&2
    rc=1
  fi
  count_xml "$logs"
  echo "test: ${name} stage took $((SECONDS - start)) s" >&2
}

for stage in $stages; do
  case "$stage" in
    asan)
      if [[ "${SANITIZER_ASAN_SCOPE:-all}" == unit ]]; then
        run_stage "ASan+UBSan" asan -- //common/... //rpc/... //server/... \
          //worker/... //fuzz/...
      else
        excluded=()
        for t in ${SANITIZER_ASAN_EXCLUDE:-}; do excluded+=("-$t"); done
        # --build_tests_only: the benchmarks' own binaries are built by
        # deploy/test.sh's gcc stage, with the compiler they are run with.
        run_stage "ASan+UBSan" asan --build_tests_only -- //common/... \
          //rpc/... //server/... //worker/... //deploy/... //tests/... \
          //proto/... //fuzz/... //tools/... //third_party/... "${excluded[@]}"
      fi
      ;;
    tsan)
      run_stage "TSan" tsan \
        --test_filter=-TrainerTest.SingleWorkerLearnsThroughTheStore:TrainerTest.SyncModeIsBitIdenticalAcrossRuns \
        -- //third_party/tsan:tsan_annotations_test \
        //server:parameter_store_test //server:async_policy_test \
        //server:sync_policy_test //server:ssp_policy_test \
        //server:ps_host_test //server:connection_guard_test \
        //rpc:call_window_test //rpc:fan_out_test \
        //worker:shard_incarnations_test //worker:trainer_test \
        //worker/data:batcher_test //worker/data:readers_test \
        //worker:grpc_ps_client_test //tests:exactly_once_test \
        //tests:transport_test //worker:sandblaster_portions_test \
        //server:replication_test //server:shared_payloads_test \
        //rpc:shared_memory_test
      ;;
    fuzz)
      start=$SECONDS
      # A fixed seed, so that a CI failure can be reproduced (and a CI run is
      # not red by the luck of one draw); FUZZ_SEED=0 draws a new one.
      out="$(FUZZ_SEED="${FUZZ_SEED:-1}" bash fuzz/run_fuzzers.sh \
        "${FUZZ_SECONDS:-20}")" || rc=1
      echo "$out" >&2
      passed=$((passed + $(grep -c '^fuzz: .* OK ' <<<"$out")))
      nfail=$(grep -c '^fuzz: .*FAILED' <<<"$out")
      failed=$((failed + nfail))
      echo "test: fuzz stage took $((SECONDS - start)) s" >&2
      ;;
  esac
done
echo "$passed $failed $skipped" >"$counts_file"
exit $rc
