"""The linear IR a kernel is lowered to: a list of UOps, each naming its inputs, in an order a renderer can emit.

Values are scalars, or vectors when the dtype has `count > 1` (`dtypes.float32.vec(8)`). Vector uops appear only
for devices whose LinearizerOptions set `supports_upcast`; a renderer for such a device must handle:

- VECTORIZE (lanes -> vector) and GEP (vector -> one lane);
- LOAD/STORE of a vector dtype: `count` consecutive elements starting at the (scalar) index, at any alignment;
  a gated vector LOAD has a scalar condition and a vector alternative;
- ALU of a vector dtype for the ops in VECTOR_ALU_OPS (and VECTOR_MATH_OPS on float32, where
  LinearizerOptions.vector_math says so): lane by lane, every operand of the same vector dtype;
- DEFINE_ACC of a vector dtype (every lane starts at the scalar `arg`) and PHI of a vector dtype.

A LOAD's `arg` is None, "ldmatrix"/"ldmatrix.trans" (a warp's load of 8x8 matrices from shared memory for tensor
cores: each lane gives one row's address, dtype = two 16-bit elements per matrix), or "bits" (a scalar: the
element's stored bit pattern as the uint16 dtype of the uop, not converted, for half and bfloat16 buffers), or
"aligned" (a vector whose address is known to be a multiple of its size: no run-time alignment check), or
"reinterpret" (an aligned vector of the uop's own dtype read from a buffer of another: a float's two 16-bit halves), or
("simdgroup", stride, transposed) (a SIMD group's load of an 8x8 tensor-core tile from shared memory, rows `stride`
elements apart: dtype = the lane's two 16-bit elements of it, in the compiler's own spread); a STORE's is None,
"aligned" or ("simdgroup", stride) (a SIMD group's store of an 8x8 float accumulator, the value the lane's part of
it, as WMMA returns it). Vector loads and stores move bits unconverted, so a uint16 vector LOAD from a half buffer holds
the halves' bit patterns (how tensor-core operands move). A LOOP whose `arg` is a number > 1 (only where
LinearizerOptions.threads allows) may have its iterations split across that many threads: they write disjoint
outputs, and nothing declared outside the loop is written inside. Only the scalar types in VECTOR_DTYPES are ever
vectorized, with one exception: where LinearizerOptions.narrow_vectors is set, a LOAD may also be a vector of a type
in NARROW_VECTOR_DTYPES (packed weights: int8 values), and a CAST may turn such a vector (or one of
VECTOR_DTYPES) into a vector of a VECTOR_DTYPES type with as many lanes, each lane converted as a scalar CAST would
convert it. Where LinearizerOptions.int_vectors is set too, the ALU ops in INT_VECTOR_ALU_OPS apply to whole
vectors of those narrow types (every operand of the same vector dtype), a CAST may turn one into a vector of another
of them, and a BITCAST into one of the same size (or into a scalar of its size: a uint8 pair read as the
little-endian uint16 it holds, codegen/byte_pairs.py). Everything else is computed lane by lane in scalars.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from tinygrad.dtype import DType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps


class UOps(Enum):
    DEFINE_GLOBAL = auto()   # a buffer argument: arg = (index, name, is_output)
    DEFINE_VAR = auto()      # a symbolic variable argument: arg = the Variable
    DEFINE_LOCAL = auto()    # shared memory (GPU renderers): arg = (name, elements), dtype = PtrDType of the element
    DEFINE_ACC = auto()      # an accumulator for a reduce: arg = its start value
    CONST = auto()           # arg = the value
    SPECIAL = auto()         # a GPU thread/block index: arg = (dim, name, size)
    LOOP = auto()            # vin = (start, end): for (i = start; i < end; i++); arg: threads to split it across
    ENDLOOP = auto()         # vin = (the LOOP,)
    LOAD = auto()            # vin = (buffer, index) or (buffer, index, valid, alternative)
    STORE = auto()           # vin = (buffer, index, value) or (buffer, index, value, valid)
    ALU = auto()             # arg = the Unary/Binary/TernaryOp
    CAST = auto()            # vin = (value,), dtype = the target (of as many lanes as the value); arg ("bits", T)
    #                          (GPU renderers): the uint16 pattern of the float value rounded to T (half or bfloat16),
    #                          as a store to a T buffer writes it (a tensor-core operand made in registers)
    BITCAST = auto()         # vin = (value,), dtype = the target, same size
    PHI = auto()             # vin = (accumulator, new value, loop): the accumulator takes the new value
    BARRIER = auto()         # GPU renderers: every thread of the block waits here (so none may have returned)
    VECTORIZE = auto()       # vin = the lanes (scalars), dtype = the vector type
    GEP = auto()             # vin = (vector,), arg = the lane: that lane as a scalar
    WMMA = auto()            # a warp's matrix multiply-add on tensor cores: vin = (A's registers, B's, C), arg =
    #                          (the TensorCore's name (codegen/tensor_cores.py), which half of B's registers: 0 or 1
    #                          where they hold two fragments, else None), dtype = C's; each thread passes its part
    #                          (TensorCore.frag says which part that is).
    #                          A warpgroup's (wgmma) multiplies a whole staged slice read from shared memory: vin =
    #                          (A's local, index, B's local, index, C), arg = (name, (BN, B staged K-major, bytes
    #                          between B's 64-column atoms where it is not, slices left in flight)), C = the thread's
    #                          BN/2 accumulators; vin = (C,), arg = (name, ("wait", BN)): C once none is in flight
    COPY_ASYNC = auto()      # 16 bytes global -> shared without registers: vin = (local, index, global, index[, valid])
    #                          (zeros where not valid); both addresses 16-byte aligned; lands by ASYNC_WAIT
    ASYNC_COMMIT = auto()    # the COPY_ASYNCs this thread issued since the last commit form one group
    ASYNC_WAIT = auto()      # wait until at most `arg` of this thread's committed groups are still in flight
    FENCE = auto()           # arg "async_proxy": this thread's shared-memory writes (its landed COPY_ASYNCs
    #                          included) are seen by the tensor cores' own reads of shared memory (Hopper's wgmma)
    TMA = auto()             # Hopper's TMA pipeline of a wgmma kernel (CUDA only); arg one of the Tma* records below,
    #                          which says what the uop does and what its vin are
    SHUFFLE = auto()         # GPU renderers with warp shuffles: vin = (a 32-bit scalar,), arg = ("xor", mask): the
    #                          value of lane (this lane ^ mask) of the warp; every lane of the warp takes part



# ---- the arguments of TMA uops (Hopper's tensor-memory copies of a wgmma kernel's slices) ----
@dataclass(frozen=True)
class TmaMap:
    """vin (the DEFINE_GLOBAL,): a tensor-map parameter named `name`, describing a box of that buffer from `offset`
    bytes on (`elem_bytes` an element, innermost dim first: `dims` in elements, `strides` in bytes of dims 1..), its
    copies landing with a `swizzle`-byte swizzle; the runtime encodes it from the buffer's address at each launch."""
    name: str
    offset: int
    elem_bytes: int
    dims: tuple
    strides: tuple
    box: tuple
    swizzle: int


