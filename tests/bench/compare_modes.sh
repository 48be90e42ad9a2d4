#!/usr/bin/env bash
# Async vs sync comparison: trains Fashion-MNIST on a local cluster (2
# servers) in every mode for every worker count, then prints a markdown table
# and draws test accuracy against training time.
#
#   bash tests/bench/compare_modes.sh                       # the full grid
#   EPOCHS=1 WORKERS="1 2" bash tests/bench/compare_modes.sh --max_train_examples=6000
#   MODES=async OUT_DIR=/tmp/cmp bash tests/bench/compare_modes.sh
#
# Modes: async (Downpour), async_sa (async + --staleness_aware),
# ssp (--mode=ssp --staleness=$STALENESS), sync (--mode=sync), each with the
# default learning-rate rules (deploy/lr_rules.h: Adam,
# sync's rate x W, async's beta1 lowered for W, 5% warm-up, cosine decay to 0
# at the job's end, random horizontal flips of the training images);
# async_const and sync_const (no rules: Adagrad at a
# constant 0.05 / 0.1, --lr_schedule=none); and pytorch_ddp (PyTorch
# DistributedDataParallel, gloo, W processes of one thread, jemalloc
# preloaded: same model, split, batch 64 and epochs, and by default the same
# rules: tests/bench/pytorch_ddp_fashion.py, $DDP_OPTIMIZER at $DDP_LR,
# --schedule=$DDP_SCHEDULE).
# Arguments are extra //deploy:launch flags added to every Downpour run.
# The default grid (10 epochs, W = 1, 2, 4, 8, 5 modes) needs hours of both
# cores of the 2-core development machine.
#
# Environment (defaults in brackets):
#   WORKERS ["1 2 4 8"] worker counts
#   MODES ["async async_sa ssp sync pytorch_ddp"]
#   EPOCHS [10]         epochs per worker      STALENESS [2]   ssp bound
#   DDP_OPTIMIZER [adam], DDP_LR [0.001], DDP_SCHEDULE [auto],
#   DDP_LABEL_SMOOTHING [0], DDP_FLIP [1] (the launcher's defaults: no
#                       label smoothing, random horizontal flips): PyTorch's
#                       optimizer and learning-rate rules
#   TRAIN_EXAMPLES [60000] train on a prefix (every run, PyTorch included)
#   EVAL_EVERY [10]     seconds between accuracy-curve evaluations
#   SERVERS [2]         parameter-server shards
#   OUT_DIR [/tmp/downpour-compare-<date>]
#   BAZEL_STARTUP []    bazel startup options, e.g. --output_base=/tmp/ob
#   BIN_DIR []          use launch, ps_server, ps_worker already built there
#                       (BIN_DIR/deploy/launch, ...) instead of building
#
# Output in $OUT_DIR: <mode>_w<W>.json (launch --summary_json), .csv (the
# accuracy curve), .out (the launcher's output), logs/<mode>_w<W>/ (every
# child's log), table.md, accuracy_vs_time.png (largest W) and
# accuracy_vs_time_w<W>.png (each W). A failed run is recorded as FAILED and
# the others still run; the exit code is 1 if any run failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

WORKERS=${WORKERS:-"1 2 4 8"}
MODES=${MODES:-"async async_sa ssp sync pytorch_ddp"}
EPOCHS=${EPOCHS:-10}
DDP_OPTIMIZER=${DDP_OPTIMIZER:-adam}
DDP_LR=${DDP_LR:-0.001}
DDP_SCHEDULE=${DDP_SCHEDULE:-auto}
DDP_LABEL_SMOOTHING=${DDP_LABEL_SMOOTHING:-0}
DDP_FLIP=${DDP_FLIP:-1}
TRAIN_EXAMPLES=${TRAIN_EXAMPLES:-60000}
JEMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
STALENESS=${STALENESS:-2}
EVAL_EVERY=${EVAL_EVERY:-10}
SERVERS=${SERVERS:-2}
OUT_DIR=${OUT_DIR:-/tmp/downpour-compare-$(date +%Y%m%d-%H%M%S)}
# Word splitting of startup options is intended.
# shellcheck disable=SC2206
BAZEL=(bazel ${BAZEL_STARTUP:-})

