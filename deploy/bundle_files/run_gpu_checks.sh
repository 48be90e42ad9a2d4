#!/usr/bin/env bash
# run_gpu_checks.sh (from deploy/bundle_files/): the checks to run on a GPU
# host from an unpacked Downpour bundle, made to fit one command of at most
# 10 minutes whose results come back only as at most 8 files of one folder
# (docs/operations.md "GPU hosts").
#
#   downpour-bundle/run_gpu_checks.sh --results=DIR    # DIR: default $OUT
#   downpour-bundle/run_gpu_checks.sh --dry_run --results=DIR
#   downpour-bundle/run_gpu_checks.sh --steps=train_cuda,bench_resnet20   # a retry
#
# Steps, in order, with their time limits (seconds; each is cut to what the
# 540 s default --budget_s has left; on an H200 the first eight took 111 s
# together):
#   host           20  uname, OS, glibc, CPUs, nvidia-smi -L and nvidia-smi,
#                      the bundle's cuDNN headers against PyTorch's cuDNN
#                      (fails without a GPU, or when that cuDNN is older
#                      than the headers: the CUDA backend would refuse it)
#   libs           30  bin/check_libs --require_cuda: every program's
#                      libraries resolve, the packed ones from the bundle,
#                      cuDNN/cuBLAS from this host
#   gpu_tests     150  each GPU test program of libexec/gpu_tests.txt (the
#                      CUDA unit tests and the backend conformance suites),
#                      at most 90 s each. A test skipped because no GPU is
#                      usable ("no usable CUDA device") is a failure; a skip
#                      for another reason is listed and is not; a bundle
#                      without GPU test programs is a failure.
#   train_cuda     75  2 servers + 2 workers on the GPU through bin/launch
#                      (the packed training subset): SUMMARY line, test
#                      accuracy >= --min_accuracy, each worker's step split
#   train_cuda_2replicas  60  2 servers + 1 worker process with 2 replicas
#                      on the GPU (--gpus=0,0)
#   train_cpu      50  the same 2 + 2 run on the CPU backend, for comparison
#   bench_fashion_cnn  80  Downpour's worker step (bin/compute_bench) against
#                      PyTorch on the same GPU, cudnn.benchmark off and on;
#                      batch 64, 256, 1024
#   bench_resnet20  60 the same for resnet20, batch 128
#   job_split      45  one worker, 2 servers, batch 64 on the GPU: the
#                      defaults, --wait_free=false, --n_fetch=8 --n_push=8;
#                      each run's loop seconds, its split and examples/sec,
#                      and the GPU's utilization and SM clock (nvidia-smi
#                      every 100 ms)
#   profile       100  tests/bench/gpu_kernel_profile.sh: Downpour's and
#                      PyTorch's kernels per fashion_cnn step at batch 1024
#                      through Nsight Compute (NOT RUN without ncu)
#   bench_compiled 150 PyTorch at its best beside the bench steps' Downpour
#                      figures: torch.compile with CUDA graphs
#                      (reduce-overhead), cudnn.benchmark on; the compute
#                      ratios. Needs bench_fashion_cnn and bench_resnet20 in
#                      the same run (a retry names all three)
#
# Results, in DIR (the only files written there, at most 8, none in
# subfolders; rewritten after every step, so a hang or a kill keeps every
# step done before it):
#   summary.txt        one line per step (PASS, FAIL, NOT RUN) and the
#                      figures (accuracy, examples/sec, step split, ratios)
#   summary.json       the same as JSON
#   logs.tar.gz        every step's log, the launch logs, the bench JSON
#   current_step.log   the output of the step that is running (removed once
#                      the step is packed)
#
# --dry_run: everything runs for real except what needs a GPU. host, libs
# and train_cpu run as usual; gpu_tests runs every test program (their GPU
# tests skip) and reports itself NOT RUN when the only skips are "no usable
# CUDA device"; train_cuda*, bench_*, job_split and profile print their
# commands and report NOT RUN. Defaults become --epochs=1 --min_accuracy=0 (a dry-run bundle packs
# a few examples). Exit 0 when nothing FAILed.
#
# Options:
#   --results=DIR         default $OUT; required when OUT is unset
#   --dry_run
#   --steps=A,B           only these steps (names above)
#   --budget_s=N          the whole run's limit (default 540)
#   --gpu=N               device ordinal (default 0; CUDA_VISIBLE_DEVICES=N)
#   --epochs=N            training epochs per worker (default 3)
#   --min_accuracy=X      (default 0.85 with >= 3 epochs, else 0.75)
#   --train_examples=N    the first N training examples (0: all packed, the
#                         default: 30000 in bundle.sh's bundle)
#   --cpu_train_examples=N  train_cpu's (default: as --train_examples)
#   --test_examples=N     examples evaluated (default 0: all packed)
# Environment: DOWNPOUR_PYTHON (the Python with PyTorch; default python3),
# DOWNPOUR_CUDA_LIB_DIRS, DOWNPOUR_CUDA_HOME (see libexec/downpour_env.sh).
# Exit status: 0 every step passed (or, in a dry run, passed or was not
# run); 1 a step failed; 2 bad arguments.
set -uo pipefail
self="$(readlink -f -- "${BASH_SOURCE[0]}")"
B="$(cd -- "$(dirname -- "$self")" && pwd -P)"

