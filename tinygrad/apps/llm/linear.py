"""Quantized GGUF matrices on the device, and y = x @ W.T over them (`Linear`), in one of three layouts.

File bits (on a CPU whose C renderer has integer vectors, for the types in Linear.FILE_BITS_TYPES): a matrix is kept
as the file stores it, its rows of blocks byte for byte (F16 and BF16 as their 16-bit words), so the device holds the
file's tensor bytes and no more. The kernel of a product reads those bytes and takes each block apart itself
(state_gguf's Tensor-op dequantizers: bytes widened to int32 vectors once, shifted, masked and combined, then
converted to float32 whole; the fp16 scales bitcast from byte pairs), with the block's groups kept as dims of the
sum, so a group's scale is computed once for its run of values. Values are bit-exact against the `gguf` package's
reference (a sum's order is the kernel's own). A CPU's decode is bound by memory: reading the file's bits (4.5 bits a
value for Q4_K) where planes read 8 and more is what gets it past llama.cpp.

Words (a GPU, for the types of state_gguf.WORD_TYPES: Q4_K, Q5_K and Q6_K, what Q4_K_M and Q5_K_M files are made of):
the file's blocks as 32-bit words (Q6_K's 210 bytes padded to 212), dequantized in the product by the word dequantizers;
the product's sum runs over words, each word's 8 values written out as terms, so a GPU kernel's step is a word or a few
(one 4-byte load each), its fields taken apart by constant shifts, and its sub-blocks' scales decoded once for the
step's values. Q4_K, Q5_K and Q6_K are rearranged at load into columns (state_gguf.WORD_COLUMNS, the same words): word j
of a block holds value j of each of its 8 runs of 32, so a warp's lanes read consecutive words and x at consecutive
floats; in the file's order (TG_LLM_WORD_COLUMNS=0) a lane's word holds values 4 apart, and its x loads took four times
the L1 wavefronts (H200, M = 1: 260-760 GB/s in the file's order, 750-1410 in columns; the 8B's decode 72.5 -> 105.5
tok/s).

Planes (every other device and type, or TG_LLM_FILE_BITS=0): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K
matrices are split at load into int8 values and a scale (and offset) per group of 16 or 32, so a matrix-vector
product reads whole vectors of int8 and one scale a group. Other quantized types keep the file's blocks, dequantized
by Tensor ops in the kernel that reads them.

Prefill on a GPU with tensor cores (TC_ROWS rows of x or more), whatever the layout: W is dequantized once into a
half matrix and multiplied on the tensor cores (in half, as llama.cpp's batched CUDA path does through cuBLAS).

The host helpers (_planes, plane_values) also dequantize a few rows on the host, for the embedding table.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tinygrad.codegen.gpu_plan import BLOCK_REDUCE_MIN_INPUTS
from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.helpers import getenv
from tinygrad.nn.state_gguf import (
    GGML_TYPES,
    WORD_COLUMNS,
    WORD_TYPES,
    GGUFTensor,
    column_step,
    dequantize,
    in_columns,
)
from tinygrad.tensor import Tensor

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K = 2, 3, 6, 7, 8, 12, 14
# what _planes makes of each type: (values a group, the scales' (and offsets') dtype, whether groups have offsets).
# Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 keep the file's fp16 scales (and minimums, negated: exact); Q4_K's and Q6_K's are
# products of an fp16 and a 6- or 8-bit integer, which need float32 to be exact.
PLANE_LAYOUT = {Q4_0: (32, np.float16, False), Q4_1: (32, np.float16, True), Q5_0: (32, np.float16, False),
                Q5_1: (32, np.float16, True), Q8_0: (32, np.float16, False), Q4_K: (32, np.float32, True),
                Q6_K: (16, np.float32, False)}
PLANE_TYPES = tuple(PLANE_LAYOUT)
# a matrix is copied to the device about this many bytes at a time (its blocks, or its planes' int8 values), the
# file's pages of each chunk let go once copied, so loading never holds a large matrix's pages or temporaries and
# its device copy at once (the 262,144-row embedding table of Gemma 3 is 178 MB)
LOAD_CHUNK_BYTES = 8 << 20
# products with at least this many rows of x (a prefill) on a device with tensor cores dequantize W to half first
# and multiply on the tensor cores (as llama.cpp's batched path dequantizes for cuBLAS); fewer rows (decode) read the
# quantized bits in the product itself, where reading memory is the whole cost
TC_ROWS = 32
# a words product's step takes at most this many words (see Linear.words_a_step): each adds 8 terms to the unrolled
# body, and the block's scales are decoded once a step
WORDS_A_STEP_MAX = 4


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


def _as_words(rows: np.ndarray, ttype: int) -> np.ndarray:
    """Rows of blocks (n, row bytes) uint8 as WORD_TYPES' uint32 words (n, words a row): each block's bytes
    little-endian, padded with zeros to its whole words (Q6_K's 210 bytes to 212)."""
    words, _, _ = WORD_TYPES[ttype]
    block_bytes = GGML_TYPES[ttype][2]
    b = rows.reshape(-1, block_bytes)
    if in_columns(ttype, b.shape[0] // rows.shape[0]):
        # rearranged for a warp's consecutive lanes (see state_gguf.WORD_COLUMNS): the same number of words
        k = column_step(b.shape[0] // rows.shape[0])
        return WORD_COLUMNS[ttype][0](b, k).reshape(rows.shape[0], -1)
    if words * 4 != block_bytes:
        b = np.concatenate([b, np.zeros((b.shape[0], words * 4 - block_bytes), np.uint8)], axis=1)
    return np.ascontiguousarray(b).view("<u4").reshape(rows.shape[0], -1)


def _load_rows(ts: list[GGUFTensor], device: str, words: bool = False) -> Tensor:
    """The blocks of one matrix, or of several stacked along the output dim, as a (rows, row bytes) uint8 tensor on
    `device` (with `words`, (rows, words a row) uint32, see _as_words): a matrix that fits in one chunk copied as it
    is, a larger one written into its device tensor a chunk of rows at a time (the chunk's start a Variable: one
    kernel for every chunk)."""
    out, row_bytes = sum(t.shape[0] for t in ts), ts[0].nbytes // ts[0].shape[0]

    def host(lo: int, hi: int) -> np.ndarray:
        rows = _rows_bytes(ts, lo, hi)
        return _as_words(rows, ts[0].ttype) if words else rows

    step = max(1, LOAD_CHUNK_BYTES // row_bytes)
    if out <= step:
        return Tensor(host(0, out), device=device).realize()
    from tinygrad.shape.symbolic import Variable
    width = row_bytes // GGML_TYPES[ts[0].ttype][2] * WORD_TYPES[ts[0].ttype][0] if words else row_bytes
    dst = Tensor.empty(out, width, dtype=dtypes.uint32 if words else dtypes.uint8, device=device).realize()
    at = Variable("load_row", 0, out - step)
    for start in range(0, out, step):
        # the last chunk ends at the last row, overlapping the one before: every chunk is one kernel's size
        start = min(start, out - step)
        a = at.bind(start)
        rows = Tensor(host(start, start + step), device=device)
        dst.shrink(((a, a + step), None)).assign(rows).realize()
    return dst


class Linear:
    """y = x @ W.T for a GGUF matrix W (out, in), dequantized inside the kernel that reads it; see the module
    docstring for the layouts.

    File bits: `blocks` (out, row bytes) uint8, the file's bytes, read by state_gguf's dequantizers in the product.
    Words (a GPU): `words` (out, words a row) uint32, the file's blocks as state_gguf's word dequantizers read them.
    Planes (see _planes): int8 values `qs` (out, in), and scales `d` (and Q4_1's, Q5_1's and Q4_K's offsets `m`)
    (out, groups) per group of 16 or 32 values. Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 scales and offsets stay the file's
    fp16 (cast to float32 in the kernel, exactly), so Q8_0 takes the file's bytes and the 4- and 5-bit types up to 8
    bits a value plus the file's scales; Q4_K's and Q6_K's scales (and offsets) are float32, the products of the
    file's fp16 and its 6- or 8-bit factors, which fp16 can't hold exactly. Other quantized types keep their blocks
    (`raw`), plain ones load as float32 (`w`). Either way a matrix is made and copied to the device a few MB at a
    time (LOAD_CHUNK_BYTES), so loading holds about the weights and one chunk."""

    # the types a CPU product reads in the file's bits: every one, so that the device holds the file's bytes (the
    # planes of Q5_0 and Q6_K take 1.5x, of Q4_0, Q4_1, Q5_1 and Q4_K 1.6x to 1.8x). Q4_0, Q4_1, Q5_1 and Q4_K read
    # faster so than on planes; Q8_0 as fast once its fp16 scale is one 16-bit load (codegen/byte_pairs.py); Q5_0,
    # its fifth bits taken from uint16 words (state_gguf._q5_0), 0.89x to 1.01x the planes' time (bench_quant, one
    # thread) and 0.86x past the caches; Q6_K 1.2x to 1.4x, 1.19x past the caches. NOTE: in the model, whose products
    # recompute the normed input x * w for every row (model._normed_linear), Gemma 3 270M's decode measured about
    # 5% more CPU a token with Q5_0 and Q6_K in the file's bits than on planes (one thread, A B A B in one process:
    # 64.0 and 63.8 against 60.2 and 61.0 ms). TG_LLM_FILE_BITS=0 keeps planes for every type.
    FILE_BITS_TYPES: frozenset[int] = frozenset(GGML_TYPES)

    @classmethod
    def file_bits(cls, ttype: int, device: str) -> bool:
        """Whether a matrix of `ttype` on `device` keeps the file's bits: on a device whose renderer applies integer
        ops to whole vectors (the CPU's C), for the types in FILE_BITS_TYPES; planes elsewhere (a GPU's kernels
        take the fields apart lane by lane, slower than reading int8 planes)."""
        opts = getattr(Device[device], "linearizer_opts", None)
        return bool(getenv("TG_LLM_FILE_BITS", 1)) and opts is not None and getattr(opts, "int_vectors", False) \
            and ttype in cls.FILE_BITS_TYPES

    @classmethod
    def word_bits(cls, ttype: int, device: str) -> bool:
        """Whether a matrix of `ttype` on `device` keeps the file's bits as 32-bit words (`words`): see
        word_layout. TG_LLM_FILE_BITS=0 keeps planes."""
        return bool(getenv("TG_LLM_FILE_BITS", 1)) and \
            cls.word_layout(ttype, getattr(Device[device], "linearizer_opts", None))

    @staticmethod
    def word_layout(ttype: int, opts) -> bool:
        """Whether a device with LinearizerOptions `opts` keeps `ttype` as words (state_gguf.WORD_TYPES): a GPU
        (local dims), for the types with word dequantizers; the CPU's C reads the bytes (file_bits)."""
        return opts is not None and opts.has_local and ttype in WORD_TYPES

    def __init__(self, t: GGUFTensor, device: str):
        self.shape, self.ttype = t.shape, t.ttype
        self.blocks = self.raw = self.w = self.qs = self.d = self.m = self.words = None
        if len(t.shape) == 2 and self.word_bits(t.ttype, device):
            self.words = _load_rows([t], device, words=True)
        elif len(t.shape) == 2 and self.file_bits(t.ttype, device):
            self.blocks = _load_rows([t], device)
        elif t.ttype in PLANE_TYPES:
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
        where they can't share one kernel: input sizes differ, or (file bits) types differ, or (planes) group
        size, scale dtype or offsets differ (or a type has no planes).

        NOTE: in the file's bits matrices of different types are not stacked: a kernel has no branch per row, so one
        reading two types' blocks (each padded to all the rows) would compute both dequantizations for every row,
        where the loads alone are gated (Gemma 3's Q5_0 q and k with its Q8_0 v: about 1.5x the ALU work of the
        separate products, for one launch saved). The model stacks q and k there and keeps v apart."""
        if len({t.shape[1] for t in ts}) != 1 or any(len(t.shape) != 2 for t in ts):
            return None
        if any(cls.word_bits(t.ttype, device) for t in ts):
            return cls._stacked_words(ts, device)
        bits = all(cls.file_bits(t.ttype, device) for t in ts)
        if bits and len({t.ttype for t in ts}) != 1:
            return None
        if not bits and (any(t.ttype not in PLANE_TYPES for t in ts) or len({PLANE_LAYOUT[t.ttype] for t in ts}) != 1
                         or any(cls.file_bits(t.ttype, device) for t in ts)):
            return None
        self = cls.__new__(cls)
        self.shape, self.ttype = (sum(t.shape[0] for t in ts), ts[0].shape[1]), ts[0].ttype
        self.blocks = self.raw = self.w = self.qs = self.d = self.m = self.words = None
        if bits:
            self.blocks = _load_rows(ts, device)
        else:
            self._load_planes(ts, device)
        for t in ts:
            t.src.release_pages(t.where, t.nbytes)
        return self

    @classmethod
    def _stacked_words(cls, ts: list[GGUFTensor], device: str) -> Linear | None:
        """Linear.stacked in words: matrices of one type (a kernel has no branch per row, see stacked)."""
        if len({t.ttype for t in ts}) != 1 or not cls.word_bits(ts[0].ttype, device):
            return None
        self = cls.__new__(cls)
        self.shape, self.ttype = (sum(t.shape[0] for t in ts), ts[0].shape[1]), ts[0].ttype
        self.blocks = self.raw = self.w = self.qs = self.d = self.m = None
        self.words = _load_rows(ts, device, words=True)
        for t in ts:
            t.src.release_pages(t.where, t.nbytes)
        return self

    def device_bytes(self) -> int:
        """The device memory this matrix holds (the file's tensor bytes in the file's bits)."""
        return sum(t.nbytes() for t in (self.blocks, self.raw, self.w, self.qs, self.d, self.m, self.words)
                   if t is not None)

    def _words_grouped(self) -> Tensor:
        """The words matrix's values (out, blocks a row, *the word dequantizer's dims), bit for bit the file's."""
        out, inner = self.shape
        words, kind, _ = WORD_TYPES[self.ttype]
        nb = inner // GGML_TYPES[self.ttype][1]
        if in_columns(self.ttype, nb):
            w = WORD_COLUMNS[self.ttype][1](self.words.reshape(out * nb, words), column_step(nb))
        else:
            w = kind(self.words.reshape(out * nb, words))
        return w.reshape(out, nb, *w.shape[1:])

    @staticmethod
    def words_a_step(steps: int, run: int) -> int:
        """The words a step of a words product takes (1, 2 or 4, a quarter of the `run` of consecutive words at most)
        for rows of `steps` words: the most that leave a row BLOCK_REDUCE_MIN_INPUTS steps, so the GPU's renderer
        still spreads the row over a block (8B Llama: 2 for rows of 4096 values, 4 for 14336; 1 for 2048)."""
        k = 1
        # NOTE: a run of at least 2 words stays the innermost dim: there the loads are consecutive words (stride 1)
        # and x's floats 16 bytes apart, which the GPU's heuristic takes for contiguous (its renderer's reductions)
        while k < WORDS_A_STEP_MAX and run % (4 * k) == 0 and steps // (2 * k) >= BLOCK_REDUCE_MIN_INPUTS:
            k *= 2
        return k

    def _words_product(self, x: Tensor) -> Tensor:
        """x @ W.T over the words: a sum over the words of the row, each term the word's values (its `terms` dims:
        its bytes and their fields) written out one by one, so a GPU kernel's step of the reduction is a whole word:
        one 4-byte load (a warp's lanes reading consecutive words), its fields taken apart with constant shifts, the
        scales of its sub-blocks decoded once for the word's values, not once a value.

        A step takes `k` words (words_a_step): the dim of consecutive words (WORD_TYPES' dims end with it and the
        word's bytes) split into (k, words / k), k a term too, so each of a step's loads still has the lanes on
        consecutive words and the block's scales are decoded once for k words."""
        w = self._words_grouped()
        columns = WORD_COLUMNS[self.ttype] if in_columns(self.ttype, self.shape[1] // GGML_TYPES[self.ttype][1]) \
            else None
        terms = [d % w.ndim for d in (columns[2] if columns else WORD_TYPES[self.ttype][2])]
        # (columns take their k words a step by their dims already)
        k = 1 if columns else \
            self.words_a_step(math.prod(w.shape[1:]) // math.prod(w.shape[d] for d in terms), w.shape[-2])
        if k > 1:
            n = w.ndim
            w = w.reshape(*w.shape[:-2], k, w.shape[-2] // k, w.shape[-1])
            terms = [d if d < n - 2 else d + 1 for d in terms] + [n - 2]
        dims = w.ndim - 1
        xv = x.reshape(*x.shape[:-1], 1, *w.shape[1:])
        acc = None
        for at in itertools.product(*[range(w.shape[d]) for d in terms]):
            pick = [None] * w.ndim
            for d, i in zip(terms, at):
                pick[d] = (i, i + 1)
            part = xv.shrink(tuple([None] * (xv.ndim - w.ndim)) + tuple(pick)) * w.shrink(tuple(pick))
            acc = part if acc is None else acc + part
        return acc.sum(tuple(range(-dims, 0)))

    def _blocks_grouped(self) -> Tensor:
        """The file-bits matrix's values (out, blocks a row, *the block's dims), dequantized by the type's Tensor
        ops from the bytes on the device (see state_gguf's dequantizers); a plain type's values as (out, in)."""
        out, inner = self.shape
        _, per_block, block_bytes, kind = GGML_TYPES[self.ttype]
        if not callable(kind):
            return dequantize(self.ttype, self.blocks.reshape(-1), (out, inner))
        nb = inner // per_block
        w = kind(self.blocks.reshape(out * nb, block_bytes))
        return w.reshape(out, nb, *w.shape[1:])

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
        """W (out, in) as float32, lazily dequantized."""
        if self.w is not None:
            return self.w
        if self.words is not None:
            return self._words_grouped().reshape(self.shape)
        if self.blocks is not None:
            return self._blocks_grouped().reshape(self.shape)
        if self.qs is not None:
            return self._grouped().reshape(self.shape)
        return dequantize(self.ttype, self.raw, self.shape)

    def _device(self) -> str:
        return next(t.device for t in (self.words, self.blocks, self.qs, self.raw, self.w) if t is not None)

    def tensor_core_rows(self, x: Tensor) -> bool:
        """Whether x @ W.T takes the dequantize-then-multiply path: a quantized matrix on a device with tensor cores,
        and at least TC_ROWS rows of x (a prompt's prefill, not a decode step)."""
        if self.w is not None or not all(isinstance(s, int) for s in x.shape[:-1]):
            return False
        rows = 1
        for s in x.shape[:-1]:
            rows *= s
        opts = getattr(Device[self._device()], "linearizer_opts", None)
        return rows >= TC_ROWS and opts is not None and opts.has_local and bool(getattr(opts, "tensor_cores", ()))

    def __call__(self, x: Tensor) -> Tensor:
        if self.tensor_core_rows(x):
            # many rows: W dequantized once into a half matrix of its own (a kernel that reads the quantized bits
            # once), then one tensor-core product, instead of every tile of rows dequantizing its columns again in a
            # loop the tensor cores can't take (a 512-token prompt of an 8B model: 251 tok/s on the H200 so)
            w = self.weight().cast(dtypes.float16).contiguous()
            return (x.cast(dtypes.float16) @ w.T).cast(x.dtype)
        if self.words is not None:
            return self._words_product(x)
        if self.blocks is not None:
            # the blocks and their groups stay dims of the sum: a group's scale is one value for a run of
            # consecutive values, so the kernel computes it once per group (its loop hoisted out of the values'
            # loop) where a flat (out, in) weight would index the scale by division for every value
            w = self._blocks_grouped()
            dims = w.ndim - 1
            return (x.reshape(*x.shape[:-1], 1, *w.shape[1:]) * w).sum(tuple(range(-dims, 0)))
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
