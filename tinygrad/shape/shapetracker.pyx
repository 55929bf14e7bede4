"""ShapeTracker: a stack of Views describing how a (lazy) tensor reads its buffer.

Movement ops rewrite the last view.  When the last view cannot express a reshape, a fresh contiguous view goes on
top: its indices then address the elements of the view below in row-major order.  Indexing walks the stack from
the top down, unravelling the flat index of each view into the shape of the one below.
"""
from tinygrad.shape.symbolic import MulNode, Node, NumNode, SumNode, Variable

from tinygrad.shape.view cimport View, create_view, strides_for_shape


cdef object _norm(object x):
    """A plain int for constants, the Node otherwise."""
    if type(x) is int:
        return x
    if isinstance(x, Node) and x.min == x.max:
        return int(x.min)
    return x


cdef inline object _hi(object x):
    return x if type(x) is int else x.max


cdef inline object _lo(object x):
    return x if type(x) is int else x.min


cdef inline object _as_node(object x):
    return x if isinstance(x, Node) else NumNode(x)


cdef bint _has_zero(tuple shape) noexcept:
    for s in shape:
        if type(s) is int and <object>s == 0:
            return True
    return False


cdef object _prod(tuple xs):
    cdef object acc = 1
    for x in xs:
        acc = _norm(acc * x)
    return acc


cdef list _default_idxs(tuple shape):
    """One index Variable per dim, idx{d} ranging over the dim (a symbolic dim at its upper bound)."""
    return [Variable(f"idx{d}", 0, _hi(shape[d]) - 1) for d in range(len(shape))]


cdef tuple _view_expr(View v, list idxs, object valid):
    """(buffer index, validity) of view `v` at per-dim indices `idxs`; validity is AND-ed onto `valid`."""
    cdef Py_ssize_t n = len(v.shape), d
    cdef list terms = []
    cdef list conds = [] if valid is None else [valid]
    if not (type(v.offset) is int and v.offset == 0):
        terms.append(_as_node(v.offset))
    for d in range(n):
        s, st = v.shape[d], v.strides[d]
        if (type(s) is int and s == 1) or (type(st) is int and st == 0):
            continue
        terms.append(idxs[d] * st)
    if v.mask is not None:
        for d in range(n):
            b, e = v.mask[d]
            x = idxs[d]
            # conditions the index range already guarantees would only clutter the expression
            if _hi(b) > _lo(x):
                conds.append(x >= b)
            if _lo(e) <= _hi(x):
                conds.append(x < e)
    idx = Node.sum(terms) if terms else NumNode(0)
    return idx, (Node.ands(conds) if conds else NumNode(1))


cdef list _unravel(tuple shape, object idx):
    """Per-dim indices (idx // place) % dim of a flat index over `shape`.  A symbolic outermost dim skips the
    modulo: wherever the flat index is valid it is already in range, and symbolic moduli do not simplify."""
    cdef Py_ssize_t n = len(shape), d
    cdef list out = [None] * n
    cdef object acc = 1
    for d in range(n - 1, -1, -1):
        s = shape[d]
        if type(s) is int and s == 1:
            out[d] = NumNode(0)
            continue
        q = idx if (type(acc) is int and acc == 1) else idx // acc
        out[d] = q if (d == 0 and type(s) is not int) else q % s
        acc = _norm(acc * s)
    return out


cdef tuple _expr_idxs(tuple views, list idxs):
    cdef Py_ssize_t i = len(views) - 1
    cdef View v = views[i]
    idx, valid = _view_expr(v, idxs, None)
    while i > 0:
        if valid.max == 0:
            break
        i -= 1
        v = (<View>views[i]).minify()
        idx, valid = _view_expr(v, _unravel(v.shape, idx), valid)
    if valid.max == 0:
        # nothing is valid, so any index will do; 0 keeps a careless reader in bounds
        return NumNode(0), valid
    return idx, valid


