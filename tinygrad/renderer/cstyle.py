"""Renders a linearized kernel (a list of UOps) as C-family source.

A language is a table: how each op, type and constant is spelled, and how the kernel's signature looks. The one
loop in `uops_to_cstyle` walks the uops in order; single-use arithmetic is inlined into its user, everything
else gets a named variable.

Vector values (dtypes with `count > 1`, see `tinygrad.codegen.uops`) are GCC/Clang vector extensions: a typedef
per vector type (alignment lowered to the element's, so a vector can be read at any element index), infix
arithmetic lane by lane, `v[i]` for a lane, compound literals to build one, `__builtin_convertvector` (gcc >= 9,
clang) to convert one lane by lane.
"""
from __future__ import annotations

import math
import string
import struct
from typing import Callable

from tinygrad.codegen.program import ProgramSpec
from tinygrad.codegen.uops import INT_VECTOR_ALU_OPS, VECTOR_ALU_OPS, VECTOR_DTYPES, UOp, UOps
from tinygrad.dtype import DType, PtrDType, dtypes
from tinygrad.ops import BinaryOps, TernaryOps, UnaryOps
from tinygrad.renderer.prelude import read_prelude

# inlined expressions longer than this get a variable of their own, so huge fused kernels stay compilable
MAX_INLINE = 400


def _c_math(name: str, half: str = "_Float16") -> Callable[[str, DType], str]:
    """A libm builtin for float/double; half computes in float, its result converted to `half`, the C type of a half
    value (render_result then rounds it)."""
    def render(x: str, dt: DType) -> str:
        if dt == dtypes.float64:
            return f"__builtin_{name}({x})"
        if dt == dtypes.float16:
            return f"({half})__builtin_{name}f((float)({x}))"
        return f"__builtin_{name}f({x})"
    return render


def _c_max(half: str = "_Float16") -> Callable[[str, str, DType], str]:
    """MAX for the host compilers, NaN propagating as PyTorch's maximum does. Floats go through a GNU statement
    expression that names each operand once: the plain conditional repeats its first operand three times, so a tree
    of maxes (a reduction's lanes combined) grows exponentially in source and compile time."""
    names = {dtypes.float64: "double", dtypes.float16: half}

    def render(a: str, b: str, dt: DType) -> str:
        if not dtypes.is_float(dt):
            return f"(({a}>{b})?{a}:{b})"
        t = names.get(dt, "float")
        return f"({{{t} tg_a = {a}, tg_b = {b}; (tg_a!=tg_a||tg_a>tg_b)?tg_a:tg_b;}})"
    return render


def round_to_half(val: float) -> float:
    """`val` rounded to half precision (nearest even, inf past 65504), as a Python float."""
    if math.isnan(val) or math.isinf(val) or abs(val) >= 65520:
        return val if math.isnan(val) else math.copysign(math.inf, val)
    return struct.unpack("<e", struct.pack("<e", val))[0]


# bfloat16 on the host: buffers hold the 16 bits, registers hold the value as a float, and every bfloat16 result is
# rounded to bfloat16 precision (nearest even), which is what PyTorch does for each bfloat16 op
BF16_PRELUDE = read_prelude("host/bf16.h")

# half for a compiler without a native half type (clang 14 on x86): buffers hold the 16 bits, registers hold the value
# as a float, and every half result is rounded to half precision (nearest even), as the native type's casts round.
# The conversions are integer bit manipulation, so they need no header and no compiler support. A double is first
# rounded to float with round-to-odd, which keeps its rounding to half correct (converting double -> float -> half
# by nearest twice would round some values wrongly); _Generic picks that path at compile time.
# tg_f16_round, the rounding after every half op, is branch-free (selects): a 512x512 half matmul took 168 ms with a
# round trip through the 16 bits, 103 ms so (gcc 12; 37 ms with the native type), 326 -> 170 ms on clang 14.
# NOTE: the text must not name the native type: ops_clang refuses source that does on such a compiler
SOFT_HALF_PRELUDE = read_prelude("host/soft_half.h")


# 2**f on [-0.5, 0.5]: a degree-6 polynomial fitted (least squares on the relative error at Chebyshev nodes) to
# within 1.2 ulp in float32 arithmetic, Horner's rule rounding each step (no contraction)
# host vector helpers, one per vector type: its type name, mask type and constants filled in
_VEC_REG = string.Template(read_prelude("host/vec_reg.h"))
_VEC_MAX = string.Template(read_prelude("host/vec_max.h"))
_VEC_EXP2 = string.Template(read_prelude("host/vec_exp2.h"))
_EXP2_POLY = (1.0, 0.6931471824645996, 0.24022646248340607, 0.05550329014658928, 0.009618519805371761,
              0.0013399859890341759, 0.00015337577497120947)


