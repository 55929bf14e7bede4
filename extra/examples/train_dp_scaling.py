"""Data-parallel scaling of a training step on CUDA GPUs: throughput on one GPU vs the batch split over several.

    PYTHONPATH=$PWD python extra/examples/train_dp_scaling.py [--gpus 2] [--per-gpu-batch 4096] [--width 2048]
                                                              [--depth 4] [--steps 30] [--nccl 0]

An MLP (depth Linear layers of width x width, ReLU, a 10-class head) trained with SGD, the step under TinyJit. One
GPU runs `per-gpu-batch` samples a step; n GPUs run n times that, each its own slice (weak scaling, as data-parallel
training is used), with the weights replicated and every gradient all-reduced (NCCL, or the ring of copies with
--nccl 0). Scaling efficiency = (n-GPU samples/s) / (n x one-GPU samples/s); the issue asks >= 90% on 2 GPUs.

The inputs are made once and stay on the GPUs, so the numbers are the step itself: forward, backward, all-reduce,
update. The n-GPU step replays as one CUDA graph with the NCCL calls inside (CUDAMultiGraph; the replay column says
which path ran); with --item-by-item 1 (the default) it is timed again replayed item by item (CUDA_MULTIGRAPH=0).
It never hangs: a watchdog (faulthandler) prints where it was stuck and exits after --timeout seconds.
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from tinygrad import Tensor, TinyJit  # noqa: E402
from tinygrad.device import Device  # noqa: E402
from tinygrad.nn import Linear  # noqa: E402
from tinygrad.nn.optim import SGD  # noqa: E402
from tinygrad.nn.state import get_parameters, get_state_dict  # noqa: E402


class MLP:
    def __init__(self, width: int, depth: int, classes: int = 10):
        self.layers = [Linear(width, width) for _ in range(depth)]
        self.head = Linear(width, classes)

    def __call__(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x).relu()
        return self.head(x)


def run(devices: tuple[str, ...], per_gpu_batch: int, width: int, depth: int, steps: int,
        warmup: int = 3) -> tuple[float, float, float, str]:
    """(samples per second, seconds per step, last loss, how TinyJit replayed the step) of `steps` jitted SGD steps
    with the batch split over `devices` (one device: no sharding)."""
    Device.DEFAULT = devices[0]  # the weights are made there, then replicated
    Tensor.manual_seed(0)
    model = MLP(width, depth)
    for t in get_state_dict(model).values():
        t.realize()
        if len(devices) > 1:
            t.shard_(devices)
    opt = SGD(get_parameters(model), lr=1e-3, momentum=0.9)
    batch = per_gpu_batch * len(devices)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((batch, width), dtype=np.float32), device=devices[0])
    y = Tensor(rng.integers(0, 10, batch).astype(np.int32), device=devices[0])
    if len(devices) > 1:
        x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
    x, y = x.realize(), y.realize()

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        return loss.realize()

    def sync() -> None:
        for d in devices:
            Device[d].synchronize()

    with Tensor.train():
        for _ in range(warmup):
            step(x, y)
        sync()
        st = time.perf_counter()
        for _ in range(steps):
            loss = step(x, y)
        sync()
        took = time.perf_counter() - st
    # CUDAGraph (one GPU), CUDAMultiGraph (several: one CUDA graph with the NCCL calls inside), or item by item
    path = type(step.graph).__name__ if step.graph is not None else "item by item"
    if step.graph is not None and hasattr(step.graph.graphs[0], "recaptures"):
        g = step.graph.graphs[0]
        path += f" ({len(g)} nodes, {g.instantiations} instantiation(s), {g.recaptures} recapture(s))"
    return batch * steps / took, took / steps, loss.item(), path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--per-gpu-batch", type=int, default=4096)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--nccl", type=int, default=1, help="0: all-reduce by the ring of copies instead of NCCL")
    parser.add_argument("--timeout", type=int, default=500, help="seconds before the watchdog exits")
    parser.add_argument("--item-by-item", type=int, default=1,
                        help="1: also time the n-GPU step replayed item by item (CUDA_MULTIGRAPH=0), for comparison")
    args = parser.parse_args()
    os.environ["NCCL"] = str(args.nccl)
    faulthandler.dump_traceback_later(args.timeout, exit=True)

    from tinygrad.runtime import _cuda
    try:
        count = _cuda.device_count()
    except RuntimeError as e:
        print(f"no CUDA driver: {e}")
        return 2
    if count < args.gpus:
        print(f"needs {args.gpus} GPUs, this machine has {count}")
        return 2
    devices = tuple(Device.canonicalize(f"CUDA:{i}") for i in range(args.gpus))
    if args.nccl:
        from tinygrad.runtime import nccl
        print(f"NCCL: {nccl.load()}")
    params = args.depth * (args.width * args.width + args.width) + args.width * 10 + 10
    print(f"MLP {args.depth} x {args.width}, {params / 1e6:.1f} M parameters ({params * 4 / 2**20:.0f} MiB of "
          f"gradients to all-reduce a step), {args.per_gpu_batch} samples per GPU a step, "
          f"{'NCCL' if args.nccl else 'ring of copies'}")
    rows = [("1", *run(devices[:1], args.per_gpu_batch, args.width, args.depth, args.steps))]
    rows.append((str(len(devices)), *run(devices, args.per_gpu_batch, args.width, args.depth, args.steps)))
    if args.item_by_item:
        os.environ["CUDA_MULTIGRAPH"] = "0"  # read when TinyJit captures: this run replays item by item
        rows.append((f"{len(devices)}*", *run(devices, args.per_gpu_batch, args.width, args.depth, args.steps)))
        os.environ["CUDA_MULTIGRAPH"] = "1"
    print(f"\n{'GPUs':>4} | {'samples/s':>10} | {'ms/step':>8} | {'loss':>8} | replay")
    for gpus, rate, step_s, loss, path in rows:
        print(f"{gpus:>4} | {rate:10.0f} | {step_s * 1e3:8.2f} | {loss:8.4f} | {path}")
    if args.item_by_item:
        print(f"(*: CUDA_MULTIGRAPH=0; the multi-GPU CUDA graph is {rows[2][2] / rows[1][2]:.2f}x as fast per step)")
    eff = rows[1][1] / (len(devices) * rows[0][1])
    print(f"\nscaling efficiency on {len(devices)} GPUs: {eff * 100:.1f}% ({'>=' if eff >= 0.9 else '<'} 90%)")
    print(f"multi-GPU replay path: {rows[1][4]}")
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
