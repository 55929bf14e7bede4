"""UnsyncedBatchNorm, the batch norm of tinygrad 0.9's hlb_cifar10 example, under the name 0.9's multi-device tests
import (`from examples.hlb_cifar10 import UnsyncedBatchNorm`).

Data-parallel training shards a batch over `num_devices` devices along its first axis; a synced BatchNorm takes its
statistics over the whole batch (collectives between the devices), an unsynced one over each device's part alone:
running_mean and running_var hold one row per device, shape (num_devices, channels), and are meant to be sharded on
axis 0 like the batch, while weight and bias are shared (replicated).
"""
from __future__ import annotations

from tinygrad import Tensor
from tinygrad.helpers import prod
from tinygrad.nn import BatchNorm


class UnsyncedBatchNorm(BatchNorm):
    """BatchNorm over (N, C, *) whose statistics are per device: the batch is read as num_devices groups of
    N / num_devices samples, each normalised by its own mean and variance."""

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
                 momentum: float | None = 0.1, num_devices: int = 1):
        super().__init__(sz, eps, affine, track_running_stats, momentum)
        self.num_devices = num_devices
        self.running_mean = Tensor.zeros(num_devices, sz, requires_grad=False)
        self.running_var = Tensor.ones(num_devices, sz, requires_grad=False)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_features or x.shape[0] % self.num_devices:
            raise ValueError(f"UnsyncedBatchNorm({self.num_features}, num_devices={self.num_devices}) expects "
                             f"input (N, {self.num_features}, *) with N a multiple of {self.num_devices}, "
                             f"got shape {x.shape}")
        # (devices, samples per device, C, *): the device axis is the batch's sharded one
        xr = x.reshape(self.num_devices, x.shape[0] // self.num_devices, *x.shape[1:])
        axes = tuple(a for a in range(xr.ndim) if a not in (0, 2))
        stat_shape = (self.num_devices, 1, self.num_features) + (1,) * (xr.ndim - 3)
        if Tensor.training or not self.track_running_stats:
            mean = xr.mean(axis=axes)
            var = (xr - mean.detach().reshape(stat_shape)).square().mean(axis=axes)
            if Tensor.training and self.track_running_stats:
                self._track(mean.detach(), var.detach(), prod(xr.shape[a] for a in axes))
        else:
            mean, var = self.running_mean, self.running_var
        out = (xr - mean.reshape(stat_shape)) * (var.reshape(stat_shape) + self.eps).rsqrt()
        if self.weight is not None:
            chan = (1, 1, self.num_features) + (1,) * (xr.ndim - 3)
            out = out * self.weight.reshape(chan) + self.bias.reshape(chan)
        return out.reshape(x.shape)
