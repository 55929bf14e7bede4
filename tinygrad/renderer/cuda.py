"""Renders a linearized kernel (a list of UOps) as CUDA C for NVRTC.

The spelling is CStyleLanguage's table with CUDA's differences: `extern "C" __global__` kernels with
`__launch_bounds__`, `__restrict__`, CUDA's math functions, SPECIAL uops as blockIdx/threadIdx, DEFINE_LOCAL as
`__shared__` arrays and BARRIER as `__syncthreads()`. NVRTC is given no headers, so half and bfloat16 are declared
here: buffers hold their 16 bits (`unsigned short`), registers hold the value as a float, and every half or
bfloat16 result is rounded to its precision (as PyTorch rounds each op), as the C renderer does for bfloat16.

Kernels with SPECIAL uops are the linearizer's: it mapped their output dims to the grid (codegen/gpu_dims.py) and
gives their launch sizes as data (the program record's global_size/local_size); they are rendered as they are,
vector uops included (16-byte loads and stores where the pointer is aligned at run time, else one element at a time).
Kernels without them are what the linearizer leaves as loops, today the memory-bound reductions
(codegen/heuristic_gpu.py says which), and are made parallel here: the outer loops over output elements become a
grid-stride loop over all threads;
for reductions with few outputs, a loop over blocks, each block's threads splitting the reduction and combining
with warp shuffles; for one large reduction, the whole grid splits it and the last block to finish combines the
blocks' results. Such a kernel is correct for any grid (and any block of whole warps); the launch it was written
for is given on its first line (`// tinygrad launch: grid=(..) block=(..)`, then `persistent` for the reductions,
which the runtime launches with no more blocks than the GPU holds at once), and the compiler keeps it with the
binary.

Loads and stores whose index runs along such a loop (the loop's flat index plus an offset fixed for the loop)
move 16 bytes at a time: the loop's body is written for one element, and runs over the lanes of whole vectors
(for reductions, several a thread, loaded together) while every such pointer is aligned, which is checked at run
time; the elements after the last whole vector, and all of them where a pointer is misaligned, go one at a time.
Loops whose body has a loop of its own, or reads memory with a stride, keep a thread per element.

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
from typing import Callable

from tinygrad.codegen.uops import UOp, UOps
from tinygrad.dtype import DType, PtrDType, dtypes
from tinygrad.ops import BinaryOps, UnaryOps
from tinygrad.renderer.cstyle import CStyleLanguage, KernelWriter
from tinygrad.renderer.cuda_plan import VEC_PRELUDE, _Parallel, _plan_parallel, _Vec

LAUNCH_MARKER = "// tinygrad launch:"
_LAUNCH_RE = re.compile(r"^// tinygrad launch: grid=\((\d+),(\d+),(\d+)\) block=\((\d+),(\d+),(\d+)\)( persistent)?",
                        re.M)

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

# vector values of the linearizer's kernels: tg_vec (cuda_plan.VEC_PRELUDE) with lane-by-lane arithmetic, and
# loads and stores of `count` consecutive elements at any alignment (one wide access where it is aligned)
VEC_OPS_PRELUDE = """#define TG_VEC_OP(OP) template <class T, int W> __device__ __forceinline__ tg_vec<T, W> \\
  operator OP(tg_vec<T, W> a, tg_vec<T, W> b) { \\
    tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = a.e[i] OP b.e[i]; return r; \\
  }
