"""Time of one quantized matrix-vector product on the CPU: Linear in the file's bits (the blocks dequantized in the
kernel) beside Linear on int8 planes (values widened to int8 at load, a scale and offset per group), same run.

Each row is one type at one of Gemma 3 270M's or SmolLM2-135M's shapes (Q4_0 at Gemma's q shape, as neither has
one), random blocks with finite fp16 scales. Both products are captured by TinyJit and called in turn, A B A B; the
time per call is the median of the rounds, CPU time (time.process_time: other processes on a shared machine add
little; with threads, the sum of theirs) or wall time (--wall). OMP_NUM_THREADS=1 unless set (decode runs on 2).

    PYTHONPATH=. python extra/bench_quant.py [--reps 200] [--rows 1] [--wall] [--types Q4_K,Q6_K]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from tinygrad import Device, Tensor, TinyJit  # noqa: E402
from tinygrad.apps.llm.linear import Linear  # noqa: E402
from tinygrad.nn.state_file import CheckpointBytes  # noqa: E402
from tinygrad.nn.state_gguf import GGML_TYPES, GGUFTensor  # noqa: E402

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K = 2, 3, 6, 7, 8, 12, 14
# (type, (out, in), what it is in Gemma 3 270M or SmolLM2-135M)
CASES = [(Q4_0, (1024, 640), "q shape"), (Q5_0, (1024, 640), "G attn_q"), (Q5_0, (4096, 640), "G gate+up"),
         (Q8_0, (256, 640), "G attn_v"), (Q4_K, (640, 1024), "G attn_out"), (Q6_K, (640, 2048), "G ffn_down"),
         (Q4_1, (3072, 576), "S gate+up"), (Q4_1, (576, 1536), "S ffn_down"), (Q5_1, (3072, 576), "gate+up shape"),
         (Q8_0, (49152, 576), "S output"), (Q8_0, (4096, 640), "gate+up shape")]
# where each type keeps its fp16 scales in a block (byte offsets), so random blocks get finite ones
SCALE_BYTES = {Q4_0: (0,), Q4_1: (0, 2), Q5_0: (0,), Q5_1: (0, 2), Q8_0: (0,), Q4_K: (0, 2), Q6_K: (208,)}


def random_blocks(ttype: int, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """(out, row bytes) uint8: random blocks whose fp16 scales are small finite values."""
    _, per_block, block_bytes, _ = GGML_TYPES[ttype]
    n = shape[0] * shape[1] // per_block
    b = rng.integers(0, 256, (n, block_bytes), dtype=np.uint8)
    for at in SCALE_BYTES[ttype]:
        b[:, at:at + 2] = rng.uniform(-0.01, 0.01, (n, 1)).astype(np.float16).view(np.uint8)
    return b.reshape(shape[0], -1)


def linear(ttype: int, shape: tuple[int, int], blocks: np.ndarray, file_bits: bool) -> Linear:
    """Linear over `blocks` as if loaded from a file, in the file's bits or as planes."""
    t = GGUFTensor(CheckpointBytes.in_memory(blocks.tobytes(), "w"), "w", shape, ttype, 0, blocks.nbytes)
    saved = Linear.FILE_BITS_TYPES
    # every type in the file's bits, whatever Linear chooses today: the bench measures that choice
    Linear.FILE_BITS_TYPES = frozenset(GGML_TYPES) if file_bits else frozenset()
    try:
        lin = Linear(t, Device.DEFAULT)
    finally:
        Linear.FILE_BITS_TYPES = saved
    assert (lin.blocks is not None) == file_bits, "the CPU's renderer has no integer vectors here"
    return lin


def timed(fns: list, x: Tensor, reps: int, rounds: int, wall: bool) -> list[float]:
    """Median seconds per call of each jitted fn in `fns`, the fns taking turns round by round."""
    clock = time.perf_counter if wall else time.process_time
    jits = [TinyJit(lambda v, f=f: f(v).realize()) for f in fns]
    for jit in jits:
        for _ in range(3):
            jit(x)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for jit, ts in zip(jits, times):
            start = clock()
            for _ in range(reps):
                jit(x)
            ts.append((clock() - start) / reps)
    return [float(np.median(ts)) for ts in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", type=int, default=1, help="rows of x (1: decode; 16 or 64: a prefill chunk)")
    ap.add_argument("--wall", action="store_true", help="wall time, not CPU time (threads: the time they take)")
    ap.add_argument("--big", type=int, default=0, metavar="MB",
                    help="rows repeated until a matrix has this many MB of values (past the caches: decode reads "
                         "every weight once a token, from memory)")
    ap.add_argument("--types", default="", help="only these types, comma-separated names (Q4_K,Q6_K)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    only = set(args.types.split(",")) - {""}
    print(f"{'type':6} {'shape':14} {'what':13} {'planes us':>10} {'bits us':>10} {'bits/planes':>12}")
    for ttype, shape, what in CASES:
        name = GGML_TYPES[ttype][0]
        if only and name not in only:
            continue
        if args.big:
            shape = (shape[0] * -(-(args.big << 20) // (shape[0] * shape[1])), shape[1])
        blocks = random_blocks(ttype, shape, rng)
        x = Tensor(rng.standard_normal((args.rows, shape[1])).astype(np.float32)).realize()
        bits, planes = linear(ttype, shape, blocks, True), linear(ttype, shape, blocks, False)
        # the two compute the same values (a sum's order aside)
        np.testing.assert_allclose(bits(x).numpy(), planes(x).numpy(), rtol=1e-3, atol=1e-3)
        tp, tb = timed([planes, bits], x, args.reps, args.rounds, args.wall)
        print(f"{name:6} {str(shape):14} {what:13} {tp * 1e6:10.1f} {tb * 1e6:10.1f} {tb / tp:11.2f}x")


if __name__ == "__main__":
    main()
