# shellcheck shell=bash
# tests/netns/netns_lib.sh -- emulate N hosts on one machine with Linux
# network namespaces.  Source it from bash:
#
#   source tests/netns/netns_lib.sh
#   netns_available || { echo "SKIP: $NETNS_REASON"; exit 0; }
#   netns_setup dp 4 1gbit          # 4 hosts, every link limited to 1 Gbit/s
#   netns_exec 2 ps_server --bind="$(netns_addr 2)" --port=2222 &
#   netns_exec 1 ps_worker --ps_hosts="$(netns_addr 2):2222" ...
#   netns_cleanup                   # also runs from the EXIT/INT/TERM trap
#
# Layout (P = "<prefix><pid of the shell that called netns_setup>", so that
# parallel runs never collide):
#
#   namespace P-br    bridge "br0", no address, no route; a port "vhI" per host
#   namespace P-hI    (I = 1..N) "eth0" = veth peer of P-br's "vhI",
#                     address 198.18.0.I/24, loopback up, NO default route
#
# Only the benchmarking range 198.18.0.0/15 (RFC 2544) is used: never a private
# range, never an outside address.  Nothing is attached to the root namespace:
# the veth pairs are created directly inside their namespaces, so the host's
# own interfaces and routes are untouched and a host can reach only the other
# hosts on the bridge.
#
# Hostnames: each host namespace gets /etc/netns/P-hI/hosts (bind-mounted over
# /etc/hosts by `ip netns exec`) naming every host "hostI" (and localhost), so
# cluster specs may use names as well as addresses.  Set NETNS_HOSTS_FILE=0 to
# skip that.
#
# Rate limit: with a rate ("1gbit", "100mbit", "500kbit", a tc rate), a tbf
# qdisc limits each host's link in BOTH directions: on the host's eth0
# (egress) and on the bridge's port to it (the host's ingress).  burst
# defaults to 10 ms worth of the rate (at least 64 KiB), latency to 20 ms;
# override with NETNS_TBF_BURST / NETNS_TBF_LATENCY.  These kernels have tbf
# and htb but no netem/fq/fq_codel, so there is no delay emulation.
#
# Functions:
#   netns_available        0 when namespaces can be made here; else non-zero
#                          with the reason in $NETNS_REASON (and on stderr)
#   netns_setup PREFIX N [RATE]
#                          makes the hosts; installs `netns_cleanup` as the
#                          EXIT/INT/TERM trap unless NETNS_NO_TRAP=1 (it
#                          replaces the caller's traps for those signals:
#                          set NETNS_NO_TRAP=1 and call netns_cleanup from
#                          your own trap if you have one)
#   netns_exec I CMD...    runs CMD inside host I
#   netns_addr I           prints 198.18.0.I
#   netns_name I           prints the namespace name of host I ("br" = bridge)
#   netns_hostname I       prints "hostI"
#   netns_count            prints N
#   netns_cleanup          kills what still runs inside the namespaces (by
#                          pid, from `ip netns pids`), deletes the namespaces
#                          and /etc/netns entries; idempotent, safe to call
#                          from traps and when setup failed half-way
#
# Needs: root (CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2 (`ip`, `tc`).

NETNS_SUBNET_PREFIX="198.18.0"
NETNS_PREFIX_LEN=24
NETNS_P=""           # "<prefix><pid>" of the current setup, "" when none
NETNS_N=0
NETNS_REASON=""
NETNS_MADE=()        # namespaces created by this shell (for cleanup)
NETNS_MADE_ETC=0     # 1 when netns_setup created /etc/netns itself

_netns_log() { echo "netns: $*" >&2; }

