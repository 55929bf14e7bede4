"""CPU time of one quantized matrix-vector product: Linear (the file's blocks, dequantized in the kernel) beside the
int8 planes main kept (values widened to int8 at load, a scale and offset per group).

Each row is one type at one of Gemma 3 270M's shapes (Q4_0 at q's shape, as Gemma has none), random blocks with
finite fp16 scales. Both products are captured by TinyJit and called back to back; the time is CPU time per call
(time.process_time, so other processes on a shared machine add little), the best of a few rounds, single thread
(OMP_NUM_THREADS=1 unless set).

    PYTHONPATH=. python extra/bench_quant.py [--reps 200] [--rows 1]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from tinygrad import Tensor, TinyJit  # noqa: E402
from tinygrad.apps.llm.linear import Linear, _planes  # noqa: E402
from tinygrad.dtype import dtypes  # noqa: E402
from tinygrad.nn.state_gguf import GGML_TYPES  # noqa: E402

Q4_0, Q5_0, Q8_0, Q4_K, Q6_K = 2, 6, 8, 12, 14
# (type, (out, in), what it is in Gemma 3 270M)
CASES = [(Q4_0, (1024, 640), "q shape"), (Q5_0, (1024, 640), "attn_q"), (Q5_0, (4096, 640), "gate+up"),
         (Q8_0, (256, 640), "attn_v"), (Q4_K, (640, 1024), "attn_output"), (Q6_K, (640, 2048), "ffn_down")]
# where each type keeps its fp16 scales in a block (byte offsets), so random blocks get finite ones
SCALE_BYTES = {Q4_0: (0,), Q5_0: (0,), Q8_0: (0,), Q4_K: (0, 2), Q6_K: (208,)}


def random_blocks(ttype: int, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """(out, row bytes) uint8: random blocks whose fp16 scales are small finite values."""
    _, per_block, block_bytes, _ = GGML_TYPES[ttype]
    n = shape[0] * shape[1] // per_block
    b = rng.integers(0, 256, (n, block_bytes), dtype=np.uint8)
    for at in SCALE_BYTES[ttype]:
        b[:, at:at + 2] = rng.uniform(-0.01, 0.01, (n, 1)).astype(np.float16).view(np.uint8)
    return b.reshape(shape[0], -1)


def linear(ttype: int, shape: tuple[int, int], blocks: np.ndarray) -> Linear:
    """A Linear over `blocks` as if loaded from a file."""
    lin = Linear.__new__(Linear)
    lin.shape, lin.ttype = shape, ttype
    lin.blocks = Tensor(blocks).realize()
    return lin


def planes_product(ttype: int, shape: tuple[int, int], blocks: np.ndarray):
    """main's product over int8 planes: x -> (x * (q * scale - offset)).sum over (groups, values a group)."""
    q, d, m = _planes(ttype, blocks.reshape(-1))
    out, inner = shape
    g = d.size // out
    qs = Tensor(np.ascontiguousarray(q).reshape(out, inner)).realize()
    # fp16 scales stay fp16 on the device as main kept them (Q4_0, Q5_0, Q8_0), products float32
    dt = Tensor(np.ascontiguousarray(d).reshape(out, g)).realize()
    mt = Tensor(np.ascontiguousarray(m).reshape(out, g).astype(np.float32)).realize() if m is not None else None

    def product(x: Tensor) -> Tensor:
        w = qs.cast(dtypes.float32).reshape(out, g, inner // g) * dt.cast(dtypes.float32).reshape(out, g, 1)
        if mt is not None:
            w = w - mt.reshape(out, g, 1)
        return (x.reshape(x.shape[0], 1, g, inner // g) * w).sum((-2, -1))
    return product


def cpu_time(fn, x: Tensor, reps: int, rounds: int = 5) -> float:
    """Best CPU seconds per call of a jitted `fn` over `rounds` rounds of `reps` calls."""
    jit = TinyJit(lambda v: fn(v).realize())
    for _ in range(3):
        jit(x)
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(reps):
            jit(x)
        best = min(best, (time.process_time() - start) / reps)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rows", type=int, default=1, help="rows of x (1: decode; 16 or 64: a prefill chunk)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'type':6} {'shape':12} {'in Gemma':12} {'planes us':>10} {'blocks us':>10} {'blocks/planes':>14}")
    for ttype, shape, what in CASES:
        blocks = random_blocks(ttype, shape, rng)
        x = Tensor(rng.standard_normal((args.rows, shape[1])).astype(np.float32)).realize()
        lin = linear(ttype, shape, blocks)
        plane = planes_product(ttype, shape, blocks)
        # the two compute the same values (a sum's order aside)
        np.testing.assert_allclose(lin(x).numpy(), plane(x).numpy(), rtol=1e-3, atol=1e-3)
        tp = cpu_time(plane, x, args.reps)
        tb = cpu_time(lin, x, args.reps)
        name = GGML_TYPES[ttype][0]
        print(f"{name:6} {str(shape):12} {what:12} {tp * 1e6:10.1f} {tb * 1e6:10.1f} {tb / tp:13.2f}x")


if __name__ == "__main__":
    main()
