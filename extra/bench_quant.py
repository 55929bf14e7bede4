"""Time of one quantized matrix-vector product on the CPU: Linear in the file's bits (the blocks dequantized in the
kernel) beside Linear on int8 planes (values widened to int8 at load, a scale and offset per group), same run.

Each row is one type at one of Gemma 3 270M's or SmolLM2-135M's shapes (Q4_0 at Gemma's q shape, as neither has
one), random blocks with finite fp16 scales. Both products are captured by TinyJit and called in turn, A B A B; the
time per call is the median of the rounds, CPU time (time.process_time: other processes on a shared machine add
little; with threads, the sum of theirs) or wall time (--wall). OMP_NUM_THREADS=1 unless set (decode runs on 2).

    PYTHONPATH=. python extra/bench_quant.py [--reps 200] [--rows 1] [--wall] [--types Q4_K,Q6_K]

`--gpu` times the products on CUDA instead, at an 8B Llama's shapes (GPU_SHAPES), for Q4_K and Q6_K: Linear in the
file's bits (32-bit words, a GPU's layout) and on int8 planes (TG_LLM_FILE_BITS=0's layout), an fp16 matrix-vector
product in tinygrad, and PyTorch's fp16 matmul. The tinygrad products run inside TinyJit and are timed by their
kernels' GPU time (the best of --reps calls); PyTorch's with CUDA events. GB/s is the weights' device bytes read
once per call (x and y are a few KB), beside the H200's 4.8 TB/s.

    CUDA=1 PYTHONPATH=. python extra/bench_quant.py --gpu [--rows 1] [--reps 50] [--words-only] [--shapes down,qkv]

The words are in columns (state_gguf.WORD_COLUMNS) unless TG_LLM_WORD_COLUMNS=0 (the file's order, for comparison).

`--memory GGUF` loads a model file on --device (CUDA by default) and prints the device bytes of its matrices (every
Linear) beside the file's bytes of those tensors, by type (issue 28: within 1.1x).

    PYTHONPATH=. python extra/bench_quant.py --memory ~/.cache/tinygrad/synthetic/llama-llama-3.1-8b-Q4_K_M.gguf
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
# (out, in) of an 8B Llama's matrices: q and o (k and v are 1024 rows), q, k and v stacked, gate and up stacked,
# down, the output projection
GPU_SHAPES = [((4096, 4096), "q, o"), ((6144, 4096), "qkv"), ((28672, 4096), "gate+up"), ((4096, 14336), "down"),
              ((128256, 4096), "output")]
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


def gpu_linear(ttype: int, shape: tuple[int, int], blocks: np.ndarray, words: bool, device: str) -> Linear:
    """Linear over `blocks` on `device` (a GPU), as 32-bit words or as int8 planes."""
    t = GGUFTensor(CheckpointBytes.in_memory(blocks.tobytes(), "w"), "w", shape, ttype, 0, blocks.nbytes)
    saved = Linear.__dict__["word_bits"]
    if not words:
        Linear.word_bits = classmethod(lambda cls, tt, device: False)
    try:
        lin = Linear(t, device)
    finally:
        Linear.word_bits = saved
    assert (lin.words is not None) == words, "a GPU's Linear keeps Q4_K and Q6_K as words unless TG_LLM_FILE_BITS=0"
    return lin


def main_gpu(args) -> None:
    """The --gpu table: see the module docstring."""
    import torch
    from benchlib import best_of, cuda_event_seconds

    from tinygrad import dtypes
    from tinygrad.benchmark.timing import best
    rng = np.random.default_rng(0)
    dev, cuda = args.device, args.device == "CUDA"
    shapes = GPU_SHAPES if cuda else [((s[0] // 16, s[1] // 4), w) for s, w in GPU_SHAPES]  # (a dry run's)
    print(f"{torch.cuda.get_device_name() if cuda else dev}  torch {torch.__version__}  rows of x: {args.rows}")
    print(f"{'type':6} {'shape':14} {'what':9} {'words us':>9} {'GB/s':>6} {'planes us':>10} {'GB/s':>6} "
          f"{'fp16 us':>8} {'GB/s':>6} {'torch us':>9} {'GB/s':>6} {'words/torch':>12}")
    for ttype in (Q4_K, Q6_K):
        name = GGML_TYPES[ttype][0]
        if args.types and name not in args.types.split(","):
            continue
        for shape, what in shapes:
            if args.shapes and what not in args.shapes.split(","):
                continue
            blocks = random_blocks(ttype, shape, rng)
            x = rng.standard_normal((args.rows, shape[1])).astype(np.float32)
            xt = Tensor(x, device=dev).realize()
            words = gpu_linear(ttype, shape, blocks, True, dev)
            planes = None if args.words_only else gpu_linear(ttype, shape, blocks, False, dev)
            w16 = words.weight().cast(dtypes.float16).realize()
            x16 = xt.cast(dtypes.float16).realize()
            tw16, tx16 = torch.from_numpy(w16.numpy()), torch.from_numpy(x16.numpy())
            if cuda:
                tw16, tx16 = tw16.cuda(), tx16.cuda()
            fns = [(lambda v, f=words: f(v).realize(), xt)]
            if not args.words_only:
                fns += [(lambda v, f=planes: f(v).realize(), xt), (lambda v, w=w16: (v @ w.T).realize(), x16)]
            times, outs = [], []
            for fn, arg in fns:
                jit = TinyJit(fn)
                for _ in range(3):
                    out = jit(arg)
                outs.append(out.numpy().astype(np.float32))
                times.append(best(lambda j=jit: sum(ei.prg(ei.bufs, {}, wait=True) for ei in j.jit_cache),
                                  args.reps))
            ref = outs[0]
            for got in outs[1:]:
                # planes and fp16 compute the same values (fp16 weights and x rounded): the sums agree loosely
                np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2 * float(np.abs(ref).max()))
            fn = lambda a=tx16, b=tw16: a @ b.T  # noqa: E731
            t_torch = cuda_event_seconds(torch, fn, args.reps) if cuda else best_of(fn, args.reps)
            nbytes = [words.device_bytes()] + ([] if args.words_only else [planes.device_bytes(), w16.nbytes()])
            cols = []
            for t, nb in zip(times + [t_torch], nbytes + [w16.nbytes()]):
                cols.append(f"{t * 1e6:9.1f} {nb / t / 1e9:6.0f}")
            if args.words_only:
                cols[1:1] = [f"{'-':>9} {'-':>6}"] * 2
            print(f"{name:6} {str(shape):14} {what:9} {' '.join(cols)} {t_torch / times[0]:11.2f}x")


def main_memory(path: str, device: str) -> None:
    """The --memory table: see the module docstring."""
    from tinygrad.apps.llm.model import Transformer
    from tinygrad.nn.state_gguf import gguf_tensors
    kv, tensors = gguf_tensors(path)
    model = Transformer(kv, tensors, device, max_context=256)
    linears = [model.output] + [v for layer in model.layers for v in layer.values() if isinstance(v, Linear)]
    by_type: dict[str, list[int]] = {}
    for lin in linears:
        name, per_block, block_bytes, _ = GGML_TYPES[lin.ttype]
        row = by_type.setdefault(name, [0, 0, 0])
        row[0] += 1
        row[1] += lin.device_bytes()
        row[2] += lin.shape[0] * lin.shape[1] // per_block * block_bytes
    print(f"{path}  on {device}")
    print(f"{'type':6} {'matrices':>9} {'device GB':>10} {'file GB':>8} {'ratio':>6}")
    for name, (n, dev, file) in sorted(by_type.items()):
        print(f"{name:6} {n:9} {dev / 1e9:10.3f} {file / 1e9:8.3f} {dev / file:6.3f}")
    dev, file = sum(r[1] for r in by_type.values()), sum(r[2] for r in by_type.values())
    print(f"{'all':6} {len(linears):9} {dev / 1e9:10.3f} {file / 1e9:8.3f} {dev / file:6.3f}")


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
    ap.add_argument("--gpu", action="store_true", help="the CUDA table (see the module docstring)")
    ap.add_argument("--shapes", default="", help="--gpu: only these shapes, by their `what` (down,output)")
    ap.add_argument("--words-only", action="store_true", help="--gpu: words and PyTorch only (no planes, fp16)")
    ap.add_argument("--device", default="CUDA", help="--gpu's device (another only for a dry run, small shapes)")
    ap.add_argument("--memory", metavar="GGUF", help="device bytes of a model's matrices (see the docstring)")
    args = ap.parse_args()
    if args.memory:
        main_memory(args.memory, args.device)
        return
    if args.gpu:
        main_gpu(args)
        return
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
