"""The decomposed LayerNorm of torch/paddle exports => LayerNormalization.

    m = ReduceMean(x, axes)        axes: trailing axes (constant input, keepdims=1)
    d = Sub(x, m)
    p = Pow(d, 2) | Mul(d, d)
    v = ReduceMean(p, axes)
    e = Add(v, eps)
    s = Sqrt(e)
    n = Div(d, s) | Mul(d, Reciprocal(s))
    [g = Mul(n, gamma)] [y = Add(g, beta)]

The decomposed RMS norm (torch exports of Llama-family models, and any graph spelling
onnxruntime's SimplifiedLayerNormalization in standard ops) => RMSNormalization:

    p = Pow(x, 2) | Mul(x, x)
    v = ReduceMean(p, axes)        axes: trailing axes, keepdims=1
    e = Add(v, eps)                eps: a constant scalar
    s = Sqrt(e)
    n = Div(x, s) | Mul(x, Reciprocal(s) | Div(1, s))
    [y = Mul(n, gamma) | Mul(gamma, n)]    gamma: a constant over the normalized axes

fuse_rmsnorm runs after fuse_layernorm: a LayerNorm's d, p, v, e, s, n is itself an RMS
norm of d, and fuse_layernorm takes the whole chain first.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import (View, close, new_node, rank_of, replace_chain, rewrite_and_note,
                   sample_bindings)


def _trailing_axes(view: View, graph: Graph, rm: Node, infos) -> list[int] | None:
    """The axes of a ReduceMean as negative trailing axes [-k..-1], if they are that."""
    if rm.attrs.get("keepdims", 1) != 1 or rm.attrs.get("noop_with_empty_axes", 0):
        return None
    axes = None
    if len(rm.inputs) > 1 and rm.inputs[1]:
        a = view.const(rm.inputs[1])
        if a is None:
            return None
        axes = [int(v) for v in np.asarray(a).reshape(-1)]
    elif "axes" in rm.attrs:
        axes = [int(v) for v in rm.attrs["axes"]]
    if not axes:
        return None
    if any(a >= 0 for a in axes):
        r = rank_of(graph, view, rm.inputs[0], infos)
        if r is None:
            return None
        axes = [a - r if a >= 0 else a for a in axes]
    axes = sorted(set(axes))
    return axes if axes == list(range(-len(axes), 0)) else None


def _match(graph: Graph, view: View, rm: Node, infos):
    """rm is the first ReduceMean; return (x, axes, eps, normalized tensor, chain)."""
    x = rm.inputs[0]
    axes = _trailing_axes(view, graph, rm, infos)
    if axes is None or view.is_const(x):
        return None
    m = rm.outputs[0]
    sub = view.only_use(m)
    if sub is None or sub.op != "Sub" or sub.inputs != [x, m]:
        return None
    d = sub.outputs[0]
    users = view.uses(d)
    if d in view.outputs or len(users) != 2:
        return None
    sq = next((u for u in users if u.op == "Pow" or (u.op == "Mul" and u.inputs == [d, d])),
              None)
    div = next((u for u in users if u is not sq), None)
    if sq is None or div is None:
        return None
    if sq.op == "Pow" and (sq.inputs[0] != d or not close(view.scalar(sq.inputs[1]), 2.0)):
        return None
    rm2 = view.only_use(sq.outputs[0])
    if rm2 is None or rm2.op != "ReduceMean" or _trailing_axes(view, graph, rm2, infos) != axes:
        return None
    add = view.only_use(rm2.outputs[0])
    if add is None or add.op != "Add":
        return None
    co = view.const_operand(add)
    if co is None or co[0] != rm2.outputs[0] or not (0 <= co[1] < 1e-2):
        return None
    eps = co[1]
    sqrt = view.only_use(add.outputs[0])
    if sqrt is None or sqrt.op != "Sqrt":
        return None
    s = sqrt.outputs[0]
    chain = [rm, sub, sq, rm2, add, sqrt]
    if div.op == "Div":
        if div.inputs != [d, s] or view.only_use(s) is not div:
            return None
        chain.append(div)
    elif div.op == "Mul":
        rec = view.only_use(s)
        if rec is None or rec.op != "Reciprocal" or view.other_input(div, d) != rec.outputs[0] \
                or view.only_use(rec.outputs[0]) is not div:
            return None
        chain += [rec, div]
    else:
        return None
    return x, axes, eps, div.outputs[0], chain


def _affine(view: View, name: str, op: str):
    """If `name`'s only reader is `op`(name, const): (const value, node)."""
    node = view.only_use(name)
    if node is None or node.op != op:
        return None
    other = view.other_input(node, name)
    c = view.const(other) if other else None
    if c is None:
        return None
    return c, node