TG_VEC_OP(+) TG_VEC_OP(-) TG_VEC_OP(*) TG_VEC_OP(/)
template <class T, int W> __device__ __forceinline__ tg_vec<T, W> operator-(tg_vec<T, W> a) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = -a.e[i]; return r;
}
template <class T, int W> __device__ __forceinline__ tg_vec<T, W> tg_vmax(tg_vec<T, W> a, tg_vec<T, W> b) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = (a.e[i] != a.e[i] || a.e[i] > b.e[i]) ? a.e[i] : b.e[i];
  return r;
}
template <class T, int W> __device__ __forceinline__ tg_vec<T, W> tg_vload(const T* p) {
  if (((unsigned long long)p & (sizeof(T) * W - 1)) == 0) return *(const tg_vec<T, W>*)p;
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = p[i]; return r;
}
template <class T, int W> __device__ __forceinline__ void tg_vstore(T* p, tg_vec<T, W> v) {
  if (((unsigned long long)p & (sizeof(T) * W - 1)) == 0) *(tg_vec<T, W>*)p = v;
  else for (int i = 0; i < W; i++) p[i] = v.e[i];
}
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

    # ---- vectors (tg_vec, see VEC_OPS_PRELUDE) ----
    def vector_type_name(self, dt: DType) -> str:
        return f"tg_vec<{self.render_dtype(dt.scalar())}, {dt.count}>"

    def render_vectorize(self, lanes: list[str], dt: DType) -> str:
        return f"{self.render_dtype(dt)}{{{{{', '.join(lanes)}}}}}"

    def render_gep(self, vec: str, lane: int) -> str:
        return f"{vec}.e[{lane}]" if vec.isidentifier() else f"({vec}).e[{lane}]"

    def render_vector_alu(self, op, operands: list[str], dt: DType) -> str:
        if op is BinaryOps.MAX:
            return f"tg_vmax({operands[0]}, {operands[1]})"
        return super().render_vector_alu(op, operands, dt)

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
# Launch sizes written into the kernel source (the parallel plan itself is made in cuda_plan.py)
# ---------------------------------------------------------------------------------------------------------------
def launch_dims(src: str) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """The (grid, block) a kernel from this renderer was written for, from its first line; None if it has none."""
    m = _LAUNCH_RE.search(src)
    if m is None:
        return None
    v = tuple(int(x) for x in m.groups()[:6])
    return v[:3], v[3:]


def launch_persistent(src: str) -> bool:
    """Is the kernel a reduction whose blocks loop over the work with a grid stride, so that its grid is best no
    larger than what the GPU holds at once? (Its first line ends in "persistent".) A second, partial wave of such
    blocks doubles the time of a wave whose blocks each do the same share; elementwise kernels instead run fastest
    with a block per 256 vectors, the hardware balancing many short blocks."""
    m = _LAUNCH_RE.search(src)
    return m is not None and m.group(7) is not None


# ---------------------------------------------------------------------------------------------------------------
# The render loop
# ---------------------------------------------------------------------------------------------------------------
_AXIS = "xyz"


