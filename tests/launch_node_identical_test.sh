#!/usr/bin/env bash
# The same job started two ways trains identically: a sync job with a fixed
# seed through `launch`, and as separate `node` processes given the same
# command line but for their role (the cluster-spec flags plus the job's
# own: epochs, examples, seed), as the Slurm recipe starts them. The
# learning defaults (optimizer, rate, schedule, augmentation) are the
# servers' and workers' own, so both runs must save byte-identical
# parameters. Then the same sync job over 2 shards with and without
# wait-free backpropagation: byte-identical too.
#
# The node run picks its ports together and starts again on new ones when
# the server lost its port to another program first.
#
# Usage: launch_node_identical_test.sh <launch> <node>
set -euo pipefail
launch="$(realpath "$1")"
node="$(realpath "$2")"
data=/usr/share/datasets/fashion-mnist
if [[ ! -e "$data/train-labels-idx1-ubyte.gz" ]]; then
  echo "SKIP: dataset-fashion-mnist is not installed"
  exit 0
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/identical"
rm -rf "$work"; mkdir -p "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# The job: 1 shard, 2 sync workers, 1 epoch over 1,280 examples, seed 7.
job=(--mode=sync --epochs=1 --max_train_examples=1280 --seed=7)

"$launch" --servers=1 --workers=2 "${job[@]}" --log_dir="$work/launch" \
  --save_params="$work/launch.safetensors" > "$work/launch.out" 2>&1 || {
  echo "FAIL: launch exited $?"; tail -30 "$work/launch.out"; exit 1; }

# Three distinct free ports, held together while they are picked. Another
# program can still take the server's before it binds it: then it says
# "could not listen" and exits, and the run is tried again on new ports.
free_ports() {
  /usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'
}
rc=1
for attempt in 1 2 3; do
  read -r p0 p1 p2 < <(free_ports)
  spec=(--ps_hosts="127.0.0.1:$p0" --worker_hosts="127.0.0.1:$p1,127.0.0.1:$p2")
  common=("${spec[@]}" "${job[@]}" --save_params="$work/node.safetensors"
          --summary_json="$work/node.summary.json")
  pids=()
  "$node" "${common[@]}" --task_type=ps --task_index=0 > "$work/ps0.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do  # Until it listens or exits, at most 10 s.
    grep -q "listening on" "$work/ps0.out" && break
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "${pids[0]}" 2>/dev/null &&
     grep -q "could not listen\|cannot listen" "$work/ps0.out"; then
    echo "attempt $attempt: port $p0 was taken before the server bound it; again"
    wait "${pids[0]}" || true
    continue
  fi
  "$node" "${common[@]}" --task_type=worker --task_index=1 > "$work/w1.out" 2>&1 &
  pids+=($!)
  "$node" "${common[@]}" --task_type=worker --task_index=0 > "$work/w0.out" 2>&1 &
  chief=$!
  pids+=($chief)
  rc=0
  wait "$chief" || rc=$?
  break
done
if ((rc != 0)); then
  echo "FAIL: the chief exited $rc"
  for f in ps0 w0 w1; do echo "--- $f"; tail -20 "$work/$f.out"; done
  exit 1
fi
for p in "${pids[@]}"; do wait "$p" || { echo "FAIL: a node task failed"; exit 1; }; done
pids=()

grep -h 'listening on' "$work/launch/ps_0.log" "$work/ps0.out" || true
if ! cmp "$work/launch.safetensors" "$work/node.safetensors"; then
  echo "FAIL: launch and node saved different parameters"
  grep -h 'listening on\|SUMMARY' "$work/launch.out" "$work/ps0.out" "$work/w0.out"
  exit 1
fi
echo "PASS: launch and node saved identical parameters ($(stat -c %s "$work/node.safetensors") bytes)"

# Wait-free backpropagation (the default) against the plain overlapped
# exchange, over 2 shards: sync mode keeps its exact arithmetic.
for wf in wait_free nowait_free; do
  "$launch" --servers=2 --workers=2 "${job[@]}" --"$wf" \
    --log_dir="$work/$wf" --save_params="$work/$wf.safetensors" \
    > "$work/$wf.out" 2>&1 || {
    echo "FAIL: launch --$wf exited $?"; tail -30 "$work/$wf.out"; exit 1; }
done
if ! cmp "$work/wait_free.safetensors" "$work/nowait_free.safetensors"; then
  echo "FAIL: --wait_free and --nowait_free saved different parameters"
  exit 1
fi
echo "PASS: --wait_free and --nowait_free saved identical parameters"
