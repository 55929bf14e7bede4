# Declarations of the symbolic integer algebra, so view.pyx and shapetracker.pyx can cimport the
# node classes and reach their fields and cpdef methods without going through Python attribute lookup.

cdef class Node:
    # inclusive, sound bounds; Python ints so huge products never overflow
    cdef readonly object min
    cdef readonly object max
    # structural hash, computed on first use (nodes are immutable)
    cdef object _hash

    cpdef object render(self, object ops=*, object ctx=*)
    cpdef Node substitute(self, object var_vals)


cdef class NumNode(Node):
    cdef readonly object b


cdef class Variable(Node):
    cdef readonly str expr
    # the bound value, or None; not part of equality or hashing
    cdef readonly object _val


cdef class OpNode(Node):
    cdef readonly Node a
    # a Python int, or a Node (MulNode of two symbolic factors, LtNode against a symbolic bound)
    cdef readonly object b


cdef class MulNode(OpNode):
    pass


cdef class DivNode(OpNode):
    pass


cdef class ModNode(OpNode):
    pass


cdef class LtNode(OpNode):
    pass


cdef class RedNode(Node):
    cdef readonly tuple nodes


cdef class SumNode(RedNode):
    pass


cdef class AndNode(RedNode):
    pass


cpdef object sym_infer(object a, object var_vals)
cpdef Node create_lt_node(object lhs, object b)
cpdef Node create_ge_node(object lhs, object b)
