"""Tensor: the user-facing n-dimensional array with autograd. Every method here is built from mlops Functions.

>>> from tinygrad import Tensor
>>> (Tensor([1.0, 2.0]) * 3).tolist()
[3.0, 6.0]
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, ClassVar, Sequence, Union

import numpy as np

import tinygrad.mlops as F
from tinygrad.device import Device
from tinygrad.dtype import ConstType, DType, dtypes, to_dtype
from tinygrad.engine.plan import realize_lazybuffers
from tinygrad.errors import ArgumentError
from tinygrad.helpers import all_int, prod, toposort
from tinygrad.lazy import LazyBuffer
from tinygrad.locks import ENGINE_LOCK
from tinygrad.multi import MultiLazyBuffer, canonical_devices
from tinygrad.ops import LoadOps
from tinygrad.shape.symbolic import Node, sint, sym_infer
from tinygrad.tensor_binary import BinaryMixin
from tinygrad.tensor_creation import CreationMixin
from tinygrad.tensor_elementwise import ElementwiseMixin
from tinygrad.tensor_movement import MovementMixin
from tinygrad.tensor_processing import ProcessingMixin
from tinygrad.tensor_reduce import ReduceMixin

TensorLike = Union["Tensor", ConstType]
# tensors backward() ran from, to be realized with the next schedule (see backward)
_realize_with_next: list[weakref.ref] = []


# tinygrad 0.9 defined the autograd Function here, and code that writes its own imports it from this module
Function = F.Function


class Tensor(CreationMixin, MovementMixin, ReduceMixin, ElementwiseMixin, BinaryMixin, ProcessingMixin):
    """A lazily evaluated n-dimensional array that can compute gradients. See the module docstring."""
    __slots__ = ("lazydata", "requires_grad", "grad", "_ctx", "__weakref__")
    training: ClassVar[bool] = False
    no_grad: ClassVar[bool] = False

    class train(contextlib.ContextDecorator):  # noqa: N801 - tinygrad's public spelling
        """`with Tensor.train():` sets Tensor.training (dropout, batchnorm statistics) for the block."""

        def __init__(self, mode: bool = True):
            self.mode = mode

        def __enter__(self):
            self.prev, Tensor.training = Tensor.training, self.mode

        def __exit__(self, *exc):
            Tensor.training = self.prev

    class inference_mode(contextlib.ContextDecorator):  # noqa: N801
        """`with Tensor.inference_mode():` sets Tensor.no_grad: results record no autograd graph."""

        def __init__(self, mode: bool = True):
            self.mode = mode

        def __enter__(self):
            self.prev, Tensor.no_grad = Tensor.no_grad, self.mode

        def __exit__(self, *exc):
            Tensor.no_grad = self.prev

    def __init__(self, data: Any, device: str | tuple[str, ...] | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        """`data`: a LazyBuffer, a Python scalar, a nested list or tuple of bool/int/float, a numpy array, bytes
        (as uint8), a symbolic value (its variables bound) or None (an empty tensor). `dtype` converts the data;
        a bfloat16 tensor is made in float32 and cast. A tuple of devices replicates the data on each of them (see
        `shard`); a MultiLazyBuffer keeps its placement on the same devices, and is gathered on one device (by default
        the default device) otherwise."""
        if type(device) is tuple or type(device) is list or type(data) is MultiLazyBuffer:
            self._init_multi(data, device, dtype, requires_grad)
            return
        # new data never goes onto a DISK device (a file): see Device.storage
        device = Device.canonicalize(device) if isinstance(data, LazyBuffer) else Device.storage(device)
        dtype = to_dtype(dtype) if dtype is not None else None
        self.grad: Tensor | None = None
        self.requires_grad: bool | None = requires_grad
        self._ctx: F.Function | None = None
        if isinstance(data, Node) and not data.vars():
            data = int(data)  # a symbolic expression that folded to a number
        if isinstance(data, LazyBuffer):
            if dtype is not None and dtype != data.dtype:
                raise TypeError(f"LazyBuffer has dtype {data.dtype}, not {dtype}")
            lb = data
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dt = dtype or dtypes.from_py(data)
            val = dtypes.as_const(data, dt)
            if dtypes.is_int(dt) and not dtypes.min(dt) <= val <= dtypes.max(dt):
                raise OverflowError(f"{data!r} is out of bounds for {dt}")
            lb = LazyBuffer.loadop(LoadOps.CONST, (), dt, device, arg=val)
        elif isinstance(data, Node):
            # a symbolic value (e.g. a bound Variable): a constant whose value is passed to the kernel at launch
            if not all(v._val is not None for v in data.vars()):
                raise ArgumentError(f"can't make a Tensor of {data!r}: its variables must be bound")
            lb = LazyBuffer.loadop(LoadOps.CONST, (), dtype or dtypes.int32, device, arg=data)
        elif data is None:
            lb = LazyBuffer.loadop(LoadOps.EMPTY, (0,), dtype or dtypes.default_float, device)
        elif isinstance(data, (bytes, bytearray)):
            lb = LazyBuffer.fromcpu(np.frombuffer(bytes(data), np.uint8))
        elif isinstance(data, (list, tuple)):
            arr = _np_from(data, dtype)
            lb = LazyBuffer.fromcpu(arr)
            if dtype is None and arr.dtype.kind == "f" and dtypes.default_float.np is None:
                dtype = dtypes.default_float  # a bfloat16 default: made in float32 by _np_from, cast below
        elif isinstance(data, (np.ndarray, np.generic)):
            arr = np.asarray(data)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"can't make a Tensor from numpy dtype {arr.dtype}")
            if not arr.dtype.isnative:
                arr = arr.astype(arr.dtype.newbyteorder("="))
            if dtype is not None:
                arr = arr.astype(dtype.np if dtype.np is not None else np.float32)
            lb = LazyBuffer.fromcpu(arr)
        else:
            raise TypeError(f"can't create a Tensor from {type(data).__name__}: {data!r}")
        if dtype is not None and lb.dtype != dtype:
            lb = lb.cast(dtype)
        if lb.device != device and device.startswith("DISK"):
            _check_writable(device)
        self.lazydata: LazyBuffer | MultiLazyBuffer = lb if lb.device == device else lb.copy_to_device(device)

    def _init_multi(self, data: Any, device, dtype, requires_grad) -> None:
        """__init__ for a tuple of devices or a MultiLazyBuffer: off the single-device path, which stays as it was."""
        devices = canonical_devices(device) if device is not None and type(device) is not str else None
        if type(data) is not MultiLazyBuffer:
            # made on the first device, then replicated
            data = Tensor(data, device=devices[0], dtype=dtype).lazydata
        elif dtype is not None and to_dtype(dtype) != data.dtype:
            raise TypeError(f"MultiLazyBuffer has dtype {data.dtype}, not {to_dtype(dtype)}")
        self.grad, self.requires_grad, self._ctx = None, requires_grad, None
        if type(data) is LazyBuffer:
            self.lazydata = MultiLazyBuffer.from_sharded(data, devices, None)
        elif devices is None:
            # as in tinygrad 0.9: a MultiLazyBuffer given no devices is gathered on the default device
            self.lazydata = data.copy_to_device(Device.canonicalize(device))
        else:
            self.lazydata = data if data.device == devices else data.reshard(devices, None)

    # ---- properties ----
    @property
    def device(self) -> str | tuple[str, ...]:
        """The device's canonical name, or for a tensor on several devices (see `shard`) the tuple of them."""
        return self.lazydata.device

    @property
    def shape(self) -> tuple[sint, ...]:
        return self.lazydata.shape

    @property
    def dtype(self) -> DType:
        return self.lazydata.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> sint:
        """The number of elements: the product of the shape (symbolic when a dim is).

        >>> Tensor.ones(2, 3).numel()
        6
        """
        return prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element of this tensor's dtype.

        >>> Tensor([1.0]).element_size(), Tensor([1], dtype=dtypes.int64).element_size()
        (4, 8)
        """
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """Bytes the data takes: numel() * element_size().

        >>> Tensor.zeros(2, 3).nbytes()
        24
        """
        return self.numel() * self.element_size()

    def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
        """The shape, or one dim of it (as torch.Tensor.size)."""
        return self.shape if dim is None else self.shape[dim if dim >= 0 else dim + self.ndim]

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float type (half, bfloat16, float or double).

        >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
        (True, False)
        """
        return dtypes.is_float(self.dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        grad = self.grad.lazydata if self.grad is not None else None
        return f"<Tensor {self.lazydata!r} on {self.device} with grad {grad!r}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self):
        raise TypeError("the truth value of a Tensor is ambiguous: use .item() or .numpy()")

    # ---- realization ----
    def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
        """Compute this tensor's data now (scheduling, compiling and running its kernels), and that of the tensors
        in `lst` in the same schedule (tinygrad 0.9's `Tensor.realize(loss, *opt.schedule_step())`)."""
        lb = self.lazydata
        if not lst and not _realize_with_next and type(lb) is LazyBuffer:
            if lb.is_folded_const():
                self.lazydata = lb = lb.contiguous()  # what the folded-away kernel would have stored
            realize_lazybuffers([lb])  # the eager path, every op: what corealize does for one tensor, less its steps
        else:
            Tensor.corealize([self, *lst])
        return self

    @staticmethod
    def corealize(lst: Sequence[Tensor]) -> None:
        """Realize every tensor of `lst` in one schedule, so kernels they share run once.

        >>> a, b = Tensor([1]) + 1, Tensor([2]) * 2
        >>> Tensor.corealize([a, b])
        >>> a.tolist(), b.tolist()
        ([2], [4])
        """
        for t in lst:
            if type(t.lazydata) is LazyBuffer and t.lazydata.is_folded_const():
                t.lazydata = t.lazydata.contiguous()  # what the folded-away kernel would have stored
        outs = [t.lazydata for t in lst]
        if _realize_with_next:
            # taken with one slice deletion (atomic under the GIL): a backward() in another thread meanwhile keeps
            # its entry for the next schedule instead of losing it to a clear()
            waiting = _realize_with_next[:]
            del _realize_with_next[:len(waiting)]
            outs += [lb for lb in (r() for r in waiting) if lb is not None]
        realize_lazybuffers(_single_device(outs))

    def schedule(self):
        """The list of ScheduleItems (kernels and copies) that would compute this tensor, without running them.

        >>> a = Tensor([1.0, 2.0]).realize()
        >>> [type(si).__name__ for si in (a * 2).schedule()]
        ['ScheduleItem']
        """
        from tinygrad.engine.schedule import create_schedule
        return create_schedule(self.lazydata.lbs)

    def _data(self) -> memoryview:
        """The bytes of this tensor, laid out contiguously (realizing it, and any constant, into a buffer)."""
        if 0 in self.shape:
            return memoryview(bytearray(0))
        if type(self.lazydata) is MultiLazyBuffer:
            # gathered on the first device
            return self.to(self.device[0])._data()
        if self.device.startswith("DISK"):
            lb = self.lazydata
            if lb is lb.base and lb.realized is not None:
                return lb.realized.as_buffer()  # the file's bytes, read through the map
            # nothing computes on DISK: a slice of a file is read through a copy
            return self.to(Device.DEFAULT)._data()
        with ENGINE_LOCK:  # realized and read in one turn: no other thread runs kernels in between
            t = self.contiguous().realize()
            return t.lazydata.base.realized.as_buffer()

    def numpy(self) -> np.ndarray:
        """A numpy copy of this tensor's data."""
        if not all_int(self.shape):
            # a symbolic shape reads out at the values its variables are bound to
            return self.reshape(tuple(s if isinstance(s, int) else sym_infer(s, {}) for s in self.shape)).numpy()
        if self.dtype.np is None:
            # computed on a device that can (a DISK tensor is only bytes in a file)
            src = self.to(Device.DEFAULT) if str(self.device).startswith("DISK") else self
            return src.cast(dtypes.float32).numpy()
        if 0 in self.shape:
            return np.zeros(self.shape, dtype=self.dtype.np)
        return np.frombuffer(self._data(), dtype=self.dtype.np).reshape(self.shape).copy()

    def item(self) -> ConstType:
        """The single element of a one-element tensor, as a Python bool, int or float.

        >>> Tensor([[3.5]]).item()
        3.5
        """
        if self.numel() != 1:
            raise ArgumentError(f"item() needs exactly one element, the tensor has shape {self.shape}")
        return self.numpy().reshape(-1)[0].item()

    def tolist(self):
        """The data as nested Python lists (a 0-d tensor gives a scalar), realizing it if needed.

        >>> Tensor([[1, 2], [3, 4]]).tolist()
        [[1, 2], [3, 4]]
        """
        return self.numpy().tolist()

    def data(self) -> memoryview:
        """The data as a memoryview in this tensor's shape and element format (realizing it, laid out contiguously).

        >>> Tensor([[1, 2], [3, 4]]).data().tolist()
        [[1, 2], [3, 4]]
        >>> Tensor(3).data().tolist()
        3
        """
        # a 0-d tensor gives a 0-d memoryview (tolist() is the scalar itself), as in tinygrad 0.9; memoryview can't
        # take a shape with a 0 in it, so an empty tensor's view is flat
        if 0 in self.shape:
            return self._data().cast(self.dtype.fmt)
        return self._data().cast(self.dtype.fmt, self.shape)

    def to(self, device: str | tuple[str, ...] | None) -> Tensor:
        """This tensor on `device` (a copy; self when it is already there); the gradient moves with it. A tensor on
        several devices is gathered onto one; a tuple of devices replicates the tensor on each.

        >>> Tensor([1, 2]).to("CPU").device
        'CPU'
        """
        device = canonical_devices(device) if isinstance(device, (tuple, list)) else Device.canonicalize(device)
        if device == self.device:
            return self
        if self.requires_grad and not Tensor.no_grad and type(device) is str and type(self.device) is str and \
                not self.device.startswith("DISK") and not device.startswith("DISK"):
            # in the middle of a graph: the gradient flows back to this tensor (on its device)
            ret = F.ToDevice.apply(self, device=device)
        else:
            ret = Tensor(self.lazydata, device, requires_grad=self.requires_grad)
        if self.grad is not None:
            ret.grad = self.grad.to(device)
        return ret

    def shard(self, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
        """This tensor spread over `devices`: a copy on each (`axis` None), or split along `axis` into ranges of
        ceil(size / devices), one per device in order (the last ones shorter or empty, as in 0.9). The result's
        `device` is the tuple of canonical names and its `lazydata` a MultiLazyBuffer; ops on it run on every
        device. A tensor already on several devices is placed anew. Differentiable: the gradient of the result
        goes back to this tensor's placement.

        >>> t = Tensor.arange(6).reshape(3, 2).shard(("CLANG:0", "CLANG:1"), axis=0)
        >>> t.device, t.lazydata.bounds, t.tolist()
        (('CLANG', 'CLANG:1'), ((0, 2), (2, 3)), [[0, 1], [2, 3], [4, 5]])
        """
        devices = canonical_devices(devices)
        if axis is not None:
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise TypeError(f"shard axis must be an int or None, got {axis!r}")
            if not -self.ndim <= axis < self.ndim:
                raise ArgumentError(f"shard axis {axis} is out of range for shape {self.shape}")
            axis %= self.ndim
        if self.requires_grad and not Tensor.no_grad:
            # in the middle of a graph: the gradient flows back to this tensor
            return F.Shard.apply(self, devices=devices, axis=axis)
        lb = self.lazydata
        mlb = lb.reshard(devices, axis) if type(lb) is MultiLazyBuffer else MultiLazyBuffer.from_sharded(lb, devices,
                                                                                                         axis)
        return Tensor(mlb, device=devices, requires_grad=self.requires_grad)

    def shard_(self, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
        """`shard` in place: this tensor's data is spread over `devices`."""
        self.lazydata = self.shard(devices, axis).lazydata
        return self

    def to_(self, device: str | None) -> Tensor:
        """Move this tensor (and its gradient) to `device` in place."""
        moved = self.to(device)
        self.lazydata, self.grad = moved.lazydata, moved.grad
        return self

    def clone(self) -> Tensor:
        """A copy with a buffer of its own (gradients flow back to this tensor)."""
        return F.Clone.apply(self)

    def detach(self) -> Tensor:
        """The same data as a new tensor cut off from the autograd graph (requires_grad False).

        >>> Tensor([1.0], requires_grad=True).detach().requires_grad
        False
        """
        return Tensor(self.lazydata, device=self.device, requires_grad=False)

    def assign(self, x: TensorLike) -> Tensor:
        """Replace this tensor's value with `x` (same shape and dtype), keeping the Tensor object."""
        disk = type(self.device) is str and self.device.startswith("DISK")
        if disk:
            _check_writable(self.device)
        x = x if isinstance(x, Tensor) else Tensor(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:
            raise ArgumentError(f"assign shape mismatch: {x.shape} into {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"assign dtype mismatch: {x.dtype} into {self.dtype}")
        if disk:
            return self._assign_disk(x)
        if x.device != self.device:
            raise RuntimeError(f"assign device mismatch: {x.device} into {self.device}")
        self.lazydata = self.lazydata.assign(x.lazydata)
        return self

    def _assign_disk(self, x: Tensor) -> Tensor:
        """assign into a DISK tensor of a file opened for writing: x's bytes written over this tensor's range of
        the file, now (a file is not a device that runs the graph's kernels)."""
        lb = self.lazydata
        base = lb.base
        if base.realized is None:
            Tensor(base, device=self.device).realize()  # Tensor.empty(n, device="DISK:..."): the file's first bytes
        views = lb.st.views
        v = views[0]
        expected, acc = [], 1
        for size in reversed(v.shape):
            expected.append(0 if size == 1 else acc)
            acc *= size
        if len(views) != 1 or v.mask is not None or not all_int((*v.shape, *v.strides, v.offset)) or \
                any(size != 1 and st != e for size, st, e in zip(v.shape, v.strides, reversed(expected))):
            raise ArgumentError(f"can't assign into this view of {self.device}: only a contiguous range of a file "
                                "can be written")
        isz = lb.dtype.itemsize
        dest = base.realized._buf[v.offset * isz:(v.offset + acc) * isz]
        data = x.to(Device.DEFAULT)._data() if x.device != Device.DEFAULT else x._data()
        Device[self.device].allocator.copyin(dest, data.cast("B") if data.format != "B" else data)
        return self

    def replace(self, x: Tensor) -> Tensor:
        """Make this tensor hold `x`'s data (same shape; its device and dtype may differ), keeping the Tensor object:
        how a model's weights are swapped for sharded or converted versions. Nothing is copied or written.

        >>> w = Tensor([1.0, 2.0])
        >>> w.replace(Tensor([3, 4])).tolist()
        [3, 4]
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"replace takes a Tensor, not {type(x).__name__}")
        if x.shape != self.shape:
            raise ArgumentError(f"replace shape mismatch: {x.shape} into {self.shape}")
        if x.requires_grad or self._ctx is not None:
            raise RuntimeError("replace works on tensors outside the autograd graph (x must not require grad, and "
                               "this tensor must not be the result of an op that does)")
        self.lazydata = x.lazydata
        return self

    def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
        """Set requires_grad in place (True: gradients are kept for this tensor) and return self.

        >>> Tensor([1.0]).requires_grad_().requires_grad
        True
        """
        self.requires_grad = requires_grad
        return self

    # ---- autograd ----
    def _toposort(self) -> list[Tensor]:
        """Every tensor this one depends on through Functions, inputs before outputs."""
        return toposort(self, lambda t: t._ctx.parents if t._ctx is not None else ())

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(leaf) into every leaf's `.grad` that requires grad. Holds ENGINE_LOCK: threads whose
        graphs share leaves (one model's weights) accumulate into the same `.grad`s, one backward at a time."""
        with ENGINE_LOCK:
            return self._backward(gradient)

    def _backward(self, gradient: Tensor | None) -> Tensor:
        # NOTE: requires_grad None (never set, the default) is let through, as 0.9 did: only a tensor known not to
        # require grad (made from comparisons, or set False) is refused, as PyTorch refuses it
        if self._ctx is None and self.requires_grad is False:
            raise RuntimeError("backward() on a tensor that does not require grad: nothing it was computed from "
                               "requires grad (comparisons are not differentiable and cut the graph)")
        if gradient is None:
            if self.shape not in ((), (1,)) and self.numel() != 1:
                raise RuntimeError(f"backward() without a gradient needs a scalar, this tensor has shape {self.shape}")
            gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False).reshape(self.shape)
        if gradient.shape != self.shape:
            raise ArgumentError(f"gradient shape {gradient.shape} doesn't match tensor shape {self.shape}")
        self.grad = gradient
        for t0 in reversed(self._toposort()):
            if t0._ctx is None or t0.grad is None:
                continue
            ctx = t0._ctx
            grads = ctx.backward(t0.grad.lazydata)
            grads = [Tensor(g, device=g.device, requires_grad=False) if g is not None else None
                     for g in (grads if isinstance(grads, tuple) else (grads,))]
            for t, g in zip(ctx.parents, grads):
                if g is None or not t.requires_grad:
                    continue
                if g.shape != t.shape:
                    raise RuntimeError(f"internal error: gradient shape {g.shape} != tensor shape {t.shape} "
                                       f"in {type(ctx).__name__}.backward")
                gl, tl = g.lazydata, t.lazydata
                if type(gl) is MultiLazyBuffer and t._ctx is None and (gl.axis, gl.bounds) != (tl.axis, tl.bounds):
                    # a leaf's gradient is placed as the leaf is (a replicated weight's may come out split along the
                    # batch), so an optimizer can assign it into the leaf. NOTE: leaves only: an intermediate's
                    # gradient flows on to its Function's backward as it is (moving it could gather a whole
                    # expanded activation, where the next reduce would have all-reduced a small result)
                    g = Tensor(gl.reshard(tl.device, tl.axis, tl.bounds), device=tl.device, requires_grad=False)
                t.grad = g if t.grad is None else (t.grad + g)
            del t0._ctx
            t0._ctx = None
        # the loss is usually read after the optimizer step overwrote the weights it was computed from: it is
        # realized with the next schedule (the step's), which runs every read of a buffer before writing it
        for lb in self.lazydata.lbs:
            if lb.base.realized is None:
                _realize_with_next.append(weakref.ref(lb))
        return self


def _check_writable(device: str) -> None:
    """Raise DiskReadOnlyError unless DISK `device` was opened for writing (see tinygrad/runtime/ops_disk.py)."""
    dev = Device[device]
    if not dev.writable:
        from tinygrad.runtime.ops_disk import DiskReadOnlyError, read_only_message
        raise DiskReadOnlyError(read_only_message(device))


def _single_device(lbs: list) -> list[LazyBuffer]:
    """`lbs` with each MultiLazyBuffer replaced by its per-device LazyBuffers."""
    for lb in lbs:
        if type(lb) is not LazyBuffer:
            break
    else:
        return lbs
    return [x for lb in lbs for x in (lb.lbs if type(lb) is MultiLazyBuffer else (lb,))]


def _np_from(data: list | tuple, dtype: DType | None) -> np.ndarray:
    """Nested lists or tuples of bool/int/float as a numpy array of `dtype` (by default: float if any leaf is a
    float, else int if any is an int, else bool; bfloat16, which numpy lacks, is made in float32 and cast later)."""
    try:
        arr = np.array(data)  # numpy's own inference tells the kinds of the leaves, at C speed
    except ValueError as e:
        raise ArgumentError(f"can't make a Tensor from a ragged {type(data).__name__}: {e}") from None
    if arr.dtype.kind not in "biuf":
        # strings, None, Tensors or ints too big for numpy: name the first leaf that isn't a bool, int or float
        stack = [data]
        while stack:
            x = stack.pop()
            if isinstance(x, (list, tuple)):
                stack.extend(x)
            elif not isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)):
                raise TypeError(f"can't make a Tensor from a list holding {type(x).__name__}: {x!r}")
        if dtype is None or not dtypes.is_float(dtype):
            raise OverflowError(f"can't make a Tensor of {dtype or 'ints'}: a value is beyond every int dtype")
        arr = np.array(data, dtype=np.float64)
    if dtype is None:
        dtype = {"b": dtypes.bool, "f": dtypes.default_float}.get(arr.dtype.kind, dtypes.default_int)
    if dtypes.is_int(dtype) and arr.dtype.kind in "iu" and arr.size and \
            (arr.min() < dtypes.min(dtype) or arr.max() > dtypes.max(dtype)):
        raise OverflowError(f"can't make a Tensor of {dtype}: values [{arr.min()}, {arr.max()}] are out of its bounds")
    return arr.astype(dtype.np if dtype.np is not None else np.float32)

