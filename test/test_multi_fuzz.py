"""Random chains of movement ops and reduces on randomly sharded tensors against numpy: the placement logic (which
dim the split follows, the ranges a pad, shrink or flip leaves, the gathers where a split can't survive) checked on
shapes nobody chose by hand."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrad import Tensor

DEVICES = ("CLANG", "CLANG:1", "CLANG:2")


@st.composite
def sharded_chain(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    n_dev = draw(st.integers(2, 3))
    axes = [d for d, s in enumerate(shape) if s >= n_dev]
    axis = draw(st.sampled_from([None] + axes))
    ops = draw(st.lists(st.sampled_from(["permute", "reshape_flat", "split_dim", "pad", "shrink", "flip", "expand",
                                         "sum"]), min_size=1, max_size=4))
    seeds = draw(st.lists(st.integers(0, 2**16), min_size=len(ops), max_size=len(ops)))
    return shape, DEVICES[:n_dev], axis, list(zip(ops, seeds))


def _apply(op, seed, t, a):
    """The same movement on tensor `t` and numpy array `a`, with arguments drawn from `seed`."""
    rng = np.random.default_rng(seed)
    nd = a.ndim
    if op == "permute":
        order = tuple(int(i) for i in rng.permutation(nd))
        return t.permute(order), a.transpose(order)
    if op == "reshape_flat":
        return t.reshape(-1), a.reshape(-1)
    if op == "split_dim":
        d = int(rng.integers(nd))
        s = a.shape[d]
        f = next((k for k in (2, 3) if s % k == 0), 1)
        shape = a.shape[:d] + (f, s // f) + a.shape[d + 1:]
        return t.reshape(shape), a.reshape(shape)
    if op == "pad":
        pads = tuple((int(rng.integers(0, 2)), int(rng.integers(0, 3))) for _ in range(nd))
        return t.pad(pads), np.pad(a, pads)
    if op == "shrink":
        arg = []
        for s in a.shape:
            lo = int(rng.integers(0, s))
            arg.append((lo, int(rng.integers(lo + 1, s + 1))))
        return t.shrink(tuple(arg)), a[tuple(slice(lo, hi) for lo, hi in arg)]
    if op == "flip":
        d = int(rng.integers(nd))
        return t.flip(d), np.flip(a, d)
    if op == "expand":
        d = int(rng.integers(nd + 1))
        t, a = t.unsqueeze(d), np.expand_dims(a, d)
        shape = a.shape[:d] + (3,) + a.shape[d + 1:]
        return t.expand(shape), np.broadcast_to(a, shape)
    d = int(rng.integers(nd))
    return t.sum(d), a.sum(d)


@settings(max_examples=60, deadline=None)
@given(sharded_chain())
def test_movement_chains_match_numpy(case):
    shape, devices, axis, ops = case
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = Tensor(a).shard(devices, axis)
    for op, seed in ops:
        if op == "sum" and a.ndim == 1:
            continue
        t, a = _apply(op, seed, t, a)
        assert t.shape == a.shape, (op, t.shape, a.shape)
        assert t.device == devices
        mlb = t.lazydata
        if mlb.axis is not None:
            assert mlb.bounds[-1][1] == a.shape[mlb.axis] and sum(mlb.real) >= 1
    np.testing.assert_equal(t.numpy(), a)
