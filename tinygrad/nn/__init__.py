"""Layers: small classes that own their parameters as Tensors and apply one Tensor op in `__call__`.

A layer is a plain object (no Module base class): its parameters are attributes named as in PyTorch (`weight`,
`bias`, `running_mean`, ...), so state dicts line up, and calling it runs Tensor methods, so autograd, laziness and
TinyJit need nothing extra. Default initialisations follow tinygrad 0.9 (which mostly follows PyTorch).

>>> from tinygrad import Tensor
>>> from tinygrad.nn import Linear
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""
from __future__ import annotations

import math

from tinygrad.dtype import dtypes
from tinygrad.errors import ArgumentError
from tinygrad.helpers import all_int, prod
from tinygrad.nn import optim  # noqa: F401 - `tinygrad.nn.optim` is reachable as an attribute, as in tinygrad
from tinygrad.tensor import Tensor


def _check_count(name: str, value, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ArgumentError(f"{name} must be an int >= {minimum}, got {value!r}")


def _fan_in_bound(fan_in: int) -> float:
    """PyTorch's bias bound 1/sqrt(fan_in); 0 for a layer without inputs (where PyTorch also makes 0)."""
    return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    """(1, -1, 1, ...): the shape that lays a per-channel vector along dim 1 of `x`."""
    return (1, -1) + (1,) * (x.ndim - 2)


# ---- dense and convolution layers ----
class Linear:
    """y = x @ weight.T + bias, weight (out_features, in_features).

    Initialised as PyTorch: weight kaiming_uniform(a=sqrt(5)) and bias uniform, both within +-1/sqrt(in_features).

    >>> Linear(4, 2, bias=False)(Tensor.zeros(3, 4)).tolist()
    [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        _check_count("in_features", in_features, 0)
        _check_count("out_features", out_features, 0)
        self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5))
        bound = _fan_in_bound(in_features)
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.weight.shape[1]:
            raise ArgumentError(f"Linear expects a last dim of {self.weight.shape[1]}, got input shape {x.shape}")
        return x.linear(self.weight.T, self.bias)


class Conv2d:
    """Convolution (cross-correlation) over N spatial dims as torch.nn.Conv2d; weight (out, in/groups, *kernel).

    `kernel_size` is an int (square, 2-d) or a tuple, whose length sets the number of spatial dims. `padding` takes
    what Tensor.conv2d takes: an int, one int per dim, "valid"/"same", or tinygrad's (left, right, top, bottom...).
    Initialised as PyTorch: weight kaiming_uniform(a=sqrt(5)), bias uniform in +-1/sqrt(fan_in).

    >>> Conv2d(1, 2, 3, padding=1)(Tensor.ones(1, 1, 5, 5)).shape
    (1, 2, 5, 5)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True):
        self.kernel_size = self._kernel_tuple(kernel_size, 2)
        _check_count("in_channels", in_channels)
        _check_count("out_channels", out_channels)
        _check_count("groups", groups)
        if in_channels % groups or out_channels % groups:
            raise ArgumentError(f"in_channels {in_channels} and out_channels {out_channels} must both be divisible by "
                             f"groups {groups}")
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = self.initialize_weight(out_channels, in_channels, groups)
        # weight.shape[1:] is (fan-in channels, *kernel) for both the plain and the transposed layout
        bound = _fan_in_bound(prod(self.weight.shape[1:]))
        self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

    @staticmethod
    def _kernel_tuple(kernel_size, nd: int) -> tuple[int, ...]:
        ks = (kernel_size,) * nd if isinstance(kernel_size, int) else tuple(kernel_size)
        if not ks or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in ks):
            raise ArgumentError(f"kernel_size must be a positive int or a tuple of them, got {kernel_size!r}")
        return ks

    def initialize_weight(self, out_channels: int, in_channels: int, groups: int) -> Tensor:
        return Tensor.kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size, a=math.sqrt(5))

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                        padding=self.padding)


class Conv1d(Conv2d):
    """Conv2d over one spatial dim (input (N, C, L)); an int `kernel_size` means (kernel_size,).

    >>> Conv1d(2, 3, 3)(Tensor.ones(1, 2, 8)).shape
    (1, 3, 6)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, self._kernel_tuple(kernel_size, 1), stride, padding, dilation,
                         groups, bias)


class ConvTranspose2d(Conv2d):
    """Transposed convolution as torch.nn.ConvTranspose2d; weight (in, out/groups, *kernel), init as PyTorch.

    >>> ConvTranspose2d(2, 1, 3, stride=2)(Tensor.ones(1, 2, 4, 4)).shape
    (1, 1, 9, 9)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        self.output_padding = output_padding

    def initialize_weight(self, out_channels: int, in_channels: int, groups: int) -> Tensor:
        return Tensor.kaiming_uniform(in_channels, out_channels // groups, *self.kernel_size, a=math.sqrt(5))

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride,
                                  dilation=self.dilation, padding=self.padding, output_padding=self.output_padding)


