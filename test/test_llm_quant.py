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
import sys

import numpy as np
import pytest

from tinygrad import Device, Tensor
from tinygrad.apps.llm.linear import Linear
from tinygrad.nn.state_file import CheckpointBytes
from tinygrad.nn.state_gguf import GGML_TYPES, WORD_COLUMNS, WORD_TYPES, GGUFTensor, column_step, dequantize, in_columns

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


# ---- a GPU's layout: Q4_K, Q5_K and Q6_K as 32-bit words (state_gguf.WORD_TYPES), a word a step of the product's sum


@pytest.fixture
def words_everywhere(monkeypatch):
    """Linear keeps the word types as words on this device too (a GPU's layout: the Tensor ops are any device's)."""
    monkeypatch.setattr(Linear, "word_bits", classmethod(lambda cls, ttype, device: ttype in WORD_TYPES))


WORD_NAMES = [GGML_TYPES[t][0] for t in WORD_TYPES]


@pytest.mark.parametrize("name", WORD_NAMES)
def test_words_are_the_file_bytes_and_bit_exact(name, words_everywhere):
    """As words, a matrix holds its blocks' bytes (Q6_K's 210 padded to whole words: 212/210 of them, within the
    1.1x allowed), and its values are gguf's bit for bit (NaN, infinite and subnormal scales among the fixture's)."""
    raw, want = _case(name)
    lin = Linear(_matrix(raw, CASES[name]["id"], _shape(name, want.size)), Device.DEFAULT)
    assert lin.words is not None and lin.device_bytes() == raw.nbytes // GGML_TYPES[CASES[name]["id"]][2] * \
        WORD_TYPES[CASES[name]["id"]][0] * 4 <= 1.1 * raw.nbytes
    _same_bits(lin.weight().numpy(), want, name)


@pytest.mark.parametrize("name", WORD_NAMES)
def test_words_on_a_device_other_than_the_default(name, words_everywhere):
    """A model on another device than Device.DEFAULT (CUDA beside a CLANG default): every index the dequantizers
    make is on the words' device (an arange on the default one failed: "SHR mixes devices")."""
    other = next((d for d in ("CPU", "CLANG") if d != Device.DEFAULT), None)
    try:
        Device[other]
    except Exception:
        pytest.skip(f"no second host device beside {Device.DEFAULT}")
    raw, want = _case(name)
    lin = Linear(_matrix(raw, CASES[name]["id"], _shape(name, want.size)), other)
    assert lin.words is not None and lin.words.device == other
    _same_bits(lin.weight().numpy(), want, name)


