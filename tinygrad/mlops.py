"""The differentiable ops: each Function's forward and backward, written on LazyBuffers.

Everything Tensor can do is built from these few Functions, and they in turn from the primitive ops of ops.py.
`backward` receives the gradient of the output and returns one gradient per input (None where not needed).
"""
from __future__ import annotations

import math
from typing import Any

from tinygrad.device import Device
from tinygrad.dtype import DType, dtypes
from tinygrad.helpers import argsort
from tinygrad.lazy import LazyBuffer
from tinygrad.multi import MultiLazyBuffer
from tinygrad.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from tinygrad.shape.symbolic import sint


class Function:
    """One application of a differentiable op: remembers its parents so `backward` can reach them."""

    # set by apply (there is no __init__: apply fills these in directly, since every Tensor op passes there)
    device: str
    needs_input_grad: list
    requires_grad: bool | None
    parents: tuple
    metadata: Any

    # False for the movement ops, which view a DISK tensor's bytes where they are; an op that computes moves its
    # DISK inputs to the default device first (a file is not a device that runs kernels, nor one to store results)
    computes = True
    # False for comparisons: their result is a boolean with no gradient, cut from the graph as in PyTorch (a loss
    # made only of it does not require grad, and its backward raises)
    differentiable = True

    def forward(self, *args, **kwargs) -> LazyBuffer:
        raise NotImplementedError(f"forward not implemented for {type(self)}")

    def backward(self, *args, **kwargs):
        raise RuntimeError(f"backward not implemented for {type(self)}")

    @classmethod
    def apply(cls, *x, **kwargs):
        """Run forward on the inputs' LazyBuffers and wrap the result in a Tensor that remembers this Function."""
        # NOTE: the result has the first input's class (Tensor, or a subclass of it): tensor.py imports this module,
        # so this module never names Tensor
        tensor_cls = type(x[0])
        ctx = cls.__new__(cls)
        needs = [t.requires_grad for t in x]
        rg = True if True in needs else (None if None in needs else False)
        if not cls.differentiable:
            rg = False
        lbs = [t.lazydata for t in x]
        if cls.computes and not kwargs.get("bitcast"):
            for lb in lbs:
                d = lb.device
                if d.__class__ is str and d.startswith("DISK"):
                    lbs = _off_disk(lbs)
                    break
        ctx.device, ctx.needs_input_grad, ctx.requires_grad, ctx.metadata = lbs[0].device, needs, rg, None
        if rg:
            ctx.parents = x
        ret = object.__new__(tensor_cls)
        ret.lazydata = ctx.forward(*lbs, **kwargs)
        ret.requires_grad, ret.grad = rg, None
        ret._ctx = ctx if rg and not tensor_cls.no_grad else None
        return ret


def _off_disk(lbs: list) -> list:
    return [lb.copy_to_device(Device.DEFAULT) if lb.device.__class__ is str and lb.device.startswith("DISK") else lb
            for lb in lbs]


# ---- unary ----

