"""Collectives between CUDA GPUs of this process through NCCL: the `CollectiveBackend` of the CUDA device.

`tinygrad.collectives` asks a device object for its `collectives` attribute; every CUDADevice carries `BACKEND`,
one NCCLCollectives shared by all of them. Its methods build, for a collective over n devices, n LazyBuffers with
op LoadOps.CUSTOM (one per device) sharing one `NCCLCollective` as their arg. The scheduler lowers them together
into one ScheduleItem over all the devices' output and input buffers, and the engine runs it with the runner the arg
makes (NCCLRunner), which calls the C++ Communicator (runtimes/cuda/nccl.h): each device's NCCL call is queued on
that device's stream, in one NCCL group, so it is ordered with the kernels and copies around it without any host
synchronisation. So eager code, TinyJit capture and JIT replay all run the collective as one step of the schedule.

Under TinyJit a capture spanning several CUDA GPUs is replayed as one CUDA graph (graph_cuda.CUDAMultiGraph): the
kernels are kernel nodes, and the NCCL group is captured from the devices' streams into a child graph of it, so a
data-parallel step is one cuGraphLaunch with the collectives inside.

NOTE: a captured NCCL call has its buffer addresses fixed. Every replay compares them with the buffers bound for that
call, and captures the collective again (a fresh NCCL group on capturing streams, swapped into the instantiated
graph) before the launch when one moved; a collective over buffers the JIT keeps (gradients) is captured once.
Captures the graph can't hold (copies from the host, other devices) and CUDA_MULTIGRAPH=0 replay item by item,
issuing each collective again on the devices' streams in order with the captured kernels.

NCCL is loaded on first use: NCCL_LIBRARY if set, else libnccl.so.2 from the loader's search path, else the one in
the nvidia-nccl wheel (site-packages/nvidia/nccl/lib, as PyTorch installs it). Where it can't be loaded, or for a
dtype NCCL has no type for, or an uneven split NCCL can't express, the collectives fall back to the ring of copies
(tinygrad.collectives), which gives the same results. NCCL=0 turns the NCCL path off.

    >>> from tinygrad import Tensor                                                   # doctest: +SKIP
    >>> x = Tensor.ones(4, 8).shard(("CUDA:0", "CUDA:1"), axis=0)                     # doctest: +SKIP
    >>> x.sum(0).numpy()   # the per-device partial sums are all-reduced by ncclAllReduce  # doctest: +SKIP
"""
from __future__ import annotations

import atexit
import glob
import math
import os
import sys
import time

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.helpers import DEBUG, getenv
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps, ReduceOps
from tinygrad.runtime import _cuda
from tinygrad.shape.shapetracker import ShapeTracker

__all__ = ["NCCLCollectives", "NCCLCollective", "NCCLRunner", "BACKEND", "communicator", "load", "nccl_candidates",
           "nccl_dtype", "reset"]

# tinygrad's dtypes that NCCL has a type for (its ncclDataType_t names, as the C++ side takes them)
_DTYPES = {dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int32: "int32", dtypes.uint32: "uint32",
           dtypes.int64: "int64", dtypes.uint64: "uint64", dtypes.float16: "float16", dtypes.bfloat16: "bfloat16",
           dtypes.float32: "float32", dtypes.float64: "float64"}
_OPS = {ReduceOps.SUM: "sum", ReduceOps.MAX: "max", ReduceOps.PROD: "prod"}


def nccl_dtype(dtype) -> str | None:
    """NCCL's name for `dtype`, or None when NCCL has no such type (bool, int16, ...)."""
    return _DTYPES.get(dtype)


