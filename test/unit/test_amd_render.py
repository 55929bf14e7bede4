"""The HIP renderer (renderer/hip.py) and the AMD compiler (runtime/compiler_amd.py): the rendered source of the
standard kernel shapes, and, for each of gfx1100, gfx90a and gfx942 where a clang that compiles for it is installed
(Debian 12: clang-19 + lld-19; clang 14 lists amdgcn but knows no gfx1100), code objects checked as AMDGPU ELF files
with a kernel descriptor per kernel. How that clang is found is tested on fake clangs."""
import os
import shutil
import struct
import subprocess

import pytest

from tinygrad.device import CompileError


def _render_hip(*tensors, grid: bool = True, wave: int = 32) -> list[str]:
    """The HIP source of every kernel computing `tensors` (`grid=False`: loops the renderer spreads over the GPU)."""
    return [spec.src for spec in _render_hip_specs(*tensors, grid=grid, wave=wave)]


def _render_hip_specs(*tensors, grid: bool = True, wave: int = 32) -> list:
    """The ProgramSpec of every kernel computing `tensors`, rendered as HIP (see _render_hip)."""
    from tinygrad.codegen.kernel import LinearizerOptions
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.ops import BufferOps
    from tinygrad.renderer.hip import hip_renderer
    opts = LinearizerOptions("AMD", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                             shared_max=64 * 1024)
    out = []
    for si in create_schedule_with_vars([t.lazydata for t in tensors])[0]:
        if si.ast[0].op is BufferOps.STORE:
            lin = Linearizer(si.ast, opts)
            lin.gpu = lin.gpu and grid
            lin.linearize()
            out.append(hip_renderer(wave)(lin.name, lin.uops))
    return out


def _kernels(wave: int = 32) -> dict[str, str]:
    from tinygrad import Tensor, dtypes
    a = Tensor.empty(40, 300).realize()
    srcs = {
        "elementwise": _render_hip(a * 2 + a.exp2(), wave=wave),
        "reduce_rows": _render_hip(a.max(axis=1), wave=wave),
        "reduce_all": _render_hip(Tensor.empty(1 << 17).realize().sum() / 2, wave=wave),
        "matmul": _render_hip(Tensor.empty(64, 64).realize() @ Tensor.empty(64, 64).realize(), wave=wave),
        "half": _render_hip((a.cast(dtypes.float16) * 3).sqrt(), grid=False, wave=wave),
        "bfloat16": _render_hip((a.cast(dtypes.bfloat16) + 1).cast(dtypes.float32), wave=wave),
        "double": _render_hip(Tensor.empty(100, dtype=dtypes.float64).realize().exp2().sin().log2(), wave=wave),
    }
    return {k: v[-1] for k, v in srcs.items()}


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


def test_hip_source_uses_amdgcn_builtins_not_cuda(kernels):
    for name, src in kernels.items():
        assert 'extern "C" __global__ void' in src, name
        # headerless: nothing of CUDA's headers or PTX
        for cuda in ("blockIdx", "threadIdx", "__syncthreads", "asm(", "__shfl_down_sync", " exp2f("):
            assert cuda not in src, (name, cuda)
    g = kernels["elementwise"]
    assert "__builtin_amdgcn_workgroup_id_x()" in g and "__builtin_amdgcn_workitem_id_x()" in g
    assert "__builtin_exp2f(" in g and "__launch_bounds__(" in g


def test_reduction_uses_local_memory_barriers_and_wave_shuffles(kernels):
    src = kernels["reduce_all"]
    assert "__shared__" in src and "tg_barrier();" in src and "tg_shfl_down(" in src
    assert "tg_red[32]" in src  # a partial per wave32 wavefront of a 1024-thread block
    assert "__atomic_fetch_add(&tg_done, 1u" in src  # the last block combines the grid's partials
    wave64 = _kernels(64)["reduce_all"]
    assert "tg_red[16]" in wave64 and "tg_s = 32" in wave64 and "& 63u" in wave64