class Contiguous(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.contiguous()

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output


class Clone(Function):
    """A copy in a buffer of its own, even where `contiguous()` would have nothing to do."""

    def forward(self, x: LazyBuffer) -> LazyBuffer:
        if type(x) is not LazyBuffer:
            return x.clone()  # a MultiLazyBuffer: each device's piece
        return LazyBuffer.loadop(LoadOps.CONTIGUOUS, x.shape, x.dtype, x.device, srcs=(x,))

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output


class ContiguousBackward(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.contiguous()


class Cast(Function):
    def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        self.input_dtype, self.bitcast = x.dtype, bitcast
        return x.cast(dtype, bitcast)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        if self.bitcast:
            raise RuntimeError("bitcast is not differentiable")
        return grad_output.cast(self.input_dtype)


class Neg(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        return x.e(UnaryOps.NEG)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(UnaryOps.NEG)


class Reciprocal(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(UnaryOps.RECIP)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(UnaryOps.NEG).e(BinaryOps.MUL, self.ret).e(BinaryOps.MUL, self.ret)


class Sin(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(UnaryOps.SIN)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        # d/dx sin(x) = cos(x) = sin(pi/2 - x)
        return self.x.const(math.pi / 2).e(BinaryOps.SUB, self.x).e(UnaryOps.SIN).e(BinaryOps.MUL, grad_output)


class Relu(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(BinaryOps.MAX, x.const(0))
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        mask = self.ret.const(0).e(BinaryOps.CMPLT, self.ret)
        return mask.cast(grad_output.dtype).e(BinaryOps.MUL, grad_output)


class Log(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(UnaryOps.LOG2).e(BinaryOps.MUL, x.const(math.log(2)))

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(BinaryOps.DIV, self.x)


class Exp(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(BinaryOps.MUL, x.const(1 / math.log(2))).e(UnaryOps.EXP2)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return self.ret.e(BinaryOps.MUL, grad_output)


class Sqrt(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(UnaryOps.SQRT)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(BinaryOps.DIV, self.ret.e(BinaryOps.MUL, self.ret.const(2)))


class Sigmoid(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        # 1 / (1 + 2^(-x/ln2)) = 1 / (1 + e^-x)
        e = x.e(BinaryOps.MUL, x.const(-1 / math.log(2))).e(UnaryOps.EXP2)
        self.ret = x.const(1).e(BinaryOps.DIV, x.const(1).e(BinaryOps.ADD, e))
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return self.ret.e(BinaryOps.MUL, self.ret.const(1).e(BinaryOps.SUB, self.ret)).e(BinaryOps.MUL, grad_output)


# ---- binary ----

class Less(Function):
    differentiable = False

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.CMPLT, y)

    def backward(self, grad_output: LazyBuffer):
        return None, None


class Eq(Function):
    differentiable = False

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.CMPEQ, y)

    def backward(self, grad_output: LazyBuffer):
        return None, None


class Neq(Function):
    differentiable = False

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.CMPNE, y)

    def backward(self, grad_output: LazyBuffer):
        return None, None


class Xor(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.XOR, y)


class BitwiseAnd(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.AND, y)


class BitwiseOr(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.OR, y)


class Add(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.ADD, y)

    def backward(self, grad_output: LazyBuffer):
        return (grad_output if self.needs_input_grad[0] else None,
                grad_output if self.needs_input_grad[1] else None)


class Sub(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.SUB, y)

    def backward(self, grad_output: LazyBuffer):
        return (grad_output if self.needs_input_grad[0] else None,
                grad_output.e(UnaryOps.NEG) if self.needs_input_grad[1] else None)


class Mul(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        return x.e(BinaryOps.MUL, y)

    def backward(self, grad_output: LazyBuffer):
        return (self.y.e(BinaryOps.MUL, grad_output) if self.needs_input_grad[0] else None,
                self.x.e(BinaryOps.MUL, grad_output) if self.needs_input_grad[1] else None)


class Div(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        return x.e(BinaryOps.DIV, y)

    def backward(self, grad_output: LazyBuffer):
        return (grad_output.e(BinaryOps.DIV, self.y) if self.needs_input_grad[0] else None,
                grad_output.e(UnaryOps.NEG).e(BinaryOps.MUL, self.x)
                .e(BinaryOps.DIV, self.y.e(BinaryOps.MUL, self.y)) if self.needs_input_grad[1] else None)


class Mod(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.MOD, y)


class Maximum(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        self.x, self.y = x, y
        self.ret = x.e(BinaryOps.MAX, y)
        return self.ret

    def backward(self, grad_output: LazyBuffer):
        # where both are equal the gradient is shared, as PyTorch does
        x_is = self.x.e(BinaryOps.CMPEQ, self.ret).cast(grad_output.dtype)
        y_is = self.y.e(BinaryOps.CMPEQ, self.ret).cast(grad_output.dtype)
        share = x_is.e(BinaryOps.ADD, y_is)
        gx = x_is.e(BinaryOps.DIV, share).e(BinaryOps.MUL, grad_output)
        gy = y_is.e(BinaryOps.DIV, share).e(BinaryOps.MUL, grad_output)
        return (gx if self.needs_input_grad[0] else None, gy if self.needs_input_grad[1] else None)


# ---- ternary ----

class Where(Function):
    def forward(self, x: LazyBuffer, y: LazyBuffer, z: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(TernaryOps.WHERE, y, z)

    def backward(self, grad_output: LazyBuffer):
        zero = grad_output.const(0)
        return (None,
                self.x.e(TernaryOps.WHERE, grad_output, zero) if self.needs_input_grad[1] else None,
                self.x.e(TernaryOps.WHERE, zero, grad_output) if self.needs_input_grad[2] else None)


# ---- reduce ----

def _sum_wide(x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    """A sum of a gradient, accumulated in float32 where x is half or bfloat16 (as forward sums are: 2048 + 1 is
    2048 in half, so a long sum there stalls) and cast back."""
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        return x.cast(dtypes.float32).r(ReduceOps.SUM, axis).cast(x.dtype)
    return x.r(ReduceOps.SUM, axis)


class Sum(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.r(ReduceOps.SUM, axis)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.expand(self.input_shape)


class SoftmaxOut(Function):
    """softmax's result `p`, computed from a detached `x`, made a function of `x`: the backward is
    p * (g - sum(g * p)) along `axis`, from the result alone, as PyTorch's is.

    NOTE: through the graph of its ops the backward would recompute exp(x - max) from x, so a training step kept
    both x and p of every softmax until the backward (attention's scores and weights: 2 x 400 MB a layer at GPT-2
    small, batch 8, seq 1024, where PyTorch keeps the weights alone)."""

    def forward(self, x: LazyBuffer, p: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.p, self.axis = p, axis
        return p

    def backward(self, grad_output: LazyBuffer):
        p, g = self.p, grad_output
        # half and bfloat16 sum the row in float32 (a row of thousands of products)
        wide = p.dtype.itemsize < 4
        if wide:
            p, g = p.cast(dtypes.float32), g.cast(dtypes.float32)
        dot = g.e(BinaryOps.MUL, p).r(ReduceOps.SUM, self.axis).expand(p.shape)
        gx = p.e(BinaryOps.MUL, g.e(BinaryOps.SUB, dot))
        return (gx.cast(grad_output.dtype) if wide else gx, None)


class Max(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.x, self.ret, self.axis = x, x.r(ReduceOps.MAX, axis), axis
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        # the gradient is split evenly between every position that holds the max
        # NOTE: for half and bfloat16 the share is computed in float32: the count of ties may be beyond their range of
        # exact integers (and 1/count beyond their precision)
        dt = grad_output.dtype
        wide = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
        hit = self.x.e(BinaryOps.CMPEQ, self.ret.expand(self.x.shape)).cast(wide)
        count = hit.r(ReduceOps.SUM, self.axis).expand(self.x.shape)
        grad = grad_output.expand(self.x.shape)
        share = hit.e(BinaryOps.DIV, count).e(BinaryOps.MUL, grad if wide == dt else grad.cast(wide))
        return share if wide == dt else share.cast(dt)


class Prod(Function):
    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.x, self.axis = x, axis
        return x.r(ReduceOps.PROD, axis)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        # d(prod)/dx_i is the product of the other entries, computed without dividing by zero: with no zero in the
        # group it is prod / x_i, the single zero of a group gets the product of the nonzero entries, and with two
        # or more zeros every entry gets 0 (PyTorch's semantics)
        x, shape = self.x, self.x.shape
        zero = x.const(0)
        is_zero = x.e(BinaryOps.CMPEQ, zero)
        nonzero = is_zero.e(TernaryOps.WHERE, x.const(1), x)
        prod_nz = nonzero.r(ReduceOps.PROD, self.axis).expand(shape)
        n_zeros = is_zero.cast(x.dtype).r(ReduceOps.SUM, self.axis).expand(shape)
        when_zero = n_zeros.e(BinaryOps.CMPEQ, x.const(1)).e(TernaryOps.WHERE, prod_nz, zero)
        when_nonzero = n_zeros.e(BinaryOps.CMPEQ, zero).e(TernaryOps.WHERE, prod_nz.e(BinaryOps.DIV, nonzero), zero)
        others = is_zero.e(TernaryOps.WHERE, when_zero, when_nonzero)
        return others.e(BinaryOps.MUL, grad_output.expand(shape))


# ---- movement ----

class Expand(Function):
    computes = False

    def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
        self.expanded_axis = tuple(i for i, (si, so) in enumerate(zip(x.shape, shape)) if si != so)
        return x.expand(shape)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return _sum_wide(grad_output, self.expanded_axis)


class Reshape(Function):
    computes = False

    def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
        self.input_shape = x.shape
        return x.reshape(shape)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.reshape(self.input_shape)


class Permute(Function):
    computes = False

    def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
        self.input_order = order
        return x.permute(order)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.permute(tuple(argsort(list(self.input_order))))


class Pad(Function):
    computes = False

    def forward(self, x: LazyBuffer, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
        return x.pad(arg)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.shrink(self.narg)


class Shrink(Function):
    computes = False

    def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
        return x.shrink(arg)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.pad(self.narg)


class Flip(Function):
    computes = False

    def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
        self.arg = tuple(-1 if i in axis else 1 for i in range(len(x.shape)))
        return x.stride(self.arg)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.stride(self.arg)


# ---- placement on several devices ----

class ToDevice(Function):
    """The input copied to another single device: Tensor.to on a tensor that needs a gradient. The gradient is
    copied back to the input's device."""
    computes = False

    def forward(self, x: LazyBuffer, device: str) -> LazyBuffer:
        self.src_device = x.device
        return x.copy_to_device(device)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.copy_to_device(self.src_device)


class Shard(Function):
    """The input spread over `devices` (replicated, or split along `axis`): Tensor.shard on a tensor that needs a
    gradient. The gradient goes back to where the input was: gathered to its device, or placed as it was."""

    def forward(self, x: LazyBuffer, devices: tuple[str, ...], axis: int | None) -> MultiLazyBuffer:
        self.src = (x.device, None, None) if type(x) is LazyBuffer else (x.device, x.axis, x.bounds)
        return MultiLazyBuffer.from_sharded(x, devices, axis) if type(x) is LazyBuffer else x.reshard(devices, axis)

    def backward(self, grad_output: MultiLazyBuffer):
        device, axis, bounds = self.src
        # NOTE: replicas are one value, not several: their gradient is one replica's, not the sum over devices
        return grad_output.copy_to_device(device) if type(device) is str else \
            grad_output.reshard(device, axis, bounds)


# ---- bit shifts (integer only, no gradient): the mixing steps of the on-device random number generator ----

class ShiftLeft(Function):
    """x << y in C: for unsigned types the bits shifted out are dropped (y must be in [0, bits))."""

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.SHL, y)


class ShiftRight(Function):
    """x >> y in C: logical for unsigned types (signed ones are implementation-defined: gcc and clang fill the sign)."""

    def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
        return x.e(BinaryOps.SHR, y)


class Threefry(Function):
    """Threefry-2x32 with 20 rounds (Salmon et al., SC 2011): a keyed bijection of the 64-bit counter (c0, c1) under
    the key (k0, k1), whose outputs pass the usual statistical batteries. All four inputs are uint32 of one shape;
    the two output words are returned packed in a uint64, word 1 in the high half.

    The 20 rounds add, rotate and xor; after every fourth, the next two words of the key schedule (k0, k1,
    k0 ^ k1 ^ 0x1BD11BDA, cyclically) and the injection number are added."""
    ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)

    def forward(self, c0: LazyBuffer, c1: LazyBuffer, k0: LazyBuffer, k1: LazyBuffer) -> LazyBuffer:
        ks = (k0, k1, k0.e(BinaryOps.XOR, k1).e(BinaryOps.XOR, k0.const(0x1BD11BDA)))
        x0, x1 = c0.e(BinaryOps.ADD, ks[0]), c1.e(BinaryOps.ADD, ks[1])
        for r in range(20):
            rot = self.ROTATIONS[r % 8]
            x0 = x0.e(BinaryOps.ADD, x1)
            x1 = x1.e(BinaryOps.SHL, x1.const(rot)).e(BinaryOps.OR, x1.e(BinaryOps.SHR, x1.const(32 - rot)))
            x1 = x1.e(BinaryOps.XOR, x0)
            if r % 4 == 3:
                inj = r // 4 + 1
                x0 = x0.e(BinaryOps.ADD, ks[inj % 3])
                x1 = x1.e(BinaryOps.ADD, ks[(inj + 1) % 3]).e(BinaryOps.ADD, x1.const(inj))
        lo, hi = x0.cast(dtypes.uint64), x1.cast(dtypes.uint64)
        return hi.e(BinaryOps.SHL, hi.const(32)).e(BinaryOps.OR, lo)


# ---- elementwise ops with a primitive of their own, and gradients given by formula ----

class Exp2(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.ret = x.e(UnaryOps.EXP2)
        return self.ret

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return self.ret.e(BinaryOps.MUL, self.ret.const(math.log(2))).e(BinaryOps.MUL, grad_output)


class Log2(Function):
    def forward(self, x: LazyBuffer) -> LazyBuffer:
        self.x = x
        return x.e(UnaryOps.LOG2)

    def backward(self, grad_output: LazyBuffer) -> LazyBuffer:
        return grad_output.e(BinaryOps.DIV, self.x.e(BinaryOps.MUL, self.x.const(math.log(2))))


class Surrogate(Function):
    """`value` forward; backward, the gradient goes to `surrogate` (never computed itself), which the Tensor op builds
    so that its derivative is the op's true one (PyTorch's formula) where `value`'s own computation has another."""

    def forward(self, surrogate: LazyBuffer, value: LazyBuffer) -> LazyBuffer:
        return value

    def backward(self, grad_output: LazyBuffer):
        return grad_output if self.needs_input_grad[0] else None, None


__all__ = [n for n, v in list(globals().items()) if isinstance(v, type) and issubclass(v, Function)] + ["dtypes"]
