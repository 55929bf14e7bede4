"""Running a schedule: each ScheduleItem becomes a runner (a compiled kernel, a copy, an allocation), run in order.

Compiled programs live in a method cache keyed by (device, AST): an identical kernel is linearized, rendered and
compiled once per process, whichever path (eager or jitted) asks for it. Everything run is also offered to
`CacheCollector`, which TinyJit (engine/jit.py, a layer above this one) uses to capture a function's kernels.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import tinygrad.profile as _profile
from tinygrad.codegen.gpu_dims import resolve_launch, symbolic_launch
from tinygrad.codegen.kernel import opts_text
from tinygrad.codegen.program import ProgramSpec
from tinygrad.device import Buffer, Device
from tinygrad.diskcache import code_version, diskcache_get, diskcache_put
from tinygrad.engine import records
from tinygrad.engine.canon_vars import canonical
from tinygrad.engine.runlog import RUN_LOG
from tinygrad.engine.search import beam_search
from tinygrad.helpers import (
    BEAM,
    CACHELEVEL,
    DEBUG,
    NOOPT,
    VIZ,
    Context,
    GlobalCounters,
    colored,
    prod,
    raise_pending_interrupt,
)
from tinygrad.locks import ENGINE_LOCK
from tinygrad.ops import BufferOps, LoadOps, ast_key, print_ast
from tinygrad.shape.symbolic import sint, sym_infer


class Runner:
    """Something a schedule runs on buffers: `runner(bufs, var_vals)`. `graph_kind` tells a device's graph class
    (runtime/graph*.py, which sits below this layer and can't test the type) what a captured item is: "kernel",
    "copy" (bufs: destination, source), "empty" (nothing to replay); "" for anything else."""
    display_name = "runner"
    dname = ""
    graph_kind = ""

    def __call__(self, bufs: list[Buffer], var_vals: dict, wait: bool = False) -> float | None:
        raise NotImplementedError


class CompiledRunner(Runner):
    """A kernel compiled for a device from its ProgramSpec `spec` (codegen/program.py). `prg` is its source (as the
    seed walkthrough prints it); `lib` its binary. `name` is the kernel function's name in the source;
    `display_name` tells same-named kernels apart in output."""
    graph_kind = "kernel"

    def __init__(self, spec: ProgramSpec, dname: str, lib: bytes | None = None, outcount: int = 1,
                 display_name: str | None = None, display_src: str | None = None, quiet: bool = False):
        # display_src: the source as shown (DEBUG=4, `prg`) where it differs from the compiled one (a kernel shared
        # through canonical Variable names shows its own names); quiet: not shown at all (that shared kernel itself)
        self.spec, self.name, self.prg, self.dname = spec, spec.name, display_src or spec.src, dname
        self.display_name = display_name or spec.name
        self.global_size, self.local_size, self.vars = spec.global_size, spec.local_size, list(spec.vars)
        self.outcount = outcount
        # launch sizes that depend on symbolic variables are evaluated at every call
        self._symbolic_dims = symbolic_launch(self.global_size, self.local_size)
        # arithmetic operations per launch, roughly (set by the engine from the AST; 0 where unknown)
        self.op_estimate = 0
        # the optimisations the kernel was linearized with (DEBUG=2 shows them)
        self.opts = spec.applied_opts
        dev = Device[dname]
        if DEBUG >= 4 and not quiet:
            print(self.prg)
        self.lib = lib if lib is not None else dev.compiler.compile_cached(spec.src)
        # the program reads its launch facts (the renderer's launch, shared memory, tensor maps) from the spec
        self.clprg = dev.runtime(spec.name, self.lib, spec)
        # `fast_launch(*raw buffers)`: the program's direct call when it needs no variables and its sizes are fixed:
        # `direct` for host kernels and kernels that carry their launch; for a grid kernel of a C++ runtime, its
        # `native` Program's launch bound to the sizes (csrc/pybind_runtime.h: launch(global, local, wait, *args))
        self.fast_launch = None
        if not self.vars and not self._symbolic_dims:
            native = getattr(self.clprg, "native", None)
            if self.global_size is None:
                self.fast_launch = getattr(self.clprg, "direct", None)
            elif self.local_size is not None and native is not None:
                self.fast_launch = functools.partial(native.launch, tuple(self.global_size), tuple(self.local_size),
                                                     False)

    @property
    def src(self) -> str:
        return self.prg

    def __call__(self, bufs: list[Buffer], var_vals: dict, wait: bool = False) -> float | None:
        vals = [var_vals[v] for v in self.vars]
        gs, ls = self.global_size, self.local_size
        if self._symbolic_dims:
            gs, ls = resolve_launch(gs, var_vals), resolve_launch(ls, var_vals)
        st = time.perf_counter()
        # an asynchronous device returns the kernel's own time when asked to wait; host kernels return None
        et = self.clprg(*[b._buf for b in bufs], vals=vals, global_size=gs, local_size=ls, wait=wait or DEBUG >= 2)
        return et if et is not None else time.perf_counter() - st


class BufferCopy(Runner):
    """Copy a whole buffer from one device to another (through host memory when they differ)."""
    display_name = "copy"
    graph_kind = "copy"

    def __call__(self, bufs: list[Buffer], var_vals: dict, wait: bool = False) -> float | None:
        dest, src = bufs[0], bufs[1]
        if dest.nbytes != src.nbytes:
            raise RuntimeError(f"copy size mismatch: {src} -> {dest}")
        st = time.perf_counter()
        self._copy(dest, src)
        # NOTE: not _profile.span: a copy runs for every host array made a tensor, and a generator costs a microsecond
        prof = _profile.current
        if prof is not None:
            prof.host("copy", st, time.perf_counter(), {"bytes": dest.nbytes, "src": src.device, "dest": dest.device})
        self.dname = dest.device
        self.display_name = f"copy {dest.nbytes:8d}, {dest.device[:7]:>7s} <- {src.device[:7]:7s}"
        return time.perf_counter() - st

    @staticmethod
    def _copy(dest: Buffer, src: Buffer) -> None:
        dest.ensure_allocated()
        src.ensure_allocated()
        if dest.allocator.can_transfer(src.allocator):
            # device to device (or peer to peer), never through the host
            dest.allocator.transfer(dest._buf, src._buf, dest.nbytes, src_dev=Device[src.device],
                                    dest_dev=Device[dest.device])
        else:
            dest.copyin(src.as_buffer())


class EmptyOp(Runner):
    """An allocation only: the buffer's contents are undefined."""
    display_name = "empty"
    graph_kind = "empty"

    def __call__(self, bufs: list[Buffer], var_vals: dict, wait: bool = False) -> float | None:
        return None


class _CacheCollector:
    """Records every ExecItem run between `start()` and `finish()`: how TinyJit captures a function's kernels (and a
    way to look at the kernels a piece of code launches).

    Per thread: a capture records what its own thread runs, never the kernels other threads launch meanwhile."""

    def __init__(self) -> None:
        self._local = threading.local()
        # how many threads are capturing: while none is, the eager path needn't read the thread-local state
        self.active = 0

    @property
    def cache(self) -> list | None:
        return getattr(self._local, "cache", None)

    @property
    def var_vals(self) -> dict:
        return getattr(self._local, "var_vals", {})

    def start(self, var_vals: dict | None = None) -> None:
        with ENGINE_LOCK:
            if self.cache is None:
                self.active += 1
            self._local.cache, self._local.var_vals = [], dict(var_vals or {})

    def add(self, ei, var_vals: dict | None = None) -> None:
        cache = getattr(self._local, "cache", None) if self.active else None
        if cache is not None:
            cache.append(ei)
            if var_vals:
                self._local.var_vals.update(var_vals)

    def finish(self) -> list:
        ret = self.cache
        if ret is None:
            raise RuntimeError("CacheCollector.finish() without start()")
        with ENGINE_LOCK:
            self._local.cache = None
            self.active -= 1
        return ret


CacheCollector = _CacheCollector()


class ExecItem:
    """A runner bound to its buffers: what the JIT and CacheCollector record."""
    __slots__ = ("prg", "bufs")

    def __init__(self, prg: Runner, bufs: list[Buffer]):
        self.prg, self.bufs = prg, bufs

    def run(self, var_vals: dict | None = None, wait: bool = False) -> float | None:
        for b in self.bufs:
            b.ensure_allocated()
        prof = _profile.current
        # profiled: a kernel waits for its end, so the device's own time is known (an asynchronous device's events)
        st = time.perf_counter() if prof is not None else 0.0
        et = self.prg(self.bufs, var_vals or {}, wait=wait or prof is not None)
        GlobalCounters.kernel_count += isinstance(self.prg, CompiledRunner)
        if et is not None:
            GlobalCounters.time_sum_s += et
        ops = getattr(self.prg, "op_estimate", 0)
        if type(ops) is not int:
            # a symbolic kernel's count, at this launch's variable values
            ops = sym_infer(ops, var_vals) if var_vals else 0
        mem = sum(b.nbytes for b in self.bufs) if isinstance(self.prg, CompiledRunner) else 0
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem
        if prof is not None and isinstance(self.prg, CompiledRunner):
            gs, ls = self.prg.global_size, self.prg.local_size
            if self.prg._symbolic_dims:
                gs, ls = resolve_launch(gs, var_vals or {}), resolve_launch(ls, var_vals or {})
            prof.kernel(self.prg.dname, self.prg.display_name, st, et or 0.0,
                        _profile.kernel_args(self.prg.name, gs, ls, ops, mem, et or 0.0))
        if DEBUG >= 2:
            ms = f"{et * 1e3:9.3f} ms" if et is not None else " " * 12
            rate = f" ({ops / et * 1e-9:9.2f} GFLOPS {mem / et * 1e-9:8.2f} GB/s)" if et and mem else ""
            opts = getattr(self.prg, "opts", ())
            shown = f" {opts_text(opts)}" if opts else ""
            print(f"{colored(f'*** {self.prg.dname:7s} {GlobalCounters.kernel_count:4d}', 'magenta')} "
                  f"{self.prg.display_name:40s} tm {ms}{rate}{shown}")
        raise_pending_interrupt()
        return et


# (device, ast) -> CompiledRunner: shared by eager execution and the JIT
method_cache: dict[tuple[str, Any], CompiledRunner] = {}
_names: dict[str, int] = {}


def _render(dname: str, ast: tuple) -> ProgramSpec:
    """Linearize and render `ast` for device `dname` (the renderer's ProgramSpec, completed with the linearizer's
    launch sizes, variables and Opts), or find it in the disk cache (CACHELEVEL >= 2), keyed by the AST's full
    text, the device's code-generation options, its compiler and renderer (the host's C differs between compilers:
    native or software half) and the version of this code."""
    dev = Device[dname]
    if DEBUG >= 5:
        print(print_ast(ast))
    renderer = f"{getattr(dev.renderer, '__module__', '')}.{getattr(dev.renderer, '__qualname__', '')}"
    key = f"{dname}\n{dev.linearizer_opts!r}\n{dev.compiler.cachekey}\n{renderer}\nNOOPT={NOOPT.value}\n" \
        f"BEAM={BEAM.value}\n{code_version()}\n{ast_key(ast)}" if CACHELEVEL >= 2 else None
    # DEBUG=6 shows the uops, which only linearizing makes
    if key is not None and DEBUG < 6:
        hit = diskcache_get("program", key)
        if hit is not None:
            try:
                ret = records.loads(hit)
                if type(ret) is ProgramSpec:
                    return ret
            except records.RecordError:  # not a kernel of this build: render anew (and overwrite it)
                pass
    from tinygrad.codegen.attention import AttentionKernel, is_attention
    from tinygrad.codegen.linearizer import Linearizer
    with _profile.span("linearize", device=dname):
        # attention's merged kernel (engine/fuse_attention.py) has a lowering of its own
        lin = (AttentionKernel if is_attention(ast) else Linearizer)(ast, dev.linearizer_opts)
        if BEAM >= 1 and not NOOPT:
            # the Opts a search timed fastest on this device (engine/search.py), applied exactly
            opts = beam_search(dname, ast, BEAM.value)
            if opts is not None:
                for o in opts:
                    lin.apply_opt(o)
                with Context(NOOPT=1):
                    lin.linearize()
        lin.linearize()
    # the source names the kernel by its shape alone, so equal kernels are equal text (and share compiled binaries)
    with _profile.span("render", device=dname, kernel=lin.name):
        spec = dev.renderer(lin.name, lin.uops)
    ret = dataclasses.replace(spec, global_size=lin.global_size, local_size=lin.local_size, vars=tuple(lin.vars),
                              applied_opts=tuple(lin.applied_opts))
    if key is not None:
        try:
            diskcache_put("program", key, records.dumps(ret))
        except records.RecordError:  # a launch size the record format doesn't name: just not kept on disk
            pass
    return ret


def op_estimate(ast: tuple) -> sint:
    """About how many arithmetic operations a kernel does: its ALU and reduce nodes (and iotas, which compute their
    values) times the size of its index space (the largest tracker it reads or writes through). Symbolic for a
    kernel of symbolic shape (ExecItem.run evaluates it at each launch's values). For GlobalCounters.global_ops and
    DEBUG=2's GFLOPS."""
    sizes, n_ops = [], 0
    for root in ast:
        for node in root.toposort():
            if node.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE, BufferOps.IOTA):
                sizes.append(prod(node.arg.st.shape))
                n_ops += node.op is BufferOps.IOTA
            elif not isinstance(node.op, (BufferOps, LoadOps)):
                n_ops += 1
    if not n_ops or not sizes:
        return 0
    concrete = [n for n in sizes if type(n) is int]
    # the largest of symbolic sizes can't be picked by comparing them: take the first (they are all the kernel's
    # full index space or a reduce's output in practice)
    size = max(concrete) if len(concrete) == len(sizes) else next(n for n in sizes if type(n) is not int)
    return n_ops * size


