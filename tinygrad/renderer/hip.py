"""Renders a linearized kernel (a list of UOps) as HIP C++ for clang's amdgcn target: HIP's GPULanguage table for the
shared GPU render loop (renderer/gpu.py).

HIP is spelled like CUDA, so this table is CUDA's (renderer/cuda.py: half and bfloat16 stored as their 16 bits and
computed in float, rounded after each op; tg_vec vectors) with AMD's differences. The kernels are compiled with no
headers and no device libraries (`-nogpuinc -nogpulib`; Debian's clang-19 has neither), so everything the CUDA
spelling takes from headers is a clang builtin here, declared in HIP_PRELUDE:
  * indices are `__builtin_amdgcn_workgroup_id_x()` / `__builtin_amdgcn_workitem_id_x()`; block and grid sizes are
    read from the AQL dispatch packet (`__builtin_amdgcn_dispatch_ptr()`), which the CP hands every kernel;
  * math is `__builtin_exp2f` and friends, which the backend lowers to instructions (no ocml calls);
  * the barrier is `s_barrier` between workgroup-scope fences, warp shuffles are `ds_bpermute`;
  * a wavefront is 32 lanes on RDNA (gfx10+) and 64 on CDNA (gfx9), so there is one language object per width.
A host twin (test/native's fake KFD) compiles the same source with a C++ compiler after defining these builtins.
"""
from __future__ import annotations

import functools
from typing import Callable

from tinygrad.codegen.program import ProgramSpec
from tinygrad.codegen.uops import UOp
from tinygrad.dtype import DType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps
from tinygrad.renderer.cuda import BITCAST_PRELUDE, MAX_PRELUDE, VEC_OPS_PRELUDE, CUDALanguage
from tinygrad.renderer.gpu import uops_to_gpu
from tinygrad.renderer.prelude import read_prelude

# NOTE: each definition is guarded, so a host twin can define the same names first with its own meaning
HIP_PRELUDE = read_prelude("hip/hip.h")

# half <-> float through the compiler's _Float16 (amdgcn has it natively; so do the host compilers of the twin)
HALF_PRELUDE = read_prelude("hip/half.h")

# the amdgcn backend has no double exp2, log2 or sin (libcalls into the device libraries): range reduction to
# [-1/2, 1/2] (exp2), [1/sqrt(2), sqrt(2)) (log2) or [-pi, pi] (sin, 2*pi in two parts) and a series that reaches
# double precision there
F64_PRELUDE = read_prelude("hip/f64.h")

# round to nearest even; NaN stays a (quiet) NaN
BF16_PRELUDE = read_prelude("hip/bf16.h")

# RDNA3's wave32 WMMA (gfx11): D(16x16 f32) = A(16x16) * B(16x16) + C over a wavefront, each lane holding 16 A and 16
# B elements (a row of A, a column of B, lanes 16-31 repeating lanes 0-15) and 8 elements of C (every other row; the
# layout is codegen/tensor_cores.TensorCore's "lane"). NOTE: guarded, so that a host twin (which has neither the
# vector types nor the builtins) defines TG_HOST_WMMA and its own tg_wmma_f16/bf16 first
WMMA_PRELUDE = read_prelude("hip/wmma.h")
_WMMA = {"wmma_f16_gfx11": "tg_wmma_f16", "wmma_bf16_gfx11": "tg_wmma_bf16"}


def _hip_math(name: str, f64: str | None = None) -> Callable[[str, DType], str]:
    """A clang builtin the amdgcn backend lowers to instructions: the double one (or F64_PRELUDE's `f64`) for
    float64, else the float one."""
    return lambda x, dt: (f"{f64 or '__builtin_' + name}({x})" if dt == dtypes.float64 else
                          f"__builtin_{name}f({x})")


