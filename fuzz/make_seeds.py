#!/usr/bin/python3
"""Writes the seed corpora of fuzz/ (small, valid or nearly valid inputs of
every kind each target reads). Run from the repository root:
    /usr/bin/python3 fuzz/make_seeds.py
The files are checked in; this script documents how they were made."""
import gzip
import json
import os
import struct


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def vfield(f, v):
    return varint(f << 3) + varint(v)


def lfield(f, b):
    return varint(f << 3 | 2) + varint(len(b)) + b


def f32(vals):
    return b"".join(struct.pack("<f", v) for v in vals)


def chunk(cid, version, data, enc=0):
    return vfield(1, cid) + vfield(2, version) + lfield(3, data) + (vfield(4, enc) if enc else b"")


def write(target, name, data):
    d = os.path.join("fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


push = vfield(1, 1) + vfield(2, 2) + lfield(3, chunk(0, 0, f32([1, 2])))
push_fp16 = vfield(1, 0) + vfield(2, 1) + lfield(3, chunk(1, 3, b"\x00\x3c\x00\x3c", 1)) + vfield(5, 0) + vfield(6, 2)
leave = vfield(1, 1) + vfield(2, 9) + vfield(4, 1)
pull_resp = lfield(1, chunk(3, 5, f32([0.5] * 4))) + lfield(1, chunk(4, 5, b"\x80\x3f", 2))
pull_req = lfield(1, b"\x00\x01\x02") + vfield(2, 1) + vfield(3, 4) + vfield(4, 2) + vfield(5, 1)
layout = lfield(1, lfield(1, b"w") + lfield(2, varint(4) + varint(8))) + vfield(2, 64) + vfield(3, 2) + vfield(4, 16)
declare = lfield(1, layout) + lfield(2, chunk(0, 0, f32([0.1] * 16))) + vfield(3, 0)
stats = vfield(1, 0) + vfield(2, 1) + vfield(3, 1) + lfield(9, lfield(1, b"wait_timeout") + vfield(2, 3))

write("wire_fuzzer", "push", b"\x00\x05\x09" + push)
write("wire_fuzzer", "push_fp16_parts", b"\x00\x03\x01" + push_fp16)
write("wire_fuzzer", "leave", b"\x00\x00\x00" + leave)
write("wire_fuzzer", "pull_response", b"\x01\x07\x02" + pull_resp)
write("wire_fuzzer", "pull_response_incarnation",
      b"\x01\x07\x02" + vfield(10, 0xFEDCBA9876543210) + pull_resp)
write("wire_fuzzer", "pull_request", b"\x02\x00\x00" + pull_req)
write("wire_fuzzer", "declare", b"\x03\x00\x00" + declare)
write("wire_fuzzer", "stats", b"\x04\x00\x00" + stats)
write("wire_fuzzer", "field_zero", b"\x00\x00\x00\x00\x01" + push)

# store_fuzzer: mode byte, then ops (kind, length lo, length hi, message).
# Layout w[40,33] + b[7] in 1 KiB chunks: chunks 0-4 of w hold 256 floats.
def op(kind, msg):
    return bytes([kind, len(msg) & 0xFF, len(msg) >> 8]) + msg

g = lfield(3, chunk(0, 0, f32([0.25] * 256)))
p1 = vfield(1, 0) + vfield(2, 1) + g
p2 = vfield(1, 1) + vfield(2, 1) + g
for mode, name in ((0, "async"), (1, "sync"), (2, "ssp")):
    write("store_fuzzer", name, bytes([mode]) + op(0, p1) + op(1, p2) + op(2, pull_req) + op(3, b"") + op(0, p1) + op(0, leave))
nan = vfield(1, 0) + vfield(2, 3) + lfield(3, chunk(0, 0, f32([float("nan")] * 256)))
write("store_fuzzer", "nan", b"\x00" + op(0, nan) + op(2, b""))

# layout_fuzzer: shards, chunk-size code, spread code, tensors, then each
# tensor's name length + name, rank and dims.
write("layout_fuzzer", "small", bytes([2, 6, 12, 2, 1]) + b"w" + bytes([2, 4, 8, 1]) + b"b" + bytes([1, 7]))
write("layout_fuzzer", "huge_dims", bytes([1, 18, 16, 1, 1]) + b"x" + bytes([2, 232, 232]))
write("layout_fuzzer", "raw_dims", bytes([1, 18, 16, 1, 1]) + b"y" + bytes([2, 255]) + struct.pack("<q", 3) + bytes([255]) + struct.pack("<q", 1 << 62))

def safetensors(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data

write("safetensors_fuzzer", "two", safetensors(
    {"__metadata__": {"step": "3"}, "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
     "b": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]}}, f32([1, 2, 3, 4, 5])))
