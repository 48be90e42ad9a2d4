#!/usr/bin/env bash
# tests/bench/netns_transport_bench.sh -- transport over emulated hosts.
# Not part of the test suite; as root:
#
#   bazel build -c opt //tests/bench:net_exchange_bench //server:ps_server
#   bash tests/bench/netns_transport_bench.sh [net_exchange_bench ps_server]
#
# Two hosts (tests/netns/netns_lib.sh): host 1 runs 2 parameter-server
# shards and a TCP sink, host 2 the client. For each link setting (tbf 1gbit,
# tbf 10gbit, unlimited) in one run: raw TCP with one stream each way at
# once, push+pull goodput (64 MiB model, PushPull rounds; bytes both ways per
# second) for each --calls_in_flight in CALLS, then raw TCP again. Prints one
# table row per setting and goodput / the better TCP trial.
# Environment: RATES ("1gbit 10gbit none"), CALLS ("1 0": 0 = no limit),
# SECONDS_PER_TRIAL (4), MB (64).
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../netns/netns_lib.sh"
BENCH="$(realpath "${1:-bazel-bin/tests/bench/net_exchange_bench}")"
SERVER="$(realpath "${2:-bazel-bin/server/ps_server}")"
RATES="${RATES:-1gbit 10gbit none}"
CALLS="${CALLS:-1 0}"
T="${SECONDS_PER_TRIAL:-4}"
MB="${MB:-64}"
netns_available || { echo "SKIP: $NETNS_REASON"; exit 0; }
TMP="$(mktemp -d /tmp/netns_bench.XXXXXX)"
cp "$BENCH" "$TMP/bench" && cp "$SERVER" "$TMP/ps_server" || exit 1

rate_of() { sed -n 's/.*"bytes_per_sec":\([0-9.]*\).*/\1/p'; }
gbs() { awk -v b="$1" 'BEGIN { printf "%.3f", b / 1e9 }'; }

echo "| link | raw TCP both ways, trial 1 / 2 (GB/s) | push+pull goodput (GB/s) by --calls_in_flight | best goodput / best TCP |"
echo "|---|---|---|---|"
for rate in $RATES; do
  r="$rate"; [[ "$rate" == none ]] && r=""
  netns_setup nb 2 "$r" >/dev/null || { echo "netns_setup failed"; exit 1; }
  A="$(netns_addr 1)"
  for s in 0 1; do
    netns_exec 1 "$TMP/ps_server" --bind="$A" --port=$((2222 + s)) --shard_index=$s \
      --num_shards=2 --num_workers=8 --optimizer=sgd --lr=0.01 --allow_insecure >"$TMP/ps$s.log" 2>&1 &
  done
  netns_exec 1 "$TMP/bench" --bench_mode=tcp_sink --tcp_port=7000 >"$TMP/sink.log" 2>&1 &
  sleep 1
  tcp1=$(netns_exec 2 "$TMP/bench" --bench_mode=tcp --host="$A" --tcp_port=7000 --seconds="$T" | rate_of)
  cells=""; best=0
  for c in $CALLS; do
    g=$(netns_exec 2 "$TMP/bench" --bench_mode=grpc --ps_hosts="$A:2222,$A:2223" \
        --mb="$MB" --seconds="$T" --calls_in_flight="$c" | rate_of)
    g="${g:-0}"
    cells+="$c: $(gbs "$g")  "
    best=$(awk -v a="$best" -v b="$g" 'BEGIN { print (b > a ? b : a) }')
  done
  tcp2=$(netns_exec 2 "$TMP/bench" --bench_mode=tcp --host="$A" --tcp_port=7000 --seconds="$T" | rate_of)
  tcp=$(awk -v a="${tcp1:-0}" -v b="${tcp2:-0}" 'BEGIN { print (b > a ? b : a) }')
  ratio=$(awk -v g="$best" -v t="$tcp" 'BEGIN { printf "%.3f", (t > 0 ? g / t : 0) }')
  echo "| ${rate} | $(gbs "${tcp1:-0}") / $(gbs "${tcp2:-0}") | $cells| **$ratio** |"
  netns_cleanup
done
rm -rf "$TMP"
