"""`pytest test/ops --shard N[:AXIS]`: the op suite with every input spread over N host devices (CLANG, CLANG:1, ...),
split along AXIS (default 0; 'none': replicated) where the input has that dim with at least N elements, else
replicated. The ops must give the same values and gradients as on one device; docs/multi_device.md.

A few tests build tensors of their own on the default device (a mask, a module's weights) and combine them with
the sharded inputs: those fail in this mode with "tensors are on different devices", by design."""
import op_helper
import pytest

from tinygrad import Tensor


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="N[:AXIS]",
                     help="run the op tests with inputs sharded over N host devices, split along AXIS")


def pytest_configure(config):
    spec = config.getoption("--shard", default=None)
    if not spec:
        return
    n, _, axis = spec.partition(":")
    if not n.isdigit() or int(n) < 1:
        raise pytest.UsageError(f"--shard needs a device count, got {spec!r}")
    devices = ("CLANG",) + tuple(f"CLANG:{i}" for i in range(1, int(n)))
    axis = None if axis.lower() == "none" else int(axis or 0)

    def to_tiny(a, requires_grad):
        ax = axis if axis is not None and a.ndim > axis and a.shape[axis] >= len(devices) else None
        return Tensor(a, requires_grad=requires_grad).shard(devices, ax)

    op_helper.to_tiny = to_tiny
