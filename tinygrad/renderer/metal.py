"""Renders a linearized kernel (a list of UOps) as Metal Shading Language: Metal's GPULanguage table for the shared GPU
render loop (renderer/gpu.py).

MSL is C++14 with address spaces, so the spelling is CUDA's with these differences:
  * a kernel is `kernel void name(...)`; each buffer is `device T* dataN [[buffer(N)]]` (`const device` when only
    read), each symbolic variable `constant int& name [[buffer(N)]]` (the runtime passes it with setBytes), and the
    grid indices are parameters too: `tg_gid` (threadgroup in the grid), `tg_lid` (thread in its threadgroup),
    `tg_bdim` (threads per threadgroup), `tg_gdim` (threadgroups in the grid);
  * shared memory is `threadgroup`, the barrier `threadgroup_barrier(mem_flags::mem_threadgroup)`, a warp is a SIMD
    group of 32 threads and its shuffle `simd_shuffle_down` (64-bit values go through two 32-bit halves);
  * half is the native `half`; bfloat16 is kept as its 16 bits (`ushort`) and computed in float, rounded after each
    op as PyTorch does, which every Metal version runs (the native `bfloat` needs MSL 3.1); there is no double;
  * math functions take float (a half operand is widened and the result narrowed: the same rounding as the CPU);
  * Metal has no device variables at module scope, so one big reduction takes one threadgroup instead of the whole
    grid (GPULanguage.grid_reduce), and the loop plan keeps one element per access (GPULanguage.vector_loops);
  * tensor cores are simdgroup_matrix (MSL 2.3, Apple7 and later): 8x8 half tiles from threadgroup memory by
    simdgroup_load, simdgroup_multiply_accumulate into float, and the accumulators back through simdgroup_store.
"""
from __future__ import annotations

import math
import struct
from typing import Callable

from tinygrad.codegen.program import ProgramSpec
from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import DType, PtrDType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps
from tinygrad.renderer.cstyle import CStyleLanguage
from tinygrad.renderer.gpu import GPULanguage, uops_to_gpu
from tinygrad.renderer.prelude import read_prelude
from tinygrad.renderer.tg_vec import TgVecSpelling

HEADER = read_prelude("metal/header.metal")

# the grid indices every kernel takes, after its buffers: (name, MSL attribute)
GRID_PARAMS = (("tg_gid", "threadgroup_position_in_grid"), ("tg_lid", "thread_position_in_threadgroup"),
               ("tg_bdim", "threads_per_threadgroup"), ("tg_gdim", "threadgroups_per_grid"))

# simd_shuffle_down takes 32-bit and narrower values: a 64-bit one is shuffled as two halves
SHUFFLE_PRELUDE = read_prelude("metal/shuffle.metal")

# bfloat16: stored as its 16 bits, computed in float; round to nearest even, NaN stays a quiet NaN
BF16_PRELUDE = read_prelude("metal/bf16.metal")

# vector values of the linearizer's kernels: W lanes of T with lane-by-lane arithmetic, loaded and stored one element
# at a time (so at any alignment, from device or threadgroup memory); the compiler merges the accesses it can
VEC_PRELUDE = read_prelude("metal/vec.metal")
VEC_OPS_PRELUDE = read_prelude("metal/vec_ops.metal")


# simdgroup_matrix (codegen/tensor_cores.TensorCore's "simdgroup"): between calls a lane carries its thread_elements()
# of each 8x8 matrix (2 of them), whatever elements the compiler gives it; values enter only by simdgroup_load and
# leave only by simdgroup_store, so nothing depends on that spread.
SIMDGROUP_PRELUDE = read_prelude("metal/simdgroup.metal")
_SIMDGROUP = {"simdgroup_f16": "tg_sg_mma_f16"}


def _metal_math(name: str) -> Callable[[str, DType], str]:
    """An MSL math function: computed in float, a half operand widened first and the result narrowed after."""
    return lambda x, dt: f"((half){name}((float)({x})))" if dt == dtypes.float16 else f"{name}({x})"


