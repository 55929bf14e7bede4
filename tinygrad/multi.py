"""MultiLazyBuffer: one tensor spread over several devices, one LazyBuffer per device.

A tensor is either *replicated* (`axis` None: every device holds all of it) or *split* along `axis`: device i holds
the range `bounds[i]` of that axis (ranges in device order, sizes differing as the split requires; a shrink can
leave a device with an empty range, and `real[i]` says whether device i holds any of the data).

It answers the same ops as a LazyBuffer, so the autograd Functions of mlops run on it unchanged:

- elementwise ops run per device once the operands share a placement (a replicated operand is sliced on each
  device for free; a differently split one is moved with device copies);
- a reduce along the split axis reduces on each device, then all-reduces (tinygrad.collectives): the result is
  replicated; any other reduce stays split;
- movement ops keep the split where they can (a permute moves the axis, a reshape finds the dim the axis became,
  a pad or shrink of the split axis changes the first/last ranges) and otherwise gather to a replicated tensor;
- copy_to_device(one device) gathers the whole tensor there.
"""
from __future__ import annotations

from typing import Any, Sequence

from tinygrad.collectives import all_gather, all_reduce, concat, copy, even_bounds, slice_axis
from tinygrad.device import Device
from tinygrad.errors import ArgumentError
from tinygrad.helpers import prod
from tinygrad.lazy import LazyBuffer
from tinygrad.ops import LoadOps, ReduceOps

__all__ = ["MultiLazyBuffer", "canonical_devices"]


def canonical_devices(devices) -> tuple[str, ...]:
    """A tuple or list of device names as the tuple of their canonical names ('clang:1' -> 'CLANG:1'), each once."""
    if not isinstance(devices, (tuple, list)) or not devices:
        raise ArgumentError(f"expected a non-empty tuple of devices, got {devices!r}")
    out = tuple(Device.canonicalize(d) for d in devices)
    if len(set(out)) != len(out):
        raise ArgumentError(f"the devices {devices!r} name one device more than once")
    return out


