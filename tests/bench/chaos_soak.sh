#!/bin/bash
# Chaos soak. Runs `launch --max_restarts` (2 shards, 2
# async workers, Fashion-MNIST) and, for about SOAK_S seconds, SIGKILLs a
# random server or worker every 10-20 s. The job must complete (exit 0).
# Prints each kill, its recovery time (kill -> the shard listening again from
# its snapshot, or the restarted worker's first progress line), the updates a
# killed shard lost (seconds since its last snapshot, and that times the
# shard's update rate, in shard steps = sum of its chunk versions), and the
# final accuracy. Not a CI test (about 2.5 minutes).
# STANDBY=1: `launch --standby`; the soak then SIGKILLs a random shard's
# primary or standby process (whichever of `ps k` / `standby k` is named)
# and no worker, and at the end compares, per shard, the pushes the workers
# had acknowledged (their DONE lines) with the most pushes_applied of its
# two processes' final stats: the difference is the acknowledged updates
# lost (recovery: kill -> the killed process listening again as standby).
#
#   bazel build //deploy:launch && bash tests/bench/chaos_soak.sh
#   SOAK_S=120 SEED=1 bash tests/bench/chaos_soak.sh
#   EPOCHS=15 EXAMPLES=60000: the job (it must outlast SOAK_S)
#   STANDBY=1 SOAK_S=120 bash tests/bench/chaos_soak.sh
set -u
STANDBY=${STANDBY:-0}
STANDBY_ARGS=()
[ "$STANDBY" = 1 ] && STANDBY_ARGS=(--standby)
cd "$(dirname "$0")/../.."
LAUNCH=${LAUNCH:-bazel-bin/deploy/launch}
SOAK_S=${SOAK_S:-120}
SEED=${SEED:-$$}
EVERY_S=${CHECKPOINT_EVERY_S:-2}
LOG_DIR=$(mktemp -d /tmp/chaos_soak.XXXXXX)
OUT=$LOG_DIR/launch.out  # Every launch line, prefixed with its arrival time.
RANDOM=$SEED
[ -x "$LAUNCH" ] || { echo "build it first: bazel build //deploy:launch"; exit 2; }

# The job must outlast the soak: with the oneDNN backend 2 workers train
# about 6,000 examples/s here, so 15 epochs of 60,000 take about 150 s.
"$LAUNCH" --servers=2 --workers=2 --mode=async --epochs="${EPOCHS:-15}" \
  --max_train_examples="${EXAMPLES:-60000}" --max_restarts=20 \
  --checkpoint_every_s="$EVERY_S" --log_dir="$LOG_DIR/logs" \
  --worker_args="--log_every=10" "${STANDBY_ARGS[@]}" 2>&1 |
  perl -MTime::HiRes=time -ne '$|=1; printf "%.3f %s", time, $_' > "$OUT" &
PIPE_PID=$!
sleep 1
LPID=$(pgrep -P $$ -x launch)  # The pipeline's launch, a child of this shell.
[ -n "$LPID" ] || { echo "chaos: launch did not start"; exit 1; }
echo "chaos: launch pid $LPID, logs in $LOG_DIR, seed $SEED"

now() { perl -MTime::HiRes=time -e 'printf "%.3f", time'; }
kills=()  # "time kind index"
start=$(now)
sleep 12
while :; do
  t=$(now)
  awk -v t="$t" -v s="$start" -v d="$SOAK_S" 'BEGIN{exit !(t - s < d)}' || break
  grep -q "launch: training done" "$OUT" && break
  if (( RANDOM % 2 )); then kind=ps; else kind=worker; fi
  [ "$STANDBY" = 1 ] && { kind=ps; (( RANDOM % 2 )) && kind=standby; }
  idx=$(( RANDOM % 2 ))
  if [ $kind = ps ] || [ $kind = standby ]; then
    pid=$(pgrep -P "$LPID" -f "port_file=$LOG_DIR/logs/${kind}_$idx.port")
  else
    pid=$(pgrep -P "$LPID" -f "worker_index=$idx --num_workers=2 --task=train")
  fi
  if [ -n "$pid" ]; then
    kill -KILL "$pid" && kills+=("$(now) $kind $idx")
    echo "chaos: t=$(awk -v a="$(now)" -v b="$start" 'BEGIN{printf "%.1f", a-b}') s SIGKILL $kind $idx (pid $pid)"
  fi
  sleep $(( 10 + RANDOM % 11 ))
done
echo "chaos: stopped killing; waiting for the job to finish"
wait $PIPE_PID
rc=$(grep -c "^[0-9.]* SUMMARY " "$OUT")

echo
echo "kill  at_s    what      recovery_s  lost_s  lost_shard_steps"
for k in "${kills[@]}"; do
  read -r t kind idx <<<"$k"
  awk -v t="$t" -v s="$start" -v kind="$kind" -v idx="$idx" -v every="$EVERY_S" -v standby="$STANDBY" '
    # Snapshot lines: "<time> ps k: ps_server: shard k: snapshot ... (step N,".
    kind == "ps" && $0 ~ ("ps " idx ": .*snapshot .* written \\(step ") {
      match($0, /step [0-9]+/); st = substr($0, RSTART + 5, RLENGTH - 5) + 0
      if ($1 < t) { pt = lt; ps_ = ls; lt = $1; ls = st }
    }
    kind != "worker" && $1 > t && !rec && $0 ~ ("^[0-9.]* " kind " " idx ": .*listening on") { rec = $1 }
    kind == "worker" && $1 > t && !rec && $0 ~ ("worker " idx ": step ") { rec = $1 }
    END {
      lost_s = "-"; lost = "-"
      # With standbys a kill loses nothing acknowledged: see the
      # per-shard count below.
      if (kind == "ps" && lt != "" && standby != 1) {
        lost_s = sprintf("%.1f", t - lt)
        if (pt != "" && lt > pt) lost = sprintf("%.0f", (ls - ps_) / (lt - pt) * (t - lt))
      }
      printf "kill  %-7.1f %-6s %d  %-10s  %-6s  %s\n", t - s, kind, idx,
             rec ? sprintf("%.2f", rec - t) : "never", lost_s, lost
    }' "$OUT"
done
echo
if [ "$STANDBY" = 1 ]; then
  # Acknowledged pushes (every worker pushes to every shard) against what
  # each shard's processes applied, from their final stats lines.
  awk '
    / DONE \{/ { match($0, /"pushes":[0-9]+/); acked += substr($0, RSTART + 9, RLENGTH - 9) }
    / shard [0-9]+ stopped: \{/ {
      match($0, /"shard":[0-9]+/); k = substr($0, RSTART + 8, RLENGTH - 8)
      match($0, /"pushes_applied":[0-9]+/); a = substr($0, RSTART + 17, RLENGTH - 17) + 0
      if (a > applied[k]) applied[k] = a
    }
    / failed over to / { failovers++ }
    END {
      for (k in applied)
        printf "shard %d: acknowledged pushes %d, applied %d, lost %d\n", k, acked, applied[k], acked - applied[k]
      printf "worker failover lines: %d\n", failovers
    }' "$OUT"
fi
grep -E "restarting|EVAL|test accuracy|promoted" "$OUT" | cut -d' ' -f2- | tail -n 12
grep "^[0-9.]* launch: " "$OUT" | tail -n 3 | cut -d' ' -f2-
if [ "$rc" -ge 1 ]; then
  echo "chaos: job completed (${#kills[@]} kills)"
else
  echo "chaos: FAILED: no SUMMARY; see $OUT"; exit 1
fi
