"""NativeGraph: a TinyJit capture replayed through a C++ runtime's Graph, the same class for every such device.

Every C++ runtime binds the one graph surface of csrc/ (`add(program, args, global_size, local_size)`,
`set_arg(launch, arg, value)`, `set_arg_many(slots, value)`, `set_dims(launch, global_size, local_size)`,
`__call__()`); a device offers it to TinyJit by setting `graph=NativeGraph` (or a subclass with a different
`max_nodes`) in its `Compiled.__init__`, and providing `create_graph()` (by default its `native` device's). A replay
patches only what changes between calls (the input buffers, the symbolic variables and launch sizes that depend on
them) and runs each native graph once.

What a captured kernel must provide, duck-typed so this module stays below the engine: the JIT's ExecItem
(`prg`, `bufs`), its runner (`dname`, `vars`, `global_size`, `local_size`, `clprg`) and the device program
(`clprg.native`, the C++ Program; `clprg.default_dims`, the launch it was written for, or None).
"""
from __future__ import annotations

from typing import Any

from tinygrad.codegen.gpu_dims import resolve_launch, symbolic_launch
from tinygrad.device import Device
from tinygrad.helpers import GlobalCounters
from tinygrad.shape.symbolic import Variable, sym_infer


class NativeGraph:
    """Built from the JIT's captured ExecItems and its input replacement map {(item, buffer position): input
    index}; called with the replay's input Buffers and var_vals."""
    # launches per native graph (None: no limit); longer captures become several graphs run in order
    max_nodes: int | None = None

    @classmethod
    def supports(cls, jit_cache: list) -> bool:
        """Can this class replay the capture: every item a kernel with a native program, all of one device?"""
        if not jit_cache:
            return False
        for ei in jit_cache:
            if getattr(getattr(ei.prg, "clprg", None), "native", None) is None:
                return False
        return len({ei.prg.dname for ei in jit_cache}) == 1

    def __init__(self, jit_cache: list, input_replace: dict[tuple[int, int], int]):
        if not self.supports(jit_cache):
            raise ValueError(f"{type(self).__name__} replays kernels of a single device with a native runtime only")
        device = Device[jit_cache[0].prg.dname]
        self.graphs: list[Any] = []
        # where each input, variable and symbolic launch size goes: (graph, launch in it, ...)
        self.input_slots: list[tuple[Any, int, int, int]] = []
        # a variable's slots per graph, as set_arg_many's flat (launch, arg) list: {(graph index, variable): slots}
        self.var_slots: dict[tuple[int, Variable], list[int]] = {}
        # launches whose sizes depend on variables, grouped by their (global, local) sizes: each group is resolved
        # once a call, and its launches patched only when the sizes change (a decode step's dozens of attention
        # kernels share one or two such sizes, which change every few hundred positions)
        self.dim_groups: dict[Any, list] = {}
        self.kernels = len(jit_cache)
        # what a replay adds to GlobalCounters: operations (symbolic where a kernel's are, evaluated at each call's
        # values) and bytes of the buffers the kernels read and write (the same buffer sizes every replay)
        self.op_estimate: Any = sum(getattr(ei.prg, "op_estimate", 0) for ei in jit_cache)
        self.mem_estimate = sum(b.nbytes for ei in jit_cache for b in ei.bufs)
        for j, ei in enumerate(jit_cache):
            if not self.graphs or (self.max_nodes is not None and j % self.max_nodes == 0):
                self.graphs.append(device.create_graph())
            launch = self._add_kernel(len(self.graphs) - 1, ei)
            self.input_slots += [(self.graphs[-1], launch, i, k) for (jj, i), k in input_replace.items() if jj == j]

    def _add_kernel(self, g: int, ei) -> int:
        """Adds kernel item `ei` to graph `self.graphs[g]`, noting where its variables and symbolic sizes go;
        returns its launch index."""
        graph, runner, prg = self.graphs[g], ei.prg, ei.prg.clprg
        gs, ls = runner.global_size, runner.local_size
        if gs is None and ls is None:
            gs, ls = getattr(prg, "default_dims", None) or (None, None)
        args = [b.ensure_allocated()._buf for b in ei.bufs] + [0] * len(runner.vars)
        symbolic = symbolic_launch(gs, ls)
        if gs is None and ls is None or symbolic:
            launch = graph.add(prg.native, args)
        else:
            launch = graph.add(prg.native, args, gs, ls)
        for n, v in enumerate(runner.vars):
            self.var_slots.setdefault((g, v), []).extend((launch, len(ei.bufs) + n))
        if symbolic:
            key = (tuple(gs or ()), tuple(ls or ()))
            self.dim_groups.setdefault(key, [gs, ls, None, []])[3].append((graph, launch))
        return launch

    def __call__(self, bufs: list, var_vals: dict) -> None:
        for graph, launch, i, k in self.input_slots:
            graph.set_arg(launch, i, bufs[k]._buf)
        for (g, v), slots in self.var_slots.items():
            self.graphs[g].set_arg_many(slots, var_vals[v])
        for group in self.dim_groups.values():
            gs, ls, last, launches = group
            dims = (resolve_launch(gs, var_vals), resolve_launch(ls, var_vals))
            if dims != last:
                for graph, launch in launches:
                    graph.set_dims(launch, *dims)
                group[2] = dims
        for graph in self.graphs:
            graph()
        GlobalCounters.kernel_count += self.kernels
        ops = self.op_estimate
        GlobalCounters.global_ops += ops if type(ops) is int else sym_infer(ops, var_vals)
        GlobalCounters.global_mem += self.mem_estimate
