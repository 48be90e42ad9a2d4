#!/usr/bin/env bash
# Peak resident memory and push throughput of a
# real ps_server while many clients push large messages at once
# (tests/bench/load_client_main.cc), with the server's default limits and
# with every limit off, each run once, alternating, in one invocation:
#
#   bash tests/bench/load_memory.sh [seconds=20] [clients=64] [mib=60] [rounds=1]
#
# Prints, per configuration, the server's VmHWM (peak resident set, from
# /proc/PID/status) and VmRSS after the load, the pushes applied and their
# goodput, and the ratios against the run without limits. LOAD_CONFIGS
# overrides the configurations: "name:flag,flag;name:flag" (no spaces).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-20}"; clients="${2:-64}"; mib="${3:-60}"; rounds="${4:-1}"
bazel build //server:ps_server //tests/bench:load_client >&2
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
cp bazel-bin/server/ps_server bazel-bin/tests/bench/load_client "$bin/"

configs="${LOAD_CONFIGS:-defaults:;no_limits:--grpc_memory_quota_mb=0,--max_streams_per_connection=0}"

status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

declare -A hwm rss goodput
run_one() {
  local name="$1" flags="$2"
  local port_file="$bin/port.$name"; rm -f "$port_file"
  # shellcheck disable=SC2086
  "$bin/ps_server" --port=0 --port_file="$port_file" --mode=async \
    --num_workers="$clients" ${flags//,/ } 2>"$bin/server.$name.log" &
  local pid=$!
  for _ in $(seq 100); do [[ -s "$port_file" ]] && break; sleep 0.1; done
  local base; base=$(status_kib "$pid" VmRSS)
  local out
  out=$("$bin/load_client" --target="127.0.0.1:$(cat "$port_file")" \
          --clients="$clients" --mib="$mib" --seconds="$seconds" \
          --rpc_timeout_s=120) || true
  local peak now; peak=$(status_kib "$pid" VmHWM); now=$(status_kib "$pid" VmRSS)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local g; g=$(sed -n 's/.*goodput_mib_s=\([0-9.]*\).*/\1/p' <<<"$out")
  hwm[$name]=$(( ${hwm[$name]:-0} > peak ? ${hwm[$name]:-0} : peak ))
  rss[$name]=$now
  goodput[$name]="${goodput[$name]:-} ${g:-0}"
  printf '%-10s flags=%s\n  server: start %d MiB, peak (VmHWM) %d MiB, after %d MiB\n  %s\n' \
    "$name" "${flags:-(defaults)}" $((base >> 10)) $((peak >> 10)) $((now >> 10)) "$out"
}

IFS=';' read -r -a list <<<"$configs"
for ((r = 0; r < rounds; r++)); do
  for c in "${list[@]}"; do run_one "${c%%:*}" "${c#*:}"; done
done
ref="${list[-1]%%:*}"
echo "summary (${clients} clients x ${mib} MiB pushes, ${seconds} s, ${rounds} round(s); against ${ref}):"
for c in "${list[@]}"; do
  n="${c%%:*}"
  g=$(awk '{s=0; for (i=1;i<=NF;i++) s+=$i; print s/NF}' <<<"${goodput[$n]}")
  gr=$(awk '{s=0; for (i=1;i<=NF;i++) s+=$i; print s/NF}' <<<"${goodput[$ref]}")
  awk -v n="$n" -v h="${hwm[$n]}" -v hr="${hwm[$ref]}" -v g="$g" -v gr="$gr" 'BEGIN {
    printf "  %-10s peak %5d MiB (x%.2f)  goodput %7.1f MiB/s (x%.2f)\n",
      n, h / 1024, h / hr, g, (gr > 0 ? g / gr : 0) }'
done
