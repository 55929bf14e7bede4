"""Views: one affine map from an N-d index to a flat buffer index, with an optional box of valid indices.

A View says how a tensor of `shape` reads a flat buffer: element `i` (one index per dim) lives at
`offset + sum(i[d] * strides[d])`, and exists at all (otherwise it reads as padding) only when
`mask[d][0] <= i[d] < mask[d][1]` for every dim.  permute/expand/pad/shrink/stride always give a View again;
reshape and composition of two Views sometimes cannot, and then return None so the caller stacks views.

Shapes, strides, offsets and mask bounds are plain ints whenever they are constant and symbolic Nodes only when
they really depend on a Variable.
"""
import operator

from tinygrad.errors import ArgumentError
from tinygrad.shape.symbolic import Node, Variable, sym_infer

# Memo caches for the expensive pure functions, keyed by all-int views only: Views holding Variables compare
# equal regardless of the value a Variable is bound to, so a cached answer could carry the wrong binding.
cdef dict _reshape_cache = {}
cdef dict _compose_cache = {}
cdef Py_ssize_t _CACHE_LIMIT = 1 << 16


# ---------------------------------------------------------------------------------------------------------------
# sint helpers: every result goes through _norm so constants never stay wrapped in a NumNode

cdef inline bint _isint(object x) noexcept:
    return type(x) is int


cdef object _norm(object x):
    """Return x as a plain int when it is constant, else the symbolic Node itself."""
    if type(x) is int:
        return x
    if isinstance(x, Node):
        if x.min == x.max:
            return int(x.min)
        return x
    # numpy integers and friends; floats raise TypeError here
    return operator.index(x)


cdef object _arg(object x, str what, object arg):
    """_norm for user input: wrong types become a ValueError that names the offending argument."""
    try:
        return _norm(x)
    except TypeError:
        raise ArgumentError(f"{what}: {arg!r} holds {x!r}, which is not an int or a symbolic Node") from None


cdef inline object _add(object a, object b):
    if type(a) is int and type(b) is int:
        return a + b
    return _norm(a + b)


cdef inline object _sub(object a, object b):
    if type(a) is int and type(b) is int:
        return a - b
    return _norm(a - b)


cdef inline object _mul(object a, object b):
    if type(a) is int and type(b) is int:
        return a * b
    return _norm(a * b)


cdef inline object _lo(object x):
    """Lower bound of an int or Node."""
    return x if type(x) is int else x.min


cdef inline object _hi(object x):
    """Upper bound (inclusive) of an int or Node."""
    return x if type(x) is int else x.max


cdef object _smax(object a, object b):
    """max() of two sints; raises ValueError when the bounds of symbolic operands cannot decide it."""
    if type(a) is int and type(b) is int:
        return a if a >= b else b
    d = _sub(a, b)
    if _lo(d) >= 0:
        return a
    if _hi(d) <= 0:
        return b
    raise ArgumentError(f"cannot decide max({a}, {b}) for symbolic values")


cdef bint _ordered(object a, object b):
    """Whether the bounds of two sints decide which is the larger (so _smax and _smin of them can't fail)."""
    if type(a) is int and type(b) is int:
        return True
    d = _sub(a, b)
    return _lo(d) >= 0 or _hi(d) <= 0


cdef object _smin(object a, object b):
    """min() of two sints; raises ValueError when the bounds of symbolic operands cannot decide it."""
    if type(a) is int and type(b) is int:
        return a if a <= b else b
    d = _sub(a, b)
    if _hi(d) <= 0:
        return a
    if _lo(d) >= 0:
        return b
    raise ArgumentError(f"cannot decide min({a}, {b}) for symbolic values")


cdef bint _fits_when_bound(object b, object e, object s) except -1:
    """Whether 0 <= b <= e <= s at the values the Variables in them are bound to (False where one is unbound). A
    span that leaves its dim for other values of its variables is what tinygrad 0.9 allowed (a KV cache's
    `(start_pos, start_pos + 1)`, whose variable ranges over the whole cache, or its padding to the cache's length,
    `max_context - start_pos - seqlen`); each value it is bound to is checked where a view is made at it. (A pad
    (b, a) is checked as 0 <= b <= b + a.)"""
    try:
        bv, ev, sv = sym_infer(b, {}), sym_infer(e, {}), sym_infer(s, {})
    except ValueError:
        return False
    return 0 <= bv <= ev <= sv


cdef object _prod(object xs):
    cdef object acc = 1
    for x in xs:
        acc = _mul(acc, x)
    return acc


