"""Quantized GGUF matrices on the device in the file's own bits, and y = x @ W.T over them (`Linear`).

A matrix is kept as the file stores it: its rows of blocks, byte for byte (F16 and BF16 as their 16-bit words), so
the device holds the file's tensor bytes and no more. The kernel of a product reads those bytes and takes each block
apart itself (state_gguf's Tensor-op dequantizers: shifts and masks of the quant bytes, the fp16 scales bitcast
from byte pairs, the scale products in float32), with the block's groups kept as dims of the sum, so a group's scale
is computed once for its run of values. Every ggml type state_gguf reads works; values are bit-exact against the
`gguf` package's reference (a sum's order is the kernel's own).

NOTE: on the CPU the quant fields are taken apart as int32 vectors (state_gguf's _ifields: bytes widened once,
shifted, masked and combined, then converted to float32 whole; the C renderer's int_vectors), so a product costs
a few integer vector ops a value more than int8 planes did, and reads fewer bytes (extra/bench_quant.py compares).

The host helpers at the end (_planes, plane_values) dequantize a few rows on the host, for the embedding table.
"""
from __future__ import annotations

import numpy as np

from tinygrad.dtype import dtypes
from tinygrad.nn.state_gguf import GGML_TYPES, GGUFTensor, dequantize
from tinygrad.tensor import Tensor

Q4_0, Q5_0, Q8_0, Q4_K, Q6_K = 2, 6, 8, 12, 14
BF16 = 30
# a matrix's blocks are copied to the device about this many bytes at a time, the file's pages of each chunk let go
# once copied, so loading never holds a large matrix's pages and its device copy at once (the 262,144-row
# embedding table of Gemma 3 is 178 MB)
LOAD_CHUNK_BYTES = 8 << 20


