"""Renders a linearized kernel (a list of UOps) as CUDA C for NVRTC.

The spelling is CStyleLanguage's table with CUDA's differences: `extern "C" __global__` kernels with
`__launch_bounds__`, `__restrict__`, CUDA's math functions, SPECIAL uops as blockIdx/threadIdx, DEFINE_LOCAL as
`__shared__` arrays and BARRIER as `__syncthreads()`. NVRTC is given no headers, so half and bfloat16 are declared
here: buffers hold their 16 bits (`unsigned short`), registers hold the value as a float, and every half or
bfloat16 result is rounded to its precision (as PyTorch rounds each op), as the C renderer does for bfloat16.

Kernels with SPECIAL uops are launched with the linearizer's global/local sizes. Kernels without them (today's
linearizer emits only loops) are made parallel here, until the linearizer maps axes to the grid itself
(tinygrad/codegen/gpu_dims.py): the outer loops over output elements become a grid-stride loop over all threads;
for reductions with few outputs, a loop over blocks, each block's threads splitting the reduction and combining
in shared memory; for one large reduction, the whole grid splits it and the last block to finish combines the
blocks' results. Such a kernel is correct for any launch size; the launch it was written for is given on its first
line (`// tinygrad launch: grid=(..) block=(..)`), which the compiler keeps with the binary.

SPECIAL uops: arg = (dim, name, size[, threads]), dim 0/1/2 for x/y/z; the name's prefix picks the index:
  gidx*: blockIdx (size: blocks in the grid), lidx*: threadIdx (size: threads in the block; their product is the
  kernel's __launch_bounds__), idx*: the global thread index blockIdx*blockDim+threadIdx, and threads that are
  past `size` return at once (so not with barriers). `size` is an int or an int32 uop (a symbolic extent); for
  idx*, the optional `threads` (block size in that dimension) gives __launch_bounds__.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import Callable

from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import DType, PtrDType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps
from tinygrad.renderer.cstyle import MAX_INLINE, CStyleLanguage

LAUNCH_MARKER = "// tinygrad launch:"
_LAUNCH_RE = re.compile(r"^// tinygrad launch: grid=\((\d+),(\d+),(\d+)\) block=\((\d+),(\d+),(\d+)\)", re.M)

HALF_PRELUDE = """__device__ __forceinline__ float tg_f16_to_f32(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short tg_f32_to_f16(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float tg_f16_round(float f) { return tg_f16_to_f32(tg_f32_to_f16(f)); }
"""

# round to nearest even; NaN stays a (quiet) NaN
BF16_PRELUDE = """__device__ __forceinline__ float tg_bf16_to_f32(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short tg_f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float tg_bf16_round(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
"""

BITCAST_PRELUDE = """template <class T, class F> __device__ __forceinline__ T tg_bitcast(F x) {
  static_assert(sizeof(T) == sizeof(F), "bitcast between types of different sizes");
  union { F f; T t; } u; u.f = x; return u.t;
}
"""

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


class CUDALanguage(CStyleLanguage):
    """CUDA C, compiled by NVRTC with no headers."""
    kernel_prefix = 'extern "C" __global__ void '
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
        out = [HALF_PRELUDE if dtypes.float16 in dts else "", BF16_PRELUDE if dtypes.bfloat16 in dts else ""]
        return "".join(out)

    def render_kernel(self, name: str, body: list[str], params: list, launch_bounds: int | None = None) -> str:
        args = []
        for pname, dt, is_out in params:
            if isinstance(dt, PtrDType):
                base = self.buffer_type_map.get(dt.base) or self.render_dtype(dt.base)
                args.append(f"{'' if is_out else 'const '}{base}*{self.restrict} {pname}")
            else:
                args.append(f"{self.arg_int_prefix} {pname}")
        bounds = f"__launch_bounds__({launch_bounds}) " if launch_bounds else ""
        return f"{self.kernel_prefix}{bounds}{name}({', '.join(args)}) {{\n" + "\n".join(body) + "\n}\n"


# ---------------------------------------------------------------------------------------------------------------
# Making loop-only kernels parallel (until the linearizer emits SPECIALs)
# ---------------------------------------------------------------------------------------------------------------
_PURE = (UOps.CONST, UOps.ALU, UOps.CAST, UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR)
# reductions with at most this many outputs (at the variables' maxima) and at least REDUCE_MIN inputs per output
# get a block per output instead of a thread per output
BLOCK_REDUCE_MAX_OUTPUTS = 16384
BLOCK_REDUCE_MIN_INPUTS = 256
# a single output of at least this many inputs is reduced by the whole grid (the last block to finish folds the
# blocks' partial results), in blocks of THREADS, each thread taking at least GRID_REDUCE_PER_THREAD inputs
GRID_REDUCE_MIN_INPUTS = 1 << 16
GRID_REDUCE_PER_THREAD = 16
GRID_REDUCE_MAX_BLOCKS = 1024
THREADS = 256
MAX_GRID = 1 << 17


@dataclass
class _Parallel:
    """How a loop-only kernel is spread over the GPU: `mode` is "threads" (each output element to one thread of a
    grid-stride loop), "blocks" (each output to one block, its reduction across the block's threads), "grid" (one
    output, its reduction across all threads of the grid) or "single"."""
    mode: str = "single"
    global_loops: list = field(default_factory=list)
    reduce_loops: list = field(default_factory=list)
    acc: UOp | None = None
    reduce_op: object = None
    grid: int = 1
    block: int = 1


def _depends_on_loop(u: UOp, memo: dict[int, bool]) -> bool:
    stack, order = [u], []
    while stack:
        x = stack.pop()
        if id(x) in memo:
            continue
        order.append(x)
        stack.extend(v for v in x.vin if id(v) not in memo)
    for x in reversed(order):
        if id(x) not in memo:
            memo[id(x)] = x.uop is UOps.LOOP or any(memo.get(id(v), False) for v in x.vin)
    return memo[id(u)]


def _eval_max(u: UOp) -> int | None:
    """The value of an int uop with every variable at its maximum (loop bounds grow with them), or None."""
    if u.uop is UOps.CONST:
        return int(u.arg)
    if u.uop is UOps.DEFINE_VAR:
        return int(u.arg.max)
    if u.uop is UOps.ALU and len(u.vin) == 2:
        a, b = _eval_max(u.vin[0]), _eval_max(u.vin[1])
        if a is None or b is None:
            return None
        ops = {BinaryOps.ADD: lambda: a + b, BinaryOps.SUB: lambda: a - b, BinaryOps.MUL: lambda: a * b,
               BinaryOps.DIV: lambda: int(a / b) if b else None, BinaryOps.MAX: lambda: max(a, b),
               BinaryOps.MOD: lambda: math.fmod(a, b) if b else None}
        fn = ops.get(u.arg)
        return None if fn is None or fn() is None else int(fn())
    return None


def _nest(uops: list[UOp], start: int, memo: dict[int, bool]) -> tuple[list[UOp], int]:
    """The perfect nest of loops from position `start`: consecutive LOOPs starting at 0 with only loop-independent
    arithmetic between them. Returns the loops and the position after the last one."""
    loops, i, last = [], start, start
    while i < len(uops):
        u = uops[i]
        if u.uop is UOps.LOOP:
            if not (u.vin[0].uop is UOps.CONST and u.vin[0].arg == 0) or _depends_on_loop(u.vin[1], memo):
                break
            loops.append(u)
            last = i + 1
        elif u.uop not in _PURE or _depends_on_loop(u, memo):
            break
        i += 1
    return loops, last


def _closes_last(uops: list[UOp], loops: list[UOp], end: int) -> bool:
    """Do the ENDLOOPs of `loops` (innermost first) sit together, ending right before position `end`?"""
    tail = uops[end - len(loops):end]
    return len(tail) == len(loops) and all(t.uop is UOps.ENDLOOP and t.vin[0] is lp
                                           for t, lp in zip(tail, reversed(loops)))


def _plan_parallel(uops: list[UOp]) -> _Parallel:
    memo: dict[int, bool] = {}
    start = next((i for i, u in enumerate(uops) if u.uop not in (UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR)), len(uops))
    glob, after = _nest(uops, start, memo)
    if glob and not _closes_last(uops, glob, len(uops)):
        glob, after = [], start
    outputs = math.prod(_eval_max(lp.vin[1]) or 0 for lp in glob) if glob else 1
    plan = _Parallel(global_loops=glob)
    # a block per output: DEFINE_ACC, a perfect nest of reduce loops whose PHI folds with ADD/MAX/MUL, then the rest
    accs = [i for i, u in enumerate(uops) if u.uop is UOps.DEFINE_ACC]
    if len(accs) == 1 and accs[0] >= after and all(u.uop in _PURE for u in uops[after:accs[0]]):
        red, red_after = _nest(uops, accs[0] + 1, memo)
        phi = uops[red_after] if red and red_after < len(uops) else None
        while phi is not None and phi.uop is not UOps.PHI and red_after < len(uops) - 1:
            red_after += 1
            phi = uops[red_after]
        if (red and phi is not None and phi.uop is UOps.PHI and phi.vin[0] is uops[accs[0]] and len(phi.vin) == 3
                and phi.vin[2] is red[-1] and phi.vin[1].uop is UOps.ALU and len(phi.vin[1].vin) == 2
                and phi.vin[1].vin[1] is phi.vin[0]
                and phi.vin[1].arg in (BinaryOps.ADD, BinaryOps.MAX, BinaryOps.MUL)
                and _closes_last(uops, red, red_after + 1 + len(red))):
            inputs = math.prod(_eval_max(lp.vin[1]) or 0 for lp in red)
            if not glob and inputs >= GRID_REDUCE_MIN_INPUTS:
                plan.mode, plan.reduce_loops, plan.acc, plan.reduce_op = "grid", red, uops[accs[0]], phi.vin[1].arg
                plan.block = THREADS
                plan.grid = max(2, min(GRID_REDUCE_MAX_BLOCKS, inputs // (THREADS * GRID_REDUCE_PER_THREAD)))
                return plan
            if 0 < outputs <= BLOCK_REDUCE_MAX_OUTPUTS and inputs >= BLOCK_REDUCE_MIN_INPUTS:
                plan.mode, plan.reduce_loops, plan.acc, plan.reduce_op = "blocks", red, uops[accs[0]], phi.vin[1].arg
                plan.block = 1024 if outputs < 128 else THREADS
                plan.grid = min(outputs, MAX_GRID)
                return plan
    if glob and outputs > 0:
        plan.mode = "threads"
        plan.block = THREADS if outputs >= THREADS else max(32, -(-outputs // 32) * 32)
        plan.grid = max(1, min(-(-outputs // plan.block), MAX_GRID))
    elif glob:  # sizes unknown: enough blocks to fill a big GPU, the grid-stride loop does the rest
        plan.mode, plan.block, plan.grid = "threads", THREADS, 1024
    else:
        plan.global_loops = []
    return plan


def launch_dims(src: str) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """The (grid, block) a kernel from this renderer was written for, from its first line; None if it has none."""
    m = _LAUNCH_RE.search(src)
    if m is None:
        return None
    v = tuple(int(x) for x in m.groups())
    return v[:3], v[3:]


# ---------------------------------------------------------------------------------------------------------------
# The render loop
# ---------------------------------------------------------------------------------------------------------------
_AXIS = "xyz"


def uops_to_cuda(lang: CUDALanguage, name: str, uops: list[UOp]) -> str:
    """The CUDA source of kernel `name` from its uops."""
    uses: dict[int, int] = {}
    for u in uops:
        for v in u.vin:
            uses[id(v)] = uses.get(id(v), 0) + 1
    specials = [u for u in uops if u.uop is UOps.SPECIAL]
    has_barrier = any(u.uop is UOps.BARRIER for u in uops)
    par = _Parallel() if specials else _plan_parallel(uops)
    flat_loops = {id(lp) for lp in par.global_loops + par.reduce_loops}
    r: dict[int, str] = {}
    params: list[tuple[str, DType, bool]] = []
    body: list[str] = []
    depth = 1
    counters: dict[str, int] = {}
    dts: set[DType] = set()

    def fresh(prefix: str) -> str:
        n = counters.get(prefix, 0)
        counters[prefix] = n + 1
        return f"{prefix}{n}"

    def emit(line: str) -> None:
        body.append("  " * depth + line)

    def bind(u: UOp, expr: str, prefix: str, inline: bool) -> None:
        if inline and uses.get(id(u), 0) <= 1 and len(expr) <= MAX_INLINE:
            r[id(u)] = expr
        else:
            var = fresh(prefix)
            emit(f"{lang.render_dtype(u.dtype)} {var} = {expr};")
            r[id(u)] = var

    def open_flat(loops: list[UOp], first: str, stride: str) -> None:
        """One loop over the flattened nest `loops`, each loop variable recovered by division and modulo."""
        nonlocal depth
        extents = [f"({r[id(lp.vin[1])]})" for lp in loops]
        flat = fresh("flat")
        emit(f"for (int {flat} = {first}; {flat} < {'*'.join(extents)}; {flat} += {stride}) {{")
        depth += 1
        for k, lp in enumerate(loops):
            var = fresh("ridx")
            inner = "*".join(extents[k + 1:])
            expr = f"({flat}/({inner}))" if inner else flat
            emit(f"int {var} = {expr}%{extents[k]};" if k else f"int {var} = {expr};")
            r[id(lp)] = var

    if par.mode in ("blocks", "grid"):
        emit(f"__shared__ {lang.render_dtype(par.acc.dtype)} tg_red[{par.block}];")
    if par.mode == "grid":
        # launched with more blocks than there are partial slots, the extra blocks sit out
        emit("__shared__ bool tg_last;")
        emit(f"const unsigned int tg_blocks = gridDim.x < {par.grid}u ? gridDim.x : {par.grid}u;")
        emit("if (blockIdx.x >= tg_blocks) return;")
    for u in uops:
        op, dt, vin = u.uop, u.dtype, u.vin
        if dt is not None:
            dts.add(dt.base if isinstance(dt, PtrDType) else dt)
        if op is UOps.DEFINE_GLOBAL:
            r[id(u)] = u.arg[1]
            params.append((u.arg[1], dt, u.arg[2]))
        elif op is UOps.DEFINE_VAR:
            var_name = "".join(c if c.isalnum() or c == "_" else "_" for c in u.arg.expr)
            r[id(u)] = var_name
            params.append((var_name, dtypes.int32, False))
        elif op is UOps.DEFINE_LOCAL:
            local_name, size = u.arg
            base = dt.base if isinstance(dt, PtrDType) else dt
            emit(f"__shared__ {lang.buffer_type_map.get(base) or lang.render_dtype(base)} {local_name}[{size}];")
            r[id(u)] = local_name
        elif op is UOps.SPECIAL:
            # arg = (dim, name, size[, threads per block]): see "SPECIAL uops" in the module docstring
            dim, sname, size = u.arg[0], u.arg[1], u.arg[2]
            size = r[id(size)] if isinstance(size, UOp) else size
            axis = _AXIS[dim]
            if sname.startswith("gidx"):
                emit(f"int {sname} = blockIdx.{axis}; /* {size} */")
            elif sname.startswith("lidx"):
                emit(f"int {sname} = threadIdx.{axis}; /* {size} */")
            else:
                if has_barrier:
                    raise NotImplementedError(f"{sname}: a guarded global index cannot be used with barriers")
                emit(f"int {sname} = blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis};")
                emit(f"if ({sname} >= {size}) return;")
            r[id(u)] = sname
        elif op is UOps.BARRIER:
            emit("__syncthreads();")
        elif op is UOps.CONST:
            r[id(u)] = lang.render_const(u.arg, dt)
        elif op is UOps.LOOP and id(u) in flat_loops:
            nest = par.global_loops if id(u) in {id(lp) for lp in par.global_loops} else par.reduce_loops
            if u is nest[-1]:  # every bound is rendered by now
                if nest is par.reduce_loops and par.mode == "grid":
                    open_flat(nest, "blockIdx.x*blockDim.x+threadIdx.x", "tg_blocks*blockDim.x")
                elif nest is par.reduce_loops:
                    open_flat(nest, "threadIdx.x", "blockDim.x")
                elif par.mode == "blocks":
                    open_flat(nest, "blockIdx.x", "gridDim.x")
                else:
                    open_flat(nest, "blockIdx.x*blockDim.x+threadIdx.x", "gridDim.x*blockDim.x")
        elif op is UOps.LOOP:
            var = fresh("ridx")
            emit(f"for (int {var} = {r[id(vin[0])]}; {var} < {r[id(vin[1])]}; {var}++) {{")
            r[id(u)] = var
            depth += 1
        elif op is UOps.ENDLOOP and id(vin[0]) in flat_loops:
            nest = par.global_loops if any(vin[0] is lp for lp in par.global_loops) else par.reduce_loops
            if vin[0] is not nest[0]:
                continue
            if nest is par.global_loops and par.mode == "blocks":
                depth -= 1
                emit("}")  # the `if (threadIdx.x == 0)` around the stores
            depth -= 1
            emit("}")
            if nest is par.reduce_loops:
                _emit_block_combine(lang, par, r[id(par.acc)], emit)
                if par.mode == "grid":
                    _emit_grid_combine(lang, par, r[id(par.acc)], emit)
                emit("if (threadIdx.x == 0) {")
                depth += 1
                if par.mode == "grid":
                    emit("tg_done = 0;  // ready for the next launch")
        elif op is UOps.ENDLOOP:
            depth -= 1
            emit("}")
        elif op is UOps.DEFINE_ACC:
            var = fresh("acc")
            emit(f"{lang.render_dtype(dt)} {var} = {lang.render_const(u.arg, dt)};")
            r[id(u)] = var
        elif op is UOps.LOAD:
            access = lang.render_load(f"{r[id(vin[0])]}[{r[id(vin[1])]}]", vin[0].dtype.base)
            if len(vin) > 2:
                access = f"({r[id(vin[2])]})?{access}:{r[id(vin[3])]}"
            bind(u, access, "val", inline=False)
        elif op is UOps.ALU:
            bind(u, lang.render_result(lang.code_for_op[u.arg](*[r[id(v)] for v in vin], dt), dt), "alu", inline=True)
        elif op is UOps.CAST:
            bind(u, lang.render_cast(r[id(vin[0])], dt), "cast", inline=True)
        elif op is UOps.BITCAST:
            bind(u, lang.render_bitcast(r[id(vin[0])], vin[0].dtype, dt), "cast", inline=False)
        elif op is UOps.PHI:
            emit(f"{r[id(vin[0])]} = {r[id(vin[1])]};")
            r[id(u)] = r[id(vin[0])]
        elif op is UOps.STORE:
            line = f"{r[id(vin[0])]}[{r[id(vin[1])]}] = {lang.render_store(r[id(vin[2])], vin[0].dtype.base)};"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        else:
            raise NotImplementedError(f"the CUDA renderer has no rule for {op}")
    if par.mode in ("blocks", "grid") and not par.global_loops:
        depth -= 1
        emit("}")  # the `if (threadIdx.x == 0)` of a kernel without output loops
    bounds = _launch_bounds(specials, par)
    kernel = lang.render_kernel(name, body, params, bounds)
    prelude = lang.prelude(dts) + (BITCAST_PRELUDE if any(u.uop is UOps.BITCAST for u in uops) else "")
    marker = "" if specials else f"{LAUNCH_MARKER} grid=({par.grid},1,1) block=({par.block},1,1)\n"
    if par.mode == "grid":
        # per module (each kernel is a module of its own): the blocks' partial results and how many are done
        prelude += f"__device__ {lang.render_dtype(par.acc.dtype)} tg_part[{par.grid}];\n"
        prelude += "__device__ unsigned int tg_done;\n"
    return marker + prelude + kernel


def _emit_block_combine(lang: CUDALanguage, par: _Parallel, acc: str, emit: Callable[[str], None]) -> None:
    """Folds the block's partial results into every thread's `acc` with a tree in shared memory."""
    dt = par.acc.dtype
    combined = lang.render_result(lang.code_for_op[par.reduce_op]("tg_red[threadIdx.x+s]", "tg_red[threadIdx.x]", dt),
                                  dt)
    emit(f"tg_red[threadIdx.x] = {acc};")
    emit("__syncthreads();")
    emit(f"for (int s = {par.block // 2}; s > 0; s >>= 1) {{")
    emit(f"  if (threadIdx.x < s) tg_red[threadIdx.x] = {combined};")
    emit("  __syncthreads();")
    emit("}")
    emit(f"{acc} = tg_red[0];")
    emit("__syncthreads();  // tg_red is reused by the next output")


def _emit_grid_combine(lang: CUDALanguage, par: _Parallel, acc: str, emit: Callable[[str], None]) -> None:
    """After each block has its partial result in `acc`: every block publishes it, and the last block to finish
    folds all of them into `acc`; the other blocks return. Launches of one kernel are ordered on the stream, so one
    set of partial slots per module suffices."""
    dt = par.acc.dtype
    emit("if (threadIdx.x == 0) {")
    emit(f"  tg_part[blockIdx.x] = {acc};")
    emit("  __threadfence();  // the partial is visible to every block before the count says so")
    emit("  tg_last = atomicAdd(&tg_done, 1u) == tg_blocks - 1u;")
    emit("}")
    emit("__syncthreads();")
    emit("if (!tg_last) return;")
    emit(f"{acc} = {lang.render_const(par.acc.arg, dt)};")
    volatile = f"((volatile {lang.render_dtype(dt)}*)tg_part)[tg_i]"
    combined = lang.render_result(lang.code_for_op[par.reduce_op](volatile, acc, dt), dt)
    emit(f"for (unsigned int tg_i = threadIdx.x; tg_i < tg_blocks; tg_i += blockDim.x) {acc} = {combined};")
    _emit_block_combine(lang, par, acc, emit)


def _launch_bounds(specials: list[UOp], par: _Parallel) -> int | None:
    if not specials:
        return par.block
    lidx = [u.arg[2] for u in specials if u.arg[1].startswith("lidx")]
    if lidx and all(isinstance(s, int) for s in lidx):
        return math.prod(lidx)
    local = [u.arg[3] for u in specials if len(u.arg) > 3 and not u.arg[1].startswith(("gidx", "lidx"))]
    return math.prod(local) if local and all(isinstance(s, int) for s in local) else None


def CUDARenderer(name: str, uops: list[UOp]) -> str:  # noqa: N802 - tinygrad's public spelling
    return uops_to_cuda(CUDALanguage(), name, uops)
