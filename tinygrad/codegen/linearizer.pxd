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
    cdef readonly tuple reduce_axes
    # per dim of the full shape: how many consecutive indices one loop step covers (vector lanes included)
    cdef readonly list upcasts
    # the output dims' loops, outermost first (None: chosen by linearize)
    cdef public object loop_order
    # how many threads the outermost output loop is split across (1: none)
    cdef public int threads
    # THREAD: the output dim whose loop is split across `threads` (-1: none, or chosen by linearize)
    cdef readonly int thread_axis
    # the output dims map to the GPU's grid (SPECIAL uops) instead of loops; LOCAL opts by dim
    cdef public bint gpu
    cdef readonly dict local_dims
    # GROUP: the reduced dim whose steps are split across `group` threads of a block (-1: none)
    cdef readonly int group_axis
    cdef readonly int group
    # GROUPTOP: each of the group's threads takes a run of consecutive steps (GROUP: every group-th step)
    cdef readonly bint group_top
    # NOLOCALS: blocks of one thread
    cdef readonly bint no_locals
    # the threads' position in the block and the store gate of a grouped kernel (None otherwise)
    cdef object _group_idx
    cdef object _base_id
    cdef object _thread_id
    cdef object _gate
    cdef int _block_threads
    # TC: the tensor-core plan (codegen/tensor_cores.TCPlan; None: none), and per tiled dim the offset of each copy
    cdef readonly object tc
    cdef dict _tc_offsets
    # dims whose loop runs past their size (a tile's partial end, PADTO) -> the size: loads read 0 and stores skip there
    cdef dict _dim_limits
    cdef dict _tc_bases
    cdef readonly int vector_axis
    cdef readonly int vector_width
    # id(LazyOp) -> the dims of the full shape its value varies along
    cdef readonly dict op_dims
    # id(LazyOp) -> the dtype of its value
    cdef readonly dict op_dtypes
    cdef public str name
    cdef public dict buf_uops
    cdef bint _decided
    cdef object _lane
    # CSE table and the keys made in each open loop scope
    cdef dict _cse
    cdef list _scope
    cdef dict _var_uops
    cdef list _loop_vars
    cdef dict _topos

    cdef object _uop(self, object uop, object dtype, tuple vin, object arg, bint cachable=*)
    cdef object _const(self, object val, object dtype)
    cdef void _open_scope(self)
    cdef void _close_scope(self)
    cdef object _lower_node(self, object node)
    cdef object _alu(self, object op, object dtype, tuple vin)
    cdef object _loop(self, int axis, int threads=*)
    cdef void _bind_loop_var(self, int axis, object lp, object steps)
    cdef object _steps(self, int axis)
    cdef list _blocked_loop(self, int axis, tuple sizes, list levels, object dtype, object start)
    cdef object _new_accs(self, dict like, object dtype, object start)
    cdef bint _flat_gpu(self)
    cdef void _grid_indices(self, list global_axes)
    cdef list _combos(self, list axes)
    cdef int _copies(self, int d)
    cdef list _idx_nodes(self, tuple combo, bint post)
    cdef bint _vec_ok(self, object dtype)
    cdef bint _vec_load_ok(self, object dtype)
    cdef object _cast_any(self, object kind, object dtype, object src)
    cdef object _as_vec(self, object v, object dtype)
    cdef object _lane_of(self, object v, int lane)
    cdef object _alu_any(self, object op, object dtype, tuple srcs)
    cdef object _lower_reduce(self, list global_axes, list gcombos)
    cdef object _accumulate(self, object cur, object val, object op, object dtype, object loop)
    cdef object _horizontal(self, object acc, object op, object dtype)
    cdef object _group_combine(self, object acc, object op, object dtype)
    cdef object _gated(self, object valid)
    cdef object _lower_ast(self, object root, tuple combo, bint post, object red, dict memo)
    cdef object _lower_leaf(self, object op, tuple combo, bint post)
    cdef object _leaf_scalar(self, object op, object idx, object valid)
    cdef void _store(self, object mb, tuple combo, object val)
    cdef void _lower_loops(self)
    cdef object _lower_tc(self)
    cdef tuple _tc_step(self, object step, int ktiles, str tag)
    cdef object _tc_b_floats(self, object smem, object base, object n, object k)
    cdef list _tc_nodes(self, int rows_axis, object r, object k, dict outer_at)
    cdef list _tc_copy_spread(self, object op, int rows_axis, int rows, object row0, tuple at, object gate)
    cdef object _tc_elem_at(self, object r, object k, int rows, bint layout_k)
    cdef bint _tc_store_pair(self, tuple g, int n_ax, tuple red, dict memo)
    cdef list _tc_copy(self, object op, int rows_axis, int rows, object row0, tuple at, object gate, bint asy)
    cdef object _tc_cond(self, object valid, object gate)
    cdef object _limits_valid(self, object valid, list nodes)
    cdef object _apply_opt(self, object opt)
    cdef bint _pads_to_zero(self, int axis)
    cdef object _tc_at(self, object r, object k, int rows, bint k_major)
    cdef object _tc_lane_frag(self, object smem, object base, object r, int kk, int rows, bint k_major)
    cdef object _tc_sg_frag(self, object smem, object base, object r0, int kk, int rows, bint k_major, bint is_b)
    cdef void _tc_stage(self, list chunks, object smem, object base, bint layout_k)
