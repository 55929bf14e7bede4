"""Renders a linearized kernel (a list of UOps) as CUDA C for NVRTC: CUDA's GPULanguage table for the shared GPU
render loop (renderer/gpu.py, which also says how loop-only kernels are spread over the GPU).

The spelling is CStyleLanguage's table with CUDA's differences: `extern "C" __global__` kernels with
`__launch_bounds__`, `__restrict__`, CUDA's math functions, SPECIAL uops as blockIdx/threadIdx, DEFINE_LOCAL as
`__shared__` arrays, BARRIER as `__syncthreads()`, warp shuffles as `__shfl_down_sync`. NVRTC is given no headers,
so half and bfloat16 are declared here: buffers hold their 16 bits (`unsigned short`), registers hold the value as a
float, and every half or bfloat16 result is rounded to its precision (as PyTorch rounds each op), as the C renderer
does for bfloat16.
"""
from __future__ import annotations

import math
import string
import struct
from typing import Callable

from tinygrad.codegen.program import ProgramSpec
from tinygrad.codegen.uops import TmaExit, TmaInit, TmaProduce, TmaProducer, TmaRelease, TmaWait, UOp
from tinygrad.dtype import DType, PtrDType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps
from tinygrad.renderer.cstyle import CStyleLanguage
from tinygrad.renderer.gpu import GPULanguage, uops_to_gpu
from tinygrad.renderer.prelude import read_prelude
from tinygrad.renderer.tg_vec import TgVecSpelling

# float max as PyTorch's maximum: NaN if either operand is NaN
MAX_PRELUDE = read_prelude("cuda/max.cuh")
HALF_PRELUDE = read_prelude("cuda/half.cuh")

# round to nearest even; NaN stays a (quiet) NaN
BF16_PRELUDE = read_prelude("cuda/bf16.cuh")

# vector values of the linearizer's kernels: tg_vec (gpu.VEC_PRELUDE) with lane-by-lane arithmetic, and
# loads and stores of `count` consecutive elements at any alignment (one wide access where it is aligned)
VEC_OPS_PRELUDE = read_prelude("cuda/vec_ops.cuh")

BITCAST_PRELUDE = read_prelude("cuda/bitcast.cuh")

# programmatic dependent launch (sm_90 and later): a kernel's first statement waits for the grid a graph launched it
# after (runtime/graph_cuda.py); the CUDA runtime names this cudaGridDependencySynchronize. The architecture test is
# the compiler's, so the same source builds for older GPUs (and for the host in tests, where it is not defined).
GRID_WAIT = "griddepcontrol.wait"
GRID_WAIT_PROLOGUE = f"""#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("{GRID_WAIT};" ::: "memory");
#endif"""

# tensor cores (sm_80 and later): one warp-wide mma.sync on operands ldmatrix loaded from shared memory, their 16-bit
# patterns four (A) or two (B) 32-bit registers a thread, as codegen/tensor_cores.TensorCore lays them out.
# NOTE: ldmatrix is volatile (kept in order with the barriers, cp.async and its waits, all volatile too) but has no
# memory clobber, so the compiler may load the next step's fragments while the tensor cores work on this one
MMA_PRELUDE = read_prelude("cuda/mma.cuh")
# one mma.sync per (shape, operand type): $name, $shape and $ty filled in for each kind a kernel uses
MMA_FN = string.Template(read_prelude("cuda/mma_sync.cuh"))
# name -> (shape, operand type); TF32 takes float32's bits in the registers where m16n8k16 takes two halves
_MMA_TYPES = {"m16n8k16_f16": ("m16n8k16", "f16"), "m16n8k16_bf16": ("m16n8k16", "bf16"),
              "m16n8k8_tf32": ("m16n8k8", "tf32")}

# Hopper's wgmma (sm_90a): a warpgroup multiplies a 64-wide slice of K of A (its 64 rows, staged K-major) by B's (BN
# columns, staged K-major or in N-major atoms), both read by the tensor cores from shared memory through 64-bit
# descriptors: start address, leading and stride byte offsets (16-byte units; K-major: 1024 bytes between 8-row
# groups; N-major: ATOMS bytes between 64-column atoms, 1024 between 8-row groups of K), the 128-byte swizzle. The
# slice's four k16 steps advance the descriptors by 32 bytes along a K-major row, or by two 8-row groups of an atom.
# The accumulators are fenced around the asynchronous instructions; WAIT groups (slices) may still be in flight on
# return, and tg_wgmma_wait_all waits for the last before the accumulators are read.
WGMMA_PRELUDE = read_prelude("cuda/wgmma.cuh")
WGMMA_SIZES = (64, 128, 256)