log() { echo "compare: $*"; }

mode_flags() {  # mode [W]; one launch argument per line
  case "$1" in
    async) echo "--mode=async" ;;
    async_sa) printf '%s\n' --mode=async --staleness_aware ;;
    ssp) printf '%s\n' --mode=ssp "--staleness=${STALENESS}" ;;
    sync) echo "--mode=sync" ;;
    async_const) printf '%s\n' --mode=async --lr_schedule=none --optimizer=adagrad --lr=0.05 ;;
    sync_const) printf '%s\n' --mode=sync --lr_schedule=none --optimizer=adagrad --lr=0.1 ;;
    pytorch_ddp) ;;
    *) return 1 ;;
  esac
}

for m in $MODES; do
  mode_flags "$m" >/dev/null || {
    echo "compare: unknown mode '$m' in MODES (valid: async async_sa ssp sync async_const sync_const pytorch_ddp)" >&2
    exit 2
  }
done

if [[ -n "${BIN_DIR:-}" ]]; then  # Prebuilt: BIN_DIR/{deploy,server,worker}/...
  BIN=$BIN_DIR
else
  "${BAZEL[@]}" build //deploy:launch //server:ps_server //worker:ps_worker || {
    echo "compare: bazel build failed" >&2
    exit 1
  }
  BIN=$("${BAZEL[@]}" info bazel-bin 2>/dev/null) || BIN=bazel-bin
fi
LAUNCH="$BIN/deploy/launch"
mkdir -p "$OUT_DIR/logs"
log "results in $OUT_DIR"

# --- Runs -------------------------------------------------------------------
trap 'echo "compare: interrupted" >&2; exit 130' INT TERM
failed_runs=0
for W in $WORKERS; do
  for m in $MODES; do
    name="${m}_w${W}"
    rm -f "$OUT_DIR/$name.json" "$OUT_DIR/$name.csv" "$OUT_DIR/$name.failed"
    mapfile -t flags < <(mode_flags "$m" "$W")
    cmd=("$LAUNCH" --servers="$SERVERS" --workers="$W" --epochs="$EPOCHS"
         --seed=7 --eval_every_s="$EVAL_EVERY" "${flags[@]}"
         --summary_json="$OUT_DIR/$name.json" --curve_csv="$OUT_DIR/$name.csv"
         --log_dir="$OUT_DIR/logs/$name" "$@")
    prefix=()
    ((TRAIN_EXAMPLES < 60000)) && prefix=(--max_train_examples="$TRAIN_EXAMPLES")
    cmd+=("${prefix[@]}")
    if [[ $m == pytorch_ddp ]]; then  # The tool users would pick.
      cmd=(env ${JEMALLOC:+LD_PRELOAD=$JEMALLOC} /usr/bin/python3
           tests/bench/pytorch_ddp_fashion.py --workers="$W" --epochs="$EPOCHS"
           --seed=7 --optimizer="$DDP_OPTIMIZER" --lr="$DDP_LR"
           --schedule="$DDP_SCHEDULE" --label_smoothing="$DDP_LABEL_SMOOTHING"
           $( ((DDP_FLIP)) && echo --flip)
           --summary_json="$OUT_DIR/$name.json" "${prefix[@]}")
    fi
    log "run $name: ${cmd[*]}"
    printf '%q ' "${cmd[@]}" > "$OUT_DIR/$name.cmd"
    # The full output goes to $name.out; the curve and the result are shown.
    "${cmd[@]}" 2>&1 | tee "$OUT_DIR/$name.out" |
      grep --line-buffered -E '^(curve:|launch: training done|launch: warning|SUMMARY)' |
      sed -u "s/^/  $name: /"
    rc=${PIPESTATUS[0]}
    if ((rc != 0)) || [[ ! -s "$OUT_DIR/$name.json" ]]; then
      echo "exit code $rc" > "$OUT_DIR/$name.failed"
      failed_runs=$((failed_runs + 1))
      log "run $name FAILED (exit code $rc); last lines of $OUT_DIR/$name.out:"
      tail -n 15 "$OUT_DIR/$name.out" | sed 's/^/    /'
    fi
  done
