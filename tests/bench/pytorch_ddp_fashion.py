#!/usr/bin/env python3
"""PyTorch DistributedDataParallel beside Downpour.

Trains the same fashion_cnn (worker/nn/model.h; tests/bench/
pytorch_fashion_cnn.py) on Fashion-MNIST with W processes on this machine
(gloo backend over loopback, one CPU thread each), with Downpour's data split
and per-worker budget: worker i takes the training examples whose index is
i mod W, reshuffles its shard every epoch, batch 64 per worker, --epochs
passes over its shard (the last partial batch included); inputs are pixels
/ 255. The optimizer is applied to the all-reduced mean gradient, as a sync
Downpour run applies the mean of the step's gradients.

    /usr/bin/python3 tests/bench/pytorch_ddp_fashion.py --workers=2 --epochs=3 \
        --optimizer=adagrad --lr=0.05 --summary_json=/tmp/ddp.json

Writes a summary JSON with the keys tests/bench/compare_modes.sh reads:
test_accuracy, wall_seconds (spawn to the end of training, as the launcher's
wall time), examples_per_sec, final_loss, plus the settings. Needs
/usr/bin/python3 with Debian's python3-torch; exit 3 when torch is missing.
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys
import time


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    _, _, _, ndim = struct.unpack(">BBBB", data[:4])
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError("%s(.gz) not in %s" % (stem, data_dir))


def load(torch, data_dir, prefix):
    dims, pix = read_idx(find(data_dir, prefix + "-images-idx3-ubyte"))
    _, lab = read_idx(find(data_dir, prefix + "-labels-idx1-ubyte"))
    x = torch.frombuffer(bytearray(pix), dtype=torch.uint8)
    x = x.reshape(dims[0], 1, dims[1], dims[2]).float().div_(255.0)
    y = torch.frombuffer(bytearray(lab), dtype=torch.uint8).long()
    return x, y


def make_model(torch, dropout_conv=0.0, dropout_fc=0.0):
    nn, F = torch.nn, torch.nn.functional

    class FashionCnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3)
            self.conv2 = nn.Conv2d(32, 64, 3)
            self.fc1 = nn.Linear(1600, 128)
            self.fc2 = nn.Linear(128, 10)
            self.drop_conv = nn.Dropout(dropout_conv)
            self.drop_fc = nn.Dropout(dropout_fc)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = self.drop_conv(torch.flatten(x, 1))
            return self.fc2(self.drop_fc(F.relu(self.fc1(x))))

    return FashionCnn()


def make_optimizer(torch, args, params):
    if args.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=args.lr,
                                   initial_accumulator_value=0.1)
    if args.optimizer == "momentum":
        return torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    if args.optimizer == "adam":
        if args.weight_decay > 0:
            return torch.optim.AdamW(params, lr=args.lr,
                                     weight_decay=args.weight_decay)
        return torch.optim.Adam(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr)


def worker(rank, args, port, result_path):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=args.workers)
    torch.manual_seed(args.seed)  # Same initial parameters on every rank.
    x, y = load(torch, args.data_dir, "train")
    if args.max_train_examples > 0:
        x, y = x[:args.max_train_examples], y[:args.max_train_examples]
    idx = torch.arange(rank, x.shape[0], args.workers)
    xs, ys = x[idx].contiguous(), y[idx].contiguous()
    model = torch.nn.parallel.DistributedDataParallel(
        make_model(torch, args.dropout_conv, args.dropout_fc))
    # --schedule=auto: the rules the launcher gives our servers by default
    # (deploy/lr_rules.h): lr x W for the mean of W gradients, linear warm-up
    # over 5% of the steps, then cosine decay to 0 at the last step.
    if args.schedule == "auto":
        args.lr *= args.workers
    opt = make_optimizer(torch, args, model.parameters())
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    # Equal step counts on every rank (DDP needs them): the smallest shard's.
    n_min = x.shape[0] // args.workers
    steps_per_epoch = (n_min + args.batch_size - 1) // args.batch_size
    total = args.epochs * steps_per_epoch
    warmup = max(1, int(total * 0.05))

    def factor(step):  # step = updates done so far; update t = step + 1.
        t = step + 1
        if t <= warmup:
            return t / warmup
        p = min(1.0, (t - warmup) / max(1, total - warmup))
        return 0.5 * (1 + math.cos(math.pi * p))
    sched = (torch.optim.lr_scheduler.LambdaLR(opt, factor)
             if args.schedule == "auto" else None)
    loss = torch.tensor(float("nan"))
    examples = 0
    begin = time.perf_counter()
    for _ in range(args.epochs):
        perm = torch.randperm(xs.shape[0], generator=gen)
        for s in range(steps_per_epoch):
            b = perm[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad(set_to_none=True)
            xb = xs[b]
            if args.flip:  # Each example mirrored left-right with p = 1/2.
                mirror = torch.rand(xb.shape[0], generator=gen) < 0.5
                xb = torch.where(mirror[:, None, None, None], xb.flip(3), xb)
            loss = torch.nn.functional.cross_entropy(
                model(xb), ys[b], label_smoothing=args.label_smoothing)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            examples += b.numel()
    train_s = time.perf_counter() - begin
    if rank == 0:
        tx, ty = load(torch, args.data_dir, "t10k")
        model.eval()  # Dropout off for evaluation.
        with torch.no_grad():
            pred = torch.cat([model.module(tx[i:i + 1000]).argmax(1)
                              for i in range(0, tx.shape[0], 1000)])
        acc = float((pred == ty).float().mean())
        with open(result_path, "w") as f:
            json.dump({"test_accuracy": acc, "train_seconds": train_s,
                       "examples_rank0": examples,
                       "final_loss": float(loss)}, f)
    dist.barrier()
    dist.destroy_process_group()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--optimizer", default="adagrad",
                   choices=["sgd", "momentum", "adagrad", "adam"])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--schedule", choices=["none", "auto"], default="none",
                   help="auto: Downpour's default rules (lr x workers, "
                        "5%% warm-up, cosine to 0)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dropout_conv", type=float, default=0.0,
                   help="dropout on the flattened conv features")
    p.add_argument("--dropout_fc", type=float, default=0.0,
                   help="dropout after fc1's ReLU")
    p.add_argument("--label_smoothing", type=float, default=0.0,
                   help="targets (1 - eps) onehot + eps / classes")
    p.add_argument("--flip", action="store_true",
                   help="random horizontal flips of training images "
                        "(ps_worker --augment --augment_crop_padding=0)")
    p.add_argument("--weight_decay", type=float, default=0.0,
                   help="adam: decoupled weight decay (AdamW)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max_train_examples", type=int, default=0)
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--summary_json", default="")
    args = p.parse_args(argv)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print("pytorch_ddp: cannot import torch (%s); run under /usr/bin/python3 "
              "with python3-torch" % e, file=sys.stderr)
        return 3
    port = args.port
    if port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    result = "/tmp/pytorch_ddp_%d_%d.json" % (os.getpid(), port)
    begin = time.perf_counter()
    mp.spawn(worker, args=(args, port, result), nprocs=args.workers, join=True)
    wall = time.perf_counter() - begin
    r = json.load(open(result))
    os.unlink(result)
    total = r["examples_rank0"] * args.workers
    summary = {
        "impl": "pytorch_ddp", "torch": torch.__version__, "backend": "gloo",
        "mode": "pytorch_ddp", "workers": args.workers, "epochs": args.epochs,
        "batch_size": args.batch_size, "optimizer": args.optimizer,
        "lr": args.lr, "threads_per_worker": args.threads,
        "label_smoothing": args.label_smoothing, "flip": args.flip,
        "weight_decay": args.weight_decay,
        "dropout": [args.dropout_conv, args.dropout_fc],
        "test_accuracy": r["test_accuracy"], "wall_seconds": round(wall, 2),
        "train_seconds": round(r["train_seconds"], 2),
        "examples_per_sec": round(total / r["train_seconds"], 1),
        "final_loss": r["final_loss"],
    }
    line = json.dumps(summary, separators=(",", ":"))
    print("SUMMARY " + line)
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
