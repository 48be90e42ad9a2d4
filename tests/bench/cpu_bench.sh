#!/usr/bin/env bash
# CPU compute comparison: one model's forward + backward per step
# (//tests/bench:compute_bench --device=cpu, its "compute" figures),
# Downpour's oneDNN and OpenBLAS backends against PyTorch running the same
# network (tests/bench/pytorch_fashion_cnn.py --model: the written-out
# fashion_cnn, or the module tools/spec_to_torch.py builds from the spec),
# at each batch size and thread count, in the same run and interleaved
# (round r runs every configuration once). Prints two tables, examples per
# wall-clock second and per CPU-second of the process (at one thread: the
# speed of a core of its own, which a loaded machine distorts less), each
# with the ratios downpour(onednn) / pytorch, then the per-core ratios
# (CPU-seconds, one thread) at batch 64 and 256 against every PyTorch
# configuration.
#
#   bash tests/bench/cpu_bench.sh       # fashion_cnn, ~10 min on 2 cores
#   BATCHES=64,256 THREADS="1" MIN_SECONDS=1 bash tests/bench/cpu_bench.sh
#   MODEL=resnet20 THREADS=1 ROUNDS=2 MIN_SECONDS=1 bash tests/bench/cpu_bench.sh  # ~7 min
#   MODEL=path/to/net.prototxt CONFIGS="onednn torch new" bash tests/bench/cpu_bench.sh
#
# The configurations (CONFIGS, space-separated, in the tables' order):
#   onednn, openblas    Downpour's backends (compute_bench --cpu_backend)
#   torch               Debian's python3-torch (/usr/bin/python3), eager,
#                       out of the box
#   torch_jemalloc      the same with jemalloc preloaded
#   torch_jemalloc_cl   jemalloc + channels_last (model and input NHWC,
#                       gradients set to None each step)
#   torch_tuned_cl      jemalloc tuned to keep its memory (no decay, no
#                       oversize arena, transparent huge pages: PyTorch still
#                       took ~1,600 page faults per batch-64 step of
#                       fashion_cnn with jemalloc's defaults) + channels_last
#   new, new_tuned_cl   the same two (stock; tuned jemalloc + channels_last)
#                       on the newest PyTorch: PY_NEW's torch
#   new_compile         PY_NEW, tuned jemalloc + torch.compile (inductor,
#                       which picks the convolutions' layouts itself; NCHW
#                       input measured faster than channels_last input for
#                       resnet20; compiled in the warm-up, ~40 s a batch size)
# Default: every one for MODEL=fashion_cnn; for other models onednn,
# openblas, torch, torch_tuned_cl, new, new_tuned_cl, new_compile. The new*
# rows are skipped (saying so) when PY_NEW cannot import torch >= 2.
#
# Environment: MODEL (fashion_cnn; a built-in name or a spec path, as
# --model takes), BATCHES (64,256,1024 for fashion_cnn, else 64,256),
# THREADS ("1 2"), ROUNDS (1), MIN_SECONDS (timed seconds per cell, 1.5),
# WARMUP_STEPS (3), CONFIGS (above), PY (/usr/bin/python3: Debian's
# interpreter, which has torch), PY_NEW (the first python3 on PATH when it is
# another interpreter), COMPUTE_BENCH (a compute_bench binary to measure;
# default: built here), OUT_DIR (a temp folder; each run's JSON line and a
# copy of the compute_bench measured are kept there). jemalloc is
# libjemalloc2.
# The goal: downpour(onednn) >= 1.2 x PyTorch at its best, per core, at
# batch 64 and 256.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=${MODEL:-fashion_cnn}
if [[ "$MODEL" == fashion_cnn ]]; then
  BATCHES=${BATCHES:-64,256,1024}
  CONFIGS=${CONFIGS:-"onednn openblas torch torch_jemalloc torch_jemalloc_cl torch_tuned_cl new new_tuned_cl new_compile"}
else
  BATCHES=${BATCHES:-64,256}
  CONFIGS=${CONFIGS:-"onednn openblas torch torch_tuned_cl new new_tuned_cl new_compile"}
fi
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-1}
MIN_SECONDS=${MIN_SECONDS:-1.5}
WARMUP_STEPS=${WARMUP_STEPS:-3}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cpu_bench.XXXXXX)}
PY=${PY:-/usr/bin/python3}
if [[ -z "${PY_NEW+x}" ]]; then
  PY_NEW=$(command -v python3 || true)
  [[ -n "$PY_NEW" && "$(readlink -f "$PY_NEW")" != "$(readlink -f "$PY")" ]] || PY_NEW=""