class ConvTranspose1d(ConvTranspose2d):
    """ConvTranspose2d over one spatial dim (input (N, C, L)); an int `kernel_size` means (kernel_size,)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, self._kernel_tuple(kernel_size, 1), stride, padding,
                         output_padding, dilation, groups, bias)


# ---- normalisation layers ----
class BatchNorm:
    """Batch normalisation over dim 1 of an (N, C, *) input, as torch.nn.BatchNorm1d/2d/3d.

    In training mode (`Tensor.training`, e.g. inside `with Tensor.train():`) it normalises with the batch's
    statistics and, with `track_running_stats`, folds them into `running_mean` / `running_var` (unbiased variance)
    with weight `momentum` (None: a cumulative average over `num_batches_tracked`). In eval mode it uses the
    running statistics, or the batch's when it does not track them. The running statistics are updated with
    `assign`, lazily: they are computed when realized (an optimizer realizes them when they are among its params).

    >>> bn = BatchNorm(3)
    >>> with Tensor.train():
    ...     y = bn(Tensor.arange(12).reshape(2, 3, 2).float())
    >>> [round(v, 4) for v in bn.running_mean.tolist()]
    [0.35, 0.55, 0.75]
    """

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
                 momentum: float | None = 0.1):
        _check_count("num_features", sz)
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ArgumentError(f"momentum must be in [0, 1] or None, got {momentum!r}")
        self.num_features, self.eps, self.affine = sz, eps, affine
        self.track_running_stats, self.momentum = track_running_stats, momentum
        self.weight: Tensor | None = Tensor.ones(sz) if affine else None
        self.bias: Tensor | None = Tensor.zeros(sz) if affine else None
        self.running_mean = Tensor.zeros(sz, requires_grad=False)
        self.running_var = Tensor.ones(sz, requires_grad=False)
        self.num_batches_tracked = Tensor.zeros(1, requires_grad=False)

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The batch's per-channel mean and biased variance."""
        axes = tuple(a for a in range(x.ndim) if a != 1)
        mean = x.mean(axis=axes)
        # the variance's gradient through the mean is zero (the centred values sum to 0): detach to skip it
        y = x - mean.detach().reshape(_channel_shape(x))
        return mean, (y * y).mean(axis=axes)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ArgumentError(f"BatchNorm({self.num_features}) expects input (N, {self.num_features}, *), "
                             f"got shape {x.shape}")
        n = prod(s for d, s in enumerate(x.shape) if d != 1)  # values per channel
        use_batch = Tensor.training or not self.track_running_stats
        if use_batch and isinstance(n, int) and n == 1 and Tensor.training:
            raise ArgumentError(f"BatchNorm in training mode needs more than 1 value per channel, got shape {x.shape}")
        if not use_batch or (isinstance(n, int) and n == 0):
            return x.batchnorm(self.weight, self.bias, self.running_mean, (self.running_var + self.eps).rsqrt())
        mean, var = self.calc_stats(x)
        if Tensor.training and self.track_running_stats:
            self._track(mean.detach(), var.detach(), n)
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())

    def _track(self, mean: Tensor, var: Tensor, n) -> None:
        tracked = self.num_batches_tracked + 1
        # momentum None is a cumulative average: the k-th batch gets weight 1/k
        m = 1.0 / tracked if self.momentum is None else self.momentum
        rm, rv = self.running_mean, self.running_var
        rm.assign(((1 - m) * rm + m * mean).cast(rm.dtype))
        rv.assign(((1 - m) * rv + m * (n / (n - 1)) * var).cast(rv.dtype))
        self.num_batches_tracked.assign(tracked)


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalise over the trailing dims `normalized_shape`, then (with `elementwise_affine`) x * weight + bias.

    >>> [round(v, 4) for v in LayerNorm(2, elementwise_affine=False)(Tensor([[1.0, 3.0]])).tolist()[0]]
    [-1.0, 1.0]
    """

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not self.normalized_shape:
            raise ArgumentError("LayerNorm needs a non-empty normalized_shape")
        for s in self.normalized_shape:
            _check_count("normalized_shape entries", s)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight: Tensor | None = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
        self.bias: Tensor | None = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if tuple(x.shape[-k:]) != self.normalized_shape or x.ndim < k:
            raise ArgumentError(f"LayerNorm{self.normalized_shape} expects trailing dims {self.normalized_shape}, "
                             f"got shape {x.shape}")
        x = x.layernorm(axis=self.axis, eps=self.eps)
        return x if not self.elementwise_affine else x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels (dim 1) of an (N, C, *) input, as ConvNeXt's: the channel dim is moved last,
    normalised and moved back."""

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ArgumentError(f"LayerNorm2d expects input (N, C, *), got shape {x.shape}")
        last = tuple(range(2, x.ndim))
        y = super().__call__(x.permute(0, *last, 1))
        return y.permute(0, x.ndim - 1, *range(1, x.ndim - 1))


