#!/bin/bash
# Sandblaster L-BFGS benchmark (docs/results.md, "Sandblaster L-BFGS"). Not
# a CI test (about 15 minutes on the 2-core development machine).
#
#   bazel build //deploy:launch //server:ps_server //worker:ps_worker
#   bash tests/bench/sandblaster_bench.sh            # every part
#   PARTS="slow" bash tests/bench/sandblaster_bench.sh
#
# Parts (PARTS, space-separated; default all):
#   done   the done-when job: launch --mode=sandblaster, 2 servers, 3
#          workers, Fashion-MNIST, with a test-accuracy curve every 30 s;
#          prints the wall time, SUMMARY and curve.
#   async  the same servers and workers in Downpour async mode, same curve.
#   slow   by hand (launch slows every worker alike): 2 servers, FAST
#          workers and one more slowed by SLOW_MS per compute batch, then
#          the same job without the slow one; prints each job's iterations,
#          seconds per iteration and each worker's portions. FAST=1 keeps
#          the 2 cores here from being shared by more computing workers
#          than there are cores, which the slow one's own compute would
#          otherwise take from the fast ones.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bazel-bin}
PARTS=${PARTS:-"done async slow"}
EPOCHS=${EPOCHS:-16}          # done: about 3 minutes of training here
ASYNC_EPOCHS=${ASYNC_EPOCHS:-6}
SLOW_MS=${SLOW_MS:-90}        # about 3x a compute batch of 125 here: 4x slower
SLOW_EPOCHS=${SLOW_EPOCHS:-3}
FAST=${FAST:-2}               # slow: fast workers beside the slow one
OUT=$(mktemp -d /tmp/sandblaster_bench.XXXXXX)
echo "bench: logs in $OUT; $(date -u); $(uptime)"

curve() { grep -E '^curve: |^SUMMARY ' "$1"; }

if [[ " $PARTS " == *" done "* ]]; then
  start=$(date +%s.%N)
  "$BIN/deploy/launch" --mode=sandblaster --servers=2 --workers=3 \
    --epochs="$EPOCHS" --batch_size=125 --eval_every_s=30 --eval_examples=10000 \
    > "$OUT/done.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "done: exit $rc, wall $(echo "$end - $start" | bc) s"
  curve "$OUT/done.log"
  grep -E 'sandblaster: ' "$OUT/done.log"
fi

if [[ " $PARTS " == *" async "* ]]; then
  start=$(date +%s.%N)
  "$BIN/deploy/launch" --mode=async --servers=2 --workers=3 \
    --epochs="$ASYNC_EPOCHS" --eval_every_s=30 --eval_examples=10000 \
    > "$OUT/async.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "async: exit $rc, wall $(echo "$end - $start" | bc) s"
  curve "$OUT/async.log"
fi

# One job by hand: $1 = name, then one delay (ms) per worker.
by_hand() {
  local name=$1; shift
  local delays=("$@") n=$# hosts="" pids=()
  for s in 0 1; do
    "$BIN/server/ps_server" --port=0 --port_file="$OUT/$name.ps$s.port" \
      --shard_index=$s --num_shards=2 --num_workers="$n" --mode=sandblaster \
      > "$OUT/$name.ps$s.log" 2>&1 &
    pids+=($!)
  done
  for s in 0 1; do
    for _ in $(seq 100); do [ -s "$OUT/$name.ps$s.port" ] && break; sleep 0.1; done
    hosts="$hosts${hosts:+,}127.0.0.1:$(cat "$OUT/$name.ps$s.port")"
  done
  local wpids=()
  for ((w = 0; w < n; w++)); do
    "$BIN/worker/ps_worker" --ps_hosts="$hosts" --worker_index=$w \
      --num_workers="$n" --mode=sandblaster --epochs="$SLOW_EPOCHS" \
      --batch_size=125 --debug_step_delay_ms="${delays[$w]}" \
      > "$OUT/$name.w$w.log" 2>&1 &
    wpids+=($!)
  done
  for p in "${wpids[@]}"; do wait "$p"; done
  for p in "${pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null; done
  # Seconds per iteration: the chief's last iteration line.
  local last
  last=$(grep -E 'iteration [0-9]+, loss' "$OUT/$name.w0.log" | tail -1)
  echo "$name: $last"
  echo "$last" | perl -ne 'print "  seconds per iteration: ", sprintf("%.2f", $2 / $1), "\n" if /iteration (\d+), .*\(([\d.]+) s\)/'
  grep -hE 'sandblaster: ' "$OUT/$name.w0.log"
  for ((w = 0; w < n; w++)); do
    grep -hE 'portions used' "$OUT/$name.w$w.log"
  done
}

if [[ " $PARTS " == *" slow "* ]]; then
  fast=()
  for ((w = 0; w < FAST; w++)); do fast+=(0); done
  by_hand with_slow "${fast[@]}" "$SLOW_MS"
  by_hand without_slow "${fast[@]}"
fi
echo "bench: $(date -u); $(uptime)"
