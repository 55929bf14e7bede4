"""Little-endian 16-bit words put together from two byte loads become one 2-byte load.

GGUF blocks keep their fp16 scales at offsets no dtype can be read at (a Q8_0 block is 34 bytes), so the Tensor ops
that take a block apart (nn/state_gguf.py's `_f16`) build each word from its bytes: `lo | (hi << 8)` over two uint8
loads widened to uint16. gcc 12 keeps that as two loads, a shift and an or, once per block and row: in a Q8_0
product that is a fifth of the loop's instructions. On a device whose renderer has integer vectors the pair is a
vector LOAD of two uint8 lanes from the low byte's index (any alignment, as every vector load) BITCAST to uint16,
one 16-bit load.
"""
from __future__ import annotations

from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import dtypes
from tinygrad.ops import BinaryOps

# uops without side effects, dropped once nothing reads them
_PURE = (UOps.LOAD, UOps.CAST, UOps.ALU)


def _offset(idx: UOp) -> tuple[int | None, int]:
    """(id of the index's non-constant part or None, its constant part) of a LOAD's index uop."""
    if idx.uop is UOps.CONST:
        return None, idx.arg
    if idx.uop is UOps.ALU and idx.arg is BinaryOps.ADD and idx.vin[1].uop is UOps.CONST:
        return id(idx.vin[0]), idx.vin[1].arg
    return id(idx), 0


def _byte(u: UOp) -> UOp | None:
    """The ungated uint8 LOAD that `u` widens to uint16, else None."""
    if u.uop is not UOps.CAST or u.dtype != dtypes.uint16:
        return None
    ld = u.vin[0]
    if ld.uop is not UOps.LOAD or ld.dtype != dtypes.uint8 or len(ld.vin) != 2 or ld.arg is not None:
        return None
    return ld


def _high_byte(u: UOp) -> UOp | None:
    """The uint8 LOAD of `u` = (uint16)load << 8, else None."""
    if u.uop is not UOps.ALU or u.arg is not BinaryOps.SHL or u.dtype != dtypes.uint16:
        return None
    if u.vin[1].uop is not UOps.CONST or u.vin[1].arg != 8:
        return None
    return _byte(u.vin[0])


def _pair(u: UOp) -> tuple[UOp, UOp] | None:
    """(the low byte's LOAD, the high byte's) where `u` is the uint16 `lo | (hi << 8)` of bytes i and i + 1 of one
    buffer, else None."""
    if u.uop is not UOps.ALU or u.arg is not BinaryOps.OR or u.dtype != dtypes.uint16:
        return None
    for a, b in (u.vin, u.vin[::-1]):
        lo, hi = _byte(a), _high_byte(b)
        if lo is None or hi is None or lo.vin[0] is not hi.vin[0]:
            continue
        (base_lo, at_lo), (base_hi, at_hi) = _offset(lo.vin[1]), _offset(hi.vin[1])
        if base_lo == base_hi and at_hi == at_lo + 1:
            return lo, hi
    return None


def merge_byte_pairs(uops: list[UOp]) -> list[UOp]:
    """`uops` with every little-endian word of two byte loads read as one 2-byte load (see the module docstring),
    the loads and casts left without a use dropped. The OR uop becomes the BITCAST in place, so its users keep it."""
    out: list[UOp] = []
    orphans: list[UOp] = []
    for u in uops:
        pair = _pair(u)
        if pair is not None:
            lo = pair[0]
            word = UOp(UOps.LOAD, dtypes.uint8.vec(2), (lo.vin[0], lo.vin[1]), None)
            out.append(word)
            orphans.extend(u.vin)
            u.uop, u.vin, u.arg = UOps.BITCAST, (word,), None
        out.append(u)
    if not orphans:
        return uops
    # the casts, shifts and byte loads that only made the words are dropped (a uop that had no use before is kept)
    uses: dict[int, int] = {}
    for u in out:
        for v in u.vin:
            uses[id(v)] = uses.get(id(v), 0) + 1
    dead: set[int] = set()
    while orphans:
        u = orphans.pop()
        if id(u) in dead or uses.get(id(u), 0) or u.uop not in _PURE:
            continue
        dead.add(id(u))
        for v in u.vin:
            uses[id(v)] -= 1
            orphans.append(v)
    return [u for u in out if id(u) not in dead]