@dataclass(frozen=True)
class TmaInit:
    """vin (mbarriers, thread id): the stages' "full" and "empty" mbarriers set up (the "empty" ones completing
    after `arrivals` warps' releases), then the block (the cluster of `cluster` blocks) synchronised."""
    stages: int
    arrivals: int
    cluster: int


@dataclass(frozen=True)
class TmaProduce:
    """vin (mbarriers, go, step, A's local, B's local, A's map, B's map, first row of A, first column of B): where
    `go`, step's slices (`a_elems` and `b_elems` elements a stage; B staged K-major or in `b_atoms` 64-column atoms)
    copied into stage step % stages once every warp is done with what it held."""
    stages: int
    a_elems: int
    b_elems: int
    b_along_k: bool
    b_atoms: int
    cluster: int


@dataclass(frozen=True)
class TmaProducer:
    """vin (mbarriers, thread id, A's local, B's local, A's map, B's map, first row of A, first column of B): the
    warp after the `consumers` threads that multiply copies all `steps` steps' slices (as TmaProduce does, each once
    its stage is freed), then leaves."""
    stages: int
    a_elems: int
    b_elems: int
    b_along_k: bool
    b_atoms: int
    steps: int
    consumers: int
    cluster: int


@dataclass(frozen=True)
class TmaWait:
    """vin (mbarriers, step): until step's slices have landed."""
    stages: int


