"""The Metal renderer's MSL, checked at the level of its parse: each kernel's signature (buffers in address spaces with
consecutive [[buffer(n)]] indices, then the grid attributes), threadgroup memory declared at the kernel's scope,
barriers, shuffles, half and bfloat16, and none of CUDA's words. Running the MSL is test_metal_fake.py's job."""
import re

import pytest

from tinygrad import Tensor, Variable, dtypes
from tinygrad.codegen.kernel import LinearizerOptions
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.ops import BufferOps
from tinygrad.renderer.metal import GRID_PARAMS, MetalRenderer

OPTS = LinearizerOptions("METAL", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                         shared_max=32 * 1024)
_KERNEL = re.compile(r"^kernel void (\w+)\((.*)\) \{$", re.M)
_PARAM = re.compile(r"^(?:(const )?device (\w+)\* (\w+)|constant int& (\w+)) \[\[buffer\((\d+)\)\]\]$")
CUDA_WORDS = re.compile(r"blockIdx|threadIdx|__shared__|__syncthreads|__shfl|atomicAdd|__global__|__device__|"
                        r"\bdouble\b|__restrict__")


def render(*tensors, grid: bool = True) -> list[str]:
    return [spec.src for spec in render_specs(*tensors, grid=grid)]


def render_specs(*tensors, grid: bool = True) -> list:
    """The ProgramSpec of every kernel computing `tensors`, rendered as MSL (`grid=False`: the renderer's loops)."""
    out = []
    for si in create_schedule_with_vars([t.lazydata for t in tensors])[0]:
        if si.ast[0].op is BufferOps.STORE:
            lin = Linearizer(si.ast, OPTS)
            lin.gpu = lin.gpu and grid
            lin.linearize()
            out.append(MetalRenderer(lin.name, lin.uops))
    return out


def parse(src: str) -> dict:
    """The kernel's name, its parameters as (kind, type, name, index), and its body split into top-level statements
    (those at the kernel's own scope), after checking that braces and parentheses balance."""
    m = _KERNEL.search(src)
    assert m, src
    params, grid = [], []
    for p in m.group(2).split(", "):
        pm = _PARAM.match(p)
        if pm:
            kind = "var" if pm.group(4) else ("in" if pm.group(1) else "out")
            params.append((kind, pm.group(2), pm.group(3) or pm.group(4), int(pm.group(5))))
        else:
            gm = re.fullmatch(r"uint3 (\w+) \[\[(\w+)\]\]", p)
            assert gm, f"unparsed parameter {p!r}"
            grid.append((gm.group(1), gm.group(2)))
    body = src[m.end():]
    depth, top, line = 1, [], ""
    for ch in body:
        if depth == 1 and ch not in "{}":
            line += ch
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
    assert depth == 0 and src.count("(") == src.count(")"), "unbalanced kernel"
    top = [s.strip() for s in line.split(";") if s.strip()]
    return {"name": m.group(1), "params": params, "grid": grid, "top": top, "body": body}


def check_kernel(src: str) -> dict:
    k = parse(src)
    assert not CUDA_WORDS.search(src), CUDA_WORDS.search(src)
    assert src.count("#include <metal_stdlib>") == 1 and "using namespace metal;" in src
    # the buffers are bound at consecutive indices, written ones not const; the grid comes last, every attribute once
    assert [p[3] for p in k["params"]] == list(range(len(k["params"])))
    assert tuple(k["grid"]) == GRID_PARAMS
    # threadgroup arrays only at the kernel's own scope (MSL refuses them in nested blocks)
    nested = [line for line in k["body"].splitlines() if line.startswith("    ") and "threadgroup " in line
              and not line.strip().startswith("threadgroup_barrier") and "*)" not in line]
    assert not nested, nested
    return k


def test_matmul_tiles_in_threadgroup_memory():
    (src,) = render(Tensor.empty(64, 64).realize() @ Tensor.empty(64, 64).realize())
    k = check_kernel(src)
    assert [p[:2] for p in k["params"]] == [("out", "float"), ("in", "float"), ("in", "float")]
    shared = [s for s in k["top"] if s.startswith("threadgroup float ")]
    assert len(shared) == 2, k["top"]  # A's and B's tiles
    assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in src
    # vector reads of the tiles carry their address space
    assert "*(const threadgroup tg_vec<float, 4>*)" in src and "(const tg_vec" not in src
    assert "tg_gid.x" in src and "tg_lid.x" in src


def test_reduction_combines_through_threadgroup_memory_and_simd_shuffles():
    specs = render_specs(Tensor.empty(70000).realize().sum(), Tensor.empty(40, 1001).realize().max(axis=1))
    srcs = [spec.src for spec in specs]
    assert len(srcs) == 2
    for src in srcs:
        k = check_kernel(src)
        assert "threadgroup float tg_red[32]" in src  # a partial result per SIMD group of 32
        assert "tg_shfl_down(" in src and "simd_shuffle_down(" in src
        assert src.count("threadgroup_barrier(mem_flags::mem_threadgroup);") >= 2
        # Metal has no module-scope device variables: one big reduction takes one threadgroup, no atomics
        assert "tg_part" not in src and "atomic" not in src and "tg_done" not in src
        assert k["params"][0][0] == "out"
    assert specs[0].persistent


def test_half_is_native_and_math_runs_in_float():
    a = Tensor.empty(256, dtype=dtypes.float16).realize()
    (src,) = render((a * 2).exp2() + a.sqrt())
    k = check_kernel(src)
    assert [p[1] for p in k["params"]] == ["half", "half"]
    assert "((half)exp2((float)(" in src and "((half)sqrt((float)(" in src
    assert "((half)2.0f)" in src