done

# --- Table ------------------------------------------------------------------
# One row per run, from the summary JSON (standard-library python only).
summary_row() {  # mode workers json
  /usr/bin/python3 - "$@" <<'EOF'
import json, sys
mode, workers, path = sys.argv[1:4]
s = json.load(open(path))
def num(key, fmt, missing="—"):
    v = s.get(key)
    if v is None or (key.startswith("time_to") and v < 0):
        return missing
    return fmt.format(v)
cells = [mode, workers, num("test_accuracy", "{:.4f}"),
         num("wall_seconds", "{:.1f}"), num("examples_per_sec", "{:.0f}"),
         num("time_to_85", "{:.1f}", "not reached"),
         num("time_to_88", "{:.1f}", "not reached"),
         num("staleness_mean", "{:.2f}"), num("staleness_max", "{:.0f}")]
print("| " + " | ".join(cells) + " |")
EOF
}

{
  echo "| mode | workers | test acc | wall s | examples/s | t→85% | t→88% | staleness mean | staleness max |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for W in $WORKERS; do
    for m in $MODES; do
      name="${m}_w${W}"
      if [[ -f "$OUT_DIR/$name.failed" ]] || ! summary_row "$m" "$W" "$OUT_DIR/$name.json" 2>/dev/null; then
        echo "| $m | $W | FAILED | — | — | — | — | — | — |"
      fi
    done
  done
  echo
  echo "${SERVERS} servers, epochs per worker: ${EPOCHS}, seed 7, ssp staleness ${STALENESS}," \
       "accuracy curve every ${EVAL_EVERY} s of training${*:+; extra flags: $*}."
  echo "t→85% / t→88%: training seconds until the first evaluation at or above that accuracy."
} > "$OUT_DIR/table.md"
echo
cat "$OUT_DIR/table.md"
echo

# --- Plots ------------------------------------------------------------------
if ! command -v gnuplot >/dev/null; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null; then SUDO=sudo; fi
  log "installing gnuplot-nox"
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gnuplot-nox; } ||
    log "warning: could not install gnuplot-nox"
fi

# plot_curves W PNG: one line per mode that left a curve for W workers.
plot_curves() {
  local W=$1 png=$2 term plots=() m csv
  for m in $MODES; do
    csv="$OUT_DIR/${m}_w${W}.csv"
    [[ -f "$OUT_DIR/${m}_w${W}.failed" || ! -s "$csv" ]] && continue
    plots+=("'$csv' using 1:2 every ::1 with linespoints lw 2 title '$m' noenhanced")
  done
  if ((${#plots[@]} == 0)); then
    log "no curves to plot for $W workers"
    return 0
  fi
  # pngcairo looks better; plain png (libgd) is the fallback.
  term="png size 900,600"
  if gnuplot -e "set terminal pngcairo" >/dev/null 2>&1; then
    term="pngcairo size 900,600"
  fi
  local joined
  joined=$(IFS=,; echo "${plots[*]}")
  gnuplot <<EOF || { log "warning: gnuplot failed for $png"; return 0; }
set terminal $term
set output '$png'
set datafile separator ','
set title "Fashion-MNIST test accuracy vs training time (${W} workers, ${SERVERS} servers)"
set xlabel 'training seconds'
set ylabel 'test accuracy'
set key bottom right
set grid
plot $joined
EOF
  log "plot: $png"
}

if command -v gnuplot >/dev/null; then
  # shellcheck disable=SC2086  # one worker count per line
  max_w=$(printf '%s\n' $WORKERS | sort -n | tail -n 1)
  plot_curves "$max_w" "$OUT_DIR/accuracy_vs_time.png"
  for W in $WORKERS; do
    plot_curves "$W" "$OUT_DIR/accuracy_vs_time_w${W}.png"
  done
else
  log "warning: no gnuplot; skipping the plots"
fi

log "table: $OUT_DIR/table.md"
if ((failed_runs > 0)); then
  log "$failed_runs run(s) FAILED"
  exit 1
fi