def _runner(dname: str, spec: ProgramSpec, ast: tuple, lib: bytes | None = None, quiet: bool = False) -> CompiledRunner:
    # distinct kernels with the same shape get distinct display names, so profiles and DEBUG output tell them apart
    n = _names.get(spec.name, 0)
    _names[spec.name] = n + 1
    runner = CompiledRunner(spec, dname, lib=lib, display_name=spec.name if n == 0 else f"{spec.name}n{n}", quiet=quiet)
    runner.op_estimate = op_estimate(ast)
    return runner


def _renamed(base: CompiledRunner, back: dict) -> CompiledRunner | None:
    """The kernel `base` (compiled for an AST with canonical Variable names, engine/canon_vars.py) run with the
    Variables `back` maps them to: the same binary, its Variables and the launch sizes that depend on them put back.
    None where the spec holds what renaming can't reach (tensor maps)."""
    spec = base.spec
    if spec.tensor_maps:
        return None

    def sub(x):
        return x if isinstance(x, int) else x.substitute(back)
    sizes = {k: None if getattr(spec, k) is None else tuple(sub(d) for d in getattr(spec, k))
             for k in ("global_size", "local_size")}
    renamed = dataclasses.replace(spec, vars=tuple(back[v] for v in spec.vars), **sizes)
    # the name and source the output shows carry the AST's own Variables' names (the binary keeps the canonical ones)
    names = {c.expr: v.expr for c, v in back.items()}
    pattern = re.compile(r"_v\d+")
    shown = pattern.sub(lambda m: names.get(m.group(0), m.group(0)), base.display_name)
    src = pattern.sub(lambda m: names.get(m.group(0), m.group(0)), spec.src)
    runner = CompiledRunner(renamed, base.dname, lib=base.lib, display_name=shown, display_src=src)
    runner.op_estimate = sub(base.op_estimate)
    return runner


