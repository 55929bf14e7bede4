"""CUDAGraph: a TinyJit capture on a CUDA device replayed as CUDA graphs (NativeGraph over `_cuda.Graph`);
CUDAMultiGraph: a capture over several CUDA GPUs, NCCL collectives included, replayed as one CUDA graph.

One CUDA graph per MAX_NODES kernels: instantiation time grows faster than linearly with the node count, so long
captures are split, and the pieces run in order on the device's stream. A replay patches just the nodes whose
arguments or launch sizes changed: a few microseconds of host time per piece instead of one launch per kernel.
"""
from __future__ import annotations

from tinygrad.device import Device
from tinygrad.helpers import getenv
from tinygrad.runtime import _cuda
from tinygrad.runtime.graph import NativeGraph

# kernels per CUDA graph
MAX_NODES = 200


class CUDAGraph(NativeGraph):
    """NativeGraph with captures split every MAX_NODES kernels (read when a graph is built). On GPUs of compute
    capability 9.0 and later the kernels are chained by programmatic dependent launch (CUDA_PDL): each kernel the
    renderer wrote (its first instruction griddepcontrol.wait) is launched while the one before it finishes, and
    waits for it in place, which hides most of a launch's latency between the small kernels of a decode step."""

    def __init__(self, jit_cache: list, input_replace: dict[tuple[int, int], int]):
        self.max_nodes = MAX_NODES
        super().__init__(jit_cache, input_replace)
        if getenv("CUDA_PDL") and Device[jit_cache[0].prg.dname].cc >= 90:
            for g in self.graphs:
                g.programmatic = True


class CUDAMultiGraph(NativeGraph):
    """A TinyJit capture over several CUDA GPUs (a data-parallel step: kernels on every GPU, NCCL collectives between
    them, copies from one to another) replayed as one CUDA graph, `_cuda.MultiGraph` (runtimes/cuda/
    cuda_multi_graph.h), launched once per replay on the first GPU's stream.

    Kernels are kernel nodes, patched like CUDAGraph's. NCCL collectives and copies are captured from streams
    into child graphs with their buffer addresses baked in; every replay checks those addresses against the buffers
    bound for that call (new inputs included) and captures a step again before launching when one moved, so a
    replay never runs with a stale address. Within a data-parallel step the collectives read and write buffers the
    JIT keeps, so they are captured once; only a collective fed directly by an input is captured again per call.

    Items it cannot hold (another device's kernels, copies from or to the host) leave the capture to TinyJit's
    item-by-item replay; so does CUDA_MULTIGRAPH=0. Not split into pieces like CUDAGraph: NCCL asks that a
    captured collective's ranks be launched together, which one graph over all GPUs guarantees."""

    @classmethod
    def supports(cls, jit_cache: list) -> bool:
        from tinygrad.runtime.nccl import NCCLRunner
        if not getenv("CUDA_MULTIGRAPH") or not jit_cache:
            return False
        for ei in jit_cache:
            kind = getattr(ei.prg, "graph_kind", "")
            devices = [b.device for b in ei.bufs]
            if kind == "kernel":
                if not isinstance(getattr(ei.prg.clprg, "native", None), _cuda.Program):
                    return False
            elif kind == "collective":
                if not isinstance(ei.prg, NCCLRunner):
                    return False
            elif kind not in ("copy", "empty"):
                return False
            if any(Device[d].multi_graph is not cls for d in devices):
                return False
        return True

    def __init__(self, jit_cache: list, input_replace: dict[tuple[int, int], int]):
        if not self.supports(jit_cache):
            raise ValueError(f"{type(self).__name__} replays kernels, NCCL collectives and copies of CUDA GPUs only")
        from tinygrad.runtime import nccl
        # the GPUs in the order the capture first touches them: the first launches the graph
        devices = list(dict.fromkeys(b.device for ei in jit_cache for b in ei.bufs))
        self.graphs = [_cuda.MultiGraph([Device[d].native for d in devices])]
        graph = self.graphs[0]
        self.input_slots, self.var_slots, self.dim_groups = [], {}, {}
        self.kernels = 0
        # what a replay adds to GlobalCounters, as NativeGraph counts it (kernels' operations, their buffers' bytes)
        kernels = [ei for ei in jit_cache if ei.prg.graph_kind == "kernel"]
        self.op_estimate = sum(getattr(ei.prg, "op_estimate", 0) for ei in kernels)
        self.mem_estimate = sum(b.nbytes for ei in kernels for b in ei.bufs)
        for j, ei in enumerate(jit_cache):
            kind = ei.prg.graph_kind
            if kind == "empty":
                continue  # an allocation only: nothing to replay
            if kind == "kernel":
                node = self._add_kernel(0, ei)
                self.kernels += 1
            elif kind == "copy":
                dest, src = (b.ensure_allocated() for b in ei.bufs[:2])
                if dest.nbytes != src.nbytes:
                    raise RuntimeError(f"copy size mismatch: {src} -> {dest}")
                node = graph.add_copy([dest._buf, src._buf], dest.nbytes)
            else:
                prg = ei.prg
                node = graph.add_collective(nccl.communicator(prg.devices), prg.kind,
                                            [b.ensure_allocated()._buf for b in ei.bufs], prg.count,
                                            nccl.nccl_dtype(prg.dtype), prg.op or "sum")
            self.input_slots += [(graph, node, i, k) for (jj, i), k in input_replace.items() if jj == j]
