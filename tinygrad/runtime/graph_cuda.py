"""CUDAGraph: a TinyJit capture on a CUDA device replayed as CUDA graphs.

Built once from the captured kernels: one `_cuda.Graph` per MAX_NODES kernels (instantiation time grows faster than
linearly with the node count, so long captures are split; the pieces run in order on the device's stream). A replay
sets the new input buffers and variable values, which the C++ graph turns into updates of just the nodes that
changed, and launches each piece: a few microseconds of host time per piece instead of one launch per kernel.
"""
from __future__ import annotations

from tinygrad.helpers import GlobalCounters
from tinygrad.shape.symbolic import Node, Variable, sym_infer

# kernels per CUDA graph
MAX_NODES = 200


def _dims(dims, var_vals: dict) -> tuple[int, ...] | None:
    return None if dims is None else tuple(sym_infer(d, var_vals) if isinstance(d, Node) else int(d) for d in dims)


class CUDAGraph:
    """Same interface as tinygrad.engine.jit.HostGraph: built from the JIT's captured ExecItems and its input
    replacement map {(item, buffer position): input index}; called with the replay's input Buffers and var_vals."""

    @staticmethod
    def supports(jit_cache: list) -> bool:
        """Can a CUDAGraph replay this capture: every item a kernel of one CUDA device?"""
        from tinygrad.engine.realize import CompiledRunner
        from tinygrad.runtime.ops_cuda import CUDAProgram
        if not jit_cache or not all(isinstance(ei.prg, CompiledRunner) and isinstance(ei.prg.clprg, CUDAProgram)
                                    for ei in jit_cache):
            return False
        return len({ei.prg.clprg.device.dname for ei in jit_cache}) == 1

    def __init__(self, jit_cache: list, input_replace: dict[tuple[int, int], int]):
        from tinygrad.runtime import _cuda
        if not self.supports(jit_cache):
            raise ValueError("CUDAGraph replays kernels of a single CUDA device only")
        device = jit_cache[0].prg.clprg.device
        self.graphs: list = []
        # where each input, variable and symbolic launch size goes: (graph, launch in it, ...)
        self.input_slots: list[tuple[int, int, int, int]] = []
        self.var_slots: list[tuple[int, int, int, Variable]] = []
        self.dim_slots: list[tuple[int, int, object, object]] = []
        self.kernels = len(jit_cache)
        for j, ei in enumerate(jit_cache):
            if j % MAX_NODES == 0:
                self.graphs.append(_cuda.Graph(device._dev))
            g, runner, prg = len(self.graphs) - 1, ei.prg, ei.prg.clprg
            gs, ls = runner.global_size, runner.local_size
            if gs is None and ls is None and prg.default_dims is not None:
                gs, ls = prg.default_dims
            symbolic = any(isinstance(d, Node) and not isinstance(d, int) for d in (*(gs or ()), *(ls or ())))
            args = [b.ensure_allocated()._buf for b in ei.bufs] + [0] * len(runner.vars)
            launch = self.graphs[g].add(prg._prg, args, None if symbolic else gs, None if symbolic else ls)
            self.var_slots += [(g, launch, len(ei.bufs) + n, v) for n, v in enumerate(runner.vars)]
            if symbolic:
                self.dim_slots.append((g, launch, gs, ls))
            self.input_slots += [(g, launch, i, k) for (jj, i), k in input_replace.items() if jj == j]

    def __call__(self, bufs: list, var_vals: dict) -> None:
        for g, launch, i, k in self.input_slots:
            self.graphs[g].set_arg(launch, i, bufs[k]._buf)
        for g, launch, i, v in self.var_slots:
            self.graphs[g].set_arg(launch, i, var_vals[v])
        for g, launch, gs, ls in self.dim_slots:
            self.graphs[g].set_dims(launch, _dims(gs, var_vals), _dims(ls, var_vals))
        for graph in self.graphs:
            graph()
        GlobalCounters.kernel_count += self.kernels
