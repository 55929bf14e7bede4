"""BEAM search: a kernel's optimisations chosen by timing candidates on the device itself (`BEAM=n`).

The search starts from the default kernel (the hand-coded heuristic's choice, or the plain kernel where it chose
nothing) and grows each of the `n` fastest kernels by one more Opt (UPCAST, UNROLL, VECTORIZE, LOCAL, GROUP or
THREAD of any dim by a few amounts, or TC or SMEM with any block tile where the device has them) per step, the plain
kernel's one-Opt variants included. Every candidate is compiled (several at once: compilers are separate processes
or release the GIL), run on buffers of random inputs, and checked against the default kernel's output; one that
disagrees, fails to compile or takes ten times the best so far is dropped. The search ends when a step finds nothing
faster, after MAX_STEPS steps, or after SEARCH_SECONDS. The default kernel is in the beam from the start, so BEAM
never picks a slower kernel than the default, only one measured to be faster.

The winner is kept in the disk cache, keyed by the kernel's AST, the device's compiler (its `cachekey`: compiler,
options and target, which names the GPU's architecture), its code-generation options and n, so a machine pays for
each kernel's search once. Kernels with symbolic sizes are not searched (their best choice depends on the values).
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tinygrad.codegen.kernel import Opt, OptOps
from tinygrad.codegen.program import ProgramSpec
from tinygrad.device import Buffer, CompileError, Device
from tinygrad.diskcache import code_version, diskcache_get, diskcache_put
from tinygrad.engine import records
from tinygrad.helpers import DEBUG, Context, raise_pending_interrupt
from tinygrad.ops import BufferOps, ast_key

# what one step may add: each op on each dim of the full shape by each of these amounts
ACTION_AMOUNTS = {
    OptOps.UPCAST: (2, 3, 4, 8),
    OptOps.UNROLL: (2, 4, 8, 16),
    OptOps.VECTORIZE: (2, 4, 8),
    OptOps.LOCAL: (2, 4, 8, 16, 32, 64, 128, 256),
    OptOps.GROUP: (4, 8, 16, 32),
    OptOps.GROUPTOP: (4, 8, 16, 32),
    OptOps.PADTO: (8, 16, 32),
    OptOps.THREAD: (2, 4, 8),
}
MAX_STEPS = 6
SEARCH_SECONDS = 60.0
TIMING_RUNS = 3
# a candidate this many times slower than the best so far is not run again
SLOW_FACTOR = 10.0


def beam_search(dname: str, ast: tuple, width: int) -> tuple[Opt, ...] | None:
    """The fastest Opts found for `ast` on device `dname` by a beam of `width` (see the module docstring), from the
    disk cache when this machine searched this kernel before; None where the kernel can't be searched."""
    from tinygrad.codegen.linearizer import Linearizer
    dev = Device[dname]
    lopts = dev.linearizer_opts
    if lopts is None or not lopts.supports_upcast or any(_symbolic(root) for root in ast):
        return None
    from tinygrad.codegen.attention import is_attention
    if is_attention(ast):
        return None  # (lowered by codegen/attention.py, which takes no Opts)
    key = f"{dname}\n{dev.compiler.cachekey}\n{lopts!r}\nBEAM={width}\n{code_version()}\n{ast_key(ast)}"
    hit = diskcache_get("beam", key)
    if hit is not None:
        try:
            opts = records.loads(hit)
            if type(opts) is list and all(type(o) is Opt for o in opts):
                return tuple(opts)
        except records.RecordError:  # not a search result of this build: search again (and overwrite it)
            pass
    deadline = time.perf_counter() + SEARCH_SECONDS
    bufs = _buffers(dname, ast)
    outs = sorted({root.arg.idx for root in ast})

    def make(opts: tuple[Opt, ...], heuristic: bool = False) -> Any:
        lin = Linearizer(ast, lopts)
        try:
            for o in opts:
                lin.apply_opt(o)
            if heuristic:
                lin.linearize()
            else:
                with Context(NOOPT=1):
                    lin.linearize()
        except ValueError:
            return None
        return lin

    plain = make(())
    # NOTE: the default kernel (the heuristic's, else the plain one) is the reference for every candidate's output
    # and the first entry of the beam; the plain kernel is only timed where the heuristic chose nothing, since
    # without tiles a large GPU matmul takes seconds
    heur = make((), heuristic=True)
    start = heur if heur is not None and heur.applied_opts else plain
    ref_time, ref = _run(dev, start, bufs, outs, _compile(dev, start))
    best: list[tuple[float, tuple[Opt, ...]]] = [(ref_time, tuple(start.applied_opts))]
    seen = {opts for _, opts in best} | {()}
    for step in range(MAX_STEPS):
        cands = []
        bases = [opts for _, opts in best[:width]] + ([()] if step == 0 and best[0][1] else [])
        for opts in bases:
            for action in _actions(plain):
                new = opts + (action,)
                if new in seen:
                    continue
                seen.add(new)
                lin = make(new)
                if lin is not None:
                    cands.append((new, lin))
        # equal kernels (source and launch facts) are one candidate (different Opt orders often make the same one)
        by_spec: dict[ProgramSpec, tuple] = {}
        for opts, lin in cands:
            by_spec.setdefault(dev.renderer(lin.name, lin.uops), (opts, lin))
        specs = list(by_spec)
        with ThreadPoolExecutor(max_workers=4) as pool:
            libs = list(pool.map(lambda spec: _try_compile(dev, spec.src), specs))
        timed = []
        for spec, lib in zip(specs, libs):
            if lib is None or time.perf_counter() > deadline:
                continue
            opts, lin = by_spec[spec]
            t = _timed(dev, lin, bufs, outs, ref, best[0][0] * SLOW_FACTOR, (spec, lib))
            if t is not None:
                timed.append((t, opts))
            raise_pending_interrupt()
        improved = bool(timed) and min(timed, key=lambda x: x[0])[0] < best[0][0]
        best = sorted(best + timed, key=lambda x: x[0])[:max(width, 2)]
        if DEBUG >= 2:
            print(f"BEAM {dname} step {step}: {len(specs)} candidates, best {best[0][0] * 1e6:9.2f} us "
                  f"with {list(best[0][1])}")
        if not improved or time.perf_counter() > deadline:
            break
    winner = best[0][1]
    diskcache_put("beam", key, records.dumps(list(winner)))
    return winner


