"""Elementwise ops of one tensor: math, hyperbolic functions, activations, logic and casts; and the shared pieces
of elementwise ops (broadcast_shape, `_with_grad`), which tensor_binary.py's ops of several tensors use too.

A mixin of Tensor (tinygrad/tensor.py); new tensors are made with `type(self)` so subclasses stay subclasses.

Values and gradients follow PyTorch. Values are computed in forms that stay finite wherever PyTorch's do (tanh,
softplus, sinh... for large |x|) and keep their relative accuracy for tiny |x| (through expm1 and log1p). Gradients
are PyTorch's, kinks included: relu and abs give 0 at 0, maximum splits ties, clip passes the gradient at its bounds
and hardtanh does not, rounding gives 0. Where the way a value is computed would differentiate to something else,
`_with_grad` attaches PyTorch's formula instead (mlops.Surrogate).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Union

import tinygrad.mlops as F
from tinygrad.dtype import ConstType, DType, dtypes, least_upper_float, literal, to_dtype
from tinygrad.errors import ArgumentError
from tinygrad.shape.symbolic import sint

if TYPE_CHECKING:
    from tinygrad.tensor import Tensor


TensorLike = Union["Tensor", ConstType]
Derivative = Union["Tensor", float, Callable[[], Union["Tensor", float]]]

_LN2 = math.log(2)
_SELU_ALPHA = literal(1.6732632423543772848170429916717)
_SELU_SCALE = literal(1.0507009873554804934193349852946)
# fraction bits of each float type: from 2**bits on, every value of the type is an integer
_FRACTION_BITS = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23, dtypes.float64: 52}
# (the formulas' constants are `literal`s: compiled into the kernels, see dtype.literal)
# erf near 0: 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)), n = 0..5 (error < 2e-8 for |x| < 0.5)
_ERF_SERIES = [literal(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))) for n in range(6)]
# erf beyond: Abramowitz & Stegun 7.1.26, 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p x)
_ERF_P = literal(0.3275911)
_ERF_A = [literal(c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)]
_TWO_OVER_SQRT_PI = literal(2 / math.sqrt(math.pi))
# tanh(a) = a + a s (c0 + c1 s + ... + c4 s^4), s = a^2, for |a| < 0.55: a least-squares fit of (tanh(a) / a - 1) / s
# on Chebyshev nodes, weighted for tanh's relative error (at most 1.1 units of 2^-24 evaluated in float32)
_TANH_POLY = tuple(map(literal, (-0.33333316445350647, 0.13332565128803253, -0.05385029688477516,
                                 0.021064136177301407, -0.006264368072152138)))
_TANH_SPLIT_SQ = literal(0.55 * 0.55)
# gelu's tanh form: tanh(sqrt(2 / pi) (x + 0.044715 x^3)); quick_gelu's sigmoid(1.702 x)
_GELU_C, _GELU_A, _QUICK_GELU = literal(math.sqrt(2 / math.pi)), literal(0.044715), literal(1.702)
_GELU_MINUS_2C = literal(-2 * math.sqrt(2 / math.pi))


def broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if not (isinstance(d, int) and d == 1)}
        if len(sizes) > 1:
            raise ArgumentError(f"shapes {shapes} can't be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _constant_value(t) -> Any:
    """The value of every element of tensor `t` when it is a constant that folding may use (see
    LazyBuffer.constant_value; a tensor on several devices: never), else None."""
    get = getattr(t.lazydata, "constant_value", None)
    return get() if get is not None else None


def _with_grad(value: Tensor, *pairs: tuple[Tensor, Derivative]) -> Tensor:
    """`value`, differentiated by formula: the gradient reaching input `x` of each `(x, dx)` pair is upstream * dx.

    `x` must have `value`'s shape (pass inputs already broadcast). `dx` may be a callable, built only when `x` needs
    a gradient. How `value` itself was computed is invisible to autograd."""
    need = [(x, d) for x, d in pairs if x.requires_grad]
    if not need or type(value).no_grad:
        return value
    surrogate = None
    for x, d in need:
        d = d() if callable(d) else d
        term = x * (d.detach() if isinstance(d, ElementwiseMixin) else d)
        surrogate = term if surrogate is None else surrogate + term
    if surrogate.shape != value.shape:
        raise RuntimeError(f"internal error: surrogate shape {surrogate.shape} != value shape {value.shape}")
    return F.Surrogate.apply(surrogate.cast(value.dtype), value.detach())


class ElementwiseMixin:
    __slots__ = ()

    # ---- helpers ----
    def _as_float(self) -> Tensor:
        """This tensor in the float dtype transcendental ops compute in (ints and bools go to the default float)."""
        return self.cast(least_upper_float(self.dtype))

    def _opmath(self, fxn: Callable[[Tensor], Tensor]) -> Tensor:
        """`fxn` of this tensor as a float, computed in float32 at least (as PyTorch does for half types), and
        returned in this tensor's float dtype."""
        dt = least_upper_float(self.dtype)
        x = self.cast(dt)
        return fxn(x) if dt.itemsize >= 4 else fxn(x.cast(dtypes.float32)).cast(dt)

    def _expm1(self) -> Tensor:
        """exp(x) - 1, accurate for tiny |x| (Kahan's trick). For values only: its autograd derivative is not exp."""
        u = self.exp()
        r = (u - 1) * self / u.log()
        r = (u == 1).where(self, r)
        r = (u - 1 == -1).where(-1.0, r)  # also where u is denormal, too coarse for the trick
        return (u == math.inf).where(math.inf, r)

    def _log1p(self) -> Tensor:
        """log(1 + x), accurate for tiny |x| (Kahan's trick). For values only."""
        w = self + 1
        r = w.log() * self / (w - 1)
        r = (w == 1).where(self, r)
        return (w == math.inf).where(math.inf, r)

    def _trunc_value(self) -> Tensor:
        """trunc of a float tensor, without gradient. Values too large to have a fraction (and inf, nan) pass as they
        are, so the float -> int cast stays in range; zero keeps its sign, as C's trunc."""
        small = self.abs() < 2.0 ** _FRACTION_BITS[self.dtype.scalar()]
        ints = small.where(self, 0.0).cast(dtypes.int64 if self.dtype.itemsize == 8 else dtypes.int32)
        t = small.where(ints.cast(self.dtype), self)
        return (t == 0).where(self * 0, t)

    # ---- unary math ----
    def neg(self) -> Tensor:
        """-x elementwise (for a bool tensor: logical not).

        >>> Tensor([1, -2]).neg().tolist()
        [-1, 2]
        """
        return F.Neg.apply(self) if self.dtype != dtypes.bool else self.logical_not()

    def log(self) -> Tensor:
        """Natural logarithm elementwise; ints and bools are computed in the default float.

        >>> Tensor([1.0]).log().tolist()
        [0.0]
        """
        # (computed in float32 for half types, as PyTorch does: log2(x) * ln 2 rounded once, not twice)
        return self._opmath(F.Log.apply)

    def log2(self) -> Tensor:
        """Base-2 logarithm elementwise; ints and bools are computed in the default float.

        >>> Tensor([1.0, 8.0]).log2().tolist()
        [0.0, 3.0]
        """
        return F.Log2.apply(self._as_float())

    def exp(self) -> Tensor:
        """e ** x elementwise; ints and bools are computed in the default float.

        >>> Tensor([0.0]).exp().tolist()
        [1.0]
        """
        # (computed in float32 for half types, as PyTorch does: exp2(x * log2 e) with x * log2 e unrounded; in half,
        # that product's rounding was a relative error of up to |x| * 2^-11 in the result)
        return self._opmath(F.Exp.apply)

    def exp2(self) -> Tensor:
        """2 ** x elementwise; ints and bools are computed in the default float.

        >>> Tensor([3.0, -1.0]).exp2().tolist()
        [8.0, 0.5]
        """
        return F.Exp2.apply(self._as_float())

    def sqrt(self) -> Tensor:
        """Square root elementwise (nan below 0); ints and bools are computed in the default float.

        >>> Tensor([4.0, 9.0]).sqrt().tolist()
        [2.0, 3.0]
        """
        return F.Sqrt.apply(self._as_float())

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x) elementwise, in a float dtype.

        >>> Tensor([4.0, 16.0]).rsqrt().tolist()
        [0.5, 0.25]
        """
        return self.sqrt().reciprocal()

    def reciprocal(self) -> Tensor:
        """1 / x elementwise, in a float dtype (ints give the default float).

        >>> Tensor([2, 4]).reciprocal().tolist()
        [0.5, 0.25]
        """
        return F.Reciprocal.apply(self._as_float())

    def sin(self) -> Tensor:
        """Sine elementwise (radians), in a float dtype.

        >>> Tensor([0.0]).sin().tolist()
        [0.0]
        """
        x = self._as_float()
        return _with_grad(F.Sin.apply(x), (x, lambda: x.cos()))

    def cos(self) -> Tensor:
        """Cosine elementwise (radians), in a float dtype; accurate for large |x| too.

        >>> Tensor([0.0]).cos().tolist()
        [1.0]
        """
        # 1 - 2 sin(x/2)^2: halving is exact, so this keeps sin's accuracy for large |x| (sin(pi/2 - x) would not)
        def fxn(x: Tensor) -> Tensor:
            s = F.Sin.apply(x * 0.5)
            return _with_grad(1 - 2 * s * s, (x, lambda: -F.Sin.apply(x)))
        return self._opmath(fxn)

    def tan(self) -> Tensor:
        """Tangent elementwise (radians), in a float dtype.

        >>> Tensor([0.0]).tan().tolist()
        [0.0]
        """
        def fxn(x: Tensor) -> Tensor:
            value = F.Sin.apply(x) / x.cos()
            return _with_grad(value, (x, lambda: 1 + value * value))
        return self._opmath(fxn)

    def square(self) -> Tensor:
        """x * x elementwise, keeping the dtype.

        >>> Tensor([-3, 2]).square().tolist()
        [9, 4]
        """
        return self * self

    def abs(self) -> Tensor:
        """|x| elementwise, keeping the dtype (bool and unsigned tensors come back as they are).

        >>> Tensor([1.0, -2.0]).abs().tolist()
        [1.0, 2.0]
        """
        if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self
        return self.relu() + (-self).relu()

    def __abs__(self) -> Tensor:
        return self.abs()

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of each element, in this tensor's dtype (its gradient is 0).

        >>> Tensor([-2.0, 0.0, 3.0]).sign().tolist()
        [-1.0, 0.0, 1.0]
        """
        if self.dtype == dtypes.bool:
            return self
        value = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return _with_grad(value, (self, 0.0))

    def trunc(self) -> Tensor:
        """Round toward zero, keeping the dtype (int tensors come back as they are).

        >>> Tensor([1.7, -1.7]).trunc().tolist()
        [1.0, -1.0]
        """
        return _with_grad(self._trunc_value(), (self, 0.0)) if dtypes.is_float(self.dtype) else self

    def floor(self) -> Tensor:
        """Round down to the nearest integer, keeping the dtype (int tensors come back as they are).

        >>> Tensor([1.5, -1.5]).floor().tolist()
        [1.0, -2.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self._trunc_value()
        return _with_grad((t > self).where(t - 1, t), (self, 0.0))

    def ceil(self) -> Tensor:
        """Round up to the nearest integer, keeping the dtype (int tensors come back as they are).

        >>> Tensor([1.5, -1.5]).ceil().tolist()
        [2.0, -1.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self._trunc_value()
        return _with_grad((t < self).where(t + 1, t), (self, 0.0))

    def round(self) -> Tensor:
        """Round half to even, as PyTorch (and IEEE's default rounding) does."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self._trunc_value()
        frac = (self - t).abs()  # exact
        half_t = t * 0.5
        odd = half_t._trunc_value() != half_t
        away = (frac > 0.5) | ((frac == 0.5) & odd)
        return _with_grad(away.where((self < 0).where(t - 1, t + 1), t), (self, 0.0))

    def isnan(self) -> Tensor:
        """A bool tensor: True where the element is NaN.

        >>> Tensor([1.0, float("nan")]).isnan().tolist()
        [False, True]
        """
        return self != self

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """A bool tensor: True where the element is +inf (if `detect_positive`) or -inf (if `detect_negative`).

        >>> Tensor([1.0, float("inf"), -float("inf")]).isinf(detect_negative=False).tolist()
        [False, True, False]
        """
        pos, neg = self == math.inf, self == -math.inf
        if detect_positive and detect_negative:
            return pos | neg
        return pos if detect_positive else neg if detect_negative else self.full_like(False, dtype=dtypes.bool)

    def isfinite(self) -> Tensor:
        """A bool tensor: True where the element is neither inf nor NaN (always True for ints and bools).

        >>> Tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
        [True, False, False]
        """
        return (self - self) == 0 if dtypes.is_float(self.dtype) else self.full_like(True, dtype=dtypes.bool)

    def erf(self) -> Tensor:
        """The Gauss error function elementwise, in a float dtype (accurate to about 1e-7).

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).erf().tolist()]
        [0.0, 0.8427]
        """
        def fxn(x: Tensor) -> Tensor:
            a = x.abs()
            a2 = a * a
            series = _ERF_SERIES[-1]
            for c in reversed(_ERF_SERIES[:-1]):
                series = c + a2 * series
            t = 1 / (1 + _ERF_P * a)
            poly = _ERF_A[-1]
            for c in reversed(_ERF_A[:-1]):
                poly = c + t * poly
            v = (a < 0.5).where(a * series, 1 - t * poly * (-a2).exp())
            return _with_grad((x < 0).where(-v, v), (x, lambda: _TWO_OVER_SQRT_PI * (-x * x).exp()))
        return self._opmath(fxn)

    # ---- hyperbolic ----
    def tanh(self) -> Tensor:
        """Hyperbolic tangent elementwise, in a float dtype (finite for any input).

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).tanh().tolist()]
        [0.0, 0.7616]
        """
        def fxn(x: Tensor) -> Tensor:
            if x.dtype == dtypes.float64:
                # m = expm1(-2|x|), tanh|x| = -m / (2 + m): accurate to float64's precision near 0
                m = (x.abs() * -2)._expm1()
                y = -m / (m + 2)
                value = (x < 0).where(-y, y)
            else:
                # |x| < 0.55 (x^2 < 0.3025): an odd polynomial (within about 1 ulp in float32); beyond, 1 - 2 /
                # (e^2x + 1), finite for any x (1 where e^2x overflows, -1 where it is 0) and without cancellation
                # for x < 0 (2 / (e^2x + 1) is in (1.5, 2] there). One exp and one division an element, no |x| and
                # no sign: the expm1 form (exp, log and two divisions) left gelu fp16 at 40% of copy bandwidth
                s = x * x
                q = s * _TANH_POLY[-1] + _TANH_POLY[-2]
                for c in _TANH_POLY[-3::-1]:
                    q = q * s + c
                value = (s < _TANH_SPLIT_SQ).where(x + x * s * q, 1 - 2 / ((x * 2).exp() + 1))
            return _with_grad(value, (x, lambda: 1 - value * value))
        return self._opmath(fxn)

    def _sinh_cosh(self, cosh: bool) -> Tensor:
        # e^|x| / 2 = exp(|x| - ln 2) does not overflow before the result does
        a = self.abs()
        big, small = (a - _LN2).exp(), (-a - _LN2).exp()
        if cosh:
            return big + small
        s = (a < 1).where((a._expm1() - (-a)._expm1()) * 0.5, big - small)
        return (self < 0).where(-s, s)

    def sinh(self) -> Tensor:
        """Hyperbolic sine elementwise, in a float dtype.

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).sinh().tolist()]
        [0.0, 1.1752]
        """
        return self._opmath(lambda x: _with_grad(x._sinh_cosh(False), (x, lambda: x._sinh_cosh(True))))

    def cosh(self) -> Tensor:
        """Hyperbolic cosine elementwise, in a float dtype.

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).cosh().tolist()]
        [1.0, 1.5431]
        """
        return self._opmath(lambda x: _with_grad(x._sinh_cosh(True), (x, lambda: x._sinh_cosh(False))))

    def atanh(self) -> Tensor:
        """Inverse hyperbolic tangent elementwise, in a float dtype (+-inf at +-1, NaN beyond).

        >>> [round(v, 4) for v in Tensor([0.0, 0.5]).atanh().tolist()]
        [0.0, 0.5493]
        """
        def fxn(x: Tensor) -> Tensor:
            return _with_grad((2 * x / (1 - x))._log1p() * 0.5, (x, lambda: 1 / (1 - x * x)))
        return self._opmath(fxn)

    def asinh(self) -> Tensor:
        """Inverse hyperbolic sine elementwise, in a float dtype.

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).asinh().tolist()]
        [0.0, 0.8814]
        """
        def fxn(x: Tensor) -> Tensor:
            a = x.abs()
            # log1p(a + a^2 / (1 + sqrt(1 + a^2))); for large a, log(2a), before a^2 overflows
            near = (a + a * a / (1 + (a * a + 1).sqrt()))._log1p()
            s = (a > 4096).where(a.log() + _LN2, near)
            return _with_grad((x < 0).where(-s, s), (x, lambda: (x * x + 1).rsqrt()))
        return self._opmath(fxn)

    def acosh(self) -> Tensor:
        """Inverse hyperbolic cosine elementwise, in a float dtype (NaN below 1).

        >>> [round(v, 4) for v in Tensor([1.0, 2.0]).acosh().tolist()]
        [0.0, 1.317]
        """
        def fxn(x: Tensor) -> Tensor:
            near = ((x - 1) + ((x - 1) * (x + 1)).sqrt())._log1p()
            value = (x < 1).where(math.nan, (x > 4096).where(x.log() + _LN2, near))
            return _with_grad(value, (x, lambda: (x * x - 1).rsqrt()))
        return self._opmath(fxn)

    # ---- activations ----
    def sigmoid(self) -> Tensor:
        """The logistic function 1 / (1 + exp(-x)) elementwise, in a float dtype.

        >>> Tensor([0.0]).sigmoid().tolist()
        [0.5]
        """
        return self._opmath(F.Sigmoid.apply)  # in float32 for half types, rounded once, as PyTorch

    def relu(self) -> Tensor:
        """max(x, 0) elementwise, keeping the dtype (the gradient at 0 is 0).

        >>> Tensor([-1.0, 2.0]).relu().tolist()
        [0.0, 2.0]
        """
        return F.Relu.apply(self)

    def relu6(self) -> Tensor:
        """min(max(x, 0), 6) elementwise.

        >>> Tensor([-1.0, 3.0, 8.0]).relu6().tolist()
        [0.0, 3.0, 6.0]
        """
        return self.hardtanh(0, 6)

    def leakyrelu(self, neg_slope: float = 0.01) -> Tensor:
        """x where x > 0, else x * neg_slope.

        >>> Tensor([-2.0, 3.0]).leakyrelu(0.5).tolist()
        [-1.0, 3.0]
        """
        return (self > 0).where(self, self * neg_slope)

    def _elu(self, alpha: float, scale: float, input_scale: float) -> Tensor:
        # PyTorch's elu kernel: x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale
        pos = self > 0
        xi = self * input_scale if input_scale != 1 else self
        value = pos.where(self * scale if scale != 1 else self, xi._expm1() * (alpha * scale))
        return _with_grad(value, (self, lambda: pos.where(scale, xi.exp() * (alpha * scale * input_scale))))

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x where x > 0, else alpha * (exp(x) - 1), as torch.nn.functional.elu.

        >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).elu().tolist()]
        [-0.6321, 2.0]
        """
        return self._opmath(lambda x: x._elu(alpha, 1.0, 1.0))

    def celu(self, alpha: float = 1.0) -> Tensor:
        """x where x > 0, else alpha * (exp(x / alpha) - 1), as torch.nn.functional.celu.

        >>> [round(v, 4) for v in Tensor([-2.0, 2.0]).celu(alpha=2.0).tolist()]
        [-1.2642, 2.0]
        """
        return self._opmath(lambda x: x._elu(alpha, 1.0, 1.0 / alpha))

    def selu(self) -> Tensor:
        """scale * elu(x, alpha) with PyTorch's fixed constants (scale ~1.0507, alpha ~1.6733).

        >>> [round(v, 4) for v in Tensor([-1.0, 1.0]).selu().tolist()]
        [-1.1113, 1.0507]
        """
        return self._opmath(lambda x: x._elu(_SELU_ALPHA, _SELU_SCALE, 1.0))

    def gelu(self) -> Tensor:
        """GELU with the tanh approximation (PyTorch's gelu(approximate="tanh"))."""
        # 0.5 (1 + tanh(u)) = sigmoid(2u): x / (1 + e^-2u), one exp and one division, and no cancellation where
        # tanh(u) is near -1 (x < -3); where e^-2u overflows the result is -0.0, as PyTorch's
        def fxn(x: Tensor) -> Tensor:
            u = x + _GELU_A * x * x * x
            value = x / ((u * _GELU_MINUS_2C).exp() + 1)

            def derivative():
                t = (u * _GELU_C).tanh()
                return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_C * (1 + 3 * _GELU_A * x * x)
            return _with_grad(value, (x, derivative))
        return self._opmath(fxn)

    def quick_gelu(self) -> Tensor:
        """The sigmoid approximation of GELU: x * sigmoid(1.702 x).

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).quick_gelu().tolist()]
        [0.0, 0.8458]
        """
        return self * (self * _QUICK_GELU).sigmoid()

    def swish(self) -> Tensor:
        """x * sigmoid(x) (the same function as silu).

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).swish().tolist()]
        [0.0, 0.7311]
        """
        return self._opmath(lambda x: x * F.Sigmoid.apply(x))  # rounded once for half types, as PyTorch's silu

    def silu(self) -> Tensor:
        """x * sigmoid(x), as torch.nn.functional.silu.

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).silu().tolist()]
        [0.0, 0.7311]
        """
        return self.swish()

    def mish(self) -> Tensor:
        """x * tanh(softplus(x)), as torch.nn.functional.mish.

        >>> [round(v, 4) for v in Tensor([0.0, 1.0]).mish().tolist()]
        [0.0, 0.8651]
        """
        return self * self.softplus().tanh()

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's)."""
        def fxn(x: Tensor) -> Tensor:
            xb = x * beta if beta != 1 else x
            linear = xb > threshold
            soft = xb.exp()._log1p()
            value = linear.where(x, soft / beta if beta != 1 else soft)
            return _with_grad(value, (x, lambda: linear.where(1.0, xb.sigmoid())))
        return self._opmath(fxn)

    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)), computed as -softplus(-x) so it stays finite for very negative x.

        >>> [round(v, 4) for v in Tensor([0.0, -100.0]).logsigmoid().tolist()]
        [-0.6931, -100.0]
        """
        return -(-self).softplus()

    def softsign(self) -> Tensor:
        """x / (1 + |x|) elementwise.

        >>> Tensor([1.0, -3.0]).softsign().tolist()
        [0.5, -0.75]
        """
        return self / (1 + self.abs())

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clipped to [min_val, max_val]; unlike clip, the gradient is 0 at the bounds (PyTorch's).

        >>> Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist()
        [-1.0, 0.5, 1.0]
        """
        # like clip, except that the gradient is 0 at the bounds (PyTorch's)
        return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))

    def hardswish(self) -> Tensor:
        """x * relu6(x + 3) / 6, as torch.nn.functional.hardswish.

        >>> Tensor([-4.0, 0.0, 3.0]).hardswish().tolist()
        [0.0, 0.0, 3.0]
        """
        return (self <= -3).where(0.0, (self < 3).where(self * (self + 3) / 6, self))

    def hardsigmoid(self) -> Tensor:
        """relu6(x + 3) / 6: 0 up to -3, 1 from 3, linear between.

        >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
        [0.0, 0.5, 1.0]
        """
        return (self <= -3).where(0.0, (self >= 3).where(1.0, (self + 3) / 6))

    def clip(self, min_: TensorLike | None = None, max_: TensorLike | None = None) -> Tensor:
        """min(max(x, min_), max_), as torch.clamp: the gradient passes at the bounds; min_ > max_ gives max_."""
        if min_ is None and max_ is None:
            raise ArgumentError("clip needs min_ or max_ (or both), got neither")
        x: Tensor = self
        if min_ is not None:
            x = (x < min_).where(min_, x)
        if max_ is not None:
            x = (x > max_).where(max_, x)
        return x

    def clamp(self, min_: TensorLike | None = None, max_: TensorLike | None = None) -> Tensor:
        """The same as clip: min(max(x, min_), max_), either bound optional.

        >>> Tensor([-2, 0, 5]).clamp(-1, 3).tolist()
        [-1, 0, 3]
        """
        return self.clip(min_, max_)

    # ---- logic and casts ----
    def logical_not(self) -> Tensor:
        """A bool tensor: True where the element is zero (or False).

        >>> Tensor([True, False]).logical_not().tolist()
        [False, True]
        """
        return F.Eq.apply(*self._broadcasted(False))

    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to `dtype` (a DType or its name); float to int truncates toward zero, as C.

        >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist()
        [1, -1]
        """
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bits read as `dtype` (same itemsize), without converting the values.

        >>> Tensor([1.0]).bitcast(dtypes.int32).tolist()
        [1065353216]
        """
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype, bitcast=True)

    def float(self) -> Tensor:
        """Cast to float32.

        >>> Tensor([1, 2]).float().tolist()
        [1.0, 2.0]
        """
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """Cast to float16.

        >>> Tensor([1.5]).half().dtype
        dtypes.half
        """
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        """Cast to int32 (floats truncate toward zero).

        >>> Tensor([1.9, -1.9]).int().tolist()
        [1, -1]
        """
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """Cast to bool: True where the element is nonzero.

        >>> Tensor([0, 2]).bool().tolist()
        [False, True]
        """
        return self.cast(dtypes.bool)