class HIPLanguage(CUDALanguage):
    """HIP C++ for clang's amdgcn target, headerless. `wave`: the wavefront width (32 on RDNA, 64 on CDNA)."""
    name = "HIP"
    tensor_cores = ()
    hopper_tensor_cores = ()
    # RDNA3 (gfx11) only: ops_amd offers it to the linearizer there (codegen/tensor_cores.TENSOR_CORES' key)
    rdna3_tensor_cores = ("wmma_gfx11",)
    block_idx_fmt = "__builtin_amdgcn_workgroup_id_{}()"
    thread_idx_fmt = "__builtin_amdgcn_workitem_id_{}()"
    grid_wait = False  # no programmatic launches on AMD: the KFD runtime chains its packets itself
    barrier = "tg_barrier();"
    fence = '__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");'
    shared_align = "__attribute__((aligned(16))) "
    # LDS is 64 KB on every target and declared statically (no dynamic group segment at launch)
    static_shared_max = None
    vec_ops_prelude = VEC_OPS_PRELUDE
    bitcast_prelude = BITCAST_PRELUDE
    code_for_op = {
        **CUDALanguage.code_for_op,
        UnaryOps.EXP2: _hip_math("exp2", "tg_exp2_f64"),
        UnaryOps.LOG2: _hip_math("log2", "tg_log2_f64"),
        UnaryOps.SIN: _hip_math("sin", "tg_sin_f64"),
        UnaryOps.SQRT: _hip_math("sqrt"),
        BinaryOps.MOD: lambda a, b, dt: (f"__builtin_fmod({a},{b})" if dt == dtypes.float64 else
                                         f"__builtin_fmodf({a},{b})") if dtypes.is_float(dt) else f"({a}%{b})",
    }

    def __init__(self, wave: int = 32):
        if wave not in (32, 64):
            raise ValueError(f"an AMD wavefront is 32 or 64 lanes, not {wave}")
        self.warp_size = wave

    def block_dim(self, axis: str) -> str:
        return f"tg_block_dim({'xyz'.index(axis)})"

    def grid_dim(self, axis: str) -> str:
        return f"tg_grid_dim({'xyz'.index(axis)})"

    def prelude(self, dts: set[DType]) -> str:
        out = [HIP_PRELUDE, MAX_PRELUDE, HALF_PRELUDE if dtypes.float16 in dts else "",
               BF16_PRELUDE if dtypes.bfloat16 in dts else "", F64_PRELUDE if dtypes.float64 in dts else ""]
        return "".join(out)

    def render_shuffle_down(self, val: str, offset: str) -> str:
        return f"tg_shfl_down({val}, {offset})"

    def render_atomic_inc(self, var: str) -> str:
        return f"__atomic_fetch_add(&{var}, 1u, __ATOMIC_SEQ_CST)"

    def render_wmma(self, name: str, operands: list[str], part) -> str:
        if name not in _WMMA:
            raise NotImplementedError(f"HIP has no tensor core {name}")
        return f"{_WMMA[name]}({', '.join(operands)})"

    def wmma_prelude(self, names: set[str], copies: bool) -> str:
        if copies:
            raise NotImplementedError("HIP has no asynchronous copies to shared memory")
        return WMMA_PRELUDE if names else ""

    def render_ldmatrix(self, ptr: str, matrices: int, trans: bool) -> str:
        raise NotImplementedError("HIP has no matrix loads (ldmatrix)")

    def render_copy_async(self, dst: str, src: str, src_idx: str, valid: str | None) -> str:
        raise NotImplementedError("HIP has no asynchronous copies to shared memory")

    def render_proxy_fence(self, kind: str) -> str:
        raise NotImplementedError(f"HIP has no {kind} fence")



@functools.cache
def hip_language(wave: int = 32) -> HIPLanguage:
    """The HIP language table for wavefronts of `wave` lanes (one object per width)."""
    return HIPLanguage(wave)


def hip_renderer(wave: int = 32) -> Callable[[str, list[UOp]], ProgramSpec]:
    """A renderer function (`renderer(name, uops) -> ProgramSpec`) for a target with `wave`-lane wavefronts."""
    lang = hip_language(wave)
    return functools.partial(uops_to_gpu, lang)


def HIPRenderer(name: str, uops: list[UOp]) -> ProgramSpec:  # noqa: N802 - tinygrad's public spelling
    """HIP source for a wave32 target (RDNA, the default of tinygrad's AMD device)."""
    return uops_to_gpu(hip_language(32), name, uops)