cdef class ShapeTracker:
    """A stack of Views; the buffer index of an element is found by reading the views from the last to the first.

    Immutable: every movement op returns a new ShapeTracker.
    """

    def __init__(self, views):
        views = tuple(views)
        if not views:
            raise ValueError("ShapeTracker needs at least one View")
        for v in views:
            if not isinstance(v, View):
                raise ValueError(f"ShapeTracker views must be Views, got {v!r}")
        self.views = views
        self._hash = None
        self._default_expr = None

    @staticmethod
    def from_shape(shape):
        """A tracker reading a contiguous buffer of `shape`."""
        return ShapeTracker((create_view(shape),))

    def __reduce__(self):
        return ShapeTracker, (self.views,)

    def __repr__(self):
        return f"ShapeTracker(views={self.views!r})"

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(self.views)
        return self._hash

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, ShapeTracker):
            return NotImplemented
        return self.views == (<ShapeTracker>other).views

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    # -- properties ----------------------------------------------------------------------------------------------

    @property
    def shape(self):
        """The logical shape (of the last view)."""
        return (<View>self.views[len(self.views) - 1]).shape

    @property
    def size(self):
        """Number of elements; symbolic dims count at their upper bound."""
        return (<View>self.views[len(self.views) - 1]).size()

    @property
    def contiguous(self):
        """True when the tracker reads the buffer in order from 0: one contiguous view."""
        return len(self.views) == 1 and (<View>self.views[0]).contiguous

    @property
    def consecutive(self):
        """True when the tracker reads a consecutive run of the buffer in order (any offset)."""
        if len(self.views) != 1:
            return False
        cdef View v = self.views[0]
        return v.mask is None and v.strides == strides_for_shape(v.shape)

    @property
    def var_vals(self):
        """{unbound Variable: value} for every bound Variable in the tracker."""
        return self.unbind()[1]

    def vars(self):
        """The set of Variables appearing in any view."""
        out = set()
        for v in self.views:
            out.update(v.vars())
        return out

    def unbind(self):
        """(this tracker with bound Variables unbound, {unbound Variable: value})."""
        cdef dict values = {}
        cdef list views = []
        changed = False
        for v in self.views:
            uv, vals = v.unbind()
            for k, val in vals.items():
                if k in values and values[k] != val:
                    raise ValueError(f"variable {k.expr} is bound to both {values[k]} and {val}")
                values[k] = val
            changed = changed or uv is not v
            views.append(uv)
        return (ShapeTracker(tuple(views)) if changed else self), values

    def bind(self, dict var_vals):
        """This tracker with each Variable in `var_vals` bound to its value there (the inverse of unbind)."""
        return ShapeTracker(tuple([v.bind(var_vals) for v in self.views]))

    # -- movement ops --------------------------------------------------------------------------------------------

    cdef ShapeTracker _with_last(self, View v):
        cdef Py_ssize_t n = len(self.views)
        return ShapeTracker(self.views[:n - 1] + (v,))

    cpdef ShapeTracker permute(self, object axis):
        """Reorder dims (see View.permute)."""
        return self._with_last((<View>self.views[len(self.views) - 1]).permute(axis))

    cpdef ShapeTracker expand(self, object new_shape):
        """Broadcast size-1 dims (see View.expand)."""
        return self._with_last((<View>self.views[len(self.views) - 1]).expand(new_shape))

    cpdef ShapeTracker pad(self, object arg):
        """Add (before, after) padding per dim (see View.pad)."""
        return self._with_last((<View>self.views[len(self.views) - 1]).pad(arg))

    cpdef ShapeTracker shrink(self, object arg):
        """Keep [start, end) per dim (see View.shrink)."""
        return self._with_last((<View>self.views[len(self.views) - 1]).shrink(arg))

    cpdef ShapeTracker stride(self, object mul):
        """Step through each dim by mul[d] (see View.stride)."""
        return self._with_last((<View>self.views[len(self.views) - 1]).stride(mul))

    cpdef ShapeTracker reshape(self, object new_shape):
        """Reshape the last view, or stack a contiguous view of `new_shape` on top when it cannot be expressed."""
        cdef View last = self.views[len(self.views) - 1]
        sub = _concretizing(last.shape, new_shape)
        if sub:
            # each symbolic dim becomes the value its variables are bound to: the same views, made concrete
            return ShapeTracker(tuple([v.substitute(sub) for v in self.views]))
        cdef View nv = last.reshape(new_shape)
        if nv is not None:
            return self._with_last(nv)
        return ShapeTracker(self.views + (create_view(new_shape),))

    def reduce(self, axis):
        """The shape after reducing `axis` to size 1."""
        return tuple([1 if i in axis else s for i, s in enumerate(self.shape)])

    cpdef ShapeTracker simplify(self):
        """Merge adjacent views wherever one view can express both, preferring the top of the stack."""
        cdef list views = list(self.views)
        cdef Py_ssize_t i
        cdef View merged
        cdef bint progress = True
        while progress and len(views) >= 2:
            progress = False
            for i in range(len(views) - 2, -1, -1):
                merged = (<View>views[i]).compose(<View>views[i + 1])
                if merged is not None:
                    views[i:i + 2] = [merged]
                    progress = True
                    break
        if len(views) == len(self.views):
            return self
        return ShapeTracker(tuple(views))

    def __add__(self, other):
        """self + other: index this tracker's shape with `other` (whose first view addresses our elements)."""
        if not isinstance(other, ShapeTracker):
            return NotImplemented
        cdef ShapeTracker ret = self
        ours = self.vars()
        if ours and not (<ShapeTracker>other).vars() and all(v._val is not None for v in ours):
            # a concrete view of a symbolic one (a symbolic result reshaped to its bound sizes): index math with
            # symbolic divisors can't be simplified, so make our views concrete at the bound values first
            sub = {v: NumNode(v._val) for v in ours}
            ret = ShapeTracker(tuple([v.substitute(sub) for v in self.views]))
        for v in (<ShapeTracker>other).views:
            ret = ShapeTracker(ret.views + (v,)).simplify()
        return ret

    # -- indexing ------------------------------------------------------------------------------------------------

    def expr_idxs(self, idxs=None):
        """(buffer index, validity) as Nodes for per-dim indices `idxs` (default: Variables idx0, idx1, ...).

        Where validity is provably 0 the index is meaningless and returned as 0."""
        cdef tuple shape = self.shape
        if idxs is None:
            if self._default_expr is not None:
                return self._default_expr
            if _has_zero(shape):
                ret = (NumNode(0), NumNode(0))
            else:
                ret = _expr_idxs(self.views, _default_idxs(shape))
            self._default_expr = ret
            return ret
        cdef list ix = [_as_node(x) for x in idxs]
        if len(ix) != len(shape):
            raise ValueError(f"expr_idxs: got {len(ix)} indices for shape {shape}")
        if _has_zero(shape):
            return NumNode(0), NumNode(0)
        return _expr_idxs(self.views, ix)

    def expr_node(self, idx="idx"):
        """(buffer index, validity) for one flat row-major index over the shape (a Node, or a Variable name)."""
        cdef tuple shape = self.shape
        if _has_zero(shape):
            return NumNode(0), NumNode(0)
        if isinstance(idx, str):
            idx = Variable(idx, 0, _hi(_prod(shape)) - 1)
        return self.expr_idxs(_unravel(shape, _as_node(idx)))

    def real_strides(self, ignore_valid=False):
        """Per dim, the stride s when the buffer index is s*idx_d plus terms free of idx_d, else None.

        A dim that appears in the validity condition has no real stride unless ignore_valid is set."""
        cdef View last = self.views[len(self.views) - 1]
        cdef Py_ssize_t n = len(last.shape), d
        if len(self.views) == 1:
            if last.mask is None or ignore_valid:
                return last.strides
            return tuple(None if not (b == 0 and e == last.shape[d]) else last.strides[d]
                         for d, (b, e) in enumerate(last.mask))
        if _has_zero(last.shape):
            return (0,) * n
        idxs = _default_idxs(last.shape)
        cdef dict pos = {idxs[d]: d for d in range(n)}
        idx, valid = self.expr_idxs(idxs)
        cdef list ret = [None] * n
        bad = set()
        terms = idx.nodes if isinstance(idx, SumNode) else (idx,)
        for t in terms:
            if t.min == t.max:
                continue
            if isinstance(t, MulNode) and t.a in pos and not (isinstance(t.b, Node) and (t.b.vars() & pos.keys())):
                var, st = t.a, t.b
            elif isinstance(t, MulNode) and isinstance(t.b, Node) and t.b in pos and not (t.a.vars() & pos.keys()):
                # a symbolic stride may sort before the index in a product of two Nodes
                var, st = t.b, t.a
            elif t in pos:
                var, st = t, 1
            else:
                bad.update(t.vars())
                continue
            if ret[pos[var]] is not None:
                # the same index twice outside one term: not a plain stride
                bad.add(var)
            ret[pos[var]] = st
        idx_vars = idx.vars()
        valid_vars = valid.vars()
        for d in range(n):
            var = idxs[d]
            if var in bad or (not ignore_valid and var in valid_vars):
                ret[d] = None
            elif var not in idx_vars:
                ret[d] = 0
        return tuple(ret)

    def unit_stride_axes(self, ignore_valid=False):
        """Dims whose real stride is 1."""
        return [d for d, st in enumerate(self.real_strides(ignore_valid)) if type(st) is int and st == 1]

    def axis_is_masked(self, axis):
        """True when the validity condition depends on dim `axis`."""
        _, valid = self.expr_idxs()
        name = f"idx{axis}"
        return any([v.expr == name for v in valid.vars()])

    def real_size(self):
        """1 + the largest buffer index any valid element reads (a sound upper bound); 0 when nothing is read."""
        cdef View v = self.views[len(self.views) - 1]
        cdef Py_ssize_t d
        if _has_zero(v.shape):
            return 0
        if len(self.views) == 1 and v._all_int:
            top = v.offset
            for d in range(len(v.shape)):
                b, e = (0, v.shape[d]) if v.mask is None else v.mask[d]
                if b >= e:
                    return 0
                st = v.strides[d]
                top += st * (e - 1) if st > 0 else st * b
            return max(top + 1, 0)
        idx, valid = self.expr_idxs()
        if valid.max == 0:
            return 0
        return max(_hi(idx) + 1, 0)


cdef dict _concretizing(tuple old, object new):
    """{Variable: value} when `new` is `old` with every symbolic dim replaced by its bound value, else {}."""
    if len(old) != len(new):
        return {}
    cdef dict sub = {}
    for o, n in zip(old, new):
        if isinstance(o, Node) and type(n) is int:
            for v in o.vars():
                if v._val is None:
                    return {}
                sub[v] = NumNode(v._val)
        elif o != n:
            return {}
    if not sub:
        return {}
    for o, n in zip(old, new):
        if isinstance(o, Node) and _as_int(o.substitute(sub)) != n:
            return {}
    return sub


cdef object _as_int(object x):
    return x if type(x) is int else (x.b if isinstance(x, NumNode) else None)


# tinygrad 0.9 code imports View from here (`from tinygrad.shape.shapetracker import ShapeTracker, View`); a cimported
# class is not a module attribute by itself
globals()["View"] = View