netns_available() {
  NETNS_REASON=""
  if [[ "$(id -u)" != 0 ]]; then
    NETNS_REASON="not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
  elif ! command -v ip >/dev/null 2>&1; then
    NETNS_REASON="'ip' (iproute2) is not installed"
  elif ! command -v tc >/dev/null 2>&1; then
    NETNS_REASON="'tc' (iproute2) is not installed"
  else
    local probe="dpprobe$$-$RANDOM" err
    if ! err=$(ip netns add "$probe" 2>&1); then
      NETNS_REASON="cannot create a network namespace: $err"
    else
      if ! err=$(ip -n "$probe" link add pa type veth peer name pb 2>&1); then
        NETNS_REASON="cannot create a veth pair: $err"
      elif ! err=$(ip -n "$probe" link add pbr type bridge 2>&1); then
        NETNS_REASON="cannot create a bridge: $err"
      fi
      ip netns del "$probe" 2>/dev/null
    fi
  fi
  if [[ -n "$NETNS_REASON" ]]; then
    echo "netns unavailable: $NETNS_REASON" >&2
    return 1
  fi
  return 0
}

netns_name() {
  if [[ "$1" == br ]]; then echo "${NETNS_P}-br"; else echo "${NETNS_P}-h$1"; fi
}
netns_addr() { echo "${NETNS_SUBNET_PREFIX}.$1"; }
netns_hostname() { echo "host$1"; }
netns_count() { echo "$NETNS_N"; }

netns_exec() {
  local i="$1"; shift
  if [[ -z "$NETNS_P" ]]; then _netns_log "netns_exec: no setup"; return 2; fi
  if [[ "$i" != br ]] && ! [[ "$i" =~ ^[0-9]+$ && "$i" -ge 1 && "$i" -le "$NETNS_N" ]]; then
    _netns_log "netns_exec: no host '$i' (1..$NETNS_N)"; return 2
  fi
  ip netns exec "$(netns_name "$i")" "$@"
}

# "1gbit" -> bits per second (tc units: bit, kbit, mbit, gbit, tbit; bps etc.
# are bytes per second).
_netns_rate_bits() {
  local r="${1,,}" num unit
  [[ "$r" =~ ^([0-9]+)([a-z]*)$ ]] || return 1
  num="${BASH_REMATCH[1]}"; unit="${BASH_REMATCH[2]}"
  case "$unit" in
    ""|bit) echo "$num" ;;
    kbit) echo $((num * 1000)) ;;
    mbit) echo $((num * 1000000)) ;;
    gbit) echo $((num * 1000000000)) ;;
    tbit) echo $((num * 1000000000000)) ;;
    bps) echo $((num * 8)) ;;
    kbps) echo $((num * 8000)) ;;
    mbps) echo $((num * 8000000)) ;;
    gbps) echo $((num * 8000000000)) ;;
    *) return 1 ;;
  esac
}

_netns_tbf() {  # <namespace> <dev> <rate>
  local ns="$1" dev="$2" rate="$3" bits burst latency
  bits=$(_netns_rate_bits "$rate") || { _netns_log "bad rate '$rate'"; return 1; }
  burst="${NETNS_TBF_BURST:-}"
  if [[ -z "$burst" ]]; then
    burst=$((bits / 8 / 100))             # 10 ms at the rate
    ((burst < 65536)) && burst=65536      # >= one GSO super-packet
    burst="${burst}b"
  fi
  latency="${NETNS_TBF_LATENCY:-20ms}"
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" \
    burst "$burst" latency "$latency"
}