@pytest.mark.parametrize("name", WORD_NAMES)
def test_word_dequantizers_equal_gguf_on_random_blocks(name, words_everywhere):
    """Every bit pattern of fresh random blocks, through the words, against gguf.quants.dequantize itself."""
    gguf = _gguf()
    c = CASES[name]
    raw = np.random.default_rng(c["id"] + 100).integers(0, 256, 64 * GGML_TYPES[c["id"]][2], dtype=np.uint8)
    with np.errstate(all="ignore"):
        want = np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]), np.float32).reshape(-1)
    _same_bits(Linear(_matrix(raw, c["id"], (4, want.size // 4)), Device.DEFAULT).weight().numpy(), want, name)


@pytest.mark.parametrize("name", WORD_NAMES)
def test_words_product_and_stacking(name, words_everywhere):
    """x @ W.T over words, one row of x and several, equals numpy's; matrices of one word type stack (the file's
    bytes in all), of two types don't."""
    raw, w = _ordinary(name, 6)
    ttype = CASES[name]["id"]
    row = raw.size // 6
    ts = [_matrix(raw[:row * 2], ttype, (2, w.shape[1]), "a"), _matrix(raw[row * 2:], ttype, (4, w.shape[1]), "b")]
    lin = Linear.stacked(ts, Device.DEFAULT)
    assert lin.words is not None and lin.shape == w.shape
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, w.shape[1])).astype(np.float32)
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(lin(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    other = 14 if ttype == 12 else 12
    odd = _matrix(np.zeros(GGML_TYPES[other][2] * w.shape[1] // 256, np.uint8), other, (1, w.shape[1]), "c")
    assert Linear.stacked([ts[0], odd], Device.DEFAULT) is None


def test_large_words_matrix_loads_in_chunks(monkeypatch, words_everywhere):
    """Words are copied a chunk of rows at a time too (the last chunk overlapping the one before), stacked matrices
    as well: the device holds each block's bytes, Q6_K's padded to whole words (in columns where WORD_COLUMNS
    arranges them)."""
    from tinygrad.apps.llm import linear
    rng = np.random.default_rng(6)
    # rows of 16 blocks (4096 values): long enough for columns (state_gguf.in_columns)
    a, b = rng.integers(0, 256, (13, 16 * 210), dtype=np.uint8), rng.integers(0, 256, (7, 16 * 210), dtype=np.uint8)
    ts = [_matrix(a, 14, (13, 4096), "a"), _matrix(b, 14, (7, 4096), "b")]
    monkeypatch.setattr(linear, "LOAD_CHUNK_BYTES", 3 * 16 * 210)  # 3 rows a chunk: 7 chunks, the last overlapping
    blocks = np.concatenate([a, b]).reshape(-1, 210)
    padded = np.concatenate([blocks, np.zeros((blocks.shape[0], 2), np.uint8)], axis=1).reshape(20, -1)
    want = WORD_COLUMNS[14][0](blocks, column_step(16)).reshape(20, -1) if in_columns(14, 16) \
        else padded.view("<u4")
    np.testing.assert_array_equal(Linear.stacked(ts, Device.DEFAULT).words.numpy(), want)
    np.testing.assert_array_equal(Linear(ts[0], Device.DEFAULT).words.numpy(), want[:13])


def _cuda_opts():
    from tinygrad.codegen.gpu_dims import CUDA_GLOBAL_MAX, CUDA_LOCAL_MAX
    from tinygrad.codegen.kernel import LinearizerOptions
    return LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                             half_vectors=True, global_max=CUDA_GLOBAL_MAX, local_max=CUDA_LOCAL_MAX)


def _run_as_cuda(kern) -> list[np.ndarray]:
    """The output of kernel `kern` (test_gpu_codegen's Kernel) run on the host as CUDA, for each launch tried: a
    kernel on the linearizer's grid by test_gpu_codegen's emulation, one the renderer spreads over the GPU (a block
    or a warp a row, grid-stride loops: any launch) by test_cuda_render_host's, with a few launches."""
    from test.unit.test_gpu_codegen import _run
    if kern.lin.global_size is not None:
        return _run([kern])
    unit = os.path.join(os.path.dirname(__file__), "unit")
    if unit not in sys.path:
        sys.path.insert(0, unit)  # (test_cuda_render_host imports its neighbours by their names)
    from test_cuda_render_host import _host_kernels, _placed
    launch = _host_kernels({"k": kern.src})["k"]
    outs = []
    for grid, block in ((1, 32), (3, 64), (2, 256)):
        bufs = [_placed(np.full(b.size, np.nan, b.dtype.np) if i == 0 else
                        np.frombuffer(b.as_buffer(), dtype=b.dtype.np)) for i, b in enumerate(kern.si.bufs)]
        launch(grid, block, bufs)
        outs.append(bufs[0])
    return outs


@pytest.mark.parametrize("name", WORD_NAMES)
@pytest.mark.parametrize("rows,blocks,m", [(37, 9, 1), (37, 9, 2), (37, 9, 7), (2400, 9, 7), (21, 3, 1), (5, 16, 1),
                                           (3, 32, 1), (3, 64, 2)])
def test_words_product_runs_as_cuda_on_the_host(name, rows, blocks, m, words_everywhere):
    """The product's CUDA kernel (as the GPU would compile it: the renderer's block a row for a few rows of x, the
    linearizer's grid where the outputs are many, a thread a row for short rows), run by a host emulation of CUDA
    on random blocks with finite scales, against numpy over the dequantized values: M = 1, 2 and 7 rows of x, odd
    sizes; rows of 16 and 64 blocks take 2 and 4 words a step (Q6_K 2), 9 one (in columns: 32 blocks 4, 64 8, the
    others 2)."""
    pytest.importorskip("hypothesis")  # (test_gpu_codegen's)
    from test.unit.test_gpu_codegen import Kernel
    ttype = CASES[name]["id"]
    block_bytes = GGML_TYPES[ttype][2]
    rng = np.random.default_rng(rows * m + ttype)
    b = rng.integers(0, 256, (rows * blocks, block_bytes), dtype=np.uint8)
    for at in (0, 2) if ttype in (12, 13) else (208,):
        b[:, at:at + 2] = rng.uniform(-0.01, 0.01, (rows * blocks, 1)).astype(np.float16).view(np.uint8)
    lin = Linear(_matrix(b.reshape(-1), ttype, (rows, 256 * blocks)), Device.DEFAULT)
    w = lin.weight().numpy()
    x = rng.standard_normal((m, 256 * blocks)).astype(np.float32)
    kern = Kernel(lin(Tensor(x).realize()), lopts=_cuda_opts())
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    for got in _run_as_cuda(kern):
        np.testing.assert_allclose(got.reshape(m, rows), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("name", WORD_NAMES)
@pytest.mark.parametrize("blocks", [16, 32, 64])
def test_word_columns_of_every_step_are_the_blocks_values(name, blocks, words_everywhere):
    """Rows of 16, 32 and 64 blocks are arranged for 2, 4 and 8 words a step (column_step): their values, through
    the words, equal the byte dequantizers' (bit-exact against gguf) of the same blocks, bit for bit."""
    ttype = CASES[name]["id"]
    assert ttype not in WORD_COLUMNS or column_step(blocks) == {16: 2, 32: 4, 64: 8}[blocks]
    rng = np.random.default_rng(blocks + ttype)
    b = rng.integers(0, 256, (3 * blocks, GGML_TYPES[ttype][2]), dtype=np.uint8)
    shape = (3, 256 * blocks)
    want = dequantize(ttype, Tensor(b.reshape(-1)), shape).numpy()
    _same_bits(Linear(_matrix(b.reshape(-1), ttype, shape), Device.DEFAULT).weight().numpy(), want, name)


def test_words_a_step_leave_a_block_of_steps_a_row():
    """A step takes 2 or 4 words where the row still has BLOCK_REDUCE_MIN_INPUTS (256) steps, and no more than a
    quarter of a run of consecutive words (Q4_K's 8, Q6_K's 4)."""
    step = Linear.words_a_step
    assert [step(n, 8) for n in (256, 288, 512, 1024, 1792, 4096)] == [1, 1, 2, 4, 4, 4]
    assert [step(n, 4) for n in (256, 512, 1792)] == [1, 2, 2]
    assert [step(n, 16) for n in (512, 1792)] == [2, 4]


def test_synthetic_q4_k_m_linears_hold_their_file_bytes_on_a_gpu(tmp_path, monkeypatch):
    """Every Linear of a synthetic Q4_K_M model (Q4_K, and Q6_K for some attn_v and ffn_down and the output) as a
    GPU lays it out (word_layout with CUDA's options, here on the host device): within 1.1x of the file's tensor
    bytes, matrix by matrix and in all."""
    from tinygrad.apps.llm import synthetic
    from tinygrad.apps.llm.model import Transformer
    from tinygrad.nn.state_gguf import gguf_tensors
    monkeypatch.setitem(synthetic.SIZES, "llama-q4k", synthetic.Shape("llama", 2, 256, 512, 4, 2, 64, 384, 256,
                                                                      tied=False))
    path = synthetic.write_synthetic(str(tmp_path / "q4km.gguf"), "llama:llama-q4k", "Q4_K_M")
    kv, tensors = gguf_tensors(path)
    opts = _cuda_opts()
    monkeypatch.setattr(Linear, "word_bits", classmethod(lambda cls, ttype, device: cls.word_layout(ttype, opts)))
    model = Transformer(kv, tensors, Device.DEFAULT, max_context=64)
    linears = [model.output] + [v for layer in model.layers for v in layer.values() if isinstance(v, Linear)]
    assert {lin.ttype for lin in linears} == {12, 14} and all(lin.words is not None for lin in linears)
    file_bytes = 0
    for lin in linears:
        nbytes = lin.shape[0] * lin.shape[1] // 256 * GGML_TYPES[lin.ttype][2]
        assert lin.device_bytes() <= 1.1 * nbytes
        file_bytes += nbytes
    quantized = [t for name, t in tensors.items() if t.ttype in (12, 14) and name != "token_embd.weight"]
    assert file_bytes == sum(t.nbytes for t in quantized)
    assert sum(lin.device_bytes() for lin in linears) <= 1.1 * file_bytes


def test_many_rows_dequantize_to_half_for_tensor_cores(monkeypatch):
    """A prefill's product on a device with tensor cores: W dequantized to half once, then one half product; the
    result is the quantized product's within half rounding (the path forced on, then off, on any device)."""
    rng = np.random.default_rng(3)
    # random Q4_K blocks (144 bytes: fp16 d and dmin, 12 bytes of scales, 128 of nibbles) with weights' scales
    blocks = rng.integers(0, 256, (24 * 2, 144), dtype=np.uint8)
    blocks[:, 0:2] = np.frombuffer(np.float16(2e-3).tobytes(), np.uint8)
    blocks[:, 2:4] = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    lin = Linear(_matrix(blocks.reshape(-1), CASES["Q4_K"]["id"], (24, 512)), Device.DEFAULT)
    x = Tensor(rng.standard_normal((40, lin.shape[1])).astype(np.float32))
    monkeypatch.setattr(Linear, "tensor_core_rows", lambda self, x: False)
    plain = lin(x).numpy()
    monkeypatch.setattr(Linear, "tensor_core_rows", lambda self, x: x.shape[0] >= 32)
    fast = lin(x).numpy()
    assert lin(x[:8]).shape == (8, lin.shape[0])
    scale = np.abs(plain).max()
    np.testing.assert_allclose(fast, plain, atol=4e-3 * scale, rtol=4e-3)