def get_runner(dname: str, ast: tuple) -> CompiledRunner:
    """The compiled kernel for `ast` on device `dname`, linearizing, rendering and compiling it on first use (once
    for ASTs that differ only in their Variables' names: engine/canon_vars.py)."""
    key = (dname, ast)
    hit = method_cache.get(key)
    if hit is not None:
        return hit
    canon, back = canonical(ast)
    if back:
        base = method_cache.get((dname, canon))
        if base is None:
            base = method_cache[(dname, canon)] = _runner(dname, _render(dname, canon), canon, quiet=True)
        runner = _renamed(base, back)
        if runner is not None:
            method_cache[key] = runner
            return runner
    runner = method_cache[key] = _runner(dname, _render(dname, ast), ast)
    return runner


def precompile(schedule: list) -> None:
    """Compile every kernel of `schedule` not yet in the method cache, several at once: the compilers run as
    separate processes (or release the GIL), so a cold start gets faster by the number of cores."""
    precompile_asts([(si.outputs[0].device, si.ast) for si in schedule])


def precompile_asts(kernels: list[tuple[str, tuple]]) -> None:
    """`precompile` for (device, ast) pairs."""
    todo: dict[tuple, bool] = {}
    for key in kernels:
        if key[1][0].op is not BufferOps.STORE or key in method_cache:
            continue
        # kernels that differ only in their Variables' names compile once, as their canonical AST (get_runner)
        canon, back = canonical(key[1])
        if (key[0], canon) not in method_cache:
            todo[(key[0], canon)] = bool(back)  # shared under canonical names: shown through its renamed runners
    if len(todo) < 2:
        return
    rendered = [(key, _render(*key)) for key in todo]
    # NOTE: the compilers are looked up here, not in the workers: this thread holds ENGINE_LOCK, which opening a
    # device in a worker would wait for
    compile_fns = [Device[key[0]].compiler.compile_cached for key, _ in rendered]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        libs = list(pool.map(lambda fr: fr[0](fr[1].src), zip(compile_fns, (r for _, r in rendered))))
    for (key, r), lib in zip(rendered, libs):
        method_cache[key] = _runner(key[0], r, key[1], lib, quiet=todo[key])


