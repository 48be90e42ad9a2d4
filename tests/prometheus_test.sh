#!/usr/bin/env bash
# A real Prometheus server (Debian's `prometheus`) scrapes a live secure job
# of 2 servers and 2 workers (launch --secure --metrics_base_port) with the
# shipped deploy/prometheus.yml (ports moved, 1 s interval); its HTTP API
# must then hold push counters of both shards, a latency histogram and the
# step split of both workers.
# Args: <launch binary> <deploy/prometheus.yml>. SKIP without prometheus.
set -euo pipefail
LAUNCH=$1
CONFIG=$2
PY=/usr/bin/python3
command -v prometheus >/dev/null || { echo "SKIP: prometheus not installed (apt-get install prometheus)"; exit 0; }
[[ -x $PY ]] || { echo "SKIP: $PY missing"; exit 0; }
[[ -d /usr/share/datasets/fashion-mnist ]] || { echo "SKIP: no fashion-mnist data"; exit 0; }

TMP=${TEST_TMPDIR:-$(mktemp -d)}
# Five free ports: 4 consecutive for the job's metrics, 1 for Prometheus.
read -r BASE PROM_PORT < <($PY - <<'PYEOF'
import socket, random
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    b = random.randint(20000, 40000)
    if all(free(b + i) for i in range(5)):
        print(b, b + 4); break
PYEOF
)
$PY - "$CONFIG" "$BASE" > "$TMP/prometheus.yml" <<'PYEOF'
import sys
text = open(sys.argv[1]).read().replace("5s", "1s")
for i in range(4):
    text = text.replace("127.0.0.1:%d" % (9400 + i), "127.0.0.1:%d" % (int(sys.argv[2]) + i))
print(text)
PYEOF
grep -q "127.0.0.1:$((BASE + 3))" "$TMP/prometheus.yml" || { echo "FAIL: config not rewritten"; exit 1; }

prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$TMP/prometheus.log" 2>&1 &
PROM_PID=$!
trap 'kill $PROM_PID 2>/dev/null; wait $PROM_PID 2>/dev/null || true' EXIT
API="http://127.0.0.1:$PROM_PORT"
for _ in $(seq 100); do
  $PY -c "import urllib.request; urllib.request.urlopen('$API/-/ready')" 2>/dev/null && break
  sleep 0.2
done
$PY -c "import urllib.request; urllib.request.urlopen('$API/-/ready')" || { cat "$TMP/prometheus.log"; echo "FAIL: prometheus not ready"; exit 1; }

# At least 5 s of training however fast the machine (125 steps per worker,
# each held 40 ms by the testing-only straggler delay): several scrapes of
# every process, each worker's included, before it exits.
"$LAUNCH" --secure --servers=2 --workers=2 --epochs=1 --max_train_examples=16000 \
  --metrics_base_port="$BASE" --log_dir="$TMP/job" \
  --worker_args="--log_every=5 --debug_step_delay_ms=40" \
  > "$TMP/launch.log" 2>&1 || { tail -30 "$TMP/launch.log"; echo "FAIL: launch"; exit 1; }
grep -q "launch: --secure: mutual TLS and a token" "$TMP/launch.log" || { echo "FAIL: not secure"; exit 1; }
sleep 2  # One more scrape round.

# Each query over the last 10 minutes (the job is over; its last samples
# are still in the range). Prints the number of series and their values.
query() {
  $PY - "$API" "$1" <<'PYEOF'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
r = json.load(urllib.request.urlopen(url))
assert r["status"] == "success", r
res = r["data"]["result"]
print(len(res), " ".join("%s=%s" % (",".join("%s:%s" % kv for kv in sorted(x["metric"].items())), x["value"][1]) for x in res))
PYEOF
}
expect() {  # name, query, at least N series, each value > 0
  local out n
  out=$(query "$2")
  n=${out%% *}
  echo "$1: $out"
  if (( n < $3 )); then echo "FAIL: $1: $n series, want >= $3"; exit 1; fi
  if grep -Eq "=(0|NaN)( |$)" <<<"$out"; then echo "FAIL: $1: a zero value"; exit 1; fi
}
expect "applied pushes per shard" 'max by (shard) (max_over_time(downpour_pushes_total{outcome="applied"}[10m]))' 2
expect "pushes per worker" 'max by (worker) (max_over_time(downpour_worker_pushes_total[10m]))' 2
expect "push latency histogram" 'max by (shard) (max_over_time(downpour_rpc_latency_seconds_count[10m]))' 2
expect "latency buckets" 'count(max_over_time(downpour_rpc_latency_seconds_bucket[10m]))' 1
expect "worker compute seconds" 'max by (worker) (max_over_time(downpour_worker_step_seconds_total{phase="compute"}[10m]))' 2
expect "worker push seconds" 'max by (worker) (max_over_time(downpour_worker_step_seconds_total{phase="push"}[10m]))' 2
expect "worker examples" 'max by (worker) (max_over_time(downpour_worker_examples_total[10m]))' 2
expect "step split phases" 'count by (phase) (max_over_time(downpour_worker_step_seconds_total[10m]))' 4
expect "bottleneck verdict" 'max_over_time(downpour_worker_bottleneck[10m]) == 1' 2
echo "PASS"
