"""Facts about index and size expressions (ints or symbolic Nodes) that the linearizer asks while it lowers a kernel:
products of sizes, equal sizes, the largest index of a dim, and whether every value of an index is even."""
from __future__ import annotations

from tinygrad.shape.symbolic import MulNode, Node, NumNode, SumNode


def terms(node):
    return list(node.nodes) if isinstance(node, SumNode) else [node]


def all_even(node, even_var):
    """Is every value of `node` even? Where each term is a multiple of 2: an even constant, `even_var` (a
    Variable known to be even), or a product of either."""
    for t in terms(node):
        if isinstance(t, NumNode):
            if t.b % 2:
                return False
        elif isinstance(t, MulNode):
            if not ((isinstance(t.b, int) and t.b % 2 == 0) or t.a is even_var):
                return False
        elif t is not even_var:
            return False
    return True


def sint_prod(xs):
    """The product of ints and symbolic sizes (an int when every factor is)."""
    out = 1
    for x in xs:
        out = x * out if isinstance(x, Node) else out * x
    return out


def same_size(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return (not isinstance(a, int)) and (not isinstance(b, int)) and a == b


def max_index(s):
    return s - 1 if isinstance(s, int) else s.max - 1