all_steps=(host libs gpu_tests train_cuda train_cuda_2replicas train_cpu
           bench_fashion_cnn bench_resnet20 job_split profile bench_compiled)
declare -A limit_of=([host]=20 [libs]=30 [gpu_tests]=150 [train_cuda]=75
  [train_cuda_2replicas]=60 [train_cpu]=50 [bench_fashion_cnn]=80
  [bench_resnet20]=60 [job_split]=45 [profile]=100 [bench_compiled]=150)

results="${OUT:-}" dry_run=0 only="" budget_s=540 gpu=0 epochs="" min_accuracy=""
train_examples=0 cpu_train_examples="" test_examples=0
for arg in "$@"; do
  case "$arg" in
    --results=*) results="${arg#*=}" ;;
    --dry_run) dry_run=1 ;;
    --steps=*) only="${arg#*=}" ;;
    --budget_s=*) budget_s="${arg#*=}" ;;
    --gpu=*) gpu="${arg#*=}" ;;
    --epochs=*) epochs="${arg#*=}" ;;
    --min_accuracy=*) min_accuracy="${arg#*=}" ;;
    --train_examples=*) train_examples="${arg#*=}" ;;
    --cpu_train_examples=*) cpu_train_examples="${arg#*=}" ;;
    --test_examples=*) test_examples="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "run_gpu_checks: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$results" ]] ||
  { echo "run_gpu_checks: --results=DIR is required when OUT is not set" >&2; exit 2; }
for n in "$budget_s" "$gpu" "$train_examples" "$test_examples" ${epochs:+"$epochs"} \
         ${cpu_train_examples:+"$cpu_train_examples"}; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "run_gpu_checks: not a number: $n" >&2; exit 2; }
