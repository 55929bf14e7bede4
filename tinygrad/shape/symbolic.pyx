"""Symbolic integer algebra for shapes and index expressions.

Nodes are immutable. Every operator returns a simplified node; all rewrites hold under Python floor-division
semantics for any sign of the numerator, and every node carries inclusive bounds ``min``/``max`` that contain its
value for every assignment of its variables.
"""

from collections import Counter
from math import gcd
from operator import index as _index
from typing import Union


class BindError(ValueError, AssertionError):
    """A Variable bound outside its bounds. Also an AssertionError, which is what tinygrad 0.9 raised there, so code
    written against it keeps catching it."""


# ---------------------------------------------------------------------------------------------------------------------
# coercion helpers

cdef object _as_int(object x):
    """x as a plain Python int, or None when x is not an integer (a Node never counts as one here)."""
    if isinstance(x, int):
        # int() turns bools and int subclasses into plain ints so renders and hashes stay canonical
        return int(x)
    if isinstance(x, Node):
        return None
    try:
        # accepts numpy integers and anything else that implements __index__, but not floats
        return _index(x)
    except TypeError:
        return None


cdef Node _to_node(object x):
    """x as a Node, or None when x is neither a Node nor an integer."""
    if isinstance(x, Node):
        return <Node>x
    v = _as_int(x)
    if v is None:
        return None
    return NumNode(v)


cdef int _check_divisor(Node x, object d, str op) except -1:
    if d == 0:
        raise ZeroDivisionError(f"symbolic {op} of {x.render()} by zero")
    if d < 0:
        # floor-division rewrites below assume a positive divisor; refusing keeps them provably valid
        raise ValueError(f"symbolic {op} of {x.render()} by the negative number {d} is not supported")
    return 0


