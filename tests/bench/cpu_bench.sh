#!/usr/bin/env bash
# CPU compute comparison: fashion_cnn forward + backward per step
# (//tests/bench:compute_bench --device=cpu, its "compute" figures),
# Downpour's oneDNN and OpenBLAS backends against PyTorch (Debian's
# python3-torch, eager, float32) out of the box, with jemalloc preloaded,
# with jemalloc + channels_last, and with jemalloc tuned to keep its memory
# (no decay, no oversize arena, transparent huge pages: PyTorch still took
# ~1,600 page faults per batch-64 step with jemalloc's defaults) +
# channels_last, at each batch size and thread count, in the same run and
# interleaved (round r runs every configuration once). Prints two tables,
# examples per wall-clock second and per CPU-second of the process (at one
# thread: the speed of a core of its own, which a loaded machine distorts
# less), each with the ratios downpour(onednn) / pytorch.
#
#   bash tests/bench/cpu_bench.sh                     # ~4-5 min on 2 cores
#   BATCHES=64,256 THREADS="1" MIN_SECONDS=1 bash tests/bench/cpu_bench.sh
#
# Environment: BATCHES (64,256,1024), THREADS ("1 2"), ROUNDS (1),
# MIN_SECONDS (timed seconds per cell, 1.5), OUT_DIR (a temp folder; each
# run's JSON line is kept there). PyTorch runs under /usr/bin/python3 (the
# Debian interpreter, which has torch); jemalloc is libjemalloc2.
# The goal: downpour(onednn) >= 1.2 x PyTorch at its best, per
# core, at batch 64 and 256.
set -euo pipefail
cd "$(dirname "$0")/../.."

BATCHES=${BATCHES:-64,256,1024}
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-1}
MIN_SECONDS=${MIN_SECONDS:-1.5}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cpu_bench.XXXXXX)}
PY=/usr/bin/python3
JEMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
mkdir -p "$OUT_DIR"
# jemalloc keeping what it has: PyTorch frees and reallocates its activations
# every step, and jemalloc's defaults hand large ones back to the kernel.
TUNED_MALLOC_CONF="oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1,thp:always"

bazel build -c opt //tests/bench:compute_bench >/dev/null 2>&1 ||
  bazel build -c opt //tests/bench:compute_bench
BIN=bazel-bin/tests/bench/compute_bench

have_torch=1
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "cpu_bench: SKIP PyTorch: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
  have_torch=0
fi
[[ -n "$JEMALLOC" ]] || echo "cpu_bench: no libjemalloc.so.2 (apt-get install libjemalloc2): jemalloc rows skipped"

# run NAME THREADS CMD...: keeps the command's last (JSON) line.
run() {
  local name=$1 t=$2 r=$3
  shift 3
  echo "cpu_bench: round $r, $name, $t thread(s)" >&2
  "$@" | tail -1 >"$OUT_DIR/$name.t$t.r$r.json"
}

torch_cmd=("$PY" tests/bench/pytorch_fashion_cnn.py --device=cpu
           --batch_sizes="$BATCHES" --warmup_steps=3 --min_steps=3
           --min_seconds="$MIN_SECONDS")
for r in $(seq 1 "$ROUNDS"); do
  for t in $THREADS; do
    ours=("$BIN" --device=cpu --cpu_threads="$t" --batch_sizes="$BATCHES"
          --warmup_steps=3 --min_steps=3 --min_seconds="$MIN_SECONDS")
    run onednn "$t" "$r" "${ours[@]}" --cpu_backend=onednn
    run openblas "$t" "$r" "${ours[@]}" --cpu_backend=openblas
    if ((have_torch)); then
      run torch "$t" "$r" env OMP_NUM_THREADS="$t" "${torch_cmd[@]}" --cpu_threads="$t"
      if [[ -n "$JEMALLOC" ]]; then
        run torch_jemalloc "$t" "$r" env LD_PRELOAD="$JEMALLOC" OMP_NUM_THREADS="$t" \
          "${torch_cmd[@]}" --cpu_threads="$t"
        run torch_jemalloc_cl "$t" "$r" env LD_PRELOAD="$JEMALLOC" OMP_NUM_THREADS="$t" \
          "${torch_cmd[@]}" --cpu_threads="$t" --channels_last
        run torch_tuned_cl "$t" "$r" env LD_PRELOAD="$JEMALLOC" OMP_NUM_THREADS="$t" \
          MALLOC_CONF="$TUNED_MALLOC_CONF" "${torch_cmd[@]}" --cpu_threads="$t" --channels_last
      fi
    fi
  done
done

uptime_now=$(uptime)
"$PY" - "$OUT_DIR" "$uptime_now" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
cells = {}  # (impl, threads, batch, metric) -> [value per round]
for path in glob.glob(os.path.join(out, "*.json")):
    impl, t, _ = os.path.basename(path)[:-5].rsplit(".", 2)
    try:
        doc = json.loads(open(path).read())
    except ValueError:
        continue
    for row in doc["results"]:
        for metric in ("compute_examples_per_sec", "compute_examples_per_cpu_sec"):
            if metric in row:
                cells.setdefault((impl, int(t[1:]), row["batch_size"], metric),
                                 []).append(row[metric])
impls = ["onednn", "openblas", "torch", "torch_jemalloc", "torch_jemalloc_cl",
         "torch_tuned_cl"]
names = {"onednn": "ours oneDNN", "openblas": "ours OpenBLAS",
         "torch": "PyTorch", "torch_jemalloc": "PyTorch+jemalloc",
         "torch_jemalloc_cl": "PyTorch+jemalloc+CL",
         "torch_tuned_cl": "PyTorch+tuned jemalloc+CL"}
threads = sorted({k[1] for k in cells})
batches = sorted({k[2] for k in cells})
med = lambda k: statistics.median(cells[k]) if k in cells else None
for metric, title in (
        ("compute_examples_per_sec", "examples per wall-clock second"),
        ("compute_examples_per_cpu_sec", "examples per CPU-second of the process")):
    print("\n%s, forward + backward (median over rounds)" % title)
    print("| threads | batch | " + " | ".join(names[i] for i in impls) +
          " | oneDNN / PyTorch best | oneDNN / PyTorch stock |")
    print("|---" * (len(impls) + 4) + "|")
    for t in threads:
        for b in batches:
            vals = [med((i, t, b, metric)) for i in impls]
            torch_vals = [v for i, v in zip(impls, vals) if i.startswith("torch") and v]
            best = max(torch_vals) if torch_vals else None
            ours = vals[0]
            fmt = lambda v: "%.0f" % v if v else "-"
            ratio = lambda a, c: "%.2f" % (a / c) if a and c else "-"
            print("| %d | %d | %s | %s | %s |" % (
                t, b, " | ".join(fmt(v) for v in vals), ratio(ours, best),
                ratio(ours, vals[2])))
print("\nper core = at 1 thread; goal: oneDNN / PyTorch best >= 1.2 at batch 64 and 256")
print("load at the end: %s" % sys.argv[2].strip())
print("raw JSON lines: %s" % out)
EOF
