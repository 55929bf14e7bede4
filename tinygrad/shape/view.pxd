# Declarations of View, so shapetracker.pyx can cimport it and reach its fields and cpdef methods directly.

cdef class View:
    # the logical shape; ints, or Nodes for symbolic dims
    cdef readonly tuple shape
    # element strides into the flat buffer, 0 for size-1 and broadcast dims
    cdef readonly tuple strides
    # buffer index of element (0, ..., 0); an int or a Node
    cdef readonly object offset
    # None, or one (start, end) pair per dim: only indices inside the box are valid
    cdef readonly object mask
    cdef readonly bint contiguous
    # structural hash, computed on first use (views are immutable)
    cdef object _hash
    # the minified form, computed on first use
    cdef object _minified
    # every field a plain int, so the view can key the memo caches
    cdef bint _all_int

    cpdef View permute(self, object axis)
    cpdef View expand(self, object new_shape)
    cpdef View pad(self, object arg)
    cpdef View shrink(self, object arg)
    cpdef View stride(self, object mul)
    cpdef View reshape(self, object new_shape)
    cpdef View minify(self)
    cpdef View compose(self, View other)


cpdef View create_view(object shape, object strides=*, object offset=*, object mask=*)
cpdef tuple strides_for_shape(object shape)