class MultiLazyBuffer:
    """One LazyBuffer per device (`lbs`), replicated (`axis` None) or split along `axis` (see the module docstring).
    Build one with `from_sharded`, or from per-device buffers that already hold the right pieces."""
    __slots__ = ("lbs", "axis", "dtype", "device", "bounds", "shape", "__weakref__")

    def __init__(self, lbs: Sequence[LazyBuffer], axis: int | None, real: Sequence[bool] | None = None):
        lbs = list(lbs)
        if not lbs:
            raise ArgumentError("a MultiLazyBuffer needs at least one LazyBuffer")
        if not all(isinstance(lb, LazyBuffer) for lb in lbs):
            raise TypeError(f"a MultiLazyBuffer holds LazyBuffers, got {[type(lb).__name__ for lb in lbs]}")
        devices = tuple(lb.device for lb in lbs)
        if len(set(devices)) != len(devices):
            raise ArgumentError(f"a MultiLazyBuffer needs distinct devices, got {devices}")
        if any(lb.dtype != lbs[0].dtype for lb in lbs):
            raise TypeError(f"a MultiLazyBuffer needs one dtype, got {[lb.dtype for lb in lbs]}")
        ndim = len(lbs[0].shape)
        if axis is not None and not 0 <= axis < ndim:
            raise ArgumentError(f"shard axis {axis} is out of range for {ndim} dims")
        if any(len(lb.shape) != ndim or any(a != b for d, (a, b) in enumerate(zip(lb.shape, lbs[0].shape))
                                            if d != axis) for lb in lbs):
            what = "equal shapes" if axis is None else f"equal shapes except along axis {axis}"
            raise ArgumentError(f"a MultiLazyBuffer needs {what}, got {[lb.shape for lb in lbs]}")
        self.lbs, self.axis, self.dtype, self.device = lbs, axis, lbs[0].dtype, devices
        if axis is None:
            self.bounds = None
            self.shape = lbs[0].shape
        else:
            sizes = [lb.shape[axis] for lb in lbs]
            if not all(isinstance(s, int) for s in sizes):
                raise ArgumentError("the shard axis must have a concrete size")
            starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
            self.bounds = tuple(zip(starts[:-1], starts[1:]))
            self.shape = tuple(starts[-1] if d == axis else s for d, s in enumerate(lbs[0].shape))
        # tinygrad 0.9 took `real` as an argument; here it follows from the ranges (an empty range is not real)
        if real is not None and list(real) != self.real:
            raise ArgumentError(f"real={list(real)} doesn't match the pieces' ranges {self.bounds}: a device without "
                                "data holds an empty range")

    # ---- what a LazyBuffer answers too ----
    @property
    def size(self):
        return prod(self.shape)

    @property
    def real(self) -> list[bool]:
        """Per device, whether it holds any of the data (a shrink of the split axis can leave a device none)."""
        if self.axis is None:
            return [True] * len(self.lbs)
        return [hi > lo for lo, hi in self.bounds]

    def __repr__(self) -> str:
        return f"<MLB axis={self.axis} bounds={self.bounds} {self.device} {self.lbs}>"

    def is_unrealized_const(self) -> bool:
        return all(lb.is_unrealized_const() for lb in self.lbs)

    def is_inlined(self) -> bool:
        return all(lb.is_inlined() for lb in self.lbs)

    # ---- building ----
    @staticmethod
    def from_sharded(lb: LazyBuffer, devices: tuple[str, ...], axis: int | None = None,
                     bounds: tuple[tuple[int, int], ...] | None = None) -> MultiLazyBuffer:
        """`lb` (on one device) copied to every device of `devices` (`axis` None), or split along `axis` into
        `bounds` (default: ceil(size / devices) a device, as 0.9) with each range copied to its device."""
        if not devices:
            raise ArgumentError("shard needs at least one device")
        if len(set(devices)) != len(devices):
            raise ArgumentError(f"shard needs distinct devices, got {devices}")
        # computed once on its own device, then copied: not once per device (a constant is free everywhere, and
        # realized data, a file's bytes included, is read where it is)
        src = lb if lb.is_unrealized_const() or lb.base.realized is not None else lb.contiguous()
        if axis is None:
            return MultiLazyBuffer([copy(src, d) for d in devices], None)
        bounds = _check_bounds(lb.shape, axis, devices, bounds)
        return MultiLazyBuffer([copy(slice_axis(src, axis, lo, hi), d) for (lo, hi), d in zip(bounds, devices)], axis)

    def copy_to_device(self, device: str) -> LazyBuffer:
        """The whole tensor on `device` (one device): the pieces copied there and joined."""
        if self.axis is None:
            # the replica already there, or the first one
            lb = next((x for x in self.lbs if x.device == device), self.lbs[0])
            return lb.copy_to_device(device)
        return concat([copy(lb, device) for lb in self.lbs], self.axis)

    def reshard(self, devices: tuple[str, ...], axis: int | None,
                bounds: tuple[tuple[int, int], ...] | None = None) -> MultiLazyBuffer:
        """This tensor placed on `devices`, replicated or split along `axis` into `bounds` (default: even)."""
        devices = tuple(devices)
        if axis is not None:
            bounds = _check_bounds(self.shape, axis, devices, bounds)
        if devices == self.device and axis == self.axis and (axis is None or bounds == self.bounds):
            return self
        if devices == self.device:
            return MultiLazyBuffer(_place(self, axis, bounds), axis)
        # other devices: gather on the first of ours, then split from there
        return MultiLazyBuffer.from_sharded(self.copy_to_device(self.device[0]), devices, axis, bounds)

    # ---- elementwise ----
    def e(self, op, *in_srcs: MultiLazyBuffer, arg: Any = None) -> MultiLazyBuffer:
        srcs = (self,) + in_srcs
        for s in srcs:
            if not isinstance(s, MultiLazyBuffer):
                raise RuntimeError(f"{op} mixes a tensor on {self.device} with one on {s.device}")
            if s.device != self.device:
                raise RuntimeError(f"{op} mixes tensors on {self.device} and {s.device}")
        # the placement of the first split operand wins; the others are brought to it
        lead = next((s for s in srcs if s.axis is not None), self)
        placed = [s.lbs if (s.axis, s.bounds) == (lead.axis, lead.bounds) else _place(s, lead.axis, lead.bounds)
                  for s in srcs]
        return MultiLazyBuffer([lbs[0].e(op, *lbs[1:], arg=arg) for lbs in zip(*placed)], lead.axis)

    def cast(self, dtype, bitcast: bool = False) -> MultiLazyBuffer:
        return MultiLazyBuffer([lb.cast(dtype, bitcast) for lb in self.lbs], self.axis)

    def contiguous(self) -> MultiLazyBuffer:
        return MultiLazyBuffer([lb.contiguous() for lb in self.lbs], self.axis)

    def clone(self) -> MultiLazyBuffer:
        """Each piece copied into a buffer of its own (mlops.Clone)."""
        return MultiLazyBuffer([LazyBuffer.loadop(LoadOps.CONTIGUOUS, lb.shape, lb.dtype, lb.device, srcs=(lb,))
                                for lb in self.lbs], self.axis)

    def const(self, val, shape=None) -> MultiLazyBuffer:
        """A constant with this placement (or, for another `shape`, replicated in that shape)."""
        if shape is None or tuple(shape) == self.shape:
            return MultiLazyBuffer([lb.const(val) for lb in self.lbs], self.axis)
        return MultiLazyBuffer([lb.const(val, shape) for lb in self.lbs], None)

    def assign(self, x: MultiLazyBuffer) -> MultiLazyBuffer:
        if not isinstance(x, MultiLazyBuffer) or x.device != self.device:
            raise RuntimeError(f"assign device mismatch: {x.device} into {self.device}")
        # NOTE: as in tinygrad 0.9, the placement is part of what an assign must match: a value split another way
        # is resharded by the caller (`shard`), never moved behind its back on every write
        if x.axis != self.axis:
            raise ArgumentError(f"assign of a tensor split along axis {x.axis} into one split along axis {self.axis}: "
                                f"shard it to axis {self.axis} first")
        lbs = x.lbs if (x.axis, x.bounds) == (self.axis, self.bounds) else _place(x, self.axis, self.bounds)
        return MultiLazyBuffer([a.assign(b) for a, b in zip(self.lbs, lbs)], self.axis)

    # ---- reduce ----
    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> MultiLazyBuffer:
        """Reduce over `axis` on each device; across the split axis the partial results are then all-reduced."""
        local = [lb.r(op, axis) for lb in self.lbs]
        if self.axis is not None and self.axis in axis:
            return MultiLazyBuffer(all_reduce(op, local), None)
        return MultiLazyBuffer(local, self.axis)

    # ---- movement ----
    def reshape(self, new_shape: tuple) -> MultiLazyBuffer:
        new_shape = tuple(new_shape)
        if self.axis is None:
            return MultiLazyBuffer([lb.reshape(new_shape) for lb in self.lbs], None)
        found = _reshaped_axis(self.shape, self.axis, self.bounds, new_shape)
        if found is None:
            return self._replicated().reshape(new_shape)
        new_axis, per = found
        return MultiLazyBuffer([lb.reshape(tuple(p if d == new_axis else s for d, s in enumerate(new_shape)))
                                for lb, p in zip(self.lbs, per)], new_axis)

    def permute(self, order) -> MultiLazyBuffer:
        order = tuple(order)
        axis = None if self.axis is None else order.index(self.axis)
        return MultiLazyBuffer([lb.permute(order) for lb in self.lbs], axis)

    def expand(self, new_shape: tuple) -> MultiLazyBuffer:
        new_shape = tuple(new_shape)
        if self.axis is not None and new_shape[self.axis] != self.shape[self.axis]:
            # broadcasting the split axis itself (a size-1 range left by a shrink): every device needs it
            return self._replicated().expand(new_shape)
        return MultiLazyBuffer([lb.expand(_local_shape(new_shape, self.axis, lb)) for lb in self.lbs], self.axis)

    def pad(self, arg) -> MultiLazyBuffer:
        arg = tuple(arg)
        if self.axis is None or arg[self.axis] == (0, 0):
            return MultiLazyBuffer([lb.pad(arg) for lb in self.lbs], self.axis)
        # the split axis grows at its ends: the first device's range gains the front, the last one's the back
        before, after = arg[self.axis]
        last = len(self.lbs) - 1
        return MultiLazyBuffer([lb.pad(tuple(((before if i == 0 else 0, after if i == last else 0) if d == self.axis
                                              else p) for d, p in enumerate(arg)))
                                for i, lb in enumerate(self.lbs)], self.axis)

    def shrink(self, arg) -> MultiLazyBuffer:
        arg = tuple(arg)
        if self.axis is None or arg[self.axis] == (0, self.shape[self.axis]):
            return MultiLazyBuffer([lb.shrink(_local_arg(arg, self.axis, lb)) for lb in self.lbs], self.axis)
        # each device keeps the part of its range inside the kept one (maybe nothing)
        lo, hi = arg[self.axis]
        out = []
        for lb, (blo, bhi) in zip(self.lbs, self.bounds):
            a, b = min(max(lo, blo), bhi), max(min(hi, bhi), blo)
            b = max(a, b)
            out.append(lb.shrink(tuple((a - blo, b - blo) if d == self.axis else p for d, p in enumerate(arg))))
        return MultiLazyBuffer(out, self.axis)

    def stride(self, arg) -> MultiLazyBuffer:
        arg = tuple(arg)
        if self.axis is None or arg[self.axis] == 1:
            return MultiLazyBuffer([lb.stride(arg) for lb in self.lbs], self.axis)
        if arg[self.axis] != -1:
            return self._replicated().stride(arg)
        # a flip of the split axis: device i takes the flipped range of device n - 1 - i
        flipped = [lb.stride(arg) for lb in reversed(self.lbs)]
        return MultiLazyBuffer([copy(lb, d) for lb, d in zip(flipped, self.device)], self.axis)

    def _replicated(self) -> MultiLazyBuffer:
        return self if self.axis is None else MultiLazyBuffer(all_gather(self.lbs, self.axis), None)


