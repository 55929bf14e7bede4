"""Tests for tinygrad.shape.symbolic: exact renders, each simplification rule, errors, and a brute-force fuzz."""

import itertools
import pickle
import random
from typing import Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinygrad.shape.symbolic import (
    AndNode,
    DivNode,
    LtNode,
    ModNode,
    MulNode,
    Node,
    NumNode,
    SumNode,
    Variable,
    create_ge_node,
    create_lt_node,
    render_python,
    sint,
    sym_infer,
)

FUZZ = settings(derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture
def ab():
    return Variable("a", 0, 10), Variable("b", 0, 10)


# ----------------------------------------------------------------------------------------------------------------------
# the exact results other modules rely on


def test_acceptance_bounds(ab):
    a, b = ab
    assert ((a * 10).min, (a * 10).max) == (0, 100)
    assert ((a + b).min, (a + b).max) == (0, 20)


def test_acceptance_renders(ab):
    a, b = ab
    assert ((a + b * 10) % 10).render() == "(a%10)"
    expr = (a * 40 + b) // 20
    assert expr.render() == "(a*2)"
    assert (expr.min, expr.max) == (0, 20)


def test_acceptance_index_roundtrip():
    i0 = Variable("idx0", 0, 99)
    assert (((i0 // 1) % 10) * 10 + ((i0 // 10) % 10) * 1).render() == "(((idx0%10)*10)+(idx0//10))"
    i0, i1 = Variable("idx0", 0, 9), Variable("idx1", 0, 9)
    e = i0 * 10 + i1
    assert (((e % 10) * 10) + ((e // 10) % 10) * 1).render() == "((idx1*10)+idx0)"


# ----------------------------------------------------------------------------------------------------------------------
# rendering


def test_render_defaults(ab):
    a, b = ab
    assert NumNode(-3).render() == "-3"
    assert a.render() == "a"
    assert (a * 3).render() == "(a*3)"
    assert (a // 3).render() == "(a//3)"
    assert (a % 3).render() == "(a%3)"
    assert (a < 3).render() == "(a<3)"
    assert (b + a).render() == "(a+b)"
    assert Node.ands([a < 3, b < 4]).render() == "((a<3) and (b<4))"


def test_render_sum_sorts_as_strings():
    x, y = Variable("x", 0, 5), Variable("y", 0, 5)
    # "(x*2)" < "y" because "(" sorts before letters; constants are rendered and sorted too
    assert (y + x * 2 + 7).render() == "((x*2)+7+y)"


def test_render_debug_and_repr(ab):
    a, _ = ab
    assert a.render(ctx="DEBUG") == "a[0-10]"
    assert a.with_value(4).render(ctx="DEBUG") == "a[0-10=4]"
    assert repr(Variable("length", 4, 8)) == "<length[4-8]>"
    assert repr(Variable("a", 0, 10) * 2) == "<(a[0-10]*2)>"
    assert repr(NumNode(5)) == "<5>"
    assert repr(Variable("n", -3, 5)) == "<n[-3-5]>"


def test_render_custom_ops(ab):
    a, b = ab
    ops = dict(render_python)
    ops[Variable] = lambda n, ops, ctx: n.expr.upper()
    ops[MulNode] = lambda n, ops, ctx: f"mul({n.a.render(ops, ctx)}, {n.b})"
    assert (a * 3 + b).render(ops) == "(B+mul(A, 3))"
    seen = []
    ops[NumNode] = lambda n, ops, ctx: seen.append(ctx) or str(n.b)
    assert (a + 1).render(ops, "here") == "(1+A)"
    assert seen == ["here"]
    # a renderer may return any object, not only strings
    assert a.render({Variable: lambda n, ops, ctx: ("var", n.expr)}) == ("var", "a")
    with pytest.raises(KeyError):
        a.render({NumNode: render_python[NumNode]})


# ----------------------------------------------------------------------------------------------------------------------
# multiplication and sums


def test_mul_rules(ab):
    a, b = ab
    assert a * 0 == 0 and isinstance(a * 0, NumNode)
    assert a * 1 is a
    assert (a * 2) * 3 == a * 6
    assert 3 * a == a * 3
    assert (a + b + 1) * 2 == a * 2 + b * 2 + 2
    assert ((a + b + 1) * 2).render() == "((a*2)+(b*2)+2)"
    assert NumNode(3) * 4 == 12
    assert (-a).render() == "(a*-1)"
    assert ((-a).min, (-a).max) == (-10, 0)


def test_mul_node_node(ab):
    a, b = ab
    m = a * b
    assert isinstance(m, MulNode) and isinstance(m.b, Node)
    assert (m.min, m.max) == (0, 100)
    assert a * b == b * a
    assert a * NumNode(3) == a * 3
    n = Variable("n", -2, 3)
    assert ((a * n).min, (a * n).max) == (-20, 30)
    assert ((a * 2) * b).render() == "((a*b)*2)"
    assert (a + 1) * b == a * b + b
    assert a * b + b * a == (a * b) * 2


def test_sum_rules(ab):
    a, b = ab
    assert a + a == a * 2
    assert (a * 2 + a * 3).render() == "(a*5)"
    assert a + 0 is a
    assert (a + 3 + b + 4).render() == "(7+a+b)"
    assert a - a == 0 and isinstance(a - a, NumNode)
    assert (a + b) - b is a
    assert Node.sum([a, 1, b * 2, -1, (a + b) * -1]).render() == "b"
    assert Node.sum([]) == 0
    assert Node.sum([2, 3]) == 5
    s = a + b + 1
    assert isinstance(s, SumNode) and len(s.nodes) == 3
    assert 10 - a == -a + 10
    assert (10 - a).min == 0 and (10 - a).max == 10


def test_sum_equality_is_order_free(ab):
    a, b = ab
    c = Variable("c", 0, 3)
    assert a + b + c == c + b + a
    assert hash(a + b + c) == hash(c + a + b)
    assert SumNode([a, b]) == SumNode([b, a])
    assert SumNode([a, a, b]) != SumNode([a, b, b])


# ----------------------------------------------------------------------------------------------------------------------
# division and modulo


def test_div_rules(ab):
    a, b = ab
    assert a // 1 is a
    assert a // 11 == 0
    assert (a * 6) // 3 == a * 2
    assert (a * 3) // 6 == a // 2
    assert (a // 2) // 3 == a // 6
    assert ((a * 4) // 6).render() == "((a*2)//3)"
    assert ((a * 10 + b) // 5).render() == "((a*2)+(b//5))"
    assert ((a * 10 + 7) // 5).render() == "((a*2)+1)"
    assert ((a * 4 + 2) // 8).render() == "(a//2)"
    assert ((a * 4 + 6) // 8).render() == "((1+a)//2)"
    assert NumNode(-7) // 2 == -4


def test_div_floor_semantics_with_negatives():
    n = Variable("n", -5, 5)
    d = n // 2
    assert (d.min, d.max) == (-3, 2)
    assert ((n - 10) // 10).render() == "((n//10)+-1)"
    assert [sym_infer((n - 10) // 10, {n: v}) for v in (-5, -1, 0, 5)] == [-2, -2, -1, -1]


def test_mod_rules(ab):
    a, b = ab
    assert a % 1 == 0
    assert a % 11 is a
    assert (a * 5) % 5 == 0
    assert ((a % 20) % 10).render() == "(a%10)"
    assert ((a * 10 + b + 23) % 10).render() == "((3+b)%10)"
    assert ((a * 12) % 10).render() == "((a%5)*2)"
    assert NumNode(-7) % 3 == 2
    m = Variable("m", -9, -1)
    assert (m % 10).render() == "(10+m)"
    assert ((a + 3) % 2).min == 0 and ((a + 3) % 2).max == 1


def test_div_mod_by_bad_ints(ab):
    a, _ = ab
    with pytest.raises(ZeroDivisionError, match="zero"):
        _ = a // 0
    with pytest.raises(ZeroDivisionError, match="zero"):
        _ = a % 0
    with pytest.raises(ValueError, match="negative"):
        _ = a // -2
    with pytest.raises(ValueError, match="negative"):
        _ = a % -2
    with pytest.raises(TypeError):
        _ = a / 2
    with pytest.raises(TypeError):
        _ = 2 / a


def test_div_mod_by_node(ab):
    a, b = ab
    assert a // NumNode(5) == a // 5
    assert a % NumNode(5) == a % 5
    assert a // a == 1
    assert a % a == 0
    big = Variable("big", 11, 20)
    assert a // big == 0
    assert a % big is a
    assert a // (a + 1) == 0
    assert 5 // Variable("n", 6, 9) == 0
    assert 5 % Variable("n", 6, 9) == 5
    assert 12 // NumNode(5) == 2
    with pytest.raises(NotImplementedError, match=r"a // b"):
        _ = a // b
    with pytest.raises(NotImplementedError, match=r"a % b"):
        _ = a % b
    with pytest.raises(NotImplementedError, match="7"):
        _ = 7 // b
    with pytest.raises(ZeroDivisionError):
        _ = a // NumNode(0)


# ----------------------------------------------------------------------------------------------------------------------
# comparisons and ands


def test_lt_rules(ab):
    a, b = ab
    assert (a < 11) == 1 and isinstance(a < 11, NumNode)
    assert (a < 0) == 0
    assert (a < 5).render() == "(a<5)"
    assert ((a + 3) < 5).render() == "(a<2)"
    assert ((a * 2 + b * 4) < 7).render() == "(((b*2)+a)<4)"
    assert (a < b).render() == "(a<b)"
    assert (a < a + 1) == 1
    assert (a >= 11) == 0 and (a >= 0) == 1
    assert (a <= 10) == 1 and (a > 10) == 0
    assert create_lt_node(a, 5) == (a < 5)
    assert create_ge_node(a, 5) == (a >= 5)
    lt = a < 5
    assert isinstance(lt, LtNode) and (lt.min, lt.max) == (0, 1)


def test_ands(ab):
    a, b = ab
    assert Node.ands([]) == 1
    assert Node.ands([1, a < 11]) == 1
    assert Node.ands([a < 3, a < 0]) == 0
    assert Node.ands([a < 3, 1]) == (a < 3)
    both = Node.ands([a < 3, b < 4, a < 3])
    assert isinstance(both, AndNode) and len(both.nodes) == 2
    assert Node.ands([both, a < 5]).nodes == (a < 3, b < 4, a < 5)
    assert [sym_infer(both, {a: x, b: 1}) for x in (2, 3)] == [1, 0]


# ----------------------------------------------------------------------------------------------------------------------
# variables, binding, conversions, equality


def test_variable_construction():
    v = Variable("v", 3, 3)
    assert type(v) is Variable and (v.min, v.max) == (3, 3)
    assert v.expr == "v"
    with pytest.raises(ValueError, match="empty range"):
        Variable("v", 4, 3)
    with pytest.raises(ValueError, match="integer bounds"):
        Variable("v", 0.5, 3)
    with pytest.raises(ValueError, match="integer bounds"):
        Variable("v", 0, None)
    with pytest.raises(TypeError):
        Variable(3, 0, 1)


def test_bind_unbind_val(ab):
    a, b = ab
    # with_value gives a bound copy; bind binds an unbound Variable in place (see test_symbolic_tensor.py)
    a3 = a.with_value(3)
    assert type(a3) is Variable
    assert a3 == a and hash(a3) == hash(a) and a3.val == 3
    assert a3.unbind() == (a, 3)
    assert a3.unbind()[0]._val is None
    with pytest.raises(ValueError, match=r"a.*11.*\[0, 10\]"):
        a.bind(11)
    with pytest.raises(ValueError, match="not bound"):
        _ = a.val
    with pytest.raises(ValueError, match="not bound"):
        a.unbind()
    expr, vals = (a3 * 2 + b.with_value(5) + a).unbind()
    assert expr == a * 3 + b
    assert vals == {a: 3, b: 5}
    assert all(v._val is None for v in expr.vars())
    assert (a * 2).unbind() == (a * 2, {})
    assert sym_infer(a3 * 2 + 1, {}) == 7


def test_bool_int_index(ab):
    a, _ = ab
    assert bool(NumNode(1)) and not bool(NumNode(0))
    assert bool(a < 11)
    with pytest.raises(TypeError, match=r"symbolic expression \(1\+a\) has no truth value"):
        bool(a + 1)
    with pytest.raises(TypeError):
        if a < 5:
            pass
    assert int(NumNode(7)) == 7 and [0, 1, 2][NumNode(2)] == 2
    assert int(Variable("c", 4, 4)) == 4
    with pytest.raises(TypeError):
        int(a)
    with pytest.raises(TypeError):
        range(a)


def test_equality_and_hash(ab):
    a, b = ab
    assert NumNode(3) == 3 and 3 == NumNode(3) and hash(NumNode(3)) == hash(3)
    assert NumNode(3) != 4 and not (NumNode(3) != 3)
    assert a != b and a == Variable("a", 0, 10) and a != Variable("a", 0, 9)
    assert a != 3 and a != "a"
    assert a * 2 == MulNode(a, 2) and hash(a * 2) == hash(MulNode(a, 2))
    assert a * 2 != a // 2
    d = {a * 2 + b: "x", NumNode(3): "three"}
    assert d[b + a * 2] == "x" and d[3] == "three"
    assert len({a % 4, a % 4, (a + 0) % 4}) == 1


def test_vars_substitute_infer(ab):
    a, b = ab
    e = (a * 3 + b) // 4 + (a < b)
    assert e.vars() == {a, b}
    assert NumNode(1).vars() == set()
    assert e.substitute({a: 2, b: NumNode(5)}) == 3
    c = Variable("c", 0, 2)
    assert (a + b).substitute({a: c * 2}) == c * 2 + b
    assert sym_infer(5, {}) == 5
    assert sym_infer(e, {a: 2, b: 5}) == 3
    with pytest.raises(ValueError, match="no value for variable b"):
        sym_infer(a + b, {a: 1})


def test_raw_constructors_and_pickle(ab):
    a, b = ab
    raw = SumNode([a, NumNode(2), a])
    assert (raw.min, raw.max) == (2, 22) and raw.render() == "(2+a+a)"
    assert (DivNode(a, 3).min, DivNode(a, 3).max) == (0, 3)
    assert (ModNode(a, 4).min, ModNode(a, 4).max) == (0, 3)
    assert (LtNode(a, 11).min, LtNode(a, 11).max) == (1, 1)
    with pytest.raises(ZeroDivisionError):
        DivNode(a, 0)
    for node in (a * b + 3, (a * 7 + b) % 6, Node.ands([a < 3, b < 2]), a.with_value(4), NumNode(9)):
        back = pickle.loads(pickle.dumps(node))
        assert back == node and back.render(ctx="DEBUG") == node.render(ctx="DEBUG")


def test_sint_alias():
    assert sint == Union[int, Node]


def test_huge_bounds_do_not_overflow():
    v = Variable("v", 0, 2**62)
    e = v * 2**40 * 3 + 7
    assert e.max == 2**62 * 2**40 * 3 + 7
    assert (e // 2**40).render() == "(v*3)"


# ----------------------------------------------------------------------------------------------------------------------
# exact bounds for single operations


@settings(FUZZ, max_examples=60)
@given(lo=st.integers(-20, 20), width=st.integers(0, 20), c=st.integers(-6, 6), d=st.integers(1, 9))
def test_exact_single_op_bounds(lo, width, c, d):
    v = Variable("v", lo, lo + width)
    vals = range(lo, lo + width + 1)
    for node, fn in ((v * c, lambda x: x * c), (v // d, lambda x: x // d)):
        got = [fn(x) for x in vals]
        assert (node.min, node.max) == (min(got), max(got))
    if lo // d == (lo + width) // d:
        got = [x % d for x in vals]
        assert ((v % d).min, (v % d).max) == (min(got), max(got))
    w = Variable("w", -lo, -lo + width // 2)
    s = v + w
    assert (s.min, s.max) == (v.min + w.min, v.max + w.max)


# ----------------------------------------------------------------------------------------------------------------------
# brute-force fuzz against a plain-Python evaluator of the unsimplified expression


def _leaf(rng, vs):
    if rng.random() < 0.8:
        v = rng.choice(vs)
        return v, lambda env, name=v.expr: env[name]
    c = rng.randint(-6, 6)
    return NumNode(c), lambda env: c


def _build(rng, vs, depth):
    """A random expression tree as (Node, evaluator of the same tree without any simplification)."""
    if depth == 0 or rng.random() < 0.1:
        return _leaf(rng, vs)
    a, fa = _build(rng, vs, depth - 1)
    op = rng.choice(["add", "add", "sub", "mul", "mul", "div", "div", "mod", "mod", "lt", "neg", "node_div"])
    if op == "neg":
        return -a, lambda env: -fa(env)
    if op in ("div", "mod"):
        d = rng.randint(1, 12)
        if op == "div":
            return a // d, lambda env: fa(env) // d
        return a % d, lambda env: fa(env) % d
    if rng.random() < 0.6:
        b, fb = _build(rng, vs, depth - 1)
    else:
        c = rng.randint(-8, 8)
        b, fb = c, (lambda env: c)
    x, fx, y, fy = (b, fb, a, fa) if rng.random() < 0.5 else (a, fa, b, fb)
    if op == "add":
        return x + y, lambda env: fx(env) + fy(env)
    if op == "sub":
        return x - y, lambda env: fx(env) - fy(env)
    if op == "mul":
        return x * y, lambda env: fx(env) * fy(env)
    if op == "lt":
        return x < y, lambda env: int(fx(env) < fy(env))
    # a symbolic divisor: either it simplifies, or it raises and the left operand stands alone
    mod = rng.random() < 0.5
    try:
        out = x % y if mod else x // y
    except (NotImplementedError, ZeroDivisionError, ValueError):
        return a, fa
    if mod:
        return out, lambda env: fx(env) % fy(env)
    return out, lambda env: fx(env) // fy(env)


@st.composite
def _variables(draw):
    n = draw(st.integers(1, 3))
    vs = []
    for i in range(n):
        lo = draw(st.integers(-8, 8))
        vs.append(Variable(f"v{i}", lo, lo + draw(st.integers(0, 9 if n < 3 else 5))))
    return vs


@st.composite
def _expressions(draw):
    vs = draw(_variables())
    # the tree's shape comes from a seeded Random: hypothesis's own draws shrink towards tiny trees
    rng = random.Random(draw(st.integers(0, 2**32)))
    node, fn = _build(rng, vs, draw(st.integers(2, 5)))
    if not isinstance(node, Node):
        node = NumNode(node)
    return vs, node, fn


def _check(node, fn, vs):
    assert isinstance(node, Node)
    code = compile(node.render(), "<symbolic>", "eval")
    for vals in itertools.product(*(range(v.min, v.max + 1) for v in vs)):
        env = {v.expr: x for v, x in zip(vs, vals)}
        try:
            want = fn(env)
        except ZeroDivisionError:
            continue  # the unsimplified expression is undefined here
        assert sym_infer(node, dict(zip(vs, vals))) == want, (node, env)
        assert node.min <= want <= node.max, (node, env, want)
        assert int(eval(code, {}, env)) == want, (node.render(), env)


@settings(FUZZ, max_examples=600)
@given(case=_expressions())
def test_fuzz_simplification(case):
    vs, node, fn = case
    _check(node, fn, vs)


@settings(FUZZ, max_examples=300)
@given(case=_expressions(), data=st.data())
def test_fuzz_substitute(case, data):
    vs, node, fn = case
    v = data.draw(st.sampled_from(vs))
    if data.draw(st.booleans()):
        val = data.draw(st.integers(v.min, v.max))
        sub = node.substitute({v: val})
        rest = [w for w in vs if w is not v]
        _check(sub, lambda env: fn({**env, v.expr: val}), rest)
    else:
        # a narrower variable keeps every rewrite of the original valid
        lo = data.draw(st.integers(v.min, v.max))
        s = Variable("s", lo, data.draw(st.integers(lo, v.max)))
        sub = node.substitute({v: s})
        rest = [w for w in vs if w is not v] + [s]
        _check(sub, lambda env: fn({**env, v.expr: env["s"]}), rest)