def _symbolic(root) -> bool:
    for node in root.toposort():
        if node.op in (BufferOps.LOAD, BufferOps.STORE, BufferOps.CONST) and node.arg.st.vars():
            return True
    return False


def _actions(lin) -> list[Opt]:
    acts = [Opt(op, axis, amt) for axis in range(len(lin.full_shape)) for op, amts in ACTION_AMOUNTS.items()
            for amt in amts]
    # every block tile on tensor cores or staged in shared memory (a kernel's only Opt: on the plain kernel alone)
    from tinygrad.codegen.tensor_cores import SIMT_CONFIGS, TC_CONFIGS
    if lin.opts.tensor_cores:
        acts += [Opt(OptOps.TC, 0, i) for i in range(len(TC_CONFIGS))]
    if lin.opts.has_shared and lin.opts.has_local:
        acts += [Opt(OptOps.SMEM, 0, i) for i in range(len(SIMT_CONFIGS))]
    if lin.opts.has_local:
        acts.append(Opt(OptOps.NOLOCALS, 0, 0))
    return acts


def _buffers(dname: str, ast: tuple) -> dict[int, Buffer]:
    """A buffer of its own for each buffer index the kernel uses, inputs filled with random values (the same each
    time), sized by the largest index any tracker reaches."""
    sizes: dict[int, tuple[int, Any]] = {}
    for root in ast:
        for node in root.toposort():
            if node.op in (BufferOps.LOAD, BufferOps.STORE):
                n = max(node.arg.st.real_size(), 1)
                old = sizes.get(node.arg.idx, (0, node.arg.dtype))
                sizes[node.arg.idx] = (max(old[0], n), node.arg.dtype)
    rng = np.random.default_rng(0)
    out = {}
    for idx, (n, dt) in sorted(sizes.items()):
        buf = Buffer(dname, n, dt).allocate()
        npdt = dt.np if dt.np is not None else np.float32
        if np.issubdtype(npdt, np.floating):
            vals = rng.uniform(-1, 1, n).astype(npdt)
        elif npdt == np.bool_:
            vals = rng.integers(0, 2, n).astype(np.bool_)
        else:
            vals = rng.integers(0, 8, n).astype(npdt)
        if dt.np is not None:
            buf.copyin(memoryview(vals).cast("B"))
        out[idx] = buf
    return out


