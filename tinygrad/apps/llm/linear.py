"""Quantized GGUF matrices on the device, and y = x @ W.T over them (`Linear`).

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K matrices are split at load into planes: int8 values and a scale (and
offset) per group of 16 or 32, so a matrix-vector product reads whole vectors of int8 and one scale a group. Other
quantized types keep the file's blocks, dequantized by Tensor ops in the kernel that reads them.
"""
from __future__ import annotations

import numpy as np

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.nn.state_gguf import GGUFTensor, dequantize
from tinygrad.tensor import Tensor

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K = 2, 3, 6, 7, 8, 12, 14
# what _planes makes of each type: (values a group, the scales' (and offsets') dtype, whether groups have offsets).
# Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 keep the file's fp16 scales (and minimums, negated: exact); Q4_K's and Q6_K's are
# products of an fp16 and a 6- or 8-bit integer, which need float32 to be exact.
PLANE_LAYOUT = {Q4_0: (32, np.float16, False), Q4_1: (32, np.float16, True), Q5_0: (32, np.float16, False),
                Q5_1: (32, np.float16, True), Q8_0: (32, np.float16, False), Q4_K: (32, np.float32, True),
                Q6_K: (16, np.float32, False)}
PLANE_TYPES = tuple(PLANE_LAYOUT)
# a matrix's planes are made on the host and copied to the device about this many bytes of int8 values at a time,
# so loading never holds a whole matrix's temporaries (the 262,144-row embedding table's would be 170 MB and more)
LOAD_CHUNK_BYTES = 8 << 20


def _f16(b: np.ndarray) -> np.ndarray:
    """Two-byte fields (n, 2) of blocks as the fp16 values they hold (n, 1), in a copy of their own."""
    return np.ascontiguousarray(b).view(np.float16)


