#!/usr/bin/env bash
# compute_bench --copies: W processes measured at once, their rates summed;
# with --lockstep each step begun together, the time spent waiting for the
# others reported; bad combinations refused with exit status 2.
#   compute_bench_copies_test.sh COMPUTE_BENCH
set -euo pipefail
BENCH="$1"
PY=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # run ARGS...: the JSON line
  "$BENCH" --device=cpu --cpu_threads=1 --batch_sizes=8,16 --warmup_steps=1 \
    "$@" 2>/dev/null | tail -1
}

json="$(run --copies=3 --lockstep --steps=6)"
$PY - "$json" <<'PY' || fail "lockstep JSON: $json"
import json, sys
j = json.loads(sys.argv[1])
assert j["copies"] == 3 and j["lockstep"] is True, j
assert [r["batch_size"] for r in j["results"]] == [8, 16], j
for r in j["results"]:
    per = r["compute_examples_per_sec_per_copy"]
    assert len(per) == 3 and all(x > 0 for x in per), r
    # The rate is the copies' sum; every copy took --steps steps.
    assert abs(r["compute_examples_per_sec"] - sum(per)) < 0.05 * sum(per), r
    assert r["compute_steps"] == 18 and r["steps"] == 18, r
    # Waiting is part of each step's time, never more than all of it.
    assert 0 <= r["lockstep_wait_ms"] < r["compute_ms"], r
PY

# Lockstep puts each copy on a CPU of its own when there are enough.
json="$(run --copies=2 --lockstep --steps=2)"
want=false; (( $(nproc) >= 2 )) && want=true
$PY -c 'import json,sys; assert json.loads(sys.argv[1])["pinned"] is (sys.argv[2] == "true")' "$json" "$want" ||
  fail "2 copies in lockstep on $(nproc) CPUs: $json"
json="$(taskset -c 0 "$BENCH" --device=cpu --cpu_threads=1 --batch_sizes=8 \
  --warmup_steps=1 --copies=2 --lockstep --steps=2 2>/dev/null | tail -1)"
$PY -c 'import json,sys; assert json.loads(sys.argv[1])["pinned"] is False' "$json" ||
  fail "2 copies in lockstep on one CPU: $json"

json="$(run --copies=2 --steps=4)"
$PY - "$json" <<'PY' || fail "copies JSON: $json"
import json, sys
j = json.loads(sys.argv[1])
assert j["copies"] == 2 and j["lockstep"] is False and j["pinned"] is False, j
for r in j["results"]:
    assert r["lockstep_wait_ms"] == 0, r
    assert len(r["compute_examples_per_sec_per_copy"]) == 2, r
PY

# One copy: the JSON has no copies fields, as before.
json="$(run --steps=2)"
$PY -c 'import json,sys; j=json.loads(sys.argv[1]); assert "copies" not in j and "lockstep_wait_ms" not in j["results"][0], j' "$json" ||
  fail "single JSON: $json"

for bad in "--copies=2 --lockstep" "--copies=1 --lockstep --steps=3" \
           "--copies=0" "--copies=65"; do
  rc=0
  # shellcheck disable=SC2086
  err="$("$BENCH" --device=cpu --batch_sizes=8 $bad 2>&1 >/dev/null)" || rc=$?
  [[ $rc == 2 ]] || fail "$bad: exit $rc, want 2 ($err)"
  grep -q -- "--copies\|--lockstep" <<<"$err" || fail "$bad: says '$err'"
done

# A copy that fails (a model that does not exist) stops the others and its
# reason is the run's.
rc=0
err="$("$BENCH" --device=cpu --batch_sizes=8 --copies=2 --lockstep --steps=3 \
  --model=/nonexistent/net.prototxt 2>&1 >/dev/null)" || rc=$?
[[ $rc != 0 ]] || fail "a missing model with copies exited 0"
grep -q "nonexistent" <<<"$err" || fail "a missing model with copies says '$err'"
echo "compute_bench copies: ok"
