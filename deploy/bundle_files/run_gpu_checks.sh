#!/usr/bin/env bash
# run_gpu_checks.sh (from deploy/bundle_files/): the checks to run on a GPU
# host from an unpacked Downpour bundle. Each step's output goes to
# <results>/<step>.log and the screen; a failed step does not stop the next.
#
#   tar xzf downpour-bundle.tar.gz && downpour-bundle/run_gpu_checks.sh
#
# Steps:
#   host       uname, OS, glibc, CPUs, nvidia-smi -L and nvidia-smi, the
#              Python/PyTorch/cuDNN versions (information; fails only without
#              nvidia-smi or a GPU)
#   libs       bin/check_libs: every program's libraries resolve, the packed
#              ones from the bundle, cuDNN/cuBLAS from this host
#   gpu_tests  each GPU test program packed in libexec/gpu_tests.txt (with
#              DOWNPOUR_FASHION_MNIST_DIR at the packed data); a test that
#              skips (no usable GPU) counts as a failure here, and so does
#              a bundle with no GPU test programs at all
#   train_cuda 2 servers + 2 workers on the GPU through bin/launch, on the
#              packed Fashion-MNIST: SUMMARY line, test accuracy >= --min_accuracy
#   train_cuda_2replicas  (launchers with --gpus) 2 servers + 1 worker process
#              with 2 replicas on the GPU (--gpus=0,0)
#   train_cpu  2 servers + 2 workers on the CPU backend, for comparison
#              (--no_cpu_baseline skips it)
#   bench      bench/compute_bench.sh --device=cuda: Downpour's worker step
#              vs PyTorch on the GPU
#
# Options:
#   --gpu=N               device ordinal (default 0)
#   --epochs=N            training epochs per worker (default 3, as the
#                         README's train command)
#   --min_accuracy=X      (default 0.85 for >= 3 epochs, else 0.75)
#   --no_cpu_baseline     --skip_bench    --skip_train    --skip_tests
#   --results=DIR         default ./gpu_checks_<UTC time>
# Environment: DOWNPOUR_PYTHON (the Python with PyTorch), DOWNPOUR_CUDA_LIB_DIRS,
# DOWNPOUR_CUDA_HOME (see libexec/downpour_env.sh).
# Ends with "N passed, N failed" and packs <results> into <results>.tar.gz;
# exit status 0 when every step passed.
set -uo pipefail
self="$(readlink -f -- "${BASH_SOURCE[0]}")"
B="$(cd -- "$(dirname -- "$self")" && pwd -P)"

gpu=0 epochs=3 min_accuracy="" cpu_baseline=1 do_bench=1 do_train=1 do_tests=1
results="$PWD/gpu_checks_$(date -u +%Y%m%dT%H%M%SZ)"
for arg in "$@"; do
  case "$arg" in
    --gpu=*) gpu="${arg#*=}" ;;
    --epochs=*) epochs="${arg#*=}" ;;
    --min_accuracy=*) min_accuracy="${arg#*=}" ;;
    --no_cpu_baseline) cpu_baseline=0 ;;
    --skip_bench) do_bench=0 ;;
    --skip_train) do_train=0 ;;
    --skip_tests) do_tests=0 ;;
    --results=*) results="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "run_gpu_checks: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$min_accuracy" ]]; then
  min_accuracy=$([[ "$epochs" -ge 3 ]] && echo 0.85 || echo 0.75)
fi
mkdir -p "$results"
results="$(cd "$results" && pwd)"
passed=() failed=()

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with output to the screen and
# <results>/NAME.log, records PASS/FAIL.
step() {
  local name="$1" limit="$2"
  shift 2
  echo
  echo "=== $name: $*"
  local t0=$SECONDS rc
  # Steps are shell functions, so timeout runs them in a child bash.
  timeout --kill-after=30 "$limit" bash -c '"$@"' step "$@" 2>&1 |
    tee "$results/$name.log"
  rc=${PIPESTATUS[0]}
  if [[ $rc == 0 ]]; then
    passed+=("$name")
    echo "=== $name: PASS ($((SECONDS - t0)) s)"
  else
    failed+=("$name (exit $rc$([[ $rc == 124 ]] && echo ", timed out after ${limit} s"))")
    echo "=== $name: FAIL, exit $rc ($((SECONDS - t0)) s); log: $results/$name.log"
  fi
  return 0
}

host_info() {
  local ok=0
  echo "bundle: $(sed -n 2p "$B/MANIFEST")"
  uname -a
  (. /etc/os-release 2>/dev/null && echo "os: $PRETTY_NAME")
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null)  cpus: $(nproc)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || ok=1
    nvidia-smi || ok=1
    grep -q '^GPU ' <<< "$(nvidia-smi -L 2>/dev/null)" ||
      { echo "nvidia-smi lists no GPU"; ok=1; }
  else
    echo "no nvidia-smi on PATH: no NVIDIA driver?"
    ok=1
  fi
  local py="${DOWNPOUR_PYTHON:-python3}"
  "$py" - <<'PYEOF' || echo "(no PyTorch in $py: the bench's PyTorch half will fail; set DOWNPOUR_PYTHON)"
import torch
print("torch %s (CUDA %s), cuDNN %s, cuda available: %s" % (
    torch.__version__, torch.version.cuda,
    torch.backends.cudnn.version(), torch.cuda.is_available()))
PYEOF
  return $ok
}

