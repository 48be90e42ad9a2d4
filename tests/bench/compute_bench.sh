#!/usr/bin/env bash
# Runs the Downpour compute benchmark (//tests/bench:compute_bench) and its
# PyTorch twin (pytorch_fashion_cnn.py) one after the other on the same
# device, then prints both figures and the ratio downpour / pytorch per batch
# size, for the full worker step and for compute alone. The goal is a ratio
# >= 1.0. See compute_bench_main.cc for what a step contains; cpu_bench.sh
# runs the CPU grid (threads, backends, PyTorch's allocator settings).
#
#   bash tests/bench/compute_bench.sh                # in the repository (builds
#                                                    # compute_bench, bazel -c opt)
#   bench/compute_bench.sh                           # inside a bundle
#                                                    # (bin/compute_bench)
#   bash tests/bench/compute_bench.sh --device=cpu --batch_sizes=64 --min_seconds=1
#
# Options (the rest are passed to both programs):
#   --device=cuda|cpu  (default cuda)   --gpu=N (default 0)
#   --batch_sizes=64,256,1024           --warmup_steps=N --steps=N --min_seconds=S
#   --cpu_threads=N    both programs' CPU threads (default 1)
#   --cpu_backend=onednn|openblas, --cuda_blocking_sync, --cuda_deterministic,
#   --onednn_winograd=B,
#   --workspace_limit_mb=N
#                      Downpour only (compute_bench's flags)
#   --bench_bin=PATH   the compute_bench to run (default: the bundle's
#                      bin/compute_bench, else bazel-bin after `bazel build -c opt`)
#   --python=PATH      the Python with PyTorch (default $DOWNPOUR_PYTHON, python3)
#   --tf32             allow TF32 in both (compute_bench --tf32: cuBLAS
#                      TF32 tensor-op math, cuDNN default math; default: off
#                      in both, and NVIDIA_TF32_OVERRIDE=0 for compute_bench)
# PyTorch runs twice, with torch.backends.cudnn.benchmark off (heuristic
# algorithm choice, like Downpour) and on (timed search, possibly
# non-deterministic algorithms); both ratios are reported.
#   --skip_pytorch     Downpour only
#   --out=DIR          where the JSON files and logs go (default: a temp dir)
# The last line of stdout is
#   COMPUTE_BENCH {"device":..,"downpour":{...},"pytorch":{...}|null,
#                  "ratio_step":{"64":r,...},"ratio_compute":{...},
#                  "pytorch_benchmark":..,"ratio_step_benchmark":..,...}
# Exit status: 0 both ran (or Downpour ran with --skip_pytorch); 3 a program
# found no usable device; 1 anything else.
set -uo pipefail
HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"

