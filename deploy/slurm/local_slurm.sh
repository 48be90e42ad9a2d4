#!/usr/bin/env bash
# deploy/slurm/local_slurm.sh -- a throwaway single-node Slurm on this machine,
# to run deploy/slurm/downpour.sbatch (and tests) against a real Slurm.
#
#   sudo bash deploy/slurm/local_slurm.sh start    # installs if missing, starts,
#                                                  # prints `export SLURM_CONF=...`
#   eval "$(sudo bash deploy/slurm/local_slurm.sh env)"
#   srun -n 4 hostname ; sbatch --wait job.sh
#   sudo bash deploy/slurm/local_slurm.sh check    # srun -n 4 + sbatch --wait
#   sudo bash deploy/slurm/local_slurm.sh status
#   sudo bash deploy/slurm/local_slurm.sh stop     # kills by pid, removes the dir
#
# Everything lives under $LOCAL_SLURM_DIR (default /tmp/downpour-local-slurm):
#   munge/   key, socket, pid, log, seed of our own munged (the system's
#            /etc/munge key and /run/munge socket are not used or touched)
#   slurm.conf, state/ (StateSaveLocation), spool/ (SlurmdSpoolDir),
#   run/*.pid, log/*.log, jobs/ (sbatch output of `check`)
# Another LOCAL_SLURM_DIR gives an independent instance (ports are picked free
# at start).  Needs root: slurmd runs jobs as their submitting user, and here
# SlurmUser=root.
#
# Settings (environment, read at `start`):
#   LOCAL_SLURM_DIR     see above
#   LOCAL_SLURM_CPUS    CPUs the node declares (default 8, more than this
#                       machine has: Slurm then lets 4+ tasks share 2 cores)
#   LOCAL_SLURM_GPUS    if > 0, declares that many GPUs (Gres=gpu:N with
#                       /dev/nvidia0..N-1 in gres.conf; without /dev/nvidia0,
#                       fake GPU device nodes under the dir), for
#                       --gpus-per-task
#
# Gotchas found making this work (Debian 12, Slurm 22.05.8, munge 0.5.15,
# no systemd, 2 cores):
#  * Installing the packages must not start the system's munge/slurm services
#    (no systemd here; under systemd they would start with /etc config):
#    a policy-rc.d that exits 101 is put in place during apt-get if none exists.
#  * munged refuses a key file readable by others, and a socket directory
#    that is writable by others OR not searchable by all ("execute
#    permissions for all required"): the dir is 0755 and the key 0400.  Clients and the
#    daemons find our munged through `AuthInfo=socket=...` in slurm.conf
#    (used by both auth/munge and cred/munge); `munge -S`/`unmunge -S` for a
#    manual check.
#  * A node with more CPUs than the machine has is marked INVALID ("Low
#    CPUs") unless `SlurmdParameters=config_overrides`.
#  * No cgroups: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
#    JobAcctGatherType=jobacct_gather/none; then no cgroup.conf is needed.
#  * slurmctld only runs where SlurmctldHost's name equals `hostname -s`;
#    the node name must be what slurmd is started with (`-N`).  Both are
#    given the address 127.0.0.1, so nothing listens beyond loopback traffic
#    (the daemons bind all interfaces, but every address they hand out is
#    127.0.0.1).
#  * SelectType=select/cons_tres with CR_Core: tasks get a CPU each, so
#    `srun -n 4` runs 4 tasks at once on the one node.
#  * The Slurm step variables srun sets that common/cluster_spec.h reads:
#    SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST,
#    SLURM_STEP_TASKS_PER_NODE (and SLURM_NODEID, SLURM_LOCALID).

set -u
DIR="${LOCAL_SLURM_DIR:-/tmp/downpour-local-slurm}"
CONF="$DIR/slurm.conf"
MUNGE_SOCKET="$DIR/munge/munge.socket.2"
NODE="$(hostname -s 2>/dev/null || echo localhost)"
CPUS="${LOCAL_SLURM_CPUS:-8}"
GPUS="${LOCAL_SLURM_GPUS:-0}"

say() { echo "local_slurm: $*" >&2; }
die() { say "$*"; exit 1; }

install_packages() {
  local missing=()
  for b in munged:munge slurmctld:slurm-wlm slurmd:slurm-wlm srun:slurm-wlm; do
    command -v "${b%%:*}" >/dev/null 2>&1 || missing+=("${b#*:}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ "$(id -u)" == 0 ]] || die "slurm-wlm/munge missing and not root: cannot apt-get install"
  say "installing slurm-wlm munge (apt-get)"
  local made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    # Keep the packages' postinst from starting the system services.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  local rc=0
  if ! apt-cache policy slurm-wlm 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update -q || rc=$?
  fi
  ((rc == 0)) && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends slurm-wlm munge || rc=$?
  ((made_policy)) && rm -f /usr/sbin/policy-rc.d
  ((rc == 0)) || die "apt-get install slurm-wlm munge failed (rc $rc)"
}

free_port() {  # a TCP port nobody listens on, from 20000-59999
  local p used
  used=$(ss -Htln 2>/dev/null | awk '{n=split($4,a,":"); print a[n]}')
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 40000))
    grep -qx "$p" <<<"$used" || { echo "$p"; return 0; }
  done
  return 1
}

