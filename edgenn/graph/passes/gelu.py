"""GELU spelled out by exporters => Gelu (ONNX opset 20 op).

exact:  x * 0.5 * (1 + Erf(x / sqrt(2)))    (Div by 1.4142 or Mul by 0.7071; the 0.5
        multiply first, last, or on the Erf branch)
tanh:   0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   => approximate="tanh"
"""
from __future__ import annotations

import math

from ..ir import Graph, Node
from .util import View, close, new_node, replace_chain, rewrite_and_note

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _scaled_input(view: View, node: Node, div_by: float) -> str | None:
    """If node is Div(x, div_by) or Mul(x, 1/div_by): x."""
    if node.op == "Div" and close(view.scalar(node.inputs[1]), div_by) and \
            not view.is_const(node.inputs[0]):
        return node.inputs[0]
    if node.op == "Mul":
        co = view.const_operand(node)
        if co is not None and close(co[1], 1.0 / div_by):
            return co[0]
    return None


def _half_product(view: View, x: str, a: str, a_node: Node):
    """Find y = x * 0.5 * a in any association, a (the 1 + f(x) branch) private.

    Returns (output tensor, nodes) or None.
    """
    n1 = view.only_use(a)
    if n1 is None or n1.op != "Mul":
        return None
    other = view.other_input(n1, a)
    # (x * a) * 0.5
    if other == x:
        n2 = view.only_use(n1.outputs[0])
        if n2 is not None and n2.op == "Mul":
            co = view.const_operand(n2)
            if co and co[0] == n1.outputs[0] and close(co[1], 0.5):
                return n2.outputs[0], [n1, n2]
        return None
    # (a * 0.5) * x
    co = view.const_operand(n1)
    if co and co[0] == a and close(co[1], 0.5):
        n2 = view.only_use(n1.outputs[0])
        if n2 is not None and n2.op == "Mul" and view.other_input(n2, n1.outputs[0]) == x:
            return n2.outputs[0], [n1, n2]
        return None
    # (x * 0.5) * a
    h = view.prod(other, "Mul") if other else None
    if h is not None and view.only_use(other) is n1:
        co = view.const_operand(h)
        if co and co[0] == x and close(co[1], 0.5):
            return n1.outputs[0], [h, n1]
    return None


def _one_plus(view: View, t: str):
    """The private Add(t, 1) reading t -> node."""
    add = view.only_use(t)
    if add is None or add.op != "Add":
        return None
    co = view.const_operand(add)
    if co is None or co[0] != t or not close(co[1], 1.0):
        return None
    return add


def _gelu_tail(view: View, x: str, f: str):
    """The shared end of both spellings: y = x * 0.5 * (1 + f), f = Erf(..) or Tanh(..)
    output, every step private. Returns (y, [Add(f, 1), the Mul nodes]) or None."""
    plus = _one_plus(view, f)
    if plus is None:
        return None
    found = _half_product(view, x, plus.outputs[0], plus)
    if found is None:
        return None
    y, tail = found
    return y, [plus] + tail


def _match_erf(view: View, erf: Node):
    src = view.prod(erf.inputs[0], ("Div", "Mul"))
    if src is None or view.only_use(erf.inputs[0]) is not erf:
        return None
    x = _scaled_input(view, src, SQRT2)
    if x is None:
        return None
    found = _gelu_tail(view, x, erf.outputs[0])
    if found is None:
        return None
    y, tail = found
    return x, y, [src, erf] + tail, "none"


def _match_tanh(view: View, tanh: Node):
    """Tanh(c * (x + 0.044715 * x^3)) with x^3 as Pow(x, 3) or x*x*x."""
    inner = view.prod(tanh.inputs[0], "Mul")
    if inner is None or view.only_use(tanh.inputs[0]) is not tanh:
        return None
    co = view.const_operand(inner)
    if co is None or not close(co[1], SQRT_2_OVER_PI, 1e-3):
        return None
    s = co[0]
    add = view.prod(s, "Add")
    if add is None or view.only_use(s) is not inner or len(add.inputs) != 2:
        return None
    for x, c in (add.inputs, add.inputs[::-1]):
        k = view.prod(c, "Mul")
        if k is None or view.only_use(c) is not add:
            continue
        kc = view.const_operand(k)
        if kc is None or not close(kc[1], 0.044715, 1e-3):
            continue
        cube = _cube_of(view, kc[0], x)
        if cube is None:
            continue
        found = _gelu_tail(view, x, tanh.outputs[0])
        if found is None:
            return None
        y, tail = found
        return x, y, cube + [k, add, inner, tanh] + tail, "tanh"
    return None


def _cube_of(view: View, t: str, x: str) -> list[Node] | None:
    """If t = x^3 (Pow(x, 3) or Mul(Mul(x, x), x)), privately: the nodes."""
    p = view.prod(t)
    if p is None or view.only_use(t) is None:
        return None
    if p.op == "Pow" and p.inputs[0] == x and close(view.scalar(p.inputs[1]), 3.0):
        return [p]
    if p.op == "Mul" and x in p.inputs:
        sq = view.other_input(p, x)
        q = view.prod(sq, "Mul") if sq else None
        if q is not None and q.inputs == [x, x] and view.only_use(sq) is p:
            return [q, p]
    return None


def fuse_gelu(graph: Graph) -> bool:
    ops = graph.op_counts()
    if "Erf" not in ops and "Tanh" not in ops:
        return False

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        if node.op == "Erf":
            found = _match_erf(view, node)
        elif node.op == "Tanh":
            found = _match_tanh(view, node)
        else:
            return False
        if found is None:
            return False
        x, y, chain, approx = found
        gelu = new_node(graph, "Gelu", [x], [y], {"approximate": approx}, "gelu")
        replace_chain(graph, chain, gelu)
        return True

    return rewrite_and_note(graph, rewrite, "gelu_fused")