done
if [[ -n "$only" ]]; then
  for s in ${only//,/ }; do
    [[ -n "${limit_of[$s]:-}" ]] ||
      { echo "run_gpu_checks: unknown step '$s' (${all_steps[*]})" >&2; exit 2; }
  done
fi
if [[ "$dry_run" == 1 ]]; then
  epochs="${epochs:-1}" min_accuracy="${min_accuracy:-0}"
fi
epochs="${epochs:-3}" cpu_train_examples="${cpu_train_examples:-$train_examples}"
if [[ -z "$min_accuracy" ]]; then
  min_accuracy=$([[ "$epochs" -ge 3 ]] && echo 0.85 || echo 0.75)
fi
mkdir -p "$results" || exit 2
results="$(cd "$results" && pwd -P)"
# Only our own files are replaced; anything else already there stays (and
# counts towards the 8 files that come back).
rm -f -- "$results"/{summary.txt,summary.json,logs.tar.gz,current_step.log}
work="$(mktemp -d "${TMPDIR:-/tmp}/run_gpu_checks.XXXXXX")" || exit 1
trap 'rm -rf -- "$work"' EXIT
: > "$work/figures.txt"
t_start=$SECONDS
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
names=() states=() secs=() limits=() notes=()

json_str() {  # a JSON string literal of $1
  local s="${1//\\/\\\\}"
  s="${s//\"/\\\"}"
  s="${s//$'\t'/ }"
  printf '"%s"' "${s//$'\n'/ }"
}

# Writes summary.txt, summary.json and logs.tar.gz (each through a
# temporary name, so a kill never leaves a half-written file).
pack() {
  local i n=${#names[@]} fails=0 f
  for ((i = 0; i < n; i++)); do [[ "${states[$i]}" == FAIL ]] && fails=$((fails + 1)); done
  {
    echo "run_gpu_checks: $(sed -n 2p "$B/MANIFEST") ($([[ $dry_run == 1 ]] && echo "dry run" || echo "GPU run"))"
    echo "started $started, $((SECONDS - t_start)) s so far of a $budget_s s budget; host $(uname -n)"
    for ((i = 0; i < n; i++)); do
      printf '%-8s %-22s %4s s of %3s s  %s\n' "${states[$i]}" "${names[$i]}" \
        "${secs[$i]}" "${limits[$i]}" "${notes[$i]}"
    done
    echo "figures:"
    sed 's/^/  /' "$work/figures.txt"
    echo "$n step(s), $fails failed"
  } > "$results/summary.txt.tmp"
  mv -f "$results/summary.txt.tmp" "$results/summary.txt"
  {
    printf '{"bundle":%s,"dry_run":%s,"started":"%s","seconds":%d,"budget_s":%d,"failed":%d,"steps":[' \
      "$(json_str "$(sed -n 2p "$B/MANIFEST")")" \
      "$([[ $dry_run == 1 ]] && echo true || echo false)" "$started" \
      $((SECONDS - t_start)) "$budget_s" "$fails"
    for ((i = 0; i < n; i++)); do
      ((i > 0)) && printf ','
      printf '{"name":"%s","status":"%s","seconds":%d,"limit_s":%d,"note":%s}' \
        "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${limits[$i]}" \
        "$(json_str "${notes[$i]}")"
    done
    printf '],"figures":['
    f=0
    while IFS= read -r line; do
      ((f++ > 0)) && printf ','
      json_str "$line"
    done < "$work/figures.txt"
    printf ']}\n'
  } > "$results/summary.json.tmp"
  mv -f "$results/summary.json.tmp" "$results/summary.json"
  tar -C "$work" -czf "$results/logs.tar.gz.tmp" . 2>/dev/null &&
    mv -f "$results/logs.tar.gz.tmp" "$results/logs.tar.gz"
  rm -f "$results/logs.tar.gz.tmp"
}

# step NAME FUNCTION: runs FUNCTION under the step's time limit (cut to the
# budget left), its output to the screen, $work/NAME.log and
# DIR/current_step.log. FUNCTION's exit status: 0 PASS, 10 NOT RUN, else
# FAIL; its last line starting "NOTE: " becomes the step's note.
step() {
  local name="$1" fn="$2" limit="${limit_of[$1]}" left t0=$SECONDS rc state note
  if [[ -n "$only" && ",$only," != *",$name,"* ]]; then return 0; fi
  left=$((budget_s - (SECONDS - t_start)))
  echo
  if ((left < 5)); then
    names+=("$name") states+=(FAIL) secs+=(0) limits+=(0)
    notes+=("not run: the $budget_s s budget is spent")
    echo "=== $name: FAIL, not run: the budget is spent"
    pack
    return 0
  fi
  ((limit > left)) && limit=$left
  echo "=== $name (limit $limit s)"
  # Steps are shell functions, so timeout runs them in a child bash; it
  # signals the whole process group (launch's servers and workers too).
  STEP_LIMIT="$limit" timeout --kill-after=5 "$limit" bash -c '"$@"' step "$fn" 2>&1 |
    tee "$work/$name.log" "$results/current_step.log"
  rc=${PIPESTATUS[0]}
  note="$(grep '^NOTE: ' "$work/$name.log" | tail -n 1 | sed 's/^NOTE: //')"
  case "$rc" in
    0) state=PASS ;;
    10) state="NOT RUN" ;;
    124|137) state=FAIL note="timed out after $limit s${note:+; $note}" ;;
    *) state=FAIL note="exit $rc${note:+; $note}" ;;
  esac
  names+=("$name") states+=("$state") secs+=($((SECONDS - t0))) limits+=("$limit")
  notes+=("$note")
  echo "=== $name: $state ($((SECONDS - t0)) s)${note:+: $note}"
  pack
  rm -f "$results/current_step.log"
}

not_run() {  # COMMAND...: a GPU step in a dry run
  echo "dry run: would run: $*"
  echo "NOTE: not run (dry run: needs a GPU)"
  exit 10
}

