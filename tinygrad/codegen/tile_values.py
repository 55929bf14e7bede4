"""Values of a kernel's tile as the linearizer lowers them: a scalar uop (the same in every lane), a vector uop, or a
tuple of lane uops, and the ops on them: whole vectors where the device's LinearizerOptions allow the dtype and op,
else lane by lane. The Linearizer (codegen/linearizer.py) inherits these; `vector_axis`, `vector_width`, `opts` and
`em` (its Emitter) are its own."""
from tinygrad.codegen.uops import (
    INT_VECTOR_ALU_OPS,
    NARROW_VECTOR_DTYPES,
    VECTOR_ALU_OPS,
    VECTOR_DTYPES,
    VECTOR_MATH_OPS,
    UOps,
)
from tinygrad.dtype import dtypes


class TileValues:
    """The Linearizer's tile-value methods (see the module docstring)."""

    def _opt(self, flag: str) -> bool:
        """A LinearizerOptions flag, False for a kernel linearized without options."""
        return self.opts is not None and getattr(self.opts, flag)

    def _vec_ok(self, dtype):
        """Whether values of `dtype` can be whole vectors here (else they are computed lane by lane)."""
        if self.vector_axis == -1 or self.opts is None or not self.opts.supports_upcast:
            return False
        return dtype in VECTOR_DTYPES and dtype.itemsize * self.vector_width <= self.opts.max_vector_bytes

    def _vec_load_ok(self, dtype):
        """Whether a buffer of `dtype` can be read as whole vectors: VECTOR_DTYPES, and the narrow types where the
        device widens them in registers (narrow_vectors; a vector of them is never wider than its float32 vector)."""
        if self._vec_ok(dtype):
            return True
        return dtype in NARROW_VECTOR_DTYPES and self._opt("narrow_vectors") and \
            self._vec_ok(dtypes.float32)

    def _int_vec_ok(self, dtype):
        """Whether integer ops on `dtype` can run on whole vectors here (LinearizerOptions.int_vectors): the narrow
        types, whose vectors are never wider than the float32 vector they become."""
        return dtype in NARROW_VECTOR_DTYPES and self._opt("int_vectors") and self._vec_load_ok(dtype)

    def _cast_any(self, kind, dtype, src):
        """A CAST or BITCAST of a tile value: one vector CAST where the device converts whole vectors (a narrow or
        float vector to a VECTOR_DTYPES one, under LinearizerOptions.narrow_vectors; a narrow vector to another,
        or a BITCAST to one of its size, under int_vectors), else lane by lane."""
        if not isinstance(src, tuple) and src.dtype.count == 1:
            return self.em.uop(kind, dtype, (src,), None)
        if not isinstance(src, tuple) and self._int_vec_ok(dtype) and self._int_vec_ok(src.dtype.scalar()) and \
                (kind is UOps.CAST or dtype.itemsize == src.dtype.scalar().itemsize):
            return self.em.uop(kind, dtype.vec(self.vector_width), (src,), None)
        if kind is UOps.CAST and not isinstance(src, tuple) and self._opt("narrow_vectors") and \
                self._vec_ok(dtype) and self._vec_load_ok(src.dtype.scalar()):
            sdt = src.dtype.scalar()
            if dtypes.is_int(sdt) and sdt.itemsize < 4:
                # narrow ints are extended to int32 first, then converted: gcc 12 converts an int8 vector straight
                # to float lane by lane, but does each of the two steps as one instruction
                src = self.em.uop(UOps.CAST, dtypes.int32.vec(self.vector_width), (src,), None)
            return self.em.uop(UOps.CAST, dtype.vec(self.vector_width), (src,), None)
        return tuple([self.em.uop(kind, dtype, (self._lane_of(src, i),), None) for i in range(self.vector_width)])

    def _as_vec(self, v, dtype):
        if isinstance(v, tuple):
            return self.em.uop(UOps.VECTORIZE, dtype.vec(self.vector_width), v, None)
        if v.dtype.count > 1:
            return v
        return self.em.uop(UOps.VECTORIZE, dtype.vec(self.vector_width), (v,) * self.vector_width, None)

    def _lane_of(self, v, lane):
        if isinstance(v, tuple):
            return v[lane]
        if v.dtype.count == 1:
            return v
        if v.uop is UOps.VECTORIZE:
            return v.vin[lane]
        return self.em.uop(UOps.GEP, v.dtype.scalar(), (v,), lane)

    def _alu_any(self, op, dtype, srcs):
        """An AST ALU op on tile values: scalar if every source is, a vector op where the op and dtype allow one,
        else lane by lane."""
        scalar = True
        for s in srcs:
            if isinstance(s, tuple) or s.dtype.count > 1:
                scalar = False
        if scalar:
            return self.em.uop(UOps.ALU, dtype, srcs, op)
        vec_op = op in VECTOR_ALU_OPS or (op in VECTOR_MATH_OPS and dtype == dtypes.float32 and
                                          self._opt("vector_math"))
        if op in INT_VECTOR_ALU_OPS and self._int_vec_ok(dtype):
            vec_op = True
        elif not self._vec_ok(dtype):
            vec_op = False
        if vec_op and all(_scalar_dtype(s) == dtype for s in srcs):
            return self.em.uop(UOps.ALU, dtype.vec(self.vector_width), tuple([self._as_vec(s, dtype) for s in srcs]),
                             op)
        return tuple([self.em.uop(UOps.ALU, dtype, tuple([self._lane_of(s, i) for s in srcs]), op)
                      for i in range(self.vector_width)])


def _scalar_dtype(v):
    if isinstance(v, tuple):
        return v[0].dtype
    return v.dtype.scalar() if v.dtype.count > 1 else v.dtype
