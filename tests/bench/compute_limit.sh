#!/usr/bin/env bash
# How close the whole job comes to what the machine can compute: in one run,
# one worker's forward + backward alone (compute_bench --device=cpu, oneDNN,
# one thread: the "compute" examples per wall-clock second) and the whole
# job's examples/sec (the launcher's SUMMARY, S servers and W workers on
# this host) in async and in sync, each job interleaved with a compute
# measurement; prints the ratio job / (W x single-core compute), the
# workers' step split, and the test accuracy.
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

# One worker's compute alone, examples per wall-clock second at one thread.
single_core() {
  local line
  line="$("$BENCH" --device=cpu --cpu_backend=onednn --cpu_threads=1 \
    --model="$MODEL" --batch_sizes="$BATCH" --min_seconds=3 2>/dev/null | tail -1)"
  /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["results"][0]["compute_examples_per_sec"])' "$line"
}

echo "compute_limit: model $MODEL, $SERVERS servers, $WORKERS workers, $EPOCHS epochs, batch $BATCH; load: $(uptime | sed 's/.*load average: //')" >&2
rows=()
ratios=()  # "mode ratio" per job, for the medians.
for round in $(seq "$ROUNDS"); do
for mode in $MODES; do
  before="$(single_core)"
  extra=()
  ((TRAIN_EXAMPLES > 0)) && extra+=(--max_train_examples="$TRAIN_EXAMPLES")
  log="$OUT_DIR/$mode.$round.out"
  "$LAUNCH" --servers="$SERVERS" --workers="$WORKERS" --mode="$mode" \
    --epochs="$EPOCHS" --batch_size="$BATCH" --model="$MODEL" \
    --log_dir="$OUT_DIR/logs_$mode.$round" "${extra[@]}" "$@" > "$log" 2>&1 ||
    { tail -20 "$log"; echo "compute_limit: the $mode job failed" >&2; exit 1; }
  after="$(single_core)"
  summary="$(grep '^SUMMARY ' "$log" | tail -1 | cut -d' ' -f2-)"
  job="$(json_field examples_per_sec "$summary")"
  acc="$(json_field test_accuracy "$summary")"
  split="$(grep -o 'time \[[^]]*\]' "$log" | head -1)"
  rows+=("$(/usr/bin/python3 -c '
import sys
mode, before, after, job, w, acc, split = sys.argv[1:8]
core = (float(before) + float(after)) / 2
print("| %s | %.0f | %.0f | %.3f | %.4f | %s |" % (
    mode, core, float(job), float(job) / (int(w) * core), float(acc), split))
' "$mode" "$before" "$after" "$job" "$WORKERS" "$acc" "$split")")
  ratios+=("$mode $(cut -d'|' -f5 <<<"${rows[-1]}")")
done
done
echo
echo "| mode | single-core compute ex/s | job ex/s | job / (W x single-core) | test accuracy | worker 0's step split |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if ((ROUNDS > 1)); then
  echo
  printf '%s\n' "${ratios[@]}" | /usr/bin/python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    mode, r = line.split()
    by.setdefault(mode, []).append(float(r))
for mode, rs in by.items():
    print("%s: median job / (W x single-core) %.3f over %d rounds (%.3f to %.3f)"
          % (mode, statistics.median(rs), len(rs), min(rs), max(rs)))
'
fi
echo
echo "single-core compute: mean of the measurements just before and after each job; logs in $OUT_DIR"
echo "load at the end: $(uptime | sed 's/.*load average: //')"