host_info() {
  local ok=0 line cudnn_h torch_cudnn
  echo "bundle: $(sed -n 2p "$B/MANIFEST")"
  uname -a
  (. /etc/os-release 2>/dev/null && echo "os: $PRETTY_NAME")
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null)  cpus: $(nproc)"
  if command -v nvidia-smi >/dev/null && line="$(nvidia-smi -L 2>&1)" &&
     grep -q '^GPU ' <<< "$line"; then
    echo "$line"
    nvidia-smi 2>&1 | head -n 20
    echo "host: $(grep -m1 '^GPU ' <<< "$line" | sed 's/ (UUID.*//')" >> "$work/figures.txt"
  else
    echo "no GPU: nvidia-smi ${line:-is not on PATH}"
    ok=1
  fi
  cudnn_h="$(sed -n 's/^cudnn_headers: //p' "$B/MANIFEST")"
  torch_cudnn="$(timeout 15 "${DOWNPOUR_PYTHON:-python3}" -c '
import torch
v = torch.backends.cudnn.version() or 0
print("torch %s (CUDA %s), cuDNN %d.%d.%d, cuda available: %s" % (
    torch.__version__, torch.version.cuda, v // 10000, v % 10000 // 100,
    v % 100, torch.cuda.is_available()))' 2>&1 | tail -n 1)"
  echo "python: $torch_cudnn"
  echo "bundle built against cuDNN ${cudnn_h:-?}: the host's cuDNN must be that or a newer 9.x"
  echo "pytorch: $torch_cudnn; bundle cuDNN headers ${cudnn_h:-?}" >> "$work/figures.txt"
  # The CUDA backend refuses a cuDNN older than its headers (same major, at
  # least the same minor): say so here, before the GPU steps fail on it.
  local have
  have="$(sed -nE 's/.*cuDNN ([0-9]+\.[0-9]+)\.[0-9]+.*/\1/p' <<< "$torch_cudnn")"
  if [[ -n "$cudnn_h" && -n "$have" && "$have" != 0.0 ]] &&
     ! awk -v h="$have" -v b="$cudnn_h" 'BEGIN { split(h, x, "."); split(b, y, ".")
         exit !(x[1] == y[1] && x[2] + 0 >= y[2] + 0) }'; then
    echo "NOTE: PyTorch's cuDNN $have does not satisfy the bundle's headers $cudnn_h (same major, minor at least as new): the CUDA backend will refuse it"
    ok=1
  fi
  if [[ "$ok" != 0 && "$dry_run" == 1 ]]; then
    echo "NOTE: no GPU (dry run: expected)"
    exit 10
  fi
  [[ "$ok" == 0 ]] || echo "NOTE: no GPU visible"
  exit "$ok"
}

libs() {
  local req=(--require_cuda)
  [[ "$dry_run" == 1 ]] && req=()
  "$B/bin/check_libs" "${req[@]+"${req[@]}"}"
}

# gtest output of one program -> "gpu_skips other_skips", and the other
# skips' reasons on stderr.
count_skips() {
  awk '
    /: Skipped$/ { want = 1; next }
    want { want = 0
           if ($0 ~ /^no usable CUDA device/) g++
           else { o++; print "  skipped (" $0 ")" > "/dev/stderr" } }
    END { print g + 0, o + 0 }' "$1"
}