def fuse_layernorm(graph: Graph) -> bool:
    ops = graph.op_counts()
    if ops.get("ReduceMean", 0) < 2 or "Sqrt" not in ops or "Sub" not in ops:
        return False
    sets = sample_bindings(graph)
    infos = sets[0]  # ranks and dtypes

    def rewrite(graph: Graph, view: View, rm: Node) -> bool:
        if rm.op != "ReduceMean":
            return False
        found = _match(graph, view, rm, infos)
        if found is None:
            return False
        x, axes, eps, y, chain = found
        info = infos.get(x)
        dtype = info.dtype if info is not None else None
        tails = {tuple(s[x].shape[-len(axes):]) if x in s else None for s in sets}
        norm_shape = tails.pop() if len(tails) == 1 else None
        gamma = beta = None
        g = _affine(view, y, "Mul")
        if g is not None:
            gamma, gnode = g
            chain.append(gnode)
            y = gnode.outputs[0]
        b = _affine(view, y, "Add")
        if b is not None:
            beta, bnode = b
            chain.append(bnode)
            y = bnode.outputs[0]
        # parameters must be broadcastable over the normalized axes only
        for p in (gamma, beta):
            if p is not None and (p.ndim > len(axes) or (dtype and p.dtype.name != dtype)):
                return False
        if norm_shape is None:
            ref = next((p for p in (gamma, beta) if p is not None and p.ndim == len(axes)
                        and p.size > 1), None)
            if ref is None:
                return False  # normalized shape unknown
            norm_shape = ref.shape
        dt = dtype or (gamma if gamma is not None else beta).dtype.name
        try:
            gamma = np.ones(norm_shape, dt) if gamma is None else \
                np.broadcast_to(gamma, norm_shape).astype(dt)
            beta = None if beta is None else np.broadcast_to(beta, norm_shape).astype(dt)
        except ValueError:
            return False
        ins = [x, graph.add_const("ln_scale", gamma)]
        if beta is not None:
            ins.append(graph.add_const("ln_bias", beta))
        ln = new_node(graph, "LayerNormalization", ins, [y],
                      {"axis": -len(axes), "epsilon": float(eps), "stash_type": 1},
                      "layernorm")
        replace_chain(graph, chain, ln)
        return True

    return rewrite_and_note(graph, rewrite, "layernorm_fused")


# -- RMS norm ---------------------------------------------------------------------------------

RMS_DTYPES = ("float32", "float16")   # stash_type 1 (float32) is at least their precision


def _normalized(view: View, x: str, s: str):
    """The node computing x / s from s = Sqrt(...), and the nodes between: Div(x, s), or
    Mul(x, r) with r = Reciprocal(s) | Div(1, s), every intermediate read by the next only."""
    first = view.only_use(s)
    if first is None:
        return None
    if first.op == "Div" and first.inputs == [x, s]:
        return [first]
    is_rec = first.op == "Reciprocal" or (
        first.op == "Div" and first.inputs[1:] == [s] and view.scalar(first.inputs[0]) == 1.0)
    if not is_rec:
        return None
    mul = view.only_use(first.outputs[0])
    if mul is None or mul.op != "Mul" or view.other_input(mul, first.outputs[0]) != x:
        return None
    return [first, mul]


def _match_rms(graph: Graph, view: View, sq: Node, infos):
    """sq squares x; -> (x, axes, eps, normalized tensor, chain) of the RMS norm it starts."""
    if sq.op == "Mul":
        if len(sq.inputs) != 2 or sq.inputs[0] != sq.inputs[1]:
            return None
    elif sq.op != "Pow" or view.scalar(sq.inputs[1]) != 2.0:    # x * x exactly
        return None
    x = sq.inputs[0]
    if not x or view.is_const(x):
        return None
    rm = view.only_use(sq.outputs[0])
    if rm is None or rm.op != "ReduceMean":
        return None
    axes = _trailing_axes(view, graph, rm, infos)
    if axes is None:
        return None
    add = view.only_use(rm.outputs[0])
    if add is None or add.op != "Add":
        return None
    co = view.const_operand(add)
    if co is None or co[0] != rm.outputs[0] or not np.isfinite(co[1]) or co[1] < 0:
        return None
    sqrt = view.only_use(add.outputs[0])
    if sqrt is None or sqrt.op != "Sqrt":
        return None
    tail = _normalized(view, x, sqrt.outputs[0])
    if tail is None:
        return None
    return x, axes, co[1], tail[-1].outputs[0], [sq, rm, add, sqrt, *tail]


def fuse_rmsnorm(graph: Graph) -> bool:
    ops = graph.op_counts()
    if "ReduceMean" not in ops or "Sqrt" not in ops:
        return False
    sets = sample_bindings(graph)
    infos = sets[0]  # ranks and dtypes

    def rewrite(graph: Graph, view: View, sq: Node) -> bool:
        if sq.op not in ("Mul", "Pow"):
            return False
        found = _match_rms(graph, view, sq, infos)
        if found is None:
            return False
        x, axes, eps, y, chain = found
        info = infos.get(x)
        if info is None or info.dtype not in RMS_DTYPES:
            return False
        tails = {tuple(s[x].shape[-len(axes):]) if x in s else None for s in sets}
        norm_shape = tails.pop() if len(tails) == 1 else None
        gamma = None
        g = _affine(view, y, "Mul")
        if g is not None and g[0].ndim <= len(axes) and g[0].dtype.name == info.dtype:
            gamma, gnode = g
            if norm_shape is None and gamma.ndim == len(axes) and gamma.size > 1:
                norm_shape = gamma.shape
        if norm_shape is None:
            return False  # the normalized shape is unknown: no scale of it can be written
        try:
            scale = np.ones(norm_shape, info.dtype) if gamma is None else \
                np.ascontiguousarray(np.broadcast_to(gamma, norm_shape))
        except ValueError:
            return False
        if gamma is not None:
            chain.append(gnode)
            y = gnode.outputs[0]
        node = new_node(graph, "RMSNormalization", [x, graph.add_const("rms_scale", scale)],
                        [y], {"axis": -len(axes), "epsilon": float(eps), "stash_type": 1},
                        "rmsnorm")
        replace_chain(graph, chain, node)
        return True

    return rewrite_and_note(graph, rewrite, "rmsnorm_fused")