def lower_schedule_item(si) -> ExecItem:
    """The ScheduleItem `si` as an ExecItem: its runner (compiled now if new) bound to its buffers."""
    return ExecItem(lower_ast(si.outputs[0].device, si.ast), list(si.bufs))


def lower_schedule(schedule: list) -> Iterator[ExecItem]:
    """ExecItems of `schedule`, lowered one at a time as they are asked for; each is taken off the front of the
    list (as tinygrad 0.9 did), so what is left of it is what has not been lowered yet."""
    while schedule:
        yield lower_schedule_item(schedule.pop(0))


def lower_ast(device: str, ast: tuple) -> Runner:
    """The Runner for a kernel AST whose output lives on `device`."""
    op = ast[0].op
    if op is LoadOps.COPY:
        return BufferCopy()
    if op is LoadOps.EMPTY:
        return EmptyOp()
    if op is BufferOps.STORE:
        return get_runner(device, ast)
    if op is LoadOps.CUSTOM:
        # a node whose arg knows how to run itself (a collective over several devices: collectives_nccl.py)
        return ast[0].arg.runner()
    raise NotImplementedError(f"can't run a schedule item of {op}")


def run_schedule(schedule: list, var_vals: dict | None = None, consume: bool = False) -> None:
    """Run every ScheduleItem in order, then mark what they computed as realized and drop its graph. Holds
    ENGINE_LOCK throughout (it is public: a caller from several threads gets the same safety as realize).

    With `consume` the items are taken off `schedule` as they run (it is empty after), so a buffer is freed after
    its last use when nothing else holds it, as in tinygrad 0.9; while a TinyJit capture keeps every item run, such
    a buffer's memory goes back to its allocator instead (the JIT allocates what it replays on after the capture)."""
    with ENGINE_LOCK:
        _run_schedule(schedule, var_vals, consume)