gpu_tests() {
  local rel needs n=0 bad=0 gpu_skips=0 other=0 tmp rc g o per left
  # Quick, GPU-free programs first; a hang costs at most 90 s.
  while IFS=$'\t' read -r rel needs; do
    [[ -n "$rel" ]] || continue
    n=$((n + 1))
    left=$((STEP_LIMIT - SECONDS))  # SECONDS counts from this step's start.
    per=90
    ((per > left - 2)) && per=$((left - 2))
    ((per < 1)) && per=1
    echo "--- $rel (limit $per s)"
    tmp="$(mktemp -d "$work/test_tmp.XXXXXX")"
    (
      DOWNPOUR_BUNDLE="$B" DOWNPOUR_BINARY="$rel" DOWNPOUR_NEEDS="$needs"
      DOWNPOUR_WANTS="$(cat "$B/libexec/cuda_wants.txt")"
      source "$B/libexec/downpour_env.sh" || exit 127
      cd "$tmp" && TEST_TMPDIR="$tmp" CUDA_VISIBLE_DEVICES="$gpu" \
        DOWNPOUR_FASHION_MNIST_DIR="$B/data/fashion-mnist" \
        timeout --kill-after=5 "$per" "$B/libexec/$rel" > "$tmp/out.log" 2>&1
      rc=$?
      grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|^\[==========\]|: Failure$|^[^[]' "$tmp/out.log" |
        grep -vE '^(Expected|  Actual|Which is|Value of|Google Test)' | head -n 60
      exit "$rc"
    )
    rc=$?
    read -r g o < <(count_skips "$tmp/out.log" 2> "$tmp/skips.txt")
    cat "$tmp/skips.txt"
    cp "$tmp/out.log" "$work/gpu_test_$(basename "$rel").log"
    rm -rf "$tmp"
    gpu_skips=$((gpu_skips + g))
    other=$((other + o))
    if [[ $rc != 0 ]]; then
      bad=$((bad + 1))
      echo "--- $rel: FAILED (exit $rc$([[ $rc == 124 || $rc == 137 ]] && echo ", timed out"))"
    else
      echo "--- $rel: ok ($g skipped for want of a GPU, $o skipped otherwise)"
    fi
  done < <(quick='^[^[:space:]]*/cuda_(versions|status|libs)_test[[:space:]]'
           grep -E "$quick" "$B/libexec/gpu_tests.txt"
           grep -vE "$quick" "$B/libexec/gpu_tests.txt")
  if ((n == 0)); then
    echo "NOTE: no GPU tests in this bundle (libexec/gpu_tests.txt is empty; bundle.sh packs the cc_tests named or tagged cuda or gpu)"
    exit 1
  fi
  echo "gpu_tests: $n program(s), $bad failed, $gpu_skips test(s) skipped for want of a GPU, $other skipped for other reasons"
  echo "gpu_tests: $n programs, $bad failed, $gpu_skips skipped (no GPU), $other skipped (other)" >> "$work/figures.txt"
  if ((bad > 0)); then
    echo "NOTE: $bad of $n program(s) failed"
    exit 1
  fi
  if ((gpu_skips > 0)); then
    if [[ "$dry_run" == 1 ]]; then
      echo "NOTE: not run (dry run): $gpu_skips test(s) need a GPU; the rest of $n program(s) passed"
      exit 10
    fi
    echo "NOTE: $gpu_skips test(s) skipped: no usable CUDA device"
    exit 1
  fi
  echo "NOTE: $n program(s) passed$( ((other > 0)) && echo ", $other test(s) skipped for other reasons")"
}

# The DONE line of each worker log in folder $1, one line per worker:
# "worker seconds data compute pull push verdict" (the seconds of the step
# split; the verdict last, as it may hold spaces).
done_fields() {
  cat "$1"/worker*.log 2>/dev/null | grep -oE '^DONE \{.*\}' | sed -E \
    's/.*"worker":([0-9]+).*"seconds":([0-9.]+),"time_data":([0-9.]+),"time_compute":([0-9.]+),"time_pull":([0-9.]+),"time_push":([0-9.]+).*"verdict":"([^"]*)".*/\1 \2 \3 \4 \5 \6 \7/'
}

# train NAME DEVICE WORKERS GPUS EXAMPLES: a 2-server run through
# bin/launch on the packed data. CUDA runs see only GPU --gpu, as ordinal 0.
train() {
  local name="$1" device="$2" workers="$3" gpus="$4" examples="$5" args=()
  args=(--servers=2 --workers="$workers" --epochs="$epochs" --seed=7
        --device="$device" --summary_json="$work/$name.json"
        --log_dir="$work/${name}_logs")
  ((examples > 0)) && args+=(--max_train_examples="$examples")
  ((test_examples > 0)) && args+=(--max_test_examples="$test_examples")
  [[ -n "$gpus" ]] && args+=(--gpus="$gpus")
  if [[ "$device" == cuda && "$dry_run" == 1 ]]; then
    not_run "CUDA_VISIBLE_DEVICES=$gpu bin/launch ${args[*]}"
  fi
  [[ "$device" == cuda ]] && export CUDA_VISIBLE_DEVICES="$gpu"
  echo "${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES }bin/launch ${args[*]}"
  "$B/bin/launch" "${args[@]}" > "$work/$name.out" 2>&1
  local rc=$?
  grep -vE '^(worker [0-9]+: PROGRESS|ps [0-9]+: )' "$work/$name.out" | tail -n 25
  ((rc == 0)) || { echo "NOTE: bin/launch exit $rc"; exit 1; }
  local summary acc rate split
  summary="$(grep '^SUMMARY ' "$work/$name.out" | tail -n 1)"
  [[ -n "$summary" ]] || { echo "NOTE: no SUMMARY line"; exit 1; }
  acc="$(sed -E 's/.*"test_accuracy":([0-9.]+).*/\1/' <<< "$summary")"
  rate="$(sed -E 's/.*"examples_per_sec":([0-9.]+).*/\1/' <<< "$summary")"
  # The step split of each worker (replica group): seconds waiting for data,
  # computing, pulling, pushing, from its DONE line.
  split="$(done_fields "$work/${name}_logs" |
    while read -r w secs data comp pull push verdict; do
      printf 'w%s %s s: data %s compute %s pull %s push %s (%s);' \
        "$w" "$secs" "$data" "$comp" "$pull" "$push" "$verdict"
    done | sed 's/;$//; s/;/; /g')"
  echo "$name: test accuracy $acc, $rate examples/sec; split: $split" >> "$work/figures.txt"
  echo "NOTE: accuracy $acc (need >= $min_accuracy), $rate examples/sec"
  if [[ "$device" == cuda ]] &&
     ! cat "$work/$name.out" "$work/${name}_logs"/worker*.log 2>/dev/null | grep -q 'using CUDA'; then
    echo "NOTE: the workers never said 'using CUDA'; accuracy $acc"
    exit 1
  fi
  awk -v a="$acc" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }'
}

