#!/usr/bin/env bash
# Trains the larger built-in models on Fashion-MNIST through the launcher
# (//deploy:launch, 2 servers and 2 workers, async, the default optimizer
# and learning-rate rules, the oneDNN backend at one thread per worker),
# one model after the other, and prints each run's test accuracy and
# examples/sec from its SUMMARY line, as a markdown table.
#
#   bash tests/bench/train_models.sh                   # ~7 min on 2 cores
#   MODELS=resnet20 EPOCHS=1 TRAIN_EXAMPLES=6000 bash tests/bench/train_models.sh
#   bash tests/bench/train_models.sh --mode=sync       # extra launch flags
#
# Each model's default length keeps its run under 5 minutes on the 2-core
# development machine: resnet20 2 epochs of all 60,000 training examples
# (~3 min), inception_small 4 epochs (~4 min). The final evaluation is
# on the whole test set (10,000 examples), with batch norm's running
# statistics recomputed first (--bn_stats_examples, the launcher's default).
#
# Arguments are extra //deploy:launch flags added to every run.
# Environment: MODELS ("resnet20 inception_small"; built-in names or spec
# paths), EPOCHS and TRAIN_EXAMPLES (override the per-model lengths above;
# a model not listed there gets 1 epoch of 6,000), SERVERS (2), WORKERS (2),
# OUT_DIR (a temp folder: each run's output, logs and SUMMARY JSON), BIN_DIR
# (use launch, ps_server and ps_worker already built there,
# BIN_DIR/deploy/launch ...; default: built here and copied into OUT_DIR,
# so a build in this checkout during the runs cannot swap them).
set -euo pipefail
cd "$(dirname "$0")/../.."

MODELS=${MODELS:-"resnet20 inception_small"}
SERVERS=${SERVERS:-2}
WORKERS=${WORKERS:-2}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/train_models.XXXXXX)}
PY=/usr/bin/python3
mkdir -p "$OUT_DIR"

if [[ ! -e /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz ]] &&
   ! printf '%s\n' "$@" | grep -q -- '--data_dir'; then
  echo "train_models: no Fashion-MNIST in /usr/share/datasets/fashion-mnist (pass --data_dir=...)" >&2
  exit 2
fi

if [[ -z "${BIN_DIR:-}" ]]; then
  bazel build //deploy:launch //server:ps_server //worker:ps_worker >/dev/null 2>&1 ||
    bazel build //deploy:launch //server:ps_server //worker:ps_worker
  BIN_DIR="$OUT_DIR/bin"
  for b in deploy/launch server/ps_server worker/ps_worker; do
    mkdir -p "$BIN_DIR/$(dirname "$b")"
    cp -f "bazel-bin/$b" "$BIN_DIR/$b"
  done
fi
LAUNCH="$BIN_DIR/deploy/launch"

length() {  # model -> "epochs train_examples"
  local e t
  case "$1" in
    resnet20) e=2 t=60000 ;;
    inception_small) e=4 t=60000 ;;
    *) e=1 t=6000 ;;
  esac
  echo "${EPOCHS:-$e} ${TRAIN_EXAMPLES:-$t}"
}

rows=()
for m in $MODELS; do
  read -r epochs n <<<"$(length "$m")"
  tag=$(basename "$m" .prototxt)
  load=$(uptime | sed 's/.*load average: //')
  cmd=("$LAUNCH" --servers="$SERVERS" --workers="$WORKERS" --model="$m"
       --epochs="$epochs" --max_train_examples="$n" --log_dir="$OUT_DIR/logs_$tag"
       --summary_json="$OUT_DIR/$tag.summary.json" "$@")
  echo "train_models: $tag: ${cmd[*]} (load average $load)"
  rc=0
  "${cmd[@]}" >"$OUT_DIR/$tag.out" 2>&1 || rc=$?
  summary=$(grep '^SUMMARY ' "$OUT_DIR/$tag.out" | tail -1 | cut -d' ' -f2- || true)
  if ((rc != 0)) || [[ -z "$summary" ]]; then
    tail -20 "$OUT_DIR/$tag.out" >&2
    echo "train_models: $tag: launch exited $rc$([[ -n "$summary" ]] || echo ', no SUMMARY line')" >&2
    rows+=("| $tag | $epochs | $n | failed (exit $rc) | - | - | - | $load |")
    continue
  fi
  row=$("$PY" - "$summary" "$tag" "$epochs" "$n" "$load" <<'EOF'
import json, sys
s = json.loads(sys.argv[1])
tag, epochs, n, load = sys.argv[2:6]
print("| %s | %s | %s | %.4f | %.0f | %.1f | %.1f | %s |" % (
    tag, epochs, n, s["test_accuracy"], s["examples_per_sec"],
    s["training_seconds"], s["wall_seconds"], load))
EOF
  )
  echo "train_models: $tag: $row"
  rows+=("$row")
done

echo
echo "| model | epochs | train examples | test accuracy | examples/sec | training s | wall s | load average at start |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "servers $SERVERS, workers $WORKERS; outputs and logs: $OUT_DIR"
