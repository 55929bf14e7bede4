"""Data-parallel training of the digits CNN (extra/examples/train_cnn.py) with each batch split over several devices.

Every device holds a copy of the model (`shard_(devices)`: replicated) and a slice of each batch
(`shard(devices, axis=0)`). Each device computes its slice's forward and backward; wherever a sum runs over the
batch (the loss's mean, batch norm's statistics, every weight's gradient) the per-device partial sums are
all-reduced (tinygrad/collectives.py), so every device applies the same Adam update and the copies stay equal. The
result is the single-device training, step by step, up to float rounding of the sums' order.

Host devices can be several (CLANG:0, CLANG:1, ...), so this runs anywhere:

    python extra/examples/train_cnn_multi.py --devices 2 [--compare] [--steps N]

--compare trains on one device too, from the same start and the same batches, and prints each step's two losses.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from extra.examples.train_cnn import DigitsCNN, load_data  # noqa: E402
from tinygrad import Tensor, TinyJit  # noqa: E402
from tinygrad.device import Device  # noqa: E402
from tinygrad.nn.optim import Adam  # noqa: E402
from tinygrad.nn.state import get_parameters, get_state_dict  # noqa: E402


def host_devices(n: int) -> tuple[str, ...]:
    """`n` devices of the default type: DEFAULT, DEFAULT:1, ..., DEFAULT:n-1."""
    base = Device.DEFAULT.split(":")[0]
    return tuple(Device.canonicalize(f"{base}:{i}") for i in range(n))


def make_model(seed: int, devices: tuple[str, ...] | None) -> DigitsCNN:
    """The CNN with seeded initial weights, replicated on `devices` (None: left on the default device)."""
    Tensor.manual_seed(seed)
    model = DigitsCNN()
    # weights are drawn on one device first, so a run on several devices starts from the same numbers
    for t in get_state_dict(model).values():
        t.realize()
        if devices is not None:
            t.shard_(devices)
    return model


def train_steps(devices: tuple[str, ...] | None, steps: int, batch: int = 64, lr: float = 3e-3, seed: int = 0,
                jit: bool = True, report: dict | None = None) -> tuple[list[float], DigitsCNN]:
    """`steps` Adam steps on the digits with the batch split over `devices` (None: one device); returns each
    step's loss and the model. `report`, if given, gets how TinyJit replayed the step ("replay": the graph class, e.g.
    CUDAMultiGraph for one CUDA graph over several GPUs with the NCCL calls inside, or "item by item")."""
    x_train, y_train, _, _ = load_data(seed)
    model = make_model(seed, devices)
    opt = Adam(get_parameters(model), lr=lr)

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        return loss.realize()

    run = TinyJit(step) if jit else step
    rng = np.random.default_rng(seed + 1)
    losses = []
    with Tensor.train():
        for _ in range(steps):
            idx = rng.choice(len(x_train), batch, replace=False)
            x, y = Tensor(x_train[idx]), Tensor(y_train[idx])
            if devices is not None:
                x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
            losses.append(run(x, y).item())
    if report is not None and jit:
        report["replay"] = type(run.graph).__name__ if run.graph is not None else "item by item"
    return losses, model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2, help="how many host devices to split each batch over")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--compare", action="store_true", help="train on one device too and compare the losses")
    args = parser.parse_args()
    if args.devices < 1 or args.batch < 2 * args.devices:
        parser.error("--devices must be >= 1, and --batch at least 2 per device (batch norm needs 2 images)")
    devices = host_devices(args.devices)
    st = time.perf_counter()
    report: dict = {}
    losses, _ = train_steps(devices, args.steps, args.batch, report=report)
    print(f"{args.steps} steps on {', '.join(devices)} in {time.perf_counter() - st:.1f} s, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, replayed {report.get('replay', 'eagerly')}")
    if args.compare:
        single, _ = train_steps(None, args.steps, args.batch)
        for i, (a, b) in enumerate(zip(losses, single)):
            print(f"step {i + 1:4d}: {len(devices)} devices {a:.6f}  one device {b:.6f}  diff {abs(a - b):.2e}")
        worst = max(abs(a - b) for a, b in zip(losses, single))
        print(f"largest loss difference: {worst:.2e}")
        if worst > 1e-3:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