def _vector_exp2(name: str, mask: str, lanes: int) -> str:
    """exp2 of a float32 vector in vector instructions, where a libm call per lane would cost a call each (softmax's
    exp ran at 3.7 GB/s on 2 cores): 2**x = 2**f * 2**n, n = floor(x + 0.5), 2**n built from exponent bits in two
    halves (every factor a normal float: results below 2**-126 round once, to a subnormal or 0, as exp2f's do);
    within 1.2 ulp of the exact value (libm's exp2f: 1).
    x is first clamped to [-151, 129] (past them the result is 0 or inf either way); NaN stays NaN."""
    const = lambda v: f"(({name}){{{', '.join([f'{v!r}f'] * lanes)}}})"  # noqa: E731
    poly = const(_EXP2_POLY[-1])
    for c in reversed(_EXP2_POLY[:-1]):
        poly = f"({poly}*f+{const(c)})"
    return _VEC_EXP2.substitute(name=name, mask=mask, hi=const(129.0), lo=const(-151.0), half=const(0.5), poly=poly)


class CStyleLanguage:
    """The spelling of C for the CLANG/CPU devices. GPU languages subclass it and change the table."""
    kernel_prefix = "void "
    buffer_prefix = ""
    arg_int_prefix = "const int"
    restrict = " restrict"
    type_map: dict[DType, str] = {
        dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
        dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16",
        dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double",
    }
    # how a buffer of each dtype is declared, where it differs from a value of that dtype
    buffer_type_map: dict[DType, str] = {dtypes.bfloat16: "unsigned short"}
    # the op table: each entry renders the operands (already strings) with the result dtype
    code_for_op: dict = {
        UnaryOps.NEG: lambda x, dt: f"(!{x})" if dt == dtypes.bool else f"(-{x})",
        UnaryOps.EXP2: _c_math("exp2"),
        UnaryOps.LOG2: _c_math("log2"),
        UnaryOps.SIN: _c_math("sin"),
        UnaryOps.SQRT: _c_math("sqrt"),
        UnaryOps.RECIP: lambda x, dt: f"(1/{x})",
        BinaryOps.ADD: lambda a, b, dt: f"({a}+{b})",
        BinaryOps.SUB: lambda a, b, dt: f"({a}-{b})",
        BinaryOps.MUL: lambda a, b, dt: f"({a}*{b})",
        BinaryOps.DIV: lambda a, b, dt: f"({a}/{b})",
        # NaN in either operand propagates, as PyTorch's maximum does
        BinaryOps.MAX: lambda a, b, dt: f"(({a}!={a}||{a}>{b})?{a}:{b})" if dtypes.is_float(dt) else
        f"(({a}>{b})?{a}:{b})",
        BinaryOps.MOD: lambda a, b, dt: f"__builtin_fmod{'' if dt == dtypes.float64 else 'f'}({a},{b})"
        if dtypes.is_float(dt) else f"({a}%{b})",
        BinaryOps.CMPLT: lambda a, b, dt: f"({a}<{b})",
        BinaryOps.CMPEQ: lambda a, b, dt: f"({a}=={b})",
        BinaryOps.CMPNE: lambda a, b, dt: f"({a}!={b})",
        BinaryOps.XOR: lambda a, b, dt: f"({a}^{b})",
        BinaryOps.AND: lambda a, b, dt: f"({a}&{b})",
        BinaryOps.OR: lambda a, b, dt: f"({a}|{b})",
        BinaryOps.SHL: lambda a, b, dt: f"({a}<<{b})",
        BinaryOps.SHR: lambda a, b, dt: f"({a}>>{b})",
        TernaryOps.WHERE: lambda c, a, b, dt: f"({c}?{a}:{b})",
        TernaryOps.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
    }

    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1:
            return self.vector_type_name(dt)
        if dt not in self.type_map:
            raise NotImplementedError(f"{dt} is not supported by the {type(self).__name__} renderer yet")
        return self.type_map[dt]

    def render_const(self, val, dt: DType) -> str:
        text = self._render_const(val, dt)
        # negative literals are parenthesised so that negating one never reads as the decrement operator (--2.0f)
        return f"({text})" if text.startswith("-") else text

    def _render_const(self, val, dt: DType) -> str:
        if dt == dtypes.bool:
            return "1" if val else "0"
        if dtypes.is_float(dt):
            if math.isnan(val):
                body = "__builtin_nanf(\"\")"
            elif math.isinf(val):
                body = ("-" if val < 0 else "") + "__builtin_inff()"
            else:
                body = repr(float(val)) + ("" if dt == dtypes.float64 else "f")
            if dt == dtypes.bfloat16:
                return f"tg_bf16_round({body})"
            return body if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)}){body})"
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dt, "")
        if dt == dtypes.int64 and val == dtypes.min(dtypes.int64):
            return "(-9223372036854775807ll-1)"
        if dt == dtypes.int32 and val == dtypes.min(dtypes.int32):
            return "(-2147483647-1)"
        return f"{int(val)}{suffix}" if suffix or dt == dtypes.int32 else f"(({self.render_dtype(dt)}){int(val)})"

    def render_cast(self, x: str, dt: DType) -> str:
        if dt == dtypes.bfloat16:
            return f"tg_bf16_round((float)({x}))"
        return f"(({self.render_dtype(dt)})({x}))"

    def render_load(self, access: str, buf: DType) -> str:
        return f"tg_bf16_to_f32({access})" if buf == dtypes.bfloat16 else access

    def render_store(self, val: str, buf: DType) -> str:
        return f"tg_f32_to_bf16({val})" if buf == dtypes.bfloat16 else val

    def render_result(self, expr: str, dt: DType) -> str:
        """An ALU result of dtype `dt`: narrow results are rounded or wrapped after each op, as PyTorch does (bfloat16
        is computed in float; a half cast rounds because the compiler runs with -fexcess-precision=standard)."""
        if dt == dtypes.bfloat16:
            return f"tg_bf16_round({expr})"
        if dt == dtypes.float16 or (dt.itemsize < 4 and (dtypes.is_int(dt) or dt == dtypes.bool)):
            # C computes narrow types in int (and half in float): narrow each result, as PyTorch's ops do
            return f"(({self.render_dtype(dt)}){expr})"
        return expr

    def prelude(self, dts: set[DType]) -> str:
        vecs = sorted((dt for dt in dts if dt.count > 1 and not isinstance(dt, PtrDType)), key=lambda d: d.name)
        return (BF16_PRELUDE if dtypes.bfloat16 in dts else "") + "".join(self.vector_prelude(dt) for dt in vecs)

    # ---- vectors ----
    def vector_type_name(self, dt: DType) -> str:
        return f"{self.render_dtype(dt.scalar()).replace(' ', '_')}_v{dt.count}"

    def vector_prelude(self, dt: DType) -> str:
        """The typedef of vector type `dt`, and for the types arithmetic runs on (VECTOR_DTYPES) the lane-wise max
        the op table has no infix form for; vectors of narrow types are only loaded and converted."""
        name, scalar = self.vector_type_name(dt), dt.scalar()
        typedef = (f"typedef {self.render_dtype(scalar)} {name} __attribute__((vector_size({dt.itemsize}), "
                   f"aligned({scalar.itemsize})));\n")
        if dtypes.is_int(scalar) and scalar.itemsize < 4:
            # NOTE: gcc 12 widens a narrow int vector it sees read from memory lane by lane (dozens of
            # instructions), but one in a register with a single extension: the empty asm puts it in one
            return typedef + _VEC_REG.substitute(name=name)
        if scalar not in VECTOR_DTYPES:
            return typedef
        mask = f"tg_mask{scalar.itemsize * 8}_v{dt.count}"
        mask_scalar = {4: "int", 8: "long long"}[scalar.itemsize]
        # NOTE: max(a, b) is a where a is NaN or larger, else b: a bit select on the comparison masks
        return (typedef + _VEC_MAX.substitute(name=name, mask=mask, mask_scalar=mask_scalar, bytes=dt.itemsize) +
                (_vector_exp2(name, mask, dt.count) if scalar == dtypes.float32 else ""))

    def render_vector_alu(self, op, operands: list[str], dt: DType) -> str:
        if op is BinaryOps.MAX:
            return f"tg_max_{self.vector_type_name(dt)}({operands[0]}, {operands[1]})"
        if op is UnaryOps.EXP2 and dt.scalar() == dtypes.float32:
            return f"tg_exp2_{self.vector_type_name(dt)}({operands[0]})"
        if op in INT_VECTOR_ALU_OPS and dtypes.is_int(dt.scalar()):
            # C's vector extensions apply the infix ops lane by lane in the vector's own type (no promotion)
            return self.code_for_op[op](*operands, dt)
        if op not in VECTOR_ALU_OPS:
            raise NotImplementedError(f"{op} on vectors is not supported by the {type(self).__name__} renderer")
        return self.code_for_op[op](*operands, dt)

    def render_vector_cast(self, x: str, src: DType, dt: DType) -> str:
        """Vector `x` of type `src` converted lane by lane to vector type `dt` (as many lanes), each lane as a scalar
        cast would."""
        if dtypes.is_int(src.scalar()) and src.scalar().itemsize < 4:
            x = f"tg_reg_{self.vector_type_name(src)}({x})"
        return f"__builtin_convertvector({x}, {self.render_dtype(dt)})"

    def render_vectorize(self, lanes: list[str], dt: DType) -> str:
        return f"(({self.render_dtype(dt)}){{{', '.join(lanes)}}})"

    def render_gep(self, vec: str, lane: int) -> str:
        return f"{vec}[{lane}]" if vec.isidentifier() else f"({vec})[{lane}]"

    def render_parallel(self, threads: int) -> str:
        """The line before a loop whose iterations may run on `threads` threads (OpenMP; a compiler without it
        ignores the pragma and runs the loop serially). The loop stays serial while the OpenMP runtime allows one
        thread: that is how a forked child, which has no worker threads, is kept from waiting for them."""
        return f"#pragma omp parallel for num_threads({threads}) if(omp_get_max_threads() > 1)"

    def parallel_prelude(self) -> str:
        return "int omp_get_max_threads(void);\n"

    def render_vector_access(self, buf: str, idx: str, dt: DType, const: bool) -> str:
        """The lvalue of the `dt.count` elements of `buf` from element `idx` on."""
        return f"(*(({'const ' if const else ''}{self.render_dtype(dt)}*)({buf}+{idx})))"

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        if dtypes.bfloat16 in (src, dt):
            raise NotImplementedError("bitcast to or from bfloat16 is not supported by the C renderer")
        if src.count > 1:
            # a vector cast to a vector type of the same size reinterprets its bits (in its register)
            return f"(({self.render_dtype(dt)})({x}))"
        # a union compound literal reinterprets the bits without undefined behaviour
        return f"((union {{ {self.render_dtype(src)} i; {self.render_dtype(dt)} o; }}){{.i = {x}}}).o"

    def render_kernel(self, name: str, body: list[str], params: list[tuple[str, DType | str, bool]]) -> str:
        args = []
        for pname, dt, is_out in params:
            if isinstance(dt, PtrDType):
                const = "" if is_out else "const "
                base = self.buffer_type_map.get(dt.base) or self.render_dtype(dt.base)
                args.append(f"{const}{base}*{self.restrict} {pname}")
            else:
                args.append(f"{self.arg_int_prefix} {pname}")
        return f"{self.kernel_prefix}{name}({', '.join(args)}) {{\n" + "\n".join(body) + "\n}\n"

    def render_source(self, kernel: str, dts: set[DType]) -> str:
        return self.prelude(dts) + kernel


