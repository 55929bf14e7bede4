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

# NOTE: each definition is guarded, so a host twin can define the same names first with its own meaning
HIP_PRELUDE = """#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#endif
// the hsa_kernel_dispatch_packet_t of this launch: workgroup sizes (u16) at byte 4, grid sizes in threads (u32) at 12
__device__ __forceinline__ unsigned tg_block_dim(int d) {
  return ((const unsigned short*)__builtin_amdgcn_dispatch_ptr())[2 + d];
}
__device__ __forceinline__ unsigned tg_grid_dim(int d) {
  return ((const unsigned*)__builtin_amdgcn_dispatch_ptr())[3 + d] / tg_block_dim(d);
}
__device__ __forceinline__ void tg_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ __forceinline__ float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
__device__ __forceinline__ unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
__device__ __forceinline__ double __longlong_as_double(long long v) { return __builtin_bit_cast(double, v); }
// `v` of the lane `s` further down the wavefront: ds_bpermute moves 32 bits from the lane its byte address names
template <class T> __device__ __forceinline__ T tg_shfl_down(T v, int s) {
  const int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  const int addr = (lane + s) << 2;
  union { T t; int i[(sizeof(T) + 3) / 4]; } u;
  for (unsigned k = 0; k < (sizeof(T) + 3) / 4; k++) u.i[k] = 0;
  u.t = v;
  for (unsigned k = 0; k < (sizeof(T) + 3) / 4; k++) u.i[k] = __builtin_amdgcn_ds_bpermute(addr, u.i[k]);
  return u.t;
}
"""

# half <-> float through the compiler's _Float16 (amdgcn has it natively; so do the host compilers of the twin)
HALF_PRELUDE = """__device__ __forceinline__ float tg_f16_to_f32(unsigned short h) {
  return (float)__builtin_bit_cast(_Float16, h);
}
__device__ __forceinline__ unsigned short tg_f32_to_f16(float f) {
  return __builtin_bit_cast(unsigned short, (_Float16)f);
}
__device__ __forceinline__ float tg_f16_round(float f) { return tg_f16_to_f32(tg_f32_to_f16(f)); }
"""

# the amdgcn backend has no double exp2, log2 or sin (libcalls into the device libraries): range reduction to
# [-1/2, 1/2] (exp2), [1/sqrt(2), sqrt(2)) (log2) or [-pi, pi] (sin, 2*pi in two parts) and a series that reaches
# double precision there
F64_PRELUDE = """__device__ __forceinline__ double tg_exp2_f64(double x) {
  if (x != x) return x;
  if (x > 1024.0) return __builtin_inf();
  if (x < -1075.0) return 0.0;
  const double n = __builtin_rint(x);
  const double r = (x - n) * 0.6931471805599453094;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 18; k++) { term *= r / k; sum += term; }
  return __builtin_ldexp(sum, (int)n);
}
__device__ __forceinline__ double tg_log2_f64(double x) {
  if (x != x || x < 0.0) return __builtin_nan("");
  if (x == 0.0) return -__builtin_inf();
  if (x == __builtin_inf()) return x;
  int e;
  double m = __builtin_frexp(x, &e);
  if (m < 0.70710678118654752440) { m *= 2.0; e -= 1; }
  const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
  double term = t, sum = 0.0;
  for (int k = 1; k < 40; k += 2) { sum += term / k; term *= t2; }
  return e + 2.0 * sum * 1.4426950408889634074;
}
__device__ __forceinline__ double tg_sin_f64(double x) {
  if (x != x || x == __builtin_inf() || x == -__builtin_inf()) return __builtin_nan("");
  const double n = __builtin_rint(x * 0.15915494309189533577);
  const double r = (x - n * 6.28318530717958623200) - n * 2.44929359829470635445e-16;
  double term = r, sum = 0.0;
  for (int k = 1; k < 40; k += 2) { sum += term; term *= -r * r / ((k + 1) * (k + 2)); }
  return sum;
}
"""

# round to nearest even; NaN stays a (quiet) NaN
BF16_PRELUDE = """__device__ __forceinline__ float tg_bf16_to_f32(unsigned short b) {
  return __builtin_bit_cast(float, ((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short tg_f32_to_bf16(float f) {
  unsigned int u = __builtin_bit_cast(unsigned int, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float tg_bf16_round(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
"""

# RDNA3's wave32 WMMA (gfx11): D(16x16 f32) = A(16x16) * B(16x16) + C over a wavefront, each lane holding 16 A and 16
# B elements (a row of A, a column of B, lanes 16-31 repeating lanes 0-15) and 8 elements of C (every other row; the
# layout is codegen/tensor_cores.TensorCore's "lane"). NOTE: guarded, so that a host twin (which has neither the
# vector types nor the builtins) defines TG_HOST_WMMA and its own tg_wmma_f16/bf16 first
WMMA_PRELUDE = """#ifndef TG_HOST_WMMA
typedef _Float16 tg_half16 __attribute__((ext_vector_type(16)));
typedef __bf16 tg_bf16x16 __attribute__((ext_vector_type(16)));
typedef short tg_short16 __attribute__((ext_vector_type(16)));
typedef float tg_float8 __attribute__((ext_vector_type(8)));
__device__ __forceinline__ tg_vec<float, 8> tg_wmma_f16(tg_vec<unsigned short, 16> a, tg_vec<unsigned short, 16> b,
    tg_vec<float, 8> c) {
  tg_float8 r = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(tg_half16, a),
      __builtin_bit_cast(tg_half16, b), __builtin_bit_cast(tg_float8, c));
  return __builtin_bit_cast(tg_vec<float, 8>, r);
}
__device__ __forceinline__ tg_vec<float, 8> tg_wmma_bf16(tg_vec<unsigned short, 16> a, tg_vec<unsigned short, 16> b,
    tg_vec<float, 8> c) {
  tg_float8 r = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(__builtin_bit_cast(tg_short16, a),
      __builtin_bit_cast(tg_short16, b), __builtin_bit_cast(tg_float8, c));
  return __builtin_bit_cast(tg_vec<float, 8>, r);
}
#endif
"""
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
