#!/bin/bash
# Standby shards, measured (docs/results.md). Starts jobs from one cluster
# spec as separate ps_server / ps_worker processes on loopback (the shape of
# the README train command: 2 shards, 2 async workers, Fashion-MNIST).
#
#   cost: the job with and without a standby per shard, alternating, ROUNDS
#         times each; prints each run's examples/sec (the chief's summary).
#   push: one shard, with and without a standby, alternating ROUNDS times:
#         tests/bench/load_client's push goodput and latency against the
#         primary (CLIENTS clients, MIB MiB pushes, SECONDS each).
#   soak: the job with standbys; for about SOAK_S seconds SIGKILLs a random
#         server process (primary or standby) every 10-20 s and starts it
#         again 1 s later (it rejoins as its shard's standby). The job must
#         complete. Prints each kill, the failover it caused (kill -> the
#         standby's "promoted" line) and, per shard, the updates lost: the
#         workers' acknowledged pushes minus the shard's pushes_applied.
#
#   bazel build //server:ps_server //worker:ps_worker
#   bash tests/bench/standby_bench.sh cost      # ROUNDS=2 EPOCHS=3
#   bazel build -c opt //tests/bench:load_client
#   bash tests/bench/standby_bench.sh push      # ROUNDS=3 CLIENTS=2 MIB=4
#   bash tests/bench/standby_bench.sh soak      # SOAK_S=90 SEED=1 EPOCHS=12
set -u
cd "$(dirname "$0")/../.."
PS=${PS:-bazel-bin/server/ps_server}
WK=${WK:-bazel-bin/worker/ps_worker}
[ -x "$PS" ] && [ -x "$WK" ] || {
  echo "build first: bazel build //server:ps_server //worker:ps_worker"; exit 2; }