class KernelWriter:
    """The body of a kernel being written from its uops: `r` maps each uop to the C expression or variable that
    stands for it, `emit` writes a line at the current `depth`, `fresh` makes a new variable name, and `bind` inlines
    an expression used once (and short enough) or else gives it a variable of its own. Shared by the renderers."""

    def __init__(self, lang: CStyleLanguage, uops: list[UOp]):
        self.lang = lang
        self.uses: dict[int, int] = {}
        for u in uops:
            for v in u.vin:
                self.uses[id(v)] = self.uses.get(id(v), 0) + 1
        self.r: dict[int, str] = {}
        self.body: list[str] = []
        # the kernel's parameters in order: (name, dtype, is_output)
        self.params: list[tuple[str, DType, bool]] = []
        self.depth = 1
        self.counters: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        n = self.counters.get(prefix, 0)
        self.counters[prefix] = n + 1
        return f"{prefix}{n}"

    def emit(self, line: str) -> None:
        self.body.append("  " * self.depth + line)

    def define_param(self, u: UOp) -> bool:
        """A buffer or symbolic-variable argument becomes a kernel parameter; False for any other uop."""
        if u.uop is UOps.DEFINE_GLOBAL:
            self.r[id(u)] = u.arg[1]
            self.params.append((u.arg[1], u.dtype, u.arg[2]))
        elif u.uop is UOps.DEFINE_VAR:
            var_name = "".join(c if c.isalnum() or c == "_" else "_" for c in u.arg.expr)
            self.r[id(u)] = var_name
            self.params.append((var_name, dtypes.int32, False))
        else:
            return False
        return True

    def bind(self, u: UOp, expr: str, prefix: str, inline: bool) -> None:
        if inline and self.uses.get(id(u), 0) <= 1 and len(expr) <= MAX_INLINE:
            self.r[id(u)] = expr
        else:
            var = self.fresh(prefix)
            self.emit(f"{self.lang.render_dtype(u.dtype)} {var} = {expr};")
            self.r[id(u)] = var

    def render_value(self, u: UOp) -> bool:
        """Renders the uops every render loop spells alike (constants, accumulators, arithmetic, vectors, casts, PHI)
        and says so; False for the others, which each loop renders in its own way."""
        lang, r, op, dt, vin = self.lang, self.r, u.uop, u.dtype, u.vin
        if op is UOps.CONST:
            r[id(u)] = lang.render_const(u.arg, dt)
        elif op is UOps.DEFINE_ACC:
            var = self.fresh("acc")
            start = lang.render_const(u.arg, dt.scalar())
            if dt.count > 1:
                start = lang.render_vectorize([start] * dt.count, dt)
            self.emit(f"{lang.render_dtype(dt)} {var} = {start};")
            r[id(u)] = var
        elif op is UOps.ALU and dt.count > 1:
            self.bind(u, lang.render_vector_alu(u.arg, [r[id(v)] for v in vin], dt), "alu", inline=True)
        elif op is UOps.ALU:
            self.bind(u, lang.render_result(lang.code_for_op[u.arg](*[r[id(v)] for v in vin], dt), dt), "alu",
                      inline=True)
        elif op is UOps.VECTORIZE:
            self.bind(u, lang.render_vectorize([r[id(v)] for v in vin], dt), "vec", inline=True)
        elif op is UOps.GEP:
            self.bind(u, lang.render_gep(r[id(vin[0])], u.arg), "gep", inline=True)
        elif op is UOps.CAST and isinstance(u.arg, tuple) and u.arg[0] == "bits":
            self.bind(u, lang.render_store(r[id(vin[0])], u.arg[1]), "cast", inline=True)
        elif op is UOps.CAST and dt.count > 1:
            self.bind(u, lang.render_vector_cast(r[id(vin[0])], vin[0].dtype, dt), "cast", inline=True)
        elif op is UOps.CAST:
            self.bind(u, lang.render_cast(r[id(vin[0])], dt), "cast", inline=True)
        elif op is UOps.BITCAST:
            self.bind(u, lang.render_bitcast(r[id(vin[0])], vin[0].dtype, dt), "cast", inline=False)
        elif op is UOps.PHI:
            self.emit(f"{r[id(vin[0])]} = {r[id(vin[1])]};")
            r[id(u)] = r[id(vin[0])]
        else:
            return False
        return True


