"""Collectives: all-reduce, all-gather and reduce-scatter over one LazyBuffer per device, built lazily.

The default implementation is a ring of device-to-device copies: n devices pass pieces around n - 1 times, each
device adding (or max-ing, multiplying) what it receives into its own piece, then pass the finished pieces around
again. Each step copies 1/n of the data per device, so the traffic per device does not grow with the number of
devices; every device ends with bitwise the same result, since each finished piece is computed once and copied.
Copies and the adds are ordinary lazy ops: they join the schedule like any other kernel.

A device type with a faster path (NCCL on CUDA GPUs) plugs in as a `CollectiveBackend`: a device object may carry
one as its `collectives` attribute, or the name of one in NAMED_BACKENDS (a runtime can't import a backend: it
builds lazy graph nodes, a layer above the runtimes), and it is used whenever its `supports(devices)` says yes.
Nothing here tests a device's name.
"""
from __future__ import annotations

import importlib
from typing import Protocol, Sequence

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.errors import ArgumentError
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import BinaryOps, ReduceOps

__all__ = ["CollectiveBackend", "NAMED_BACKENDS", "device_backend", "all_reduce", "all_gather", "reduce_scatter",
           "ring_all_reduce", "ring_all_gather", "ring_reduce_scatter", "concat", "even_bounds"]

# the elementwise op that combines two partial results of each reduce
_COMBINE = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX, ReduceOps.PROD: BinaryOps.MUL}


