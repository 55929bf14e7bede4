"""Helpers that tinygrad 0.9's test files import as `from test.helpers import ...`, so those files run unchanged here.

is_dtype_supported says whether a device computes with a dtype, assert_jit_cache_len counts the kernels a TinyJit
captured, rand_for_dtype makes test data that fits a dtype; default_sigint is this suite's own (a subprocess that
Ctrl-C must reach).
"""
from __future__ import annotations

import signal

import numpy as np

from tinygrad import Device, dtypes
from tinygrad.dtype import DType, ImageDType

# what a device type cannot compute with (every other core dtype works on every device: half and bfloat16 are
# emulated through float where the hardware has none)
_UNSUPPORTED: dict[str, frozenset] = {"METAL": frozenset((dtypes.float64,))}


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
    """Whether tensors of `dtype` can be made and computed with on `device` (the default device when None)."""
    if isinstance(dtype, ImageDType):
        return False  # image dtypes are named here but tensors refuse them
    kind = (device or Device.DEFAULT).split(":")[0].upper()
    return dtype not in _UNSUPPORTED.get(kind, frozenset())


def assert_jit_cache_len(fxn, expected_len: int) -> None:
    """The TinyJit `fxn` captured exactly `expected_len` items (kernels, and any copies) on this thread. A device graph
    replays the capture here without replacing it, so the count is of the captured items themselves."""
    captured = fxn.jit_cache
    assert len(captured) > 0, "the function was not captured: call it at least twice first"
    assert len(captured) == expected_len, f"captured {len(captured)} items, expected {expected_len}"


def rand_for_dtype(dt: DType, size: int) -> np.ndarray:
    """`size` random values that `dt` holds exactly enough for tests: small signed or unsigned integers, booleans,
    or floats in [-10, 10) (as float32 for bfloat16, which numpy has no type for)."""
    if dt == dtypes.bool:
        return np.random.choice([True, False], size=size)
    if dtypes.is_unsigned(dt):
        return np.random.randint(0, 100, size=size).astype(dt.np)
    if dtypes.is_int(dt):
        return np.random.randint(-100, 100, size=size).astype(dt.np)
    return np.random.uniform(-10, 10, size=size).astype(dt.np if dt.np is not None else np.float32)


def default_sigint() -> None:
    """A subprocess's `preexec_fn`: the child takes Ctrl-C as Python does by default, even where this run inherited
    an ignored SIGINT (a job started in the background by a non-interactive shell; Python then installs no
    KeyboardInterrupt handler, and a test that interrupts its child waits for ever)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
