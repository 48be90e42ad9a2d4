#!/usr/bin/env bash
# Jobs on the file formats: a Fashion-MNIST subset converted by
# convert_dataset into an image folder (PNG and JPEG mixed) and a
# safetensors file trains through `launch` (2 servers, 2 workers); then each
# bad input is a clear error naming the file or folder: a corrupt image (or,
# with --skip_bad_images, a count in the DONE lines and the SUMMARY), a
# missing split folder, an empty class folder, a tensor file of the wrong
# dtype, and labels outside the model's classes.
#
# Usage: image_data_test.sh <launch> <convert_dataset>
set -euo pipefail
launch="$(realpath "$1")"
convert="$(realpath "$2")"
data=/usr/share/datasets/fashion-mnist
if [[ ! -e "$data/train-labels-idx1-ubyte.gz" ]]; then
  echo "SKIP: dataset-fashion-mnist is not installed"
  exit 0
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/image_data"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$convert" --idx_dir="$data" --out_dir="$work/fm" --image_format=mixed \
  --max_train=1280 --max_test=500 > /dev/null

# run NAME ARGS...: a short job; its combined output in $work/NAME.out.
run() {
  local name="$1"; shift
  "$launch" --epochs=1 --log_dir="$work/$name.logs" "$@" \
    > "$work/$name.out" 2>&1
}
# expect_error NAME TEXT ARGS...: the job fails and says TEXT.
expect_error() {
  local name="$1" text="$2"; shift 2
  if run "$name" --servers=1 --workers=1 "$@"; then
    fail "$name: the job succeeded"
  fi
  grep -rqF -- "$text" "$work/$name.out" "$work/$name.logs" ||
    { tail -20 "$work/$name.out"; fail "$name: no '$text' in the output"; }
  echo "ok: $name fails naming $text"
}
accuracy() { grep '^SUMMARY ' "$1" | grep -o '"test_accuracy":[0-9.]*' | cut -d: -f2; }

for ds in image_folder safetensors; do
  run "$ds" --servers=2 --workers=2 --dataset="$ds" --data_dir="$work/fm" ||
    { tail -20 "$work/$ds.out"; fail "$ds job failed"; }
  acc="$(accuracy "$work/$ds.out")"
  awk -v a="$acc" 'BEGIN { exit !(a > 0.3) }' ||
    fail "$ds: test accuracy $acc after one epoch of 1,280 examples"
  grep -q '"bad_images":0' "$work/$ds.out" || fail "$ds: no bad_images in SUMMARY"
  echo "ok: $ds trains (test accuracy $acc)"
done

# A corrupt image: an error naming it, or skipped and counted.
bad="$(find "$work/fm/train" -name '*.png' | sort | sed -n 1p)"
head -c 40 "$bad" > "$work/cut.png" && mv "$work/cut.png" "$bad"
expect_error corrupt "$bad" --dataset=image_folder --data_dir="$work/fm"
run skip --servers=2 --workers=2 --dataset=image_folder \
  --data_dir="$work/fm" --skip_bad_images ||
  { tail -20 "$work/skip.out"; fail "the job with --skip_bad_images failed"; }
grep -q 'SUMMARY .*"bad_images":1' "$work/skip.out" ||
  fail "--skip_bad_images: SUMMARY does not count 1 bad image"
echo "ok: --skip_bad_images counts the corrupt image"

# Folders: a missing split, an empty class folder.
mkdir -p "$work/notest"
cp -r "$work/fm/train" "$work/notest/"
rm "$work/notest/train/0/$(basename "$bad")"
expect_error missing_split "$work/notest/test" --dataset=image_folder \
  --data_dir="$work/notest"
mkdir -p "$work/fm/train/empty_class"
expect_error empty_class "$work/fm/train/empty_class" \
  --dataset=image_folder --data_dir="$work/fm"

# Tensor files: the wrong dtype, labels out of range (python3's standard
# library only).
st() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
path, im_dtype, size, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
n = 640
images = bytes(n * 28 * 28 * size)
labels = bytes([label] * n)
hdr = json.dumps({"images": {"dtype": im_dtype, "shape": [n, 1, 28, 28],
                             "data_offsets": [0, len(images)]},
                  "labels": {"dtype": "U8", "shape": [n],
                             "data_offsets": [len(images), len(images) + n]}}).encode()
hdr += b" " * (-len(hdr) % 8)
open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + images + labels)
PY
}
mkdir -p "$work/st_dtype" "$work/st_label"
st "$work/st_dtype/train.safetensors" F16 2 1
expect_error wrong_dtype "images are F16" --dataset=safetensors \
  --data_dir="$work/st_dtype"
st "$work/st_label/train.safetensors" U8 1 12
cp "$work/st_label/train.safetensors" "$work/st_label/test.safetensors"
expect_error label_range "label 12 of example 0" --dataset=safetensors \
  --data_dir="$work/st_label"
echo PASS