def _compile(dev, lin) -> tuple[ProgramSpec, bytes]:
    """The kernel's ProgramSpec (its launch facts) and binary."""
    spec = dev.renderer(lin.name, lin.uops)
    return spec, dev.compiler.compile(spec.src)


def _try_compile(dev, src: str) -> bytes | None:
    try:
        return dev.compiler.compile(src)
    except CompileError:
        return None


def _run(dev, lin, bufs: dict[int, Buffer], outs: list[int], compiled: tuple[ProgramSpec, bytes],
         limit: float = math.inf) -> tuple[float, list[np.ndarray]]:
    """The kernel's best time of TIMING_RUNS launches (one, when it is slower than `limit`), and its outputs;
    `compiled` is its ProgramSpec and binary."""
    spec, lib = compiled
    prg = dev.runtime(lin.name, lib, spec)
    for i in outs:
        # NOTE: the outputs start as all-ones bytes (NaN for floats), so a kernel that leaves an element unwritten
        # can't pass for right with the value an earlier candidate left there
        bufs[i].copyin(memoryview(bytearray(b"\xff" * bufs[i].nbytes)))
    args = [bufs[i]._buf for i in sorted(bufs)]
    gs = tuple(lin.global_size) if lin.global_size is not None else None
    ls = tuple(lin.local_size) if lin.local_size is not None else None
    times: list[float] = []
    for _ in range(TIMING_RUNS):
        st = time.perf_counter()
        et = prg(*args, global_size=gs, local_size=ls, vals=(), wait=True)
        times.append(et if et is not None else time.perf_counter() - st)
        if times[0] > limit:
            break  # too slow to be the winner: one run says so
    if hasattr(dev, "synchronize"):
        dev.synchronize()
    return min(times), [_host(bufs[i]) for i in outs]


def _host(buf: Buffer) -> np.ndarray:
    raw = np.frombuffer(bytes(buf.as_buffer()), dtype=np.uint8)
    return raw.view(buf.dtype.np) if buf.dtype.np is not None else raw


def _timed(dev, lin, bufs, outs, ref: list[np.ndarray], limit: float,
           compiled: tuple[ProgramSpec, bytes] | None = None) -> float | None:
    """The candidate's time, or None where it fails, is slower than `limit` or disagrees with the plain kernel."""
    try:
        t, got = _run(dev, lin, bufs, outs, compiled if compiled is not None else _compile(dev, lin), limit)
    except (CompileError, RuntimeError, ValueError):
        return None
    if t > limit:
        return None
    for g, r in zip(got, ref):
        if g.dtype.kind == "f":
            if not np.allclose(g.astype(np.float64), r.astype(np.float64), rtol=1e-3, atol=1e-3, equal_nan=True) or \
                    np.isnan(g).sum() != np.isnan(r).sum():
                return None
        elif not np.array_equal(g, r):
            return None
    return t if math.isfinite(t) else None