def _rows_bytes(ts: list[GGUFTensor], lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi-1 (hi - lo, row bytes) of matrices `ts` stacked along the output dim, a host copy of the file's
    blocks of those rows; the file's pages of them are let go once copied."""
    parts, first = [], 0
    for t in ts:
        a, b = max(lo, first), min(hi, first + t.shape[0])
        if a < b:
            row_bytes = t.nbytes // t.shape[0]
            start, nbytes = (a - first) * row_bytes, (b - a) * row_bytes
            parts.append(t.host_blocks()[start:start + nbytes].reshape(b - a, row_bytes).copy())
            t.src.release_pages(t.where + start, nbytes)
        first += t.shape[0]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _load_rows(ts: list[GGUFTensor], device: str) -> Tensor:
    """The blocks of one matrix, or of several stacked along the output dim, as a (rows, row bytes) uint8 tensor on
    `device`: a matrix that fits in one chunk copied as it is, a larger one written into its device tensor a chunk
    of rows at a time (the chunk's start a Variable: one kernel for every chunk)."""
    out, row_bytes = sum(t.shape[0] for t in ts), ts[0].nbytes // ts[0].shape[0]
    step = max(1, LOAD_CHUNK_BYTES // row_bytes)
    if out <= step:
        return Tensor(_rows_bytes(ts, 0, out), device=device).realize()
    from tinygrad.shape.symbolic import Variable
    dst = Tensor.empty(out, row_bytes, dtype=dtypes.uint8, device=device).realize()
    at = Variable("load_row", 0, out - step)
    for start in range(0, out, step):
        # the last chunk ends at the last row, overlapping the one before: every chunk is one kernel's size
        start = min(start, out - step)
        a = at.bind(start)
        rows = Tensor(_rows_bytes(ts, start, start + step), device=device)
        dst.shrink(((a, a + step), None)).assign(rows).realize()
    return dst


class Linear:
    """y = x @ W.T for a GGUF matrix W (out, in), its blocks on the device as the file has them (`blocks`, (out,
    row bytes) uint8), dequantized inside the kernel that reads them; see the module docstring."""

    def __init__(self, t: GGUFTensor, device: str):
        self.shape, self.ttype = t.shape, t.ttype
        self.blocks = _load_rows([t], device)
        # copied out: the file's pages of this matrix need not stay resident while the next ones are read
        t.src.release_pages(t.where, t.nbytes)

    @classmethod
    def stacked(cls, ts: list[GGUFTensor], device: str) -> Linear | None:
        """One Linear for matrices that read the same input (q, k and v; gate and up): their rows stacked, so one
        kernel reads the input once, which the kernel that makes it can then fuse into (a single consumer). None
        where their types or input sizes differ.

        NOTE: matrices of different types are not stacked: a kernel has no branch per row, so one reading two
        types' blocks (each padded to all the rows) would compute both dequantizations for every row, where the
        loads alone are gated (Gemma 3's Q5_0 q and k with its Q8_0 v: about 1.5x the ALU work of the separate
        products, for one launch saved). The model stacks q and k there and keeps v apart."""
        if len({t.shape[1] for t in ts}) != 1 or len({t.ttype for t in ts}) != 1 or any(len(t.shape) != 2 for t in ts):
            return None
        self = cls.__new__(cls)
        self.shape, self.ttype = (sum(t.shape[0] for t in ts), ts[0].shape[1]), ts[0].ttype
        self.blocks = _load_rows(ts, device)
        for t in ts:
            t.src.release_pages(t.where, t.nbytes)
        return self

    def device_bytes(self) -> int:
        """The device memory this matrix holds: the file's tensor bytes."""
        return self.blocks.nbytes()

    def _grouped(self) -> Tensor:
        """The matrix's values (out, blocks a row, *the block's dims), dequantized by the type's Tensor ops from the
        bytes on the device (see state_gguf's dequantizers); a plain type's values as (out, in)."""
        out, inner = self.shape
        name, per_block, block_bytes, kind = GGML_TYPES[self.ttype]
        if not callable(kind):
            return dequantize(self.ttype, self.blocks.reshape(-1), (out, inner))
        nb = inner // per_block
        w = kind(self.blocks.reshape(out * nb, block_bytes))
        return w.reshape(out, nb, *w.shape[1:])

    def weight(self) -> Tensor:
        """W (out, in) as float32, lazily dequantized."""
        return self._grouped().reshape(self.shape)

    def __call__(self, x: Tensor) -> Tensor:
        # the blocks and their groups stay dims of the sum: a group's scale is one value for a run of consecutive
        # values, so the kernel computes it once per group (its loop hoisted out of the values' loop) where a flat
        # (out, in) weight would index the scale by division for every value
        w = self._grouped()
        dims = w.ndim - 1
        return (x.reshape(*x.shape[:-1], 1, *w.shape[1:]) * w).sum(tuple(range(-dims, 0)))


# ---- host dequantization of a few rows (the embedding table's, a token at a time) ----
def _f16(b: np.ndarray) -> np.ndarray:
    """Two-byte fields (n, 2) of blocks as the fp16 values they hold (n, 1), in a copy of their own."""
    return np.ascontiguousarray(b).view(np.float16)


def _planes(ttype: int, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A quantized type's blocks (PLANE_TYPES) on the host as planes: int8 values (n, values a block), scales and
    offsets (or None) (n, groups a block): value = q * scale - offset, each group of consecutive values sharing a
    scale and offset (the scales float32 products, as gguf's reference computes them)."""
    if ttype == Q8_0:
        b = raw.reshape(-1, 34)
        return b[:, 2:].view(np.int8), _f16(b[:, :2]), None
    if ttype == Q4_0:
        b = raw.reshape(-1, 18)
        qs = b[:, 2:18]
        return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int8) - 8, _f16(b[:, :2]), None
    if ttype == Q5_0:
        b = raw.reshape(-1, 22)  # fp16 d, 32 high bits (value i's is bit i of the little-endian uint32), 16 bytes
        qs = b[:, 6:22]          # of low nibbles
        high = np.unpackbits(b[:, 2:6], axis=1, bitorder="little") << 4
        return (np.concatenate([qs & 0xF, qs >> 4], axis=1) | high).view(np.int8) - np.int8(16), _f16(b[:, :2]), None
    if ttype == Q4_K:
        # fp16 d and dmin, 8 six-bit scales and mins packed in 12 bytes, 128 bytes of nibbles: chunk c of 32 bytes
        # holds sub-block 2c in its low nibbles and 2c+1 in its high ones
        b = raw.reshape(-1, 144)
        s = b[:, 4:16].astype(np.uint16)
        sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
        mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
        qs = b[:, 16:144].reshape(-1, 4, 32)
        q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 256).astype(np.int8)
        return q, _f16(b[:, 0:2]).astype(np.float32) * sc, _f16(b[:, 2:4]).astype(np.float32) * mn
    # Q6_K: 128 bytes of low nibbles, 64 of 2-bit pairs, 16 int8 scales (one per 16 values), fp16 d; each half of
    # 128 values is four quarters: quarter k takes its low 4 bits from ql (bytes 64h+32(k%2).., low nibble for k < 2)
    # and its top 2 from bits 2k of qh (bytes 32h..)
    b = raw.reshape(-1, 210)
    ql = b[:, 0:128].reshape(-1, 2, 2, 32)
    qh = b[:, 128:192].reshape(-1, 2, 32)
    low = np.concatenate([ql & 0xF, ql >> 4], axis=2)  # (n, half, quarter, 32)
    high = np.stack([(qh >> (2 * k)) & 3 for k in range(4)], axis=2)
    q = ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8).reshape(-1, 256)
    return q, _f16(b[:, 208:210]).astype(np.float32) * b[:, 192:208].view(np.int8).astype(np.float32), None


PLANE_TYPES = (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K)


def plane_values(q: np.ndarray, d: np.ndarray, m: np.ndarray | None) -> np.ndarray:
    """The float32 values (n, values a block) that planes from _planes stand for."""
    v = q.astype(np.float32).reshape(d.shape[0], d.shape[1], -1) * d.astype(np.float32)[:, :, None]
    return (v - m.astype(np.float32)[:, :, None] if m is not None else v).reshape(q.shape[0], -1)
