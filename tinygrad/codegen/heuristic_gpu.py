"""Hand-written choices for GPU kernels: which kernels the linearizer maps to the grid, and their optimisations.

Two paths reach a GPU. The linearizer's own (`Linearizer.gpu`): output dims become the grid, a thread computes one
output (or, with optimisations, a tile of them). The CUDA renderer's plan (`renderer/
cuda_plan.py`) for kernels left as plain loops: it spreads one reduction over a block (few outputs, each reading
a long contiguous row) or over the whole grid (one output), combining with warp shuffles.

NOTE: only memory-bound reductions stay with the renderer: few outputs, many contiguous inputs each. There one
thread per output would leave the GPU nearly idle, and the renderer's split reduction measured at 96% of copy
bandwidth (H100). Everything else, elementwise kernels and reductions with many outputs or strided inputs (matmul,
convolution, column sums), is the linearizer's.
"""
from __future__ import annotations

import math

from tinygrad.ops import BufferOps

# reductions with at most this many outputs, each of at least RENDERER_MIN_INPUTS inputs read contiguously, stay
# with the renderer's split reductions (the same bounds as renderer/cuda_plan.py's block and grid modes)
RENDERER_MAX_OUTPUTS = 16384
RENDERER_MIN_INPUTS = 256
# below this many outputs the renderer splits even a strided reduction: too few threads for the grid otherwise
GRID_MIN_OUTPUTS = 1024


def _bound(s) -> int:
    return s if isinstance(s, int) else int(s.max)


def _reduce_reads_contiguously(lin) -> bool:
    """Does every load under the reduce read consecutive elements along the innermost reduced dim (or the same
    element, a broadcast)?"""
    inner = max(lin.reduce_axes)
    for op in lin.reduceop.toposort():
        if op.op is BufferOps.LOAD:
            stride = op.arg.st.real_strides()[inner]
            if not (isinstance(stride, int) and stride in (0, 1)):
                return False
    return True


def uses_grid(lin) -> bool:
    """Does the linearizer map this kernel's output dims to the GPU grid itself (else the renderer plans it)?"""
    if lin.reduceop is None or not lin.reduce_axes:
        return True
    full = lin.full_shape
    outputs = math.prod(_bound(full[d]) for d in range(len(full)) if d not in lin.reduce_axes)
    inputs = math.prod(_bound(full[d]) for d in lin.reduce_axes)
    if outputs <= RENDERER_MAX_OUTPUTS and inputs >= RENDERER_MIN_INPUTS:
        return not (outputs < GRID_MIN_OUTPUTS or _reduce_reads_contiguously(lin))
    return True


def gpu_opts(lin) -> list:
    """The optimisations for a kernel on the grid (before linearize): none yet."""
    return []