pid_alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # <seconds> <command...>: polls every 0.2 s
  local t=$(($1 * 5)); shift
  while ((t-- > 0)); do "$@" && return 0; sleep 0.2; done
  return 1
}

print_env() {
  echo "export SLURM_CONF=$CONF"
  echo "export LOCAL_SLURM_DIR=$DIR"
}

write_conf() {
  local ctld_port slurmd_port srun_lo gres=""
  ctld_port=$(free_port) && slurmd_port=$(free_port) || die "no free port"
  while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port=$(free_port); done
  srun_lo=$(free_port)
  if ((GPUS > 0)); then
    gres=" Gres=gpu:$GPUS"
    {
      echo "# Written by deploy/slurm/local_slurm.sh"
      local last=$((GPUS - 1))
      if [[ ! -e /dev/nvidia0 ]]; then
        # No GPU here: fake ones, so that --gpus-per-task is scheduled and
        # CUDA_VISIBLE_DEVICES set as on a GPU node.  slurmd drops GPUs
        # without a File= ("Removing file-less GPU"), so each is a character
        # device node under $DIR (major 1 minor 3, like /dev/null).
        local g
        for ((g = 0; g < GPUS; g++)); do
          mknod -m 666 "$DIR/fakegpu$g" c 1 3 || die "mknod $DIR/fakegpu$g failed"
        done
        if ((GPUS == 1)); then echo "NodeName=$NODE Name=gpu File=$DIR/fakegpu0"
        else echo "NodeName=$NODE Name=gpu File=$DIR/fakegpu[0-$last]"; fi
      elif ((GPUS == 1)); then echo "NodeName=$NODE Name=gpu File=/dev/nvidia0"
      else echo "NodeName=$NODE Name=gpu File=/dev/nvidia[0-$last]"; fi
    } >"$DIR/gres.conf"
  fi
  cat >"$CONF" <<EOF
# Written by deploy/slurm/local_slurm.sh: a throwaway one-node cluster.
ClusterName=dplocal
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
# srun's own listening ports (I/O of the steps).
SrunPortRange=$srun_lo-$((srun_lo + 50))
# Our own munged, not the system's /run/munge socket.
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups anywhere.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Accept the declared CPUs even though the machine has fewer.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MinJobAge=60
$( ((GPUS > 0)) && echo "GresTypes=gpu")
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=1000$gres State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

cmd_start() {
  install_packages
  if pid_alive "$DIR/run/slurmctld.pid" || pid_alive "$DIR/munge/munged.pid"; then
    say "already running under $DIR"; print_env; return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "must run as root (SlurmUser=root)"
  rm -rf -- "$DIR"
  mkdir -p "$DIR"/{munge,state,spool,run,log,jobs} || die "cannot make $DIR"
  # munged: the socket's directory must be searchable by all (0755) and
  # writable by nobody else; the key readable only by its owner.
  chmod 755 "$DIR/munge"
  chmod 755 "$DIR" "$DIR/jobs"

  # munge: own key and daemon.
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none &&
    chmod 400 "$DIR/munge/munge.key" || die "cannot write the munge key"
  munged --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed" ||
    die "munged failed: $(tail -3 "$DIR/munge/munged.log" 2>/dev/null)"
  wait_for 10 pid_alive "$DIR/munge/munged.pid" || die "munged did not start"
  munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null ||
    die "munge round trip failed"

  write_conf
  export SLURM_CONF="$CONF"
  slurmctld -f "$CONF" ||
    die "slurmctld failed: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
  wait_for 20 pid_alive "$DIR/run/slurmctld.pid" ||
    die "slurmctld did not start: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
  wait_for 20 scontrol ping >/dev/null 2>&1 ||
    die "slurmctld does not answer: $(tail -5 "$DIR/log/slurmctld.log" 2>/dev/null)"
  slurmd -f "$CONF" -N "$NODE" ||
    die "slurmd failed: $(tail -5 "$DIR/log/slurmd.log" 2>/dev/null)"
  wait_for 20 pid_alive "$DIR/run/slurmd.pid" ||
    die "slurmd did not start: $(tail -5 "$DIR/log/slurmd.log" 2>/dev/null)"
  node_idle() { sinfo -h -n "$NODE" -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; }
  wait_for 30 node_idle ||
    die "node $NODE not idle: $(sinfo -h -N -o '%N %t %E' 2>&1); $(tail -5 "$DIR/log/slurmd.log")"
  say "up: node $NODE ($CPUS CPUs), slurmctld pid $(cat "$DIR/run/slurmctld.pid"), slurmd pid $(cat "$DIR/run/slurmd.pid"), munged pid $(cat "$DIR/munge/munged.pid")"
  print_env
}

cmd_status() {
  local rc=0 f
  for f in munge/munged.pid run/slurmctld.pid run/slurmd.pid; do
    if pid_alive "$DIR/$f"; then echo "$(basename "$f" .pid): running, pid $(cat "$DIR/$f")"
    else echo "$(basename "$f" .pid): not running"; rc=1; fi
  done
  if ((rc == 0)); then
    SLURM_CONF="$CONF" sinfo -N -o '%N %t %c %P' 2>&1
    SLURM_CONF="$CONF" squeue 2>&1
  fi
  return $rc
}

kill_pidfile() {  # <pidfile> <name>: TERM, wait up to 10 s, then KILL
  local f="$1" name="$2" pid
  [[ -s "$f" ]] || return 0
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  gone() { ! kill -0 "$pid" 2>/dev/null; }
  wait_for 10 gone || { say "$name ($pid) did not stop; KILL"; kill -KILL "$pid" 2>/dev/null; }
}

cmd_stop() {
  if [[ ! -d "$DIR" ]]; then say "nothing under $DIR"; return 0; fi
  if pid_alive "$DIR/run/slurmctld.pid"; then
    # Cancel what still runs in our cluster so that no slurmstepd outlives it.
    local ids
    ids=$(SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086
    [[ -n "${ids// /}" ]] && SLURM_CONF="$CONF" scancel --full $ids 2>/dev/null
    none_left() { [[ -z "$(SLURM_CONF="$CONF" squeue -h -t R,CG,PD 2>/dev/null)" ]]; }
    wait_for 15 none_left || say "jobs still listed: $(SLURM_CONF="$CONF" squeue -h 2>&1)"
  fi
  kill_pidfile "$DIR/run/slurmd.pid" slurmd
  kill_pidfile "$DIR/run/slurmctld.pid" slurmctld
  kill_pidfile "$DIR/munge/munged.pid" munged
  rm -rf -- "$DIR"
  say "stopped; removed $DIR"
}

cmd_check() {
  export SLURM_CONF="$CONF"
  pid_alive "$DIR/run/slurmctld.pid" || die "not running (start first)"
  local out n rc
  say "srun -n 4 ..."
  # shellcheck disable=SC2016  # expanded by the tasks, not here
  out=$(timeout 120 srun -n 4 bash -c \
    'echo $SLURM_PROCID $SLURM_STEP_NODELIST $SLURM_STEP_TASKS_PER_NODE $SLURM_STEP_NUM_TASKS $SLURM_LOCALID' 2>&1)
  rc=$?
  echo "$out" | sort -n
  n=$(echo "$out" | grep -cE "^[0-3] $NODE 4 4 [0-3]$")
  [[ $rc == 0 && $n == 4 ]] || { say "FAIL: srun -n 4 gave rc $rc and $n good lines"; return 1; }
  say "sbatch --wait ..."
  cat >"$DIR/jobs/trivial.sh" <<'EOF'
#!/bin/bash
#SBATCH --job-name=dp-trivial
#SBATCH --ntasks=2
#SBATCH --time=00:02:00
echo "batch on $(hostname -s): SLURM_JOB_ID=$SLURM_JOB_ID SLURM_NTASKS=$SLURM_NTASKS"
srun bash -c 'echo "task $SLURM_PROCID of $SLURM_STEP_NUM_TASKS"'
EOF
  out=$(cd "$DIR/jobs" && timeout 180 sbatch --wait --output="$DIR/jobs/trivial-%j.out" \
    "$DIR/jobs/trivial.sh" 2>&1)
  rc=$?
  echo "$out"
  cat "$DIR"/jobs/trivial-*.out 2>/dev/null
  [[ $rc == 0 ]] && grep -q 'task 1 of 2' "$DIR"/jobs/trivial-*.out 2>/dev/null ||
    { say "FAIL: sbatch --wait rc $rc"; return 1; }
  say "PASS: srun -n 4 and sbatch --wait work"
}

case "${1:-}" in
  install) install_packages ;;
  start) cmd_start ;;
  env) print_env ;;
  status) cmd_status ;;
  check) cmd_check ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 install|start|env|status|check|stop" >&2; exit 2 ;;
esac