def _bf16_round(val: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", val))[0]
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


class MetalLanguage(TgVecSpelling, GPULanguage):
    """Metal Shading Language, compiled by the Metal framework (newLibraryWithSource) or offline into a metallib."""
    name = "METAL"
    kernel_prefix = "kernel void "
    restrict = ""
    arg_int_prefix = "constant int&"
    block_idx_fmt = "tg_gid.{}"
    thread_idx_fmt = "tg_lid.{}"
    block_dim_fmt = "tg_bdim.{}"
    grid_dim_fmt = "tg_gdim.{}"
    shared_prefix = "threadgroup "
    shared_align = ""
    device_var_prefix = "device "  # unused: no grid reductions (grid_reduce), which need module-scope variables
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    fence = "threadgroup_barrier(mem_flags::mem_device);"
    warp_size = 32  # the SIMD-group width of every Apple GPU
    vec_prelude = VEC_PRELUDE
    vec_ops_prelude = VEC_OPS_PRELUDE
    static_shared_max = None  # 32 KB of threadgroup memory, all declared statically (LinearizerOptions.shared_max)
    grid_reduce = False
    vector_loops = False
    tensor_cores = ("simdgroup",)  # Apple7 family and later: ops_metal offers it where the device says so
    type_map = {
        dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
        dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
        dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.bfloat16: "float", dtypes.float32: "float",
    }
    buffer_type_map = {dtypes.bfloat16: "ushort"}
    code_for_op = {
        **CStyleLanguage.code_for_op,
        UnaryOps.EXP2: _metal_math("exp2"),
        UnaryOps.LOG2: _metal_math("log2"),
        # precise:: keeps sin accurate for large arguments whatever the fast-math setting
        UnaryOps.SIN: _metal_math("precise::sin"),
        UnaryOps.SQRT: _metal_math("sqrt"),
        BinaryOps.MOD: lambda a, b, dt: (f"((half)fmod((float)({a}),(float)({b})))" if dt == dtypes.float16
                                         else f"fmod({a},{b})") if dtypes.is_float(dt) else f"({a}%{b})",
    }

    def render_dtype(self, dt: DType) -> str:
        if dt == dtypes.float64:
            raise NotImplementedError("Metal has no double: float64 is not supported on METAL")
        return super().render_dtype(dt)

    def _render_const(self, val, dt: DType) -> str:
        if not dtypes.is_float(dt):
            if dt == dtypes.int64:
                return "(-9223372036854775807l-1)" if val == dtypes.min(dtypes.int64) else f"{int(val)}l"
            if dt == dtypes.uint64:
                return f"{int(val)}ul"
            return super()._render_const(val, dt)
        self.render_dtype(dt)  # refuses float64
        if math.isnan(val) or math.isinf(val):
            bits = 0x7FC00000 if math.isnan(val) else (0xFF800000 if val < 0 else 0x7F800000)
            body = f"as_type<float>({bits:#x}u)"
        else:
            body = repr(_bf16_round(float(val)) if dt == dtypes.bfloat16 else float(val)) + "f"
        return f"((half){body})" if dt == dtypes.float16 else body

    def render_cast(self, x: str, dt: DType) -> str:
        if dt == dtypes.bfloat16:
            return f"tg_bf16_round((float)({x}))"
        return f"(({self.render_dtype(dt)})({x}))"

    def render_result(self, expr: str, dt: DType) -> str:
        if dt == dtypes.bfloat16:
            return f"tg_bf16_round({expr})"
        if dt.itemsize < 4 and (dtypes.is_int(dt) or dt == dtypes.bool or dt == dtypes.float16):
            # C++ promotes narrow operands to int (and a comparison to bool): narrow each result, as PyTorch does
            return f"(({self.render_dtype(dt)}){expr})"
        return expr

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        if src == dtypes.bfloat16:
            x, src = f"tg_f32_to_bf16({x})", dtypes.uint16
        if dt == dtypes.bfloat16:
            return f"tg_bf16_to_f32(as_type<ushort>(({self.render_dtype(src)})({x})))"
        return f"as_type<{self.render_dtype(dt)}>(({self.render_dtype(src)})({x}))"

    def prelude(self, dts: set[DType]) -> str:
        return HEADER + SHUFFLE_PRELUDE + (BF16_PRELUDE if dtypes.bfloat16 in dts else "")

    def address_space(self, buf: UOp) -> str:
        return "threadgroup " if buf.uop is UOps.DEFINE_LOCAL else "device "

    def render_shuffle_down(self, val: str, offset: str) -> str:
        return f"tg_shfl_down({val}, (ushort)({offset}))"

    def render_atomic_inc(self, var: str) -> str:
        raise NotImplementedError("Metal kernels keep no module-scope counters (grid_reduce is off)")

    # ---- simdgroup_matrix (see SIMDGROUP_PRELUDE) ----
    def render_wmma(self, name: str, operands: list[str], part) -> str:
        if name not in _SIMDGROUP:
            raise NotImplementedError(f"Metal has no tensor core {name}")
        return f"{_SIMDGROUP[name]}({', '.join(operands)})"

    def render_matrix_load(self, ptr: str, stride: int, trans: bool) -> str:
        return f"tg_sg_load<{'true' if trans else 'false'}>({ptr}, {stride})"

    def render_matrix_store(self, ptr: str, stride: int, val: str) -> str:
        return f"tg_sg_store({ptr}, {stride}, {val})"

    def wmma_prelude(self, names: set[str], copies: bool) -> str:
        if copies:
            raise NotImplementedError("Metal has no asynchronous copies to threadgroup memory")
        return SIMDGROUP_PRELUDE if names else ""

    def render_kernel(self, name: str, body: list[str], params: list, launch_bounds: int | None = None) -> str:
        args = []
        for index, (pname, dt, is_out) in enumerate(params):
            if isinstance(dt, PtrDType):
                base = self.buffer_type_map.get(dt.base) or self.render_dtype(dt.base)
                args.append(f"{'' if is_out else 'const '}device {base}* {pname} [[buffer({index})]]")
            else:
                args.append(f"{self.arg_int_prefix} {pname} [[buffer({index})]]")
        args += [f"uint3 {n} [[{attr}]]" for n, attr in GRID_PARAMS]
        # NOTE: no max_total_threads_per_threadgroup attribute: the runtime reads the pipeline's own limit and lowers
        # the block of a loop kernel to it (every such kernel is correct for any block of whole SIMD groups)
        return f"{self.kernel_prefix}{name}({', '.join(args)}) {{\n" + "\n".join(body) + "\n}\n"


_METAL = MetalLanguage()


def MetalRenderer(name: str, uops: list[UOp]) -> ProgramSpec:  # noqa: N802 - tinygrad's public spelling
    """Metal kernel `name` from its uops: its source and launch facts."""
    return uops_to_gpu(_METAL, name, uops)
