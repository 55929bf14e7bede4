# Type stub for the compiled module tinygrad/engine/plan.pyx (the cache of schedules, keyed by graph structure).
from typing import Any, Callable

from tinygrad.diskcache import code_version as code_version
from tinygrad.diskcache import diskcache_get as diskcache_get
from tinygrad.diskcache import diskcache_put as diskcache_put
from tinygrad.engine.realize import CacheCollector as CacheCollector
from tinygrad.engine.realize import CompiledRunner as CompiledRunner
from tinygrad.engine.realize import lower_ast as lower_ast
from tinygrad.engine.realize import precompile_asts as precompile_asts
from tinygrad.engine.realize import run_schedule as run_schedule
from tinygrad.engine.schedule import create_schedule_with_vars as create_schedule_with_vars
from tinygrad.helpers import CACHELEVEL as CACHELEVEL
from tinygrad.helpers import DEBUG as DEBUG
from tinygrad.helpers import FLASH_ATTENTION as FLASH_ATTENTION
from tinygrad.helpers import VIZ as VIZ
from tinygrad.helpers import GlobalCounters as GlobalCounters
from tinygrad.helpers import raise_pending_interrupt as raise_pending_interrupt
from tinygrad.lazy import LazyBuffer
from tinygrad.locks import ENGINE_LOCK as ENGINE_LOCK
from tinygrad.ops import LazyOp as LazyOp
from tinygrad.ops import LoadOps as LoadOps
from tinygrad.shape.symbolic import Node as Node

class PlanItem:
    def __init__(self, runner: Any, ast: Any, buf_refs: tuple[int, ...], n_outputs: int,
                 lb_refs: tuple[int, ...]) -> None: ...
    # the runner: a compiled kernel, a copy or an allocation
    @property
    def runner(self) -> Any: ...
    @property
    def ast(self) -> Any: ...
    # per buffer: >= 0 indexes an unrealized node of the graph, < 0 is -(leaf index + 1), a realized buffer it reads
    @property
    def buf_refs(self) -> tuple[int, ...]: ...
    @property
    def n_outputs(self) -> int: ...
    # the nodes this item realizes
    @property
    def lb_refs(self) -> tuple[int, ...]: ...
    # launch(*raw buffers), or None: run through runner(bufs, var_vals)
    @property
    def launch(self) -> Callable[..., Any] | None: ...

class Plan:
    def __init__(self, items: tuple[PlanItem, ...], n_kernels: int, n_ops: int = 0, n_mem: int = 0,
                 drops: tuple[tuple[int, ...], ...] | None = None, unused: tuple[int, ...] = ()) -> None: ...
    @property
    def items(self) -> tuple[PlanItem, ...]: ...
    @property
    def n_kernels(self) -> int: ...
    @property
    def n_ops(self) -> int: ...
    @property
    def n_mem(self) -> int: ...
    # per item, the nodes it names last (the run lets go of them after it)
    @property
    def drops(self) -> tuple[tuple[int, ...], ...]: ...
    # the nodes no item names (let go of before the first item)
    @property
    def unused(self) -> tuple[int, ...]: ...

def realize_lazybuffers(outs: list[LazyBuffer]) -> None: ...
# (graphs served by a cached Plan, Plans made, of which made from a schedule on disk)
def plan_stats() -> tuple[int, int, int]: ...
def clear_plans() -> None: ...
