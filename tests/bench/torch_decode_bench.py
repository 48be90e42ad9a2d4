"""The PyTorch baseline of decode_bench: torchvision's ImageFolder with a
PIL loader (converted to the model's 1 channel, as Downpour does) and
torchvision transforms doing the same work (random crop with 4 pixels of
padding, horizontal flip, to tensor, normalize) through a DataLoader of
--threads worker processes, batches of 64, one epoch per pass; the best
pass is reported. Needs torch and torchvision (decode_bench.sh says how).

    python3 tests/bench/torch_decode_bench.py /tmp/fm_png/test --threads 2
"""
import argparse
import time

import torch
from PIL import Image
from torchvision import datasets, transforms


def gray_loader(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--passes", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    t = transforms.Compose([
        transforms.RandomCrop(28, padding=4),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize((0.2860,), (0.3530,)),
    ])
    data = datasets.ImageFolder(a.dir, transform=t, loader=gray_loader)
    loader = torch.utils.data.DataLoader(
        data, batch_size=64, shuffle=True, num_workers=a.threads,
        persistent_workers=True, prefetch_factor=4)
    best = float("inf")
    for _ in range(a.passes):
        start = time.perf_counter()
        for _images, _labels in loader:
            pass
        best = min(best, time.perf_counter() - start)
    n = len(data)
    print("torch_decode_bench: threads=%d images=%d best_seconds=%.3f "
          "images/sec=%.0f per_thread=%.0f" % (a.threads, n, best, n / best,
                                               n / best / a.threads))


if __name__ == "__main__":
    main()