def test_matmul_stages_tiles_in_local_memory(kernels):
    src = kernels["matmul"]
    assert "__shared__" in src and "tg_barrier();" in src


def test_half_bfloat16_and_double_need_no_device_library(kernels):
    half, bf16, dbl = kernels["half"], kernels["bfloat16"], kernels["double"]
    assert "__builtin_bit_cast(_Float16, h)" in half and "tg_f16_round(" in half
    assert "tg_f32_to_bf16(" in bf16 or "tg_bf16_to_f32(" in bf16
    # amdgcn has no double exp2/log2/sin instruction: the prelude's series, never a libcall
    assert "tg_exp2_f64(" in dbl and "tg_sin_f64(" in dbl and "tg_log2_f64(" in dbl


def test_wave_width_is_checked():
    from tinygrad.renderer.hip import HIPLanguage
    with pytest.raises(ValueError, match="32 or 64"):
        HIPLanguage(16)


# ---- code objects (each needs a clang that compiles for its target; they skip without one) ----
TARGETS = ("gfx1100", "gfx90a", "gfx942")


def _clang(arch: str = "gfx1100"):
    """The clang that builds code objects for `arch`, or a skip saying why there is none."""
    from tinygrad.runtime.compiler_amd import find_amd_clang
    try:
        return find_amd_clang(arch)
    except CompileError as e:
        pytest.skip(str(e))


def _elf_header(image: bytes) -> dict:
    ident = image[:16]
    machine, = struct.unpack_from("<H", image, 18)
    flags, = struct.unpack_from("<I", image, 48)
    return {"magic": ident[:4], "class": ident[4], "osabi": ident[7], "abiversion": ident[8], "machine": machine,
            "flags": flags}


@pytest.mark.parametrize("target", TARGETS)
def test_code_objects_are_amdgpu_elf_with_a_descriptor_per_kernel(kernels, target):
    _clang(target)
    from tinygrad.runtime import _amd
    from tinygrad.runtime.compiler_amd import AMDCompiler
    compiler = AMDCompiler(target)
    code_objects = {name: compiler.code_object(kernels[name])
                    for name in ("matmul", "reduce_all", "reduce_rows", "half", "double")}
    for name, image in code_objects.items():
        h = _elf_header(image)
        assert h["magic"] == b"\x7fELF" and h["class"] == 2
        assert h["machine"] == 224 and h["osabi"] == 64  # EM_AMDGPU, ELFOSABI_AMDGPU_HSA
        co = _amd.parse_code_object(image)
        assert co["gfx"] == target
        assert len(co["kernels"]) == 1
        k = co["kernels"][0]
        assert k["descriptor_offset"] % 64 == 0 and k["entry_offset"] < co["image_size"]
        assert k["wave32"] == (target == "gfx1100")
        # the arguments only: two pointers (16 bytes), or three for the matmul; no hidden arguments
        assert k["kernarg_size"] == (24 if name == "matmul" else 16)
        assert k["private_segment_fixed_size"] == 0
        if name in ("matmul", "reduce_all"):
            assert k["group_segment_fixed_size"] > 0  # local memory (short rows reduce within a wavefront: none)
    # each kernel's descriptor names its own code: the names are the kernels'
    assert _amd.parse_code_object(code_objects["matmul"])["kernels"][0]["name"].startswith("r_64_64")


def _wmma_source() -> str:
    """One wavefront's 16x16x16 half WMMA through the renderer's spelling (prelude and expression)."""
    from tinygrad.renderer.gpu import VEC_PRELUDE
    from tinygrad.renderer.hip import HIP_PRELUDE, hip_language
    lang = hip_language(32)
    call = lang.render_wmma("wmma_f16_gfx11", ["a", "b", "c"], None)
    return (HIP_PRELUDE + VEC_PRELUDE + lang.wmma_prelude({"wmma_f16_gfx11"}, False) +
            'extern "C" __global__ void __launch_bounds__(32) wmma(float* out, const unsigned short* A, '
            "const unsigned short* B) {\n"
            "  const int l = __builtin_amdgcn_workitem_id_x();\n"
            "  tg_vec<unsigned short, 16> a, b; tg_vec<float, 8> c;\n"
            "  for (int i = 0; i < 16; i++) { a.e[i] = A[(l % 16) * 16 + i]; b.e[i] = B[i * 16 + l % 16]; }\n"
            "  for (int i = 0; i < 8; i++) c.e[i] = 0.0f;\n"
            f"  c = {call};\n"
            "  for (int i = 0; i < 8; i++) out[(2 * i + l / 16) * 16 + l % 16] = c.e[i];\n}\n")