class CollectiveBackend(Protocol):
    """What a device type implements to run collectives its own way (e.g. NCCL for CUDA). Set an instance (or a
    name in NAMED_BACKENDS) as the device object's `collectives` attribute. Every method takes one LazyBuffer per
    device (in device order, one device each) and returns one LazyBuffer per device, lazily: the backend builds
    graph nodes (a LoadOps.CUSTOM node the engine knows how to run, for instance) and nothing runs until they are
    scheduled."""

    def supports(self, devices: tuple[str, ...]) -> bool:
        """Whether this backend can run a collective over exactly these devices (all of its type, reachable)."""
        ...

    def all_reduce(self, op: ReduceOps, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
        """Every device gets the elementwise `op` (SUM, MAX or PROD) of all the inputs (equal shapes)."""
        ...

    def all_gather(self, lbs: list[LazyBuffer], axis: int) -> list[LazyBuffer]:
        """Every device gets the inputs concatenated along `axis` in device order."""
        ...

    def reduce_scatter(self, op: ReduceOps, lbs: list[LazyBuffer], axis: int,
                       bounds: tuple[tuple[int, int], ...]) -> list[LazyBuffer]:
        """Device i gets the slice `bounds[i]` along `axis` of the elementwise `op` of all the inputs."""
        ...


# backends a device object may name in its `collectives` attribute -> the module whose BACKEND it is (imported on
# first use, so the ring of copies works where the library behind a backend is missing)
NAMED_BACKENDS = {"nccl": "tinygrad.collectives_nccl"}


def device_backend(device: str) -> CollectiveBackend | None:
    """The CollectiveBackend of device `device`: its `collectives` attribute, or the backend that names; else None."""
    backend = getattr(Device[device], "collectives", None)
    if isinstance(backend, str):
        backend = importlib.import_module(NAMED_BACKENDS[backend]).BACKEND
    return backend


def _backend(lbs: Sequence[LazyBuffer]) -> CollectiveBackend | None:
    devices = tuple(lb.device for lb in lbs)
    backend = device_backend(devices[0])
    return backend if backend is not None and backend.supports(devices) else None


def _check(lbs: Sequence[LazyBuffer], same_shape: bool) -> None:
    if not lbs:
        raise ArgumentError("a collective needs at least one buffer")
    devices = [lb.device for lb in lbs]
    if len(set(devices)) != len(devices):
        raise ArgumentError(f"a collective needs one buffer per device, got devices {devices}")
    if same_shape and any(lb.shape != lbs[0].shape for lb in lbs):
        raise ArgumentError(f"a collective needs equal shapes, got {[lb.shape for lb in lbs]}")
    if any(lb.dtype != lbs[0].dtype for lb in lbs):
        raise ArgumentError(f"a collective needs equal dtypes, got {[lb.dtype for lb in lbs]}")


# ---- helpers on LazyBuffers of one device ----

def even_bounds(n: int, k: int) -> tuple[tuple[int, int], ...]:
    """`n` elements split into `k` contiguous ranges as tinygrad 0.9 splits them: ceil(n / k) each, in order, the
    last ones shorter or empty (1 element over 4 devices: one range of 1, three empty)."""
    size = -(-n // k)
    return tuple((min(i * size, n), min((i + 1) * size, n)) for i in range(k))


def slice_axis(lb: LazyBuffer, axis: int, lo: int, hi: int) -> LazyBuffer:
    """The range [lo, hi) of `lb` along `axis` (a view)."""
    return lb.shrink(tuple((lo, hi) if d == axis else (0, s) for d, s in enumerate(lb.shape)))


def copy(lb: LazyBuffer, device: str) -> LazyBuffer:
    """`lb` on `device`; an empty buffer is made there instead of copied (nothing to move)."""
    if lb.device == device:
        return lb
    if lb.size == 0:
        return lb.const(0).copy_to_device(device)
    return lb.copy_to_device(device)


def concat(lbs: Sequence[LazyBuffer], axis: int) -> LazyBuffer:
    """LazyBuffers of one device joined along `axis` in one kernel: each padded with zeros over the others' places,
    and the disjoint parts summed (or-ed, for bools), as Tensor.cat does."""
    parts = [lb for lb in lbs if lb.shape[axis] != 0] or [lbs[0]]
    if len(parts) == 1:
        return parts[0]
    total = sum(lb.shape[axis] for lb in parts)
    op = BinaryOps.OR if parts[0].dtype == dtypes.bool else BinaryOps.ADD
    out, start = None, 0
    for lb in parts:
        n = lb.shape[axis]
        padded = lb.pad(tuple((start, total - start - n) if d == axis else (0, 0) for d in range(len(lb.shape))))
        out = padded if out is None else out.e(op, padded)
        start += n
    return out


# ---- the ring ----

def _ring_reduce_scatter(op: ReduceOps, pieces: list[list[LazyBuffer]]) -> list[LazyBuffer]:
    """`pieces[i][j]`: device i's part j (part j of equal shape on every device). Returns, for each device d, the
    reduction of part d over all devices. In step s device i passes its running part (i - s - 1) mod n to device
    i + 1, which combines it with its own; after n - 1 steps device d holds the finished part d."""
    n = len(pieces)
    devices = [row[0].device for row in pieces]
    combine = _COMBINE[op]
    run = [list(row) for row in pieces]
    for s in range(n - 1):
        sent = [(i, (i - s - 1) % n, run[i][(i - s - 1) % n]) for i in range(n)]
        for i, j, lb in sent:
            dst = (i + 1) % n
            run[dst][j] = run[dst][j].e(combine, copy(lb, devices[dst]))
    return [run[d][d] for d in range(n)]


def _ring_all_gather(parts: list[LazyBuffer]) -> list[list[LazyBuffer]]:
    """`parts[d]` lives on device d; returns, for every device, all the parts in device order (copied there). In step
    s device i passes part (i - s) mod n, which it received in the step before, to device i + 1."""
    n = len(parts)
    devices = [lb.device for lb in parts]
    have: list[list[LazyBuffer | None]] = [[parts[i] if j == i else None for j in range(n)] for i in range(n)]
    for s in range(n - 1):
        sent = [(i, (i - s) % n) for i in range(n)]
        for i, j in sent:
            dst = (i + 1) % n
            have[dst][j] = copy(have[i][j], devices[dst])
    return have  # type: ignore[return-value]


def ring_reduce_scatter(op: ReduceOps, lbs: list[LazyBuffer], axis: int,
                        bounds: tuple[tuple[int, int], ...]) -> list[LazyBuffer]:
    """reduce_scatter by the ring (see the module docstring)."""
    pieces = [[slice_axis(lb, axis, lo, hi) for lo, hi in bounds] for lb in lbs]
    return _ring_reduce_scatter(op, pieces)


def ring_all_gather(lbs: list[LazyBuffer], axis: int) -> list[LazyBuffer]:
    """all_gather by the ring (see the module docstring)."""
    return [concat(row, axis) for row in _ring_all_gather(lbs)]


def ring_all_reduce(op: ReduceOps, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
    """all_reduce by the ring: each buffer flattened and cut into n equal parts (zero-padded to a multiple of n),
    reduce-scattered, then all-gathered and put back in shape."""
    n, shape = len(lbs), lbs[0].shape
    numel = lbs[0].size
    if n == 1 or numel == 0:
        return list(lbs)
    part = -(-numel // n)
    flat = [lb.reshape((numel,)).pad(((0, part * n - numel),)) for lb in lbs]
    done = _ring_reduce_scatter(op, [[slice_axis(f, 0, j * part, (j + 1) * part) for j in range(n)] for f in flat])
    return [concat(row, 0).shrink(((0, numel),)).reshape(shape) for row in _ring_all_gather(done)]


# ---- the public entry points: a device type's own backend where it has one, else the ring ----

def all_reduce(op: ReduceOps, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
    """Every device gets the elementwise `op` (ReduceOps.SUM, MAX or PROD) of the buffers of all devices."""
    _check(lbs, same_shape=True)
    if op not in _COMBINE:
        raise ArgumentError(f"all_reduce can't reduce with {op}")
    backend = _backend(lbs) if len(lbs) > 1 else None
    return backend.all_reduce(op, list(lbs)) if backend is not None else ring_all_reduce(op, list(lbs))


def all_gather(lbs: list[LazyBuffer], axis: int) -> list[LazyBuffer]:
    """Every device gets the buffers of all devices joined along `axis` in device order (sizes along `axis` may
    differ)."""
    _check(lbs, same_shape=False)
    others = [tuple(s for d, s in enumerate(lb.shape) if d != axis) for lb in lbs]
    if any(o != others[0] for o in others):
        raise ArgumentError(f"all_gather needs equal shapes except along axis {axis}, got {[lb.shape for lb in lbs]}")
    backend = _backend(lbs) if len(lbs) > 1 else None
    return backend.all_gather(list(lbs), axis) if backend is not None else ring_all_gather(list(lbs), axis)


def reduce_scatter(op: ReduceOps, lbs: list[LazyBuffer], axis: int,
                   bounds: tuple[tuple[int, int], ...] | None = None) -> list[LazyBuffer]:
    """Device i gets the range `bounds[i]` along `axis` of the elementwise `op` of all the buffers (default: the
    axis split as evenly as it goes)."""
    _check(lbs, same_shape=True)
    if op not in _COMBINE:
        raise ArgumentError(f"reduce_scatter can't reduce with {op}")
    n = lbs[0].shape[axis]
    bounds = even_bounds(n, len(lbs)) if bounds is None else tuple(bounds)
    if len(bounds) != len(lbs) or bounds[0][0] != 0 or bounds[-1][1] != n or \
            any(a[1] != b[0] for a, b in zip(bounds, bounds[1:])) or any(lo > hi for lo, hi in bounds):
        raise ArgumentError(f"reduce_scatter bounds {bounds} don't cover axis {axis} of size {n} in order")
    backend = _backend(lbs) if len(lbs) > 1 else None
    if backend is not None:
        return backend.reduce_scatter(op, list(lbs), axis, bounds)
    return ring_reduce_scatter(op, list(lbs), axis, bounds)
