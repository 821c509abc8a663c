"""Activation fusion into Conv/Gemm, residual Add into Conv, and HardSwish spellings.

The fused forms (Conv and Gemm attributes): `activation` (str, "" = none) and
`activation_params` (list of floats); Conv takes an optional 4th input Z:
    y = activation(conv(x, W) + B + Z)
"""
from __future__ import annotations

from ..ir import Graph, Node
from .util import (View, close, new_node, replace_chain, rewrite_and_note,
                   sample_bindings)

FUSABLE_PRODUCERS = ("Conv", "Gemm")


def _clip_bounds(view: View, node: Node) -> tuple[float | None, float | None] | None:
    """(min, max) of a Clip with constant bounds (None = unbounded); None if not constant."""
    lo = hi = None
    if "min" in node.attrs or "max" in node.attrs:  # opset < 11 spelling
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    if len(node.inputs) > 1 and node.inputs[1]:
        lo = view.scalar(node.inputs[1])
        if lo is None:
            return None
    if len(node.inputs) > 2 and node.inputs[2]:
        hi = view.scalar(node.inputs[2])
        if hi is None:
            return None
    return lo, hi


def activation_of(view: View, node: Node) -> tuple[str, list[float]] | None:
    """The (activation, params) a single-input activation node computes, if fusable."""
    op = node.op
    if op in ("Relu", "Sigmoid", "HardSwish"):
        return op, []
    if op == "Gelu":
        return ("Gelu", []) if node.attrs.get("approximate", "none") == "none" else None
    if op == "LeakyRelu":
        return op, [float(node.attrs.get("alpha", 0.01))]
    if op == "HardSigmoid":
        return op, [float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5))]
    if op == "Clip":
        bounds = _clip_bounds(view, node)
        if bounds is None:
            return None
        lo, hi = bounds
        if hi is None:
            return ("Relu", []) if lo == 0.0 else None
        if lo is None:
            return None
        return "Clip", [float(lo), float(hi)]
    return None


ACTIVATION_OPS = ("Relu", "Sigmoid", "HardSwish", "Gelu", "LeakyRelu", "HardSigmoid", "Clip",
                  "PRelu")


def prelu_of(view: View, node: Node, producer: Node) -> tuple[str, list[float]] | None:
    """PRelu(y, slope const) after `producer`: one slope is LeakyRelu (any producer); one
    slope per output channel of a Conv is the fused per-channel PRelu, taken only by a
    group-1 Conv that is pointwise or reads <= 8 channels, whose best kernels (the packed
    sgemm reading the image in place, conv_direct) carry that epilogue: a 3x3 Conv keeps
    Winograd by leaving its PRelu a separate pass."""
    slope = view.const(node.inputs[1]) if len(node.inputs) > 1 else None
    if slope is None or slope.dtype.kind != "f" or slope.size == 0:
        return None
    if slope.size == 1:
        return "LeakyRelu", [float(slope.reshape(-1)[0])]
    w = view.const(producer.inputs[1]) if producer.op == "Conv" else None
    if w is None or int(producer.attrs.get("group", 1)) != 1 or slope.ndim > w.ndim:
        return None
    shape = (1,) * (w.ndim - slope.ndim) + slope.shape
    if shape[1] != w.shape[0] or any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    if any(k != 1 for k in w.shape[2:]) and w.shape[1] > 8:
        return None
    return "PRelu", [float(v) for v in slope.reshape(-1)]


def _supported() -> set[str]:
    """Which activations the fused Conv / Gemm kernels implement (the nn family's table)."""
    from ..shapes.nn import ACTIVATIONS
    return {a for a in ACTIVATIONS if a}


def _free(node: Node) -> bool:
    """A Conv / Gemm, or a float-output QConv / QGemm (no y_scale: their epilogue is
    float), with no activation yet."""
    if node.attrs.get("activation"):
        return False
    if node.op in ("QConv", "QGemm"):
        return len(node.inputs) < 7 or not node.inputs[6]
    return node.op in FUSABLE_PRODUCERS


def _takes(node: Node, activation: str) -> bool:
    """QConv's epilogue has no Gelu (graph/shapes/quant.py QCONV_ACTIVATIONS); the
    per-channel PRelu is a float Conv's only."""
    if activation == "PRelu":
        return node.op == "Conv"
    return node.op != "QConv" or activation != "Gelu"


def fuse_activation(graph: Graph) -> bool:
    """Conv/Gemm with no activation, followed by an activation => activation attrs.

    Also the SiLU pattern Mul(x, Sigmoid(x)) with x the Conv/Gemm output.
    """
    ops = graph.op_counts()
    if not any(op in ops for op in FUSABLE_PRODUCERS + ("QConv", "QGemm")):
        return False
    supported = _supported()

    def rewrite(graph: Graph, view: View, act: Node) -> bool:
        if act.op == "Mul":
            return "SiLU" in supported and _fuse_silu(graph, view, act)
        if not act.inputs or act.op not in ACTIVATION_OPS:
            return False
        x = act.inputs[0]
        p = view.prod(x)
        if p is None or not _free(p) or view.only_use(x) is not act:
            return False
        found = prelu_of(view, act, p) if act.op == "PRelu" else activation_of(view, act)
        if found is None or found[0] not in supported or not _takes(p, found[0]):
            return False
        p.attrs["activation"], p.attrs["activation_params"] = found[0], list(found[1])
        p.outputs = [act.outputs[0]]
        replace_chain(graph, [p, act], p)
        return True

    return rewrite_and_note(graph, rewrite, "activation_fused")