netns_setup() {
  local prefix="$1" n="$2" rate="${3:-}" i ns br
  if [[ -z "$prefix" || ! "$n" =~ ^[0-9]+$ || "$n" -lt 1 || "$n" -gt 250 ]]; then
    _netns_log "usage: netns_setup <prefix> <N 1..250> [rate]"; return 2
  fi
  if [[ -n "$NETNS_P" ]]; then
    _netns_log "netns_setup: $NETNS_P is still set up; call netns_cleanup first"
    return 2
  fi
  netns_available || return 1
  NETNS_P="${prefix}$$"
  NETNS_N="$n"
  if [[ "${NETNS_NO_TRAP:-0}" != 1 ]]; then
    trap 'netns_cleanup' EXIT
    trap 'netns_cleanup; trap - INT; kill -INT $$' INT
    trap 'netns_cleanup; trap - TERM; kill -TERM $$' TERM
  fi
  br="$(netns_name br)"
  if ip netns list | awk '{print $1}' | grep -qE "^${NETNS_P}-"; then
    _netns_log "namespaces named ${NETNS_P}-* exist already"; NETNS_P=""; return 1
  fi
  {
    ip netns add "$br" && NETNS_MADE+=("$br") &&
    ip -n "$br" link set lo up &&
    ip -n "$br" link add br0 type bridge &&
    # No STP, no forwarding delay: ports forward at once.
    ip -n "$br" link set br0 type bridge stp_state 0 forward_delay 0 &&
    ip -n "$br" link set br0 up
  } || { _netns_log "bridge namespace $br failed"; netns_cleanup; return 1; }
  for ((i = 1; i <= n; i++)); do
    ns="$(netns_name "$i")"
    {
      ip netns add "$ns" && NETNS_MADE+=("$ns") &&
      ip -n "$ns" link set lo up &&
      # Both ends are created directly in their namespaces: nothing ever
      # appears in the root namespace, so names cannot collide there.
      ip link add eth0 netns "$ns" type veth peer name "vh$i" netns "$br" &&
      ip -n "$br" link set "vh$i" master br0 &&
      ip -n "$br" link set "vh$i" up &&
      ip -n "$ns" addr add "$(netns_addr "$i")/${NETNS_PREFIX_LEN}" dev eth0 &&
      ip -n "$ns" link set eth0 up
    } || { _netns_log "host namespace $ns failed"; netns_cleanup; return 1; }
    if [[ -n "$rate" ]]; then
      { _netns_tbf "$ns" eth0 "$rate" && _netns_tbf "$br" "vh$i" "$rate"; } ||
        { _netns_log "tbf rate $rate on host $i failed"; netns_cleanup; return 1; }
    fi
  done
  if [[ "${NETNS_HOSTS_FILE:-1}" == 1 ]]; then
    local hosts="127.0.0.1 localhost"$'\n'
    for ((i = 1; i <= n; i++)); do
      hosts+="$(netns_addr "$i") $(netns_hostname "$i")"$'\n'
    done
    [[ -d /etc/netns ]] || NETNS_MADE_ETC=1
    for ((i = 1; i <= n; i++)); do
      ns="$(netns_name "$i")"
      mkdir -p "/etc/netns/$ns" && printf '%s' "$hosts" >"/etc/netns/$ns/hosts" ||
        { _netns_log "cannot write /etc/netns/$ns/hosts"; netns_cleanup; return 1; }
    done
  fi
  # Wait for the links to come up (veth carrier is immediate; IPv4 needs no DAD).
  for ((i = 1; i <= n; i++)); do
    local tries=0
    until ip -n "$(netns_name "$i")" -br link show eth0 | grep -q 'UP'; do
      ((++tries > 50)) && { _netns_log "eth0 of host $i is not up"; netns_cleanup; return 1; }
      sleep 0.1
    done
  done
  return 0
}

# Kills processes still inside namespace $1 (pids from `ip netns pids`, so
# only processes inside our own namespaces), TERM first then KILL.
_netns_kill_inside() {
  local ns="$1" pids
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [[ -z "${pids// /}" ]] && return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -z "${pids// /}" ]] && return 0
    sleep 0.2
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null
  sleep 0.1
}

netns_cleanup() {
  local ns names=()
  [[ -z "$NETNS_P" && ${#NETNS_MADE[@]} -eq 0 ]] && return 0
  names=("${NETNS_MADE[@]}")
  if [[ -n "$NETNS_P" ]]; then
    # Also anything named like ours that the array missed (e.g. set up in a
    # subshell).
    while read -r ns _; do
      [[ "$ns" == "${NETNS_P}-"* ]] && names+=("$ns")
    done < <(ip netns list 2>/dev/null)
  fi
  for ns in "${names[@]}"; do _netns_kill_inside "$ns"; done
  for ns in "${names[@]}"; do
    # Deleting the namespace removes its veths (their peers go with them)
    # and the bridge.
    ip netns del "$ns" 2>/dev/null
    [[ -n "$ns" && -d "/etc/netns/$ns" ]] && rm -rf -- "/etc/netns/$ns"
  done
  if [[ "$NETNS_MADE_ETC" == 1 ]]; then
    rmdir /etc/netns 2>/dev/null || true   # ours, and only when empty
    NETNS_MADE_ETC=0
  fi
  NETNS_MADE=()
  NETNS_P=""
  NETNS_N=0
  return 0
}
