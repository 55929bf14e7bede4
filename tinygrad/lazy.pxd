# Declarations of LazyBuffer, so the scheduler can cimport it and reach its fields without attribute lookups.
from tinygrad.shape.shapetracker cimport ShapeTracker


cdef class LazyBuffer:
    cdef public str device
    # how this node reads its base (for a base: the contiguous tracker of its own shape)
    cdef public ShapeTracker st
    cdef public object dtype
    cdef public tuple shape
    # the element count: an int, or a symbolic Node
    cdef public object size
    # None for a base; the base this view reads otherwise
    cdef public LazyBuffer _base
    # a base's op, its argument and its sources (emptied once it is realized); None/() for views
    cdef public object op
    cdef public object arg
    cdef public tuple srcs
    # a base's Buffer, made at the first read of `buffer` (an op fused into its consumer never needs one) and
    # allocated when its kernel first runs; None for views and constants
    cdef public object _buffer
    # contiguous() on an already-contiguous base: it must get a buffer of its own instead of being fused away
    cdef public bint forced_realize
    # a realized scalar shared by every graph that uses its value (LazyBuffer.scalar): never written, an assign
    # to it replaces it as an assign to a constant does
    cdef public bint shared_const
    # set while an ASSIGN's kernel has not run: its (shared) buffer is allocated but not yet written
    cdef public bint pending
    # realize() was asked of this unrealized constant: it stays an operand of the kernels that read it (the seed's
    # `Tensor(2.0).realize() + Tensor(3.0).realize()` compiles 2 + 3) instead of being folded away
    cdef public bint kept
    # a constant computed by folding ops on constants (not one the program wrote): realize() gives it the buffer
    # that the folded-away kernel would have written (the seed's `(Tensor(2.0) + Tensor(3.0)).realize()` runs one
    # kernel, which stores 5.0)
    cdef public bint folded
    cdef object __weakref__

    cpdef LazyBuffer _view(self, ShapeTracker new_st)
    cpdef LazyBuffer reshape(self, tuple new_shape)
    cpdef LazyBuffer expand(self, tuple new_shape)


cdef LazyBuffer new_base(str device, ShapeTracker st, object dtype, object op, object arg, tuple srcs)
