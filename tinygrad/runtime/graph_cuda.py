"""CUDAGraph: a TinyJit capture on a CUDA device replayed as CUDA graphs (NativeGraph over `_cuda.Graph`).

One CUDA graph per MAX_NODES kernels: instantiation time grows faster than linearly with the node count, so long
captures are split, and the pieces run in order on the device's stream. A replay patches just the nodes whose
arguments or launch sizes changed: a few microseconds of host time per piece instead of one launch per kernel.
"""
from __future__ import annotations

from tinygrad.runtime.graph import NativeGraph

# kernels per CUDA graph
MAX_NODES = 200


class CUDAGraph(NativeGraph):
    """NativeGraph with captures split every MAX_NODES kernels (read when a graph is built)."""

    def __init__(self, jit_cache: list, input_replace: dict[tuple[int, int], int]):
        self.max_nodes = MAX_NODES
        super().__init__(jit_cache, input_replace)