def test_bfloat16_is_stored_as_bits_and_computed_in_float():
    a = Tensor.empty(256, dtype=dtypes.bfloat16).realize()
    (src,) = render(a * 3)
    k = check_kernel(src)
    assert [p[1] for p in k["params"]] == ["ushort", "ushort"]
    assert "tg_bf16_to_f32(" in src and "tg_f32_to_bf16(" in src and "inline float tg_bf16_round" in src


def test_symbolic_variable_is_a_constant_reference():
    v = Variable("n", 1, 300).bind(10)
    (src,) = render(Tensor.empty(300).realize().shrink(((0, v),)) * 2)
    k = check_kernel(src)
    assert ("var", None, "n", 2) in k["params"]


def test_special_constants_and_64_bit_ints():
    a = Tensor.empty(16).realize()
    (src,) = render(a.maximum(float("-inf")) + float("nan"))
    check_kernel(src)
    assert "as_type<float>(0xff800000u)" in src and "as_type<float>(0x7fc00000u)" in src
    (src,) = render(Tensor.empty(16, dtype=dtypes.int64).realize() * (1 << 40))
    assert "1099511627776l" in src and "device long*" in src


def test_float64_is_refused_with_a_clear_error():
    with pytest.raises(NotImplementedError, match="Metal has no double"):
        render(Tensor.empty(16, dtype=dtypes.float64).realize() + 1)


def test_simdgroup_matrix_kernel():
    from tinygrad.codegen.kernel import Opt, OptOps
    from tinygrad.codegen.tensor_cores import TC_CONFIGS
    tc_opts = LinearizerOptions("METAL", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                                shared_max=32 * 1024, tensor_cores=("simdgroup",))
    cfg = next(i for i, c in enumerate(TC_CONFIGS) if (c.bm, c.bn, c.bk, c.wm, c.wn) == (64, 64, 32, 2, 2))
    a = Tensor.empty(128, 96, dtype=dtypes.half).realize()
    b = Tensor.empty(96, 128, dtype=dtypes.half).realize()
    srcs = {}
    bt, at = b.T.contiguous().realize().T, a.T.contiguous().realize().T  # stored N-major (K-major)
    for name, t in (("ab", a @ b), ("abt", a @ bt), ("atb", at @ b)):
        si = create_schedule_with_vars([t.lazydata])[0][-1]
        lin = Linearizer(si.ast, tc_opts)
        lin.apply_opt(Opt(OptOps.TC, 0, cfg))
        lin.linearize()
        srcs[name] = MetalRenderer(lin.name, lin.uops).src
    for name, src in srcs.items():
        k = check_kernel(src)
        assert [p[:2] for p in k["params"]] == [("out", "half"), ("in", "half"), ("in", "half")], name
        # two stages of A's and B's 64x32 slices (half, as Metal's buffers hold it) and an 8x8 float tile per SIMD
        # group to read the accumulators back through, all at the kernel's scope
        shared = sorted(s for s in k["top"] if s.startswith("threadgroup "))
        assert shared == ["threadgroup float tc_c[256]", "threadgroup half tc_a[4096]", "threadgroup half tc_b[4096]"]
        # the prelude's three helpers, each once, over the MSL simdgroup API
        for helper in ("inline tg_vec<half, 2> tg_sg_load(const threadgroup half* p, ulong stride)",
                       "inline tg_vec<float, 2> tg_sg_mma_f16(tg_vec<half, 2> a, tg_vec<half, 2> b, "
                       "tg_vec<float, 2> c)",
                       "inline void tg_sg_store(threadgroup float* p, ulong stride, tg_vec<float, 2> c)"):
            assert src.count(helper) == 1, (name, helper)
        for call in ("simdgroup_load(m, p, stride, ulong2(0, 0), T);", "simdgroup_multiply_accumulate(mc, ma, mb, mc);",
                     "simdgroup_store(m, p, stride, ulong2(0, 0), false);"):
            assert src.count(call) == 1, (name, call)
        assert "simdgroup_half8x8" in src and "simdgroup_float8x8" in src
        body = k["body"]
        # a SIMD group's 32x32 part of the tile: 4x4 accumulators, each updated by 4 k8 steps of a BK=32 slice
        assert len(re.findall(r"\btg_sg_mma_f16\(", body)) == 4 * 4 * 4
        assert len(re.findall(r"tg_vec<float, 2> acc\d+ = ", body)) == 16
        # read back: one simdgroup_store per accumulator into the group's own tile (8 floats a row)
        assert len(re.findall(r"tg_sg_store\(tc_c\+.*, 8, acc\d+\);$", body, re.M)) == 16
        loads = re.findall(r"tg_sg_load<(true|false)>\(tc_([ab])\+.*, (\d+)\);$", body, re.M)
        assert len(loads) == 4 * (4 + 4)  # per k8 step: 4 tiles of A, 4 of B
        # a slice staged K-major has rows of BK=32; transposed loads where the slice runs the other way
        want = {"ab": {("false", "a", "32"), ("false", "b", "64")}, "abt": {("false", "a", "32"), ("true", "b", "32")},
                "atb": {("true", "a", "64"), ("false", "b", "64")}}[name]
        assert set(loads) == want, (name, set(loads))
        # no warp shuffles or CUDA matrix instructions
        assert "ldmatrix" not in src and "mma.sync" not in src
