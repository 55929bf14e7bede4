# Declarations of ShapeTracker, so the scheduler and linearizer can cimport it and reach its fields directly.
from tinygrad.shape.view cimport View


cdef class ShapeTracker:
    # the stack of views, first applied to the buffer first; the last one's shape is the tracker's shape
    cdef readonly tuple views
    # structural hash, computed on first use (trackers are immutable)
    cdef object _hash
    # (idx, valid) for the default index Variables, computed on first use
    cdef object _default_expr

    cdef ShapeTracker _with_last(self, View v)
    cpdef ShapeTracker permute(self, object axis)
    cpdef ShapeTracker expand(self, object new_shape)
    cpdef ShapeTracker pad(self, object arg)
    cpdef ShapeTracker shrink(self, object arg)
    cpdef ShapeTracker stride(self, object mul)
    cpdef ShapeTracker reshape(self, object new_shape)
    cpdef ShapeTracker simplify(self)
