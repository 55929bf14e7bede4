cdef class Linearizer:
    cdef readonly tuple ast
    cdef readonly object opts
    cdef public list uops
    cdef public object global_size
    cdef public object local_size
    cdef public list vars
    cdef public list applied_opts
    cdef readonly object reduceop
    cdef readonly tuple output_shape
    cdef readonly tuple full_shape
    cdef public str name
    cdef public dict buf_uops
    # CSE table and the keys made in each open loop scope
    cdef dict _cse
    cdef list _scope
    cdef dict _var_uops
    cdef list _loop_vars
    cdef list _out_idxs

    cdef object _uop(self, object uop, object dtype, tuple vin, object arg, bint cachable=*)
    cdef object _const(self, object val, object dtype)
    cdef void _open_scope(self)
    cdef void _close_scope(self)
    cdef object _lower_node(self, object node)
    cdef object _alu(self, object op, object dtype, tuple vin)
    cdef object _loop(self, int axis)
    cdef object _lower_reduce(self, list reduce_axes)
    cdef dict _dtypes_of(self, object root)
    cdef object _lower_ast(self, object root, list idxs, object acc_val)
    cdef object _lower_leaf(self, object op, list idxs)
