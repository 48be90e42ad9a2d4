#!/usr/bin/env bash
# How close the whole job comes to what the machine can compute: in one run,
# one worker's forward + backward alone (compute_bench --device=cpu, oneDNN,
# one thread: the "compute" examples per wall-clock second) and the whole
# job's examples/sec (the launcher's SUMMARY, S servers and W workers on
# this host) in async and in sync, each job interleaved with a compute
# measurement; prints the ratio job / (W x single-core compute), the
# workers' step split, and the test accuracy. Beside it, after each job, W
# copies of the same compute run at once (no servers, no exchange): what W
# workers' compute alone gets from the machine's shared caches, memory and
# clocks. The job's ratio to that is what the exchange and the servers
# cost. After each sync job, W copies again, each step begun together
# (compute_bench --copies=W --lockstep): what W sync workers' compute alone
# gets, the barrier's wait for the slowest and all computes at the same
# moments included, with no exchange: sync's own ceiling. During each job, tests/bench/cpu_split.py reads from /proc where the
# CPU goes (the workers' training threads, the servers, the workers' other
# threads, idle) over 10 s of it: the exchange's CPU per training-thread CPU
# second is a figure the machine's changing speed moves less than the
# ratios.
#
#   bash tests/bench/compute_limit.sh                 # the README job, ~3 min
#   MODEL=resnet20 EPOCHS=1 bash tests/bench/compute_limit.sh
#   ROUNDS=3 EPOCHS=1 bash tests/bench/compute_limit.sh   # + medians
#
# Environment (defaults in brackets): MODEL [fashion_cnn] (a built-in name
# or a spec path), SERVERS [2], WORKERS [2], EPOCHS [3], BATCH [64],
# MODES ["async sync"], ROUNDS [1: the modes run this many times over,
# alternated, and the median ratio per mode ends the output; a machine whose
# speed drifts needs it], TRAIN_EXAMPLES [0: all], BIN_DIR [bazel-bin]
# (BIN_DIR/deploy/launch, BIN_DIR/tests/bench/compute_bench, built when
# BIN_DIR is not given), OUT_DIR [a temp folder: the logs]. Extra arguments
# go to every launch.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=${MODEL:-fashion_cnn}
SERVERS=${SERVERS:-2}
WORKERS=${WORKERS:-2}
EPOCHS=${EPOCHS:-3}
BATCH=${BATCH:-64}
MODES=${MODES:-"async sync"}
ROUNDS=${ROUNDS:-1}
TRAIN_EXAMPLES=${TRAIN_EXAMPLES:-0}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/compute_limit.XXXXXX)}
if [[ -z "${BIN_DIR:-}" ]]; then
  bazel build -c opt //deploy:launch //tests/bench:compute_bench >&2
  BIN_DIR=bazel-bin
fi
# launch finds ps_server and ps_worker beside itself; compute_bench is
# copied, so that a rebuild during the run cannot swap it.
mkdir -p "$OUT_DIR/bin"
cp "$BIN_DIR/tests/bench/compute_bench" "$OUT_DIR/bin/"
LAUNCH="$BIN_DIR/deploy/launch"
BENCH="$OUT_DIR/bin/compute_bench"

json_field() {  # json_field FIELD JSON
  /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[2])[sys.argv[1]])' "$1" "$2"
}

# compute_bench at one thread on MODEL and BATCH, with ARGS: its examples
# per wall-clock second (summed over copies with --copies).
compute_rate() {
  local line
  line="$("$BENCH" --device=cpu --cpu_backend=onednn --cpu_threads=1 \
    --model="$MODEL" --batch_sizes="$BATCH" "$@" 2>/dev/null | tail -1)"
  /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["results"][0]["compute_examples_per_sec"])' "$line"
}

# One worker's compute alone, examples per wall-clock second at one thread.
single_core() {
  compute_rate --min_seconds=3
}

# W copies of it, each step begun together, about 3 s of steps (arg: the
# single-core rate): the sum of their examples per wall-clock second.
w_lockstep() {
  local steps
  steps=$(/usr/bin/python3 -c 'import sys; print(max(20, int(3 * float(sys.argv[1]) / int(sys.argv[2]))))' "$1" "$BATCH")
  compute_rate --copies="$WORKERS" --lockstep --steps="$steps"
}

# W of those at once: the sum of their examples per wall-clock second.
w_at_once() {
  local i pids=()
  for i in $(seq "$WORKERS"); do
    single_core > "$OUT_DIR/at_once.$i" & pids+=($!)
  done
  wait "${pids[@]}"
  cat "$OUT_DIR"/at_once.* | /usr/bin/python3 -c 'import sys; print(sum(float(l) for l in sys.stdin))'
  rm -f "$OUT_DIR"/at_once.*
}