# ---- placement ----

def _check_bounds(shape: tuple, axis: int, devices: tuple[str, ...],
                  bounds: tuple[tuple[int, int], ...] | None) -> tuple[tuple[int, int], ...]:
    if not 0 <= axis < len(shape):
        raise ArgumentError(f"shard axis {axis} is out of range for shape {shape}")
    n = shape[axis]
    if not isinstance(n, int):
        raise ArgumentError(f"can't shard the symbolic axis {axis} of shape {shape}")
    if bounds is None:
        return even_bounds(n, len(devices))
    bounds = tuple(tuple(b) for b in bounds)
    if len(bounds) != len(devices) or bounds[0][0] != 0 or bounds[-1][1] != n or \
            any(a[1] != b[0] for a, b in zip(bounds, bounds[1:])) or any(lo > hi for lo, hi in bounds):
        raise ArgumentError(f"bounds {bounds} don't split axis {axis} of size {n} in order over {len(devices)} devices")
    return bounds


def _place(x: MultiLazyBuffer, axis: int | None, bounds: tuple[tuple[int, int], ...] | None) -> list[LazyBuffer]:
    """`x`'s pieces rearranged over the same devices: replicated (`axis` None) or split along `axis` into `bounds`."""
    if x.axis is None:
        # every device already holds everything: it keeps its own range
        return x.lbs if axis is None else [slice_axis(lb, axis, lo, hi) for lb, (lo, hi) in zip(x.lbs, bounds)]
    if axis is None:
        return all_gather(x.lbs, x.axis)
    out = []
    for dev, (lo, hi) in zip(x.device, bounds):
        pieces = []
        for lb, (blo, bhi) in zip(x.lbs, x.bounds):
            if axis == x.axis:
                a, b = max(lo, blo), min(hi, bhi)
                if a < b:
                    pieces.append(copy(slice_axis(lb, axis, a - blo, b - blo), dev))
            elif bhi > blo:
                pieces.append(copy(slice_axis(lb, axis, lo, hi), dev))
        if not pieces:
            # an empty range: nothing to move
            shape = tuple(hi - lo if d == axis else s for d, s in enumerate(x.shape))
            pieces = [x.lbs[0].const(0, shape).copy_to_device(dev)]
        out.append(concat(pieces, x.axis))
    return out