def _planes(ttype: int, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A quantized type's blocks as planes: int8 values (n, values a block), scales and offsets (or None) (n, groups
    a block), fp16 or float32 as PLANE_LAYOUT says: value = q * scale - offset, each group of consecutive values
    sharing a scale and offset."""
    if ttype == Q8_0:
        b = raw.reshape(-1, 34)
        return b[:, 2:].view(np.int8), _f16(b[:, :2]), None
    if ttype == Q4_0:
        b = raw.reshape(-1, 18)
        qs = b[:, 2:18]
        return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int8) - 8, _f16(b[:, :2]), None
    if ttype == Q4_1:
        b = raw.reshape(-1, 20)  # fp16 d, fp16 minimum m, 16 bytes of nibbles: value = q * d + m
        qs = b[:, 4:20]
        return np.concatenate([qs & 0xF, qs >> 4], axis=1).view(np.int8), _f16(b[:, :2]), -_f16(b[:, 2:4])
    if ttype in (Q5_0, Q5_1):
        # fp16 d (and Q5_1's fp16 minimum m), 32 high bits (value i's is bit i of the little-endian uint32), 16 bytes
        # of low nibbles; every step in bytes, so a chunk's temporaries stay its own size
        at = 2 if ttype == Q5_0 else 4
        b = raw.reshape(-1, at + 20)
        qs = b[:, at + 4:]
        high = np.unpackbits(b[:, at:at + 4], axis=1, bitorder="little") << 4
        q = (np.concatenate([qs & 0xF, qs >> 4], axis=1) | high).view(np.int8)
        if ttype == Q5_1:
            return q, _f16(b[:, :2]), -_f16(b[:, 2:4])
        return q - np.int8(16), _f16(b[:, :2]), None
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


def plane_values(q: np.ndarray, d: np.ndarray, m: np.ndarray | None) -> np.ndarray:
    """The float32 values (n, values a block) that planes from _planes stand for."""
    v = q.astype(np.float32).reshape(d.shape[0], d.shape[1], -1) * d.astype(np.float32)[:, :, None]
    return (v - m.astype(np.float32)[:, :, None] if m is not None else v).reshape(q.shape[0], -1)


def _rows_planes(ts: list[GGUFTensor], lo: int, hi: int) -> list[np.ndarray | None]:
    """The planes (values (hi - lo, in), scales and offsets (hi - lo, groups)) of rows lo..hi-1 of matrices `ts`
    stacked along the output dim, made from the mapped file's blocks of those rows only; the file's pages of them
    are let go once read (the planes are copies)."""
    parts, first = [], 0
    for t in ts:
        a, b = max(lo, first), min(hi, first + t.shape[0])
        if a < b:
            row_bytes = t.nbytes // t.shape[0]
            start, nbytes = (a - first) * row_bytes, (b - a) * row_bytes
            q, d, m = _planes(t.ttype, t.host_blocks()[start:start + nbytes])
            # NOTE: copies (Q8_0's values are a view of the file's blocks until here): the pages are let go next
            parts.append([np.ascontiguousarray(p.reshape(b - a, -1)) if p is not None else None for p in (q, d, m)])
            t.src.release_pages(t.where + start, nbytes)
        first += t.shape[0]
    if len(parts) == 1:
        return parts[0]
    return [np.concatenate([p[k] for p in parts]) if parts[0][k] is not None else None for k in range(3)]


def _write_rows(dst: Tensor, at, start: int, rows: np.ndarray) -> None:
    """Rows start.. of the realized device tensor `dst` set to host array `rows`: copied to the device, then into
    place by a kernel that takes the start as Variable `at` (the same kernel for every chunk of the same size)."""
    a = at.bind(start)
    dst.shrink(((a, a + rows.shape[0]), None)).assign(Tensor(rows, device=dst.device)).realize()


class Linear:
    """y = x @ W.T for a GGUF matrix W (out, in): quantized blocks dequantized inside the kernel that reads them.

    Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K are split at load into planes (see _planes): int8 values (out, in),
    and scales (and Q4_1's, Q5_1's and Q4_K's offsets) (out, groups) per group of 16 or 32 values. Q4_0, Q4_1, Q5_0,
    Q5_1 and Q8_0 scales and offsets stay the file's fp16 (cast to float32 in the kernel, exactly), so Q8_0 takes
    the file's bytes and the 4- and 5-bit types up to 8 bits a value plus
    the file's scales; Q4_K's and Q6_K's scales (and offsets) are float32, the products of the file's fp16 and its
    6- or 8-bit factors, which fp16 can't hold exactly. A matrix-vector product then reads int8 values and a scale
    per group instead of taking every block apart bit by bit. The planes are made and copied to the device a few
    MB at a time (LOAD_CHUNK_BYTES), so loading holds about the weights and one chunk. Other types stay packed and
    are dequantized by gguf's Tensor ops in the kernel."""

    def __init__(self, t: GGUFTensor, device: str):
        self.shape, self.ttype = t.shape, t.ttype
        self.raw = self.w = self.qs = self.d = self.m = None
        if t.ttype in PLANE_TYPES:
            self._load_planes([t], device)
        elif t.quantized:
            self.raw = t.raw().to(device).realize()
        else:
            self.w = t.load().to(device).cast(dtypes.float32).realize()
        # copied out: the file's pages of this matrix need not stay resident while the next ones are read (the peak
        # while loading is then about one matrix of the file, not all of it)
        t.src.release_pages(t.where, t.nbytes)

    def _load_planes(self, ts: list[GGUFTensor], device: str) -> None:
        """The planes of one matrix, or of several stacked along the output dim (rows of each in turn), made and
        copied to the device a chunk of rows at a time: a matrix that fits in one is copied as it is, a larger one
        is written into its device tensors chunk by chunk."""
        out, inner = self.shape
        group, scale_dtype, offsets = PLANE_LAYOUT[ts[0].ttype]
        self.groups = inner // group
        # on a CPU (no local dims) a product with offsets takes them apart (see __call__): its loop over the values
        # is bound by instructions there, where on a GPU, bound by memory, the two more small kernels would only add
        # their launches
        opts = getattr(Device[device], "linearizer_opts", None)
        self.split_offsets = offsets and opts is not None and not opts.has_local
        step = max(1, LOAD_CHUNK_BYTES // inner)
        if out <= step:
            planes = [Tensor(p, device=device).realize() if p is not None else None for p in _rows_planes(ts, 0, out)]
        else:
            from tinygrad.shape.symbolic import Variable
            kinds = [(inner, np.int8), (self.groups, scale_dtype)] + ([(self.groups, scale_dtype)] if offsets else [])
            planes = [Tensor.empty(out, w, dtype=dtypes.from_np(np.dtype(dt)), device=device).realize()
                      for w, dt in kinds] + [None] * (3 - len(kinds))
            at = Variable("load_row", 0, out - step)
            for start in range(0, out, step):
                # the last chunk ends at the last row, overlapping the one before: every chunk is one kernel's size
                start = min(start, out - step)
                for dst, rows in zip(planes, _rows_planes(ts, start, start + step)):
                    if rows is not None:
                        _write_rows(dst, at, start, rows)
        self.qs, self.d, self.m = planes

    @classmethod
    def stacked(cls, ts: list[GGUFTensor], device: str) -> Linear | None:
        """One Linear for matrices that read the same input (q, k and v; gate and up): their rows stacked, so one
        kernel reads the input once, which the kernel that makes it can then fuse into (a single consumer). None
        where their planes differ in group size, scale dtype or offsets (or have none), so they can't share one
        kernel."""
        if len({t.shape[1] for t in ts}) != 1 or any(t.ttype not in PLANE_TYPES for t in ts) or \
                len({PLANE_LAYOUT[t.ttype] for t in ts}) != 1:
            return None
        self = cls.__new__(cls)
        self.shape, self.ttype = (sum(t.shape[0] for t in ts), ts[0].shape[1]), ts[0].ttype
        self.raw = self.w = self.qs = self.d = self.m = None
        self._load_planes(ts, device)
        for t in ts:
            t.src.release_pages(t.where, t.nbytes)
        return self

    def _grouped(self) -> Tensor:
        """The planes' values (out, groups, values a group), dequantized: int8 times its group's scale (fp16 scales
        cast to float32, exactly), less its offset."""
        out, inner = self.shape
        g = self.groups
        w = self.qs.cast(dtypes.float32).reshape(out, g, inner // g) * self.d.cast(dtypes.float32).reshape(out, g, 1)
        return w - self._offsets().reshape(out, g, 1) if self.m is not None else w

    def _offsets(self) -> Tensor:
        return self.m if self.m.dtype == dtypes.float32 else self.m.cast(dtypes.float32)

    def weight(self) -> Tensor:
        if self.w is not None:
            return self.w
        if self.qs is not None:
            return self._grouped().reshape(self.shape)
        return dequantize(self.ttype, self.raw, self.shape)

    def __call__(self, x: Tensor) -> Tensor:
        if self.qs is None:
            return x @ self.weight().T
        # the planes keep their groups as a dim of the sum: each group's scale is one value for a run of consecutive
        # values, so the kernel reads whole vectors of int8 values along the group and one scale per group, where a
        # flat (out, in) weight would index the scale by division for every value
        inner, g = self.shape[1], self.groups
        if self.m is not None and self.split_offsets:
            # sum_g (d_g q . x_g - m_g sum(x_g)): the offsets' part is a small product of its own over the input's
            # group sums, so the long loop over the values does one subtraction less a value
            out = self.shape[0]
            xg = x.reshape(*x.shape[:-1], 1, g, inner // g)
            w = self.qs.cast(dtypes.float32).reshape(out, g, inner // g) * \
                self.d.cast(dtypes.float32).reshape(out, g, 1)
            return (xg * w).sum((-2, -1)) - (xg.sum(-1) * self._offsets().reshape(out, g)).sum(-1)
        return (x.reshape(*x.shape[:-1], 1, g, inner // g) * self._grouped()).sum((-2, -1))
