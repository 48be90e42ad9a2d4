"""Evaluates a Downpour-trained user_net.prototxt file in PyTorch.

The network is written by hand here, module by module as the spec names its
layers, so that the check does not share code with Downpour's own reading of
the spec (tools/spec_to_torch.py). Reads the safetensors file with numpy
(no safetensors package), the Fashion-MNIST test split from the IDX files,
and prints "torch_accuracy=<A> examples=<N>" for the first N test images,
evaluated in eval mode (batch norm's running statistics, no dropout).

  /usr/bin/python3 torch_user_net.py MODEL.safetensors DATA_DIR N
"""
import gzip
import json
import struct
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class UserNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pool1 = nn.MaxPool2d(2)
        self.branch_a = nn.Conv2d(16, 8, 1)
        self.branch_b = nn.Conv2d(16, 8, 3, padding=1)
        self.ap = nn.AvgPool2d(2)
        self.conv3 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(32)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        p = self.pool1(F.relu(self.bn1(self.conv1(x))))
        s = torch.cat([self.branch_a(p), self.branch_b(p)], 1) + p
        x = self.ap(F.relu(s))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(self.drop(x))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        begin, end = t["data_offsets"]
        a = np.frombuffer(body[begin:end], dtype="<f4").reshape(t["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    model_path, data_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    net = UserNet()
    state = read_safetensors(model_path)
    # Only PyTorch's num_batches_tracked may be missing.
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        sys.exit("load_state_dict: missing %s, unexpected %s" % (missing, unexpected))
    net.eval()
    images = read_idx(data_dir + "/t10k-images-idx3-ubyte.gz")[:n]
    labels = read_idx(data_dir + "/t10k-labels-idx1-ubyte.gz")[:n]
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    with torch.no_grad():
        pred = net(x).argmax(1).numpy()
    print("torch_accuracy=%.4f examples=%d" % ((pred == labels).mean(), len(labels)))


if __name__ == "__main__":
    main()