cdef bint _all_int(tuple xs) noexcept:
    for x in xs:
        if type(x) is not int:
            return False
    return True


cdef bint _has_zero(tuple shape) noexcept:
    for s in shape:
        if type(s) is int and <object>s == 0:
            return True
    return False


cdef bint _mask_empty(tuple mask) except -1:
    """True when some dim of an int mask has no valid index (the whole view is padding)."""
    for b, e in mask:
        if type(b) is int and type(e) is int and b >= e:
            return True
    return False


cdef inline object _ceildiv(object a, object b):
    # exact for either sign of b, unlike (a + b - 1) // b
    return -((-a) // b)


cdef list _unravel(tuple shape, object flat):
    """Mixed-radix digits of an int `flat` over an int shape; the first dim absorbs any overflow so that
    sum(digit[d] * place[d]) == flat holds for every int, in range or not."""
    cdef Py_ssize_t n = len(shape), d
    cdef list out = [0] * n
    if n == 0:
        return out
    for d in range(n - 1, 0, -1):
        s = shape[d]
        out[d] = flat % s
        flat = flat // s
    out[0] = flat
    return out


cdef tuple _as_shape(object shape, str what):
    """A shape argument as a tuple of non-negative sints."""
    try:
        items = tuple(shape)
    except TypeError:
        raise ArgumentError(f"{what}: shape {shape!r} is not a sequence") from None
    cdef list out = []
    for s in items:
        s = _arg(s, what, shape)
        if type(s) is int and s < 0:
            raise ArgumentError(f"{what}: shape {shape!r} has a negative dim")
        out.append(s)
    return tuple(out)


cdef tuple _as_pairs(object arg, Py_ssize_t n, str what, tuple shape):
    """A per-dim (a, b) argument (pad/shrink/mask) as a tuple of pairs of sints, one per dim."""
    try:
        items = tuple(arg)
    except TypeError:
        raise ArgumentError(f"{what}: {arg!r} is not a sequence of pairs") from None
    if len(items) != n:
        raise ArgumentError(f"{what}: {arg!r} has {len(items)} entries for shape {shape} with {n} dims")
    cdef list out = []
    for p in items:
        try:
            a, b = p
        except (TypeError, ValueError):
            raise ArgumentError(f"{what}: {arg!r} for shape {shape} must hold one pair per dim") from None
        out.append((_arg(a, what, arg), _arg(b, what, arg)))
    return tuple(out)


cpdef tuple strides_for_shape(object shape):
    """C-contiguous (row-major) strides for `shape`, with stride 0 for every dim of size 1."""
    cdef tuple shp = tuple(shape)
    cdef Py_ssize_t n = len(shp), d
    cdef list out = [0] * n
    cdef object acc = 1
    for d in range(n - 1, -1, -1):
        s = shp[d]
        out[d] = 0 if (type(s) is int and <object>s == 1) else acc
        acc = _mul(acc, s)
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------------
# construction

cdef View _raw(tuple shape, tuple strides, object offset, object mask, bint contiguous):
    """Build a View from fields that are already canonical."""
    cdef View v = View.__new__(View)
    v.shape = shape
    v.strides = strides
    v.offset = offset
    v.mask = mask
    v.contiguous = contiguous
    v._hash = None
    v._minified = None
    v._all_int = (type(offset) is int and _all_int(shape) and _all_int(strides)
                  and (mask is None or all([type(b) is int and type(e) is int for b, e in mask])))
    return v


cdef View _invalid(tuple shape):
    """The canonical all-padding view of `shape`; None for a 0-d shape, which has no mask to say so with."""
    cdef Py_ssize_t n = len(shape)
    if n == 0:
        return None
    if _has_zero(shape):
        return _create(shape, None, 0, None)
    return _raw(shape, (0,) * n, 0, ((0, 0),) * n, False)


cdef View _create(tuple shape, object strides, object offset, object mask):
    """Canonicalise and build.  `shape`, `strides` and mask bounds must already be normalised sints."""
    cdef Py_ssize_t n = len(shape), d
    cdef list st
    cdef bint full
    if _has_zero(shape):
        # nothing to address: every empty view is the same view
        return _raw(shape, (0,) * n, 0, None, True)
    if strides is None:
        st = list(strides_for_shape(shape))
    else:
        st = list(strides)
        for d in range(n):
            s = shape[d]
            if type(s) is int and <object>s == 1:
                st[d] = 0
    if mask is not None:
        mask = tuple(mask)
        if _mask_empty(mask):
            return _raw(shape, (0,) * n, 0, ((0, 0),) * n, False)
        full = True
        for d in range(n):
            b, e = mask[d]
            if not (b == 0 and e == shape[d]):
                full = False
                break
        if full:
            mask = None
        else:
            # A dim with exactly one valid index reads only that index: fold its stride into the offset so the
            # view merges with neighbours as if the dim were broadcast.
            for d in range(n):
                b, e = mask[d]
                if type(b) is int and type(e) is int and e - b == 1 and not (type(st[d]) is int and st[d] == 0):
                    offset = _add(offset, _mul(b, st[d]))
                    st[d] = 0
    cdef tuple strides_t = tuple(st)
    cdef bint contiguous = mask is None and type(offset) is int and offset == 0 and \
        strides_t == strides_for_shape(shape)
    return _raw(shape, strides_t, offset, mask, contiguous)


cpdef View create_view(object shape, object strides=None, object offset=0, object mask=None):
    """View.create as a module-level function (also reachable by cimport)."""
    cdef tuple shp = _as_shape(shape, "View.create")
    cdef Py_ssize_t n = len(shp)
    if strides is not None:
        strides = tuple([_arg(s, "View.create", strides) for s in strides])
        if len(strides) != n:
            raise ArgumentError(f"View.create: strides {strides} do not match shape {shp}")
    if mask is not None:
        mask = _as_pairs(mask, n, "View.create mask", shp)
    return _create(shp, strides, _arg(offset, "View.create", offset), mask)


# ---------------------------------------------------------------------------------------------------------------
# reshape: split old and new shapes into chunks whose sizes agree, then merge each old chunk into one linear dim
# and split that dim into the new chunk's dims

cdef tuple _merge_chunk(list dims):
    """Merge a run of old dims, given inner to outer as (size, stride, mask_start, mask_end), into one linear dim.

    Returns (size, stride, valid_start, valid_end, offset_correction) or None.  The valid region must be one
    interval of the merged index: inner dims full, then one partial dim, then outer dims with a single valid
    index each.  Dims with a single valid index may have any stride; the difference goes into the offset.
    """
    cdef object place = 1, stride = None, start = 0, end = 1
    cdef bint fixed = False
    cdef list singles = []
    for s, t, b, e in dims:
        if not (type(s) is int and type(b) is int and type(e) is int):
            return None
        w = e - b
        if w == s:
            if fixed:
                return None
            if stride is None:
                stride = t
            elif not (_mul(stride, place) == t):
                return None
            start, end = 0, place * s
        elif fixed or w == 1:
            if fixed and w != 1:
                return None
            singles.append((place, t, b))
            start, end = start + b * place, end + b * place
            fixed = True
        else:
            # the one partial dim: everything inside it is full, so its valid interval is [b, e) * place
            if stride is None:
                stride = t
            elif not (_mul(stride, place) == t):
                return None
            start, end = b * place, e * place
            fixed = True
        place = place * s
    if stride is None:
        stride = 0
    corr = 0
    for p, t, b in singles:
        corr = _add(corr, _mul(_sub(t, _mul(stride, p)), b))
    return place, stride, start, end, corr


cdef list _split_range(object start, object end, list sizes):
    """The box, one (start, end) per dim given inner to outer, covering exactly [start, end) of the flat index over
    `sizes`; None if that interval is not a box."""
    cdef list out = []
    cdef bint fixed = False
    qb, qe = start, end
    q = 0
    for n in sizes:
        if fixed:
            out.append((q % n, q % n + 1))
            q = q // n
        elif qb % n == 0 and qe % n == 0:
            out.append((0, n))
            qb, qe = qb // n, qe // n
        else:
            if qb // n != (qe - 1) // n:
                return None
            out.append((qb % n, (qe - 1) % n + 1))
            q = qb // n
            fixed = True
    return out


cdef View _reshape(View v, tuple new_shape):
    """General reshape of a non-contiguous, not-all-invalid view with matching size; None when impossible."""
    cdef Py_ssize_t n_old = len(v.shape), n_new = len(new_shape), i, j, d
    cdef list old = []
    cdef list new_idx = []
    cdef object mask = v.mask
    for d in range(n_old):
        s = v.shape[d]
        if type(s) is int and <object>s == 1:
            continue
        if mask is None:
            old.append((s, v.strides[d], 0, s))
        else:
            b, e = mask[d]
            old.append((s, v.strides[d], b, e))
    for d in range(n_new):
        s = new_shape[d]
        if not (type(s) is int and <object>s == 1):
            new_idx.append(d)
    cdef list strides = [0] * n_new
    cdef list new_mask = [(0, s) for s in new_shape]
    cdef object corr = 0
    cdef list chunk_old, chunk_new, sizes, box
    i, j = len(old) - 1, len(new_idx) - 1
    while i >= 0 or j >= 0:
        if i < 0 or j < 0:
            return None
        so, sn = old[i][0], new_shape[new_idx[j]]
        if not (type(so) is int and type(sn) is int):
            # symbolic dims only carry over one-to-one
            if not (so == sn):
                return None
            _, t, b, e = old[i]
            strides[new_idx[j]] = t
            new_mask[new_idx[j]] = (b, e)
            i, j = i - 1, j - 1
            continue
        chunk_old, chunk_new = [old[i]], [new_idx[j]]
        acc_old, acc_new = so, sn
        i, j = i - 1, j - 1
        while acc_old != acc_new:
            if acc_old < acc_new:
                if i < 0 or type(old[i][0]) is not int:
                    return None
                acc_old = acc_old * old[i][0]
                chunk_old.append(old[i])
                i -= 1
            else:
                if j < 0 or type(new_shape[new_idx[j]]) is not int:
                    return None
                acc_new = acc_new * new_shape[new_idx[j]]
                chunk_new.append(new_idx[j])
                j -= 1
        merged = _merge_chunk(chunk_old)
        if merged is None:
            return None
        total, stride, start, end, c = merged
        corr = _add(corr, c)
        place = 1
        for d in chunk_new:
            strides[d] = _mul(stride, place)
            place = place * new_shape[d]
        if not (start == 0 and end == total):
            sizes = [new_shape[d] for d in chunk_new]
            box = _split_range(start, end, sizes)
            if box is None:
                return None
            for k in range(len(chunk_new)):
                new_mask[chunk_new[k]] = box[k]
    return _create(new_shape, tuple(strides), _add(v.offset, corr), None if mask is None else tuple(new_mask))


# ---------------------------------------------------------------------------------------------------------------
# composition: `hi` indexes the elements of `lo`'s shape; find one view doing both

cdef View _compose(View lo, View hi):
    """One View equal to reading `lo` through `hi`, or None when no single view can express it."""
    cdef list pads = []
    cdef int guard
    cdef View result = None
    cdef object step
    for guard in range(16):
        if lo.contiguous:
            result = hi
            break
        if hi.contiguous:
            if hi.shape == lo.shape:
                result = lo
                break
            if _prod(hi.shape) == _prod(lo.shape):
                result = lo.reshape(hi.shape)
                if result is None:
                    return None
                break
        if hi.mask is not None:
            if _mask_empty(hi.mask):
                result = _invalid(hi.shape)
                break
            # a symbolic mask wider than its dim (valid for every value, but not a box inside the shape) can't be
            # shrunk to: the two views stay apart
            for (b, e), sz in zip(hi.mask, hi.shape):
                if _lo(b) < 0 or _lo(_sub(e, b)) < 0 or _lo(_sub(sz, e)) < 0:
                    return None
            # compose the valid box only, then put the padding back around the result
            pads.append(tuple([(b, _sub(s, e)) for (b, e), s in zip(hi.mask, hi.shape)]))
            hi = hi.shrink(hi.mask)
            continue
        if _has_zero(hi.shape):
            result = _create(hi.shape, None, 0, None)
            break
        if lo.mask is not None and _mask_empty(lo.mask):
            result = _invalid(hi.shape)
            if result is None:
                return None
            break
        if not (_all_int(lo.shape) and _all_int(hi.shape) and _all_int(hi.strides) and type(hi.offset) is int):
            result = _match_strides(lo, hi)
            if result is None:
                return None
            break
        step = _project(lo, hi)
        if step is None:
            return None
        kind, val = step
        if kind == "done":
            result = val
            break
        if kind == "invalid":
            result = _invalid(hi.shape)
            if result is None:
                return None
            break
        if kind == "reshape":
            lo = lo.reshape(val)
            if lo is None:
                return None
            continue
        # kind == "mask": part of hi reads lo's padding; mask it off and go again
        hi = _create(hi.shape, hi.strides, hi.offset, val)
    else:
        return None
    if result is None:
        return None
    for p in reversed(pads):
        result = result.pad(p)
    return result


cdef View _match_strides(View lo, View hi):
    """Compose symbolic views without unravelling (a symbolic divisor can't be simplified): when every moving dim of
    unmasked `hi` steps by exactly one dim of `lo`'s row-major strides, and stays inside that dim, hi's index is
    lo's coordinates directly. None otherwise."""
    if not (type(hi.offset) is int and hi.offset == 0):
        return None
    cdef tuple rowmajor = strides_for_shape(lo.shape)
    cdef Py_ssize_t j, nl = len(lo.shape)
    cdef set used = set()
    cdef list strides = [], mask = []
    for st, sz in zip(hi.strides, hi.shape):
        if type(st) is int and st == 0:
            strides.append(0)
            mask.append((0, sz))
            continue
        found = -1
        for j in range(nl):
            if not (type(lo.shape[j]) is int and lo.shape[j] == 1) and j not in used and _same(rowmajor[j], st):
                found = j
                break
        if found < 0 or not _fits(sz, lo.shape[found]):
            return None
        used.add(found)
        strides.append(lo.strides[found])
        mask.append((0, sz) if lo.mask is None else lo.mask[found])
    if lo.mask is not None:
        for j in range(nl):
            # the dims hi never moves stay at coordinate 0, which lo's mask must allow
            b, e = lo.mask[j]
            if j not in used and not (type(b) is int and b == 0 and (type(e) is not int or e > 0)):
                return None
    return _create(hi.shape, tuple(strides), lo.offset, None if lo.mask is None else tuple(mask))


cdef bint _same(object a, object b):
    if type(a) is int or type(b) is int:
        return type(a) is int and type(b) is int and a == b
    return a == b


cdef bint _fits(object size, object limit):
    """Whether a range of `size` stays inside a dim of `limit` (equal symbolic sizes fit)."""
    if type(size) is int and type(limit) is int:
        return size <= limit
    if type(size) is int and size == 1:
        return True
    return size == limit


cdef tuple _project(View lo, View hi):
    """Project unmasked all-int `hi` onto `lo`'s dims.

    hi's flat index is offset + sum(stride_k * i_k).  Unravelling the offset and each offset+stride_k over lo's
    shape gives a linear candidate coordinate per lo dim; where a run of lo dims always stays in its own range the
    candidate is the true mixed-radix digit.  Returns ("done", view), ("reshape", merged lo shape) when those runs
    are wider than one lo dim, ("mask", box) when lo's mask cuts hi's dims down, ("invalid", None), or None.
    """
    cdef tuple lshape = lo.shape, hshape = hi.shape
    cdef Py_ssize_t nl = len(lshape), nh = len(hshape), d, k
    if nl == 0:
        if hi.offset == 0 and all([st == 0 for st in hi.strides]):
            return "done", _create(hshape, (0,) * nh, lo.offset, None)
        return None
    cdef list origin = _unravel(lshape, hi.offset)
    cdef list active = [k for k in range(nh) if hi.strides[k] != 0]
    cdef dict deltas = {}
    for k in active:
        moved = _unravel(lshape, hi.offset + hi.strides[k])
        deltas[k] = [moved[d] - origin[d] for d in range(nl)]
    # group lo dims, inner to outer, until the combined candidate provably stays inside the group's range
    cdef list groups = []
    cdef bint split_needed = False
    cdef Py_ssize_t in_group = 0
    gsize, const = 1, 0
    cdef dict coef = {k: 0 for k in active}
    for d in range(nl - 1, -1, -1):
        s = lshape[d]
        const = const + origin[d] * gsize
        for k in active:
            coef[k] = coef[k] + deltas[k][d] * gsize
        gsize = gsize * s
        in_group += 1
        lo_b = hi_b = const
        for k in active:
            span = coef[k] * (hshape[k] - 1)
            if span < 0:
                lo_b += span
            else:
                hi_b += span
        if lo_b >= 0 and hi_b < gsize:
            if in_group > 1:
                split_needed = True
            groups.append(gsize)
            gsize, const, in_group = 1, 0, 0
            for k in active:
                coef[k] = 0
    if in_group:
        return None
    if split_needed:
        return "reshape", tuple(reversed(groups))
    # every lo dim now reads coordinate origin[d] + sum_k deltas[k][d] * i_k, always inside [0, lshape[d])
    cdef list strides = []
    for k in range(nh):
        acc = 0
        if k in deltas:
            for d in range(nl):
                if deltas[k][d] != 0:
                    acc = _add(acc, _mul(deltas[k][d], lo.strides[d]))
        strides.append(acc)
    offset = lo.offset
    for d in range(nl):
        if origin[d] != 0:
            offset = _add(offset, _mul(origin[d], lo.strides[d]))
    cdef list nb, ne
    cdef bint bad = False
    if lo.mask is not None:
        nb, ne = [0] * nh, list(hshape)
        for d in range(nl):
            b, e = lo.mask[d]
            xmin = xmax = origin[d]
            movers = []
            for k in active:
                c = deltas[k][d]
                if c != 0:
                    movers.append(k)
                    span = c * (hshape[k] - 1)
                    if span < 0:
                        xmin += span
                    else:
                        xmax += span
            if _hi(b) <= xmin and xmax < _lo(e):
                continue
            if not (type(b) is int and type(e) is int):
                bad = True
                continue
            if not movers:
                return "invalid", None
            if len(movers) > 1:
                bad = True
                continue
            k = movers[0]
            c, o = deltas[k][d], origin[d]
            # b <= o + c*i <= e-1, solved for integer i
            if c > 0:
                lo_i, hi_i = _ceildiv(b - o, c), (e - 1 - o) // c
            else:
                lo_i, hi_i = _ceildiv(e - 1 - o, c), (b - o) // c
            if lo_i > nb[k]:
                nb[k] = lo_i
            if hi_i + 1 < ne[k]:
                ne[k] = hi_i + 1
        for k in range(nh):
            if nb[k] >= ne[k]:
                return "invalid", None
        for k in range(nh):
            if nb[k] != 0 or ne[k] != hshape[k]:
                return "mask", tuple(zip(nb, ne))
        if bad:
            return None
    return "done", _create(hshape, tuple(strides), offset, None)


# ---------------------------------------------------------------------------------------------------------------

cdef class View:
    """A strided, offset, optionally masked window onto a flat buffer.  Immutable; build with View.create."""

    def __init__(self, shape, strides, offset, mask, contiguous):
        # Raw constructor (pickling, tests): stores the fields as given.  View.create canonicalises.
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.offset = offset
        self.mask = None if mask is None else tuple([tuple(m) for m in mask])
        self.contiguous = contiguous
        self._hash = None
        self._minified = None
        self._all_int = (type(offset) is int and _all_int(self.shape) and _all_int(self.strides)
                         and (self.mask is None or all([type(b) is int and type(e) is int for b, e in self.mask])))

    @staticmethod
    def create(shape, strides=None, offset=0, mask=None):
        """Build a canonical View: size-1 dims get stride 0, a full mask becomes None, an empty mask makes the
        whole view padding, and a dim with one valid index folds its stride into the offset."""
        return create_view(shape, strides, offset, mask)

    def __reduce__(self):
        return View, (self.shape, self.strides, self.offset, self.mask, self.contiguous)

    def __repr__(self):
        return (f"View(shape={self.shape!r}, strides={self.strides!r}, offset={self.offset!r}, "
                f"mask={self.mask!r}, contiguous={self.contiguous!r})")

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((self.shape, self.strides, self.offset, self.mask, self.contiguous))
        return self._hash

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, View):
            return NotImplemented
        cdef View o = other
        return (self.contiguous == o.contiguous and self.shape == o.shape and self.strides == o.strides
                and self.offset == o.offset and self.mask == o.mask)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def size(self):
        """Number of elements; symbolic dims count at their upper bound so the answer is always an int."""
        cdef object acc = 1
        for s in self.shape:
            acc = acc * (s if type(s) is int else s.max)
        return acc

    def vars(self):
        """The set of Variables appearing anywhere in the view."""
        out = set()
        items = list(self.shape) + list(self.strides) + [self.offset]
        if self.mask is not None:
            for b, e in self.mask:
                items.append(b)
                items.append(e)
        for x in items:
            if isinstance(x, Node):
                out.update(x.vars())
        return out

    def unbind(self):
        """Replace bound Variables by unbound copies; returns (view, {unbound Variable: value})."""
        cdef dict values = {}

        def sub(x):
            if type(x) is int:
                return x
            if isinstance(x, Variable):
                # a Variable unbinds to (itself unbound, its value) rather than (node, {var: value})
                if x._val is None:
                    return x
                uv, val = x.unbind()
                values[uv] = val
                return uv
            node, vals = x.unbind()
            values.update(vals)
            return _norm(node)

        shape = tuple([sub(s) for s in self.shape])
        strides = tuple([sub(s) for s in self.strides])
        offset = sub(self.offset)
        mask = None if self.mask is None else tuple([(sub(b), sub(e)) for b, e in self.mask])
        if not values:
            return self, values
        return _create(shape, strides, offset, mask), values

    def bind(self, dict var_vals):
        """This view with each Variable in `var_vals` bound to its value there (the inverse of unbind)."""
        return self.substitute({v: v.with_value(val) for v, val in var_vals.items()})

    def substitute(self, dict sub):
        """This view with Variables replaced as `sub` says (by bound Variables, other nodes or ints)."""
        def rebind(x):
            return x if type(x) is int else _norm(x.substitute(sub))

        shape = tuple([rebind(s) for s in self.shape])
        strides = tuple([rebind(s) for s in self.strides])
        mask = None if self.mask is None else tuple([(rebind(b), rebind(e)) for b, e in self.mask])
        return _create(shape, strides, rebind(self.offset), mask)

    # -- movement ops ------------------------------------------------------------------------------------------

    cpdef View permute(self, object axis):
        """Reorder dims: dim d of the result is dim axis[d] of this view."""
        cdef Py_ssize_t n = len(self.shape)
        try:
            ax = tuple([operator.index(a) for a in axis])
        except TypeError:
            raise ArgumentError(f"permute: {axis!r} is not a tuple of ints") from None
        if sorted(ax) != list(range(n)):
            raise ArgumentError(f"permute: {axis!r} is not a permutation of the {n} dims of shape {self.shape}")
        mask = None if self.mask is None else tuple([self.mask[a] for a in ax])
        return _create(tuple([self.shape[a] for a in ax]), tuple([self.strides[a] for a in ax]), self.offset, mask)

    cpdef View expand(self, object new_shape):
        """Broadcast size-1 dims to new sizes; every other dim must keep its size."""
        cdef tuple ns = _as_shape(new_shape, "expand")
        cdef Py_ssize_t n = len(self.shape), d
        if len(ns) != n:
            raise ArgumentError(f"expand: {ns} has {len(ns)} dims but shape {self.shape} has {n}")
        for d in range(n):
            s = self.shape[d]
            if not (s == ns[d] or (type(s) is int and s == 1)):
                raise ArgumentError(f"expand: cannot expand dim {d} of shape {self.shape} to {ns}")
        if _has_zero(ns):
            return _create(ns, None, 0, None)
        mask = None
        if self.mask is not None:
            # a broadcast dim is either wholly valid or wholly padding
            mask = tuple([m if s == x else ((0, x) if m == (0, 1) else (0, 0))
                          for m, s, x in zip(self.mask, self.shape, ns)])
        return _create(ns, self.strides, self.offset, mask)

    cpdef View pad(self, object arg):
        """Grow each dim by (before, after) elements of padding (invalid indices)."""
        cdef Py_ssize_t n = len(self.shape), d
        cdef tuple pairs = _as_pairs(arg, n, "pad", self.shape)
        cdef bint any_pad = False
        for b, a in pairs:
            if (_lo(b) < 0 or _lo(a) < 0) and not _fits_when_bound(0, b, _add(b, a)):
                raise ArgumentError(f"pad: {arg!r} for shape {self.shape} has a negative amount")
            if not (b == 0 and a == 0):
                any_pad = True
        if not any_pad:
            return self
        shape, mask = [], []
        offset = self.offset
        for d in range(n):
            b, a = pairs[d]
            s = self.shape[d]
            shape.append(_add(_add(s, b), a))
            if not (type(b) is int and b == 0):
                offset = _sub(offset, _mul(b, self.strides[d]))
            if self.mask is None:
                mask.append((b, _add(s, b)))
            else:
                mb, me = self.mask[d]
                mask.append((_add(mb, b), _add(me, b)))
        return _create(tuple(shape), self.strides, offset, tuple(mask))

    cpdef View shrink(self, object arg):
        """Keep [start, end) of each dim."""
        cdef Py_ssize_t n = len(self.shape), d
        cdef tuple pairs = _as_pairs(arg, n, "shrink", self.shape)
        for d in range(n):
            b, e = pairs[d]
            s = self.shape[d]
            if (_lo(b) < 0 or _lo(_sub(e, b)) < 0 or _lo(_sub(s, e)) < 0) and not _fits_when_bound(b, e, s):
                raise ArgumentError(f"shrink: {arg!r} is out of range for shape {self.shape}")
        shape = []
        offset = self.offset
        for d in range(n):
            b, e = pairs[d]
            shape.append(_sub(e, b))
            if not (type(b) is int and b == 0):
                offset = _add(offset, _mul(b, self.strides[d]))
        mask = None
        if self.mask is not None:
            mask = []
            for d in range(n):
                b, e = pairs[d]
                mb, me = self.mask[d]
                nb, ne = _sub(mb, b), _sub(me, b)
                # NOTE: where symbolic bounds can't decide the clamp to [0, size], the bound stays unclamped: a
                # mask reaching past the dim selects the same elements (a span reaching past a padded dim, such as
                # a KV cache read at (0, start_pos + 1))
                if _ordered(nb, 0):
                    nb = _smax(nb, 0)
                if _ordered(ne, shape[d]):
                    ne = _smin(ne, shape[d])
                if type(nb) is int and type(ne) is int and ne < nb:
                    ne = nb
                mask.append((nb, ne))
            mask = tuple(mask)
        return _create(tuple(shape), self.strides, offset, mask)

    cpdef View stride(self, object mul):
        """Take every m-th element of each dim; a negative m walks the dim backwards (m == -1 flips it)."""
        cdef Py_ssize_t n = len(self.shape), d
        try:
            ms = tuple([operator.index(m) for m in mul])
        except TypeError:
            raise ArgumentError(f"stride: {mul!r} is not a tuple of ints") from None
        if len(ms) != n or any([m == 0 for m in ms]):
            raise ArgumentError(f"stride: {mul!r} needs one nonzero int per dim of shape {self.shape}")
        shape, strides, mask = [], [], []
        offset = self.offset
        for d in range(n):
            m, s, st = ms[d], self.shape[d], self.strides[d]
            am = -m if m < 0 else m
            if m < 0:
                offset = _add(offset, _mul(_sub(s, 1), st))
            shape.append(_norm((s + (am - 1)) // am) if am != 1 else s)
            strides.append(_mul(st, m))
            if self.mask is not None:
                mb, me = self.mask[d]
                if m < 0:
                    mb, me = _sub(s, me), _sub(s, mb)
                if am != 1:
                    mb, me = _norm((mb + (am - 1)) // am), _norm((me + (am - 1)) // am)
                mask.append((mb, me))
        return _create(tuple(shape), tuple(strides), offset, None if self.mask is None else tuple(mask))

    cpdef View reshape(self, object new_shape):
        """The same elements in row-major order under `new_shape`; None when one view cannot express it."""
        cdef tuple ns = _as_shape(new_shape, "reshape")
        if ns == self.shape:
            return self
        old_size, new_size = _prod(self.shape), _prod(ns)
        if type(old_size) is int and type(new_size) is int:
            if old_size != new_size:
                raise ArgumentError(f"reshape: cannot reshape shape {self.shape} ({old_size} elements) to {ns} "
                                 f"({new_size} elements)")
        elif type(_sub(old_size, new_size)) is int and _sub(old_size, new_size) != 0:
            raise ArgumentError(f"reshape: size of {ns} does not match shape {self.shape}")
        if _has_zero(self.shape):
            return _create(ns, None, 0, None)
        if self.contiguous:
            return _create(ns, None, 0, None)
        if self.mask is not None and _mask_empty(self.mask):
            return _invalid(ns)
        cdef bint cacheable = self._all_int and _all_int(ns)
        key = (self, ns)
        if cacheable and key in _reshape_cache:
            return _reshape_cache[key]
        ret = _reshape(self, ns)
        if cacheable:
            if len(_reshape_cache) >= _CACHE_LIMIT:
                _reshape_cache.clear()
            _reshape_cache[key] = ret
        return ret

    cpdef View minify(self):
        """Merge every run of adjacent dims that a single dim can express (e.g. shape (5, 2, 5, 2) with strides
        (2, 1, 20, 10) becomes (10, 10) with strides (1, 10)); size-1 dims disappear.  Returns self if nothing
        merges."""
        if self._minified is not None:
            return self._minified
        cdef Py_ssize_t n = len(self.shape), d
        cdef list groups = []
        cdef list cur = []
        for d in range(n - 1, -1, -1):
            s = self.shape[d]
            if type(s) is int and s == 1:
                continue
            b, e = (0, s) if self.mask is None else self.mask[d]
            dim = (s, self.strides[d], b, e)
            if cur and _merge_chunk(cur + [dim]) is not None:
                cur.append(dim)
            else:
                if cur:
                    groups.append(cur)
                cur = [dim]
        if cur:
            groups.append(cur)
        new_shape = tuple([_prod([g[0] for g in grp]) for grp in reversed(groups)])
        ret = self
        if not (new_shape == self.shape):
            cand = self.reshape(new_shape)
            if cand is not None:
                ret = cand
        self._minified = ret
        return ret

    cpdef View compose(self, View other):
        """self + other: one View reading this view through `other` (whose indices address this view's
        elements in row-major order), or None when no single view can express it."""
        if self._all_int and other._all_int:
            key = (self, other)
            if key in _compose_cache:
                return _compose_cache[key]
            ret = _compose(self, other)
            if len(_compose_cache) >= _CACHE_LIMIT:
                _compose_cache.clear()
            _compose_cache[key] = ret
            return ret
        return _compose(self, other)

    def __add__(self, other):
        if not isinstance(other, View):
            return NotImplemented
        return self.compose(other)
