#!/usr/bin/env bash
# tests/netns/standby_partition_test.sh -- a primary cut off from its standby
# by a network partition stops taking writes; no split brain.
#
#   bash tests/netns/standby_partition_test.sh [ps_server ps_worker]  # as root
#
# 3 emulated hosts (tests/netns/netns_lib.sh): host 1 runs shard 0's primary,
# host 2 its standby, host 3 the (only) worker, from one cluster spec with
# --ps_standby_hosts. Once the worker trains, hosts 1 and 2 lose each other
# (a blackhole route each way; both still reach host 3). Then:
#  * the old primary fences itself ("fenced") and refuses workers: an eval
#    pinned to it (no standby address) fails with "here is fenced";
#  * the standby promotes itself after the lease (not at once: its primary
#    is unreachable, not gone), and the worker fails over to it;
#  * healed, the old primary learns the new epoch, says "deposed" and exits
#    3 (to be started again as the standby);
#  * the job ends by itself (worker and new primary exit 0), and the new
#    primary's pushes_applied equals the worker's steps: every acknowledged
#    push is on it, and none went to the old primary after the cut.
# Namespaces are removed even when the test fails. Prints "SKIP: <reason>"
# and exits 0 where namespaces cannot be made.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/netns_lib.sh"
SRC_SERVER="${1:-bazel-bin/server/ps_server}"
SRC_WORKER="${2:-bazel-bin/worker/ps_worker}"
DATA=/usr/share/datasets/fashion-mnist

if ! netns_available 2>/dev/null; then echo "SKIP: $NETNS_REASON"; exit 0; fi
for b in "$SRC_SERVER" "$SRC_WORKER"; do
  [[ -x "$b" ]] || { echo "FAIL: no binary at $b"; exit 1; }
done
if [[ ! -d "$DATA" ]]; then echo "SKIP: no Fashion-MNIST at $DATA"; exit 0; fi
TMP="$(mktemp -d /tmp/standby_partition.XXXXXX)"
cp "$SRC_SERVER" "$TMP/ps_server" && cp "$SRC_WORKER" "$TMP/ps_worker" ||
  { echo "FAIL: copying binaries"; exit 1; }
FAILS=0
fail() { echo "  FAIL: $*"; FAILS=$((FAILS + 1)); }
# wait_for <file> <text> <seconds>
wait_for() {
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

netns_setup dsp 3 || { echo "FAIL: netns_setup"; exit 1; }
P=198.18.0.1:2222; S=198.18.0.2:2222; W=198.18.0.3:2222
spec=(--ps_hosts=$P --ps_standby_hosts=$S --worker_hosts=$W --allow_insecure)
job=(--mode=async --epochs=6 --max_train_examples=12000)
netns_exec 1 "$TMP/ps_server" "${spec[@]}" "${job[@]}" --task_type=ps --task_index=0 \
  > "$TMP/primary.log" 2>&1 & primary=$!
netns_exec 2 "$TMP/ps_server" "${spec[@]}" "${job[@]}" --task_type=ps_standby --task_index=0 \
  > "$TMP/standby.log" 2>&1 & standby=$!
wait_for "$TMP/standby.log" "caught up" 30 || fail "the standby did not join"
netns_exec 3 "$TMP/ps_worker" "${spec[@]}" "${job[@]}" --task_type=worker --task_index=0 \
  --data_dir="$DATA" --log_every=20 --max_test_examples=500 > "$TMP/worker.log" 2>&1 & worker=$!
wait_for "$TMP/worker.log" "step 40," 60 || fail "the worker did not train"

echo "partition: hosts 1 and 2 lose each other"
cut=$SECONDS
netns_exec 1 ip route add blackhole 198.18.0.2/32
netns_exec 2 ip route add blackhole 198.18.0.1/32
wait_for "$TMP/primary.log" "fenced, refusing workers" 5 || fail "the old primary did not fence itself"
wait_for "$TMP/standby.log" "promoted to primary (epoch 2): no word from the primary" 10 ||
  fail "the standby did not promote itself after the lease"
echo "  fenced and promoted within $((SECONDS - cut)) s"
grep -h "fenced\|promoted" "$TMP/primary.log" "$TMP/standby.log" | sed 's/^/  /'
wait_for "$TMP/worker.log" "failed over to $S" 20 || fail "the worker did not fail over"
# The old primary takes nothing: an eval pinned to it is refused.
netns_exec 3 "$TMP/ps_worker" --task=eval --ps_hosts=$P --allow_insecure \
  --data_dir="$DATA" --max_test_examples=100 --connect_timeout_s=5 \
  --reconnect_timeout_s=2 > "$TMP/pinned.log" 2>&1
rc=$?
if ((rc == 0)); then fail "an eval pinned to the old primary succeeded";
elif ! grep -q "here is fenced" "$TMP/pinned.log"; then
  fail "the pinned eval failed without naming the fence:"; tail -5 "$TMP/pinned.log"
else echo "  pinned eval refused (exit $rc): $(grep -o 'here is fenced[^;]*' "$TMP/pinned.log" | head -1)"; fi

echo "heal"
netns_exec 1 ip route del blackhole 198.18.0.2/32
netns_exec 2 ip route del blackhole 198.18.0.1/32
end=$((SECONDS + 20))
while kill -0 "$primary" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
if kill -0 "$primary" 2>/dev/null; then fail "the old primary is still running after the heal"; kill -9 "$primary"
else wait "$primary"; rc=$?; ((rc == 3)) || fail "the old primary exited $rc, not 3"; fi
grep -q "deposed" "$TMP/primary.log" || fail "the old primary did not say it was deposed"

end=$((SECONDS + 120))
while kill -0 "$worker" 2>/dev/null && ((SECONDS < end)); do sleep 0.5; done
wait "$worker"; rc=$?; ((rc == 0)) || fail "the worker exited $rc"
end=$((SECONDS + 20))
while kill -0 "$standby" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
wait "$standby"; rc=$?; ((rc == 0)) || fail "the new primary exited $rc"
steps=$(grep -o "finished [0-9]* steps" "$TMP/worker.log" | awk '{print $2}')
applied=$(grep -o '"pushes_applied":[0-9]*' "$TMP/standby.log" | tail -1 | cut -d: -f2)
echo "  worker steps ${steps:-?}, new primary pushes_applied ${applied:-?}"
[[ -n "$steps" && "$steps" == "$applied" ]] || fail "acknowledged pushes and pushes_applied differ"
netns_cleanup
if ((FAILS > 0)); then
  for f in "$TMP"/*.log; do echo "--- $f"; tail -n 20 "$f"; done
  echo "FAIL ($FAILS)"; exit 1
fi
rm -rf "$TMP"
echo "PASS"