cdef object _ceildiv(object a, object b):
    return -((-a) // b)


# ---------------------------------------------------------------------------------------------------------------------
# structural equality, hashing, traversal


cdef object _hash_of(Node n):
    if isinstance(n, NumNode):
        # must equal hash(int) because NumNode(3) == 3
        return hash((<NumNode>n).b)
    if isinstance(n, Variable):
        return hash((Variable, (<Variable>n).expr, n.min, n.max))
    if isinstance(n, OpNode):
        return hash((type(n), (<OpNode>n).a, (<OpNode>n).b))
    if isinstance(n, RedNode):
        # sums and ands are commutative: hash the set of terms, not their order
        return hash((type(n), frozenset((<RedNode>n).nodes), len((<RedNode>n).nodes)))
    return object.__hash__(n)


cdef bint _struct_eq(Node x, Node y) except -1:
    if x is y:
        return True
    if type(x) is not type(y) or hash(x) != hash(y):
        return False
    if isinstance(x, NumNode):
        return (<NumNode>x).b == (<NumNode>y).b
    if isinstance(x, Variable):
        return (<Variable>x).expr == (<Variable>y).expr and x.min == y.min and x.max == y.max
    if isinstance(x, OpNode):
        return bool((<OpNode>x).a == (<OpNode>y).a) and bool((<OpNode>x).b == (<OpNode>y).b)
    if isinstance(x, RedNode):
        if len((<RedNode>x).nodes) != len((<RedNode>y).nodes):
            return False
        return Counter((<RedNode>x).nodes) == Counter((<RedNode>y).nodes)
    return False


cdef object _eq(Node x, object other):
    if isinstance(other, Node):
        return _struct_eq(x, <Node>other)
    v = _as_int(other)
    if v is None:
        return NotImplemented
    # only a constant equals an int; NumNode(3) == 3 mirrors hash(NumNode(3)) == hash(3)
    return isinstance(x, NumNode) and (<NumNode>x).b == v


cdef int _collect_vars(Node n, list out) except -1:
    if isinstance(n, Variable):
        out.append(n)
    elif isinstance(n, OpNode):
        _collect_vars((<OpNode>n).a, out)
        if isinstance((<OpNode>n).b, Node):
            _collect_vars(<Node>(<OpNode>n).b, out)
    elif isinstance(n, RedNode):
        for t in (<RedNode>n).nodes:
            _collect_vars(<Node>t, out)
    return 0


cdef object _lookup_renderer(object ops, type cls):
    try:
        return ops[cls]
    except KeyError:
        pass
    # a subclass without its own entry renders like its closest ancestor that has one
    for base in cls.__mro__[1:]:
        if base in ops:
            return ops[base]
    raise KeyError(f"render: no entry for {cls.__name__} in the ops table")


# ---------------------------------------------------------------------------------------------------------------------
# node classes


cdef class Node:
    """A symbolic integer expression with inclusive, sound bounds ``min`` and ``max``.

    Build expressions with the operators (``+ - * // %`` and comparisons) or ``Node.sum``/``Node.ands``; they
    return simplified nodes. Equality and hashing are structural.
    """

    cpdef object render(self, object ops=None, object ctx=None):
        """Render through ``ops`` (node class -> fn(node, ops, ctx)); None means ``render_python``."""
        if ops is None:
            ops = render_python
        return _lookup_renderer(ops, type(self))(self, ops, ctx)

    def vars(self):
        """The set of Variables in this expression."""
        cdef list out = []
        _collect_vars(self, out)
        return set(out)

    cpdef Node substitute(self, object var_vals):
        """Replace Variables by the Nodes or ints in ``var_vals`` and simplify."""
        raise NotImplementedError(f"{type(self).__name__} does not implement substitute")

    def unbind(self):
        """(this expression with every bound Variable unbound, {unbound Variable: value})."""
        cdef list found = []
        _collect_vars(self, found)
        mapping, values = {}, {}
        for v in found:
            val = (<Variable>v)._val
            if val is None:
                continue
            u = Variable((<Variable>v).expr, (<Variable>v).min, (<Variable>v).max)
            if u in values and values[u] != val:
                raise ValueError(f"variable {u.expr} is bound to both {values[u]} and {val}")
            mapping[u] = u
            values[u] = val
        if not mapping:
            return self, {}
        return self.substitute(mapping), values

    # arithmetic ------------------------------------------------------------------------------------------------------

    def __neg__(self):
        return _mul_int(self, -1)

    def __add__(self, other):
        o = _to_node(other)
        if o is None:
            return NotImplemented
        return _sum([self, o])

    def __radd__(self, other):
        o = _to_node(other)
        if o is None:
            return NotImplemented
        return _sum([o, self])

    def __sub__(self, other):
        o = _to_node(other)
        if o is None:
            return NotImplemented
        return _sum([self, _mul_int(o, -1)])

    def __rsub__(self, other):
        o = _to_node(other)
        if o is None:
            return NotImplemented
        return _sum([o, _mul_int(self, -1)])

    def __mul__(self, other):
        if isinstance(other, Node):
            return _mul_node(self, <Node>other)
        c = _as_int(other)
        if c is None:
            return NotImplemented
        return _mul_int(self, c)

    def __rmul__(self, other):
        c = _as_int(other)
        if c is None:
            return NotImplemented
        return _mul_int(self, c)

    def __floordiv__(self, other):
        if isinstance(other, Node):
            return _div_node(self, <Node>other)
        c = _as_int(other)
        if c is None:
            return NotImplemented
        _check_divisor(self, c, "floor division")
        return _div_int(self, c)

    def __rfloordiv__(self, other):
        c = _as_int(other)
        if c is None:
            return NotImplemented
        return _div_node(NumNode(c), self)

    def __mod__(self, other):
        if isinstance(other, Node):
            return _mod_node(self, <Node>other)
        c = _as_int(other)
        if c is None:
            return NotImplemented
        _check_divisor(self, c, "modulo")
        return _mod_int(self, c)

    def __rmod__(self, other):
        c = _as_int(other)
        if c is None:
            return NotImplemented
        return _mod_node(NumNode(c), self)

    def __truediv__(self, other):
        raise TypeError(f"true division of symbolic expression {self.render()} is not supported, use //")

    def __rtruediv__(self, other):
        raise TypeError(f"true division by symbolic expression {self.render()} is not supported, use //")

    # comparisons build nodes; == and != stay structural so nodes work as dict keys --------------------------------

    def __lt__(self, other):
        if _to_node(other) is None:
            return NotImplemented
        return create_lt_node(self, other)

    def __le__(self, other):
        o = _to_node(other)
        if o is None:
            return NotImplemented
        return create_lt_node(self, o + 1)

    def __gt__(self, other):
        o = _to_node(other)
        if o is None:
            return NotImplemented
        return create_lt_node(-self, -o)

    def __ge__(self, other):
        if _to_node(other) is None:
            return NotImplemented
        return create_ge_node(self, other)

    def __eq__(self, other):
        return _eq(self, other)

    def __ne__(self, other):
        eq = _eq(self, other)
        if eq is NotImplemented:
            return NotImplemented
        return not eq

    def __hash__(self):
        if self._hash is None:
            self._hash = _hash_of(self)
        return self._hash

    # conversions -----------------------------------------------------------------------------------------------------

    def __bool__(self):
        if self.min == self.max:
            return bool(self.min)
        # an undecided comparison must never be silently truthy
        raise TypeError(f"symbolic expression {self.render()} has no truth value")

    def __int__(self):
        if self.min == self.max:
            return int(self.min)
        raise TypeError(f"symbolic expression {self.render()} is not a constant")

    def __index__(self):
        return self.__int__()

    def __repr__(self):
        return "<" + self.render(ctx="DEBUG") + ">"

    @staticmethod
    def sum(nodes):
        """The simplified sum of a list of Nodes and ints."""
        return _sum(list(nodes))

    @staticmethod
    def ands(nodes):
        """The simplified logical and of a list of Nodes and ints."""
        return _ands(list(nodes))


cdef class NumNode(Node):
    """An integer constant ``b``; equal to (and hashes like) the int itself."""

    def __init__(self, b):
        v = _as_int(b)
        if v is None:
            raise TypeError(f"NumNode needs an int, got {b!r}")
        self.b = v
        self.min = v
        self.max = v

    cpdef Node substitute(self, object var_vals):
        return self

    def __reduce__(self):
        return (NumNode, (self.b,))


cdef object _bound_as_int(object x):
    if isinstance(x, Node) and (<Node>x).min == (<Node>x).max:
        return (<Node>x).min
    return _as_int(x)


cdef class Variable(Node):
    """An integer variable named ``expr`` ranging over [nmin, nmax]; ``bind`` attaches a value."""

    def __init__(self, expr, nmin, nmax):
        if not isinstance(expr, str):
            raise TypeError(f"Variable name must be a str, got {expr!r}")
        lo, hi = _bound_as_int(nmin), _bound_as_int(nmax)
        if lo is None or hi is None:
            raise ValueError(f"Variable {expr} needs integer bounds, got {nmin!r} and {nmax!r}")
        if lo > hi:
            raise ValueError(f"Variable {expr} has an empty range: min {lo} > max {hi}")
        self.expr = expr
        self.min = lo
        self.max = hi
        self._val = None

    def bind(self, val):
        """This Variable carrying the value ``val``: bound in place and returned when unbound (as tinygrad 0.9 does,
        so ``v.bind(2)`` then ``Tensor(v)`` works); a bound Variable gives a bound copy (equal to it) instead."""
        cdef Variable out = self.with_value(val)
        if self._val is None:
            self._val = out._val
            return self
        return out

    def with_value(self, val):
        """A copy of this Variable (equal to it) carrying the value ``val``; this one is left as it is."""
        v = _bound_as_int(val)
        if v is None:
            raise ValueError(f"cannot bind {self.expr} to non-integer {val!r}")
        if not self.min <= v <= self.max:
            raise BindError(f"cannot bind {self.expr} to {v}: value outside its bounds [{self.min}, {self.max}]")
        cdef Variable out = Variable(self.expr, self.min, self.max)
        out._val = v
        return out

    @property
    def val(self):
        """The bound value; ValueError when unbound."""
        if self._val is None:
            raise ValueError(f"Variable {self.expr} is not bound to a value")
        return self._val

    def unbind(self):
        """(the unbound Variable, its value); ValueError when unbound."""
        if self._val is None:
            raise ValueError(f"cannot unbind {self.expr}: it is not bound to a value")
        return Variable(self.expr, self.min, self.max), self._val

    cpdef Node substitute(self, object var_vals):
        if self not in var_vals:
            return self
        v = var_vals[self]
        n = _to_node(v)
        if n is None:
            raise TypeError(f"cannot substitute {self.expr} with {v!r}: need a Node or an int")
        return n

    def __reduce__(self):
        return (_rebuild_variable, (self.expr, self.min, self.max, self._val))


def _rebuild_variable(expr, nmin, nmax, val):
    v = Variable(expr, nmin, nmax)
    return v if val is None else v.with_value(val)


cdef tuple _operands(object a, object b):
    """Normalize raw constructor operands: a becomes a Node, b an int or a non-constant-class Node."""
    na = _to_node(a)
    if na is None:
        raise TypeError(f"operand must be a Node or an int, got {a!r}")
    if isinstance(b, NumNode):
        return na, (<NumNode>b).b
    if isinstance(b, Node):
        return na, b
    vb = _as_int(b)
    if vb is None:
        raise TypeError(f"operand must be a Node or an int, got {b!r}")
    return na, vb


cdef class OpNode(Node):
    """A binary node with operands ``a`` (a Node) and ``b`` (an int or a Node)."""

    def __reduce__(self):
        return (type(self), (self.a, self.b))


cdef class MulNode(OpNode):
    """The product ``a * b``."""

    def __init__(self, a, b):
        self.a, self.b = _operands(a, b)
        cdef Node na = self.a
        if isinstance(self.b, Node):
            # a product of two ranges is bilinear, so its extremes sit at the corners
            corners = [na.min * self.b.min, na.min * self.b.max, na.max * self.b.min, na.max * self.b.max]
            self.min, self.max = min(corners), max(corners)
        elif self.b >= 0:
            self.min, self.max = na.min * self.b, na.max * self.b
        else:
            self.min, self.max = na.max * self.b, na.min * self.b

    cpdef Node substitute(self, object var_vals):
        b = self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b
        return self.a.substitute(var_vals) * b


cdef tuple _divisor_range(object b, str what):
    """(lo, hi) of a divisor, which may not be zero anywhere."""
    if isinstance(b, Node):
        lo, hi = (<Node>b).min, (<Node>b).max
    else:
        lo = hi = b
    if lo <= 0 <= hi:
        raise ZeroDivisionError(f"{what} by {b!r}, which can be zero")
    return lo, hi


cdef class DivNode(OpNode):
    """The floor quotient ``a // b``."""

    def __init__(self, a, b):
        self.a, self.b = _operands(a, b)
        cdef Node na = self.a
        lo, hi = _divisor_range(self.b, "DivNode")
        # floor(x / d) is monotonic in x and, on one side of zero, in d, so the corners bound it
        corners = [na.min // lo, na.min // hi, na.max // lo, na.max // hi]
        self.min, self.max = min(corners), max(corners)

    cpdef Node substitute(self, object var_vals):
        b = self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b
        return self.a.substitute(var_vals) // b


cdef class ModNode(OpNode):
    """The floor remainder ``a % b`` (the sign of b, as in Python)."""

    def __init__(self, a, b):
        self.a, self.b = _operands(a, b)
        cdef Node na = self.a
        lo, hi = _divisor_range(self.b, "ModNode")
        if lo == hi and na.min // lo == na.max // lo:
            # no wrap-around: the remainder is a shifted copy of a
            self.min, self.max = na.min % lo, na.max % lo
        elif lo > 0:
            self.min, self.max = 0, hi - 1
        else:
            self.min, self.max = lo + 1, 0

    cpdef Node substitute(self, object var_vals):
        b = self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b
        return self.a.substitute(var_vals) % b


cdef class LtNode(OpNode):
    """The comparison ``a < b`` as 0 or 1."""

    def __init__(self, a, b):
        self.a, self.b = _operands(a, b)
        cdef Node na = self.a
        if isinstance(self.b, Node):
            blo, bhi = self.b.min, self.b.max
        else:
            blo = bhi = self.b
        if na.max < blo:
            self.min = self.max = 1
        elif na.min >= bhi:
            self.min = self.max = 0
        else:
            self.min, self.max = 0, 1

    cpdef Node substitute(self, object var_vals):
        b = self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b
        return create_lt_node(self.a.substitute(var_vals), b)


cdef tuple _node_tuple(object nodes):
    cdef list out = []
    for t in nodes:
        n = _to_node(t)
        if n is None:
            raise TypeError(f"expected Nodes or ints, got {t!r}")
        out.append(n)
    return tuple(out)


cdef class RedNode(Node):
    """A node reducing the tuple ``nodes``."""

    def __reduce__(self):
        return (type(self), (list(self.nodes),))


cdef class SumNode(RedNode):
    """The sum of ``nodes``."""

    def __init__(self, nodes):
        self.nodes = _node_tuple(nodes)
        lo, hi = 0, 0
        for t in self.nodes:
            lo += (<Node>t).min
            hi += (<Node>t).max
        self.min, self.max = lo, hi

    cpdef Node substitute(self, object var_vals):
        return _sum([(<Node>t).substitute(var_vals) for t in self.nodes])


cdef class AndNode(RedNode):
    """The logical and of ``nodes`` as 0 or 1."""

    def __init__(self, nodes):
        self.nodes = _node_tuple(nodes)
        always_false, always_true = False, True
        for t in self.nodes:
            if (<Node>t).min == (<Node>t).max == 0:
                always_false = True
            if (<Node>t).min <= 0 <= (<Node>t).max:
                always_true = False
        if always_false:
            self.min = self.max = 0
        elif always_true:
            self.min = self.max = 1
        else:
            self.min, self.max = 0, 1

    cpdef Node substitute(self, object var_vals):
        return _ands([(<Node>t).substitute(var_vals) for t in self.nodes])


sint = Union[int, Node]

# ---------------------------------------------------------------------------------------------------------------------
# simplifying constructors


cdef object _accum(object n, object mult, dict coefs, list order):
    """Add mult*n into coefs (base term -> coefficient, first-seen order in order); return the constant part."""
    if isinstance(n, NumNode):
        return (<NumNode>n).b * mult
    if not isinstance(n, Node):
        return n * mult
    cdef Node node = <Node>n
    if node.min == node.max:
        return node.min * mult
    if isinstance(node, SumNode):
        c = 0
        for t in (<SumNode>node).nodes:
            c += _accum(t, mult, coefs, order)
        return c
    if isinstance(node, MulNode) and not isinstance((<MulNode>node).b, Node):
        return _accum((<MulNode>node).a, mult * (<MulNode>node).b, coefs, order)
    if node in coefs:
        coefs[node] += mult
    else:
        coefs[node] = mult
        order.append(node)
    return 0


cdef Node _sum(list nodes):
    cdef dict coefs = {}
    cdef list order = []
    const = 0
    for n in nodes:
        if not isinstance(n, Node) and _as_int(n) is None:
            raise TypeError(f"cannot add {n!r} to a symbolic expression")
        const += _accum(n if isinstance(n, Node) else _as_int(n), 1, coefs, order)
    cdef list terms = []
    for base in order:
        c = coefs[base]
        if c == 0:
            continue
        terms.append(base if c == 1 else MulNode(base, c))
    if const != 0:
        terms.append(NumNode(const))
    if not terms:
        return NumNode(0)
    if len(terms) == 1:
        return terms[0]
    return SumNode(terms)


cdef Node _mul_int(Node x, object c):
    if c == 0:
        return NumNode(0)
    if c == 1:
        return x
    if x.min == x.max:
        return NumNode(x.min * c)
    if isinstance(x, SumNode):
        return _sum([_mul_int(<Node>t, c) for t in (<SumNode>x).nodes])
    if isinstance(x, MulNode) and not isinstance((<MulNode>x).b, Node):
        return _mul_int((<MulNode>x).a, (<MulNode>x).b * c)
    return MulNode(x, c)


cdef Node _mul_node(Node x, Node y):
    if y.min == y.max:
        return _mul_int(x, y.min)
    if x.min == x.max:
        return _mul_int(y, x.min)
    # distributing keeps sums flat, so like terms of the product can still combine
    if isinstance(x, SumNode):
        return _sum([_mul_node(<Node>t, y) for t in (<SumNode>x).nodes])
    if isinstance(y, SumNode):
        return _sum([_mul_node(x, <Node>t) for t in (<SumNode>y).nodes])
    # integer coefficients go outermost so (a*b)*c and (a*c)*b meet as like terms
    if isinstance(x, MulNode) and not isinstance((<MulNode>x).b, Node):
        return _mul_int(_mul_node((<MulNode>x).a, y), (<MulNode>x).b)
    if isinstance(y, MulNode) and not isinstance((<MulNode>y).b, Node):
        return _mul_int(_mul_node(x, (<MulNode>y).a), (<MulNode>y).b)
    # a canonical operand order makes a*b and b*a structurally equal
    if x.render() > y.render():
        x, y = y, x
    return MulNode(x, y)


cdef tuple _decompose(Node x):
    """([(base, coef), ...], const) with x == sum(base*coef) + const."""
    if isinstance(x, NumNode):
        return [], (<NumNode>x).b
    items = (<SumNode>x).nodes if isinstance(x, SumNode) else (x,)
    cdef list terms = []
    const = 0
    for t in items:
        if isinstance(t, NumNode):
            const += (<NumNode>t).b
        elif isinstance(t, MulNode) and not isinstance((<MulNode>t).b, Node):
            terms.append(((<MulNode>t).a, (<MulNode>t).b))
        else:
            terms.append((t, 1))
    return terms, const


cdef Node _rebuild(list terms, object const):
    cdef list parts = [_mul_int(<Node>base, c) for base, c in terms]
    parts.append(const)
    return _sum(parts)


cdef Node _div_int(Node x, object b):
    """x // b for an int b >= 1."""
    if b == 1:
        return x
    lo, hi = x.min // b, x.max // b
    if lo == hi:
        return NumNode(lo)
    if isinstance(x, DivNode) and not isinstance((<DivNode>x).b, Node):
        # nested floor divisions by positive ints compose
        return _div_int((<DivNode>x).a, (<DivNode>x).b * b)
    terms, const = _decompose(x)
    cdef list quot = []
    cdef list rest = []
    for base, c in terms:
        if c % b == 0:
            quot.append((base, c // b))
        else:
            rest.append((base, c))
    q, r = divmod(const, b)
    if quot or q != 0:
        # x == b*Q + R with Q integral, so x // b == Q + R // b under floor semantics
        return _sum([_rebuild(quot, q), _div_int(_rebuild(rest, r), b)])
    g = b
    for _, c in terms:
        g = gcd(g, c)
    if g > 1:
        # (g*S + r) // (g*b') == (S + r//g) // b' because (g*S + r) // g == S + r//g
        return _div_int(_rebuild([(base, c // g) for base, c in terms], const // g), b // g)
    return DivNode(x, b)


cdef Node _mod_int(Node x, object b):
    """x % b for an int b >= 1."""
    if b == 1:
        return NumNode(0)
    lo, hi = x.min // b, x.max // b
    if lo == hi:
        # x never crosses a multiple of b, so the remainder is x shifted by a constant
        return _sum([x, -lo * b])
    terms, const = _decompose(x)
    cdef list kept = []
    changed = False
    for base, c in terms:
        if c % b == 0:
            changed = True
            continue
        if isinstance(base, ModNode) and not isinstance((<ModNode>base).b, Node) and ((<ModNode>base).b * c) % b == 0:
            # (y % a) * c differs from y * c by a multiple of a*c, itself a multiple of b
            base = (<ModNode>base).a
            changed = True
        # reduce the coefficient towards zero by multiples of b, keeping its sign
        c2 = c % b if c > 0 else -((-c) % b)
        if c2 != c:
            changed = True
        kept.append((base, c2))
    r = const % b
    if r != const:
        changed = True
    if changed:
        return _mod_int(_rebuild(kept, r), b)
    g = b
    for _, c in terms:
        g = gcd(g, c)
    if g > 1:
        # with x == g*(S + r//g) + r%g and b == g*b': x % b == g*((S + r//g) % b') + r%g
        inner = _rebuild([(base, c // g) for base, c in terms], const // g)
        return _sum([_mul_int(_mod_int(inner, b // g), g), const % g])
    return ModNode(x, b)


cdef Node _div_node(Node x, Node y):
    if y.min == y.max:
        _check_divisor(x, y.min, "floor division")
        return _div_int(x, y.min)
    if x == y:
        # wherever x is nonzero this holds; where x is zero the expression itself is undefined
        return NumNode(1)
    if x.min >= 0 and (x.max < y.min or (y - x).min > 0):
        # 0 <= x < y for every assignment; the difference catches correlated operands such as i and i+1
        return NumNode(0)
    raise NotImplementedError(f"symbolic floor division {x.render()} // {y.render()} does not simplify; "
                              "only constant divisors are supported")


cdef Node _mod_node(Node x, Node y):
    if y.min == y.max:
        _check_divisor(x, y.min, "modulo")
        return _mod_int(x, y.min)
    if x == y:
        # wherever x is nonzero this holds; where x is zero the expression itself is undefined
        return NumNode(0)
    if x.min >= 0 and (x.max < y.min or (y - x).min > 0):
        # 0 <= x < y for every assignment; the difference catches correlated operands such as i and i+1
        return x
    raise NotImplementedError(f"symbolic modulo {x.render()} % {y.render()} does not simplify; "
                              "only constant divisors are supported")


cdef Node _ands(list nodes):
    cdef list flat = []
    cdef list out = []
    for t in nodes:
        n = _to_node(t)
        if n is None:
            raise TypeError(f"Node.ands expects Nodes or ints, got {t!r}")
        if isinstance(n, AndNode):
            flat.extend((<AndNode>n).nodes)
        else:
            flat.append(n)
    for t in flat:
        n = <Node>t
        if n.min == n.max == 0:
            return NumNode(0)
        if n.min > 0 or n.max < 0:
            # can never be zero, so it never falsifies the conjunction
            continue
        if n not in out:
            out.append(n)
    if not out:
        return NumNode(1)
    if len(out) == 1:
        return out[0]
    return AndNode(out)


cpdef Node create_lt_node(object lhs, object b):
    """The simplified node for ``lhs < b``."""
    cdef Node x = _to_node(lhs)
    if x is None:
        raise TypeError(f"cannot compare {lhs!r}")
    if isinstance(b, Node) and (<Node>b).min != (<Node>b).max:
        diff = x - b
        if diff.max < 0:
            return NumNode(1)
        if diff.min >= 0:
            return NumNode(0)
        return LtNode(x, b)
    c = _bound_as_int(b)
    if c is None:
        raise TypeError(f"cannot compare {x.render()} with {b!r}")
    if x.max < c:
        return NumNode(1)
    if x.min >= c:
        return NumNode(0)
    terms, const = _decompose(x)
    if terms and (const != 0 or len(terms) > 1 or terms[0][1] != 1):
        # move the constant to the right, then divide by the coefficients' gcd g:
        # g*S < c  <=>  S < ceil(c/g) for integral S
        g = 0
        for _, k in terms:
            g = gcd(g, k)
        c = _ceildiv(c - const, g)
        x = _rebuild([(base, k // g) for base, k in terms], 0)
        if x.max < c:
            return NumNode(1)
        if x.min >= c:
            return NumNode(0)
    return LtNode(x, c)


cpdef Node create_ge_node(object lhs, object b):
    """The simplified node for ``lhs >= b``, as ``-lhs < -b + 1``."""
    cdef Node x = _to_node(lhs)
    if x is None:
        raise TypeError(f"cannot compare {lhs!r}")
    nb = _to_node(b)
    if nb is None:
        raise TypeError(f"cannot compare {x.render()} with {b!r}")
    return create_lt_node(-x, -nb + 1)


# ---------------------------------------------------------------------------------------------------------------------
# evaluation


cdef object _eval(Node n, object var_vals):
    if isinstance(n, NumNode):
        return (<NumNode>n).b
    if isinstance(n, Variable):
        if n in var_vals:
            v = var_vals[n]
            # a value given as a constant Node is accepted; a symbolic one cannot be evaluated
            iv = int(v) if isinstance(v, Node) else _as_int(v)
            if iv is None:
                raise TypeError(f"sym_infer: value {v!r} for {(<Variable>n).expr} is not an int")
            return iv
        if (<Variable>n)._val is not None:
            return (<Variable>n)._val
        raise ValueError(f"sym_infer: no value for variable {(<Variable>n).expr}")
    if isinstance(n, OpNode):
        a = _eval((<OpNode>n).a, var_vals)
        b = (<OpNode>n).b
        if isinstance(b, Node):
            b = _eval(<Node>b, var_vals)
        if isinstance(n, MulNode):
            return a * b
        if isinstance(n, DivNode):
            return a // b
        if isinstance(n, ModNode):
            return a % b
        if isinstance(n, LtNode):
            return int(a < b)
    elif isinstance(n, SumNode):
        total = 0
        for t in (<SumNode>n).nodes:
            total += _eval(<Node>t, var_vals)
        return total
    elif isinstance(n, AndNode):
        for t in (<AndNode>n).nodes:
            if _eval(<Node>t, var_vals) == 0:
                return 0
        return 1
    raise TypeError(f"sym_infer: cannot evaluate {type(n).__name__}")


cpdef object sym_infer(object a, object var_vals):
    """The int value of ``a`` (an int passes through) with Variables taken from ``var_vals`` or their binding."""
    if isinstance(a, Node):
        return _eval(<Node>a, var_vals)
    return a


# ---------------------------------------------------------------------------------------------------------------------
# default renderer


def _render_operand(x, ops, ctx):
    return x.render(ops, ctx) if isinstance(x, Node) else str(x)


def _render_num(node, ops, ctx):
    return str(node.b)


def _render_variable(node, ops, ctx):
    if isinstance(ctx, str) and ctx == "DEBUG":
        bound = "" if node._val is None else f"={node._val}"
        return f"{node.expr}[{node.min}-{node.max}{bound}]"
    return node.expr


def _render_mul(node, ops, ctx):
    return f"({node.a.render(ops, ctx)}*{_render_operand(node.b, ops, ctx)})"


def _render_div(node, ops, ctx):
    return f"({node.a.render(ops, ctx)}//{_render_operand(node.b, ops, ctx)})"


def _render_mod(node, ops, ctx):
    return f"({node.a.render(ops, ctx)}%{_render_operand(node.b, ops, ctx)})"


def _render_lt(node, ops, ctx):
    return f"({node.a.render(ops, ctx)}<{_render_operand(node.b, ops, ctx)})"


def _render_sum(node, ops, ctx):
    # sorted so that the rendering does not depend on the order terms were added in
    return "(" + "+".join(sorted([t.render(ops, ctx) for t in node.nodes])) + ")"


def _render_and(node, ops, ctx):
    return "(" + " and ".join(sorted([t.render(ops, ctx) for t in node.nodes])) + ")"


render_python = {
    NumNode: _render_num,
    Variable: _render_variable,
    MulNode: _render_mul,
    DivNode: _render_div,
    ModNode: _render_mod,
    LtNode: _render_lt,
    SumNode: _render_sum,
    AndNode: _render_and,
}