def uops_to_cuda(lang: CUDALanguage, name: str, uops: list[UOp]) -> str:
    """The CUDA source of kernel `name` from its uops."""
    specials = [u for u in uops if u.uop is UOps.SPECIAL]
    has_barrier = any(u.uop is UOps.BARRIER for u in uops)
    par = _Parallel() if specials else _plan_parallel(uops)
    flat_loops = {id(lp) for lp in par.global_loops + par.reduce_loops}
    kw = KernelWriter(lang, uops)
    r, body, fresh, emit, bind = kw.r, kw.body, kw.fresh, kw.emit, kw.bind
    dts: set[DType] = set()
    # per open vectorised nest (by the id of its outermost loop): what its closing needs
    open_vec: dict[int, dict] = {}
    hoisted: dict[int, str] = {}  # id of a moved load or store -> the variable standing for its element

    def buf_type(buf: UOp) -> str:
        return lang.buffer_type_map.get(buf.dtype.base) or lang.render_dtype(buf.dtype.base)

    def open_flat(loops: list[UOp], first: str, stride: str) -> None:
        """One loop over the flattened nest `loops`, each loop variable recovered by division and modulo. The body
        of a vectorised nest is rendered once, for one element `flat`, and placed by close_vec."""
        extents = [f"({r[id(lp.vin[1])]})" for lp in loops]
        flat = fresh("flat")
        vec: _Vec | None = par.vec.get(id(loops[-1]))
        if vec is None:
            emit(f"for (int {flat} = {first}; {flat} < {'*'.join(extents)}; {flat} += {stride}) {{")
        else:
            emit("{")
            kw.depth += 1
            state = {"vec": vec, "first": first, "stride": f"({stride})", "flat": flat, "n": fresh("tg_n"), "off": {}}
            emit(f"const int {state['n']} = {'*'.join(extents)};")
            for u in vec.loads + vec.stores:
                terms = [f"{r[t]}*{c}" if c != 1 else r[t] for t, c in vec.offsets[id(u)].items() if t and c]
                const = vec.offsets[id(u)].get(None, 0)
                # "+offset" or "" after the buffer's name
                state["off"][id(u)] = "+(" + "+".join(terms + [str(const)] * bool(const)) + ")" if terms else \
                    f"+{const}" if const else ""
                hoisted[id(u)] = fresh("tg_ld" if u.uop is UOps.LOAD else "tg_st")
            state["start"] = len(body)
            open_vec[id(loops[0])] = state
        kw.depth += 1
        for k, lp in enumerate(loops):
            var = fresh("ridx")
            inner = "*".join(extents[k + 1:])
            expr = f"({flat}/({inner}))" if inner else flat
            emit(f"int {var} = {expr}%{extents[k]};" if k else f"int {var} = {expr};")
            r[id(lp)] = var

    def close_vec(state: dict) -> None:
        """Places a vectorised nest's body (see _Vec): `unroll` whole vectors a thread per step while every moved
        pointer is aligned, their loads issued together; then one vector at a time; then single elements."""
        lines = [line[2 * (kw.depth + 1):] for line in body[state["start"]:]]
        del body[state["start"]:]
        vec, n, first, stride, flat = state["vec"], state["n"], state["first"], state["stride"], state["flat"]
        w, unroll, moved = vec.width, vec.unroll, vec.loads + vec.stores
        ptr = {id(u): f"{r[id(u.vin[0])]}{state['off'][id(u)]}" for u in moved}
        vt = {id(u): f"tg_vec<{buf_type(u.vin[0])}, {w}>" for u in moved}
        names = {id(u): fresh("tg_vl" if u.uop is UOps.LOAD else "tg_vs") for u in moved}

        def element(index: str, lane: str) -> None:
            """The body for lane tg_j of the vectors, `lane` spelling a vector's element from its name."""
            emit("#pragma unroll")
            emit(f"for (int tg_j = 0; tg_j < {w}; tg_j++) {{")
            kw.depth += 1
            emit(f"const int {flat} = {index};")
            for u in moved:
                kind = ("const ", "") if u.uop is UOps.LOAD else ("", "&")
                emit(f"{kind[0]}{buf_type(u.vin[0])}{kind[1]} {hoisted[id(u)]} = {lane.format(names[id(u)])};")
            for line in lines:
                emit(line)
            kw.depth -= 1
            emit("}")

        aligned = " && ".join(f"((unsigned long long)({ptr[id(u)]}) & {w * u.vin[0].dtype.base.itemsize - 1}ull) == 0"
                              for u in moved)
        nv, v = fresh("tg_nv"), fresh("tg_v")
        emit(f"const int {nv} = ({aligned}) ? {n}/{w} : 0;")
        emit(f"int {v} = {first};")
        if unroll > 1:
            emit(f"for (; {v}+{unroll - 1}*{stride} < {nv}; {v} += {unroll}*{stride}) {{")
            kw.depth += 1
            at = f"({v}+tg_u*{stride})*{w}"
            for u in moved:
                emit(f"{vt[id(u)]} {names[id(u)]}[{unroll}];")
            if vec.loads:
                emit("#pragma unroll")
                emit(f"for (int tg_u = 0; tg_u < {unroll}; tg_u++) {{")
                for u in vec.loads:
                    emit(f"  {names[id(u)]}[tg_u] = *(const {vt[id(u)]}*)({ptr[id(u)]}+{at});")
                emit("}")
            emit("#pragma unroll")
            emit(f"for (int tg_u = 0; tg_u < {unroll}; tg_u++) {{")
            kw.depth += 1
            element(f"{at}+tg_j", "{}[tg_u].e[tg_j]")
            for u in vec.stores:
                emit(f"*({vt[id(u)]}*)({ptr[id(u)]}+{at}) = {names[id(u)]}[tg_u];")
            kw.depth -= 1
            emit("}")
            kw.depth -= 1
            emit("}")
        emit(f"for (; {v} < {nv}; {v} += {stride}) {{")
        kw.depth += 1
        for u in vec.loads:
            emit(f"const {vt[id(u)]} {names[id(u)]} = *(const {vt[id(u)]}*)({ptr[id(u)]}+{v}*{w});")
        for u in vec.stores:
            emit(f"{vt[id(u)]} {names[id(u)]};")
        element(f"{v}*{w}+tg_j", "{}.e[tg_j]")
        for u in vec.stores:
            emit(f"*({vt[id(u)]}*)({ptr[id(u)]}+{v}*{w}) = {names[id(u)]};")
        kw.depth -= 1
        emit("}")
        # after the last whole vector, or everything where a pointer is misaligned
        emit(f"for (int {flat} = {nv}*{w}+{first}; {flat} < {n}; {flat} += {stride}) {{")
        kw.depth += 1
        for u in vec.loads:
            emit(f"const {buf_type(u.vin[0])} {hoisted[id(u)]} = {r[id(u.vin[0])]}[{flat}{state['off'][id(u)]}];")
        for u in vec.stores:
            emit(f"{buf_type(u.vin[0])} {hoisted[id(u)]};")
        for line in lines:
            emit(line)
        for u in vec.stores:
            emit(f"{r[id(u.vin[0])]}[{flat}{state['off'][id(u)]}] = {hoisted[id(u)]};")
        kw.depth -= 1
        emit("}")
        kw.depth -= 1
        emit("}")

    if par.mode in ("blocks", "grid"):
        emit(f"__shared__ {lang.render_dtype(par.acc.dtype)} tg_red[32];  // a partial result per warp")
    if par.mode == "grid":
        # launched with more blocks than there are partial slots, the extra blocks sit out
        emit("__shared__ bool tg_last;")
        emit(f"const unsigned int tg_blocks = gridDim.x < {par.grid}u ? gridDim.x : {par.grid}u;")
        emit("if (blockIdx.x >= tg_blocks) return;")
    for u in uops:
        op, dt, vin = u.uop, u.dtype, u.vin
        if dt is not None:
            dts.add(dt.base if isinstance(dt, PtrDType) else dt)
        if kw.define_param(u):
            pass
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
            kw.depth += 1
        elif op is UOps.ENDLOOP and id(vin[0]) in flat_loops:
            nest = par.global_loops if any(vin[0] is lp for lp in par.global_loops) else par.reduce_loops
            if vin[0] is not nest[0]:
                continue
            if nest is par.global_loops and par.mode == "blocks":
                kw.depth -= 1
                emit("}")  # the `if (threadIdx.x == 0)` around the stores
            kw.depth -= 1
            if id(nest[0]) in open_vec:
                close_vec(open_vec.pop(id(nest[0])))
            else:
                emit("}")
            if nest is par.reduce_loops:
                _emit_block_combine(lang, par, r[id(par.acc)], emit)
                if par.mode == "grid":
                    _emit_grid_combine(lang, par, r[id(par.acc)], emit)
                emit("if (threadIdx.x == 0) {")
                kw.depth += 1
                if par.mode == "grid":
                    emit("tg_done = 0;  // ready for the next launch")
        elif op is UOps.ENDLOOP:
            kw.depth -= 1
            emit("}")
        elif op is UOps.DEFINE_ACC:
            var = fresh("acc")
            start = lang.render_const(u.arg, dt.scalar())
            if dt.count > 1:
                start = lang.render_vectorize([start] * dt.count, dt)
            emit(f"{lang.render_dtype(dt)} {var} = {start};")
            r[id(u)] = var
        elif op is UOps.LOAD and dt.count > 1:
            access = f"tg_vload<{buf_type(vin[0])}, {dt.count}>({r[id(vin[0])]}+{r[id(vin[1])]})"
            if len(vin) > 2:
                access = f"({r[id(vin[2])]})?{access}:{r[id(vin[3])]}"
            bind(u, access, "val", inline=False)
        elif op is UOps.LOAD:
            access = hoisted.get(id(u)) or f"{r[id(vin[0])]}[{r[id(vin[1])]}]"
            access = lang.render_load(access, vin[0].dtype.base)
            if len(vin) > 2:
                access = f"({r[id(vin[2])]})?{access}:{r[id(vin[3])]}"
            bind(u, access, "val", inline=False)
        elif op is UOps.ALU and dt.count > 1:
            bind(u, lang.render_vector_alu(u.arg, [r[id(v)] for v in vin], dt), "alu", inline=True)
        elif op is UOps.VECTORIZE:
            bind(u, lang.render_vectorize([r[id(v)] for v in vin], dt), "vec", inline=True)
        elif op is UOps.GEP:
            bind(u, lang.render_gep(r[id(vin[0])], u.arg), "gep", inline=True)
        elif op is UOps.ALU:
            bind(u, lang.render_result(lang.code_for_op[u.arg](*[r[id(v)] for v in vin], dt), dt), "alu", inline=True)
        elif op is UOps.CAST:
            bind(u, lang.render_cast(r[id(vin[0])], dt), "cast", inline=True)
        elif op is UOps.BITCAST:
            bind(u, lang.render_bitcast(r[id(vin[0])], vin[0].dtype, dt), "cast", inline=False)
        elif op is UOps.PHI:
            emit(f"{r[id(vin[0])]} = {r[id(vin[1])]};")
            r[id(u)] = r[id(vin[0])]
        elif op is UOps.STORE and vin[2].dtype.count > 1:
            vt = f"{buf_type(vin[0])}, {vin[2].dtype.count}"
            line = f"tg_vstore<{vt}>({r[id(vin[0])]}+{r[id(vin[1])]}, {r[id(vin[2])]});"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        elif op is UOps.STORE:
            target = hoisted.get(id(u)) or f"{r[id(vin[0])]}[{r[id(vin[1])]}]"
            line = f"{target} = {lang.render_store(r[id(vin[2])], vin[0].dtype.base)};"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        else:
            raise NotImplementedError(f"the CUDA renderer has no rule for {op}")
    if par.mode in ("blocks", "grid") and not par.global_loops:
        kw.depth -= 1
        emit("}")  # the `if (threadIdx.x == 0)` of a kernel without output loops
    bounds = _launch_bounds(specials, par)
    kernel = lang.render_kernel(name, body, kw.params, bounds)
    prelude = lang.prelude(dts) + (BITCAST_PRELUDE if any(u.uop is UOps.BITCAST for u in uops) else "")
    vectors = any(u.dtype is not None and u.dtype.count > 1 and not isinstance(u.dtype, PtrDType) for u in uops)
    prelude += VEC_PRELUDE if par.vec or vectors else ""
    prelude += VEC_OPS_PRELUDE if vectors else ""
    persistent = " persistent" if par.mode in ("blocks", "grid") else ""
    marker = "" if specials else f"{LAUNCH_MARKER} grid=({par.grid},1,1) block=({par.block},1,1){persistent}\n"
    if par.mode == "grid":
        # per module (each kernel is a module of its own): the blocks' partial results and how many are done
        prelude += f"__device__ {lang.render_dtype(par.acc.dtype)} tg_part[{par.grid}];\n"
        prelude += "__device__ unsigned int tg_done;\n"
    return marker + prelude + kernel


