"""TinyJit never replays a stale value: jitted functions called with every kind of argument (realized, lazy,
constant, full, views, aliased buffers, bound Variables, Python values) give the eager result on every call, or a
JitError when the call can't be served by the capture."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrad import Tensor, TinyJit, Variable
from tinygrad.engine.jit import JitError

SHAPE = (3, 4)
KINDS = ("realized", "lazy", "const", "full", "full_realized", "permuted", "shrunk", "expanded", "alias", "var",
         "scalar")


def make(kind: str, rng: np.random.Generator, call: int, prev: Tensor | None):
    """(argument, its value as numpy) for one call; `prev` is the tensor made for the argument before (for alias)."""
    a = rng.standard_normal(SHAPE).astype(np.float32)
    if kind == "realized":
        return Tensor(a).realize(), a
    if kind == "lazy":
        return Tensor(a) * 2 + 1, a * 2 + 1
    if kind == "const":
        return Tensor(float(call)), np.float32(call)
    if kind == "full":
        return Tensor.full(SHAPE, float(call) + 0.5), np.full(SHAPE, call + 0.5, np.float32)
    if kind == "full_realized":
        return Tensor.full(SHAPE, float(-call)).realize(), np.full(SHAPE, -call, np.float32)
    if kind == "permuted":
        b = rng.standard_normal(SHAPE[::-1]).astype(np.float32)
        return Tensor(b).realize().permute(1, 0), b.T
    if kind == "shrunk":
        b = rng.standard_normal((5, 6)).astype(np.float32)
        return Tensor(b).realize()[1:4, 2:6], b[1:4, 2:6]
    if kind == "expanded":
        b = rng.standard_normal((1, 4)).astype(np.float32)
        return Tensor(b).realize().expand(SHAPE), np.broadcast_to(b, SHAPE)
    if kind == "alias":
        return prev, None
    if kind == "var":
        return Variable("v", 1, 10).bind(call % 10 + 1), np.float32(call % 10 + 1)
    return 3, np.float32(3)  # a Python scalar: the same on every call


def fn(*args):
    out = None
    for i, x in enumerate(args):
        if isinstance(x, Variable):
            term = Tensor.ones(SHAPE).contiguous() * x
        else:
            term = x * (i + 1) if isinstance(x, Tensor) else Tensor.full(SHAPE, float(x))
        out = term if out is None else out + term
    return out.realize()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4), st.integers(0, 2**16))
def test_every_call_matches_eager(kinds, seed):
    kinds = ["realized", *kinds]  # a function of constants alone launches no kernel, which TinyJit refuses
    jf = TinyJit(fn)
    for call in range(5):
        rng = np.random.default_rng(seed + call)
        args, want = [], None
        for k in kinds:
            tensors = [a for a in args if isinstance(a, Tensor)]
            arg, val = make(k, rng, call, tensors[-1] if tensors else None)
            args.append(arg)
            if k == "alias":
                val = args[-1].numpy()
            term = (val if val is not None else 0) * ((len(args)) if k not in ("var", "scalar") else 1)
            want = term if want is None else want + term
        got = jf(*args).numpy()
        np.testing.assert_allclose(got, np.broadcast_to(want, SHAPE), rtol=1e-5, atol=1e-5)


def test_aliasing_is_part_of_the_signature():
    jf = TinyJit(lambda a, b: (a + b * 2).realize())
    a, b = Tensor.ones(4).contiguous().realize(), Tensor.ones(4).contiguous().realize()
    for _ in range(3):
        jf(a, a)
    with pytest.raises(JitError, match="args\\[1\\]"):
        jf(a, b)


def test_constants_passed_to_a_jit_are_not_baked_in():
    scalar, full = TinyJit(lambda x, c: (x * c).realize()), TinyJit(lambda x, c: (x * c).realize())
    x = Tensor([1.0, 2.0]).realize()
    for i in range(6):
        np.testing.assert_array_equal(scalar(x, Tensor(float(i))).numpy(), [i, 2 * i])
        np.testing.assert_array_equal(full(x, Tensor.full((2,), float(i))).numpy(), [i, 2 * i])
