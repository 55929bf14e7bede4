"""ShapeTracker and View tests: numpy index arithmetic is the oracle for every movement-op chain."""
import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinygrad.shape.shapetracker import ShapeTracker
from tinygrad.shape.symbolic import AndNode, NumNode, Variable, render_python, sym_infer
from tinygrad.shape.view import View, strides_for_shape

FUZZ = settings(max_examples=500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# numpy can evaluate the rendered index expressions over whole index grids once `and` becomes `&`
NP_OPS = {**render_python, AndNode: lambda node, ops, ctx: "(" + "&".join(t.render(ops, ctx) for t in node.nodes) + ")"}
MAX_ELEMENTS = 1500


def views(s: ShapeTracker):
    return [(v.shape, v.strides) for v in s.views]


# ---------------------------------------------------------------------------------------------------------------
# the numpy oracle


def np_eval(node, env: dict, shape: tuple) -> np.ndarray:
    """Evaluate a Node over numpy index grids (env maps variable names to arrays)."""
    # the text comes from the symbolic renderer, never from outside input
    out = eval(node.render(NP_OPS), {}, dict(env))
    return np.broadcast_to(np.asarray(out, dtype=np.int64), shape)


def check_against_numpy(tracker: ShapeTracker, arr: np.ndarray):
    """Every element: valid exactly where numpy holds data (not the -1 padding), and then the same index."""
    assert tracker.shape == arr.shape
    idx, valid = tracker.expr_idxs()
    env = {f"idx{i}": g for i, g in enumerate(np.indices(arr.shape, dtype=np.int64))}
    got_valid = np_eval(valid, env, arr.shape).astype(bool)
    got_idx = np_eval(idx, env, arr.shape)
    np.testing.assert_array_equal(got_valid, arr != -1)
    np.testing.assert_array_equal(got_idx[got_valid], arr[got_valid])
    # sym_infer is the reference evaluator; spot-check that it agrees with the vectorised one
    for pos in ([0] * arr.ndim, [s - 1 for s in arr.shape], [s // 2 for s in arr.shape]):
        if arr.size == 0:
            break
        var_vals = {Variable(f"idx{i}", 0, s - 1): p for i, (s, p) in enumerate(zip(arr.shape, pos))}
        assert bool(sym_infer(valid, var_vals)) == (arr[tuple(pos)] != -1)
        if arr[tuple(pos)] != -1:
            assert sym_infer(idx, var_vals) == arr[tuple(pos)]
    return got_idx, got_valid


def check_flat(tracker: ShapeTracker, arr: np.ndarray):
    """expr_node over one flat index agrees with numpy's row-major order."""
    idx, valid = tracker.expr_node("idx")
    flat = arr.reshape(-1)
    env = {"idx": np.arange(flat.size, dtype=np.int64)}
    got_valid = np_eval(valid, env, flat.shape).astype(bool)
    got_idx = np_eval(idx, env, flat.shape)
    np.testing.assert_array_equal(got_valid, flat != -1)
    np.testing.assert_array_equal(got_idx[got_valid], flat[got_valid])


def check_real_strides(tracker: ShapeTracker, got_idx: np.ndarray, got_valid: np.ndarray):
    """A reported real stride must be the index step along that dim wherever both neighbours are valid."""
    for ignore_valid in (False, True):
        for d, s in enumerate(tracker.real_strides(ignore_valid)):
            if s is None or got_idx.shape[d] < 2:
                continue
            lo = [slice(None)] * got_idx.ndim
            hi = [slice(None)] * got_idx.ndim
            lo[d], hi[d] = slice(0, -1), slice(1, None)
            both = got_valid[tuple(lo)] & got_valid[tuple(hi)]
            step = got_idx[tuple(hi)] - got_idx[tuple(lo)]
            assert np.all(step[both] == s), (d, s, tracker)
            if not ignore_valid:
                # validity does not depend on the dim, so it is the same along it
                assert np.array_equal(got_valid[tuple(lo)], got_valid[tuple(hi)])


def check_real_size(tracker: ShapeTracker, arr: np.ndarray):
    data = arr[arr != -1]
    need = int(data.max()) + 1 if data.size else 0
    assert tracker.real_size() >= need


def apply_tracker(tracker: ShapeTracker, kind: str, arg) -> ShapeTracker:
    return getattr(tracker, kind)(arg)


def apply_numpy(arr: np.ndarray, kind: str, arg) -> np.ndarray:
    if kind == "reshape":
        return arr.reshape(arg)
    if kind == "permute":
        return arr.transpose(arg)
    if kind == "expand":
        return np.broadcast_to(arr, arg)
    if kind == "pad":
        return np.pad(arr, arg, constant_values=-1)
    if kind == "shrink":
        return arr[tuple(slice(b, e) for b, e in arg)]
    assert kind == "stride"
    return arr[tuple(slice(None, None, m) for m in arg)]


# ---------------------------------------------------------------------------------------------------------------
# strategies: a start shape and a chain of movement ops valid for it


def _prime_factors(n: int) -> list:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def factorisation(draw, size: int) -> tuple:
    ndim = draw(st.integers(1, 4))
    if size == 0:
        dims = [draw(st.integers(1, 4)) for _ in range(ndim)]
        dims[draw(st.integers(0, ndim - 1))] = 0
        return tuple(dims)
    dims = [1] * ndim
    for p in _prime_factors(size):
        dims[draw(st.integers(0, ndim - 1))] *= p
    return tuple(dims)


@st.composite
def movement_op(draw, shape: tuple):
    size = math.prod(shape)
    # reshapes onto permuted or padded views are what stack views, so they come up most often
    kinds = ["reshape", "reshape", "reshape", "permute", "shrink", "stride"]
    if size * 4 <= MAX_ELEMENTS:
        kinds += ["pad", "pad"]
    if 1 in shape and size * 3 <= MAX_ELEMENTS:
        kinds.append("expand")
    kind = draw(st.sampled_from(kinds))
    if kind == "reshape":
        arg = draw(factorisation(size))
    elif kind == "permute":
        arg = tuple(draw(st.permutations(range(len(shape)))))
    elif kind == "expand":
        arg = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
    elif kind == "pad":
        arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    elif kind == "shrink":
        arg = []
        for s in shape:
            # empty ranges make everything trivially empty afterwards, so keep them rare
            if s > 0 and draw(st.integers(0, 15)) < 15:
                b = draw(st.integers(0, s - 1))
                arg.append((b, draw(st.integers(b + 1, s))))
            else:
                b = draw(st.integers(0, s))
                arg.append((b, draw(st.integers(b, s))))
        arg = tuple(arg)
    else:
        arg = tuple(draw(st.sampled_from([1, 1, -1, 2, -2, 3, -3])) for _ in shape)
    return kind, arg


def _shape_after(shape: tuple, kind: str, arg) -> tuple:
    return apply_numpy(np.empty(shape, dtype=np.int8), kind, arg).shape


@st.composite
def movement_chain(draw, shape: tuple, min_ops: int = 1, max_ops: int = 8) -> list:
    ops = []
    # alternating with reshapes stacks views most often: reshapes of permuted, padded or strided views
    interleave = draw(st.booleans())
    for i in range(draw(st.integers(min_ops, max_ops))):
        if interleave and i % 2 == 1:
            kind, arg = "reshape", draw(factorisation(math.prod(shape)))
        else:
            kind, arg = draw(movement_op(shape))
        ops.append((kind, arg))
        shape = _shape_after(shape, kind, arg)
    return ops


@st.composite
def start_shape(draw) -> tuple:
    dims = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    if draw(st.integers(0, 31)) == 31:
        dims[draw(st.integers(0, len(dims) - 1))] = 0
    return tuple(dims)


@st.composite
def chain_case(draw):
    shape = draw(start_shape())
    return shape, draw(movement_chain(shape))


def run_chain(shape: tuple, ops: list):
    tracker = ShapeTracker.from_shape(shape)
    arr = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    for kind, arg in ops:
        tracker = apply_tracker(tracker, kind, arg)
        arr = apply_numpy(arr, kind, arg)
        assert tracker.shape == arr.shape, (kind, arg)
    return tracker, arr


# ---------------------------------------------------------------------------------------------------------------
# fuzz


@FUZZ
@given(chain_case())
def test_fuzz_movement_ops(case):
    tracker, arr = run_chain(*case)
    got_idx, got_valid = check_against_numpy(tracker, arr)
    check_flat(tracker, arr)
    check_real_strides(tracker, got_idx, got_valid)
    check_real_size(tracker, arr)
    simple = tracker.simplify()
    assert len(simple.views) <= len(tracker.views)
    assert simple.shape == tracker.shape
    check_against_numpy(simple, arr)
    check_flat(simple, arr)


@st.composite
def composed_case(draw):
    shape = draw(start_shape())
    first = draw(movement_chain(shape))
    mid = _shape_of_chain(shape, first)
    return shape, first, draw(movement_chain(mid, max_ops=5))


def _shape_of_chain(shape: tuple, ops: list) -> tuple:
    for kind, arg in ops:
        shape = _shape_after(shape, kind, arg)
    return shape


@settings(FUZZ, max_examples=250)
@given(composed_case())
def test_fuzz_compose_trackers(case):
    shape, first, second = case
    lower, arr = run_chain(shape, first)
    upper, _ = run_chain(lower.shape, second)
    for kind, arg in second:
        arr = apply_numpy(arr, kind, arg)
    combined = lower + upper
    assert combined.shape == arr.shape
    check_against_numpy(combined, arr)


@settings(FUZZ, max_examples=250)
@given(chain_case())
def test_fuzz_minify_and_views_compose(case):
    # every view of a chain alone, minified, reads the same elements; merging the last two keeps the meaning
    tracker, arr = run_chain(*case)
    for v in tracker.views:
        m = v.minify()
        assert math.prod(m.shape) == math.prod(v.shape)
        check_view_equivalent(v, m)
    if len(tracker.views) >= 2:
        merged = tracker.views[-2] + tracker.views[-1]
        if merged is not None:
            check_against_numpy(ShapeTracker(tracker.views[:-2] + (merged,)), arr)


def check_view_equivalent(a: View, b: View):
    """Views a and b read the same buffer positions in row-major order (b may have another shape)."""
    ea, va = ShapeTracker((a,)).expr_node("i")
    eb, vb = ShapeTracker((b,)).expr_node("i")
    n = math.prod(a.shape)
    env = {"i": np.arange(n, dtype=np.int64)}
    ok_a = np_eval(va, env, (n,)).astype(bool)
    np.testing.assert_array_equal(ok_a, np_eval(vb, env, (n,)).astype(bool))
    np.testing.assert_array_equal(np_eval(ea, env, (n,))[ok_a], np_eval(eb, env, (n,))[ok_a])


# ---------------------------------------------------------------------------------------------------------------
# the acceptance sequence


def test_acceptance_sequence():
    a = ShapeTracker.from_shape((10, 10))
    assert repr(a).startswith("ShapeTracker(views=(View(shape=(10, 10), strides=(10, 1)")
    a = a.permute((1, 0))
    assert views(a) == [((10, 10), (1, 10))]
    a = a.reshape((5, 2, 5, 2))
    assert views(a) == [((5, 2, 5, 2), (2, 1, 20, 10))]
    a = a.reshape((100,))
    assert views(a) == [((5, 2, 5, 2), (2, 1, 20, 10)), ((100,), (1,))]
    idx, _ = a.expr_idxs()
    assert idx.render() == "(((idx0%10)*10)+(idx0//10))"
    a = a.reshape((10, 10))
    idx, _ = a.expr_idxs()
    assert idx.render() == "((idx1*10)+idx0)"
    assert views(a) == [((5, 2, 5, 2), (2, 1, 20, 10)), ((10, 10), (10, 1))]
    a = a.simplify()
    assert views(a) == [((10, 10), (1, 10))]
    a = a.permute((1, 0))
    assert views(a) == [((10, 10), (10, 1))]
    assert a.contiguous is True


def test_reprs():
    v = View.create((10, 10))
    assert repr(v) == "View(shape=(10, 10), strides=(10, 1), offset=0, mask=None, contiguous=True)"
    assert repr(ShapeTracker((v,))) == \
        "ShapeTracker(views=(View(shape=(10, 10), strides=(10, 1), offset=0, mask=None, contiguous=True),))"


# ---------------------------------------------------------------------------------------------------------------
# View canonicalisation


def test_strides_for_shape():
    assert strides_for_shape((2, 3, 4)) == (12, 4, 1)
    assert strides_for_shape((2, 1, 3)) == (3, 0, 1)
    assert strides_for_shape((1,)) == (0,)
    assert strides_for_shape(()) == ()


def test_create_canonicalises():
    v = View.create((3, 1, 4), (4, 7, 1))
    assert v.strides == (4, 0, 1) and v.contiguous
    assert View.create((3, 4), mask=((0, 3), (0, 4))).mask is None
    assert View.create((3, 4), (4, 1), 5).contiguous is False
    assert View.create((3, 4), (1, 3)).contiguous is False
    # an empty range anywhere makes every element padding
    bad = View.create((3, 4), (4, 1), 7, ((0, 3), (2, 2)))
    assert (bad.strides, bad.offset, bad.mask, bad.contiguous) == ((0, 0), 0, ((0, 0), (0, 0)), False)
    # a dim with one valid index reads only it: its stride moves into the offset
    one = View.create((4, 3), (3, 1), 0, ((1, 2), (0, 3)))
    assert (one.strides, one.offset, one.mask) == ((0, 1), 3, ((1, 2), (0, 3)))
    empty = View.create((3, 0, 2), (9, 9, 9), 4)
    assert (empty.strides, empty.offset, empty.mask, empty.contiguous) == ((0, 0, 0), 0, None, True)
    assert View.create(()).contiguous and View.create(()).size() == 1


def test_view_fields_readonly_and_equality():
    v = View.create((2, 3))
    with pytest.raises(AttributeError):
        v.shape = (6,)
    assert v == View.create((2, 3)) and hash(v) == hash(View.create((2, 3)))
    assert v != View.create((3, 2)) and v != View.create((2, 3), offset=1)
    assert View((2, 3), (3, 1), 0, None, True) == v
    assert pickle.loads(pickle.dumps(v)) == v


# ---------------------------------------------------------------------------------------------------------------
# movement ops on single views


def test_movement_ops_single_view():
    v = View.create((4, 6))
    assert v.permute((1, 0)).strides == (1, 6)
    p = v.pad(((1, 2), (0, 1)))
    assert (p.shape, p.offset, p.mask) == ((7, 7), -6, ((1, 5), (0, 6)))
    s = v.shrink(((1, 3), (2, 6)))
    assert (s.shape, s.strides, s.offset, s.mask) == ((2, 4), (6, 1), 8, None)
    f = v.stride((-1, 2))
    assert (f.shape, f.strides, f.offset) == ((4, 3), (-6, 2), 18)
    e = View.create((4, 1)).expand((4, 5))
    assert (e.shape, e.strides) == ((4, 5), (1, 0))
    assert v.pad(((0, 0), (0, 0))) is v


def test_masked_expand_and_shrink():
    padded = View.create((1, 3)).pad(((1, 1), (0, 0)))
    assert padded.mask == ((1, 2), (0, 3))
    narrow = padded.shrink(((1, 2), (0, 3)))
    assert narrow.mask is None and narrow.shape == (1, 3)
    gone = padded.shrink(((0, 1), (0, 3)))
    assert gone.mask == ((0, 0), (0, 0))
    # a padding-only size-1 dim stays padding when broadcast
    assert gone.expand((4, 3)).mask == ((0, 0), (0, 0))


@pytest.mark.parametrize("call, match", [
    (lambda v: v.permute((0, 0)), "permut"),
    (lambda v: v.permute((0,)), "permut"),
    (lambda v: v.expand((5, 4)), "expand"),
    (lambda v: v.expand((3,)), "expand"),
    (lambda v: v.pad(((0, -1), (0, 0))), "pad"),
    (lambda v: v.pad(((0, 1),)), "pad"),
    (lambda v: v.shrink(((0, 4), (0, 4))), "shrink"),
    (lambda v: v.shrink(((2, 1), (0, 4))), "shrink"),
    (lambda v: v.stride((0, 1)), "stride"),
    (lambda v: v.stride((1,)), "stride"),
    (lambda v: v.reshape((5, 2)), "reshape"),
    (lambda v: v.reshape((-1, 12)), "reshape"),
    (lambda v: v.reshape((2.5, 4)), "reshape"),
])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(View.create((3, 4)))


def test_tracker_bad_arguments():
    with pytest.raises(ValueError, match="reshape"):
        ShapeTracker.from_shape((3, 4)).reshape((7,))
    with pytest.raises(ValueError):
        ShapeTracker(())


# ---------------------------------------------------------------------------------------------------------------
# reshape


def test_reshape_split_and_merge():
    v = View.create((10, 10)).permute((1, 0))
    assert v.reshape((5, 2, 5, 2)).strides == (2, 1, 20, 10)
    assert v.reshape((5, 2, 5, 2)).reshape((10, 10)) == v
    assert v.reshape((10, 1, 10)).strides == (1, 0, 10)
    assert v.reshape((100,)) is None


def test_reshape_broadcast_dims():
    e = View.create((1, 3)).expand((4, 3))
    assert e.reshape((2, 2, 3)).strides == (0, 0, 1)
    assert e.reshape((12,)) is None
    z = View.create((1,)).expand((6,))
    assert z.reshape((2, 3)).strides == (0, 0)


def test_reshape_masked():
    m = View.create((12,)).shrink(((0, 6),)).pad(((3, 3),))
    assert m.mask == ((3, 9),)
    r = m.reshape((4, 3))
    assert (r.shape, r.strides, r.offset, r.mask) == ((4, 3), (3, 1), -3, ((1, 3), (0, 3)))
    assert r.reshape((12,)) == m
    # [2, 8) is not a box of a (4, 3) grid
    assert View.create((12,), mask=((2, 8),)).reshape((4, 3)) is None
    # merging across a padded inner dim cannot work
    assert View.create((3, 4), mask=((0, 3), (1, 3))).reshape((12,)) is None


def test_reshape_zero_and_invalid():
    assert View.create((0, 4)).reshape((4, 0, 2)).shape == (4, 0, 2)
    invalid = View.create((2, 3), mask=((0, 2), (1, 1)))
    assert invalid.reshape((3, 2)).mask == ((0, 0), (0, 0))


def test_tracker_reshape_stacks_views():
    t = ShapeTracker.from_shape((4, 6)).pad(((1, 1), (0, 0)))
    assert len(t.reshape((6, 6)).views) == 1
    t2 = ShapeTracker.from_shape((4, 5)).pad(((0, 0), (1, 0))).reshape((2, 3, 4))
    assert len(t2.views) == 2 and t2.views[-1].contiguous


# ---------------------------------------------------------------------------------------------------------------
# minify, composition, simplify


def test_minify():
    v = View.create((5, 2, 5, 2), (2, 1, 20, 10))
    assert (v.minify().shape, v.minify().strides) == ((10, 10), (1, 10))
    assert View.create((2, 1, 3, 4)).minify().shape == (24,)
    assert View.create((4, 3), (1, 4)).minify().shape == (4, 3)
    masked = View.create((4, 3, 2)).pad(((1, 1), (0, 0), (0, 0)))
    assert (masked.minify().shape, masked.minify().mask) == ((36,), ((6, 30),))


def test_compose_views():
    lo = View.create((10, 10)).permute((1, 0))
    # a contiguous upper view of the same size is just a reshape of the lower one
    assert lo + View.create((5, 20)) == lo.reshape((5, 20))
    assert lo + View.create((100,)) is None
    # permuting twice is the identity
    assert (lo + View.create((10, 10)).permute((1, 0))).contiguous
    # shrinking a permuted view folds into one view
    up = View.create((10, 10)).shrink(((2, 5), (1, 3)))
    assert lo + up == lo.shrink(((2, 5), (1, 3)))
    # padding on top of a flip keeps the mask
    flip = View.create((6,)).stride((-1,))
    both = flip + View.create((6,)).pad(((2, 0),))
    assert both == flip.pad(((2, 0),))
    assert View.create((3, 4)) + flip is flip


def test_compose_lower_mask_projects():
    # lower view: a (4,) buffer padded to (8,); upper: every other element, so lo's padding masks the upper dim
    lo = View.create((4,)).pad(((2, 2),))
    merged = lo + View.create((8,)).stride((2,))
    assert (merged.shape, merged.strides, merged.offset, merged.mask) == ((4,), (2,), -2, ((1, 3),))
    arr = np.pad(np.arange(4), (2, 2), constant_values=-1)[::2]
    check_against_numpy(ShapeTracker((merged,)), arr)
    # a permute on top of a padded view moves the mask with the dims
    lo2 = View.create((3, 4)).pad(((1, 1), (0, 0)))
    merged2 = lo2 + View.create((5, 4)).permute((1, 0))
    assert merged2 == lo2.permute((1, 0))
    # the valid elements of a reshaped padded view are no box: no single view
    assert lo + View.create((2, 4)).permute((1, 0)) is None


def test_simplify_and_add():
    base = ShapeTracker.from_shape((4, 6)).permute((1, 0))
    stacked = ShapeTracker(base.views + (View.create((24,)),))
    assert len(stacked.simplify().views) == 2
    top = ShapeTracker.from_shape((6, 4)).shrink(((1, 5), (0, 4)))
    combined = base + top
    assert len(combined.views) == 1
    assert combined == base.shrink(((1, 5), (0, 4)))
    assert ShapeTracker.from_shape((3, 4)) + ShapeTracker.from_shape((12,)) == ShapeTracker.from_shape((12,))


# ---------------------------------------------------------------------------------------------------------------
# index expressions and strides


def test_expr_idxs_given_and_flat():
    t = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    idx, valid = t.expr_idxs([NumNode(2), 1])
    assert idx == 6 and valid == 1
    i, v = t.expr_node("i")
    assert {x.expr for x in i.vars()} == {"i"} and v == 1
    with pytest.raises(ValueError):
        t.expr_idxs([NumNode(0)])
    assert ShapeTracker.from_shape((0, 3)).expr_idxs()[1] == 0


def test_real_strides_and_masks():
    t = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    assert t.real_strides() == (1, 4)
    assert t.unit_stride_axes() == [0]
    p = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0)))
    assert p.real_strides() == (None, 1)
    assert p.real_strides(ignore_valid=True) == (4, 1)
    assert p.axis_is_masked(0) and not p.axis_is_masked(1)
    two = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,)).reshape((2, 12))
    assert len(two.views) == 2
    # idx0 steps 12 elements of the (6, 4) view below: 3 rows of the (1, 6)-strided lower view, everywhere
    assert two.real_strides() == (3, None)
    b = ShapeTracker.from_shape((1, 4)).expand((3, 4)).reshape((3, 2, 2))
    assert b.real_strides() == (0, 2, 1)


