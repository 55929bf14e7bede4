# Type stub for the compiled module tinygrad/engine/schedule.pyx (LazyBuffer graph -> kernels to run, in order).
from typing import Iterable

from tinygrad.device import Buffer
from tinygrad.dtype import dtypes as dtypes
from tinygrad.engine.fuse_attention import fuse_attention as fuse_attention
from tinygrad.engine.fuse_rows import fuse_row_chains as fuse_row_chains
from tinygrad.helpers import DEBUG as DEBUG
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import UNSAFE_PAD_OPS as UNSAFE_PAD_OPS
from tinygrad.ops import BinaryOps as BinaryOps
from tinygrad.ops import BufferOps as BufferOps
from tinygrad.ops import ConstBuffer as ConstBuffer
from tinygrad.ops import LazyOp as LazyOp
from tinygrad.ops import LoadOps as LoadOps
from tinygrad.ops import MemBuffer as MemBuffer
from tinygrad.ops import ReduceOps as ReduceOps
from tinygrad.ops import TernaryOps as TernaryOps
from tinygrad.ops import UnaryOps as UnaryOps
from tinygrad.shape.shapetracker import ShapeTracker as ShapeTracker
from tinygrad.shape.symbolic import Node as Node
from tinygrad.shape.symbolic import Variable as Variable

# a kernel reading more buffers than this is split (its widest inputs realized first)
MAX_KERNEL_INPUTS: int

class ScheduleItem:
    def __init__(self, ast: tuple[LazyOp, ...], bufs: tuple[Buffer, ...], n_outputs: int = 1,
                 lbs: tuple[LazyBuffer, ...] = ()) -> None: ...
    # the kernel's AST: one BufferOps.STORE per output (or a single LoadOps node for copies and allocations)
    @property
    def ast(self) -> tuple[LazyOp, ...]: ...
    # the buffers, outputs first
    @property
    def bufs(self) -> tuple[Buffer, ...]: ...
    @property
    def n_outputs(self) -> int: ...
    # the LazyBuffers this item realizes
    @property
    def lbs(self) -> tuple[LazyBuffer, ...]: ...
    @property
    def outputs(self) -> tuple[Buffer, ...]: ...
    @property
    def inputs(self) -> tuple[Buffer, ...]: ...

def create_schedule_with_vars(outs: Iterable[LazyBuffer], seen: set | None = None
                              ) -> tuple[list[ScheduleItem], dict[Variable, int]]: ...
def create_schedule(outs: Iterable[LazyBuffer], seen: set | None = None) -> list[ScheduleItem]: ...
