#!/usr/bin/env bash
# tests/netns/netns_selftest.sh -- checks tests/netns/netns_lib.sh.
#
#   sudo bash tests/netns/netns_selftest.sh
#
# 1. 4 emulated hosts, no rate limit: addresses from 198.18.0.0/15 only, TCP
#    between two hosts (by address and by hostname), no way out of the bridge
#    (no default route; an outside address and the machine's own addresses
#    are unreachable), no tbf; cleanup kills what still runs inside.
# 2. 2 hosts with rate 50mbit: tbf on both ends of every link (tc qdisc
#    show), and a bulk TCP transfer is held to about that rate.
# 3. the trap installed by netns_setup cleans up when the caller is killed
#    (SIGTERM) or exits.
# After each part: no namespace, /etc/netns entry or root-namespace link is
# left over.  Prints "PASS" and exits 0, or "FAIL: ..." and exits 1; prints
# "SKIP: reason" and exits 0 where namespaces cannot be made (e.g. not root).
# Needs only bash, iproute2 and python3 (iperf3 is not used).  Light on CPU: a
# few seconds, one ~1 s transfer at 50 Mbit/s.

set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/netns/netns_lib.sh
source "$HERE/netns_lib.sh"

if ! netns_available 2>/dev/null; then
  echo "SKIP: $NETNS_REASON"
  exit 0
fi

# Debian's python3 when present (works inside any namespace), else PATH's.
PY=/usr/bin/python3
[[ -x "$PY" ]] || PY="$(command -v python3 || true)"
if [[ -z "$PY" ]]; then echo "SKIP: python3 is not installed"; exit 0; fi

TMP="$(mktemp -d /tmp/netns_selftest.XXXXXX)"
FAILS=0
fail() { echo "  FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "  ok: $*"; }
finish() {
  netns_cleanup
  rm -rf -- "$TMP"
}
# Our own trap (netns_setup's is turned off: NETNS_NO_TRAP=1).
export NETNS_NO_TRAP=1
trap finish EXIT
trap 'finish; trap - INT; kill -INT $$' INT
trap 'finish; trap - TERM; kill -TERM $$' TERM

# --- helpers ----------------------------------------------------------------

# echo_server ADDR PORT: accepts one connection, echoes what it reads.
# sink_server ADDR PORT OUT: accepts one connection, reads to EOF, writes
#   "<bytes> <seconds from first byte to EOF>" to OUT.
# client ADDR PORT MODE [BYTES]: MODE echo -> sends a line, prints the reply;
#   MODE bulk -> sends BYTES bytes.  Retries connecting for up to 5 s.
cat >"$TMP/tcp.py" <<'EOF'
import socket, sys, time
mode = sys.argv[1]
def listen(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port))); s.listen(1); s.settimeout(20)
    c, _ = s.accept(); c.settimeout(20)
    return c
def connect(addr, port):
    end = time.time() + 5
    while True:
        try:
            return socket.create_connection((addr, int(port)), timeout=5)
        except OSError:
            if time.time() > end: raise
            time.sleep(0.1)
if mode == "echo_server":
    c = listen(sys.argv[2], sys.argv[3])
    data = b""
    while not data.endswith(b"\n"):
        d = c.recv(4096)
        if not d: break
        data += d
    c.sendall(data); c.close()
elif mode == "sink_server":
    c = listen(sys.argv[2], sys.argv[3])
    n = 0; t0 = None
    while True:
        d = c.recv(1 << 16)
        if not d: break
        if t0 is None: t0 = time.time()
        n += len(d)
    open(sys.argv[4], "w").write("%d %.3f\n" % (n, time.time() - (t0 or time.time())))
elif mode == "client_echo":
    c = connect(sys.argv[2], sys.argv[3])
    c.sendall(b"hello from the other host\n")
    c.shutdown(socket.SHUT_WR)
    print(c.makefile().read().strip())
elif mode == "client_bulk":
    c = connect(sys.argv[2], sys.argv[3])
    buf = b"x" * (1 << 16); left = int(sys.argv[4])
    while left > 0:
        c.sendall(buf[:min(left, len(buf))]); left -= len(buf)
    c.close()
elif mode == "try_connect":
    # Exit 0 when connecting FAILS quickly (unreachable), 1 when it connects.
    try:
        socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=3).close()
        print("connected"); sys.exit(1)
    except OSError as e:
        print(e.strerror or str(e)); sys.exit(0)
EOF

