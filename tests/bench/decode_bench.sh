#!/usr/bin/env bash
# Decode + augment throughput of the image-folder input pipeline against
# PyTorch's DataLoader with PIL and torchvision transforms, on the same
# files (Fashion-MNIST's 10,000 test images as PNG, then as JPEG) and the
# same thread counts, in one run. Prints one line per cell.
#
#   bash tests/bench/decode_bench.sh [threads...]     # default: 1 2
#
# The PyTorch side runs on Debian's python3-torch (/usr/bin/python3) with
# torchvision's pure-Python transforms from its wheel: TORCHVISION_PATH is a
# folder holding the unpacked torchvision package (made below from PyPI's
# torchvision 0.15.2 wheel when absent); set PYTHON to use another
# interpreter that has torch and torchvision.
set -euo pipefail
cd "$(dirname "$0")/../.."

threads=("$@"); [[ $# -eq 0 ]] && threads=(1 2)
work="${BENCH_DIR:-/tmp/downpour_decode_bench}"
python="${PYTHON:-/usr/bin/python3}"
tv="${TORCHVISION_PATH:-$work/torchvision}"
bazel build //deploy:convert_dataset //tests/bench:decode_bench >&2
if [[ ! -d "$tv/torchvision" ]]; then
  python3 -m pip download torchvision==0.15.2 --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux1_x86_64 -d "$work/wheel" >&2
  mkdir -p "$tv"
  "$python" -m zipfile -e "$work"/wheel/torchvision-0.15.2*.whl "$tv"
fi
for fmt in png jpeg; do
  if [[ ! -d "$work/$fmt/test" ]]; then
    bazel-bin/deploy/convert_dataset --out_dir="$work/$fmt" \
      --image_format="$fmt" --max_train=1 --write_safetensors=false >&2
  fi
done
for fmt in png jpeg; do
  for t in "${threads[@]}"; do
    echo "$fmt downpour $(bazel-bin/tests/bench/decode_bench \
      --decode_dir="$work/$fmt/test" --decode_threads="$t")"
    echo "$fmt pytorch  $(cd "$work" && PYTHONPATH="$tv" "$python" -W ignore \
      "$OLDPWD/tests/bench/torch_decode_bench.py" "$work/$fmt/test" \
      --threads "$t")"
  done
done
