"""Every ggml type the LLM runtime reads, against the `gguf` package's dequantization (its reference).

Two paths take blocks apart: state_gguf's `dequantize` (Tensor ops, any device) and `Linear` (the file's bytes on
the device, dequantized in the kernel of the product). Both must give gguf's float32 values bit for bit, NaN and
infinite fp16 scales, -0.0 and all-zero blocks included; the device must hold the file's tensor bytes (within 1.1x);
and the product's kernel must render for CUDA as well as for the CPU.

The expected values come from test/fixtures/quant_blocks.json.gz (extra/quant_gguf_fixture.py writes it with gguf),
so these tests run without gguf; where gguf imports, a second test compares with it directly on fresh random blocks.
"""
import gzip
import json
import os

import numpy as np
import pytest

from tinygrad import Device, Tensor
from tinygrad.apps.llm.linear import Linear
from tinygrad.nn.state_file import CheckpointBytes
from tinygrad.nn.state_gguf import GGML_TYPES, GGUFTensor, dequantize

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "quant_blocks.json.gz")
with gzip.open(FIXTURE, "rt") as _f:
    CASES = json.load(_f)
TYPE_NAMES = list(CASES)
QUANTIZED = [n for n in TYPE_NAMES if CASES[n]["values"] > 1]
# how many fixture blocks make a row of a test matrix: a row of a K-type is one 256-value block
ROW_BLOCKS = {n: 1 if CASES[n]["values"] == 256 else 4 for n in QUANTIZED}


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


def _matrix(raw: np.ndarray, ttype: int, shape: tuple[int, int], name: str = "w") -> GGUFTensor:
    """A GGUFTensor of `shape` over bytes `raw` held in memory."""
    return GGUFTensor(CheckpointBytes.in_memory(raw.tobytes(), name), name, shape, ttype, 0, raw.nbytes)


def _shape(name: str, n_values: int) -> tuple[int, int]:
    if CASES[name]["values"] == 1:
        return 4, n_values // 4
    cols = CASES[name]["values"] * ROW_BLOCKS[name]
    return n_values // cols, cols


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_dequantize_is_bit_exact(name):
    """state_gguf's Tensor-op dequantization of the fixture's blocks: gguf's values, bit for bit."""
    raw, want = _case(name)
    _same_bits(dequantize(CASES[name]["id"], Tensor(raw), want.shape).numpy(), want, name)


def _cpu_bits() -> bool:
    """Whether this device's Linear can keep the file's bits (a C renderer with integer vectors: the CPU)."""
    return bool(getattr(getattr(Device[Device.DEFAULT], "linearizer_opts", None), "int_vectors", False))


@pytest.fixture
def all_file_bits(monkeypatch):
    """Every type in the file's bits (the CPU's layout, whatever FILE_BITS_TYPES measured faster)."""
    if not _cpu_bits():
        pytest.skip("the file's bits are the CPU's layout (a renderer with integer vectors)")
    monkeypatch.setattr(Linear, "FILE_BITS_TYPES", frozenset(GGML_TYPES))


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_linear_keeps_the_file_bytes_and_its_values_are_bit_exact(name, all_file_bits):
    """A Linear over the blocks in the file's bits holds exactly the file's bytes on the device (1.0x, within the
    1.1x allowed), and its weight, dequantized in the kernel as its product does, is gguf's values bit for bit."""
    raw, want = _case(name)
    shape = _shape(name, want.size)
    lin = Linear(_matrix(raw, CASES[name]["id"], shape), Device.DEFAULT)
    assert lin.blocks is not None and lin.device_bytes() == raw.nbytes
    _same_bits(lin.weight().numpy(), want, name)


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_cpu_holds_the_file_bytes_within_1_1x_for_every_type(name):
    """On the CPU, in the layout Linear picks for each type (the file's bits for every one, see
    Linear.FILE_BITS_TYPES), the weight is gguf's values (bit for bit, or within a rounding for planes' float32 offset
    products) and the device holds at most 1.1x the file's tensor bytes."""
    if not _cpu_bits():
        pytest.skip("a GPU keeps int8 planes (larger than 4- and 5-bit files) for now")
    raw, want = _case(name)
    lin = Linear(_matrix(raw, CASES[name]["id"], _shape(name, want.size)), Device.DEFAULT)
    got = lin.weight().numpy().reshape(-1)
    if lin.blocks is not None or name not in OFFSET_TYPES:
        _same_bits(got, want, name)
    else:
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=1e-7)
    assert lin.device_bytes() <= 1.1 * raw.nbytes