fi
JEMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
mkdir -p "$OUT_DIR"
# jemalloc keeping what it has: PyTorch frees and reallocates its activations
# every step, and jemalloc's defaults hand large ones back to the kernel.
TUNED_MALLOC_CONF="oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1,thp:always"

if [[ -z "${COMPUTE_BENCH:-}" ]]; then
  bazel build -c opt //tests/bench:compute_bench >/dev/null 2>&1 ||
    bazel build -c opt //tests/bench:compute_bench
  COMPUTE_BENCH=bazel-bin/tests/bench/compute_bench
fi
# A copy: a build in this checkout while the benchmark runs cannot swap the
# binary between rounds.
BIN="$OUT_DIR/compute_bench"
cp -f "$COMPUTE_BENCH" "$BIN"

# The configurations this machine can run; a skipped one says why.
torch_version() { "$1" -c 'import torch; print(torch.__version__)' 2>/dev/null; }
old_version=$(torch_version "$PY" || true)
new_version=""
if [[ -n "$PY_NEW" ]]; then
  new_version=$("$PY_NEW" -c 'import torch; assert hasattr(torch, "compile"); print(torch.__version__)' 2>/dev/null || true)
fi
configs=()
for c in $CONFIGS; do
  case "$c" in
    onednn | openblas) ;;
    torch | torch_jemalloc | torch_jemalloc_cl | torch_tuned_cl)
      if [[ -z "$old_version" ]]; then
        echo "cpu_bench: SKIP $c: $PY cannot import torch (apt-get install python3-torch)"
        continue
      fi ;;
    new | new_tuned_cl | new_compile)
      if [[ -z "$new_version" ]]; then
        echo "cpu_bench: SKIP $c: no PY_NEW with torch >= 2 (PY_NEW='$PY_NEW'; pip install torch there)"
        continue
      fi ;;
    *) echo "cpu_bench: unknown configuration '$c' in CONFIGS" >&2; exit 2 ;;
  esac
  if [[ "$c" == *jemalloc* || "$c" == *tuned* || "$c" == new_compile ]] && [[ -z "$JEMALLOC" ]]; then
    echo "cpu_bench: SKIP $c: no libjemalloc.so.2 (apt-get install libjemalloc2)"
    continue
  fi
  configs+=("$c")
done
echo "cpu_bench: model $MODEL, batches $BATCHES, threads $THREADS, rounds $ROUNDS;" \
  "PyTorch ${old_version:-none} ($PY), newest ${new_version:-none} (${PY_NEW:-none})"

# run NAME THREADS ROUND CMD...: keeps the command's last (JSON) line.
run() {
  local name=$1 t=$2 r=$3
  shift 3
  echo "cpu_bench: round $r, $name, $t thread(s)" >&2
  "$@" | tail -1 >"$OUT_DIR/$name.t$t.r$r.json"
}

for r in $(seq 1 "$ROUNDS"); do
  for t in $THREADS; do
    ours=("$BIN" --device=cpu --model="$MODEL" --cpu_threads="$t"
          --batch_sizes="$BATCHES" --warmup_steps="$WARMUP_STEPS" --min_steps=3
          --min_seconds="$MIN_SECONDS")
    torch_args=(tests/bench/pytorch_fashion_cnn.py --device=cpu --model="$MODEL"
                --batch_sizes="$BATCHES" --warmup_steps="$WARMUP_STEPS"
                --min_steps=3 --min_seconds="$MIN_SECONDS" --cpu_threads="$t")
    je=(env LD_PRELOAD="$JEMALLOC" OMP_NUM_THREADS="$t")
    tuned=(env LD_PRELOAD="$JEMALLOC" OMP_NUM_THREADS="$t" MALLOC_CONF="$TUNED_MALLOC_CONF")
    for c in "${configs[@]}"; do
      case "$c" in
        onednn) run "$c" "$t" "$r" "${ours[@]}" --cpu_backend=onednn ;;
        openblas) run "$c" "$t" "$r" "${ours[@]}" --cpu_backend=openblas ;;
        torch) run "$c" "$t" "$r" env OMP_NUM_THREADS="$t" "$PY" "${torch_args[@]}" ;;
        torch_jemalloc) run "$c" "$t" "$r" "${je[@]}" "$PY" "${torch_args[@]}" ;;
        torch_jemalloc_cl)
          run "$c" "$t" "$r" "${je[@]}" "$PY" "${torch_args[@]}" --channels_last ;;
        torch_tuned_cl)
          run "$c" "$t" "$r" "${tuned[@]}" "$PY" "${torch_args[@]}" --channels_last ;;
        new) run "$c" "$t" "$r" env OMP_NUM_THREADS="$t" "$PY_NEW" "${torch_args[@]}" ;;
        new_tuned_cl)
          run "$c" "$t" "$r" "${tuned[@]}" "$PY_NEW" "${torch_args[@]}" --channels_last ;;
        new_compile)
          run "$c" "$t" "$r" "${tuned[@]}" "$PY_NEW" "${torch_args[@]}" --compile ;;
      esac
    done
  done