snapshot_root() {  # links and routes of the root namespace, our netns names
  {
    ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
    ip route show
  } 2>/dev/null
}
check_nothing_left() {  # <label> <prefix-with-pid>
  local what="$1" p="$2" left
  left=$(ip netns list | awk '{print $1}' | grep -E "^${p}-" || true)
  [[ -z "$left" ]] && ok "$what: no namespace ${p}-* left" ||
    fail "$what: namespaces left: ${left//$'\n'/ }"
  left=$(ls -d /etc/netns/"${p}"-* 2>/dev/null || true)
  [[ -z "$left" ]] && ok "$what: no /etc/netns/${p}-* left" ||
    fail "$what: /etc/netns entries left: $left"
  [[ "$(snapshot_root)" == "$BASELINE" ]] && ok "$what: root-namespace links and routes unchanged" ||
    fail "$what: root namespace changed: $(diff <(echo "$BASELINE") <(snapshot_root) | tr '\n' ' ')"
}
BASELINE="$(snapshot_root)"

# --- 1. four hosts, no rate limit -------------------------------------------
echo "== 1. four hosts, no rate limit"
if ! netns_setup dpself 4; then
  echo "FAIL: netns_setup dpself 4"; exit 1
fi
P1="$NETNS_P"
[[ "$P1" == "dpself$$" ]] && ok "namespace prefix $P1 includes the pid" || fail "prefix $P1"
n=$(ip netns list | awk '{print $1}' | grep -cE "^${P1}-(br|h[0-9]+)$")
[[ "$n" == 5 ]] && ok "5 namespaces (bridge + 4 hosts)" || fail "expected 5 namespaces, found $n"

for i in 1 2 3 4; do
  addrs=$(netns_exec "$i" ip -4 -o addr show | awk '$2 != "lo" {print $4}')
  [[ "$addrs" == "198.18.0.$i/24" ]] || fail "host $i has addresses '$addrs'"
  netns_exec "$i" ip -o link show lo | grep -q 'UP' || fail "host $i: lo is not up"
  r=$(netns_exec "$i" ip route show default)
  [[ -z "$r" ]] || fail "host $i has a default route: $r"
done
[[ "$(netns_addr 3)" == 198.18.0.3 ]] || fail "netns_addr 3 = $(netns_addr 3)"
ok "hosts 1-4: one address each, 198.18.0.1-4/24, lo up, no default route"
# 198.18.0.0/15 = 198.18.0.0 - 198.19.255.255
bad=$(for ns in $(ip netns list | awk '{print $1}' | grep -E "^${P1}-"); do
        ip -n "$ns" -4 -o addr show | awk '$2 != "lo" {print $4}'; done |
      grep -vE '^198\.1[89]\.' || true)
[[ -z "$bad" ]] && ok "every address is inside 198.18.0.0/15" || fail "addresses outside 198.18.0.0/15: $bad"
braddr=$(netns_exec br ip -4 -o addr show | awk '$2 != "lo"' )
brroutes=$(netns_exec br ip route show)
[[ -z "$braddr" && -z "$brroutes" ]] && ok "bridge namespace: no address, no route" ||
  fail "bridge namespace has addresses/routes: $braddr $brroutes"

# TCP host 1 -> host 3, by address, and host 4 -> host 2 by hostname.
netns_exec 3 "$PY" "$TMP/tcp.py" echo_server "$(netns_addr 3)" 5555 &
srv=$!
reply=$(netns_exec 1 "$PY" "$TMP/tcp.py" client_echo "$(netns_addr 3)" 5555 2>&1)
wait "$srv"
[[ "$reply" == "hello from the other host" ]] && ok "TCP host1 -> 198.18.0.3:5555 echoed" ||
  fail "TCP host1 -> host3: '$reply'"
netns_exec 2 "$PY" "$TMP/tcp.py" echo_server 0.0.0.0 5556 &
srv=$!
reply=$(netns_exec 4 "$PY" "$TMP/tcp.py" client_echo "$(netns_hostname 2)" 5556 2>&1)
wait "$srv"
[[ "$reply" == "hello from the other host" ]] && ok "TCP host4 -> host2:5556 (by name) echoed" ||
  fail "TCP host4 -> host2 by name: '$reply'"

# No way out: an outside address, and the machine's own (root-namespace)
# addresses, are unreachable from a host.
out=$(netns_exec 1 ip route get 1.1.1.1 2>&1) && fail "route to 1.1.1.1 exists: $out" ||
  ok "no route to 1.1.1.1 ($out)"
out=$(netns_exec 1 "$PY" "$TMP/tcp.py" try_connect 1.1.1.1 80 2>&1) &&
  ok "connect to 1.1.1.1:80 fails ($out)" || fail "connect to 1.1.1.1:80: $out"