def uops_to_cstyle(lang: CStyleLanguage, name: str, uops: list[UOp]) -> str:
    """The source of kernel `name` from its uops."""
    w = KernelWriter(lang, uops)
    r, body, fresh, emit, bind = w.r, w.body, w.fresh, w.emit, w.bind

    for u in uops:
        op, dt, vin = u.uop, u.dtype, u.vin
        if w.define_param(u):
            pass
        elif w.render_value(u):
            pass
        elif op is UOps.LOOP:
            if u.arg is not None and u.arg > 1:
                emit(lang.render_parallel(u.arg))
            var = fresh("ridx")
            emit(f"for (int {var} = {r[id(vin[0])]}; {var} < {r[id(vin[1])]}; {var}++) {{")
            r[id(u)] = var
            w.depth += 1
        elif op is UOps.ENDLOOP:
            w.depth -= 1
            emit("}")
        elif op is UOps.LOAD:
            if dt.count > 1:
                access = lang.render_vector_access(r[id(vin[0])], r[id(vin[1])], dt, const=True)
            else:
                access = lang.render_load(f"{r[id(vin[0])]}[{r[id(vin[1])]}]", vin[0].dtype.base)
            if len(vin) > 2:
                access = f"({r[id(vin[2])]})?{access}:{r[id(vin[3])]}"
            bind(u, access, "val", inline=False)
        elif op is UOps.STORE and vin[2].dtype.count > 1:
            dest = lang.render_vector_access(r[id(vin[0])], r[id(vin[1])], vin[2].dtype, const=False)
            line = f"{dest} = {r[id(vin[2])]};"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        elif op is UOps.STORE:
            line = f"{r[id(vin[0])]}[{r[id(vin[1])]}] = {lang.render_store(r[id(vin[2])], vin[0].dtype.base)};"
            emit(f"if ({r[id(vin[3])]}) {line}" if len(vin) > 3 else line)
        else:
            raise NotImplementedError(f"the C renderer has no rule for {op}")
    dts = {u.dtype.scalar() for u in uops if u.dtype} | {u.dtype for u in uops if u.dtype and u.dtype.count > 1}
    kernel = lang.render_kernel(name, body, w.params)
    if any(u.uop is UOps.LOOP and u.arg is not None and u.arg > 1 for u in uops):
        kernel = lang.parallel_prelude() + kernel
    return lang.render_source(kernel, dts)


