"""TinyJit: capture the kernels a function launches and replay them without scheduling or compiling again.

The first call runs the function normally (compiling what it needs), the second captures every kernel it launches,
and later calls replay the captured kernels with the new input buffers and symbolic-variable values. A device that
offers a graph class (`Device[d].graph`: one C++ call for the whole replay on the host, CUDA graphs on NVIDIA GPUs)
replays a capture of its own kernels through it; a capture over several devices (kernels on each, collectives,
copies) is replayed through their multi-device graph class where they all offer the same one (`multi_graph`: one
CUDA graph over several GPUs with the NCCL calls inside); anything else is replayed item by item.

A replay is only right if the call looks like the captured one, so each call is checked: Tensor arguments must keep
their shape, dtype, device and layout (symbolic dims may take any value in their bounds), other arguments must
compare equal (or be the same object), and the function must have launched kernels at all. A mismatch raises
JitError naming the argument; `jit.reset()` forgets the capture.

A capture keeps every buffer its kernels use, the intermediates too; those of the same size whose uses don't overlap
(a layer's, then the next layer's) share one buffer (see _share_buffers), and the rest go back to the device.

Threads: each thread that calls a TinyJit has a capture of its own (its first call runs, its second captures), since
a replay overwrites the capture's buffers, the returned tensors' too; replays hold the engine lock, as the devices'
queues are shared. docs/threads.md says more.
"""
from __future__ import annotations

import functools
import sys
import threading
from collections import defaultdict
from typing import Any, Callable

import tinygrad.profile as _profile
from tinygrad.device import Device
from tinygrad.engine.realize import CacheCollector, CompiledRunner
from tinygrad.helpers import DEBUG, JIT, raise_pending_interrupt
from tinygrad.lazy import LazyBuffer
from tinygrad.locks import ENGINE_LOCK
from tinygrad.shape.symbolic import Variable
from tinygrad.tensor import Tensor

__all__ = ["TinyJit", "JitError", "CacheCollector"]


class JitError(RuntimeError, AssertionError):
    """A jitted function was called in a way its captured kernels can't serve. Also an AssertionError, which is what
    tinygrad 0.9 raised for these misuses, so code written against it keeps catching it."""


_PLAIN = (int, float, str, bool, bytes, type(None))


