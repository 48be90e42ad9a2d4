#!/usr/bin/env python3
"""PyTorch reference for tests/bench:compute_bench: the same model, the same
per-step work, the same table and JSON line.

    python3 tests/bench/pytorch_fashion_cnn.py --device=cuda --gpu=0
    python3 tests/bench/pytorch_fashion_cnn.py --device=cpu --batch_sizes=64
    python3 tests/bench/pytorch_fashion_cnn.py --device=cpu --model=resnet20
    python3 tests/bench/pytorch_fashion_cnn.py --device=cpu --model=my.prototxt \
        --channels_last --compile

Model (--model, as compute_bench's --model): `fashion_cnn` (the default) is
the module written out below (docs/design.md, "Saved parameters";
models/fashion_cnn.prototxt): conv 3x3x32 valid + ReLU + 2x2 max-pool, conv
3x3x64 valid + ReLU + 2x2 max-pool, flatten 1600, dense 128 + ReLU, dense
10, softmax cross-entropy (mean). 225,034 float32 parameters in the order
conv1.weight, conv1.bias, conv2.weight, conv2.bias, fc1.weight, fc1.bias,
fc2.weight, fc2.bias, which is Downpour's flat layout. Any other value is a
built-in model's name (models/NAME.prototxt) or a spec file's path, built by
tools/spec_to_torch.py into the same network with the same parameter names
(models/fashion_cnn.prototxt gives the module above, built from the spec).
The module is in training mode, as a worker's step is: batch norm uses the
batch's statistics and updates its running ones, dropout drops.

Settings, to be comparable with Downpour's CUDA backend (plain fp32):
eager mode (no torch.compile, no CUDA graphs), float32, TF32 OFF for both
matmul and cuDNN (unless --tf32), torch.backends.cudnn.benchmark as --cudnn_benchmark
says (default off: Downpour chooses by heuristics, without timing).

Per batch size, after --warmup_steps untimed steps:
  step     what a Downpour worker does per step (n_fetch = n_push = 1, no
           RPCs): parameters host -> device (one copy into a flat device
           buffer that the modules' parameters are views of), batch
           host -> device, forward, backward (into a flat gradient buffer
           that the .grad tensors are views of, zeroed first: PyTorch
           accumulates, Downpour overwrites), gradients device -> host (one
           copy), loss.item() and a synchronize (the worker needs the
           gradients on the host before it pushes, and checks the loss).
  compute  the same without the two parameter/gradient copies: batch
           host -> device, forward, backward, loss.item(), synchronize.
Host buffers (parameters, gradients, a pool of input batches) are pinned on
CUDA. The input is synthetic: uniform [0, 1) pixels, uniform labels.

--compile (PyTorch >= 2): the compute figure runs torch.compile(model) (the
default inductor backend, static shapes, --compile_mode: reduce-overhead
adds CUDA graphs) on a separate copy of the model whose gradients are set
to None each step, as with --channels_last; the warm-up steps
(--warmup_steps, at least 1) absorb the compilation.

The last line of stdout is the JSON (also written to --json_out):
  {"bench":"<model>_worker_step","impl":"pytorch","model":..,"device":...,
   "host_buffers":...,"tf32":false,"input":"synthetic","parameters":N,
   "torch":...,"cudnn":...,"compile":..,"results":[{"batch_size":64,"step_ms":..,
   "step_examples_per_sec":..,"compute_ms":..,"compute_examples_per_sec":..,
   "compute_cpu_ms":..,"compute_examples_per_cpu_sec":..,
   "steps":..,"compute_steps":..,"loss":..},...]}
("cpu" figures: the compute steps over the process's CPU time, not wall time.)
Exit status: 0 ok; 2 bad arguments; 3 the device is not available (no
PyTorch, no CUDA); 1 anything else.
"""