# bench MODEL BATCH_SIZES: Downpour's compute_bench and the PyTorch twin on
# the same GPU (fp32, TF32 off in both), PyTorch with cudnn.benchmark off
# and on; ratios downpour / pytorch per batch size.
bench() {
  local model="$1" batches="$2" out="$work/bench_$1" py="${DOWNPOUR_PYTHON:-python3}"
  local spec="$model" common rc bm
  [[ "$model" == fashion_cnn ]] || spec="$B/models/$model.prototxt"
  common=(--device=cuda --gpu="$gpu" --batch_sizes="$batches" --warmup_steps=10
          --min_steps=10 --min_seconds=1 --cpu_threads=1)
  local dp=(env NVIDIA_TF32_OVERRIDE=0 "$B/bin/compute_bench" "${common[@]}"
            --model="$model" --json_out="$out/downpour.json")
  local pt=("$py" "$B/tests/bench/pytorch_fashion_cnn.py" "${common[@]}" --model="$spec")
  [[ "$dry_run" == 1 ]] && not_run "${dp[*]}; ${pt[*]} --cudnn_benchmark=0|1"
  mkdir -p "$out"
  echo "== downpour: ${dp[*]}"
  "${dp[@]}" 2>&1 | tail -n 12
  rc=${PIPESTATUS[0]}
  ((rc == 0)) || { echo "NOTE: compute_bench exit $rc"; exit 1; }
  for bm in 0 1; do
    echo "== pytorch: ${pt[*]} --cudnn_benchmark=$bm"
    "${pt[@]}" --cudnn_benchmark="$bm" --json_out="$out/pytorch_bm$bm.json" 2>&1 | tail -n 8
    rc=${PIPESTATUS[0]}
    ((rc == 0)) || { echo "NOTE: the PyTorch reference (cudnn.benchmark=$bm) exit $rc"; exit 1; }
  done
  local fig
  fig="$("$py" - "$model" "$out" <<'PYEOF'
import json, os, sys
model, out = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(out, "downpour.json")))
parts = []
for bm in (0, 1):
    p = json.load(open(os.path.join(out, "pytorch_bm%d.json" % bm)))
    q = {r["batch_size"]: r for r in p["results"]}
    cells = []
    for r in d["results"]:
        b = r["batch_size"]
        if b in q:
            cells.append("b%d step %.0f/%.0f=%.2f compute %.2f" % (
                b, r["step_examples_per_sec"], q[b]["step_examples_per_sec"],
                r["step_examples_per_sec"] / q[b]["step_examples_per_sec"],
                r["compute_examples_per_sec"] / q[b]["compute_examples_per_sec"]))
    parts.append("cudnn.benchmark %s: %s" % ("on" if bm else "off", ", ".join(cells)))
print("bench %s (examples/sec downpour/pytorch=ratio): %s" % (model, "; ".join(parts)))
PYEOF
)" || { echo "NOTE: the comparison failed"; exit 1; }
  echo "$fig" | tee -a "$work/figures.txt"
  echo "NOTE: ${fig:0:160}"
}