def _emit_block_combine(lang: CUDALanguage, par: _Parallel, acc: str, emit: Callable[[str], None]) -> None:
    """Folds the block's partial results into every thread's `acc`: a shuffle tree in each warp, the warps' results
    through shared memory, a shuffle tree in the first warp. Needs a block of whole warps (every launch's is)."""
    dt = par.acc.dtype
    ty = lang.render_dtype(dt)
    folded = lang.render_result(lang.code_for_op[par.reduce_op]("tg_o", acc, dt), dt)

    def warp_tree(indent: str = "") -> None:
        emit(f"{indent}for (int tg_s = 16; tg_s > 0; tg_s >>= 1) {{")
        emit(f"{indent}  const {ty} tg_o = ({ty})__shfl_down_sync(0xffffffffu, {acc}, tg_s);")
        emit(f"{indent}  {acc} = {folded};")
        emit(f"{indent}}}")
    warp_tree()
    emit(f"if ((threadIdx.x & 31u) == 0) tg_red[threadIdx.x >> 5] = {acc};")
    emit("__syncthreads();")
    emit("if (threadIdx.x < 32) {")
    emit(f"  {acc} = threadIdx.x < (blockDim.x >> 5) ? tg_red[threadIdx.x] : {lang.render_const(par.acc.arg, dt)};")
    warp_tree("  ")
    emit(f"  if (threadIdx.x == 0) tg_red[0] = {acc};")
    emit("}")
    emit("__syncthreads();")
    emit(f"{acc} = tg_red[0];")
    emit("__syncthreads();  // tg_red is reused by the next output")


def _emit_grid_combine(lang: CUDALanguage, par: _Parallel, acc: str, emit: Callable[[str], None]) -> None:
    """After each block has its partial result in `acc`: every block publishes it, and the last block to finish
    folds all of them into `acc`; the other blocks return. Launches of one kernel are ordered on the stream, so one
    set of partial slots per module suffices."""
    dt = par.acc.dtype
    ty = lang.render_dtype(dt)
    emit("if (threadIdx.x == 0) {")
    emit(f"  tg_part[blockIdx.x] = {acc};")
    emit("  __threadfence();  // the partial is visible to every block before the count says so")
    emit("  tg_last = atomicAdd(&tg_done, 1u) == tg_blocks - 1u;")
    emit("}")
    emit("__syncthreads();")
    emit("if (!tg_last) return;")
    emit(f"{acc} = {lang.render_const(par.acc.arg, dt)};")
    emit("for (unsigned int tg_i = threadIdx.x; tg_i < tg_blocks; tg_i += blockDim.x) {")
    emit(f"  const {ty} tg_p = ((volatile {ty}*)tg_part)[tg_i];")
    emit(f"  {acc} = {lang.render_result(lang.code_for_op[par.reduce_op]('tg_p', acc, dt), dt)};")
    emit("}")
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