done

uptime_now=$(uptime)
"$PY" - "$OUT_DIR" "$uptime_now" "$MODEL" "${old_version:-none}" "${new_version:-none}" \
  "${configs[@]}" <<'EOF'
import glob, json, os, statistics, sys
out, load, model, old_v, new_v = sys.argv[1:6]
impls = sys.argv[6:]
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
short = lambda v: ".".join(v.split("+")[0].split(".")[:2])  # 1.13.0a0 -> 1.13
old_s, new_s = short(old_v), short(new_v)
names = {"onednn": "ours oneDNN", "openblas": "ours OpenBLAS",
         "torch": "PyTorch %s" % old_s, "torch_jemalloc": "%s +jemalloc" % old_s,
         "torch_jemalloc_cl": "%s +jemalloc+CL" % old_s,
         "torch_tuned_cl": "%s +tuned jemalloc+CL" % old_s,
         "new": "PyTorch %s" % new_s, "new_tuned_cl": "%s +tuned jemalloc+CL" % new_s,
         "new_compile": "%s +tuned jemalloc+compile" % new_s}
torch_impls = [i for i in impls if i not in ("onednn", "openblas")]
stock = "torch" if "torch" in impls else ("new" if "new" in impls else None)
threads = sorted({k[1] for k in cells})
batches = sorted({k[2] for k in cells})
med = lambda k: statistics.median(cells[k]) if k in cells else None
fmt = lambda v: "%.0f" % v if v else "-"
ratio = lambda a, c: "%.2f" % (a / c) if a and c else "-"
print("\nmodel: %s" % model)
for metric, title in (
        ("compute_examples_per_sec", "examples per wall-clock second"),
        ("compute_examples_per_cpu_sec", "examples per CPU-second of the process")):
    print("\n%s, forward + backward (median over rounds)" % title)
    print("| threads | batch | " + " | ".join(names[i] for i in impls) +
          " | oneDNN / PyTorch best | oneDNN / PyTorch stock |")
    print("|---" * (len(impls) + 4) + "|")
    for t in threads:
        for b in batches:
            vals = {i: med((i, t, b, metric)) for i in impls}
            torch_vals = [vals[i] for i in torch_impls if vals[i]]
            best = max(torch_vals) if torch_vals else None
            ours = vals.get("onednn")
            print("| %d | %d | %s | %s | %s |" % (
                t, b, " | ".join(fmt(vals[i]) for i in impls), ratio(ours, best),
                ratio(ours, vals.get(stock))))
if 1 in threads and torch_impls and "onednn" in impls:
    metric = "compute_examples_per_cpu_sec"
    print("\nper core (1 thread, per CPU-second): oneDNN / each PyTorch configuration")
    print("| batch | " + " | ".join("/ " + names[i] for i in torch_impls) + " |")
    print("|---" * (len(torch_impls) + 1) + "|")
    for b in batches:
        if b not in (64, 256):
            continue
        ours = med(("onednn", 1, b, metric))
        print("| %d | %s |" % (b, " | ".join(
            ratio(ours, med((i, 1, b, metric))) for i in torch_impls)))
print("\nPyTorch versions: %s (PY), %s (PY_NEW)" % (old_v, new_v))
print("per core = at 1 thread; goal: oneDNN / PyTorch best >= 1.2 at batch 64 and 256")
print("load at the end: %s" % load.strip())
print("raw JSON lines: %s" % out)
EOF