# job_split: where one worker's step goes on the GPU when the exchange is
# the larger part (batch 64): the defaults against --wait_free=false and
# against exchanging every 8 steps.
job_split() {
  local cfg name extra args line rate fig
  if [[ "$dry_run" == 1 ]]; then
    not_run "CUDA_VISIBLE_DEVICES=$gpu bin/launch --servers=2 --workers=1 --device=cuda --batch_size=64 [--wait_free=false | --n_fetch=8 --n_push=8]"
  fi
  export CUDA_VISIBLE_DEVICES="$gpu"
  fig="job_split (1 worker, batch 64; loop seconds and split, examples/sec):"
  for cfg in defaults no_wait_free n8; do
    case "$cfg" in
      defaults) extra=() ;;
      no_wait_free) extra=(--wait_free=false) ;;
      n8) extra=(--n_fetch=8 --n_push=8) ;;
    esac
    args=(--servers=2 --workers=1 --epochs="$epochs" --seed=7 --device=cuda
          --batch_size=64 --summary_json="$work/job_$cfg.json"
          --log_dir="$work/job_${cfg}_logs" "${extra[@]}")
    ((train_examples > 0)) && args+=(--max_train_examples="$train_examples")
    ((test_examples > 0)) && args+=(--max_test_examples="$test_examples")
    echo "bin/launch ${args[*]}"
    # The GPU's utilization and SM clock every 100 ms while the job runs: a
    # GPU idle between short bursts may clock down, which the step's
    # compute time would show.
    local smi_pid="" rc=0 gpu_seen=""
    if command -v nvidia-smi > /dev/null; then
      nvidia-smi -i "$gpu" --query-gpu=utilization.gpu,clocks.sm \
        --format=csv,noheader,nounits -lms 100 > "$work/job_${cfg}_smi.csv" 2> /dev/null &
      smi_pid=$!
    fi
    "$B/bin/launch" "${args[@]}" > "$work/job_$cfg.out" 2>&1 || rc=$?
    if [[ -n "$smi_pid" ]]; then
      kill "$smi_pid" 2> /dev/null
      wait "$smi_pid" 2> /dev/null
      gpu_seen="$(sort -t, -k2 -n "$work/job_${cfg}_smi.csv" | awk -F', *' '
        $1 ~ /^[0-9]+$/ { n++; u += $1; if ($1 > 0) { b++; c[b] = $2 } }
        END { if (n) printf "GPU utilization %d%% on average (%d samples), SM clock median %s MHz while busy",
                u / n, n, b ? c[int((b + 1) / 2)] : "-" }')"
    fi
    if ((rc != 0)); then
      grep -vE '^(worker [0-9]+: PROGRESS|ps [0-9]+: )' "$work/job_$cfg.out" | tail -n 25
      echo "NOTE: bin/launch ($cfg) exit $rc"
      exit 1
    fi
    line="$(done_fields "$work/job_${cfg}_logs" |
      while read -r w secs data comp pull push verdict; do
        echo "$secs s (compute $comp pull $pull push $push)"
      done)"
    rate="$(grep '^SUMMARY ' "$work/job_$cfg.out" | tail -n 1 | sed -E 's/.*"examples_per_sec":([0-9.]+).*/\1/')"
    if [[ -z "$line" || -z "$rate" ]]; then
      echo "NOTE: $cfg: no DONE line or no SUMMARY line"
      exit 1
    fi
    echo "$cfg: $line, $rate examples/sec${gpu_seen:+; $gpu_seen}"
    fig+=" $cfg $line, $rate/s${gpu_seen:+ ($gpu_seen)};"
  done
  echo "$fig" >> "$work/figures.txt"
  echo "NOTE: ${fig#*:}"
}

# profile: the kernels of one fashion_cnn step at batch 1024, both sides.
profile() {
  local script="$B/tests/bench/gpu_kernel_profile.sh" rc
  if [[ "$dry_run" == 1 ]]; then
    not_run "bash $script --bundle=$B --model=fashion_cnn --batch_size=1024"
  fi
  export CUDA_VISIBLE_DEVICES="$gpu"
  bash "$script" --bundle="$B" --results="$work/profile" --model=fashion_cnn \
    --batch_size=1024 --python="${DOWNPOUR_PYTHON:-python3}" 2>&1 |
    grep -v '^==PROF==' | tail -n 60
  rc=${PIPESTATUS[0]}
  if ((rc == 3)); then  # The script found no ncu.
    echo "NOTE: not run: no ncu (Nsight Compute) on this host"
    exit 10
  fi
  ((rc == 0)) || { echo "NOTE: gpu_kernel_profile.sh exit $rc"; exit 1; }
  if [[ "$(grep -cE '^(downpour|pytorch) ' "$work/profile/kernels.txt" 2> /dev/null)" != 2 ]]; then
    echo "NOTE: no kernel table for both sides in profile/kernels.txt"
    exit 1
  fi
  grep -E '^(downpour|pytorch) ' "$work/profile/kernels.txt" |
    sed 's/^/profile: /' >> "$work/figures.txt"
  echo "NOTE: $(grep -E '^(downpour|pytorch) ' "$work/profile/kernels.txt" |
    sed -E 's/^([a-z]+) .*, ([0-9.]+ us per step).*/\1 \2/' | tr '\n' ';')"
}