def _last_use(schedule: list) -> dict[int, int]:
    """id(buffer) -> the index of the last item of `schedule` naming it."""
    return {id(b): j for j, si in enumerate(schedule) for b in si.bufs}


def _run_schedule(schedule: list, var_vals: dict | None, consume: bool = False) -> None:
    precompile(schedule)
    # NOTE: released early only where nothing but the capture holds a buffer once its last item ran; VIZ's run log
    # holds them too
    release = consume and CacheCollector.cache is not None and not VIZ.value
    last = _last_use(schedule) if release else {}
    held: dict[int, int] = {}  # id(buffer) -> references to it in the capture's items so far
    n = len(schedule)
    if consume:
        schedule.reverse()
    for j in range(n):
        si = schedule.pop() if consume else schedule[j]
        for b in si.outputs:
            b.ensure_allocated()
        ei = lower_schedule_item(si)
        et = ei.run(var_vals)
        CacheCollector.add(ei, var_vals)
        if VIZ.value:
            RUN_LOG.record(si.ast, ei.prg, ei.bufs, si.n_outputs, et)
        # a realized base no longer needs the graph that produced it
        for lb in si.lbs:
            lb.srcs, lb.pending = (), False
        if release:
            done = []
            for b in ei.bufs:
                held[id(b)] = held.get(id(b), 0) + 1
                if last[id(b)] == j:
                    done.append(b)
            si = ei = lb = b = None
            _release_unheld(done, held)


def _release_unheld(bufs: list[Buffer], held: dict[int, int]) -> None:
    """Give back the memory of each of `bufs` (past their last use) that only a capture's items still hold: no
    LazyBuffer, no later item, no caller. The Buffer stays (the capture names it), without memory until used."""
    while bufs:
        b = bufs.pop()
        # references: `b`, getrefcount's argument, and the capture items' buffer lists
        if b.is_allocated() and sys.getrefcount(b) - 2 == held[id(b)]:
            b.deallocate()