for a in $(ip -4 -o addr show | awk '$2 != "lo" {sub(/\/.*/, "", $4); print $4}'); do
  out=$(netns_exec 1 "$PY" "$TMP/tcp.py" try_connect "$a" 22 2>&1) &&
    ok "machine's own address $a unreachable ($out)" || fail "host1 reached $a: $out"
done
# 127.0.0.1 inside a host is its own loopback, not the machine's.
[[ "$(netns_exec 1 ip -o link show | wc -l)" == 2 ]] && ok "host 1 sees only lo and eth0" ||
  fail "host 1 links: $(netns_exec 1 ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')"

q=$(netns_exec 1 tc qdisc show dev eth0)
[[ "$q" != *tbf* ]] && ok "no tbf without a rate" || fail "tbf present without a rate: $q"

# A process left running inside a host is killed by netns_cleanup.
netns_exec 2 sleep 300 &
sleeper=$!
sleep 0.3
netns_cleanup
netns_cleanup   # idempotent
for _ in $(seq 20); do kill -0 "$sleeper" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$sleeper" 2>/dev/null; then
  fail "process inside host 2 survived netns_cleanup"; kill "$sleeper" 2>/dev/null
else
  ok "netns_cleanup killed the process left inside host 2"
fi
wait "$sleeper" 2>/dev/null
check_nothing_left "after part 1" "$P1"

# --- 2. rate limit -------------------------------------------------------------
echo "== 2. two hosts, rate 50mbit (tbf)"
if ! netns_setup dpself 2 50mbit; then
  echo "FAIL: netns_setup dpself 2 50mbit"; exit 1
fi
P2="$NETNS_P"
for i in 1 2; do
  q=$(netns_exec "$i" tc qdisc show dev eth0)
  [[ "$q" == *"tbf"*"rate 50Mbit"* ]] && ok "host $i eth0: $q" || fail "host $i eth0 qdisc: $q"
  q=$(netns_exec br tc qdisc show dev "vh$i")
  [[ "$q" == *"tbf"*"rate 50Mbit"* ]] && ok "bridge port vh$i: $q" || fail "bridge port vh$i qdisc: $q"
done
bytes=$((50000000 / 8))   # one second's worth at 50 Mbit/s
netns_exec 2 "$PY" "$TMP/tcp.py" sink_server "$(netns_addr 2)" 5557 "$TMP/sink.out" &
srv=$!
netns_exec 1 "$PY" "$TMP/tcp.py" client_bulk "$(netns_addr 2)" 5557 "$bytes"
wait "$srv"
read -r got secs <"$TMP/sink.out" 2>/dev/null || { got=0; secs=0; }
mbit=$(awk -v b="$got" -v s="$secs" 'BEGIN { if (s > 0) printf "%.1f", b * 8 / s / 1e6; else print 0 }')
if [[ "$got" == "$bytes" ]] && awk -v m="$mbit" 'BEGIN { exit !(m >= 20 && m <= 60) }'; then
  ok "bulk TCP host1 -> host2: $got bytes in ${secs} s = $mbit Mbit/s (limit 50)"
else
  fail "bulk TCP host1 -> host2: $got of $bytes bytes in ${secs} s = $mbit Mbit/s (want 20..60)"
fi
netns_cleanup
check_nothing_left "after part 2" "$P2"

# --- 3. the trap of netns_setup ----------------------------------------------------
echo "== 3. netns_setup's trap cleans up on SIGTERM and on exit"
for how in term exit; do
  # shellcheck disable=SC2016  # expanded by the inner bash
  out=$(env -u NETNS_NO_TRAP bash -c '
      source "$1"
      netns_setup dptrap 2 || exit 3
      echo "$NETNS_P"
      netns_exec 1 sleep 300 >/dev/null 2>&1 &
      sleep 0.3
      if [[ "$2" == term ]]; then kill -TERM $$; sleep 5; else exit 0; fi
    ' _ "$HERE/netns_lib.sh" "$how" 2>&1)
  p=$(echo "$out" | head -1)
  if [[ "$p" != dptrap* ]]; then fail "trap test ($how): setup failed: $out"; continue; fi
  check_nothing_left "after $how" "$p"
done
left=$(ip netns list | grep -E '^(dpself|dptrap)' || true)
[[ -z "$left" ]] || fail "left over: $left"

echo
if ((FAILS == 0)); then
  echo "PASS: netns_selftest ($(date +%T))"
  exit 0
else
  echo "FAIL: netns_selftest: $FAILS check(s) failed"
  exit 1
fi