write("safetensors_fuzzer", "empty_tensor", safetensors({"e": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}, b""))

images = struct.pack(">IIII", 0x803, 2, 2, 2) + bytes(range(8))
labels = struct.pack(">II", 0x801, 2) + b"\x01\x09"
def data_seed(which, a, b):
    return bytes([which, len(a) & 0xFF, len(a) >> 8]) + a + b
write("data_fuzzer", "idx", data_seed(0, images, labels))
write("data_fuzzer", "idx_gz", data_seed(1, gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)))
record = b"\x03" + bytes(i % 256 for i in range(3072))
write("data_fuzzer", "cifar_one", data_seed(2, record, b""))
write("data_fuzzer", "cifar_two_files", data_seed(2 | 8, record, record))

tf = {"cluster": {"ps": ["h0:2222", "h1:2222"], "worker": ["w0:2222", "[::1]:2223"]},
      "task": {"type": "worker", "index": 1}}
write("cluster_spec_fuzzer", "tf_config", b"\x00" + json.dumps(tf).encode())
write("cluster_spec_fuzzer", "nodelist", b"\x01" + b"r[1-2]-n[01-03,7],m5")
write("cluster_spec_fuzzer", "tasks_per_node", b"\x02" + b"3(x2),2,1(x3)")
write("cluster_spec_fuzzer", "host_list", b"\x03" + b"h1:5000, h2:5001,[::1]:7")
write("cluster_spec_fuzzer", "host_port", b"\x04" + b"198.18.0.7:2222")

# model_spec_fuzzer: the text of a spec; the built-in models and broken ones.
for f in sorted(os.listdir("models")):
    if f.endswith(".prototxt"):
        with open(os.path.join("models", f), "rb") as spec:
            write("model_spec_fuzzer", f[:-len(".prototxt")], spec.read())
head = b'name: "t"\ninput { channels: 1 height: 28 width: 28 classes: 10 }\n'
fc = b'layer { name: "fc" dense { out_features: 10 } }\n'
write("model_spec_fuzzer", "dag", head + b'''
layer { name: "conv1" conv { out_channels: 8 kernel: 3 stride: 2 padding: 1 } }
layer { name: "bn1" batch_norm { eps: 1e-3 momentum: 0.2 } }
layer { name: "a" conv { out_channels: 4 kernel: 1 bias: false } inputs: "bn1" }
layer { name: "b" avg_pool { kernel: 3 stride: 1 padding: 1 } inputs: "bn1" }
layer { name: "cat" concat {} inputs: "a" inputs: "b" }
layer { name: "p" max_pool { kernel: 2 } inputs: "cat" }
layer { name: "gap" global_avg_pool {} }
layer { name: "drop" dropout { rate: 0.1 } }
''' + fc)
write("model_spec_fuzzer", "syntax_error", head + b'layer { name: "fc" dense { out_features: } }\n')
write("model_spec_fuzzer", "unknown_kind", head + b'layer { name: "c" convolution { kernel: 3 } }\n' + fc)
write("model_spec_fuzzer", "forward_ref", head + b'layer { name: "r" relu {} inputs: "fc" }\n' + fc)
write("model_spec_fuzzer", "add_shapes", head + b'layer { name: "c" conv { out_channels: 2 kernel: 3 } }\n'
      b'layer { name: "s" add {} inputs: "c" inputs: "input" }\n' + fc)