WHAT=${1:-cost}
DIR=$(mktemp -d /tmp/standby_bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
now() { perl -MTime::HiRes=time -e 'printf "%.3f", time'; }

# job <name> <standby 0|1> <epochs>: starts the job's processes; sets
# PS_HOSTS, SB_HOSTS and the pid arrays PSP (primary tasks), SBP (standby
# tasks), WKP (workers).
job() {
  local name=$1 sb=$2 epochs=$3 k w
  local ps=() st=() wk=()
  for k in 0 1; do ps+=("127.0.0.1:$(free_port)"); st+=("127.0.0.1:$(free_port)"); done
  for w in 0 1; do wk+=("127.0.0.1:$(free_port)"); done
  PS_HOSTS=$(IFS=,; echo "${ps[*]}"); SB_HOSTS=$(IFS=,; echo "${st[*]}")
  SPEC=(--ps_hosts="$PS_HOSTS" --worker_hosts="$(IFS=,; echo "${wk[*]}")")
  ((sb)) && SPEC+=(--ps_standby_hosts="$SB_HOSTS")
  JOB=(--mode=async --epochs="$epochs")
  PSP=(); SBP=(); WKP=()
  for k in 0 1; do
    "$PS" "${SPEC[@]}" "${JOB[@]}" --task_type=ps --task_index=$k \
      > "$DIR/$name.ps$k.log" 2>&1 & PSP+=($!); pids+=($!)
  done
  if ((sb)); then
    for k in 0 1; do
      "$PS" "${SPEC[@]}" "${JOB[@]}" --task_type=ps_standby --task_index=$k \
        > "$DIR/$name.sb$k.log" 2>&1 & SBP+=($!); pids+=($!)
    done
    for k in 0 1; do  # Both standbys in step before the workers start.
      for _ in $(seq 200); do grep -q "caught up" "$DIR/$name.sb$k.log" && break; sleep 0.05; done
    done
  fi
  for w in 1 0; do
    "$WK" "${SPEC[@]}" "${JOB[@]}" --task_type=worker --task_index=$w --log_every=50 \
      --summary_json="$DIR/$name.summary.json" > "$DIR/$name.w$w.log" 2>&1 &
    WKP[$w]=$!; pids+=($!)
  done
}

eps() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_sec"])' "$1"; }

if [[ "$WHAT" == push ]]; then
  LC=${LC:-bazel-bin/tests/bench/load_client}
  echo "standby push cost: $(date -u), load: $(uptime | sed 's/.*load/load/')"
  for r in $(seq "${ROUNDS:-3}"); do
    for sb in 0 1; do
      p="127.0.0.1:$(free_port)"; s="127.0.0.1:$(free_port)"
      spec=(--ps_hosts="$p" --worker_hosts="127.0.0.1:$(free_port),127.0.0.1:$(free_port),127.0.0.1:$(free_port)")
      ((sb)) && spec+=(--ps_standby_hosts="$s")
      "$PS" "${spec[@]}" --task_type=ps > "$DIR/push.$r.$sb.ps.log" 2>&1 & pids+=($!)
      if ((sb)); then
        "$PS" "${spec[@]}" --task_type=ps_standby > "$DIR/push.$r.$sb.sb.log" 2>&1 & pids+=($!)
        for _ in $(seq 200); do grep -q "caught up" "$DIR/push.$r.$sb.sb.log" && break; sleep 0.05; done
      else
        for _ in $(seq 200); do grep -q "listening on" "$DIR/push.$r.$sb.ps.log" && break; sleep 0.05; done
      fi
      echo "round $r, standby $sb: $("$LC" --target="$p" --clients="${CLIENTS:-2}" \
        --mib="${MIB:-4}" --seconds="${SECONDS_EACH:-5}" 2>&1 | grep '^load:') (load $(cut -d' ' -f1 /proc/loadavg))"
      cleanup; pids=()
    done
  done
  exit 0
fi

if [[ "$WHAT" == cost ]]; then
  echo "standby cost: $(date -u), load: $(uptime | sed 's/.*load/load/')"
  for r in $(seq "${ROUNDS:-2}"); do
    for sb in 0 1; do
      name="r$r.sb$sb"
      job "$name" "$sb" "${EPOCHS:-3}"
      wait "${WKP[0]}"; rc=$?
      wait "${WKP[1]}"
      sleep 1
      echo "round $r, standbys $sb: chief exit $rc, $(eps "$DIR/$name.summary.json") examples/sec (load $(cut -d' ' -f1 /proc/loadavg))"
      cleanup; pids=()
    done
  done
  exit 0
fi

# soak
RANDOM=${SEED:-$$}
SOAK_S=${SOAK_S:-90}
echo "standby soak: $(date -u), seed ${SEED:-$$}, logs in $DIR"
job soak 1 "${EPOCHS:-12}"
# Per shard k, slot 0 is its ps task and slot 1 its ps_standby task.
PID=("${PSP[0]}" "${SBP[0]}" "${PSP[1]}" "${SBP[1]}")
LOG=("$DIR/soak.ps0.log" "$DIR/soak.sb0.log" "$DIR/soak.ps1.log" "$DIR/soak.sb1.log")
TYPE=(ps ps_standby ps ps_standby)
is_primary() { grep -q "promoted to primary\|starting as the primary" "${LOG[$1]}"; }
start=$(now); n=0
while true; do
  sleep $((10 + RANDOM % 11))
  t=$(now)
  [[ $(perl -e "print $t - $start > $SOAK_S ? 1 : 0") == 1 ]] && break
  kill -0 "${WKP[0]}" 2>/dev/null || break
  k=$((RANDOM % 2)); n=$((n + 1))
  # Two kills in three hit the shard's current primary.
  p=$((2 * k)); is_primary $p || p=$((p + 1))
  ((RANDOM % 3 == 0)) && p=$((2 * k + (1 - p % 2)))
  other=$((2 * k + 1 - p % 2))
  role=standby; is_primary $p && role=primary
  kill -9 "${PID[$p]}"; killed=$(now)
  what="shard $k's $role (${TYPE[$p]} task) at +$(perl -e "printf '%.1f', $killed - $start") s"
  if [[ $role == primary ]]; then
    for _ in $(seq 250); do grep -q "promoted to primary" "${LOG[$other]}" && break; sleep 0.02; done
    echo "kill $n: $what; the standby promoted $(perl -e "printf '%.0f', ($(now) - $killed) * 1000") ms later"
  else
    echo "kill $n: $what"
  fi
  sleep 1
  LOG[$p]="$DIR/soak.${TYPE[$p]}$k.$n.log"
  "$PS" "${SPEC[@]}" "${JOB[@]}" --task_type=${TYPE[$p]} --task_index=$k > "${LOG[$p]}" 2>&1 &
  PID[$p]=$!; pids+=($!)
done
rc=0; wait "${WKP[0]}" || rc=$?; wait "${WKP[1]}"
echo "chief exit $rc"
sleep 2
# Acknowledged pushes: the workers' finished steps (one push per shard per
# step in async); applied: the largest pushes_applied any process of the
# shard reported when it stopped.
acked=$(grep -ho "finished [0-9]* steps" "$DIR"/soak.w*.log | awk '{s+=$2} END {print s+0}')
for k in 0 1; do
  applied=$(grep -h "shard $k stopped" "$DIR"/soak.*.log | grep -o '"pushes_applied":[0-9]*' | cut -d: -f2 | sort -n | tail -1)
  echo "shard $k: acknowledged pushes $acked, pushes_applied ${applied:-?}, lost $((acked - ${applied:-0}))"
done
grep -h "failed over" "$DIR"/soak.w*.log | sort | uniq -c | sed 's/^/  /'