class _ChannelGroupNorm:
    """Shared by GroupNorm and InstanceNorm: normalise each of `groups` channel groups of each sample, then scale
    and shift per channel."""

    def __init__(self, groups: int, channels: int, eps: float, affine: bool):
        self.eps = eps
        self.weight: Tensor | None = Tensor.ones(channels) if affine else None
        self.bias: Tensor | None = Tensor.zeros(channels) if affine else None
        self._groups, self._channels = groups, channels

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self._channels:
            raise ArgumentError(f"{type(self).__name__} expects input (N, {self._channels}, *), got shape {x.shape}")
        x = x.reshape(x.shape[0], self._groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return x
        return x * self.weight.reshape(_channel_shape(x)) + self.bias.reshape(_channel_shape(x))


class GroupNorm(_ChannelGroupNorm):
    """Group normalisation as torch.nn.GroupNorm: statistics over each group of num_channels/num_groups channels
    (and all spatial positions) of each sample; weight ones, bias zeros."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        _check_count("num_groups", num_groups)
        _check_count("num_channels", num_channels)
        if num_channels % num_groups:
            raise ArgumentError(f"num_channels {num_channels} must be divisible by num_groups {num_groups}")
        super().__init__(num_groups, num_channels, eps, affine)
        self.num_groups, self.num_channels = num_groups, num_channels


class InstanceNorm(_ChannelGroupNorm):
    """Instance normalisation: statistics over the spatial positions of each channel of each sample. As tinygrad
    (unlike torch.nn.InstanceNorm2d) it is affine by default and keeps no running statistics."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
        _check_count("num_features", num_features)
        super().__init__(num_features, num_features, eps, affine)
        self.num_features = num_features


class RMSNorm:
    """x / sqrt(mean(x^2 over the last dim) + eps) * weight, computed in float32 and cast back to x's dtype.

    >>> [round(v, 4) for v in RMSNorm(2)(Tensor([[3.0, 4.0]])).tolist()[0]]
    [0.8485, 1.1314]
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        _check_count("dim", dim)
        self.eps, self.weight = eps, Tensor.ones(dim)

    def _norm(self, x: Tensor) -> Tensor:
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.weight.shape[0]:
            raise ArgumentError(f"RMSNorm({self.weight.shape[0]}) expects a last dim of {self.weight.shape[0]}, "
                             f"got shape {x.shape}")
        return self._norm(x.float()).cast(x.dtype) * self.weight


# ---- lookup ----
class Embedding:
    """A lookup table: `idx` (ints, any shape) -> rows of weight (vocab_size, embed_size), glorot_uniform init.

    The lookup is a one-hot comparison against arange(vocab_size) contracted with the weight, so it runs as fused
    kernels and its gradient reaches the weight. NOTE: checking the indices would need their values on the host;
    an index outside [0, vocab_size) gives a row of zeros.

    >>> Embedding(10, 3)(Tensor([[1, 2], [3, 4]])).shape
    (2, 2, 3)
    """

    def __init__(self, vocab_size: int, embed_size: int):
        _check_count("vocab_size", vocab_size)
        _check_count("embed_size", embed_size)
        self.vocab_sz, self.embed_sz = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding indices must be ints, got {idx.dtype}")
        if all_int(idx.shape) and idx.numel() == 0:
            return Tensor.zeros(*idx.shape, self.embed_sz, dtype=self.weight.dtype, device=self.weight.device)
        hit = idx.unsqueeze(-1) == Tensor.arange(self.vocab_sz, device=self.weight.device)
        return hit.cast(self.weight.dtype) @ self.weight


__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "BatchNorm", "BatchNorm1d",
           "BatchNorm2d", "BatchNorm3d", "LayerNorm", "LayerNorm2d", "GroupNorm", "InstanceNorm", "RMSNorm",
           "Embedding", "optim"]
