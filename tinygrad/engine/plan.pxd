# Declarations of the schedule-plan cache (plan.pyx).

cdef class PlanItem:
    # the runner (compiled kernel, copy, allocation) and, per buffer, where it comes from: >= 0 is the index of an
    # unrealized node of the graph, < 0 is -(leaf index + 1), a realized buffer the graph reads
    cdef readonly object runner
    cdef readonly object ast
    cdef readonly tuple buf_refs
    cdef readonly int n_outputs
    # the nodes this item realizes (their graph is dropped after it runs)
    cdef readonly tuple lb_refs
    # `launch(*raw buffers)`, or None: run through `runner(bufs, var_vals)`
    cdef readonly object launch


cdef class Plan:
    cdef readonly tuple items
    cdef readonly int n_kernels
    # operations and bytes of buffers its kernels run over, added to GlobalCounters at each run
    cdef readonly object n_ops
    cdef readonly object n_mem
    # per item, the nodes no later item names: the run lets go of them once it has run (see _last_uses)
    cdef readonly tuple drops
    # the nodes no item names (fused into a kernel, or views): let go of before the first item
    cdef readonly tuple unused