def test_wmma_kernel_for_gfx1100():
    _clang()
    from tinygrad.runtime import _amd
    from tinygrad.runtime.compiler_amd import AMDCompiler
    image = AMDCompiler("gfx1100").code_object(_wmma_source())
    co = _amd.parse_code_object(image)
    assert co["gfx"] == "gfx1100" and [k["name"] for k in co["kernels"]] == ["wmma"]
    objdump = shutil.which("llvm-objdump-19") or shutil.which("llvm-objdump")
    if objdump:
        import tempfile
        with tempfile.NamedTemporaryFile(suffix=".co") as f:
            f.write(image)
            f.flush()
            dis = subprocess.run([objdump, "-d", "--mcpu=gfx1100", f.name], capture_output=True, text=True).stdout
        assert "v_wmma_f32_16x16x16_f16" in dis
    # CDNA has no RDNA3 WMMA: the compiler's own error, with its log
    with pytest.raises(CompileError, match="gfx90a"):
        AMDCompiler("gfx90a").code_object(_wmma_source())


def test_compile_errors_carry_the_compilers_log():
    _clang()
    from tinygrad.runtime.compiler_amd import AMDCompiler
    with pytest.raises(CompileError, match="error:.*undeclared|undeclared.*error") as e:
        AMDCompiler("gfx1100").code_object('extern "C" __attribute__((global)) void k() { nope(); }')
    assert "--- source ---" in str(e.value)


def test_missing_clang_is_a_clear_error(monkeypatch):
    from tinygrad.runtime import compiler_amd
    monkeypatch.setenv("AMD_CLANG", "clang-that-does-not-exist")
    compiler_amd.find_amd_clang.cache_clear()
    try:
        with pytest.raises(CompileError, match="clang-19 and lld-19"):
            compiler_amd.find_amd_clang()
    finally:
        compiler_amd.find_amd_clang.cache_clear()


# fake clangs, as shell scripts: each answers --version and -print-targets (all list amdgcn, as clang 14 does) and
# then behaves as one kind of real clang does when asked to build a code object
_FAKE_CLANG = """#!/bin/sh
case "$1" in
  --version) echo "fake clang version {version}"; exit 0;;
  -print-targets) echo "    amdgcn     - AMD GCN GPUs"; exit 0;;
esac
{body}
"""
_FAKE_BODIES = {
    # clang 14 asked for gfx1100
    "no_arch": 'echo "clang: error: invalid target ID \'gfx1100\'; format is a processor name" >&2; exit 1',
    # a clang whose lld is not installed
    "no_lld": 'echo "clang: error: unable to execute command: Executable \\"lld\\" doesn\'t exist!" >&2; exit 1',
    "hangs": "exec {sleep} 30",
    # exits 0 but writes an x86-64 ELF
    "wrong_elf": 'for a; do out=$a; done; printf "\\177ELF\\002\\001\\001\\0\\0\\0\\0\\0\\0\\0\\0\\0'
                 '\\003\\0\\076\\0" > "$out"',
    # a working one: an ELF header with e_machine EM_AMDGPU (224) at the -o path (the last argument)
    "works": 'for a; do out=$a; done; printf "\\177ELF\\002\\001\\001\\100\\0\\0\\0\\0\\0\\0\\0\\0'
             '\\003\\0\\340\\0" > "$out"',
}