echo "compute_limit: model $MODEL, $SERVERS servers, $WORKERS workers, $EPOCHS epochs, batch $BATCH; load: $(uptime | sed 's/.*load average: //')" >&2
rows=()
ratios=()  # "mode ratio ratio_at_once [lockstep_ratio job_vs_lockstep]" per job.
for round in $(seq "$ROUNDS"); do
for mode in $MODES; do
  before="$(single_core)"
  extra=()
  ((TRAIN_EXAMPLES > 0)) && extra+=(--max_train_examples="$TRAIN_EXAMPLES")
  log="$OUT_DIR/$mode.$round.out"
  "$LAUNCH" --servers="$SERVERS" --workers="$WORKERS" --mode="$mode" \
    --epochs="$EPOCHS" --batch_size="$BATCH" --model="$MODEL" \
    --log_dir="$OUT_DIR/logs_$mode.$round" "${extra[@]}" "$@" > "$log" 2>&1 &
  job_pid=$!
  /usr/bin/python3 tests/bench/cpu_split.py --parent="$job_pid" \
    > "$OUT_DIR/cpu.$mode.$round" 2>&1 &
  split_pid=$!
  wait "$job_pid" ||
    { tail -20 "$log"; echo "compute_limit: the $mode job failed" >&2; exit 1; }
  wait "$split_pid" || true
  cpu="$(tail -1 "$OUT_DIR/cpu.$mode.$round")"
  after="$(single_core)"
  at_once="$(w_at_once)"
  lockstep=-
  [[ $mode == sync ]] && lockstep="$(w_lockstep "$after")"
  summary="$(grep '^SUMMARY ' "$log" | tail -1 | cut -d' ' -f2-)"
  job="$(json_field examples_per_sec "$summary")"
  acc="$(json_field test_accuracy "$summary")"
  split="$(grep -o 'time \[[^]]*\]' "$log" | head -1)"
  rows+=("$(/usr/bin/python3 -c '
import sys
mode, before, after, job, w, acc, split, at_once, cpu, lock = sys.argv[1:11]
core = (float(before) + float(after)) / 2
if lock == "-":
    lockstep = "- | -"
else:
    lockstep = "%.0f (%.3f) | %.3f" % (
        float(lock), float(lock) / (int(w) * core), float(job) / float(lock))
print("| %s | %.0f | %.0f | %.3f | %.0f | %.3f | %s | %.4f | %s | %s |" % (
    mode, core, float(job), float(job) / (int(w) * core), float(at_once),
    float(job) / float(at_once), lockstep, float(acc), split, cpu))
' "$mode" "$before" "$after" "$job" "$WORKERS" "$acc" "$split" "$at_once" "$cpu" "$lockstep")")
  lock_ratios=""
  if [[ $lockstep != - ]]; then
    lock_ratios="$(cut -d'|' -f8 <<<"${rows[-1]}" | grep -o '([0-9.]*)' | tr -d '()') $(cut -d'|' -f9 <<<"${rows[-1]}")"
  fi
  ratios+=("$mode $(cut -d'|' -f5 <<<"${rows[-1]}") $(cut -d'|' -f7 <<<"${rows[-1]}") $lock_ratios")
done
done
echo
echo "| mode | single-core compute ex/s | job ex/s | job / (W x single-core) | W at once ex/s | job / W at once | W in lockstep ex/s (/ W x single-core) | job / W in lockstep | test accuracy | worker 0's step split | where the CPU went (10 s of the job) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if ((ROUNDS > 1)); then
  echo
  printf '%s\n' "${ratios[@]}" | /usr/bin/python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    f = [float(x) for x in line.split()[1:]]
    by.setdefault(line.split()[0], []).append(f)
def span(xs):
    return "%.3f (%.3f to %.3f)" % (statistics.median(xs), min(xs), max(xs))
for mode, rs in by.items():
    line = ("%s: median job / (W x single-core) %s over %d rounds; job / W at once %s"
            % (mode, span([r[0] for r in rs]), len(rs), span([r[1] for r in rs])))
    if all(len(r) == 4 for r in rs):
        line += ("; W in lockstep / (W x single-core) %s; job / W in lockstep %s"
                 % (span([r[2] for r in rs]), span([r[3] for r in rs])))
    print(line)
'
fi
echo
echo "single-core compute: mean of the measurements just before and after each job; W at once, then W in lockstep (sync): right after it; logs in $OUT_DIR"
echo "load at the end: $(uptime | sed 's/.*load average: //')"
