#!/usr/bin/env bash
# tests/netns/netns_cluster_test.sh -- a Downpour job across 4 emulated hosts.
#
#   bash tests/netns/netns_cluster_test.sh [node ps_server ps_worker]  # as root
#   (defaults: bazel-bin/deploy/node, bazel-bin/server/ps_server,
#   bazel-bin/worker/ps_worker; copied first, so a rebuild cannot swap them)
#
# 4 hosts (tests/netns/netns_lib.sh: a network namespace each, 198.18.0.I on
# a bridge in a namespace of its own, no route out): hosts 1-2 run the
# parameter servers, hosts 3-4 the workers. Every process is `node` with only
# its own TF_CONFIG (as Kubeflow's TFJob sets it) and the same flags. The job
# trains on a Fashion-MNIST subset and must end by itself: every process
# exits 0 within the time limit, and the chief's summary has a test accuracy
# within the band below.
#   case 1: unlimited links;
#   case 2: every host's link limited to 1 Gbit/s each way (tc tbf).
# Namespaces are removed even when the test fails (netns_lib's trap).
# Prints "SKIP: <reason>" and exits 0 where namespaces cannot be made.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/netns_lib.sh"

SRC_NODE="${1:-bazel-bin/deploy/node}"
SRC_SERVER="${2:-bazel-bin/server/ps_server}"
SRC_WORKER="${3:-bazel-bin/worker/ps_worker}"
DATA=/usr/share/datasets/fashion-mnist
# Band for 2 workers x 2 epochs over 12000 examples, 2000 test examples
# (0.77-0.81 measured on the 2-core dev box; the Slurm run of the same job 0.75-0.82).
MIN_ACC="${MIN_ACC:-0.65}"
TIME_LIMIT_S="${TIME_LIMIT_S:-120}"

if ! netns_available 2>/dev/null; then echo "SKIP: $NETNS_REASON"; exit 0; fi
for b in "$SRC_NODE" "$SRC_SERVER" "$SRC_WORKER"; do
  [[ -x "$b" ]] || { echo "FAIL: no binary at $b"; exit 1; }
done
if [[ ! -d "$DATA" ]]; then echo "SKIP: no Fashion-MNIST at $DATA"; exit 0; fi

TMP="$(mktemp -d /tmp/netns_cluster.XXXXXX)"
# node finds its children at <dir>/../server/ps_server, ../worker/ps_worker.
mkdir -p "$TMP/bin/deploy" "$TMP/bin/server" "$TMP/bin/worker"
cp "$SRC_NODE" "$TMP/bin/deploy/node" && cp "$SRC_SERVER" "$TMP/bin/server/ps_server" &&
  cp "$SRC_WORKER" "$TMP/bin/worker/ps_worker" || { echo "FAIL: copying binaries"; exit 1; }
NODE="$TMP/bin/deploy/node"
FAILS=0
fail() { echo "  FAIL: $*"; FAILS=$((FAILS + 1)); }

tf_config() {  # <type> <index>
  printf '{"cluster":{"ps":["198.18.0.1:2222","198.18.0.2:2222"],"worker":["198.18.0.3:2222","198.18.0.4:2222"]},"task":{"type":"%s","index":%d},"environment":"cloud"}' "$1" "$2"
}

run_case() {  # <name> [rate]
  local name="$1" rate="${2:-}" dir="$TMP/$1" i pids=() roles=() rc
  mkdir -p "$dir"
  echo "case $name: 2 servers + 2 workers on 4 hosts${rate:+, links $rate}"
  netns_setup dpc 4 "$rate" || { fail "$name: netns_setup"; return; }
  local common=(--data_dir="$DATA" --max_train_examples=12000 --epochs=2
                --max_test_examples=2000 --log_every=100 --connect_timeout_s=60
                --allow_insecure --summary_json="$dir/summary.json"
                --save_params="$dir/model.safetensors")
  for i in 1 2 3 4; do
    local type=ps index=$((i - 1))
    ((i > 2)) && { type=worker; index=$((i - 3)); }
    TF_CONFIG="$(tf_config "$type" "$index")" \
      netns_exec "$i" "$NODE" "${common[@]}" >"$dir/$type$index.log" 2>&1 &
    pids+=($!); roles+=("$type$index")
  done
  local deadline=$((SECONDS + TIME_LIMIT_S))
  for i in 0 1 2 3; do
    while kill -0 "${pids[$i]}" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.5
    done
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      fail "$name: ${roles[$i]} still running after ${TIME_LIMIT_S}s (did not exit by itself)"
      continue
    fi
    wait "${pids[$i]}"; rc=$?
    [[ $rc == 0 ]] || fail "$name: ${roles[$i]} exited with status $rc"
  done
  netns_cleanup
  if [[ ! -s "$dir/summary.json" ]]; then
    fail "$name: the chief wrote no summary"
  else
    local acc
    acc=$(sed -n 's/.*"test_accuracy":\([0-9.e-]*\).*/\1/p' "$dir/summary.json")
    echo "  summary: $(cat "$dir/summary.json")"
    awk -v a="$acc" -v m="$MIN_ACC" 'BEGIN { exit !(a >= m && a <= 1) }' ||
      fail "$name: test accuracy $acc is below $MIN_ACC"
  fi
  grep -q "listening on 198.18.0.1:2222" "$dir/ps0.log" ||
    fail "$name: server 0 did not listen on its own entry"
  grep -q "ended the job" "$dir/ps1.log" || fail "$name: server 1 was not told to stop"
  if ((FAILS > 0)); then
    for f in "$dir"/*.log; do echo "--- $f"; tail -n 15 "$f"; done
  fi
}

run_case unlimited
run_case tbf_1gbit 1gbit
# Nothing of ours left behind.
if ip netns list | grep -q "^dpc$$-"; then fail "namespaces left over"; fi
rm -rf "$TMP"
if ((FAILS > 0)); then echo "FAIL ($FAILS)"; exit 1; fi
echo "PASS"