# Hopper's TMA (sm_90): a wgmma kernel's slices copied by the TMA unit as whole boxes of A and B, described by tensor
# maps (128-byte parameters the runtime encodes from the buffers: see UOps.TMA and ProgramSpec.tensor_maps),
# landing in shared memory with the tensor cores' 128-byte swizzle. Stage s has two mbarriers: "full" (bars[s]),
# which completes when its bytes have landed (the producer's arrive carries the byte count, the copies count the
# bytes down), and "empty" (bars[S+s]), which completes when every warp, of every block of the cluster, is done with
# it. Phase parities follow from the step: step j is stage j % S's (j / S)-th use. In a cluster each block copies
# 1/CLUSTER of B's slice into every block's shared memory (multicast) and every warp frees its stage in all of them.
TMA_PRELUDE = read_prelude("cuda/tma.cuh")


# one wgmma slice per (operand type, N): wgmma_fn fills in the register counts and PTX operand numbers
_WGMMA_SLICE = string.Template(read_prelude("cuda/wgmma_slice.cuh"))


def wgmma_fn(name: str, ty: str, n: int) -> str:
    """The CUDA function for one slice of wgmma `name` (operand type `ty`) with N = `n` columns: the accumulator's
    `n / 2` registers are the asm's first operands, then the two descriptors, the scale-D predicate and B's
    transpose flag."""
    regs = n // 2
    return _WGMMA_SLICE.substitute(name=name, ty=ty, n=n, regs=regs, outs=",".join(f"%{i}" for i in range(regs)),
                                   operands=", ".join(f'"+f"(c.e[{i}])' for i in range(regs)), desc_a=regs,
                                   desc_b=regs + 1, pred=regs + 2, trans_b=regs + 3)


_WGMMA_TYPES = {"wgmma_f16": "f16", "wgmma_bf16": "bf16"}

_NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16)
_ROUND = {dtypes.float16: "tg_f16_round", dtypes.bfloat16: "tg_bf16_round"}
_TO_BITS = {dtypes.float16: "tg_f32_to_f16", dtypes.bfloat16: "tg_f32_to_bf16"}
_FROM_BITS = {dtypes.float16: "tg_f16_to_f32", dtypes.bfloat16: "tg_bf16_to_f32"}


def _cuda_math(name: str) -> Callable[[str, DType], str]:
    """A CUDA math function: the double version for float64, the float one otherwise (half registers are floats)."""
    return lambda x, dt: f"{name}({x})" if dt == dtypes.float64 else f"{name}f({x})"


def _round_narrow(val: float, dt: DType) -> float:
    """`val` rounded to half or bfloat16 precision, as a Python float (so the literal needs no device rounding)."""
    if dt == dtypes.float16:
        return struct.unpack("<e", struct.pack("<e", val))[0] if abs(val) < 65520 else math.copysign(math.inf, val)
    bits = struct.unpack("<I", struct.pack("<f", val))[0]
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


