"""Vector values spelled as tg_vec<T, W> structs (renderer/include/cuda/vec.cuh, metal/vec.metal), the spelling
the CUDA, HIP and Metal languages share: a struct of W lanes `e[W]`, built by brace initialisation, its lanes read
as `.e[i]`, its arithmetic and its NaN-propagating max (`tg_vmax`) from the language's vec_ops prelude. A GPU
language takes it by listing TgVecSpelling before GPULanguage among its bases.
"""
from __future__ import annotations

from tinygrad.dtype import DType
from tinygrad.ops import BinaryOps


class TgVecSpelling:
    """The vector slots of CStyleLanguage (vector_type_name, render_vectorize, render_gep, render_vector_alu) for
    tg_vec structs; the rest of the table is the language's own."""

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
