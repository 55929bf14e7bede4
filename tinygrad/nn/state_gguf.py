"""GGUF (llama.cpp's model files), versions 2 and 3, little-endian.

Layout: "GGUF", uint32 version, uint64 tensor count, uint64 key-value count; the key-values (a string key, a uint32
value type, the value); the tensor infos (a string name, uint32 n_dims, uint64 dims innermost first, uint32 ggml type,
uint64 offset into the data); padding to `general.alignment` (default 32); the tensor data. Strings are a uint64
length and UTF-8 bytes; an array is a uint32 element type, a uint64 count and the elements.

Plain tensors (F32, F16, BF16, F64 and the ints) load as zero-copy DISK tensors. Quantized ones (Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) are blocks of small ints with fp16 scales: their raw bytes
are copied to the default device and dequantized there by Tensor ops (byte shifts and masks, the fp16 scales bitcast
from byte pairs), lazily, into float32, bit-exact against gguf-py's reference.
"""
from __future__ import annotations

import os
import struct
from typing import Any, Callable

import numpy as np

import tinygrad.mlops as F
from tinygrad.device import Device
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import getenv, prod
from tinygrad.nn.state_file import CheckpointBytes, CheckpointError
from tinygrad.tensor import Tensor

# metadata value types: id -> (struct format, numpy dtype); 8 is a string and 9 an array
_SCALARS = {0: ("<B", "<u1"), 1: ("<b", "<i1"), 2: ("<H", "<u2"), 3: ("<h", "<i2"), 4: ("<I", "<u4"),
            5: ("<i", "<i4"), 6: ("<f", "<f4"), 7: ("<?", "<u1"), 10: ("<Q", "<u8"), 11: ("<q", "<i8"),
            12: ("<d", "<f8")}
_STRING, _ARRAY, _BOOL = 8, 9, 7
MAX_ARRAY_DEPTH = 8
MAX_DIMS = 4  # GGML_MAX_DIMS