import argparse
import json
import math
import os
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--gpu", type=int, default=0, help="CUDA device ordinal")
    p.add_argument("--model", default="fashion_cnn",
                   help="fashion_cnn (the module below), a built-in model's "
                   "name (models/NAME.prototxt) or a model spec file")
    p.add_argument("--batch_sizes", default="64,256,1024")
    p.add_argument("--warmup_steps", type=int, default=20)
    p.add_argument("--steps", type=int, default=0,
                   help="timed steps; 0 = as many as fit in --min_seconds")
    p.add_argument("--min_seconds", type=float, default=2.0)
    p.add_argument("--min_steps", type=int, default=10)
    p.add_argument("--pool_batches", type=int, default=8)
    p.add_argument("--cpu_threads", type=int, default=0,
                   help="--device=cpu: torch.set_num_threads; 0 = default")
    # PyTorch's best CPU setting (channels_last activations).
    p.add_argument("--channels_last", action="store_true",
                   help="feed the model NHWC (torch.channels_last) input")
    p.add_argument("--compile", action="store_true",
                   help="compute figure with torch.compile (PyTorch >= 2)")
    p.add_argument("--compile_mode", default="default",
                   choices=["default", "reduce-overhead", "max-autotune",
                            "max-autotune-no-cudagraphs"],
                   help="torch.compile's mode (reduce-overhead: CUDA graphs)")
    p.add_argument("--tf32", action="store_true",
                   help="allow TF32 (default: off, like Downpour)")
    p.add_argument("--cudnn_benchmark", type=int, default=0, choices=[0, 1],
                   help="torch.backends.cudnn.benchmark (timed algorithm "
                   "search, may pick non-deterministic algorithms); default "
                   "0, like Downpour's heuristic choice")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json_out", default="")
    a = p.parse_args(argv)
    try:
        a.batch_sizes = [int(b) for b in a.batch_sizes.split(",") if b]
    except ValueError:
        p.error("--batch_sizes: comma-separated positive integers")
    if not a.batch_sizes or min(a.batch_sizes) < 1:
        p.error("--batch_sizes: comma-separated positive integers")
    if (a.warmup_steps < 0 or a.steps < 0 or a.min_steps < 1 or
            a.pool_batches < 1 or a.min_seconds < 0):
        p.error("need --warmup_steps >= 0, --steps >= 0, --min_steps >= 1, "
                "--pool_batches >= 1, --min_seconds >= 0")
    if a.compile and a.warmup_steps < 1:
        p.error("--compile needs --warmup_steps >= 1 (the compilation)")
    return a


def spec_path(model):
    """The spec file of --model: a path, or models/NAME.prototxt of this
    checkout for a built-in name."""
    if model.endswith(".prototxt") or os.sep in model:
        return model
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    return os.path.normpath(os.path.join(root, "models", model + ".prototxt"))


