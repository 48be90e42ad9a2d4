#!/usr/bin/env bash
# tools/spec_to_torch.py against the C++ resolver: for every built-in spec
# the PyTorch module's state_dict (less num_batches_tracked) has the names,
# shapes and order of model_spec_info's tensors; a file written from it
# passes --check; the text-format parser reads what protobuf's does. Runs
# under /usr/bin/python3 (Debian's torch); prints "SKIP: ..." for the torch
# part where torch does not import there.
#   spec_to_torch_test.sh MODEL_SPEC_INFO SPEC_TO_TORCH_PY SPEC...
set -euo pipefail
info="$1"; tool="$2"; shift 2
py="${PYTHON:-/usr/bin/python3}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

# The parser, without torch.
"$py" - "$tool" <<'PYEOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("spec_to_torch", sys.argv[1])
s = importlib.util.module_from_spec(spec); spec.loader.exec_module(s)
m = s.parse_text_format('''# comment
name: "a\\"b" 'c'  # adjacent strings join
input: { channels: 1, height: 0x1c; width: 28 classes: 10 }
layer < name: "x" conv { out_channels: 4 kernel: 3 bias: false } inputs: ["input", "input"] >
layer { name: "y" batch_norm { eps: 1e-3 momentum: .5 } }
layer { name: "z" dropout { rate: 0.25f } }
''')
assert m["name"] == ['a"bc'], m["name"]
assert m["input"][0]["height"] == [28]
assert m["layer"][0]["inputs"] == ["input", "input"]
assert m["layer"][0]["conv"][0]["bias"] == [False]
assert m["layer"][1]["batch_norm"][0] == {"eps": [1e-3], "momentum": [0.5]}
assert m["layer"][2]["dropout"][0]["rate"] == [0.25]
for bad, line in (('name: "x"\nlayer { name: "a" conv { kernel: } }', 2),
                  ('layer {\n name: "a"\n', 3), ('a: "unterminated\n', 1)):
    try:
        s.parse_text_format(bad, "f.prototxt")
        raise AssertionError("no error for %r" % bad)
    except s.SpecError as e:
        assert str(e).startswith("f.prototxt:%d:" % line), str(e)
try:
    s.parse_spec('layer { name: "a" relu {} dense {} }', "f")
    raise AssertionError("two kinds accepted")
except s.SpecError as e:
    assert 'layer \'a\'' in str(e), str(e)
print("parser: OK")
PYEOF

if ! "$py" -c "import torch" 2>/dev/null; then
  echo "SKIP: torch does not import under $py; only the parser was tested"
  exit 0
fi
for spec in "$@"; do
  "$info" "$spec" | grep '^tensor ' >"$tmp/cc.txt"
  "$py" "$tool" "$spec" --tensors >"$tmp/py.txt"
  if ! diff "$tmp/cc.txt" "$tmp/py.txt"; then
    echo "FAIL: $spec: PyTorch's tensors differ from the resolver's" >&2
    exit 1
  fi
  # A file of the resolver's tensors (as --save_params writes them: float32,
  # no num_batches_tracked) loads with --check.
  "$py" - "$tool" "$spec" "$tmp/params.safetensors" <<'PYEOF'
import importlib.util, json, struct, sys, torch
spec = importlib.util.spec_from_file_location("spec_to_torch", sys.argv[1])
s = importlib.util.module_from_spec(spec); spec.loader.exec_module(s)
m = s.build_module(s.load_spec_file(sys.argv[2]))
header, blobs, off = {}, [], 0
for k, t in m.state_dict().items():
    if k.endswith("num_batches_tracked"):
        continue
    b = t.detach().float().contiguous().numpy().tobytes()
    header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header).encode()
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PYEOF
  out="$("$py" "$tool" "$spec" --check "$tmp/params.safetensors")"
  grep -q 'tensors loaded; output N x 10' <<<"$out" || { echo "FAIL: --check: $out" >&2; exit 1; }
  echo "$spec: $(tail -2 <<<"$out" | head -1)"
done
echo "spec_to_torch_test: OK"
