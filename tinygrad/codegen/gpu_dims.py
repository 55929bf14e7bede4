"""How a kernel's output (non-reduce) dimensions map onto a GPU grid: the launch's global and local sizes, and how
each kernel axis is recovered from the thread's position.

A GPU kernel has at most 3 grid dimensions (x, y, z) of blocks of threads, within per-dimension limits (on CUDA:
2**31-1 blocks in x, 65535 in y and z; 1024 threads per block, 64 in z). A kernel may iterate over any number of
output axes of any size, so `plan_grid` groups consecutive axes into grid dimensions, innermost axis into x (so
neighbouring threads touch neighbouring memory), and picks a block size:

>>> p = plan_grid((4, 1000, 3))
>>> p.global_size, p.local_size
((1, 20, 4), (3, 50, 1))

Each axis of size > 1 gets an `AxisIndex`: with `flat[d] = blockIdx[d] * local_size[d] + threadIdx[d]`, the
axis's index is `(flat[dim] // div) % size`. When a dimension's extent is not a multiple of its block size, the
launch covers more threads than elements and `guarded[d]` is true: threads with `flat[d] >= extents[d]` must do
nothing (the kernel returns early). Block sizes are chosen to divide the extents where a good divisor exists, so
most kernels need no guard.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tinygrad.helpers import prod
from tinygrad.shape.symbolic import Node, sym_infer

# CUDA's limits (compute capability 3.0 and later, which includes every GPU NVRTC 12/13 can target)
CUDA_GLOBAL_MAX = (2**31 - 1, 65535, 65535)
CUDA_LOCAL_MAX = (1024, 1024, 64)
# threads per block aimed for: enough warps to hide latency, few enough for several blocks per multiprocessor
TARGET_THREADS = 256


@dataclass(frozen=True)
class AxisIndex:
    """Kernel axis `axis` is `(flat[dim] // div) % size`; `div == 1` or the outermost axis of a dimension make the
    division or the modulo unnecessary, which `needs_div` / `needs_mod` say."""
    axis: int
    dim: int
    div: int
    size: int
    needs_mod: bool

    @property
    def needs_div(self) -> bool:
        return self.div != 1


@dataclass(frozen=True)
class GridPlan:
    """A launch configuration for a kernel's output axes (see the module docstring)."""
    global_size: tuple[int, int, int]  # blocks in each grid dimension (CUDA's grid)
    local_size: tuple[int, int, int]   # threads in each block dimension (CUDA's block)
    extents: tuple[int, int, int]      # elements covered by each grid dimension: the product of its axes
    axes: tuple[AxisIndex, ...]        # one per kernel axis of size > 1, in axis order

    @property
    def guarded(self) -> tuple[bool, bool, bool]:
        """Per grid dimension: does the launch cover more threads than elements (so the kernel must guard)?"""
        return tuple(g * lc != e for g, lc, e in zip(self.global_size, self.local_size, self.extents))

    @property
    def threads(self) -> int:
        return prod(self.local_size)

    def index(self, block: Sequence[int], thread: Sequence[int]) -> tuple[int, ...] | None:
        """The kernel axis indices thread `thread` of block `block` computes (size-1 axes are 0), or None if the
        guard stops it. A reference for kernels and tests."""
        flat = [b * lc + t for b, lc, t in zip(block, self.local_size, thread)]
        if any(f >= e for f, e in zip(flat, self.extents)):
            return None
        out = {a.axis: (flat[a.dim] // a.div) % a.size for a in self.axes}
        n = max([a.axis for a in self.axes], default=-1) + 1
        return tuple(out.get(i, 0) for i in range(n))


def _bound(s: Any) -> int:
    """An axis size as an int: symbolic sizes plan with their upper bound (the kernel then guards the real one)."""
    if isinstance(s, int):
        return s
    if hasattr(s, "max"):
        return int(s.max)
    raise TypeError(f"axis size must be an int or a symbolic Node with a max, got {s!r}")


def _pick_local(extent: int, budget: int, limit: int) -> int:
    """Threads for one grid dimension: the whole extent if it fits, else the largest divisor of the extent in
    [budget/4, budget] (no guard), else `budget` (guarded)."""
    cap = min(budget, limit)
    if extent <= cap:
        return extent
    for d in range(cap, max(cap // 4, 1) - 1, -1):
        if extent % d == 0:
            return d
    return cap


def _largest_divisor_at_most(extent: int, cap: int) -> int:
    for d in range(min(cap, extent), 0, -1):
        if extent % d == 0:
            return d
    return 1


def plan_grid(shape: Sequence[Any], global_max: Sequence[int] = CUDA_GLOBAL_MAX,
              local_max: Sequence[int] = CUDA_LOCAL_MAX, max_threads: int = 1024,
              target_threads: int = TARGET_THREADS, local: dict[int, int] | None = None) -> GridPlan:
    """The grid for a kernel whose output axes have sizes `shape` (outermost first; ints, or symbolic sizes, which
    are planned at their upper bound). `local` asks for a block size by axis (a LOCAL optimisation): the grid
    dimension holding that axis gets that many threads (the product, where several asked axes share one), within
    the limits; the other dimensions are chosen as usual. Raises ValueError if the kernel cannot fit the limits at
    all.

    >>> plan_grid((64, 64), local={0: 16, 1: 16}).local_size
    (16, 16, 1)
    """
    sizes = [_bound(s) for s in shape]
    if any(s < 0 for s in sizes):
        raise ValueError(f"axis sizes must be non-negative, got {tuple(shape)}")
    if len(global_max) != 3 or len(local_max) != 3:
        raise ValueError("global_max and local_max need one limit per grid dimension (x, y, z)")
    live = [i for i, s in enumerate(sizes) if s != 1]
    if not live or any(sizes[i] == 0 for i in live):
        return GridPlan((1, 1, 1), (1, 1, 1), (1, 1, 1), ())
    # grid dimension -> its axes, outermost first: x the innermost axis, y the next, z everything further out
    groups: list[list[int]] = [[live[-1]], live[-2:-1], live[:-2]]

    def extent(d: int) -> int:
        return prod(sizes[i] for i in groups[d])

    # a dimension with more blocks than the hardware allows moves into the next inner dimension (z into y, y into
    # x); x allows 2**31-1 blocks of many threads, more than any int32-indexed kernel can need
    for d in (2, 1):
        if extent(d) > global_max[d]:
            groups[d - 1] = groups[d] + groups[d - 1]
            groups[d] = []
    budget = max(1, min(target_threads, max_threads))
    asked = [prod((local or {}).get(i, 1) for i in groups[d]) if any(i in (local or {}) for i in groups[d]) else 0
             for d in range(3)]
    lx = min(asked[0], local_max[0], max_threads) if asked[0] else _pick_local(extent(0), budget, local_max[0])
    if -(-extent(0) // lx) > global_max[0]:  # too many blocks of that size: the biggest blocks there are, guarded
        lx = min(local_max[0], max_threads)
    if asked[1]:
        ly = max(1, min(asked[1], local_max[1], max_threads // lx))
    else:
        ly = _largest_divisor_at_most(extent(1), min(max(1, budget // lx), local_max[1])) if groups[1] else 1
    if asked[2]:
        lz = max(1, min(asked[2], local_max[2], max_threads // (lx * ly)))
    else:
        lz = _largest_divisor_at_most(extent(2), min(max(1, budget // (lx * ly)), local_max[2])) if groups[2] else 1
    local_size = (lx, ly, lz)
    extents = tuple(extent(d) if groups[d] else 1 for d in range(3))
    glob = tuple(-(-e // lc) for e, lc in zip(extents, local_size))
    for d in range(3):
        if glob[d] > global_max[d]:
            raise ValueError(f"kernel of shape {tuple(shape)} needs {glob[d]} blocks in grid dimension {d}, more than "
                             f"the limit of {global_max[d]}")
    axes = []
    for d, group in enumerate(groups):
        for j, axis in enumerate(group):
            div = prod(sizes[i] for i in group[j + 1:])
            axes.append(AxisIndex(axis, d, div, sizes[axis], needs_mod=j != 0))
    return GridPlan(glob, local_size, extents, tuple(sorted(axes, key=lambda a: a.axis)))


def symbolic_launch(*sizes) -> bool:
    """Whether any of these launch sizes (global, local; each None or a tuple) depends on a symbolic variable."""
    return any(isinstance(d, Node) for dims in sizes for d in (dims or ()))


def resolve_launch(dims, var_vals: dict) -> tuple[int, ...] | None:
    """A launch size with its symbolic dims evaluated for this call's variable values."""
    return None if dims is None else tuple(sym_infer(d, var_vals) for d in dims)
