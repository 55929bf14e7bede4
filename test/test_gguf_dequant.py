"""Every ggml type the GGUF loader reads, against the `gguf` package's dequantization (its reference).

state_gguf's `dequantize` (Tensor ops, any device) must give gguf's float32 values bit for bit, NaN and infinite
fp16 scales, -0.0 and all-zero blocks included.

The expected values come from test/fixtures/quant_blocks.json.gz (extra/quant_gguf_fixture.py writes it with gguf),
so these tests run without gguf; where gguf imports, a second test compares with it directly on fresh random blocks.
"""
import gzip
import json
import os

import numpy as np
import pytest

from tinygrad import Device, Tensor
from tinygrad.nn.state_gguf import GGML_TYPES, dequantize

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "quant_blocks.json.gz")
with gzip.open(FIXTURE, "rt") as _f:
    CASES = json.load(_f)
TYPE_NAMES = list(CASES)


def _case(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(the fixture's blocks as bytes (n,), gguf's values for them (m,) float32)."""
    c = CASES[name]
    raw = np.frombuffer(bytes.fromhex("".join(c["blocks"])), np.uint8)
    return raw, np.frombuffer(bytes.fromhex(c["bits"]), "<u4").view(np.float32)


# the types whose values are d * q less (or plus) an offset: a GPU compiler that fuses the two into one fma (NVRTC
# does by default) rounds once where gguf rounds twice, so there they may differ by a rounding
OFFSET_TYPES = {"Q4_1", "Q5_1", "Q2_K", "Q4_K", "Q5_K"}
HOST_DEVICES = ("CLANG", "CPU")


def _same_bits(got: np.ndarray, want: np.ndarray, name: str = "") -> None:
    """Equal float32 bit patterns, except that any NaN equals any NaN (a NaN's payload is the arithmetic's); on a
    GPU, an offset type's values within a rounding (see OFFSET_TYPES)."""
    got, want = got.reshape(-1).astype(np.float32), want.reshape(-1)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"NaN at {np.flatnonzero(np.isnan(got) != nan)[:8]}"
    g, w = got[~nan], want[~nan]
    if name in OFFSET_TYPES and not Device.DEFAULT.startswith(HOST_DEVICES):
        close = np.isclose(g, w, rtol=2 ** -22, atol=0) | (g.view(np.uint32) == w.view(np.uint32))
        assert close.all(), f"{(~close).sum()} values differ by more than a rounding"
        return
    bad = np.flatnonzero(g.view(np.uint32) != w.view(np.uint32))
    assert bad.size == 0, f"{bad.size} values differ, first at {bad[:4]}: {g[bad[:4]]} vs {w[bad[:4]]}"


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_dequantize_is_bit_exact(name):
    """The fixture's blocks: gguf's values, bit for bit."""
    raw, want = _case(name)
    _same_bits(dequantize(CASES[name]["id"], Tensor(raw), want.shape).numpy(), want, name)


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_dequantize_equals_gguf_on_random_blocks(name):
    """Fresh random blocks (every bit pattern: NaN, infinite and subnormal scales among them) against
    gguf.quants.dequantize itself."""
    gguf = pytest.importorskip("gguf", reason="the gguf package (the test extra) compares directly")
    c = CASES[name]
    _, per_block, block_bytes, _ = GGML_TYPES[c["id"]]
    rng = np.random.default_rng(c["id"])
    n_blocks = 64 if per_block > 1 else 4 * 256
    raw = rng.integers(0, 256, n_blocks * block_bytes, dtype=np.uint8)
    with np.errstate(all="ignore"):
        want = np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]), np.float32).reshape(-1)
    _same_bits(dequantize(c["id"], Tensor(raw), want.shape).numpy(), want, name)
