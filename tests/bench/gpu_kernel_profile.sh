#!/usr/bin/env bash
# Per-kernel GPU times of Downpour's worker step (bin/compute_bench) and of
# the PyTorch twin (pytorch_fashion_cnn.py) on the same GPU, through Nsight
# Compute (one metric, gpu__time_duration.sum, clocks left alone), then the
# kernels of each side summed per step, largest first. Run on a GPU host
# from an unpacked bundle (docs/operations.md "GPU hosts"):
#
#   tests/bench/gpu_kernel_profile.sh --bundle=/tmp/dp/downpour-bundle \
#     --results="$OUT" --model=fashion_cnn --batch_size=1024
#
# Each program runs --warmup_steps=W and --steps=S (both phases of each:
# compute_bench's full step and compute alone; PyTorch's likewise), all of
# it profiled; the tables divide each kernel's total by the 2 * (2 + S)
# training steps both programs run (set-up kernels add a little).
#
# Options:
#   --bundle=DIR       the unpacked bundle (bin/compute_bench, tests/bench/)
#   --results=DIR      where ncu_downpour.csv, ncu_pytorch.csv and
#                      kernels.txt go (default $OUT)
#   --model=NAME       fashion_cnn or a models/NAME.prototxt (default
#                      fashion_cnn)
#   --batch_size=N     (default 1024)
#   --steps=S          (default 4)
#   --python=PATH      the Python with PyTorch (default python3)
# Exit status: 0 both profiled; 3 no ncu on this host; 1 a program failed;
# 2 bad arguments.
set -uo pipefail
bundle="" results="${OUT:-}" model=fashion_cnn batch=1024 steps=4 py=python3
for arg in "$@"; do
  case "$arg" in
    --bundle=*) bundle="${arg#*=}" ;;
    --results=*) results="${arg#*=}" ;;
    --model=*) model="${arg#*=}" ;;
    --batch_size=*) batch="${arg#*=}" ;;
    --steps=*) steps="${arg#*=}" ;;
    --python=*) py="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu_kernel_profile: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
[[ -n "$bundle" && -n "$results" ]] ||
  { echo "gpu_kernel_profile: --bundle and --results are required" >&2; exit 2; }
ncu="$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -n 1)"
[[ -x "$ncu" ]] || { echo "gpu_kernel_profile: no ncu on this host" >&2; exit 3; }
mkdir -p "$results"
spec="$model"
[[ "$model" == fashion_cnn ]] || spec="$bundle/models/$model.prototxt"
common=(--device=cuda --gpu=0 --batch_sizes="$batch" --warmup_steps=2
        --steps="$steps" --min_steps=1 --min_seconds=0 --cpu_threads=1)
prof=("$ncu" --csv --target-processes all --clock-control none
      --metrics gpu__time_duration.sum)
tag="${model}_b$batch"
echo "== ncu: downpour $tag"
NVIDIA_TF32_OVERRIDE=0 "${prof[@]}" --log-file "$results/ncu_downpour_$tag.csv" \
  "$bundle/bin/compute_bench" "${common[@]}" --model="$model" 2>&1 | tail -n 6
rc1=${PIPESTATUS[0]}
echo "== ncu: pytorch $tag"
"${prof[@]}" --log-file "$results/ncu_pytorch_$tag.csv" \
  "$py" "$bundle/tests/bench/pytorch_fashion_cnn.py" "${common[@]}" \
  --model="$spec" --cudnn_benchmark=0 2>&1 | tail -n 6
rc2=${PIPESTATUS[0]}
"$py" - "$results" "$tag" $((2 * (2 + steps))) <<'PYEOF' | tee -a "$results/kernels.txt"
import csv, collections, sys
results, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for side in ("downpour", "pytorch"):
    path = "%s/ncu_%s_%s.csv" % (results, side, tag)
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        print("%s %s: %s" % (side, tag, e)); continue
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print("%s %s: no kernels in %s" % (side, tag, path)); continue
    total, count = collections.Counter(), collections.Counter()
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        v *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
        name = row["Kernel Name"][:110]
        total[name] += v
        count[name] += 1
    s = sum(total.values())
    print("%s %s: %d kernels, %d launches, %.1f us per step (%d steps)"
          % (side, tag, len(total), sum(count.values()), s / n, n))
    for name, v in total.most_common(25):
        print("  %9.1f us/step %5.1f%%  x%-4.1f %s" % (v / n, 100 * v / s, count[name] / n, name))
PYEOF
[[ $rc1 == 0 && $rc2 == 0 ]]