def _fuse_silu(graph: Graph, view: View, mul: Node) -> bool:
    if len(mul.inputs) != 2:
        return False
    for x, s in (mul.inputs, mul.inputs[::-1]):
        sig = view.prod(s, "Sigmoid")
        p = view.prod(x)
        if sig is None or sig.inputs[0] != x or p is None or not _free(p):
            continue
        if not view.private(x, sig, mul) or not view.private(s, mul):
            continue
        p.attrs["activation"], p.attrs["activation_params"] = "SiLU", []
        p.outputs = [mul.outputs[0]]
        replace_chain(graph, [p, sig, mul], p)
        return True
    return False


# -- HardSwish spellings -----------------------------------------------------------------
def _hardswish_from_hardsigmoid(view: View, mul: Node):
    """Mul(x, HardSigmoid(x; alpha=1/6, beta=0.5)) -> (x, nodes)."""
    for x, h in (mul.inputs, mul.inputs[::-1]):
        hs = view.prod(h, "HardSigmoid")
        if hs is None or hs.inputs[0] != x or not view.private(h, mul):
            continue
        if close(float(hs.attrs.get("alpha", 0.2)), 1 / 6) and \
                close(float(hs.attrs.get("beta", 0.5)), 0.5):
            return x, [hs, mul]
    return None


def _relu6_of_x_plus_3(view: View, name: str):
    """`name` = Clip(Add(x, 3), 0, 6) (private chain) -> (x, [add, clip])."""
    clip = view.prod(name, "Clip")
    if clip is None:
        return None
    bounds = _clip_bounds(view, clip)
    if bounds is None or bounds[0] != 0.0 or bounds[1] != 6.0:
        return None
    add = view.prod(clip.inputs[0], "Add")
    if add is None or not view.private(clip.inputs[0], clip):
        return None
    co = view.const_operand(add)
    if co is None or not close(co[1], 3.0):
        return None
    return co[0], [add, clip]


def _div6(view: View, node: Node) -> str | None:
    """If `node` computes t / 6 (Div by 6 or Mul by 1/6): t."""
    if node.op == "Div" and close(view.scalar(node.inputs[1]), 6.0) and \
            not view.is_const(node.inputs[0]):
        return node.inputs[0]
    if node.op == "Mul":
        co = view.const_operand(node)
        if co is not None and close(co[1], 1 / 6):
            return co[0]
    return None


def _hardswish_from_relu6(view: View, last: Node):
    """x * Relu6(x + 3) / 6 in the orders exporters use; `last` is the final node."""
    # (x * r) / 6
    t = _div6(view, last)
    if t is not None:
        m = view.prod(t, "Mul")
        if m is not None and view.private(t, last):
            for x, r in (m.inputs, m.inputs[::-1]):
                found = _relu6_of_x_plus_3(view, r)
                if found and found[0] == x and view.private(r, m):
                    return x, found[1] + [m, last]
    # x * (r / 6)
    if last.op == "Mul" and len(last.inputs) == 2:
        for x, q in (last.inputs, last.inputs[::-1]):
            d = view.prod(q, ("Div", "Mul"))
            if d is None or not view.private(q, last):
                continue
            r = _div6(view, d)
            if r is None:
                continue
            found = _relu6_of_x_plus_3(view, r)
            if found and found[0] == x and view.private(r, d):
                return x, found[1] + [d, last]
    return None


def normalize_hardswish(graph: Graph) -> bool:
    """x * HardSigmoid(x) and x * Relu6(x + 3) / 6 => HardSwish(x)."""
    ops = graph.op_counts()
    if "Mul" not in ops or not ("HardSigmoid" in ops or "Clip" in ops):
        return False

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        if node.op not in ("Mul", "Div"):
            return False
        found = None
        if node.op == "Mul" and "HardSigmoid" in ops:
            found = _hardswish_from_hardsigmoid(view, node)
        if found is None and "Clip" in ops:
            found = _hardswish_from_relu6(view, node)
        if found is None:
            return False
        x, chain = found
        hs = new_node(graph, "HardSwish", [x], [node.outputs[0]], {}, "hardswish")
        replace_chain(graph, chain, hs)
        return True

    return rewrite_and_note(graph, rewrite, "hardswish_normalized")


# -- residual Add into Conv ---------------------------------------------------------------
class _ShapeOracle:
    """Decides whether two tensors provably have the same shape (see sample_bindings)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._sets = None

    def same(self, a: str, b: str) -> bool:
        if self._sets is None:
            self._sets = sample_bindings(self.graph)
        for infos in self._sets:
            ia, ib = infos.get(a), infos.get(b)
            if ia is None or ib is None or ia.shape != ib.shape or ia.dtype != ib.dtype:
                return False
        return True


def fuse_residual_add(graph: Graph) -> bool:
    """Add(Conv(x), Z) with Z of the same shape => Conv(x, W, B, Z) (no activation yet).

    The same for Gemm: Add(Gemm(a), Z) => Gemm(a, B, C, Z) (transformer residuals).
    """
    ops = graph.op_counts()
    if "Add" not in ops or not ("Conv" in ops or "Gemm" in ops):
        return False
    oracle = _ShapeOracle(graph)

    def rewrite(graph: Graph, view: View, add: Node) -> bool:
        if add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
            return False
        for c, z in (add.inputs[::-1], add.inputs):  # prefer the later operand as the conv
            conv = view.prod(c, ("Conv", "Gemm"))
            if conv is None or conv.attrs.get("activation") or view.only_use(c) is not add:
                continue
            if len(conv.inputs) > 3 and conv.inputs[3]:
                continue
            if view.is_const(z) or not oracle.same(c, z):
                continue
            ins = list(conv.inputs) + [""] * (3 - len(conv.inputs))
            conv.inputs = ins[:3] + [z]
            conv.outputs = [add.outputs[0]]
            replace_chain(graph, [conv, add], conv)
            return True
        return False

    return rewrite_and_note(graph, rewrite, "residual_add_fused")
