#!/usr/bin/env bash
# Resuming on purpose, over the real launcher, servers and workers:
#
#   1. Ctrl-C (SIGINT) on a training `launch`: the workers stop first, the
#      servers after them with their final snapshots, nothing is SIGKILLed,
#      launch exits 130 and its last lines give the command that resumes;
#   2. the same command again without --resume: refused (exit 2) before
#      any server starts, naming --resume and a fresh --log_dir;
#   3. another job (another --max_train_examples) in that --log_dir, with
#      and without --resume: refused (exit 2), naming what differs;
#   4. a ps_server (as node, Slurm or Kubernetes start it) on that shard's
#      checkpoint folder with another job's flags: refused (exit 2), naming
#      what differs;
#   5. the printed resume command: the shards restore their snapshots, the
#      workers resume at their data positions, the job completes (exit 0,
#      SUMMARY) and the snapshots are gone, so the same command afterwards
#      starts a new job instead of continuing a finished one.
#
# Usage: launch_resume_test.sh <launch> <ps_server>
set -uo pipefail
launch="$(realpath "$1")"
ps_server="$(realpath "$2")"
work="${TEST_TMPDIR:-$(mktemp -d)}/launch_resume"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
show() { echo "---- $1"; tail -n 40 "$1"; }
data=/usr/share/datasets/fashion-mnist
if [[ ! -e "$data/train-labels-idx1-ubyte.gz" ]]; then
  echo "note: dataset-fashion-mnist is not installed; skipped"; exit 0
fi
logs="$work/logs"
job=(--servers=2 --workers=2 --epochs=3 --max_train_examples=3000 --seed=5
     --checkpoint_every_s=60 "--worker_args=--log_every=2 --max_test_examples=500")

# ---- 1. Ctrl-C while training.
cd "$work"
"$launch" "${job[@]}" --log_dir="$logs" > "$work/first.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -qE '^worker 1: step ([2-9][0-9]|[0-9]{3,})' "$work/first.out" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
grep -qE '^worker 1: step' "$work/first.out" || { show "$work/first.out"; fail "no progress line"; }
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
((rc == 130)) || { show "$work/first.out"; fail "Ctrl-C: exit code $rc, want 130"; }
! grep -q "SIGKILL" "$work/first.out" || { show "$work/first.out"; fail "a child was SIGKILLed"; }
grep -q "^launch: interrupted by signal 2; the servers wrote their snapshots" "$work/first.out" ||
  { show "$work/first.out"; fail "no line saying what was kept"; }
resume_cmd="$(grep -A1 'resume with:$' "$work/first.out" | tail -n 1 | sed 's/^  //')"
[[ "$resume_cmd" == "$launch "*"--log_dir=$logs --resume" ]] ||
  { show "$work/first.out"; fail "resume command: '$resume_cmd'"; }
for k in 0 1; do
  grep -qE "snapshot .*shard-?$k|wrote snapshot" "$logs/ps_$k.log" ||
    { show "$logs/ps_$k.log"; fail "ps $k wrote no final snapshot"; }
done
ls "$logs"/ckpt/worker*.position > /dev/null 2>&1 || fail "no data position kept"
# The workers stopped before the servers: each worker's last line comes
# before the first server's "stopped" line.
last_worker="$(grep -nE '^worker [01]: (stopped|finished|DONE)|^worker [01]: .*signal' "$work/first.out" | tail -n 1 | cut -d: -f1)"
first_server="$(grep -n '^ps [01]: .*stopped: ' "$work/first.out" | head -n 1 | cut -d: -f1)"
[[ -n "$first_server" ]] || { show "$work/first.out"; fail "no server stopped line"; }
[[ -z "$last_worker" || "$last_worker" -lt "$first_server" ]] ||
  { show "$work/first.out"; fail "a server stopped before the workers"; }
echo "ok: Ctrl-C: exit 130, final snapshots, resume command"

# ---- 2. The same command without --resume.
rc=0; "$launch" "${job[@]}" --log_dir="$logs" > "$work/again.out" 2>&1 || rc=$?
((rc == 2)) || { show "$work/again.out"; fail "same job without --resume: exit $rc, want 2"; }
grep -q "earlier, unfinished run of this job: add --resume to continue it, or use a fresh --log_dir" "$work/again.out" ||
  { show "$work/again.out"; fail "no --resume advice"; }
! grep -q "listening on" "$work/again.out" || fail "a server started"
echo "ok: same job without --resume refused"

# ---- 3. Another job in the same folder.
other=(--servers=2 --workers=2 --epochs=3 --max_train_examples=12000 --seed=5)
for extra in "" --resume; do
  rc=0; "$launch" "${other[@]}" --log_dir="$logs" $extra > "$work/other.out" 2>&1 || rc=$?
  ((rc == 2)) || { show "$work/other.out"; fail "another job $extra: exit $rc, want 2"; }
  grep -q "holds the snapshots of another job (max_train_examples 3000 there, 12000 here)" "$work/other.out" ||
    { show "$work/other.out"; fail "another job $extra: the difference is not named"; }
done
echo "ok: another job refused, naming what differs"

# ---- 4. A server started by hand (node, Slurm) on that folder, another job.
rc=0; timeout 20 "$ps_server" --port=0 --shard_index=0 --num_shards=2 --num_workers=2 \
  --epochs=3 --max_train_examples=12000 --checkpoint_dir="$logs/ckpt/shard0" \
  > "$work/server.out" 2>&1 || rc=$?
((rc == 2)) || { show "$work/server.out"; fail "ps_server on another job's folder: exit $rc, want 2"; }
grep -q "holds the snapshots of another job (max_train_examples 3000 there, 12000 here); give this job a fresh --checkpoint_dir" "$work/server.out" ||
  { show "$work/server.out"; fail "ps_server does not name the difference"; }
echo "ok: ps_server refuses another job's folder"

# ---- 5. Resume.
rc=0; eval "$resume_cmd" > "$work/resume.out" 2>&1 || rc=$?
((rc == 0)) || { show "$work/resume.out"; fail "resume: exit $rc"; }
grep -q "^launch: resuming the job in $logs from the snapshots of 2 shards" "$work/resume.out" ||
  { show "$work/resume.out"; fail "no resuming line"; }
for k in 0 1; do
  grep -q "^ps $k: .*restored snapshot" "$work/resume.out" ||
    { show "$work/resume.out"; fail "ps $k did not restore"; }
done
grep -qE "^worker [01]: resuming at step [1-9]" "$work/resume.out" ||
  { show "$work/resume.out"; fail "no worker resumed its data position"; }
grep -q '^SUMMARY {' "$work/resume.out" || { show "$work/resume.out"; fail "no SUMMARY"; }
[[ ! -e "$logs/ckpt" ]] || fail "the finished job left its snapshots in $logs/ckpt"
echo "ok: resumed and completed; snapshots removed"
echo PASS
