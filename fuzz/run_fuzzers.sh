#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with
# --config=fuzz (clang-14, ASan + UBSan, under an output user root of its
# own, ~/.cache/bazel_fuzz) and
# runs each for a bounded time, starting from a copy of its seed corpus
# (fuzz/corpus/<target>/; the checked-in seeds are not modified). Prints one
# line per target: "fuzz: <target> OK|FAILED <executions> execs in <s> s";
# a crash leaves its input as crash-* in $FUZZ_OUT and fails the script.
#   bash fuzz/run_fuzzers.sh [seconds per target, default 25]
# Environment: FUZZ_OUT (default /tmp/downpour_fuzz), FUZZ_TARGETS, FUZZ_JOBS
# (targets run at a time, default the number of cores), FUZZ_SEED
# (libFuzzer's -seed; 0, the default, is a new random seed each run, which is
# what exploration by hand wants; the CI run passes a fixed one so that its
# result can be reproduced, see deploy/sanitizer_checks.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${1:-25}"
out="${FUZZ_OUT:-/tmp/downpour_fuzz}"
targets="${FUZZ_TARGETS:-wire_fuzzer store_fuzzer layout_fuzzer safetensors_fuzzer snapshot_fuzzer data_fuzzer image_data_fuzzer cluster_spec_fuzzer model_spec_fuzzer}"
root="${HOME}/.cache/bazel_fuzz"

if ! bazel --output_user_root="$root" build --config=fuzz --symlink_prefix=/ //fuzz/...; then
  echo "fuzz: build (--config=fuzz) FAILED" >&2
  exit 1
fi
bin="$(bazel --output_user_root="$root" info --config=fuzz bazel-bin 2>/dev/null)/fuzz"
mkdir -p "$out"

# One target's run; its line goes to $out/$t.result.
run_one() {
  local t="$1" corpus="$out/corpus_$1" log="$out/$1.log" rc execs
  rm -rf "$corpus" && mkdir -p "$corpus" && cp fuzz/corpus/"$t"/* "$corpus"/
  # -rss_limit_mb: an input that makes a reader allocate without bound is a
  # finding, not an OOM of the machine.
  "$bin/$t" -max_total_time="$secs" -seed="${FUZZ_SEED:-0}" \
    -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$out/$t-" -print_final_stats=1 "$corpus" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if ((rc == 0)); then
    echo "fuzz: $t OK ${execs:-0} execs in ${secs} s" >"$out/$t.result"
  else
    {
      echo "fuzz: $t FAILED (exit $rc) after ${execs:-?} execs; see $log"
      grep -m5 -E 'ERROR|SUMMARY|runtime error|deadly signal' "$log"
    } >"$out/$t.result"
  fi
}

# Each libFuzzer run is one thread: FUZZ_JOBS targets at a time (default:
# one per core).
jobs="${FUZZ_JOBS:-$(nproc)}"
running=0
for t in $targets; do
  rm -f "$out/$t.result"
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
done
wait
failed=0
for t in $targets; do
  if [[ -f "$out/$t.result" ]]; then
    cat "$out/$t.result"
    grep -q "^fuzz: $t OK " "$out/$t.result" || failed=$((failed + 1))
  else
    echo "fuzz: $t FAILED (no result)"
    failed=$((failed + 1))
  fi
done
exit $((failed > 0))
