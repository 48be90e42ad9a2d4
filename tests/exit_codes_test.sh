#!/usr/bin/env bash
# A newcomer's mistakes, over the real binaries: each fails before any
# training, with a message that says what to fix and the exit code of
# common/exit_codes.h (2: fix the command, never retry; 3: retry).
#
#   * --help exits 0 on launch, ps_server, ps_worker and node;
#   * an unknown flag exits 2 with "did you mean", on every binary and
#     through node; a bad value exits 2;
#   * launch --optimizer=adamw exits 2 before starting a server;
#   * an output path that cannot be written (--save_params, --summary_json,
#     --curve_csv, --log_dir) stops launch at once (exit 2, nothing
#     started); a missing folder for --summary_json is created;
#   * a worker with no server honours --connect_timeout_s, says it is
#     waiting, and exits 3; SIGTERM while it waits ends it within a second,
#     naming the state;
#   * servers listed out of order in --ps_hosts are named as such (exit 2);
#   * a --flagfile that does not exist exits 2; a ps_server whose
#     --checkpoint_dir cannot be written exits 2 before serving; a metrics
#     port or a gRPC port already in use is said in one line (exit 1), with
#     no gRPC or civetweb dump.
#
# Usage: exit_codes_test.sh <launch> <node> <ps_server> <ps_worker>
set -euo pipefail
launch="$(realpath "$1")"
node="$(realpath "$2")"
ps_server="$(realpath "$3")"
ps_worker="$(realpath "$4")"
work="${TEST_TMPDIR:-$(mktemp -d)}/exit_codes"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
# run NAME WANT_RC CMD...: runs CMD, output in $work/NAME.out, checks the code.
run() {
  local name="$1" want="$2" rc=0; shift 2
  "$@" > "$work/$name.out" 2>&1 || rc=$?
  ((rc == want)) || { cat "$work/$name.out"; fail "$name: exit code $rc, want $want"; }
}
expect() {  # NAME TEXT: the output of NAME says TEXT.
  grep -q -- "$2" "$work/$1.out" || { cat "$work/$1.out"; fail "$1 does not say '$2'"; }
}
spec=(--ps_hosts=127.0.0.1:1 --worker_hosts=127.0.0.1:2 --task_type=worker --task_index=0)

for b in launch node ps_server ps_worker; do
  run "help_$b" 0 "${!b}" --help
  [[ -s "$work/help_$b.out" ]] || fail "$b --help printed nothing"
done
expect help_launch "--servers"
expect help_node "--print_spec"

run typo_launch 2 "$launch" --servrs=2
expect typo_launch "unknown flag --servrs; did you mean --servers?"
run typo_server 2 "$ps_server" --shard_idnex=0
expect typo_server "did you mean --shard_index?"
run typo_worker 2 "$ps_worker" --epoch=3
expect typo_worker "did you mean --epochs?"
run typo_node 2 "$node" "${spec[@]}" --epocs=3
expect typo_node "unknown flag --epocs; did you mean --epochs?"
run bad_value 2 "$launch" --workers=two
expect bad_value "bad value 'two' for --workers"

run adamw 2 "$launch" --optimizer=adamw --log_dir="$work/adamw_logs"
expect adamw "AdamW is --optimizer=adam --weight_decay"
[[ ! -e "$work/adamw_logs/ps_0.log" ]] || fail "--optimizer=adamw started a server"

# /sys takes no new files, even from root.
for flag in save_params summary_json curve_csv; do
  run "out_$flag" 2 "$launch" --"$flag"=/sys/out_test --log_dir="$work/out_$flag"
  expect "out_$flag" "--$flag=/sys/out_test: cannot write in /sys"
  [[ ! -e "$work/out_$flag/ps_0.log" ]] || fail "--$flag: a server was started"
done
run out_log_dir 2 "$launch" --log_dir=/sys/logs_test
expect out_log_dir "--log_dir=/sys/logs_test: cannot create the folder"
run worker_save 2 "$ps_worker" --task=eval --ps_hosts=127.0.0.1:1 \
  --save_params=/sys/m.safetensors
expect worker_save "cannot write in /sys"

# No server: the wait is visible and bounded by --connect_timeout_s.
start=$(date +%s)
run no_server 3 "$ps_worker" --ps_hosts=127.0.0.1:1 --connect_timeout_s=2 \
  --max_train_examples=64
took=$(( $(date +%s) - start ))
((took <= 10)) || fail "--connect_timeout_s=2 took $took s"
expect no_server "waiting for shard 0 at 127.0.0.1:1 (1 s)"
expect no_server "did not answer within 2s (--connect_timeout_s)"