gpu_tests() {
  local rel needs n=0 bad=0
  while IFS=$'\t' read -r rel needs; do
    [[ -n "$rel" ]] || continue
    n=$((n + 1))
    echo "--- $rel"
    local tmp
    tmp="$(mktemp -d "$results/test_tmp.XXXXXX")"
    if ! (
      DOWNPOUR_BUNDLE="$B" DOWNPOUR_BINARY="$rel" DOWNPOUR_NEEDS="$needs"
      DOWNPOUR_WANTS="$(cat "$B/libexec/cuda_wants.txt")"
      source "$B/libexec/downpour_env.sh" || exit 127
      cd "$tmp" && TEST_TMPDIR="$tmp" CUDA_VISIBLE_DEVICES="$gpu" \
        DOWNPOUR_FASHION_MNIST_DIR="$B/data/fashion-mnist" \
        "$B/libexec/$rel" 2>&1 | tee "$tmp/out.log"
      exit "${PIPESTATUS[0]}"
    ); then
      bad=$((bad + 1))
      echo "--- $rel: FAILED"
    elif grep -q '^\[  SKIPPED \]' "$tmp/out.log"; then
      # The GPU tests skip without a usable GPU; here that is a failure.
      bad=$((bad + 1))
      echo "--- $rel: tests were SKIPPED: no usable GPU seen (see above)"
    fi
  done < "$B/libexec/gpu_tests.txt"
  if ((n == 0)); then
    # Zero tests proves nothing about the GPU: a failure, not a pass.
    echo "FAIL: no GPU tests in this bundle (libexec/gpu_tests.txt is empty; bundle.sh packs the cc_tests whose name contains cuda or gpu, or that are tagged cuda or gpu)"
    return 1
  fi
  echo "gpu_tests: $n program(s), $bad failed"
  return $((bad > 0))
}

# train NAME DEVICE WORKERS [GPUS]: a 2-server run through bin/launch on the
# packed data; GPUS (launchers with --gpus only) lists each worker process's
# replicas' GPUs. CUDA runs see only GPU --gpu (CUDA_VISIBLE_DEVICES), as
# ordinal 0.
train() {
  local name="$1" device="$2" workers="$3" gpus="${4:-}" launch_help args=()
  launch_help="$("$B/bin/launch" --helpfull 2>&1)"
  args=(--servers=2 --workers="$workers" --epochs="$epochs" --seed=7
        --summary_json="$results/$name.json" --log_dir="$results/${name}_logs")
  # Launchers before the CUDA backend had no --device: pass it to the workers.
  if grep -qE '^[[:space:]]+--device[[:space:]]' <<< "$launch_help"; then
    args+=(--device="$device")
  else
    args+=(--worker_args=--device="$device")
  fi
  [[ -n "$gpus" ]] && args+=(--gpus="$gpus")
  [[ "$device" == cuda ]] && export CUDA_VISIBLE_DEVICES="$gpu"
  echo "${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES }bin/launch ${args[*]}"
  "$B/bin/launch" "${args[@]}" | tee "$results/$name.out"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || return "$rc"
  local summary acc
  summary="$(grep '^SUMMARY ' "$results/$name.out" | tail -n 1)"
  [[ -n "$summary" ]] || { echo "no SUMMARY line"; return 1; }
  acc="$(sed -E 's/.*"test_accuracy":([0-9.]+).*/\1/' <<< "$summary")"
  echo "$name: test accuracy $acc (need >= $min_accuracy)," \
       "$(sed -E 's/.*"examples_per_sec":([0-9.]+).*/\1/' <<< "$summary") examples/sec"
  if [[ "$device" == cuda ]] &&
     ! grep -qi 'cuda' "$results/${name}_logs"/worker* 2>/dev/null; then
    echo "note: the worker logs never mention cuda; check which backend ran"
  fi
  awk -v a="$acc" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }'
}

bench() {
  "$B/bench/compute_bench.sh" --device=cuda --gpu="$gpu" --out="$results/bench"
}

export B results gpu epochs min_accuracy
export -f host_info gpu_tests train bench
echo "run_gpu_checks: bundle $B, results in $results"
step host 120 host_info
step libs 120 "$B/bin/check_libs" --require_cuda
if [[ "$do_tests" == 1 ]]; then step gpu_tests 900 gpu_tests; fi
if [[ "$do_train" == 1 ]]; then
  step train_cuda 1200 train train_cuda cuda 2
  # Two replicas in one worker process on the same GPU, where the launcher
  # has --gpus.
  # (The help is captured first: grep -q would end the pipe early, and
  # pipefail would report launch's SIGPIPE.)
  launch_help="$("$B/bin/launch" --helpfull 2>&1)"
  if grep -qE '^[[:space:]]+--gpus[[:space:]]' <<< "$launch_help"; then
    step train_cuda_2replicas 1200 train train_cuda_2replicas cuda 1 0,0
  fi
  if [[ "$cpu_baseline" == 1 ]]; then step train_cpu 1200 train train_cpu cpu 2; fi
fi
if [[ "$do_bench" == 1 ]]; then step bench 1200 bench; fi

echo
for s in "${passed[@]+"${passed[@]}"}"; do echo "PASS $s"; done
for s in "${failed[@]+"${failed[@]}"}"; do echo "FAIL $s"; done
tar -C "$(dirname "$results")" -czf "$results.tar.gz" "$(basename "$results")" &&
  echo "run_gpu_checks: results packed in $results.tar.gz"
echo "${#passed[@]} passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