def nccl_candidates() -> list[str]:
    """Where NCCL is looked for: NCCL_LIBRARY alone if set; else libnccl.so.2 (the loader's search path), then the
    nvidia-nccl wheel's folder on sys.path (PyTorch's wheels depend on it)."""
    path = getenv("NCCL_LIBRARY")
    if path:
        return [path]
    found = []
    for site in sys.path:
        for sub in ("nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
            found += sorted(glob.glob(os.path.join(site, sub, "libnccl.so*")))
    return ["libnccl.so.2"] + [p for p in dict.fromkeys(found) if os.path.isfile(p)]


_load_error: str | None = None
_loaded: str | None = None


def load() -> str:
    """Loads NCCL (once); returns what loaded. RuntimeError naming NCCL and every place tried when it can't."""
    global _loaded
    if _loaded is None:
        _loaded = _cuda.nccl_load(nccl_candidates())
    return _loaded


def available() -> bool:
    """Whether NCCL loads; the reason it does not is kept and printed once at DEBUG >= 1. Asked for every
    collective built, so a load is not tried again once it worked."""
    global _load_error
    if _loaded is not None:
        return True
    try:
        load()
        return True
    except RuntimeError as e:
        if _load_error is None and DEBUG >= 1:
            print(f"NCCL unavailable, CUDA collectives use the ring of copies: {e}")
        _load_error = str(e)
        return False


# device tuple -> its communicator: NCCL communicators take hundreds of milliseconds to make, so they are kept
_comms: dict[tuple[str, ...], object] = {}


def communicator(devices: tuple[str, ...]):
    """The NCCL communicator over `devices` (CUDA device names, rank r = devices[r]), made on first use."""
    comm = _comms.get(devices)
    if comm is None:
        load()
        comm = _comms[devices] = _cuda.Communicator([Device[d].native for d in devices])
    return comm


def reset() -> None:
    """Forget the communicators (and the loaded NCCL), e.g. when tests switch to another fake machine."""
    global _load_error, _loaded
    _comms.clear()
    _cuda.nccl_unload()
    _load_error, _loaded = None, None


# NOTE: communicators are destroyed while the interpreter (and NCCL's threads) still run, not by module teardown
atexit.register(_comms.clear)


class NCCLRunner:
    """Runs one collective: `bufs` are the devices' outputs, then their inputs, in device order. A Runner by its
    interface (engine/realize.py: `runner(bufs, var_vals, wait)`, `dname`, `display_name`), not by subclassing:
    the runtimes sit below the engine."""
    graph_kind = "collective"  # CUDAMultiGraph (graph_cuda.py) captures it into its CUDA graph

    def __init__(self, kind: str, op: str | None, devices: tuple[str, ...], count: int, dtype):
        self.kind, self.op, self.devices, self.count, self.dtype = kind, op, devices, count, dtype
        self.dname = devices[0]
        self.display_name = f"nccl {kind} {count}x{dtype.name} on {len(devices)}"

    def __call__(self, bufs: list, var_vals: dict, wait: bool = False) -> float | None:
        n = len(self.devices)
        outs, ins = [b._buf for b in bufs[:n]], [b._buf for b in bufs[n:]]
        comm = communicator(self.devices)
        st = time.perf_counter()
        if self.kind == "all_gather":
            comm.all_gather(ins, outs, self.count, _DTYPES[self.dtype])
        else:
            getattr(comm, self.kind)(ins, outs, self.count, _DTYPES[self.dtype], self.op)
        if wait or DEBUG >= 2:
            for d in self.devices:
                Device[d].synchronize()
        return time.perf_counter() - st


class NCCLCollective:
    """The arg of the LoadOps.CUSTOM nodes of one collective: what to run, and `outs`, the node of every device
    (the scheduler computes them in one item). `count` is what NCCL calls it: the elements of each device's output
    (all-reduce, reduce-scatter) or input (all-gather)."""

    def __init__(self, kind: str, op: ReduceOps | None, devices: tuple[str, ...], count: int, dtype):
        self.kind, self.op, self.devices, self.count, self.dtype = kind, op, devices, count, dtype
        self.outs: list[LazyBuffer] = []

    def runner(self) -> NCCLRunner:
        return NCCLRunner(self.kind, _OPS.get(self.op), self.devices, self.count, self.dtype)

    def __repr__(self) -> str:
        return f"NCCLCollective({self.kind}, {self.op}, {self.devices}, count={self.count}, {self.dtype})"


def _whole(lb: LazyBuffer) -> LazyBuffer:
    """`lb` as a whole contiguous buffer (a base): what NCCL reads."""
    c = lb.contiguous()
    return c.base


def _collective(kind: str, op: ReduceOps | None, ins: list[LazyBuffer], count: int, out_numel: int) -> list[LazyBuffer]:
    devices = tuple(lb.device for lb in ins)
    spec = NCCLCollective(kind, op, devices, count, ins[0].dtype)
    srcs = tuple(_whole(lb) for lb in ins)
    spec.outs = [LazyBuffer(d, ShapeTracker.from_shape((out_numel,)), ins[0].dtype, LoadOps.CUSTOM, spec, srcs)
                 for d in devices]
    return spec.outs


def _axis_first(lb: LazyBuffer, axis: int) -> LazyBuffer:
    order = (axis,) + tuple(d for d in range(len(lb.shape)) if d != axis)
    return lb.permute(order) if axis != 0 else lb


def _axis_back(lb: LazyBuffer, axis: int) -> LazyBuffer:
    if axis == 0:
        return lb
    order = list(range(1, len(lb.shape)))
    order.insert(axis, 0)
    return lb.permute(tuple(order))


class NCCLCollectives:
    """The CollectiveBackend of CUDA devices (see tinygrad.collectives.CollectiveBackend)."""

    def supports(self, devices: tuple[str, ...]) -> bool:
        if not getenv("NCCL", 1) or len(set(devices)) != len(devices):
            return False
        return all(getattr(Device[d], "collectives", None) is self for d in devices) and available()

    def _ring(self):
        from tinygrad import collectives
        return collectives

    def all_reduce(self, op: ReduceOps, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
        shape, numel = lbs[0].shape, lbs[0].size
        if nccl_dtype(lbs[0].dtype) is None or op not in _OPS or not isinstance(numel, int) or numel == 0:
            return self._ring().ring_all_reduce(op, lbs)
        return [o.reshape(shape) for o in _collective("all_reduce", op, lbs, numel, numel)]

    def all_gather(self, lbs: list[LazyBuffer], axis: int) -> list[LazyBuffer]:
        sizes = {lb.shape[axis] for lb in lbs}
        numel = lbs[0].size
        if nccl_dtype(lbs[0].dtype) is None or len(sizes) != 1 or not isinstance(numel, int) or numel == 0:
            return self._ring().ring_all_gather(lbs, axis)
        n = len(lbs)
        front = [_axis_first(lb, axis) for lb in lbs]
        shape = (n * front[0].shape[0],) + front[0].shape[1:]
        outs = _collective("all_gather", None, front, numel, n * numel)
        return [_axis_back(o.reshape(shape), axis) for o in outs]

    def reduce_scatter(self, op: ReduceOps, lbs: list[LazyBuffer], axis: int,
                       bounds: tuple[tuple[int, int], ...]) -> list[LazyBuffer]:
        sizes = {hi - lo for lo, hi in bounds}
        numel = lbs[0].size
        if nccl_dtype(lbs[0].dtype) is None or op not in _OPS or len(sizes) != 1 or not isinstance(numel, int) or \
                numel == 0:
            return self._ring().ring_reduce_scatter(op, lbs, axis, bounds)
        front = [_axis_first(lb, axis) for lb in lbs]
        part = sizes.pop()
        shape = (part,) + front[0].shape[1:]
        count = math.prod(shape)
        outs = _collective("reduce_scatter", op, front, count, count)
        return [_axis_back(o.reshape(shape), axis) for o in outs]


BACKEND = NCCLCollectives()