# SIGTERM while waiting: out within a second, saying so.
"$ps_worker" --ps_hosts=127.0.0.1:1 --connect_timeout_s=60 \
  --max_train_examples=64 > "$work/term.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "waiting for shard" "$work/term.out" && break; sleep 0.1; done
grep -q "waiting for shard" "$work/term.out" || { cat "$work/term.out"; fail "no waiting line"; }
t0=$(date +%s%N)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
((ms < 1000)) || fail "SIGTERM while waiting took $ms ms"
((rc == 3)) || { cat "$work/term.out"; fail "SIGTERM while waiting: exit code $rc, want 3"; }
grep -q "stopped by signal 15 while waiting for the servers" "$work/term.out" ||
  { cat "$work/term.out"; fail "the stop does not name the state"; }

# A missing --flagfile; a checkpoint folder that cannot be written.
run flagfile 2 "$launch" --flagfile="$work/no_such.flags"
expect flagfile "--flagfile=$work/no_such.flags: cannot open the file"
run ckpt_dir 2 "$ps_server" --port=0 --num_workers=1 --checkpoint_dir=/sys/ckpt_test
expect ckpt_dir "ps_server: --checkpoint_dir=/sys/ckpt_test cannot be created"
! grep -q "listening on" "$work/ckpt_dir.out" || fail "served without a checkpoint folder"

# Ports in use: one clear line each.
"$ps_server" --port=0 --port_file="$work/busy.port" --num_workers=1 \
  --metrics_port=0 > "$work/busy.out" 2>&1 &
busy=$!
for _ in $(seq 100); do [[ -s "$work/busy.port" ]] && break; sleep 0.1; done
busy_port=$(cat "$work/busy.port")
metrics_port=$(sed -n 's|.*metrics on http://[^:]*:\([0-9]*\)/metrics.*|\1|p' "$work/busy.out")
run metrics_busy 1 "$ps_server" --port=0 --num_workers=1 --metrics_port="$metrics_port"
expect metrics_busy "could not serve metrics on 127.0.0.1:$metrics_port: Address already in use"
! grep -qi "civetserver\|null context" "$work/metrics_busy.out" || fail "civetweb's message shown"
run grpc_busy 1 "$ps_server" --port="$busy_port" --num_workers=1
expect grpc_busy "ps_server: cannot listen on 127.0.0.1:$busy_port: Address already in use"
[[ $(wc -l < "$work/grpc_busy.out") == 1 ]] || { cat "$work/grpc_busy.out"; fail "more than one line for a busy port"; }
kill $busy 2>/dev/null || true; wait $busy 2>/dev/null || true

# Two shards listed in the wrong order.
for k in 0 1; do
  "$ps_server" --port=0 --port_file="$work/ps$k.port" --shard_index=$k \
    --num_shards=2 --num_workers=1 > "$work/ps$k.out" 2>&1 &
  eval "server$k=\$!"
done
trap 'kill $server0 $server1 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [[ -s "$work/ps0.port" && -s "$work/ps1.port" ]] && break; sleep 0.1
done
p0=$(cat "$work/ps0.port"); p1=$(cat "$work/ps1.port")
run order 2 "$ps_worker" --ps_hosts=127.0.0.1:$p1,127.0.0.1:$p0 \
  --max_train_examples=64 --connect_timeout_s=20
expect order "is shard 1 of 2, but --ps_hosts lists it as shard 0 of 2"
kill $server0 $server1 2>/dev/null || true

# A tiny job that succeeds: the summary's missing folder is made, SUMMARY
# says where the model went, the servers' statistics are printed once, and
# the temporary log folder is gone.
data=/usr/share/datasets/fashion-mnist
if [[ -e "$data/train-labels-idx1-ubyte.gz" ]]; then
  mkdir -p "$work/tmp"
  run tiny 0 env TMPDIR="$work/tmp" "$launch" --servers=1 --workers=1 \
    --epochs=1 --max_train_examples=640 --max_test_examples=500 \
    --summary_json="$work/new/folder/s.json" --save_params="$work/m.safetensors"
  [[ -s "$work/new/folder/s.json" ]] || fail "no --summary_json in a new folder"
  expect tiny "\"saved_params\":\"$work/m.safetensors\""
  ! grep -q "SERVER_STATS" "$work/tiny.out" || fail "SERVER_STATS on the console"
  [[ -z "$(ls -A "$work/tmp")" ]] || fail "left $(ls "$work/tmp") in TMPDIR"
else
  echo "note: dataset-fashion-mnist is not installed; the tiny job is skipped"
fi
echo "PASS"
