cdef class ScheduleItem:
    cdef readonly tuple ast
    cdef readonly tuple bufs
    cdef readonly int n_outputs
    # the LazyBuffers this item realizes, so running it can mark them done and drop their graph
    cdef readonly tuple lbs
