"""A rendered kernel as data: what the renderer made of the uops and what a runtime needs to launch it.

The renderer returns a ProgramSpec (its source, entry name and launch facts); the engine adds what the linearizer
knew (global/local sizes, variables, the Opts applied), keeps it in the disk cache (engine/records.py) and hands it
to the device's compiler (the source) and program class (the facts). Nothing a runtime needs travels in the source
text: it is for the compiler only.

    >>> spec = ProgramSpec("E_4", "void E_4(float* a) {}", launch=((1, 1, 1), (256, 1, 1)))
    >>> spec.launch, spec.persistent, spec.dynamic_shared, spec.tensor_maps
    (((1, 1, 1), (256, 1, 1)), False, 0, ())
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Dims = tuple[int, int, int]


@dataclass(frozen=True)
class TensorMapSpec:
    """One TMA tensor map (CUtensorMap) a kernel takes as a trailing `const __grid_constant__ tg_tmap` parameter:
    the global tensor its `cp.async.bulk.tensor` copies read tiles of. The caller passes only the ordinary arguments
    (buffers, then ints); the runtime encodes the map from buffer argument `arg` at each launch (CUDA:
    cuTensorMapEncodeTiled) and fills the parameter. A ProgramSpec lists its kernel's maps in parameter order.

    arg: index of the buffer among the launch's ordinary arguments; offset: bytes from its start (the view's start);
    elem: element size in bytes (1, 2, 4 or 8: TMA moves bits); dims: sizes in elements, innermost first (rank 1 to
    5); strides: byte strides of dims 1.. (rank - 1 of them; multiples of 16); box: the tile copied, in elements
    (each 1 to 256); swizzle: the shared-memory swizzle in bytes (0, 32, 64 or 128).

    >>> TensorMapSpec(0, 0, 2, [64, 32], [128], (64, 16), 128).dims
    (64, 32)
    """
    arg: int
    offset: int
    elem: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int

    def __post_init__(self):
        for name in ("dims", "strides", "box"):  # any sequence of ints is taken; kept as a tuple (hashable)
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        rank = len(self.dims)
        problem = ("the rank must be 1 to 5" if not 1 <= rank <= 5 else
                   f"rank {rank} needs {rank - 1} stride(s)" if len(self.strides) != rank - 1 else
                   f"rank {rank} needs {rank} box size(s)" if len(self.box) != rank else
                   "box sizes must be 1 to 256" if not all(1 <= b <= 256 for b in self.box) else
                   "sizes must be at least 1" if min(self.dims) < 1 else
                   "the element size must be 1, 2, 4 or 8 bytes" if self.elem not in (1, 2, 4, 8) else
                   "the swizzle must be 0, 32, 64 or 128 bytes" if self.swizzle not in (0, 32, 64, 128) else
                   "arg and offset must be at least 0" if min(self.arg, self.offset) < 0 else None)
        if problem is not None:
            raise ValueError(f"tensor map {self}: {problem}")


@dataclass(frozen=True)
class ProgramSpec:
    """One kernel, rendered: its source and everything about launching it that is not in the binary.

    name: the kernel function's name in `src` (the entry the runtime loads). src: the source, for the compiler.
    global_size, local_size: the launch the linearizer mapped the kernel to (blocks in the grid and threads in a
    block, x/y/z; ints or symbolic sizes), None where the renderer or the device decides (host kernels, the GPU
    renderer's own loop plans). vars: the kernel's symbolic Variables, passed after the buffers in this order.
    applied_opts: the Opts the kernel was linearized with (for DEBUG output).
    launch: the (grid, block) the renderer wrote a loop kernel for, which any grid (and any block of whole warps)
    also runs correctly; None for kernels the linearizer mapped to the grid. persistent: its blocks loop over the
    work with a grid stride, so the runtime may lower the grid to what the GPU holds at once (a second, partial wave
    of such blocks doubles the time of a wave). dynamic_shared: bytes of dynamic shared memory every launch must
    give the kernel (0: none; its shared arrays are declared statically). tensor_maps: the TMA tensor maps it
    takes, in parameter order. waits_for_grid: its first instruction waits for the grid launched before it
    (griddepcontrol.wait), so a graph may launch it while that one finishes.
    """
    name: str
    src: str
    global_size: Any = None
    local_size: Any = None
    vars: tuple = ()
    applied_opts: tuple = ()
    launch: tuple[Dims, Dims] | None = None
    persistent: bool = False
    dynamic_shared: int = 0
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    waits_for_grid: bool = False

    def __post_init__(self):
        # kept as tuples, whatever sequence was given: the record is hashable and compares by value
        for name in ("global_size", "local_size"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "vars", tuple(self.vars))
        object.__setattr__(self, "applied_opts", tuple(self.applied_opts))
        object.__setattr__(self, "tensor_maps", tuple(self.tensor_maps))
        if self.launch is not None:
            grid, block = self.launch
            object.__setattr__(self, "launch", (tuple(int(g) for g in grid), tuple(int(b) for b in block)))
            if len(self.launch[0]) != 3 or len(self.launch[1]) != 3 or min(*self.launch[0], *self.launch[1]) < 1:
                raise ValueError(f"kernel {self.name}: a launch is a grid and a block of 3 sizes >= 1, not "
                                 f"{self.launch}")
        if self.dynamic_shared < 0:
            raise ValueError(f"kernel {self.name}: dynamic shared memory must be at least 0 bytes")

    def __str__(self) -> str:
        return self.src
