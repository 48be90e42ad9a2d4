#!/usr/bin/python3
"""Builds a torch.nn.Module from a Downpour model spec (models/README.md).

The module's submodules are named like the spec's layers, so the state_dict
names and shapes are those of a Downpour safetensors file (--save_params):
load_state_dict(..., strict=False) leaves only `num_batches_tracked` missing.
Every activation stays N x C x H x W as in Downpour; a dense layer flattens
its input (torch.flatten(x, 1)) and its output is viewed as N x out x 1 x 1,
and forward() returns the last layer's output flattened to N x classes.

Layers and their modules:
  conv            nn.Conv2d(in, out_channels, kernel, stride, padding, bias=bias)
  batch_norm      nn.BatchNorm2d(C, eps, momentum) -- on a C x 1 x 1 activation
                  (after dense or global_avg_pool) the same as nn.BatchNorm1d
                  on the flattened N x C: same tensors, same statistics
  relu            nn.ReLU()
  max_pool        nn.MaxPool2d(kernel, stride, padding)
  avg_pool        nn.AvgPool2d(kernel, stride, padding)  (count_include_pad)
  global_avg_pool nn.AdaptiveAvgPool2d(1)
  dense           nn.Linear(C*H*W of its input, out_features, bias=bias)
  dropout         nn.Dropout(rate)
  add, concat     no module: a sum, torch.cat(dim=1) in forward()

Works with PyTorch 1.13 (Debian's python3-torch) and current PyTorch; needs
no protobuf package (a small parser of the text format is below). The shape
checks here are the few the builder needs; the full ones are the C++
resolver's (worker/nn/model_spec.h).

  python3 tools/spec_to_torch.py models/resnet20.prototxt
  python3 tools/spec_to_torch.py SPEC --check model.safetensors
  python3 tools/spec_to_torch.py SPEC --tensors   # "tensor NAME D0,D1,..." lines

As a library: `build_module(parse_spec(open(path).read()))`.
"""
import argparse
import json
import os
import re
import struct
import sys

# ---- Text format -------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fF]?)
  | (?P<ident>[-+]?[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}<>\[\]:;,])