device=cuda gpu=0 cpu_threads=1 bench_bin="" python="${DOWNPOUR_PYTHON:-python3}"
tf32=0 skip_pytorch=0 out="" pass=() downpour_only=()
for arg in "$@"; do
  case "$arg" in
    --device=*) device="${arg#*=}" ;;
    --gpu=*) gpu="${arg#*=}" ;;
    --cpu_threads=*) cpu_threads="${arg#*=}" ;;
    --bench_bin=*) bench_bin="${arg#*=}" ;;
    --python=*) python="${arg#*=}" ;;
    --tf32) tf32=1 ;;
    --skip_pytorch) skip_pytorch=1 ;;
    --out=*) out="${arg#*=}" ;;
    --batch_sizes=*|--warmup_steps=*|--steps=*|--min_seconds=*|--min_steps=*|--pool_batches=*|--seed=*)
      pass+=("$arg") ;;
    --cpu_backend=*|--cuda_blocking_sync|--cuda_blocking_sync=*|--cuda_deterministic|--cuda_deterministic=*|--onednn_winograd=*|--workspace_limit_mb=*)
      downpour_only+=("$arg") ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compute_bench.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$bench_bin" ]]; then
  if [[ -x "$HERE/../bin/compute_bench" ]]; then
    bench_bin="$HERE/../bin/compute_bench"          # bundle: bench/ next to bin/
  else
    repo="$(cd -- "$HERE/../.." && pwd)"
    echo "compute_bench.sh: building //tests/bench:compute_bench (bazel -c opt)" >&2
    (cd "$repo" && bazel build -c opt //tests/bench:compute_bench >&2) || exit 1
    bench_bin="$(cd "$repo" && bazel info -c opt bazel-bin 2>/dev/null)/tests/bench/compute_bench"
  fi
fi
[[ -x "$bench_bin" ]] || { echo "compute_bench.sh: not executable: $bench_bin" >&2; exit 1; }
if [[ -z "$out" ]]; then out="$(mktemp -d "${TMPDIR:-/tmp}/compute_bench.XXXXXX")"; fi
mkdir -p "$out"

common=(--device="$device" --gpu="$gpu" --cpu_threads="$cpu_threads"
        "${pass[@]+"${pass[@]}"}")
if [[ "$tf32" == 1 ]]; then
  py_tf32=(--tf32)
  tf32_env=()
  common_dp=(--tf32)
else
  py_tf32=()
  # Belt and braces: the CUDA backend promises plain fp32; this also switches
  # TF32 off in any cuBLAS/cuDNN call that would otherwise pick it.
  tf32_env=(NVIDIA_TF32_OVERRIDE=0)
  common_dp=()
fi

status=0
echo "== downpour: $bench_bin ${common[*]} ${downpour_only[*]+"${downpour_only[*]}"}"
env "${tf32_env[@]+"${tf32_env[@]}"}" "$bench_bin" "${common[@]}" \
  "${common_dp[@]+"${common_dp[@]}"}" "${downpour_only[@]+"${downpour_only[@]}"}" \
  --json_out="$out/downpour.json" 2>&1 | tee "$out/downpour.log"
rc=${PIPESTATUS[0]}
if [[ $rc != 0 ]]; then
  echo "compute_bench.sh: compute_bench failed (exit $rc)" >&2
  [[ $rc == 3 ]] && exit 3
  exit 1
fi

if [[ "$skip_pytorch" == 0 ]]; then
  for bm in 0 1; do
    json="$out/pytorch.json"
    [[ "$bm" == 1 ]] && json="$out/pytorch_benchmark.json"
    echo "== pytorch: $python $HERE/pytorch_fashion_cnn.py ${common[*]} ${py_tf32[*]+"${py_tf32[*]}"} --cudnn_benchmark=$bm"
    "$python" "$HERE/pytorch_fashion_cnn.py" "${common[@]}" \
      "${py_tf32[@]+"${py_tf32[@]}"}" --cudnn_benchmark="$bm" \
      --json_out="$json" 2>&1 | tee "$out/pytorch_bm$bm.log"
    rc=${PIPESTATUS[0]}
    if [[ $rc != 0 ]]; then
      echo "compute_bench.sh: the PyTorch reference (cudnn.benchmark=$bm) failed (exit $rc); Downpour's figures are above" >&2
      rm -f "$json"
      status=$([[ $rc == 3 ]] && echo 3 || echo 1)
    fi
  done
fi

# The comparison needs only the standard library.
python_for_report="$(command -v python3 || echo "$python")"
"$python_for_report" - "$out/downpour.json" "$out/pytorch.json" \
    "$out/pytorch_benchmark.json" <<'PYEOF'
import json, os, sys
d = json.load(open(sys.argv[1]))
def load(path):
    return json.load(open(path)) if os.path.exists(path) else None
variants = [("cudnn.benchmark off", load(sys.argv[2])),
            ("cudnn.benchmark on", load(sys.argv[3]))]
summary = {"device": d["device"], "downpour": d}
for label, p in variants:
    by_batch = {r["batch_size"]: r for r in (p["results"] if p else [])}
    print()
    print("fashion_cnn worker step on %s: downpour vs pytorch (%s) (examples/sec; ratio = downpour / pytorch, goal >= 1.0)" % (d["device"], label))
    print("TF32: downpour %s, pytorch %s" % ("on" if d.get("tf32") else "off",
          ("on" if p.get("tf32") else "off") if p else "-"))
    if p:
        print("pytorch %s, cuDNN %s, %s" % (p.get("torch"), p.get("cudnn"), p["device"]))
    hdr = "%6s | %14s %14s %7s | %14s %14s %7s" % (
        "batch", "downpour step", "pytorch step", "ratio",
        "downpour comp", "pytorch comp", "ratio")
    print(hdr)
    print("-" * len(hdr))
    ratio_step, ratio_compute = {}, {}
    for r in d["results"]:
        b = r["batch_size"]
        q = by_batch.get(b)
        if q:
            rs = r["step_examples_per_sec"] / q["step_examples_per_sec"]
            rc = r["compute_examples_per_sec"] / q["compute_examples_per_sec"]
            ratio_step[str(b)] = round(rs, 3)
            ratio_compute[str(b)] = round(rc, 3)
            print("%6d | %14.1f %14.1f %7.2f | %14.1f %14.1f %7.2f" % (
                b, r["step_examples_per_sec"], q["step_examples_per_sec"], rs,
                r["compute_examples_per_sec"], q["compute_examples_per_sec"], rc))
        else:
            print("%6d | %14.1f %14s %7s | %14.1f %14s %7s" % (
                b, r["step_examples_per_sec"], "-", "-",
                r["compute_examples_per_sec"], "-", "-"))
    below = [b for b, r in ratio_step.items() if r < 1.0]
    if p:
        print("goal (step ratio >= 1.0): %s" % ("met at every batch size" if not below
              else "NOT met at batch size(s) " + ", ".join(below)))
    key = "" if label.endswith("off") else "_benchmark"
    summary["pytorch" + key] = p
    summary["ratio_step" + key] = ratio_step
    summary["ratio_compute" + key] = ratio_compute
print("COMPUTE_BENCH " + json.dumps(summary, separators=(",", ":")))
PYEOF
echo "compute_bench.sh: results in $out" >&2
exit $status
