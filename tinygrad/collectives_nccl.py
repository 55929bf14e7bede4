"""Collectives between CUDA GPUs of this process through NCCL: the `CollectiveBackend` CUDA devices name.

`tinygrad.collectives` asks a device object for its `collectives` attribute; every CUDADevice names "nccl", which
is BACKEND here, one NCCLCollectives shared by all of them. Its methods build, for a collective over n devices, n
LazyBuffers with op LoadOps.CUSTOM (one per device) sharing one `NCCLCollective` as their arg. The scheduler lowers
them together into one ScheduleItem over all the devices' output and input buffers, and the engine runs it with the
runner the arg makes (runtime/nccl.py's NCCLRunner). So eager code, TinyJit capture and JIT replay all run the
collective as one step of the schedule.

Where NCCL can't be loaded, or for a dtype NCCL has no type for, or an uneven split NCCL can't express, the
collectives fall back to the ring of copies (tinygrad.collectives), which gives the same results. NCCL=0 turns the
NCCL path off.

    >>> from tinygrad import Tensor                                                   # doctest: +SKIP
    >>> x = Tensor.ones(4, 8).shard(("CUDA:0", "CUDA:1"), axis=0)                     # doctest: +SKIP
    >>> x.sum(0).numpy()   # the per-device partial sums are all-reduced by ncclAllReduce  # doctest: +SKIP
"""
from __future__ import annotations

import math

from tinygrad import collectives
from tinygrad.helpers import getenv
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps, ReduceOps
from tinygrad.runtime.nccl import NCCLRunner, available, nccl_dtype
from tinygrad.shape.shapetracker import ShapeTracker

__all__ = ["NCCLCollectives", "NCCLCollective", "BACKEND"]

# the reduce ops NCCL has (its ncclRedOp_t names, as the C++ side takes them)
_OPS = {ReduceOps.SUM: "sum", ReduceOps.MAX: "max", ReduceOps.PROD: "prod"}


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
        return all(collectives.device_backend(d) is self for d in devices) and available()

    def all_reduce(self, op: ReduceOps, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
        shape, numel = lbs[0].shape, lbs[0].size
        if nccl_dtype(lbs[0].dtype) is None or op not in _OPS or not isinstance(numel, int) or numel == 0:
            return collectives.ring_all_reduce(op, lbs)
        return [o.reshape(shape) for o in _collective("all_reduce", op, lbs, numel, numel)]

    def all_gather(self, lbs: list[LazyBuffer], axis: int) -> list[LazyBuffer]:
        sizes = {lb.shape[axis] for lb in lbs}
        numel = lbs[0].size
        if nccl_dtype(lbs[0].dtype) is None or len(sizes) != 1 or not isinstance(numel, int) or numel == 0:
            return collectives.ring_all_gather(lbs, axis)
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
            return collectives.ring_reduce_scatter(op, lbs, axis, bounds)
        front = [_axis_first(lb, axis) for lb in lbs]
        part = sizes.pop()
        shape = (part,) + front[0].shape[1:]
        count = math.prod(shape)
        outs = _collective("reduce_scatter", op, front, count, count)
        return [_axis_back(o.reshape(shape), axis) for o in outs]


BACKEND = NCCLCollectives()