def _ordinary(name: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, values (rows, cols)) of a matrix of finite values as a trained model's: the fixture's last block (its
    scales ordinary ones) repeated, or for a plain type, normal numbers in its own format."""
    c = CASES[name]
    if c["values"] == 1:
        v = np.random.default_rng(1).standard_normal((rows, 64)).astype(np.float32)
        if name == "F16":
            v = v.astype(np.float16)
        raw = v.view(np.uint8).reshape(-1) if name != "BF16" else (v.view(np.uint32) >> 16).astype("<u2").view(np.uint8)
        return raw, dequantize(c["id"], Tensor(raw), (rows, 64)).numpy()
    raw, want = _case(name)
    n = want.size // len(c["blocks"])
    block, values = raw.reshape(len(c["blocks"]), -1)[-1], want[-n:]
    per_row = ROW_BLOCKS[name]
    return np.tile(block, rows * per_row), np.tile(values, rows * per_row).reshape(rows, -1)


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_linear_product_reads_the_blocks(name):
    """x @ W.T of a Linear, one row of x and several (prefill), equals numpy's over gguf's values."""
    raw, w = _ordinary(name, 5)
    lin = Linear(_matrix(raw, CASES[name]["id"], w.shape), Device.DEFAULT)
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, w.shape[1])).astype(np.float32)
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(lin(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


def test_stacked_linear_reads_each_matrix_rows(all_file_bits):
    """q, k and v of one type stacked: one Linear whose rows are each matrix's in turn, the file's bytes in all;
    matrices of different types don't stack (None)."""
    rng = np.random.default_rng(3)
    raw, want = _ordinary("Q4_K", 8)
    want = want.reshape(-1)
    parts = [raw[:144 * 2], raw[144 * 2:144 * 5], raw[144 * 5:]]  # 2, 3 and 3 rows of 256
    ts = [_matrix(p, 12, (p.size // 144, 256), f"m{i}") for i, p in enumerate(parts)]
    lin = Linear.stacked(ts, Device.DEFAULT)
    assert lin.shape == (8, 256) and lin.device_bytes() == raw.nbytes
    _same_bits(lin.weight().numpy(), want, "Q4_K")
    x = rng.standard_normal((1, 256)).astype(np.float32)
    np.testing.assert_allclose(lin(Tensor(x)).numpy(), x @ want.reshape(8, 256).T, rtol=1e-4, atol=1e-4)
    q8, _ = _case("Q8_0")
    assert Linear.stacked([ts[0], _matrix(q8[:34 * 8], 8, (1, 256))], Device.DEFAULT) is None


def test_large_matrix_loads_in_chunks(monkeypatch, all_file_bits):
    """A matrix larger than a load chunk is copied to the device a chunk of rows at a time (the last overlapping
    the one before), stacked ones too: the device holds the same bytes as a copy in one piece."""
    from tinygrad.apps.llm import linear
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 256, (13, 4 * 34), dtype=np.uint8), rng.integers(0, 256, (7, 4 * 34), dtype=np.uint8)
    ts = [_matrix(a, 8, (13, 128), "a"), _matrix(b, 8, (7, 128), "b")]
    monkeypatch.setattr(linear, "LOAD_CHUNK_BYTES", 3 * 4 * 34)  # 3 rows a chunk: 7 chunks, the last overlapping
    lin = Linear.stacked(ts, Device.DEFAULT)
    np.testing.assert_array_equal(lin.blocks.numpy(), np.concatenate([a, b]))
    np.testing.assert_array_equal(Linear(ts[0], Device.DEFAULT).blocks.numpy(), a)


def _gguf():
    return pytest.importorskip("gguf", reason="the gguf package (the test extra) compares directly")


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_dequantize_equals_gguf_on_random_blocks(name):
    """Fresh random blocks (every bit pattern: NaN, infinite and subnormal scales among them) through both paths,
    against gguf.quants.dequantize itself."""
    gguf = _gguf()
    c = CASES[name]
    _, per_block, block_bytes, _ = GGML_TYPES[c["id"]]
    rng = np.random.default_rng(c["id"])
    n_blocks = 64 if per_block > 1 else 4 * 256
    raw = rng.integers(0, 256, n_blocks * block_bytes, dtype=np.uint8)
    with np.errstate(all="ignore"):
        want = np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]), np.float32).reshape(-1)
    _same_bits(dequantize(c["id"], Tensor(raw), want.shape).numpy(), want, name)
    shape = (4, want.size // 4)
    _same_bits(Linear(_matrix(raw, c["id"], shape), Device.DEFAULT).weight().numpy(), want, name)


def _cuda_sources(y: Tensor) -> list[str]:
    """The CUDA source of each kernel computing `y`, rendered without a GPU (the CUDA renderer over the linearizer's
    uops, as the GPU would compile them)."""
    from tinygrad.codegen.kernel import LinearizerOptions
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.ops import BufferOps
    from tinygrad.renderer.cuda import CUDARenderer
    opts = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16)
    out = []
    for si in create_schedule_with_vars([y.lazydata])[0]:
        if si.ast[0].op is BufferOps.STORE:
            lin = Linearizer(si.ast, opts)
            lin.linearize()
            out.append(CUDARenderer(lin.name, lin.uops).src)
    return out


@pytest.mark.parametrize("name", QUANTIZED)
def test_linear_product_renders_for_cuda(name, all_file_bits):
    """The product's kernel, the blocks dequantized inside it, renders for CUDA: one kernel reading the bytes (the
    GPU itself runs it in test_linear_product_reads_the_blocks where CUDA is the default device)."""
    raw, w = _ordinary(name, 64)
    lin = Linear(_matrix(raw, CASES[name]["id"], w.shape), Device.DEFAULT)
    srcs = _cuda_sources(lin(Tensor.empty(1, w.shape[1]).realize()))
    assert len(srcs) == 1 and "unsigned char" in srcs[0] and "__global__" in srcs[0]
