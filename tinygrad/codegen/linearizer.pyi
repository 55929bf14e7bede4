# Type stub for the compiled module tinygrad/codegen/linearizer.pyx (kernel AST -> a flat list of UOps).
from typing import Any

from tinygrad.codegen.accumulate import SUM_BLOCK as SUM_BLOCK
from tinygrad.codegen.accumulate import TILE_SUM_BLOCK as TILE_SUM_BLOCK
from tinygrad.codegen.accumulate import needs_blocks as needs_blocks
from tinygrad.codegen.accumulate import plan_blocks as plan_blocks
from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.kernel import Opt as Opt
from tinygrad.codegen.kernel import OptOps as OptOps
from tinygrad.codegen.uops import NARROW_VECTOR_DTYPES as NARROW_VECTOR_DTYPES
from tinygrad.codegen.uops import VECTOR_ALU_OPS as VECTOR_ALU_OPS
from tinygrad.codegen.uops import VECTOR_DTYPES as VECTOR_DTYPES
from tinygrad.codegen.uops import VECTOR_MATH_OPS as VECTOR_MATH_OPS
from tinygrad.codegen.uops import UOp as UOp
from tinygrad.codegen.uops import UOps as UOps
from tinygrad.dtype import DType
from tinygrad.dtype import PtrDType as PtrDType
from tinygrad.dtype import dtypes as dtypes
from tinygrad.helpers import DEBUG as DEBUG
from tinygrad.helpers import NOOPT as NOOPT
from tinygrad.helpers import to_function_name as to_function_name
from tinygrad.helpers import toposort as toposort
from tinygrad.ops import BinaryOps as BinaryOps
from tinygrad.ops import BufferOps as BufferOps
from tinygrad.ops import LazyOp
from tinygrad.ops import ReduceOps as ReduceOps
from tinygrad.ops import TernaryOps as TernaryOps
from tinygrad.ops import UnaryOps as UnaryOps
from tinygrad.shape.symbolic import AndNode as AndNode
from tinygrad.shape.symbolic import DivNode as DivNode
from tinygrad.shape.symbolic import LtNode as LtNode
from tinygrad.shape.symbolic import ModNode as ModNode
from tinygrad.shape.symbolic import MulNode as MulNode
from tinygrad.shape.symbolic import Node as Node
from tinygrad.shape.symbolic import NumNode as NumNode
from tinygrad.shape.symbolic import SumNode as SumNode
from tinygrad.shape.symbolic import Variable as Variable
from tinygrad.shape.symbolic import sint

class Linearizer:
    # read-only fields
    @property
    def ast(self) -> tuple[LazyOp, ...]: ...
    @property
    def opts(self) -> LinearizerOptions | None: ...
    @property
    def reduceop(self) -> LazyOp | None: ...
    @property
    def output_shape(self) -> tuple[sint, ...]: ...
    @property
    def full_shape(self) -> tuple[sint, ...]: ...
    @property
    def reduce_axes(self) -> tuple[int, ...]: ...
    # per dim of the full shape: how many consecutive indices one loop step covers (vector lanes included)
    @property
    def upcasts(self) -> list[int]: ...
    @property
    def vector_axis(self) -> int: ...
    @property
    def vector_width(self) -> int: ...
    # GPU code generation: LOCAL dims (dim -> threads of a block along it), and the GROUP split of a reduced dim
    # over `group` threads of a block (group_axis -1: none)
    @property
    def local_dims(self) -> dict[int, int]: ...
    @property
    def group_axis(self) -> int: ...
    @property
    def group(self) -> int: ...
    # GROUPTOP (each of the group's threads a run of consecutive steps) and NOLOCALS (blocks of one thread)
    @property
    def group_top(self) -> bool: ...
    @property
    def no_locals(self) -> bool: ...
    # TC: the tensor-core plan (tinygrad.codegen.tensor_cores.TCPlan), None without one
    @property
    def tc(self) -> Any: ...
    # id(LazyOp) -> the dims of the full shape its value varies along, and the dtype of its value
    @property
    def op_dims(self) -> dict[int, Any]: ...
    @property
    def op_dtypes(self) -> dict[int, DType]: ...
    # public (writable) fields: what linearize produces, and how the rendered kernel is called
    uops: list[UOp]
    global_size: list[int] | None
    local_size: list[int] | None
    vars: list[Variable]
    # whether output dims map to the GPU grid (SPECIAL indices) instead of loops
    gpu: bool
    applied_opts: list[Opt]
    # the output dims' loops, outermost first (None: chosen by linearize)
    loop_order: list[int] | None
    # how many threads the outermost output loop is split across (1: none)
    threads: int
    # THREAD: the output dim whose loop is split across `threads` (-1: none, or chosen by linearize)
    thread_axis: int
    name: str
    buf_uops: dict[int, UOp]
    def __init__(self, ast: LazyOp | tuple[LazyOp, ...], opts: LinearizerOptions | None = None) -> None: ...
    def apply_opt(self, opt: Opt) -> Linearizer: ...
    def hand_coded_optimizations(self) -> Linearizer: ...
    def linearize(self) -> Linearizer: ...