class ClangLanguage(CStyleLanguage):
    """C for the host compiler (clang or gcc)."""
    code_for_op = {**CStyleLanguage.code_for_op, BinaryOps.MAX: _c_max()}


class SoftHalfClangLanguage(ClangLanguage):
    """C for a host compiler without a native half type (clang 14 on x86): half is stored as its 16 bits and computed
    in float (SOFT_HALF_PRELUDE), as bfloat16 is, with the same per-op rounding the native type gives. The linearizer
    never makes vectors of half (codegen/uops.py), so half stays scalar here."""
    type_map = {**CStyleLanguage.type_map, dtypes.float16: "float"}
    buffer_type_map = {**CStyleLanguage.buffer_type_map, dtypes.float16: "unsigned short"}
    code_for_op = {
        **ClangLanguage.code_for_op,
        BinaryOps.MAX: _c_max(half="float"),
        UnaryOps.EXP2: _c_math("exp2", half="float"),
        UnaryOps.LOG2: _c_math("log2", half="float"),
        UnaryOps.SIN: _c_math("sin", half="float"),
        UnaryOps.SQRT: _c_math("sqrt", half="float"),
    }

    def _render_const(self, val, dt: DType) -> str:
        # rounded here, so the literal is the half value itself (a float)
        if dt == dtypes.float16:
            return super()._render_const(round_to_half(float(val)), dtypes.float32)
        return super()._render_const(val, dt)

    def render_cast(self, x: str, dt: DType) -> str:
        return f"tg_f16_cast({x})" if dt == dtypes.float16 else super().render_cast(x, dt)

    def render_load(self, access: str, buf: DType) -> str:
        return f"tg_f16_to_f32({access})" if buf == dtypes.float16 else super().render_load(access, buf)

    def render_store(self, val: str, buf: DType) -> str:
        return f"tg_f32_to_f16({val})" if buf == dtypes.float16 else super().render_store(val, buf)

    def render_result(self, expr: str, dt: DType) -> str:
        return f"tg_f16_round({expr})" if dt == dtypes.float16 else super().render_result(expr, dt)

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        # a half register holds a float: the bits go through the 16-bit pattern
        if src == dtypes.float16:
            x, src = f"tg_f32_to_f16({x})", dtypes.uint16
        if dt == dtypes.float16:
            return f"tg_f16_to_f32({super().render_bitcast(x, src, dtypes.uint16)})"
        return super().render_bitcast(x, src, dt)

    def vector_type_name(self, dt: DType) -> str:
        if dt.scalar() == dtypes.float16:
            raise NotImplementedError("vectors of half are not supported without a native half type")
        return super().vector_type_name(dt)

    def prelude(self, dts: set[DType]) -> str:
        return (SOFT_HALF_PRELUDE if dtypes.float16 in dts else "") + super().prelude(dts)


_CLANG, _SOFT_HALF_CLANG = ClangLanguage(), SoftHalfClangLanguage()


def ClangRenderer(name: str, uops: list[UOp]) -> ProgramSpec:  # noqa: N802 - tinygrad's public spelling
    """C kernel `name` from its uops (a host kernel loops over its whole iteration space: no launch facts)."""
    return ProgramSpec(name, uops_to_cstyle(_CLANG, name, uops))


def soft_half_clang_renderer(name: str, uops: list[UOp]) -> ProgramSpec:
    """ClangRenderer for a compiler without a native half type (see SoftHalfClangLanguage)."""
    return ProgramSpec(name, uops_to_cstyle(_SOFT_HALF_CLANG, name, uops))