def _flatten_args(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(name, value) for every argument, looking into lists, tuples and dicts; names say where the value was."""
    out: list[tuple[str, Any]] = []
    # keyword arguments by name, not in the order of the call: f(a=x, b=y) and f(b=y, a=x) are the same call
    todo = [(f"args[{i}]", a) for i, a in enumerate(args)] + \
        [(f"kwargs[{k!r}]", kwargs[k]) for k in sorted(kwargs)]
    todo.reverse()
    while todo:
        name, v = todo.pop()
        if isinstance(v, (list, tuple)):
            todo.extend(reversed([(f"{name}[{i}]", x) for i, x in enumerate(v)]))
        elif isinstance(v, dict):
            todo.extend(reversed([(f"{name}[{k!r}]", x) for k, x in v.items()]))
        else:
            out.append((name, v))
    return out


def _tensors_in(ret: Any) -> list:
    return [v for _, v in _flatten_args((ret,), {}) if isinstance(v, Tensor)]


class _Capture:
    """One thread's state of a TinyJit: calls so far (0: none, 1: ran once, 2: captured), the captured items, where
    the inputs go in them, the returned value, the captured call's signature and the device graph replaying it."""
    __slots__ = ("cnt", "jit_cache", "input_replace", "ret", "expected", "graph")

    def __init__(self) -> None:
        self.cnt = 0
        self.jit_cache: list = []
        self.input_replace: dict[tuple[int, int], int] = {}
        self.ret: Any = None
        self.expected: list[tuple[str, Any]] | None = None
        self.graph: Any = None


def _per_thread(name: str) -> property:
    # the attribute of the calling thread's _Capture (jit.cnt, jit.jit_cache, ... read as before, per thread)
    return property(lambda self: getattr(self._capture(), name), lambda self, v: setattr(self._capture(), name, v),
                    doc=f"This thread's `{name}` (see _Capture).")


class TinyJit:
    """`@TinyJit` on a function of Tensors (and bound Variables). See the module docstring.

    Each thread has a capture of its own (threading.local): a replay writes the capture's buffers, the returned
    tensors' too, so two threads sharing one capture would overwrite each other's results before they read them. A
    thread's first two calls run the function (the second one captured); the kernels are compiled once for all."""
    cnt = _per_thread("cnt")
    jit_cache = _per_thread("jit_cache")
    input_replace = _per_thread("input_replace")
    ret = _per_thread("ret")
    expected = _per_thread("expected")
    graph = _per_thread("graph")

    def __init__(self, fxn: Callable):
        self.fxn = fxn
        functools.update_wrapper(self, fxn)
        self.reset()

    def reset(self) -> None:
        """Forget the capture, every thread's: the next call runs normally and the one after captures again."""
        self._threads = threading.local()

    def _capture(self) -> _Capture:
        cap = getattr(self._threads, "capture", None)
        if cap is None:
            cap = self._threads.capture = _Capture()
        return cap

    def __get__(self, obj, objtype=None):
        # jitted methods: bind the instance like a plain function would
        return self if obj is None else functools.partial(self.__call__, obj)

    def _inputs(self, args: tuple, kwargs: dict) -> tuple[list, dict, list[tuple[str, Any]]]:
        """The inputs' LazyBuffers (realized; one per device of a tensor on several), the variable values of this
        call, and the call's signature."""
        tensors, var_vals, signature = [], {}, []
        flat = _flatten_args(args, kwargs)
        for name, v in flat:
            if isinstance(v, Tensor):
                tensors.append((name, v))
            elif isinstance(v, Variable):
                if v._val is None:
                    raise JitError(f"TinyJit: {name} is an unbound Variable {v!r}: bind it to a value")
                unbound, val = v.unbind()
                var_vals[unbound] = val
                signature.append((name, ("var", unbound)))
            else:
                signature.append((name, ("value", v) if isinstance(v, _PLAIN) else ("object", id(v))))
        # inputs become realized buffers; a view is kept as a view (its layout is part of the signature)
        Tensor.corealize([t for _, t in tensors])
        # NOTE: a constant (Tensor(2.0), Tensor.full) has no buffer: the kernels would bake its value in and every
        # replay would reuse the captured call's. It is given a buffer of its own, holding the same values.
        unbacked = [t for _, t in tensors if any(lb.base.realized is None for lb in t.lazydata.lbs)]
        if unbacked:
            for t in unbacked:
                t.lazydata = t.lazydata.contiguous()
            Tensor.corealize(unbacked)
        # which earlier argument shares each one's buffer: a capture of f(a, a) can't serve f(a, b), nor the reverse.
        # A tensor on several devices is one input per device, each with its own layout.
        first_user: dict[int, int] = {}
        inputs = []
        for name, t in tensors:
            lbs = t.lazydata.lbs
            for lb in lbs:
                k = len(inputs)
                inputs.append(lb)
                st, vv = lb.st.unbind() if lb.st.var_vals else (lb.st, {})
                var_vals.update(vv)
                alias = first_user.setdefault(id(lb.base.realized), k)
                where = name if len(lbs) == 1 else f"{name} on {lb.device}"
                signature.append((where, ("tensor", lb.device, t.dtype, st, alias if alias != k else None)))
        return inputs, var_vals, signature

    @staticmethod
    def _check(cap: _Capture, signature: list[tuple[str, Any]]) -> None:
        exp = dict(cap.expected or [])
        got = dict(signature)
        for name in list(exp) + [n for n in got if n not in exp]:
            if exp.get(name) != got.get(name):
                raise JitError(f"TinyJit: {name} differs from the captured call: captured {_describe(exp.get(name))}, "
                               f"got {_describe(got.get(name))}; call .reset() to capture again")

    def __call__(self, *args, **kwargs):
        if not JIT:
            return self.fxn(*args, **kwargs)
        cap = self._capture()
        inputs, var_vals, signature = self._inputs(args, kwargs)
        if cap.cnt == 0:
            cap.cnt = 1
            cap.ret = self.fxn(*args, **kwargs)
            _realize(cap.ret)
            return cap.ret
        if cap.cnt == 1:
            self._capture_call(cap, inputs, var_vals, signature, args, kwargs)
            return cap.ret
        self._check(cap, signature)
        bufs = [lb.base.realized for lb in inputs]
        # the capture's buffers are this thread's; the devices' queues and graphs are everyone's
        with ENGINE_LOCK:
            # profiled: item by item, so each kernel is timed on its own
            if cap.graph is not None and _profile.current is None:
                cap.graph(bufs, var_vals)
            else:
                for (j, i), k in cap.input_replace.items():
                    cap.jit_cache[j].bufs[i] = bufs[k]
                for ei in cap.jit_cache:
                    ei.run(var_vals)
        if DEBUG >= 2:
            print(f"TinyJit replayed {len(cap.jit_cache)} items")
        if var_vals:
            _rebind(cap.ret, var_vals)
        raise_pending_interrupt()
        return cap.ret

    def _capture_call(self, cap: _Capture, inputs: list, var_vals: dict, signature: list, args: tuple,
                      kwargs: dict) -> None:
        """The second call: run the function recording what it launches (in this thread), and make the capture."""
        CacheCollector.start(var_vals)
        try:
            cap.ret = self.fxn(*args, **kwargs)
            _realize(cap.ret)
        finally:
            cap.jit_cache = CacheCollector.finish()
        if not cap.jit_cache:
            # NOTE: copies alone are worth capturing (a function moving tensors between devices, as in 0.9)
            self._threads.capture = _Capture()
            raise JitError(f"TinyJit: {getattr(self.fxn, '__name__', self.fxn)} launched no kernels (nor copies) "
                           "when captured: it must compute (and return) Tensors")
        positions = {id(lb.base.realized): k for k, lb in enumerate(inputs)}
        with ENGINE_LOCK:
            shared, devices = _share_buffers(cap.jit_cache, set(positions))
            # the capture gave back the memory of buffers past their last use (realize.run_schedule): the replay's
            # buffers get theirs now, before a graph is made of them
            for ei in cap.jit_cache:
                for b in ei.bufs:
                    b.ensure_allocated()
            # the buffers that lost their place went to their allocators' caches: given back to the devices
            for d in devices:
                free_cache = getattr(Device[d].allocator, "free_cache", None)
                if free_cache is not None:
                    free_cache()
            cap.input_replace = {(j, i): positions[id(b)] for j, ei in enumerate(cap.jit_cache)
                                 for i, b in enumerate(ei.bufs) if id(b) in positions}
            cap.expected = signature
            cap.graph = _device_graph(cap.jit_cache, cap.input_replace)
        cap.cnt = 2
        if DEBUG >= 1:
            print(f"TinyJit captured {len(cap.jit_cache)} items "
                  f"({type(cap.graph).__name__ if cap.graph is not None else 'item by item'}), "
                  f"{shared / 1e6:.1f} MB of intermediates shared")


def _share_buffers(jit_cache: list, inputs: set[int]) -> tuple[int, set[str]]:
    """Let the capture's own buffers of one size take turns: each one the capture writes before anything reads it
    takes the buffer of an earlier one whose last use has passed. Returns the bytes that no longer need a buffer of
    their own and the devices they were on (their buffers are freed once the caller's references go).

    A buffer is the capture's own when it is not an input (by id in `inputs`), its first use is as an output of a
    kernel or copy that doesn't also read it (so its contents before the capture mean nothing), and nothing outside
    the capture holds it: its only references are the capture's own item lists, which rules out the returned
    tensors' buffers, weights, caches written in place, and anything a Python object still keeps. Items run in
    order (one stream, a graph in capture order), so a buffer whose last use came before another's first use may
    hold both."""
    # NOTE: only where every item runs on one device: items on several run on as many streams, where a buffer's
    # last use (a copy another device's stream runs) may not be over when this device's next kernel starts
    if len({b.device for ei in jit_cache for b in ei.bufs}) > 1:
        return 0, set()
    uses: dict[int, list[tuple[int, int]]] = defaultdict(list)  # id -> (item, position) of every use, in order
    bufs: dict[int, Any] = {}
    buf = None
    for j, ei in enumerate(jit_cache):
        for i, buf in enumerate(ei.bufs):
            uses[id(buf)].append((j, i))
            bufs[id(buf)] = buf
    del buf  # NOTE: a loop variable left holding a buffer would count as a holder outside the capture below

    def own(k: int) -> bool:
        j, i = uses[k][0]
        prg = jit_cache[j].prg
        kind = getattr(prg, "graph_kind", "")
        writes = getattr(prg, "outcount", 1) if kind == "kernel" else 1 if kind == "copy" else 0
        if k in inputs or i >= writes or any(jj == j for jj, _ in uses[k][1:]):
            return False
        # references: the item lists' (one a use), `bufs`' and getrefcount's argument; more is an outside holder
        return sys.getrefcount(bufs[k]) - 2 == len(uses[k])
    owned = {k for k in uses if own(k)}
    ends: dict[int, list[int]] = defaultdict(list)
    for k in owned:
        ends[uses[k][-1][0]].append(k)
    waiting: dict[tuple, list] = defaultdict(list)  # holders free after their last use, by (device, dtype, size)
    holder: dict[int, Any] = {}
    for j, ei in enumerate(jit_cache):
        for k in (id(b) for b in ei.bufs):
            if k in owned and k not in holder:
                b = bufs[k]
                free = waiting[(b.device, b.dtype, b.size, b.options)]
                holder[k] = free.pop() if free else b
        for k in ends[j]:
            h = holder[k]
            waiting[(h.device, h.dtype, h.size, h.options)].append(h)
    moved = [k for k in owned if holder[k] is not bufs[k]]
    for ei in jit_cache:
        ei.bufs[:] = [holder.get(id(b), b) for b in ei.bufs]
    return sum(bufs[k].nbytes for k in moved), {bufs[k].device for k in moved}


def _describe(sig: Any) -> str:
    if sig is None:
        return "nothing"
    kind, *rest = sig
    if kind == "tensor":
        device, dtype, st, alias = rest
        return f"a {dtype} Tensor of shape {st.shape} on {device}" + ("" if st.contiguous else f" with layout {st}") + \
            ("" if alias is None else f" sharing the buffer of Tensor argument {alias}")
    if kind == "var":
        return f"Variable {rest[0]!r}"
    if kind == "value":
        return repr(rest[0])
    return f"object id {rest[0]}"


def _rebind(ret: Any, var_vals: dict) -> None:
    """Give the returned tensors' symbolic dims this call's values (they were bound to the captured call's)."""
    for t in _tensors_in(ret):
        lb = t.lazydata
        if type(lb) is not LazyBuffer:
            continue  # several devices: symbolic shapes are not supported there
        if lb.st.vars():
            t.lazydata = LazyBuffer(lb.device, lb.st.unbind()[0].bind(var_vals), lb.dtype, base=lb.base)


def _realize(ret: Any) -> None:
    Tensor.corealize(_tensors_in(ret))


def _is_kernel(ei) -> bool:
    return isinstance(ei.prg, CompiledRunner)


def _device_graph(jit_cache: list, input_replace: dict[tuple[int, int], int]) -> Any:
    """The capture as its device's graph, when every item is a kernel of one device whose graph class supports it;
    else, when every device the capture touches offers the same multi-device graph class and it supports the
    capture (several GPUs, collectives, copies), as that; None otherwise (replayed item by item)."""
    devices = {ei.prg.dname for ei in jit_cache if _is_kernel(ei)}
    if len(devices) == 1 and all(_is_kernel(ei) for ei in jit_cache):
        graph = Device[next(iter(devices))].graph
        if graph is not None and graph.supports(jit_cache):
            return graph(jit_cache, input_replace)
    touched = devices | {b.device for ei in jit_cache for b in ei.bufs}
    multi = {getattr(Device[d], "multi_graph", None) for d in touched}
    if len(multi) != 1:
        return None
    graph = multi.pop()
    if graph is None or not graph.supports(jit_cache):
        return None
    return graph(jit_cache, input_replace)