@dataclass(frozen=True)
class TmaRelease:
    """vin (mbarriers, step, go): where `go`, this warp is done with step's stage (told to every block of the
    cluster, whose producers write into it)."""
    stages: int
    cluster: int


@dataclass(frozen=True)
class TmaExit:
    """vin (): no block of the cluster leaves while another may still signal it."""
    cluster: int

# the scalar types the linearizer makes vectors of, and the ALU ops it applies to whole vectors (both operands
# vectors of one dtype; MAX keeps its NaN-propagating meaning). Everything else is computed lane by lane.
VECTOR_DTYPES = (dtypes.float32, dtypes.float64)
# the narrow types a device with LinearizerOptions.narrow_vectors loads as vectors, only to CAST them to VECTOR_DTYPES
# vectors: quantized weights are read 16 or 64 bytes at a time and widened in registers instead of element by element.
# NOTE: not half: gcc 12 converts a vector of _Float16 lane by lane, no faster than scalar loads
NARROW_VECTOR_DTYPES = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32)
VECTOR_ALU_OPS = frozenset({BinaryOps.ADD, BinaryOps.SUB, BinaryOps.MUL, BinaryOps.DIV, BinaryOps.MAX, UnaryOps.NEG})
# the math a device with LinearizerOptions.vector_math computes on whole float32 vectors
VECTOR_MATH_OPS = frozenset({UnaryOps.EXP2})
# the integer ops a device with LinearizerOptions.int_vectors applies to whole vectors of NARROW_VECTOR_DTYPES (the
# bit fields of quantized blocks: shifts, masks, ors, the offsets of their values); each lane wraps as the scalar op
# of that dtype would, so a uint8 vector shifted left keeps 8 bits a lane
INT_VECTOR_ALU_OPS = frozenset({BinaryOps.ADD, BinaryOps.SUB, BinaryOps.MUL, BinaryOps.AND, BinaryOps.OR,
                                BinaryOps.XOR, BinaryOps.SHL, BinaryOps.SHR})


class UOp:
    """One instruction. Identity is the object: the linearizer deduplicates equal instructions before making them."""
    __slots__ = ("uop", "dtype", "vin", "arg")

    def __init__(self, uop: UOps, dtype: DType | None = None, vin: tuple[UOp, ...] = (), arg: Any = None):
        self.uop, self.dtype, self.vin, self.arg = uop, dtype, vin, arg

    def __repr__(self) -> str:
        return f"{str(self.uop):20s}: {str(self.dtype) if self.dtype is not None else '':25s} " \
               f"{[str(x.uop)[4:] for x in self.vin]} {self.arg}"


def print_uops(uops: list[UOp]) -> str:
    """The numbered listing DEBUG=6 prints, inputs given by their line numbers."""
    pos = {id(u): i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        dt = str(u.dtype) if u.dtype is not None else ""
        lines.append(f"{i:4d} {str(u.uop):20s}: {dt:25s} {str([pos[id(x)] for x in u.vin]):16s} {u.arg}")
    return "\n".join(lines)