class CUDALanguage(TgVecSpelling, GPULanguage):
    """CUDA C, compiled by NVRTC with no headers."""
    name = "CUDA"
    # mma.sync m16n8k16 for half and bfloat16, and cp.async: sm_80 and later (ops_cuda.py checks the GPU)
    tensor_cores = ("m16n8k16", "cp.async")
    hopper_tensor_cores = ("wgmma", "tma")  # sm_90 (compiled for sm_90a)
    # float32 matmuls and convolutions on tensor cores as TF32 (10-bit mantissas): sm_80 and later, where ALLOW_TF32=1
    tf32_tensor_cores = ("tf32",)
    vec_ops_prelude = VEC_OPS_PRELUDE
    bitcast_prelude = BITCAST_PRELUDE
    kernel_prefix = 'extern "C" __global__ void '
    grid_wait = True  # kernels start with GRID_WAIT_PROLOGUE
    restrict = " __restrict__"
    type_map = {**CStyleLanguage.type_map, dtypes.bool: "bool", dtypes.float16: "float", dtypes.bfloat16: "float"}
    buffer_type_map = {dtypes.float16: "unsigned short", dtypes.bfloat16: "unsigned short"}
    code_for_op = {
        **CStyleLanguage.code_for_op,
        UnaryOps.EXP2: _cuda_math("exp2"),
        UnaryOps.LOG2: _cuda_math("log2"),
        UnaryOps.SIN: _cuda_math("sin"),
        UnaryOps.SQRT: _cuda_math("sqrt"),
        BinaryOps.MOD: lambda a, b, dt: (f"fmod({a},{b})" if dt == dtypes.float64 else f"fmodf({a},{b})")
        if dtypes.is_float(dt) else f"({a}%{b})",
        # a function (MAX_PRELUDE) names each operand once: the conditional repeats its first operand three times,
        # so a tree of maxes (a reduction's lanes combined) grew exponentially in source and compile time
        BinaryOps.MAX: lambda a, b, dt: f"tg_max({a},{b})" if dtypes.is_float(dt) else f"(({a}>{b})?{a}:{b})",
    }

    def _render_const(self, val, dt: DType) -> str:
        if not dtypes.is_float(dt):
            return super()._render_const(val, dt)
        if dt in _NARROW_FLOATS and not math.isnan(val):
            val, dt = _round_narrow(float(val), dt), dtypes.float32
        if dt == dtypes.float64:
            if math.isnan(val) or math.isinf(val):
                bits = 0x7FF8000000000000 if math.isnan(val) else 0xFFF0000000000000 if val < 0 else 0x7FF0000000000000
                return f"__longlong_as_double((long long){bits:#x}ull)"
            return repr(float(val))
        if math.isnan(val) or math.isinf(val):
            bits = 0x7FC00000 if math.isnan(val) else (0xFF800000 if val < 0 else 0x7F800000)
            return f"__uint_as_float({bits:#x}u)"
        return repr(float(val)) + "f"

    def render_cast(self, x: str, dt: DType) -> str:
        if dt in _NARROW_FLOATS:
            return f"{_ROUND[dt]}((float)({x}))"
        return f"(({self.render_dtype(dt)})({x}))"

    def render_load(self, access: str, buf: DType) -> str:
        return f"{_FROM_BITS[buf]}({access})" if buf in _NARROW_FLOATS else access

    def render_store(self, val: str, buf: DType) -> str:
        return f"{_TO_BITS[buf]}({val})" if buf in _NARROW_FLOATS else val

    def render_result(self, expr: str, dt: DType) -> str:
        if dt in _NARROW_FLOATS:
            return f"{_ROUND[dt]}({expr})"
        if dt.itemsize < 4 and (dtypes.is_int(dt) or dt == dtypes.bool):
            return f"(({self.render_dtype(dt)}){expr})"
        return expr

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        # a half/bfloat16 register holds a float: go through the 16 stored bits
        if src in _NARROW_FLOATS:
            x, src = f"{_TO_BITS[src]}({x})", dtypes.uint16
        if dt in _NARROW_FLOATS:
            return f"{_FROM_BITS[dt]}(tg_bitcast<unsigned short>({x}))"
        return f"tg_bitcast<{self.render_dtype(dt)}>(({self.render_dtype(src)})({x}))"

    def prelude(self, dts: set[DType]) -> str:
        out = [MAX_PRELUDE, HALF_PRELUDE if dtypes.float16 in dts else "",
               BF16_PRELUDE if dtypes.bfloat16 in dts else ""]
        return "".join(out)

    def render_kernel(self, name: str, body: list[str], params: list, launch_bounds: int | None = None,
                      cluster: int = 1) -> str:
        args = []
        for pname, dt, is_out in params:
            if dt == "tmap":
                # (read where it lies: TMA takes the parameter's own address)
                args.append(f"const __grid_constant__ tg_tmap {pname}")
            elif isinstance(dt, PtrDType):
                base = self.buffer_type_map.get(dt.base) or self.render_dtype(dt.base)
                args.append(f"{'' if is_out else 'const '}{base}*{self.restrict} {pname}")
            else:
                args.append(f"{self.arg_int_prefix} {pname}")
        bounds = f"__launch_bounds__({launch_bounds}) " if launch_bounds else ""
        # blocks of a cluster along y (the tile rows that share B: TMA multicast), fixed at compile time so that a
        # plain launch forms them
        bounds += f"__cluster_dims__(1, {cluster}, 1) " if cluster > 1 else ""
        # first, before any memory is touched: a graph may launch this kernel while the one before it finishes
        # (programmatic dependent launch, sm_90 and later), and this waits until that one has completed and its
        # writes are visible; with no such launch it returns at once
        wait = [GRID_WAIT_PROLOGUE] if self.grid_wait else []
        return f"{self.kernel_prefix}{bounds}{name}({', '.join(args)}) {{\n" + "\n".join(wait + body) + "\n}\n"

    def render_wmma(self, name: str, operands: list[str], part) -> str:
        if name in _WGMMA_TYPES:
            if part[0] == "wait":
                return f"tg_wgmma_wait_all<{part[1] // 2}>({operands[0]})"
            (n, b_k, atoms, pending), (a, ai, b, bi, c) = part, operands
            return f"tg_{name}_n{n}<{'true' if b_k else 'false'}, {atoms}, {pending}>({a}+{ai}, {b}+{bi}, {c})"
        if name not in _MMA_TYPES:
            raise NotImplementedError(f"CUDA has no tensor core {name}")
        return f"tg_mma_{name}<{part or 0}, {8 if part is not None else 4}>({', '.join(operands)})"

    def render_tma(self, arg, operands: list[str]) -> str:
        if isinstance(arg, TmaInit):
            return f"tg_tma_init<{arg.stages}, {arg.cluster}>({operands[0]}, {arg.arrivals}, {operands[1]})"
        if isinstance(arg, TmaProduce):
            b_k = "true" if arg.b_along_k else "false"
            return f"tg_tma_produce<{arg.stages}, {arg.a_elems}, {arg.b_elems}, {b_k}, {arg.b_atoms}, {arg.cluster}>(" \
                + ", ".join(operands) + ")"
        if isinstance(arg, TmaProducer):
            # the warp after the multiplying ones copies, then leaves (nothing after this waits for all threads)
            # (in a cluster it still takes part in the cluster's last barrier)
            bars, tid, rest = operands[0], operands[1], operands[2:]
            b_k = "true" if arg.b_along_k else "false"
            return f"if ({tid} >= {arg.consumers}) {{ tg_tma_producer<{arg.stages}, {arg.a_elems}, {arg.b_elems}, " \
                f"{b_k}, {arg.b_atoms}, {arg.steps}, {arg.cluster}>({bars}, {tid} == {arg.consumers}, " + \
                ", ".join(rest) + f"); tg_tma_exit<{arg.cluster}>(); return; }}"
        if isinstance(arg, TmaWait):
            return f"tg_tma_wait<{arg.stages}>({', '.join(operands)})"
        if isinstance(arg, TmaRelease):
            return f"tg_tma_release<{arg.stages}, {arg.cluster}>({', '.join(operands)})"
        if isinstance(arg, TmaExit):
            return f"tg_tma_exit<{arg.cluster}>()"
        raise NotImplementedError(f"no TMA uop {arg}")

    def tma_prelude(self) -> str:
        return TMA_PRELUDE

    def render_proxy_fence(self, kind: str) -> str:
        if kind != "async_proxy":
            raise NotImplementedError(f"CUDA has no {kind} fence")
        return "tg_fence_proxy_async()"

    def render_copy_async(self, dst: str, src: str, src_idx: str, valid: str | None) -> str:
        # NOTE: where the copy is off, the buffer's own start is read from (nothing is, with a size of 0)
        if valid is None:
            return f"tg_cp_async16({dst}, {src}+{src_idx}, true)"
        return f"tg_cp_async16({dst}, ({valid}) ? {src}+{src_idx} : {src}, {valid})"

    def render_async_commit(self) -> str:
        return "tg_cp_async_commit()"

    def render_async_wait(self, pending: int) -> str:
        return f"tg_cp_async_wait<{pending}>()"

    def render_ldmatrix(self, ptr: str, matrices: int, trans: bool) -> str:
        return f"tg_ldsm_x{matrices}{'_t' if trans else ''}({ptr})"

    def wmma_prelude(self, names: set[str], copies: bool) -> str:
        if not names and not copies:
            return ""
        mma = [n for n in sorted(names) if n in _MMA_TYPES]
        wg = [n for n in sorted(names) if n in _WGMMA_TYPES]
        mma_fns = "".join(MMA_FN.substitute(name=n, shape=_MMA_TYPES[n][0], ty=_MMA_TYPES[n][1]) for n in mma)
        return MMA_PRELUDE + mma_fns + \
            (WGMMA_PRELUDE if wg else "") + "".join(wgmma_fn(n, _WGMMA_TYPES[n], s) for n in wg for s in WGMMA_SIZES)

    def render_shuffle_down(self, val: str, offset: str) -> str:
        return f"__shfl_down_sync(0xffffffffu, {val}, {offset})"

    def render_shuffle_xor(self, val: str, mask: int) -> str:
        return f"__shfl_xor_sync(0xffffffffu, {val}, {mask})"

    def render_atomic_inc(self, var: str) -> str:
        return f"atomicAdd(&{var}, 1u)"


_CUDA = CUDALanguage()


def CUDARenderer(name: str, uops: list[UOp]) -> ProgramSpec:  # noqa: N802 - tinygrad's public spelling
    """CUDA kernel `name` from its uops: its source and launch facts."""
    return uops_to_gpu(_CUDA, name, uops)