def test_real_size():
    assert ShapeTracker.from_shape((3, 4)).real_size() == 12
    assert ShapeTracker.from_shape((3, 4)).shrink(((0, 2), (1, 3))).real_size() == 7
    assert ShapeTracker.from_shape((3, 4)).pad(((2, 2), (1, 1))).real_size() == 12
    assert ShapeTracker.from_shape((3, 4)).stride((-1, 1)).real_size() == 12
    assert ShapeTracker.from_shape((3, 0)).real_size() == 0
    assert ShapeTracker.from_shape((4,)).shrink(((2, 2),)).pad(((1, 1),)).real_size() == 0


def test_tracker_hash_eq_pickle():
    a = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    b = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != ShapeTracker.from_shape((4, 3))
    assert {a: 1}[b] == 1
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.views = ()
    assert a.size == 12 and a.shape == (4, 3) and not a.contiguous


# ---------------------------------------------------------------------------------------------------------------
# symbolic shapes


def test_symbolic_shapes():
    n = Variable("n", 1, 10)
    t = ShapeTracker.from_shape((n, 10))
    assert t.shape == (n, 10) and t.contiguous
    assert t.views[0].strides == (10, 1)
    r = t.reshape((n, 2, 5))
    assert len(r.views) == 1 and r.views[0].strides == (10, 5, 1)
    assert r.reshape((n, 10)) == t
    assert t.size == 100 and t.real_size() == 100
    idx, valid = ShapeTracker.from_shape((10, n)).expr_idxs()
    assert idx.render() == "((idx0*n)+idx1)" and valid == 1
    s = ShapeTracker.from_shape((10, 10)).shrink(((0, n), (0, 10)))
    assert s.shape == (n, 10) and s.contiguous
    p = ShapeTracker.from_shape((10, n)).permute((1, 0))
    assert p.views[0].strides == (1, n)
    assert p.reshape((n, 2, 5)).views[0].strides == (1, 5 * n, n)
    assert t.vars() == {n}