# ---- dequantization: `b` is (blocks, block bytes) uint8 on a compute device; each returns (blocks, *dims) float32,
# the block's values in their order once the dims are flattened. The dims are the block's own structure (sub-blocks,
# the fields of a byte, the bytes), never merged: each is a plain stride over the bytes or a field's shift, so a
# kernel reading them (Linear's product keeps them as dims of its sum) indexes bytes without division or modulo
# and computes a group's scale once for its run of values. Every value is computed as gguf's reference (gguf-py's
# quants.py, ggml's dequantize_row_*) computes it, operation for operation in float32 (the scale products first,
# then times the quant, then less the offset), so the results are bit-exact; the renderers compile with
# floating-point contraction off, so no fused multiply-add rounds once.
def _f16(b: Tensor) -> Tensor:
    """Little-endian fp16 from byte pairs: (..., 2) uint8 -> (..., 1) float32."""
    lo, hi = b[..., 0:1].cast(dtypes.uint16), b[..., 1:2].cast(dtypes.uint16)
    return (lo | (hi << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _fields(b: Tensor, bits: int, count: int, dim: int, up: int = 0) -> Tensor:
    """The `count` fields of `bits` bits in each byte of `b`, least significant first, as a new axis `dim` (b's dtype),
    each times 2**up (`b` wide enough to hold that: the shift comes before the broadcast, once a byte).

    NOTE: each byte is broadcast along the new axis and shifted by `bits` times the axis' index (an arange, which is
    an index expression, not data): the kernel loads a byte once for all its fields, and where the axis is unrolled
    every shift is a constant. Stacking the shifted bytes instead would make each field a padded branch of its own,
    a gated load per field and value."""
    shifts = Tensor.arange(count, dtype=b.dtype, device=b.device) * bits
    dim = dim % (b.ndim + 1)
    x = (b << up if up else b).unsqueeze(dim)
    shape = list(x.shape)
    shape[dim] = count
    # the shifts are below 8 by construction: C's >> as it is (Tensor.rshift would guard each lane against counts
    # of 8 and more with selects, which a CPU kernel does lane by lane)
    x, s = x.expand(*shape), shifts.reshape(count, *[1] * (b.ndim - dim)).expand(*shape)
    return F.ShiftRight.apply(x, s) & (((1 << bits) - 1) << up)


def _ifields(b: Tensor, bits: int, count: int, dim: int, up: int = 0) -> Tensor:
    """_fields of bytes widened to int32 first (int32 values).

    NOTE: the quant values take this path: a CPU kernel widens a vector of bytes to int32 lanes in one instruction,
    shifts, masks and combines them as int32 vectors (x86 has no byte shifts) and converts them to float32 as one
    vector, once a value."""
    return _fields(b.cast(dtypes.int32), bits, count, dim, up)


def _nibbles(qs: Tensor) -> Tensor:
    """(n, 16k) bytes -> (n, 2, 16k) float32: the low nibbles are the first 16k values, the high ones the next."""
    return _ifields(qs, 4, 2, 1).cast(dtypes.float32)


def _int8(b: Tensor) -> Tensor:
    """Bytes as the int8 values they hold, float32."""
    return b.bitcast(dtypes.int8).cast(dtypes.float32)


_UINTS = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _plain(raw: Tensor, dtype: DType) -> Tensor:
    """Little-endian elements of `dtype` from their bytes: (n * itemsize,) uint8 -> (n,) `dtype` (bfloat16 as the
    float32 of the same value), bit for bit (a
    bitcast needs equal sizes, so the bytes are first put together as an unsigned int of the element's width)."""
    k, wide = dtype.itemsize, _UINTS[dtype.itemsize]
    b = raw.reshape(-1, k)
    word = b[:, 0].cast(wide)
    for i in range(1, k):
        word = word | (b[:, i].cast(wide) << (8 * i))
    if dtype == dtypes.bfloat16:
        # a bfloat16's bits are a float32's top half (and not every renderer can bitcast to bfloat16)
        return (word.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)
    return word.bitcast(dtype)


def _lut(idx: Tensor, table: tuple[int, ...]) -> Tensor:
    """table[idx] for uint8 indices below len(table) (a power of two), float32: a tree of selects on the index's bits,
    as the kernel has no gather (a data-dependent load) to read a table with."""
    level = [Tensor(float(v), dtype=dtypes.float32, device=idx.device) for v in table]
    bit = 0
    while len(level) > 1:
        on = ((idx >> bit) & 1) == 1
        level = [on.where(level[i + 1], level[i]) for i in range(0, len(level), 2)]
        bit += 1
    return level[0]


def _q4_0(b: Tensor) -> Tensor:
    return _f16(b[:, 0:2]).unsqueeze(2) * (_nibbles(b[:, 2:18]) - 8)


def _q4_1(b: Tensor) -> Tensor:
    return _f16(b[:, 0:2]).unsqueeze(2) * _nibbles(b[:, 4:20]) + _f16(b[:, 2:4]).unsqueeze(2)


def _q5(qh: Tensor, qs: Tensor) -> Tensor:
    """5-bit values (n, 2, 2, 8) int32: the low 4 bits are qs's nibbles (the low nibbles values 0..15), the fifth
    bit of value j bit j of the little-endian uint32 qh (bit k of its byte i, value 8i + k)."""
    high = _ifields(qh.reshape(-1, 2, 2), 1, 8, 3, up=4)
    return _ifields(qs, 4, 2, 1).reshape(-1, 2, 2, 8) | high


def _word16(b: Tensor) -> Tensor:
    """Little-endian uint16 from byte pairs: (..., 2) uint8 -> (..., 1) uint16 (one 2-byte load on the CPU, see
    codegen/byte_pairs.py)."""
    return b[..., 0:1].cast(dtypes.uint16) | (b[..., 1:2].cast(dtypes.uint16) << 8)


def _q5_0(b: Tensor) -> Tensor:
    # q - 16 as the low bits less 16 - the fifth bit's 16, that is the complemented word's bit (a word's xor, where
    # q | 16 * bit - 16 is an or and a sub a value). Values 16s.. (nibble s of the 16 bytes) take their fifth bits
    # from uint16 word s of qh: value 16s + 8h + l shifts it right by 8h + l, so the kernel widens and broadcasts a
    # word once for 16 values, not a byte for each 8
    low = _ifields(b[:, 6:22], 4, 2, 1).reshape(-1, 2, 2, 8)
    word = ((_word16(b[:, 2:6].reshape(-1, 2, 2)) ^ 0xFFFF).cast(dtypes.int32) << 4).reshape(-1, 2, 1, 1)
    shifts = Tensor.arange(16, dtype=dtypes.int32, device=b.device).reshape(1, 1, 2, 8)
    word, shifts = word.expand(word.shape[0], 2, 2, 8), shifts.expand(word.shape[0], 2, 2, 8)
    off = F.ShiftRight.apply(word, shifts) & 16
    return _f16(b[:, 0:2]).unsqueeze(2).unsqueeze(3) * (low - off).cast(dtypes.float32)


def _q5_1(b: Tensor) -> Tensor:
    d, m = _f16(b[:, 0:2]).unsqueeze(2).unsqueeze(3), _f16(b[:, 2:4]).unsqueeze(2).unsqueeze(3)
    return d * _q5(b[:, 4:8], b[:, 8:24]).cast(dtypes.float32) + m


def _q8_0(b: Tensor) -> Tensor:
    return _int8(b[:, 2:34]).unsqueeze(1) * _f16(b[:, 0:2]).unsqueeze(2)


def _k16(scales: Tensor) -> Tensor:
    """A K-type's 16 per-group factors (n, 16) as (n, half, quarter, group, 1): group g of quarter k of half h is
    scale 8h + 2k + g, the 16 values of bytes 16g.. of the quarter's 32."""
    return scales.reshape(-1, 2, 4, 2, 1)


def _q2_k(b: Tensor) -> Tensor:
    # 16 bytes of scales (a 4-bit scale and a 4-bit min per 16 values), 64 bytes of 2-bit values, fp16 d and dmin;
    # each half of 128 values is 32 bytes: field k of byte l is value 32k + l
    sc = b[:, 0:16]
    dl = _k16(_f16(b[:, 80:82]) * (sc & 0xF).cast(dtypes.float32))
    ml = _k16(_f16(b[:, 82:84]) * (sc >> 4).cast(dtypes.float32))
    return dl * _ifields(b[:, 16:80].reshape(-1, 2, 2, 16), 2, 4, 2).cast(dtypes.float32) - ml


def _q3_k(b: Tensor) -> Tensor:
    # 32 bytes of high bits (bit k of byte l belongs to value 32k + l), 64 bytes of low 2 bits (as Q2_K's), 12 bytes
    # of 6-bit scales, fp16 d. Scale i's low 4 bits are a nibble of byte i % 8 (the high nibble for i >= 8), its top
    # 2 bits field i // 4 of byte 8 + i % 4; the scale is that less 32. A value is its low bits, less 4 where its
    # high bit is clear.
    s = b[:, 96:108]
    low = _fields(s[:, 0:8], 4, 2, 1).reshape(-1, 16)
    high = _fields(s[:, 8:12], 2, 4, 1).reshape(-1, 16)
    scale = ((low | (high << 4)).bitcast(dtypes.int8) - 32).cast(dtypes.float32)
    dl = _k16(_f16(b[:, 108:110]) * scale)
    ql = _ifields(b[:, 32:96].reshape(-1, 2, 2, 16), 2, 4, 2)
    qh = _ifields(b[:, 0:32].reshape(-1, 2, 16), 1, 8, 1).reshape(-1, 2, 4, 2, 16)
    return dl * (ql - ((qh ^ 1) << 2)).cast(dtypes.float32)


def _k_scales(s: Tensor) -> tuple[Tensor, Tensor]:
    """The 8 six-bit scales and mins packed in 12 bytes (Q4_K, Q5_K): each (n, 8) float32.

    Sub-blocks 0..3 take the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); sub-blocks 4..7 take a nibble of
    bytes 8..11 as their low 4 bits and the top 2 bits of bytes 0..3 (scales) or 4..7 (mins) as their high ones."""
    lo_sc, lo_m, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = (lo_sc & 63).cat((hi & 0xF) | ((lo_sc >> 6) << 4), dim=1)
    m = (lo_m & 63).cat((hi >> 4) | ((lo_m >> 6) << 4), dim=1)
    return sc.cast(dtypes.float32), m.cast(dtypes.float32)


def _k_chunks(q: Tensor) -> Tensor:
    """(n, 128) bytes of 4-bit pairs -> (n, 4 chunks, 2, 32) int32: chunk c of 32 bytes holds sub-block 2c of 32
    values in its low nibbles and sub-block 2c+1 in its high ones."""
    return _ifields(q.reshape(-1, 4, 32), 4, 2, 2)


def _k_values(b: Tensor, q: Tensor) -> Tensor:
    """Q4_K's and Q5_K's values from their quants q (n, 4, 2, 32) int32: (d * scale) * q - (dmin * min)."""
    sc, m = _k_scales(b[:, 4:16])
    d, dmin = (_f16(b[:, 0:2]) * sc).reshape(-1, 4, 2, 1), (_f16(b[:, 2:4]) * m).reshape(-1, 4, 2, 1)
    return d * q.cast(dtypes.float32) - dmin


def _q4_k(b: Tensor) -> Tensor:
    return _k_values(b, _k_chunks(b[:, 16:144]))


def _q5_k(b: Tensor) -> Tensor:
    # the fifth bit of value l of sub-block j is bit j of qh[l]
    high = _ifields(b[:, 16:48], 1, 8, 1, up=4).reshape(-1, 4, 2, 32)
    return _k_values(b, _k_chunks(b[:, 48:176]) | high)


def _q6_k(b: Tensor) -> Tensor:
    # two halves of 128 values, each four quarters of 32: quarter k = 2s + c of half h takes the low 4 bits from
    # nibble s of bytes 64h + 32c.. of ql, and 2 more from field k of bytes 32h.. of qh; each 16 values (group g
    # of a quarter) share an int8 scale
    low = _ifields(b[:, 0:128].reshape(-1, 2, 2, 2, 16), 4, 2, 2)  # (n, h, s, c, g, 16)
    high = _ifields(b[:, 128:192].reshape(-1, 2, 2, 16), 2, 4, 2, up=4).reshape(-1, 2, 2, 2, 2, 16)
    q = ((low | high) - 32).cast(dtypes.float32)
    scale = b[:, 192:208].bitcast(dtypes.int8).cast(dtypes.float32)
    return (_f16(b[:, 208:210]) * scale).reshape(-1, 2, 2, 2, 2, 1) * q


# ---- the same values from 32-bit words (a GPU's layout, see apps/llm/linear.py): `w` is (blocks, words a block)
# uint32, the block's bytes little-endian (Q6_K's 210 padded to 212). A GPU loads a word where it would load a byte,
# and a field is a shift and a mask of it. Each returns (blocks, *dims) float32 in the block's value order once the
# dims are flattened, bit for bit the byte dequantizers' values; WORD_TYPES' `terms` are the dims that take one word
# apart (its bytes, and their nibbles or fields), the others index words in order.
def _shifted(w: Tensor, shape: tuple[int, ...], shifts: Tensor) -> Tensor:
    """`w` broadcast to `shape`, each element shifted right by `shifts` (broadcast to shape's trailing dims): the
    shifts are index expressions (aranges), constants where their dims are unrolled."""
    s = shifts.reshape(*[1] * (len(shape) - shifts.ndim), *shifts.shape).expand(*shape).cast(w.dtype)
    return F.ShiftRight.apply(w.expand(*shape), s)


def _steps(n: int, step: int, device: str) -> Tensor:
    # on the words' device: an index there, fused into the product (an arange elsewhere would be a copy a call)
    return Tensor.arange(n, dtype=dtypes.uint32, device=device) * step


def _small_float(q: Tensor, less: int = 0) -> Tensor:
    """Small non-negative uint32 ints `q` (below 2**23) less `less`, as float32, exactly: q's bits under the
    exponent of 2**23 make the float 2**23 + q, and a subtraction takes 2**23 + less away. Two full-rate operations
    where a GPU converts an int at a quarter of its rate (or less): the product's inner loop converts every value."""
    # (a Tensor, so the value is compiled into the kernel: a Python float would be read from a shared scalar buffer)
    return (q | 0x4B000000).bitcast(dtypes.float32) - Tensor(float(2 ** 23 + less), device=q.device)


def _word_f16(w: Tensor, high: bool) -> Tensor:
    """The fp16 in the low (or high) half of uint32 words, as float32."""
    return ((w >> 16) if high else (w & 0xFFFF)).cast(dtypes.uint16).bitcast(dtypes.float16).cast(dtypes.float32)


def _k_word_scales(w: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K's and Q5_K's d * scale and dmin * min of each sub-block, (n, 4 chunks, 2, 1, 1) float32, from words 0..3:
    d and dmin (word 0), the 12 bytes of 6-bit scales and mins (words 1..3, see _k_scales)."""
    n = w.shape[0]
    d, dmin = _word_f16(w[:, 0:1], False), _word_f16(w[:, 0:1], True)
    # scale j = 4t + i (t = 0, 1): byte i of word 1 + 2t, masked to 6 bits (t = 0) or 4 (t = 1), and for t = 1 the
    # top 2 bits of byte i of word 1 as bits 4..5; the mins the same from words 2 and 3, the high nibble for t = 1
    t = Tensor.arange(2, dtype=dtypes.uint32, device=w.device).reshape(2, 1)
    low_mask, high_mask = 63 - 48 * t, 48 * t
    bytes_at = _steps(4, 8, w.device).reshape(1, 4)
    sc_w = _shifted(w[:, 1:5].reshape(n, 2, 2)[:, :, 0:1], (n, 2, 4), bytes_at)
    m_w = _shifted(w[:, 2:4].reshape(n, 2, 1), (n, 2, 4), bytes_at + 4 * t)
    sc_top = _shifted(w[:, 1:2].reshape(n, 1, 1), (n, 2, 4), bytes_at + 2)
    m_top = _shifted(w[:, 2:3].reshape(n, 1, 1), (n, 2, 4), bytes_at + 2)
    sc = ((sc_w & low_mask) | (sc_top & high_mask)).cast(dtypes.float32).reshape(n, 8)
    m = ((m_w & low_mask) | (m_top & high_mask)).cast(dtypes.float32).reshape(n, 8)
    return (d * sc).reshape(n, 4, 2, 1, 1), (dmin * m).reshape(n, 4, 2, 1, 1)


def _q4_k_words(w: Tensor) -> Tensor:
    """Q4_K from 36 words: words 0..3 as _k_word_scales reads them, 32 words of nibbles. Dims (chunk, nibble, word,
    byte): value 64c + 32n + 4w + b is nibble n of byte b of word 4 + 8c + w."""
    n = w.shape[0]
    dl, ml = _k_word_scales(w)
    shifts = _steps(2, 4, w.device).reshape(2, 1, 1) + _steps(4, 8, w.device).reshape(1, 1, 4)
    q = _shifted(w[:, 4:36].reshape(n, 4, 1, 8, 1), (n, 4, 2, 8, 4), shifts) & 15
    return dl * _small_float(q) - ml


def _q5_k_words(w: Tensor) -> Tensor:
    """Q5_K from 44 words: words 0..3 as _k_word_scales reads them, 8 words of fifth bits (qh), 32 of nibbles. Dims
    as Q4_K's: value 64c + 32n + 4w + b is nibble n of byte b of word 12 + 8c + w, and its fifth bit is bit 2c + n
    of byte b of qh's word 4 + w."""
    n = w.shape[0]
    dl, ml = _k_word_scales(w)
    shape = (n, 4, 2, 8, 4)
    byte = _steps(4, 8, w.device).reshape(1, 1, 4)
    low = _shifted(w[:, 12:44].reshape(n, 4, 1, 8, 1), shape, _steps(2, 4, w.device).reshape(2, 1, 1) + byte) & 15
    place = _steps(4, 2, w.device).reshape(4, 1, 1, 1) + _steps(2, 1, w.device).reshape(2, 1, 1) + byte
    high = (_shifted(w[:, 4:12].reshape(n, 1, 1, 8, 1), shape, place) & 1) << 4
    return dl * _small_float(low | high) - ml


def _q6_k_words(w: Tensor) -> Tensor:
    """Q6_K from 53 words: 32 of low nibbles (ql), 16 of 2-bit fields (qh), 4 of int8 scales, d (word 52's low
    half). Dims (half, nibble, c, group, word, byte): value 128h + 64s + 32c + 16g + 4p + e takes nibble s of byte e
    of ql's word 16h + 8c + 4g + p and field 2s + c (bits 8e + 4s + 2c) of qh's word 8h + 4g + p; its scale is
    byte 2c + g of scales' word 2h + s."""
    n = w.shape[0]
    shape = (n, 2, 2, 2, 2, 4, 4)
    byte = _steps(4, 8, w.device)
    nibble = _steps(2, 4, w.device).reshape(2, 1, 1, 1, 1)
    low = _shifted(w[:, 0:32].reshape(n, 2, 1, 2, 2, 4, 1), shape, nibble + byte) & 15
    place = nibble + _steps(2, 2, w.device).reshape(2, 1, 1, 1) + byte
    high = (_shifted(w[:, 32:48].reshape(n, 2, 1, 1, 2, 4, 1), shape, place) & 3) << 4
    q = _small_float(low | high, 32)
    scales = _shifted(w[:, 48:52].reshape(n, 2, 2, 1, 1), (n, 2, 2, 2, 2), _steps(2, 16, w.device).reshape(2, 1) +
                      _steps(2, 8, w.device)) & 0xFF
    scale = ((scales.cast(dtypes.int32) ^ 128) - 128).cast(dtypes.float32)
    d = _word_f16(w[:, 52:53], False)
    return (d.reshape(n, 1, 1, 1, 1) * scale).reshape(n, 2, 2, 2, 2, 1, 1) * q


# ---- columns: Q4_K's, Q5_K's and Q6_K's words rearranged at load (the same number of words: the file's bytes, Q6_K's
# padded as above) so that a GPU's warp reads a block as lanes on consecutive words, and each lane's word holds value j
# of each of the block's 8 runs of 32 (the K types' sub-blocks): word j's nibble i is value 32i + j. A product's term i
# then reads x at 32i + j, lanes on consecutive floats, where the file's order puts a word's values 4 apart (a lane's x
# loads 16 bytes from its neighbour's: four times the L1 wavefronts; with 4 bytes a lane in flight, the file-order
# kernels ran at 250-750 GB/s on the H200). Dims (i, t, jj), j = (32 / k)t + jj: a lane takes the k words jj, jj + 32 /
# k, .. of a block (`k`, the words a step, see column_step), so the scales it decodes (one per i, and Q6_K's per 16
# values) serve k words and it has 4k bytes of the matrix in flight a step; the block's value order once flattened.
# NOTE: measured on the H200 (M = 1, 4096 x 14336 down): k = 4 749 GB/s for Q4_K and 1082 for Q6_K, k = 2 752 and
# 1113, the same: past 2 a step, more bytes in flight don't help these kernels, bound by their instructions a value
# (about 8: shift, mask, the float conversion's two, the scale, the offset, x's product and the sum) and x's loads
COLUMN_STEPS = (8, 4, 2)


def in_columns(ttype: int, blocks: int, least: int = 256) -> bool:
    """Whether a GPU keeps rows of `blocks` blocks of type `ttype` in columns: where some k of COLUMN_STEPS leaves a
    row `least` steps (K >= 4096 values). Shorter rows (Llama-3.2-1B's 2048) stay in the file's order, whose
    product takes 1 word a step and so keeps a warp a row, where columns' 2 at least would leave a thread a row
    (on the H200 the synthetic 1B decoded at 102 tok/s with its rows in columns, against 275 in the file's order
    before them; the 8B's rows of 4096 and 14336 gained from columns: 72.5 -> 105.5 tok/s)."""
    return ttype in WORD_COLUMNS and blocks * 32 // COLUMN_STEPS[-1] >= least


def column_step(blocks: int, least: int = 256) -> int:
    """The words a step (k) of a columns product for rows of `blocks` blocks: the most that leave a row `least`
    steps (BLOCK_REDUCE_MIN_INPUTS, so a GPU's renderer gives a row a warp or a block, not a thread), 2 at least."""
    return next((k for k in COLUMN_STEPS if blocks * 32 // k >= least), COLUMN_STEPS[-1])


def _q4_k_columns(b: np.ndarray, k: int) -> np.ndarray:
    """Q4_K blocks (n, 144) uint8 as 36 words: the header's 4 (d, dmin, the 12 bytes of 6-bit scales and mins) as in
    the file, then 32 of nibbles in columns. The file's chunk m of 32 bytes holds values 64m + l in its low nibbles
    and 64m + 32 + l in its high ones, so byte m of column word j is byte j of chunk m: a transpose of bytes, which
    loading a model's billions of values can afford (no wider temporaries). The same for every `k`."""
    cols = b[:, 16:144].reshape(-1, 4, 32).transpose(0, 2, 1).reshape(-1, 128)
    return np.ascontiguousarray(np.concatenate([b[:, 0:16], cols], axis=1)).view("<u4")


def _q5_k_columns(b: np.ndarray, k: int) -> np.ndarray:
    """Q5_K blocks (n, 176) uint8 as 44 words: the header's 4 as in the file, 8 of fifth bits, 32 of nibbles in
    columns (Q4_K's transpose). qh's byte j holds the fifth bits of column word j's values (bit i, value 32i + j's);
    it moves to byte kjj + t of the 32, j = (32 / k)t + jj, so a lane's k bytes are consecutive."""
    qh = b[:, 16:48].reshape(-1, k, 32 // k).transpose(0, 2, 1).reshape(-1, 32)
    cols = b[:, 48:176].reshape(-1, 4, 32).transpose(0, 2, 1).reshape(-1, 128)
    return np.ascontiguousarray(np.concatenate([b[:, 0:16], qh, cols], axis=1)).view("<u4")


def _q6_k_columns(b: np.ndarray, k: int) -> np.ndarray:
    """Q6_K blocks (n, 210) uint8 as 53 words: 32 of low nibbles in columns, 16 of 2-bit high parts (value 32i +
    (32 / k)t + jj's is field 8(t % 2) + i, bits 2(8(t % 2) + i), of word 32 + (k / 2)jj + t // 2: a lane's k words'
    high parts are k / 2 consecutive words), the 4 words of int8 scales and d (word 52's low half) as in the file.
    Bytes only: value 128h + 32q + l's low nibble is ql's byte (h, q % 2, l)'s (low for q < 2), and the four high
    parts of values 128h + 32q + l, q = 0..3, are byte (h, l) of qh, which becomes byte 2(t % 2) + h of its word."""
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 2, 32)
    # byte m = 2h + e of column word l: nibbles i = 4h + 2e and 4h + 2e + 1, quarters 2e and 2e + 1 of half h
    even = (ql[:, :, 0] & 15) | ((ql[:, :, 1] & 15) << 4)
    odd = (ql[:, :, 0] >> 4) | (ql[:, :, 1] & 0xF0)
    low = np.stack([even, odd], axis=2).reshape(n, 4, 32).transpose(0, 2, 1).reshape(n, 128)
    # qh's byte (h, l), l = (32 / k)(2u + t2) + jj, to word (jj, u)'s byte (t2, h)
    qh = b[:, 128:192].reshape(n, 2, k // 2, 2, 32 // k).transpose(0, 4, 2, 3, 1).reshape(n, 64)
    tail = np.concatenate([b[:, 192:210], np.zeros((n, 2), np.uint8)], axis=1)
    return np.ascontiguousarray(np.concatenate([low, qh, tail], axis=1)).view("<u4")


def _q4_k_column_words(w: Tensor, k: int) -> Tensor:
    """Q4_K from _q4_k_columns' 36 words, dims (i, t, jj): value 32i + (32 / k)t + jj is nibble i of word 4 +
    (32 / k)t + jj, its scale and min sub-block i's (words 0..3 as _k_word_scales reads them)."""
    n = w.shape[0]
    dl, ml = _k_word_scales(w)
    q = _shifted(w[:, 4:36].reshape(n, 1, k, 32 // k), (n, 8, k, 32 // k),
                 _steps(8, 4, w.device).reshape(8, 1, 1)) & 15
    return dl.reshape(n, 8, 1, 1) * _small_float(q) - ml.reshape(n, 8, 1, 1)


def _q5_k_column_words(w: Tensor, k: int) -> Tensor:
    """Q5_K from _q5_k_columns' 44 words, dims (i, t, jh, jl), jj = 2jh + jl: value 32i + (32 / k)t + jj is nibble i
    of word 12 + (32 / k)t + jj with bit i of qh's byte kjj + t (words 4..11) as its fifth, its scale and min
    sub-block i's. jj is two dims so that the fifth bits' word is an index without division where k is 2."""
    n = w.shape[0]
    dl, ml = _k_word_scales(w)
    shape = (n, 8, k, 16 // k, 2)
    low = _shifted(w[:, 12:44].reshape(n, 1, k, 16 // k, 2), shape, _steps(8, 4, w.device).reshape(8, 1, 1, 1)) & 15
    bit = _steps(8, 1, w.device).reshape(8, 1, 1, 1)
    if k == 2:
        # byte 4jh + 2jl + t: word jh, bits 8(2jl + t) + i
        high = _shifted(w[:, 4:12].reshape(n, 1, 1, 8, 1), shape, bit + _steps(2, 8, w.device).reshape(2, 1, 1) +
                        _steps(2, 16, w.device))
    else:
        # byte kjj + t: word (k / 4)jj + t // 4, bits 8(t % 4) + i
        words = w[:, 4:12].reshape(n, 32 // k, k // 4).permute(0, 2, 1).reshape(n, 1, k // 4, 1, 16 // k, 2)
        high = _shifted(words, (n, 8, k // 4, 4, 16 // k, 2), bit.reshape(8, 1, 1, 1, 1) +
                        _steps(4, 8, w.device).reshape(4, 1, 1)).reshape(shape)
    q = low | ((high & 1) << 4)
    return dl.reshape(n, 8, 1, 1, 1) * _small_float(q) - ml.reshape(n, 8, 1, 1, 1)


def _q6_k_column_words(w: Tensor, k: int) -> Tensor:
    """Q6_K from _q6_k_columns' 53 words, dims (i, t, jj): value 32i + (32 / k)t + jj takes nibble i of word
    (32 / k)t + jj and its high part from word 32 + (k / 2)jj + t // 2 (see _q6_k_columns); its scale is int8
    2i + t // (k / 2) (byte 2(i % 2) + t // (k / 2) of word 48 + i // 2)."""
    n, h = w.shape[0], k // 2
    shape = (n, 8, h, 2, 32 // k)
    low = _shifted(w[:, 0:32].reshape(n, 1, h, 2, 32 // k), shape, _steps(8, 4, w.device).reshape(8, 1, 1, 1)) & 15
    place = _steps(8, 2, w.device).reshape(8, 1, 1, 1) + _steps(2, 16, w.device).reshape(2, 1)
    words = w[:, 32:48].reshape(n, 32 // k, h).permute(0, 2, 1).reshape(n, 1, h, 1, 32 // k)
    high = (_shifted(words, shape, place) & 3) << 4
    q = _small_float(low | high, 32).reshape(n, 8, k, 32 // k)
    scales = _shifted(w[:, 48:52].reshape(n, 4, 1, 1), (n, 4, 2, 2), _steps(2, 16, w.device).reshape(2, 1) +
                      _steps(2, 8, w.device)) & 0xFF
    scale = ((scales.cast(dtypes.int32) ^ 128) - 128).cast(dtypes.float32).reshape(n, 8, 2, 1, 1)
    scale = scale.expand(n, 8, 2, h, 1).reshape(n, 8, k, 1)
    d = _word_f16(w[:, 52:53], False)
    return (d.reshape(n, 1, 1, 1) * scale) * q


# ggml type id -> (words a block, padded; its word dequantizer; the `terms` dims of its values, counted from the end)
WORD_TYPES: dict[int, tuple[int, Callable[[Tensor], Tensor], tuple[int, ...]]] = {
    12: (36, _q4_k_words, (-3, -1)), 13: (44, _q5_k_words, (-3, -1)), 14: (53, _q6_k_words, (-5, -1))}
# the word types kept in columns on a GPU (TG_LLM_WORD_COLUMNS=0: in the file's order, WORD_TYPES' dequantizers, for
# comparison): ggml type id -> (the host arranger of its blocks (n, block bytes) uint8 into words (n, words a block)
# uint32, the dequantizer of those words, both taking k (column_step's); the terms (i, t), dims from the end)
WORD_COLUMNS: dict[int, tuple[Callable[[np.ndarray, int], np.ndarray], Callable[[Tensor, int], Tensor],
                              tuple[int, ...]]] = \
    {12: (_q4_k_columns, _q4_k_column_words, (-3, -2)), 13: (_q5_k_columns, _q5_k_column_words, (-4, -3)),
     14: (_q6_k_columns, _q6_k_column_words, (-3, -2))} if getenv("TG_LLM_WORD_COLUMNS", 1) else {}


# IQ4_NL's and IQ4_XS's 16 levels (ggml's kvalues_iq4nl), a 4-bit quant's value before its scale
IQ4_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)


def _iq4_nl(b: Tensor) -> Tensor:
    return _f16(b[:, 0:2]).unsqueeze(2) * _lut(_fields(b[:, 2:18], 4, 2, 1), IQ4_LEVELS)


def _iq4_xs(b: Tensor) -> Tensor:
    # fp16 d, a uint16 of the 8 scales' top 2 bits (scale j's are bits 2j..2j+1), 4 bytes of their low nibbles
    # (scale j's is nibble j % 2 of byte j // 2), 128 bytes of quants: sub-block j of 32 values is 16 bytes, as IQ4_NL
    low = _fields(b[:, 4:8], 4, 2, 2).reshape(-1, 8)
    high = _fields(b[:, 2:4], 2, 4, 2).reshape(-1, 8)
    scale = ((low | (high << 4)).bitcast(dtypes.int8) - 32).cast(dtypes.float32)
    q = _fields(b[:, 8:136].reshape(-1, 8, 16), 4, 2, 2)
    return (_f16(b[:, 0:2]) * scale).reshape(-1, 8, 1, 1) * _lut(q, IQ4_LEVELS)


# ggml type id -> (name, values per block, bytes per block, plain dtype or dequantizer)
GGML_TYPES: dict[int, tuple[str, int, int, DType | Callable[[Tensor], Tensor]]] = {
    0: ("F32", 1, 4, dtypes.float32), 1: ("F16", 1, 2, dtypes.float16), 2: ("Q4_0", 32, 18, _q4_0),
    3: ("Q4_1", 32, 20, _q4_1), 6: ("Q5_0", 32, 22, _q5_0), 7: ("Q5_1", 32, 24, _q5_1), 8: ("Q8_0", 32, 34, _q8_0),
    10: ("Q2_K", 256, 84, _q2_k), 11: ("Q3_K", 256, 110, _q3_k), 12: ("Q4_K", 256, 144, _q4_k),
    13: ("Q5_K", 256, 176, _q5_k), 14: ("Q6_K", 256, 210, _q6_k), 20: ("IQ4_NL", 32, 18, _iq4_nl),
    23: ("IQ4_XS", 256, 136, _iq4_xs),
    24: ("I8", 1, 1, dtypes.int8), 25: ("I16", 1, 2, dtypes.int16), 26: ("I32", 1, 4, dtypes.int32),
    27: ("I64", 1, 8, dtypes.int64), 28: ("F64", 1, 8, dtypes.float64), 30: ("BF16", 1, 2, dtypes.bfloat16)}
_OTHER_TYPES = {9: "Q8_1", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 21: "IQ3_S",
                22: "IQ2_S", 29: "IQ1_M"}


class _Reader:
    """Reads GGUF's little-endian fields from the file's bytes, checking every length against what is left."""

    def __init__(self, src: CheckpointBytes):
        self.src, self.mv, self.pos = src, src.mv, 0

    def need(self, n: int, what: str) -> None:
        if n > len(self.mv) - self.pos:
            raise CheckpointError(f"{self.src.name}: GGUF {what} needs {n} bytes at offset {self.pos}, the file has "
                                  f"{len(self.mv) - self.pos} left (truncated or corrupt)")

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += n
        return v

    def string(self, what: str, strict: bool = True) -> str:
        n = self.scalar("<Q", f"{what} length")
        self.need(n, what)
        raw = bytes(self.mv[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8", errors="strict" if strict else "replace")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.src.name}: GGUF {what} is not UTF-8: {raw[:40]!r}") from None

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            v = self.scalar(_SCALARS[vtype][0], what)
            return bool(v) if vtype == _BOOL else v
        if vtype == _STRING:
            return self.string(what, strict=False)
        if vtype != _ARRAY:
            raise CheckpointError(f"{self.src.name}: GGUF {what} has unknown value type {vtype}")
        if depth >= MAX_ARRAY_DEPTH:
            raise CheckpointError(f"{self.src.name}: GGUF {what} nests arrays deeper than {MAX_ARRAY_DEPTH}")
        etype = self.scalar("<I", f"{what} element type")
        count = self.scalar("<Q", f"{what} length")
        if etype in _SCALARS:
            np_dtype = np.dtype(_SCALARS[etype][1])
            self.need(count * np_dtype.itemsize, what)
            arr = np.frombuffer(self.mv, dtype=np_dtype, count=count, offset=self.pos)
            self.pos += count * np_dtype.itemsize
            return arr.astype(bool).tolist() if etype == _BOOL else arr.tolist()
        # strings and arrays take at least 8 bytes (a length) each: a corrupt count can't make us loop for long
        self.need(count * 8 if etype in (_STRING, _ARRAY) else 0, what)
        return [self.value(etype, what, depth + 1) for _ in range(count)]


def gguf_load(tensor_or_path: str | os.PathLike | Tensor) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(key-value metadata, tensors by name) of a GGUF file, given by path or as a uint8 Tensor of its bytes.

    Tensor shapes are outermost-first (GGUF lists dims innermost-first). Plain types keep their dtype and load
    zero-copy; quantized types come out as lazily dequantized float32 tensors on the default device."""
    src = CheckpointBytes(tensor_or_path)
    kv, infos, data_start, alignment = _parse(src)
    tensors: dict[str, Tensor] = {}
    for name, dims, ttype, offset in infos:
        tensors[name] = _load_tensor(src, name, dims, ttype, offset, data_start, alignment)
    return kv, tensors


class GGUFTensor:
    """One tensor of a GGUF file as stored: its ggml type's name, its shape (outermost first), and `raw()`, its bytes
    as a uint8 Tensor (zero-copy from the file), so a runtime can keep quantized blocks as they are and dequantize
    where it reads them (`dequantize`, or GGML_TYPES' functions on some of the blocks)."""

    def __init__(self, src: CheckpointBytes, name: str, shape: tuple[int, ...], ttype: int, where: int, nbytes: int):
        self.src, self.name, self.shape, self.ttype, self.where, self.nbytes = src, name, shape, ttype, where, nbytes

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ttype][0]

    @property
    def block(self) -> tuple[int, int]:
        """(values per block, bytes per block)."""
        return GGML_TYPES[self.ttype][1], GGML_TYPES[self.ttype][2]

    @property
    def quantized(self) -> bool:
        return not isinstance(GGML_TYPES[self.ttype][3], DType)

    def raw(self) -> Tensor:
        return self.src.raw(self.where, self.nbytes, f"tensor {self.name!r}")

    def host_blocks(self) -> np.ndarray:
        """The stored bytes as a read-only uint8 array over the checkpoint's own memory (the mapped file): no copy,
        for host code that takes blocks apart itself."""
        return np.frombuffer(self.src.mv, dtype=np.uint8, count=self.nbytes, offset=self.where)

    def load(self) -> Tensor:
        """What gguf_load gives for this tensor: plain types zero-copy, quantized ones lazily dequantized."""
        if not self.quantized:
            return self.src.tensor(self.where, GGML_TYPES[self.ttype][3], self.shape, f"tensor {self.name!r}")
        raw = self.raw()
        if raw.device.startswith("DISK:"):
            raw = raw.to(Device.DEFAULT)
        return dequantize(self.ttype, raw, self.shape)

    def __repr__(self) -> str:
        return f"GGUFTensor({self.name!r}, {self.type_name}, {self.shape})"


def gguf_tensors(tensor_or_path: str | os.PathLike | Tensor) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
    """(key-value metadata, tensors by name as stored) of a GGUF file: gguf_load's checks, nothing read or
    dequantized (see GGUFTensor)."""
    src = CheckpointBytes(tensor_or_path)
    kv, infos, data_start, alignment = _parse(src)
    out: dict[str, GGUFTensor] = {}
    for name, dims, ttype, offset in infos:
        shape, where, nbytes = _check_tensor(src, name, dims, ttype, offset, data_start, alignment)
        out[name] = GGUFTensor(src, name, shape, ttype, where, nbytes)
    return kv, out


def plain_values(ttype: int, raw: np.ndarray) -> np.ndarray:
    """Host bytes `raw` (uint8) of an unquantized ggml type as float32 values."""
    kind = GGML_TYPES[ttype][3]
    if not isinstance(kind, DType):
        raise ValueError(f"ggml type {GGML_TYPES[ttype][0]} is quantized: see dequantize")
    if kind == dtypes.bfloat16:  # numpy has no bfloat16: its bits are a float32's top half
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw.view(np.dtype(kind.fmt if kind.fmt else "f4")).astype(np.float32)


def dequantize(ttype: int, raw: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Bytes `raw` (uint8, whole blocks) of ggml type `ttype` as a lazily computed float32 tensor of `shape`: a
    quantized type's blocks taken apart by Tensor ops, a plain type's elements bitcast from their bytes (so F16 and
    BF16 stay in their own bits until the kernel that reads them)."""
    tname, block, block_bytes, kind = GGML_TYPES[ttype]
    if isinstance(kind, DType):
        return _plain(raw, kind).cast(dtypes.float32).reshape(shape)
    return kind(raw.reshape(-1, block_bytes)).reshape(shape)


def _parse(src: CheckpointBytes) -> tuple[dict[str, Any], list, int, int]:
    """The metadata, the tensor infos [(name, dims innermost first, ggml type, offset)], where the data starts, and
    the alignment."""
    r = _Reader(src)
    r.need(4, "magic")
    if bytes(src.mv[:4]) != b"GGUF":
        raise CheckpointError(f"{src.name}: not a GGUF file (magic {bytes(src.mv[:4])!r})")
    r.pos = 4
    version = r.scalar("<I", "version")
    if version not in (2, 3):
        raise CheckpointError(f"{src.name}: GGUF version {version} is not supported (2 and 3 are; a huge number is a "
                              "big-endian file)")
    n_tensors, n_kv = r.scalar("<Q", "tensor count"), r.scalar("<Q", "key-value count")
    # each key-value takes at least 12 bytes and each tensor info 24: absurd counts fail here, not in a long loop
    r.need(n_kv * 12 + n_tensors * 24, "header")
    kv: dict[str, Any] = {}
    for i in range(n_kv):
        key = r.string(f"key {i}")
        if key in kv:
            raise CheckpointError(f"{src.name}: GGUF key {key!r} appears twice")
        kv[key] = r.value(r.scalar("<I", f"type of {key!r}"), f"value of {key!r}")
    alignment = kv.get("general.alignment", 32)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise CheckpointError(f"{src.name}: general.alignment must be a power of two, got {alignment!r}")
    infos, names = [], set()
    for i in range(n_tensors):
        name = r.string(f"tensor name {i}")
        n_dims = r.scalar("<I", f"n_dims of {name!r}")
        if n_dims > MAX_DIMS:
            raise CheckpointError(f"{src.name}: tensor {name!r} has {n_dims} dims, GGUF allows at most {MAX_DIMS}")
        dims = [r.scalar("<Q", f"dims of {name!r}") for _ in range(n_dims)]
        ttype, offset = r.scalar("<I", f"type of {name!r}"), r.scalar("<Q", f"offset of {name!r}")
        if name in names:
            raise CheckpointError(f"{src.name}: GGUF tensor {name!r} appears twice")
        names.add(name)
        infos.append((name, dims, ttype, offset))
    return kv, infos, -(-r.pos // alignment) * alignment, alignment


def _check_tensor(src: CheckpointBytes, name: str, dims: list[int], ttype: int, offset: int, data_start: int,
                  alignment: int) -> tuple[tuple[int, ...], int, int]:
    """(shape, where its bytes start in the file, how many) of one tensor info, checked against the file."""
    if ttype not in GGML_TYPES:
        kind = _OTHER_TYPES.get(ttype, "an unknown type")
        raise CheckpointError(f"{src.name}: tensor {name!r} has ggml type {ttype} ({kind}), which gguf_load can't "
                              f"read; supported: {', '.join(t[0] for t in GGML_TYPES.values())}")
    tname, block, block_bytes, kind = GGML_TYPES[ttype]
    shape = tuple(reversed(dims))
    numel = prod(shape)
    row = dims[0] if dims else 1  # a 0-d tensor is one row of one value
    if row % block:
        raise CheckpointError(f"{src.name}: tensor {name!r} of type {tname} has {row} values per row, not a "
                              f"multiple of its block of {block}")
    if offset % alignment:
        raise CheckpointError(f"{src.name}: tensor {name!r} starts at data offset {offset}, not a multiple of the "
                              f"alignment {alignment}")
    nbytes = numel // block * block_bytes
    where = data_start + offset
    src.check_range(where, nbytes, f"tensor {name!r}")
    return shape, where, nbytes


def _load_tensor(src: CheckpointBytes, name: str, dims: list[int], ttype: int, offset: int, data_start: int,
                 alignment: int) -> Tensor:
    shape, where, nbytes = _check_tensor(src, name, dims, ttype, offset, data_start, alignment)
    return GGUFTensor(src, name, shape, ttype, where, nbytes).load()

