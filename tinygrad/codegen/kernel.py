"""What a device tells the code generator about itself, and the optimisations a kernel can be given.

An optimisation (`Opt`) reshapes how the linearizer walks a kernel's iteration space without changing what it
computes: `UPCAST` and `UNROLL` expand part of a dimension into copies held side by side in registers (an output
tile, or several steps of a reduction), `VECTORIZE` holds part of a dimension as the lanes of one vector value, and
on GPUs `LOCAL` sets how many threads of a block walk an output dimension and `GROUP` splits a reduction across
threads of a block, and `TC` runs a matmul-shaped kernel on tensor cores (codegen/tensor_cores.py).

>>> from tinygrad.codegen.kernel import Opt, OptOps
>>> Opt(OptOps.UPCAST, 0, 4)
Opt(op=OptOps.UPCAST, axis=0, amt=4)
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


@dataclass(frozen=True)
class LinearizerOptions:
    """Capabilities of a device's code generation. CPUs loop over every dimension; GPUs map the outer
    dimensions to a grid of threads (`has_local`, `global_max`, `local_max`).

    `supports_upcast`: the renderer handles expanded kernels (several accumulators, unrolled bodies) and the
    vector uops (VECTORIZE, GEP, vector LOAD/STORE/ALU/DEFINE_ACC/PHI, see `tinygrad.codegen.uops`); only then
    does the linearizer apply its heuristic optimisations. `max_vector_bytes`: the widest vector value worth
    making (0: no vectors); `vector_registers`: how many such values the target keeps in registers; `threads`:
    how many threads the outermost loop of a large optimised kernel may be split across (a LOOP uop's `arg`);
    `tensor_cores`: the matrix instructions the renderer can emit (keys of `codegen.tensor_cores.TENSOR_CORES`), and
    "cp.async" where it can copy global memory to shared memory asynchronously (COPY_ASYNC uops); `narrow_vectors`:
    the renderer loads vectors of `codegen.uops.NARROW_VECTOR_DTYPES` and casts them to float vectors lane by lane;
    `half_vectors`: a vectorised dim of a half or bfloat16 buffer is read and written as one vector of its 16-bit
    patterns, each lane converted on its own (codegen/packed_halves.py); `vector_math`: the renderer computes
    VECTOR_MATH_OPS (exp2) on float32 vectors itself, not a libm call per lane; `int_vectors`: (with
    `narrow_vectors`) the renderer applies INT_VECTOR_ALU_OPS to vectors of NARROW_VECTOR_DTYPES, and casts and
    bitcasts them to each other whole;
    `shared_max`: the most shared memory one block may use, in bytes (CUDA's is 48 KB unless a kernel opts in to
    more, as the CUDA runtime does for kernels that need it: up to 227 KB on an H100).
    """
    device: str = ""
    has_local: bool = True
    has_shared: bool = True
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
    supports_upcast: bool = False
    max_vector_bytes: int = 0
    vector_registers: int = 16
    threads: int = 1
    tensor_cores: tuple[str, ...] = ()
    shared_max: int = 48 * 1024
    narrow_vectors: bool = False
    half_vectors: bool = False
    vector_math: bool = False
    int_vectors: bool = False


class OptOps(Enum):
    """The kinds of kernel optimisation. `axis` is a dimension of the kernel's full shape."""
    UPCAST = auto()      # an output dimension: `amt` consecutive outputs per loop step, each with its own registers
    UNROLL = auto()      # a reduced dimension: `amt` consecutive reduction steps per loop step
    VECTORIZE = auto()   # any dimension: `amt` consecutive elements as the lanes of one vector (innermost)
    LOCAL = auto()       # an output dimension on a GPU: `amt` threads of a block along it (the block's shape)
    GROUP = auto()       # a reduced dimension on a GPU: split across `amt` threads of a block (shared memory),
    #                      thread t taking the steps t, t + amt, ... (neighbouring threads read neighbouring elements)
    GROUPTOP = auto()    # GROUP with each thread taking one run of consecutive steps (a strided reduction's threads
    #                      then read along its rows)
    NOLOCALS = auto()    # the kernel on the GPU grid keeps one thread a block (no LOCAL, no GROUP; axis/amt unused)
    PADTO = auto()       # a dimension's loop runs to the next multiple of `amt` (so that tiles of `amt` divide it):
    #                      the steps past its end read zeros and store nothing (on a reduced dim only for sums
    #                      whose padded terms are zero)
    THREAD = auto()      # an output dimension on a CPU: its loop, made the outermost, split across `amt` threads
    TC = auto()          # a matmul on tensor cores, block tile `tensor_cores.TC_CONFIGS[amt]` (`axis` unused: 0)
    SMEM = auto()        # a float32 matmul's block tile `tensor_cores.SIMT_CONFIGS[amt]` staged in shared memory

    def __repr__(self) -> str:
        return f"OptOps.{self.name}"


@dataclass(frozen=True)
class Opt:
    """One optimisation: `op` on dimension `axis` of the full shape by `amt` (0: the whole remaining dimension)."""
    op: OptOps
    axis: int
    amt: int

    def __repr__(self) -> str:
        return f"Opt(op={self.op!r}, axis={self.axis}, amt={self.amt})"


def opts_text(opts) -> str:
    """Optimisations in short, as DEBUG=2 prints them: `[VECTORIZE 1:4 UPCAST 0:4]` (op, axis:amount).

    >>> opts_text([Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 1, 16)])
    '[UPCAST 0:4 LOCAL 1:16]'
    """
    return "[" + " ".join(f"{o.op.name} {o.axis}:{o.amt}" for o in opts) + "]"