def load_spec_builder():
    """tools/spec_to_torch.py of this checkout, imported as a module."""
    tools = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                         "..", "tools")
    sys.path.insert(0, os.path.normpath(tools))
    import spec_to_torch  # pylint: disable=import-outside-toplevel
    return spec_to_torch


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print("pytorch_fashion_cnn: cannot import torch: %s" % e,
              file=sys.stderr)
        return 3
    if args.compile and not hasattr(torch, "compile"):
        print("pytorch_fashion_cnn: --compile: torch %s has no torch.compile"
              % torch.__version__, file=sys.stderr)
        return 2

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("pytorch_fashion_cnn: --device=cuda: torch.cuda.is_available()"
                  " is False (torch %s, built for CUDA %s)"
                  % (torch.__version__, torch.version.cuda), file=sys.stderr)
            return 3
        if not 0 <= args.gpu < torch.cuda.device_count():
            print("pytorch_fashion_cnn: --gpu=%d but there are %d CUDA devices"
                  % (args.gpu, torch.cuda.device_count()), file=sys.stderr)
            return 2
        dev = torch.device("cuda", args.gpu)
        torch.cuda.set_device(dev)
        device_name = "cuda:%d (%s)" % (args.gpu,
                                        torch.cuda.get_device_name(dev))
        pin = True
    else:
        dev = torch.device("cpu")
        device_name = "cpu"
        pin = False
        if args.cpu_threads > 0:
            torch.set_num_threads(args.cpu_threads)

    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.set_float32_matmul_precision("high" if args.tf32 else "highest")
    torch.manual_seed(args.seed)

    class FashionCnn(nn.Module):
        """models/fashion_cnn.prototxt, written out."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3)
            self.conv2 = nn.Conv2d(32, 64, 3)
            self.fc1 = nn.Linear(1600, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            return self.fc2(x)

    if args.model == "fashion_cnn":
        model_name, make_model, in_dims = "fashion_cnn", FashionCnn, (1, 28, 28, 10)
    else:
        path = spec_path(args.model)
        try:
            builder = load_spec_builder()
            spec = builder.load_spec_file(path)
            builder.build_module(spec, path)  # Errors now, not mid-run.
        except (ImportError, OSError, ValueError) as e:
            print("pytorch_fashion_cnn: --model=%s: %s" % (args.model, e),
                  file=sys.stderr)
            return 2
        model_name = spec["name"] or args.model
        in_dims = spec["input"]
        make_model = lambda: builder.build_module(spec, path)
    in_c, in_h, in_w, classes = in_dims

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def measure(step):
        i = 0
        for i in range(args.warmup_steps):
            step(i)
        sync()
        steps, loss = 0, float("nan")
        begin = time.perf_counter()
        cpu_begin = time.process_time()
        while True:
            if args.steps > 0:
                if steps >= args.steps:
                    break
            elif (steps >= args.min_steps and
                  time.perf_counter() - begin >= args.min_seconds):
                break
            i += 1
            loss = step(i)
            steps += 1
        sync()
        seconds = time.perf_counter() - begin
        cpu_seconds = time.process_time() - cpu_begin
        if not math.isfinite(loss):
            raise RuntimeError("loss is %r: the computation is broken" % loss)
        return steps, seconds, loss, cpu_seconds

    def measure_batch_size(batch):
        if args.compile:
            torch._dynamo.reset()  # A fresh compilation per batch size.
        model = make_model().to(dev)
        params = list(model.parameters())
        n = sum(p.numel() for p in params)
        # Flat parameter and gradient buffers with the modules' tensors as
        # views, as in Downpour's Model: one copy each way per step.
        flat_p = torch.empty(n, device=dev)
        flat_g = torch.zeros(n, device=dev)
        off = 0
        with torch.no_grad():
            for p in params:
                k = p.numel()
                flat_p[off:off + k].copy_(p.reshape(-1))
                p.data = flat_p[off:off + k].view_as(p)
                p.grad = flat_g[off:off + k].view_as(p)
                off += k
        grad_ptrs = [p.grad.data_ptr() for p in params]
        host_p = torch.empty(n, pin_memory=pin)
        host_p.copy_(flat_p)
        host_g = torch.empty(n, pin_memory=pin)
        xs = torch.rand(args.pool_batches, batch, in_c, in_h, in_w)
        if pin:
            xs = xs.pin_memory()
        ys = torch.randint(0, classes, (args.pool_batches, batch))
        if pin:
            ys = ys.pin_memory()

        def forward_backward(i):
            x = xs[i % args.pool_batches].to(dev, non_blocking=True)
            if args.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            y = ys[i % args.pool_batches].to(dev, non_blocking=True)
            flat_g.zero_()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        def worker_step(i):
            flat_p.copy_(host_p, non_blocking=True)
            loss = forward_backward(i)
            host_g.copy_(flat_g, non_blocking=True)
            value = loss.item()
            sync()
            return value

        # --channels_last: the compute figure is PyTorch's idiomatic best on
        # the CPU: a model whose weights are channels_last too (they cannot
        # stay views of the flat buffer) and gradients set to None each step
        # instead of zeroed in place. Measured 30-40% faster than NCHW
        # weights with flat gradient views at one thread. --compile runs
        # such a copy (NCHW unless --channels_last) through torch.compile.
        cl_model = None
        if args.channels_last or args.compile:
            cl_model = make_model().to(dev)
            if args.channels_last:
                cl_model = cl_model.to(memory_format=torch.channels_last)
            cl_model.load_state_dict(model.state_dict())
        run_model = cl_model
        if args.compile:
            run_model = torch.compile(cl_model, dynamic=False,
                                      mode=args.compile_mode)

        def compute_step(i):
            if cl_model is None:
                loss = forward_backward(i)
            else:
                x = xs[i % args.pool_batches].to(dev, non_blocking=True)
                if args.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                y = ys[i % args.pool_batches].to(dev, non_blocking=True)
                for p in cl_model.parameters():
                    p.grad = None
                loss = F.cross_entropy(run_model(x), y)
                loss.backward()
            value = loss.item()
            sync()
            return value

        step = measure(worker_step)
        # Autograd must have accumulated into the flat buffer's views, or the
        # gradient copy above copied zeros.
        if [p.grad.data_ptr() for p in params] != grad_ptrs:
            raise RuntimeError("autograd replaced the .grad views; the "
                               "gradient copy would be wrong")
        if not float(host_g.abs().sum()) > 0:
            raise RuntimeError("gradients copied to the host are all zero")
        compute = measure(compute_step)
        return n, step, compute

    results = []
    n_params = 0
    print("pytorch_fashion_cnn: %s on %s, host buffers: %s, torch %s,"
          " cuDNN %s, TF32 %s, cudnn.benchmark %s, %s%s, synthetic input"
          % (model_name, device_name, "pinned" if pin else "pageable",
             torch.__version__,
             torch.backends.cudnn.version() if dev.type == "cuda" else "-",
             "on" if args.tf32 else "off",
             "on" if args.cudnn_benchmark else "off",
             "torch.compile (compute)" if args.compile else "eager",
             ", channels_last (compute)" if args.channels_last else ""))
    print("  step    = parameters H2D + batch H2D + forward + backward + "
          "gradients D2H + loss.item()\n"
          "  compute = batch H2D + forward + backward + loss.item()")
    print("%6s | %9s | %12s | %10s | %12s | %8s"
          % ("batch", "step ms", "step ex/s", "compute ms", "compute ex/s",
             "copies %"))
    sys.stdout.flush()
    for batch in args.batch_sizes:
        n_params, (s_steps, s_sec, loss, _), (c_steps, c_sec, _, c_cpu) = \
            measure_batch_size(batch)
        step_ms = 1e3 * s_sec / s_steps
        compute_ms = 1e3 * c_sec / c_steps
        row = {
            "batch_size": batch,
            "step_ms": round(step_ms, 5),
            "step_examples_per_sec": round(batch * s_steps / s_sec, 2),
            "compute_ms": round(compute_ms, 5),
            "compute_examples_per_sec": round(batch * c_steps / c_sec, 2),
            # Process CPU time (all threads) instead of wall time: at one
            # thread, a core's own speed even on a loaded machine.
            "compute_cpu_ms": round(1e3 * c_cpu / c_steps, 5),
            "compute_examples_per_cpu_sec": round(batch * c_steps / c_cpu, 2),
            "steps": s_steps,
            "compute_steps": c_steps,
            "loss": round(loss, 5),
        }
        results.append(row)
        print("%6d | %9.3f | %12.1f | %10.3f | %12.1f | %8.1f"
              % (batch, step_ms, row["step_examples_per_sec"], compute_ms,
                 row["compute_examples_per_sec"],
                 100.0 * max(0.0, step_ms - compute_ms) / step_ms))
        sys.stdout.flush()

    out = {
        "bench": "%s_worker_step" % model_name,
        "impl": "pytorch",
        "model": args.model,
        "device": device_name,
        "host_buffers": "pinned" if pin else "pageable",
        "tf32": bool(args.tf32),
        "channels_last": bool(args.channels_last),
        "cudnn_benchmark": bool(args.cudnn_benchmark),
        "compile": bool(args.compile),
        "compile_mode": args.compile_mode if args.compile else None,
        "input": "synthetic",
        "parameters": n_params,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
        "results": results,
    }
    line = json.dumps(out, separators=(",", ":"))
    print(line)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