def _local_shape(shape: tuple, axis: int | None, lb: LazyBuffer) -> tuple:
    return shape if axis is None else tuple(lb.shape[d] if d == axis else s for d, s in enumerate(shape))


def _local_arg(arg: tuple, axis: int | None, lb: LazyBuffer) -> tuple:
    return arg if axis is None else tuple((0, lb.shape[d]) if d == axis else p for d, p in enumerate(arg))


def _reshaped_axis(shape: tuple, axis: int, bounds: tuple, new_shape: tuple) -> tuple[int, list[int]] | None:
    """Where the split survives a reshape: (the new split dim, each device's size along it), or None when a
    device's range does not map to a range of one dim of `new_shape` (the reshape then needs a gather).

    The range [lo, hi) of `axis` is the flat range [lo * inner, hi * inner) inside each block of the dims before
    it (inner: the product of the dims after it). A new dim with the same product of dims before it and inner
    product `new_inner` holds that range as [lo * inner / new_inner, hi * inner / new_inner) when every bound
    divides evenly."""
    if not all(isinstance(s, int) for s in (*shape, *new_shape)):
        return None
    outer, inner = prod(shape[:axis]), prod(shape[axis + 1:])
    for d in range(len(new_shape)):
        if prod(new_shape[:d]) != outer:
            continue
        new_inner = prod(new_shape[d + 1:])
        if new_inner == 0 or new_shape[d] * new_inner != shape[axis] * inner:
            continue
        if all((b * inner) % new_inner == 0 for lo_hi in bounds for b in lo_hi):
            return d, [(hi - lo) * inner // new_inner for lo, hi in bounds]
    return None