def symbolic_agrees(make, values=(1, 2, 3, 5)):
    """The tracker make(n) with symbolic n indexes like make(k) for concrete k, at every element."""
    n = Variable("n", 1, 5)
    sym = make(n)
    idx, valid = sym.expr_idxs()
    for k in values:
        concrete = make(k)
        cidx, cvalid = concrete.expr_idxs()
        for pos in np.ndindex(*concrete.shape):
            cvals = {Variable(f"idx{i}", 0, s - 1): p for i, (s, p) in enumerate(zip(concrete.shape, pos))}
            svals = {Variable(f"idx{i}", 0, (s if isinstance(s, int) else s.max) - 1): p
                     for i, (s, p) in enumerate(zip(sym.shape, pos))}
            svals[n] = k
            ok = sym_infer(cvalid, cvals)
            assert sym_infer(valid, svals) == ok
            if ok:
                assert sym_infer(idx, svals) == sym_infer(cidx, cvals)


@pytest.mark.parametrize("make", [
    lambda n: ShapeTracker.from_shape((n, 6)).permute((1, 0)).reshape((2, 3, n)),
    lambda n: ShapeTracker.from_shape((n, 6)).reshape((n * 6,)).reshape((n, 3, 2)).shrink(((0, n), (1, 3), (0, 2))),
    lambda n: ShapeTracker.from_shape((1, 4)).expand((n, 4)).pad(((1, 0), (0, 2))),
    lambda n: ShapeTracker.from_shape((6, 4)).shrink(((0, n), (0, 4))).stride((1, -1)),
    lambda n: ShapeTracker.from_shape((n, 4)).pad(((0, 2), (1, 1))).permute((1, 0)),
    lambda n: ShapeTracker.from_shape((4, n)).permute((1, 0)).reshape((n, 2, 2)).simplify(),
])
def test_symbolic_matches_concrete(make):
    symbolic_agrees(make)


def test_symbolic_stacked_view():
    n = Variable("n", 1, 10)
    t = ShapeTracker.from_shape((n, 10)).reshape((n * 10,))
    assert len(t.views) == 1 and t.reshape((n, 10)) == ShapeTracker.from_shape((n, 10))
    # the transpose of a symbolic matrix cannot flatten in one view: a second view goes on top
    stacked = ShapeTracker.from_shape((10, n)).permute((1, 0)).reshape((n * 10,))
    assert len(stacked.views) == 2 and stacked.views[-1].contiguous


def test_symbolic_bind_unbind():
    n = Variable("n", 1, 10)
    t = ShapeTracker.from_shape((n.bind(3), 4))
    assert t.var_vals == {n: 3}
    unbound, values = t.unbind()
    assert unbound == ShapeTracker.from_shape((n, 4)) and values == {n: 3}
    assert ShapeTracker.from_shape((3, 4)).unbind() == (ShapeTracker.from_shape((3, 4)), {})