# bench_compiled: PyTorch compiled with CUDA graphs (torch.compile's
# reduce-overhead mode, cudnn.benchmark on) against the Downpour figures of
# the bench steps before it: compute examples/sec (the compiled model is
# PyTorch's compute figure).
bench_compiled() {
  local py="${DOWNPOUR_PYTHON:-python3}" out="$work/bench_compiled" m batches spec rc
  local pt=(--device=cuda --gpu="$gpu" --warmup_steps=10 --min_steps=10
            --min_seconds=1 --cpu_threads=1 --cudnn_benchmark=1 --compile
            --compile_mode=reduce-overhead)
  if [[ "$dry_run" == 1 ]]; then
    not_run "$py $B/tests/bench/pytorch_fashion_cnn.py ${pt[*]} --model=fashion_cnn|resnet20"
  fi
  mkdir -p "$out"
  for m in fashion_cnn resnet20; do
    [[ -s "$work/bench_$m/downpour.json" ]] ||
      { echo "NOTE: bench_$m must run first (its downpour.json is the other side)"; exit 1; }
    batches=64,1024 spec="$m"  # Each batch size is a compilation.
    [[ "$m" == resnet20 ]] && batches=128 spec="$B/models/resnet20.prototxt"
    echo "== pytorch: $py pytorch_fashion_cnn.py ${pt[*]} --model=$m --batch_sizes=$batches"
    "$py" "$B/tests/bench/pytorch_fashion_cnn.py" "${pt[@]}" --model="$spec" \
      --batch_sizes="$batches" --json_out="$out/$m.json" 2>&1 | tail -n 6
    rc=${PIPESTATUS[0]}
    ((rc == 0)) || { echo "NOTE: compiled PyTorch ($m) exit $rc"; exit 1; }
  done
  local fig
  fig="$("$py" - "$work" <<'PYEOF'
import json, os, sys
work = sys.argv[1]
parts = []
for m in ("fashion_cnn", "resnet20"):
    d = json.load(open(os.path.join(work, "bench_" + m, "downpour.json")))
    p = json.load(open(os.path.join(work, "bench_compiled", m + ".json")))
    q = {r["batch_size"]: r for r in p["results"]}
    for r in d["results"]:
        b = r["batch_size"]
        if b in q:
            parts.append("%s b%d compute %.0f/%.0f=%.2f" % (
                m, b, r["compute_examples_per_sec"],
                q[b]["compute_examples_per_sec"],
                r["compute_examples_per_sec"] / q[b]["compute_examples_per_sec"]))
if not parts:
    sys.exit("no batch size measured by both sides")
print("bench_compiled (examples/sec downpour/pytorch compiled+CUDA graphs=ratio): "
      + ", ".join(parts))
PYEOF
)" || { echo "NOTE: the comparison failed"; exit 1; }
  echo "$fig" | tee -a "$work/figures.txt"
  echo "NOTE: ${fig:0:160}"
}

step_train_cuda() { train train_cuda cuda 2 "" "$train_examples"; }
step_train_cuda_2replicas() { train train_cuda_2replicas cuda 1 0,0 "$train_examples"; }
step_train_cpu() { train train_cpu cpu 2 "" "$cpu_train_examples"; }
step_bench_fashion_cnn() { bench fashion_cnn 64,256,1024; }
step_bench_resnet20() { bench resnet20 128; }

export B work results gpu epochs min_accuracy dry_run test_examples \
  train_examples cpu_train_examples
export -f host_info libs count_skips gpu_tests done_fields train bench not_run \
  step_train_cuda step_train_cuda_2replicas step_train_cpu \
  step_bench_fashion_cnn step_bench_resnet20 job_split profile bench_compiled
echo "run_gpu_checks: bundle $B, results in $results$([[ $dry_run == 1 ]] && echo " (dry run)")"
step host host_info
step libs libs
step gpu_tests gpu_tests
step train_cuda step_train_cuda
step train_cuda_2replicas step_train_cuda_2replicas
step train_cpu step_train_cpu
step bench_fashion_cnn step_bench_fashion_cnn
step bench_resnet20 step_bench_resnet20
step job_split job_split
step profile profile
step bench_compiled bench_compiled

echo
cat "$results/summary.txt" 2>/dev/null
! grep -q '^FAIL' "$results/summary.txt" 2>/dev/null