@pytest.fixture
def fake_clangs(tmp_path, monkeypatch):
    """A PATH of only fake clangs named after their behaviour; the probe caches are cleared before and after."""
    from tinygrad.runtime import compiler_amd
    for i, (name, body) in enumerate(_FAKE_BODIES.items()):
        path = tmp_path / f"clang-{name}"
        body = body.replace("{sleep}", shutil.which("sleep") or "/bin/sleep")  # found before PATH is replaced
        path.write_text(_FAKE_CLANG.format(version=f"{i}.0.0", body=body))
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("AMD_CLANG", raising=False)
    monkeypatch.setattr(compiler_amd, "PROBE_TIMEOUT", 1)
    compiler_amd.find_amd_clang.cache_clear()
    compiler_amd.probe_amd_clang.cache_clear()
    yield compiler_amd
    compiler_amd.find_amd_clang.cache_clear()
    compiler_amd.probe_amd_clang.cache_clear()


def test_clang_is_chosen_by_compiling_not_by_its_target_list(fake_clangs, monkeypatch):
    monkeypatch.setattr(fake_clangs, "CLANG_CANDIDATES", tuple(f"clang-{n}" for n in _FAKE_BODIES))
    path, version = fake_clangs.find_amd_clang("gfx1100")
    assert os.path.basename(path) == "clang-works" and version == "fake clang version 4.0.0"
    # every one that does not work was probed and rejected for its own reason
    reasons = {os.path.basename(p): fake_clangs.probe_amd_clang(p, "gfx1100")
               for p in map(shutil.which, fake_clangs.CLANG_CANDIDATES)}
    assert reasons["clang-no_arch"] == (None, "clang: error: invalid target ID 'gfx1100'; format is a processor name")
    assert "lld" in reasons["clang-no_lld"][1] and reasons["clang-no_lld"][0] is None
    assert reasons["clang-hangs"] == (None, "compiling a test kernel took over 1 s")
    assert reasons["clang-wrong_elf"] == (None, "its output is not an AMDGPU ELF")


def test_no_working_clang_names_each_ones_problem(fake_clangs, monkeypatch):
    monkeypatch.setattr(fake_clangs, "CLANG_CANDIDATES", ("clang-19", "clang-no_arch", "clang-no_lld"))
    with pytest.raises(CompileError) as e:
        fake_clangs.find_amd_clang("gfx1100")
    msg = str(e.value)
    assert "compiles HIP for gfx1100" in msg and "apt-get install clang-19 lld-19" in msg
    assert "clang-19: not found" in msg and "invalid target ID 'gfx1100'" in msg and "Executable" in msg
    # and so does the compiler, at its first kernel
    with pytest.raises(CompileError, match="invalid target ID"):
        fake_clangs.AMDCompiler("gfx1100").compile_cached("extern \"C\" __attribute__((global)) void k() {}")


def test_amd_clang_is_probed_too(fake_clangs, monkeypatch):
    monkeypatch.setenv("AMD_CLANG", "clang-no_arch")
    with pytest.raises(CompileError, match="clang-no_arch .*invalid target ID"):
        fake_clangs.find_amd_clang("gfx1100")
    monkeypatch.setenv("AMD_CLANG", "clang-works")
    fake_clangs.find_amd_clang.cache_clear()
    assert fake_clangs.find_amd_clang("gfx1100")[0].endswith("clang-works")


def test_arch_is_checked():
    from tinygrad.runtime.compiler_amd import AMDCompiler
    with pytest.raises(ValueError, match="gfx1100"):
        AMDCompiler("sm_90")


def test_loop_kernels_carry_their_launch_in_the_spec():
    from tinygrad import Tensor
    spec = _render_hip_specs(Tensor.empty(1 << 17).realize().sum() / 2)[-1]
    assert spec.launch is not None and spec.persistent and not spec.waits_for_grid  # AMD has no programmatic launch
    assert _render_hip_specs(Tensor.empty(64).realize() * 2)[-1].launch is None  # the linearizer's grid