write("model_spec_fuzzer", "kernel_too_large", head + b'layer { name: "p" max_pool { kernel: 29 } }\n' + fc)
write("model_spec_fuzzer", "classes", head + b'layer { name: "fc" dense { out_features: 12 } }\n')
write("model_spec_fuzzer", "huge", head + b'layer { name: "c" conv { out_channels: 1048576 kernel: 1 padding: 100000 } }\n' + fc)

# image_data_fuzzer: [which][side][file]; which & 1: a tensor file, else
# an image (& 2: 3 channels, & 4: no resizing). PIL (python3-pil) writes
# the images.
def image_seeds():
    import io
    from PIL import Image
    def encoded(mode, fmt, size=(6, 5), **kw):
        img = Image.new(mode, size)
        img.putdata([tuple((7 * i + c * 40) % 256 for c in range(3)) if mode == "RGB"
                     else (7 * i) % 256 for i in range(size[0] * size[1])])
        out = io.BytesIO()
        img.save(out, fmt, **kw)
        return out.getvalue()
    write("image_data_fuzzer", "png_gray", bytes([0, 5]) + encoded("L", "PNG"))
    write("image_data_fuzzer", "png_rgb_to_gray_resized", bytes([0, 37]) + encoded("RGB", "PNG"))
    write("image_data_fuzzer", "jpeg_rgb", bytes([2, 4]) + encoded("RGB", "JPEG", quality=90))
    write("image_data_fuzzer", "jpeg_progressive", bytes([6, 4]) + encoded("L", "JPEG", progressive=True))
    write("image_data_fuzzer", "png_truncated", bytes([0, 5]) + encoded("L", "PNG")[:40])
    hdr = json.dumps({"images": {"dtype": "U8", "shape": [2, 1, 2, 2], "data_offsets": [0, 8]},
                      "labels": {"dtype": "I64", "shape": [2], "data_offsets": [8, 24]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    st = struct.pack("<Q", len(hdr)) + hdr + bytes(range(8)) + struct.pack("<qq", 0, 1)
    write("image_data_fuzzer", "safetensors_u8", bytes([1 | 16, 1 + 0]) + st)
image_seeds()


def snapshot_seed(name, mode, clocks, seq=3, parts_hex="1"):
    """A shard snapshot (server/shard_snapshot.h) of one 4-float chunk,
    sgd, with its FNV-1a checksum."""
    values = f32([0.5, -1.0, 2.0, 0.25])
    h, prime = 1469598103934665603, 1099511628211
    for i in range(0, len(values), 8):
        h = ((h ^ struct.unpack("<Q", values[i:i + 8])[0]) * prime) % (1 << 64)
    meta = {"layout": {"tensors": [{"name": "w", "shape": [4]}], "num_shards": 1,
                       "max_chunk_bytes": 1 << 20, "spread_min_bytes": 1 << 20},
            "shard_index": 0, "num_shards": 1, "optimizer": "sgd", "mode": mode,
            "step": 3, "created_unix_ms": 1, "versions": [[0, 3]],
            "dedup": [{"worker": 0, "incarnation": "7", "seq": seq, "num_parts": 1,
                       "parts_hex": parts_hex, "retired": []}],
            "clocks": clocks, "checksum": str(h)}
    header = {"__metadata__": {"downpour_snapshot": json.dumps(meta)},
              "chunk.0.values": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    write("snapshot_fuzzer", name, struct.pack("<Q", len(h)) + h + values)


snapshot_seed("async", "async", [])
snapshot_seed("ssp", "ssp", [3, 3, 2, 3])
snapshot_seed("sync", "sync", [3])
snapshot_seed("async_fresh_row", "async", [], seq=0, parts_hex="")

