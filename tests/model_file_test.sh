#!/usr/bin/env bash
# Models as files, end to end: a user-written spec with a residual sum, a
# branch-and-concat block, batch norm, average pooling and dropout
# (tests/model_files/user_net.prototxt) trains on Fashion-MNIST through
# `launch --model=PATH` with 2 servers and 2 workers; the saved file loads
# into the same network written by hand in PyTorch
# (tests/model_files/torch_user_net.py, Debian's torch) and gives the
# launcher's test accuracy to within 0.002. Then --init_from continues from
# that file, and each kind of bad spec stops launch before any process
# starts, with exit code 2 and an error naming the layer.
#
# A worker started by hand with a model that does not take the data set's
# images stops before contacting any server.
#
# Usage: model_file_test.sh <launch> <user_net.prototxt> <torch_user_net.py> <ps_worker>
set -euo pipefail
launch="$(realpath "$1")"
spec="$(realpath "$2")"
torch_net="$(realpath "$3")"
ps_worker="$(realpath "$4")"
data=/usr/share/datasets/fashion-mnist
if [[ ! -e "$data/train-labels-idx1-ubyte.gz" ]]; then
  echo "SKIP: dataset-fashion-mnist is not installed"
  exit 0
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/model_file"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# The launcher's final evaluation covers the whole test set (10,000).
test_n=10000
job=(--servers=2 --workers=2 --epochs=3 --max_train_examples=12000
     --model="$spec")
"$launch" "${job[@]}" --log_dir="$work/logs" \
  --save_params="$work/user_net.safetensors" > "$work/train.out" 2>&1 || {
  tail -30 "$work/train.out"; fail "launch exited $?"; }
summary="$(grep '^SUMMARY ' "$work/train.out" | tail -1 | cut -d' ' -f2-)"
[[ -n "$summary" ]] || { tail -20 "$work/train.out"; fail "no SUMMARY line"; }
acc="$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["test_accuracy"])' "$summary")"
echo "downpour: test_accuracy=$acc on $test_n examples"
# This small global-pooling net learns slowly: PyTorch alone (Adam 0.001,
# batch 64) reaches 0.63 and 0.70 after one and two such epochs.
awk -v a="$acc" 'BEGIN { exit !(a >= 0.60) }' ||
  fail "test accuracy $acc after 3 epochs of 12,000 examples (want >= 0.60)"

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  line="$(/usr/bin/python3 "$torch_net" "$work/user_net.safetensors" "$data" $test_n)" ||
    fail "PyTorch could not evaluate the saved file: $line"
  echo "pytorch: $line"
  tacc="${line#torch_accuracy=}"; tacc="${tacc%% *}"
  awk -v a="$acc" -v b="$tacc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.002) }' ||
    fail "PyTorch's accuracy $tacc differs from Downpour's $acc by more than 0.002"
else
  echo "note: Debian's python3-torch is missing; the PyTorch comparison is skipped"
fi

# --init_from: a second job starts from the saved parameters, so its first
# logged loss is well below a fresh start's (ln 10 = 2.30).
"$launch" --servers=1 --workers=1 --epochs=1 --max_train_examples=640 \
  --model="$spec" \
  --init_from="$work/user_net.safetensors" --log_every=1 \
  --log_dir="$work/logs2" > "$work/init.out" 2>&1 || {
  tail -30 "$work/init.out"; fail "launch --init_from exited $?"; }
grep -q "initial parameters from $work/user_net.safetensors" "$work"/logs2/worker_0.log ||
  fail "worker 0 did not start from --init_from"
# A file of another model: the first mismatching tensor is named.
rc=0
"$launch" --servers=1 --workers=1 --epochs=1 --max_train_examples=64 \
  --init_from="$work/user_net.safetensors" --log_dir="$work/logs3" \
  > "$work/init_bad.out" 2>&1 || rc=$?
((rc != 0)) || fail "--init_from with another model's file succeeded"
grep -rqE 'conv[12]\.weight' "$work/init_bad.out" "$work/logs3" ||
  fail "the --init_from mismatch does not name the tensor"

# Bad specs: launch refuses before starting anything.
bad() {  # name, expected text, spec body
  local name="$1" want="$2" body="$3"
  printf 'name: "%s"\ninput { channels: 1 height: 28 width: 28 classes: 10 }\n%s\n' \
    "$name" "$body" > "$work/$name.prototxt"
  local rc=0
  "$launch" --servers=1 --workers=1 --model="$work/$name.prototxt" \
    --log_dir="$work/bad_$name" > "$work/$name.out" 2>&1 || rc=$?
  ((rc == 2)) || { cat "$work/$name.out"; fail "$name: exit code $rc, want 2"; }
  grep -q -- "$want" "$work/$name.out" || {
    cat "$work/$name.out"; fail "$name: the error does not say '$want'"; }
  [[ ! -e "$work/bad_$name/ps_0.log" ]] || fail "$name: a server was started"
  echo "ok: $name: $(head -1 "$work/$name.out")"
}
fc='layer { name: "fc" dense { out_features: 10 } }'
bad syntax "syntax.prototxt:[0-9]" 'layer { name: "c1" conv { out_channels: 4 kernel: 3 }
layer { name: "fc" dense { out_features: 10 } }'
bad unknown_kind '"sig"' "layer { name: \"sig\" sigmoid {} }
$fc"
bad duplicate '"c1"' "layer { name: \"c1\" conv { out_channels: 4 kernel: 3 } }
layer { name: \"c1\" conv { out_channels: 4 kernel: 3 } }
$fc"
bad forward_reference '"later"' "layer { name: \"a\" relu {} inputs: \"later\" }
layer { name: \"later\" relu {} inputs: \"input\" }
$fc"
bad add_shapes '"sum"' "layer { name: \"c1\" conv { out_channels: 4 kernel: 3 } }
layer { name: \"sum\" add {} inputs: \"c1\" inputs: \"input\" }
$fc"
bad concat_spatial '"cat"' "layer { name: \"p\" max_pool { kernel: 2 } }
layer { name: \"cat\" concat {} inputs: \"p\" inputs: \"input\" }
$fc"
bad big_kernel '"c1"' "layer { name: \"c1\" conv { out_channels: 4 kernel: 40 } }
$fc"
bad last_layer_classes '"fc"' 'layer { name: "fc" dense { out_features: 12 } }'
printf 'name: "twelve"\ninput { channels: 1 height: 28 width: 28 classes: 12 }\nlayer { name: "fc" dense { out_features: 12 } }\n' > "$work/twelve.prototxt"
rc=0
"$launch" --servers=1 --workers=1 --model="$work/twelve.prototxt" \
  --log_dir="$work/bad_twelve" > "$work/twelve.out" 2>&1 || rc=$?
((rc == 2)) && grep -q "12 classes" "$work/twelve.out" ||
  { cat "$work/twelve.out"; fail "a 12-class model on Fashion-MNIST was not refused"; }
echo "ok: data classes: $(head -1 "$work/twelve.out")"
# By hand, with no server at the address: refused at once, exit code 2.
rc=0
timeout 60 "$ps_worker" --model=cifar_vgg --ps_hosts=127.0.0.1:1 \
  --worker_index=0 --num_workers=1 > "$work/mismatch.out" 2>&1 || rc=$?
((rc == 2)) && grep -q "takes 3x32x32 inputs.*1x28x28 images" "$work/mismatch.out" ||
  { cat "$work/mismatch.out"; fail "ps_worker --model=cifar_vgg on Fashion-MNIST: exit $rc"; }
echo "ok: ps_worker: $(grep -m1 'takes 3x32x32' "$work/mismatch.out")"
echo "PASS"