""", re.VERBOSE)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"',
            "a": "\a", "b": "\b", "f": "\f", "v": "\v", "?": "?"}


class SpecError(ValueError):
    """A spec that cannot be parsed or built; the message names the place."""


def _unquote(tok):
    out, body, i = [], tok[1:-1], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n in _ESCAPES:
                out.append(_ESCAPES[n]); i += 2; continue
            m = re.match(r"[0-7]{1,3}", body[i + 1:])
            if m:
                out.append(chr(int(m.group(), 8))); i += 1 + len(m.group()); continue
            m = re.match(r"x[0-9a-fA-F]{1,2}", body[i + 1:])
            if m:
                out.append(chr(int(m.group()[1:], 16))); i += 1 + len(m.group()); continue
        out.append(c); i += 1
    return "".join(out)


def _tokens(text, source):
    line, pos = 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SpecError(f"{source}:{line}: unexpected character {text[pos]!r}")
        kind, value = m.lastgroup, m.group()
        if kind != "ws":
            yield kind, value, line
        line += value.count("\n")
        pos = m.end()
    yield "end", "", line


def _scalar(kind, value, source, line):
    if kind == "str":
        return _unquote(value)
    if kind == "num":
        v = value.rstrip("fF") if not value.lower().startswith(("0x", "-0x", "+0x")) else value
        try:
            return int(v, 0)
        except ValueError:
            return float(v)
    low = value.lower()
    if value in ("true", "True", "t"):
        return True
    if value in ("false", "False", "f"):
        return False
    if low.lstrip("-+") in ("inf", "infinity", "nan"):
        return float(low)
    raise SpecError(f"{source}:{line}: expected a value, got {value!r}")


def parse_text_format(text, source="<spec>"):
    """Protobuf text format into nested dicts: field name -> list of values
    (a message is a dict). No schema: every field may repeat."""
    toks = _tokens(text, source)
    cur = [next(toks)]

    def advance():
        cur[0] = next(toks)

    def message(close):
        msg = {}
        while True:
            kind, value, line = cur[0]
            if kind == "end" or (kind == "punct" and value in "}>"):
                want = close or ""
                if value != want:
                    raise SpecError(f"{source}:{line}: expected {want or 'end of file'!r}, "
                                    f"got {value or 'end of file'!r}")
                if close:
                    advance()
                return msg
            if kind != "ident":
                raise SpecError(f"{source}:{line}: expected a field name, got {value!r}")
            name = value
            advance()
            colon = cur[0][:2] == ("punct", ":")
            if colon:
                advance()
            for v in values(colon, line):
                msg.setdefault(name, []).append(v)
            if cur[0][0] == "punct" and cur[0][1] in ";,":
                advance()

    def value(colon, line):
        kind, val, vline = cur[0]
        if kind == "punct" and val in "{<":
            advance()
            return message("}" if val == "{" else ">")
        if not colon:
            raise SpecError(f"{source}:{vline}: expected ':' or '{{' after a field name")
        if kind == "str":
            s = ""
            while cur[0][0] == "str":  # Adjacent strings concatenate.
                s += _unquote(cur[0][1])
                advance()
            return s
        if kind in ("num", "ident"):
            advance()
            return _scalar(kind, val, source, vline)
        raise SpecError(f"{source}:{vline}: expected a value, got {val or 'end of file'!r}")

    def values(colon, line):
        if cur[0][:2] == ("punct", "["):
            advance()
            out = []
            while cur[0][:2] != ("punct", "]"):
                out.append(value(True, line))
                if cur[0][:2] == ("punct", ","):
                    advance()
                elif cur[0][:2] != ("punct", "]"):
                    raise SpecError(f"{source}:{cur[0][2]}: expected ',' or ']'")
            advance()
            return out
        return [value(colon, line)]

    return message(None)


# ---- Specs -------------------------------------------------------------------

KINDS = ("conv", "batch_norm", "relu", "max_pool", "avg_pool", "dense",
         "dropout", "add", "concat", "global_avg_pool")


def _one(msg, field, default=None):
    v = msg.get(field)
    return v[-1] if v else default


def parse_spec(text, source="<spec>"):
    """A spec's text into {"name", "input": (c, h, w, classes), "layers":
    [{"name", "kind", "inputs", "cfg"}]} with proto defaults applied."""
    raw = parse_text_format(text, source)
    inp = _one(raw, "input", {})
    dims = tuple(_one(inp, f, 0) for f in ("channels", "height", "width", "classes"))
    layers = []
    for i, l in enumerate(raw.get("layer", [])):
        name = _one(l, "name", "")
        kinds = [k for k in l if k in KINDS]
        unknown = [k for k in l if k not in KINDS + ("name", "inputs")]
        if unknown or len(kinds) != 1:
            raise SpecError(f"{source}: layer {name or '#%d' % (i + 1)!r}: needs exactly one "
                            f"kind of {', '.join(KINDS)}; has {', '.join(kinds + unknown) or 'none'}")
        kind = kinds[0]
        cfg = _one(l, kind, {})
        layers.append({"name": name, "kind": kind, "inputs": list(l.get("inputs", [])),
                       "cfg": {k: _one(cfg, k) for k in cfg}})
    return {"name": _one(raw, "name", ""), "input": dims, "layers": layers}


def build_module(spec, source="<spec>"):
    """A torch.nn.Module for a parsed spec (parse_spec)."""
    import torch
    from torch import nn

    class SpecModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.spec_name = spec["name"]
            self.graph = []  # (name, kind, input names)
            c, h, w, _ = spec["input"]
            shapes = {"input": (c, h, w)}
            prev = "input"
            for layer in spec["layers"]:
                name, kind, cfg = layer["name"], layer["kind"], layer["cfg"]
                ins = layer["inputs"] or [prev]
                where = f"{source}: layer {name!r}"
                if not name or name in shapes or hasattr(self, name):
                    raise SpecError(f"{where}: empty, duplicate or reserved name")
                missing = [i for i in ins if i not in shapes]
                if missing:
                    raise SpecError(f"{where}: unknown or later input {missing[0]!r}")
                (ic, ih, iw) = shapes[ins[0]]
                module = None
                if kind in ("conv", "max_pool", "avg_pool"):
                    k = cfg.get("kernel") or 0
                    s = cfg.get("stride") or (1 if kind == "conv" else k)
                    p = cfg.get("padding") or 0
                    if k < 1 or s < 1 or k > ih + 2 * p or k > iw + 2 * p:
                        raise SpecError(f"{where}: bad kernel {k}, stride {s} or padding {p}")
                    oh, ow = (ih + 2 * p - k) // s + 1, (iw + 2 * p - k) // s + 1
                    if kind == "conv":
                        oc = cfg.get("out_channels") or 0
                        module = nn.Conv2d(ic, oc, k, s, p, bias=cfg.get("bias", True))
                    else:
                        oc = ic
                        pool = nn.MaxPool2d if kind == "max_pool" else nn.AvgPool2d
                        module = pool(k, s, p)
                    out = (oc, oh, ow)
                elif kind == "batch_norm":
                    module = nn.BatchNorm2d(ic, eps=cfg.get("eps", 1e-5),
                                            momentum=cfg.get("momentum", 0.1))
                    out = (ic, ih, iw)
                elif kind == "relu":
                    module, out = nn.ReLU(), (ic, ih, iw)
                elif kind == "dropout":
                    module, out = nn.Dropout(cfg.get("rate", 0.5)), (ic, ih, iw)
                elif kind == "dense":
                    of = cfg.get("out_features") or 0
                    module = nn.Linear(ic * ih * iw, of, bias=cfg.get("bias", True))
                    out = (of, 1, 1)
                elif kind == "global_avg_pool":
                    module, out = nn.AdaptiveAvgPool2d(1), (ic, 1, 1)
                elif kind == "add":
                    if any(shapes[i] != shapes[ins[0]] for i in ins):
                        raise SpecError(f"{where}: add of different shapes")
                    out = shapes[ins[0]]
                else:  # concat
                    if any(shapes[i][1:] != (ih, iw) for i in ins):
                        raise SpecError(f"{where}: concat of different spatial sizes")
                    out = (sum(shapes[i][0] for i in ins), ih, iw)
                if module is not None:
                    self.add_module(name, module)
                shapes[name] = out
                self.graph.append((name, kind, ins))
                prev = name
            self.output_dims = shapes[prev]

        def forward(self, x):
            acts = {"input": x}
            y = x
            for name, kind, ins in self.graph:
                xs = [acts[i] for i in ins]
                if kind == "add":
                    y = xs[0]
                    for t in xs[1:]:
                        y = y + t
                elif kind == "concat":
                    y = torch.cat(xs, dim=1)
                elif kind == "dense":
                    y = getattr(self, name)(torch.flatten(xs[0], 1))
                    y = y.view(y.shape[0], -1, 1, 1)
                else:
                    y = getattr(self, name)(xs[0])
                acts[name] = y
            return torch.flatten(y, 1)

    return SpecModule()


def load_spec_file(path):
    with open(path, encoding="utf-8") as f:
        return parse_spec(f.read(), path)


# ---- safetensors -------------------------------------------------------------

_DTYPES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32"}


def read_safetensors(path):
    """{name: tensor} of a safetensors file (no safetensors package needed)."""
    import torch
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = bytearray(data[8 + n:])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        dtype = getattr(torch, _DTYPES[t["dtype"]])
        flat = (torch.frombuffer(body, dtype=dtype, count=(end - begin) // torch.tensor(
            [], dtype=dtype).element_size(), offset=begin) if end > begin
                else torch.empty(0, dtype=dtype))
        out[name] = flat.reshape(t["shape"]).clone()
    return out


def check_safetensors(module, path):
    """Loads a Downpour parameter file into the module: every tensor must
    match; only num_batches_tracked may be missing. Returns the tensor count."""
    state = read_safetensors(path)
    result = module.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(".num_batches_tracked")]
    if missing or result.unexpected_keys:
        raise SpecError(f"{path}: missing {missing}, unexpected {result.unexpected_keys}")
    return len(state)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", help="a model spec file (.prototxt)")
    ap.add_argument("--check", metavar="SAFETENSORS",
                    help="load a Downpour parameter file into the module")
    ap.add_argument("--tensors", action="store_true",
                    help="print 'tensor NAME D0,D1,...' per state_dict entry")
    args = ap.parse_args(argv)
    try:
        spec = load_spec_file(args.spec)
        module = build_module(spec, args.spec)
        if args.tensors:
            for name, t in module.state_dict().items():
                if not name.endswith(".num_batches_tracked"):
                    print(f"tensor {name} {','.join(str(d) for d in t.shape)}")
            return 0
        print(module)
        params = sum(p.numel() for p in module.parameters())
        print(f"{spec['name'] or os.path.basename(args.spec)}: {params} parameters")
        if args.check:
            import torch
            n = check_safetensors(module, args.check)
            module.eval()
            c, h, w, classes = spec["input"]
            with torch.no_grad():
                y = module(torch.zeros(2, c, h, w))
            if tuple(y.shape) != (2, classes):
                raise SpecError(f"{args.spec}: output {tuple(y.shape)}, want (2, {classes})")
            print(f"{args.check}: {n} tensors loaded; output N x {classes}")
    except (SpecError, OSError) as e:
        print(f"spec_to_torch: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
