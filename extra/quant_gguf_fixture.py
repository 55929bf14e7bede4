#!/usr/bin/env python3
"""Write the dequantization fixture: a few blocks of every ggml type the runtime reads, with gguf-py's values.

The `gguf` package (llama.cpp's gguf-py) is the oracle: `gguf.quants.dequantize(blocks, type)` gives each block's
float32 values, recorded as their bit patterns (so NaN, infinities and -0.0 compare exactly). The blocks are made to
cover what a kernel can get wrong: random bytes (any scale, subnormals and NaNs among them), an all-zero block,
fp16 scales of +inf and NaN, the largest and the smallest (subnormal) fp16, negative zero and the most negative
fp16, and a block of ordinary small scales as a trained model has. Plain types (F32, F16, BF16) get random words
and their special values.

The JSON (gzip) maps a type's name to {"id", "values" (per block), "blocks" (hex, one string per block), "bits"
(the expected float32 bits of all values, hex of little-endian uint32)}. Tests compare against it without gguf.

    python extra/quant_gguf_fixture.py --out test/fixtures/quant_blocks.json.gz     # needs gguf and numpy
"""
import argparse
import gzip
import json

import gguf
import numpy as np

SEED = 28
# ggml type name -> (id, values a block, bytes a block, offsets of the block's fp16 fields: scale first, then min)
TYPES = {
    "F32": (0, 1, 4, ()), "F16": (1, 1, 2, ()), "BF16": (30, 1, 2, ()),
    "Q4_0": (2, 32, 18, (0,)), "Q4_1": (3, 32, 20, (0, 2)), "Q5_0": (6, 32, 22, (0,)), "Q5_1": (7, 32, 24, (0, 2)),
    "Q8_0": (8, 32, 34, (0,)), "Q2_K": (10, 256, 84, (80, 82)), "Q3_K": (11, 256, 110, (108,)),
    "Q4_K": (12, 256, 144, (0, 2)), "Q5_K": (13, 256, 176, (0, 2)), "Q6_K": (14, 256, 210, (208,)),
    "IQ4_NL": (20, 32, 18, (0,)), "IQ4_XS": (23, 256, 136, (0,)),
}
# the fp16 fields of the special blocks, as bits: (scale, min)
SPECIAL_SCALES = [(0x7C00, 0x7E00), (0x7BFF, 0x0001), (0x8000, 0xFBFF), (0x7E00, 0x7C00), (0xFC00, 0x3C00)]
PLAIN_SPECIAL = {"F32": [0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 0x00000001, 0x7F7FFFFF],
                 "F16": [0x7C00, 0xFC00, 0x7E00, 0x8000, 0x0001, 0x7BFF],
                 "BF16": [0x7F80, 0xFF80, 0x7FC0, 0x8000, 0x0001, 0x7F7F]}


def blocks_of(name: str, rng: np.random.Generator) -> np.ndarray:
    """(blocks, bytes a block) uint8: the cases of the module docstring for one type."""
    tid, values, nbytes, halves = TYPES[name]
    if not halves:  # a plain type: one "block" of 64 elements
        width = nbytes * 8
        words = rng.integers(0, 1 << width, 64 - len(PLAIN_SPECIAL[name]), dtype=np.uint64)
        words = np.concatenate([words, np.array(PLAIN_SPECIAL[name], dtype=np.uint64)])
        return words.astype(f"<u{nbytes}").view(np.uint8).reshape(1, -1)
    rows = [rng.integers(0, 256, nbytes, dtype=np.uint8), np.zeros(nbytes, np.uint8)]
    for scale, low in SPECIAL_SCALES:
        b = rng.integers(0, 256, nbytes, dtype=np.uint8)
        for at, bits in zip(halves, (scale, low)):
            b[at:at + 2] = np.array([bits], dtype="<u2").view(np.uint8)
        rows.append(b)
    ordinary = rng.integers(0, 256, nbytes, dtype=np.uint8)
    for at in halves:
        ordinary[at:at + 2] = np.array([rng.uniform(1e-4, 1e-2)], dtype="<f2").view(np.uint8)
    rows.append(ordinary)
    return np.stack(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    out = {}
    for name, (tid, values, _, _) in TYPES.items():
        blocks = blocks_of(name, rng)
        with np.errstate(all="ignore"):
            expected = gguf.quants.dequantize(blocks.reshape(-1), gguf.GGMLQuantizationType[name])
        expected = np.asarray(expected, dtype=np.float32).reshape(-1)
        out[name] = {"id": tid, "values": values, "blocks": [bytes(b).hex() for b in blocks],
                     "bits": expected.view("<u4").tobytes().hex()}
    with gzip.open(args.out, "wt") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
