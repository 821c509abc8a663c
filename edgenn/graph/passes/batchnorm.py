"""Folding inference BatchNormalization into the Conv / Gemm / MatMul before it."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View, probe_infos, new_node, rank_of, replace_chain, rewrite_each


def _bn_affine(view: View, bn: Node):
    """BN as y = x * s + t per channel, if all its parameters are constants."""
    if len(bn.inputs) < 5 or bn.attrs.get("training_mode", 0):
        return None
    if any(o and (view.uses(o) or o in view.outputs) for o in bn.outputs[1:]):
        return None
    scale, bias, mean, var = (view.const(i) for i in bn.inputs[1:5])
    if any(v is None or v.ndim != 1 for v in (scale, bias, mean, var)):
        return None
    eps = float(bn.attrs.get("epsilon", 1e-5))
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    t = bias.astype(np.float64) - mean.astype(np.float64) * s
    return s, t


def _fold_into_conv(graph: Graph, view: View, conv: Node, bn: Node, s, t) -> bool:
    w = view.const(conv.inputs[1])
    if w is None or w.dtype.kind != "f" or w.shape[0] != s.shape[0]:
        return False
    b = view.const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
    if len(conv.inputs) > 2 and conv.inputs[2] and b is None:
        return False
    shape = (-1,) + (1,) * (w.ndim - 1)
    w2 = (w.astype(np.float64) * s.reshape(shape)).astype(w.dtype)
    b0 = np.zeros(s.shape) if b is None else b.astype(np.float64)
    b2 = (b0 * s + t).astype(w.dtype)
    conv.inputs = [conv.inputs[0], graph.add_const(conv.name + "_W", w2),
                   graph.add_const(conv.name + "_B", b2)]
    conv.outputs = [bn.outputs[0]]
    replace_chain(graph, [conv, bn], conv)
    return True


def _fold_into_gemm(graph: Graph, view: View, gemm: Node, bn: Node, s, t) -> bool:
    w = view.const(gemm.inputs[1])
    if w is None or w.dtype.kind != "f" or w.ndim != 2 or gemm.attrs.get("transA", 0):
        return False
    trans_b = gemm.attrs.get("transB", 0)
    n_out = w.shape[0] if trans_b else w.shape[1]
    if n_out != s.shape[0]:
        return False
    c = None
    if len(gemm.inputs) > 2 and gemm.inputs[2]:
        c = view.const(gemm.inputs[2])
        if c is None or c.size not in (1, n_out) or c.ndim > 2 or (
                c.ndim == 2 and c.shape[0] != 1):
            return False
    alpha = float(gemm.attrs.get("alpha", 1.0))
    beta = float(gemm.attrs.get("beta", 1.0))
    w2 = w.astype(np.float64) * alpha * (s[None, :] if not trans_b else s[:, None])
    c0 = np.zeros(n_out) if c is None else np.broadcast_to(
        c.astype(np.float64).reshape(-1), (n_out,)) * beta
    c2 = c0 * s + t
    attrs = dict(gemm.attrs, alpha=1.0, beta=1.0)
    fused = new_node(graph, "Gemm",
                     [gemm.inputs[0], graph.add_const(gemm.name + "_W", w2.astype(w.dtype)),
                      graph.add_const(gemm.name + "_C", c2.astype(w.dtype))],
                     [bn.outputs[0]], attrs, gemm.name)
    replace_chain(graph, [gemm, bn], fused)
    return True


def _fold_into_matmul(graph: Graph, view: View, mm: Node, bn: Node, s, t) -> bool:
    w = view.const(mm.inputs[1])
    if w is None or w.dtype.kind != "f" or w.ndim != 2 or w.shape[1] != s.shape[0]:
        return False
    fused = new_node(graph, "Gemm",
                     [mm.inputs[0], graph.add_const(mm.name + "_W", (w * s[None, :]).astype(w.dtype)),
                      graph.add_const(mm.name + "_C", t.astype(w.dtype))],
                     [bn.outputs[0]], {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0,
                                       "activation": "", "activation_params": []}, mm.name)
    replace_chain(graph, [mm, bn], fused)
    return True


def fold_conv_batchnorm(graph: Graph) -> bool:
    """Conv (constant W, B) -> BatchNormalization (constant params) => Conv with new W, B.

    Also Gemm / MatMul (constant 2-D weights) -> BatchNormalization when the product is
    provably 2-D (BN's channel axis is then the feature axis). The producer must have no
    activation or residual input yet and its output no other reader.
    """
    ops = graph.op_counts()
    if "BatchNormalization" not in ops or not ({"Conv", "Gemm", "MatMul"} & set(ops)):
        return False
    infos = probe_infos(graph) if ("Gemm" in ops or "MatMul" in ops) else {}

    def rewrite(graph: Graph, view: View, bn: Node) -> bool:
        if bn.op != "BatchNormalization":
            return False
        x = bn.inputs[0]
        p = view.prod(x, ("Conv", "Gemm", "MatMul"))
        if p is None or view.only_use(x) is not bn:
            return False
        if p.attrs.get("activation") or (p.op == "Conv" and len(p.inputs) > 3 and p.inputs[3]):
            return False
        affine = _bn_affine(view, bn)
        if affine is None:
            return False
        s, t = affine
        if p.op == "Conv":
            ok = _fold_into_conv(graph, view, p, bn, s, t)
        elif rank_of(graph, view, p.inputs[0], infos) != 2:  # then the output is 2-D too
            return False
        elif p.op == "Gemm":
            ok = _fold_into_gemm(graph, view, p, bn, s, t)
        else:
            ok = _fold_into_matmul(graph, view, p, bn, s, t)
        return ok

    count = rewrite_each(graph, rewrite)
    if count:
        graph.note_fusion("batchnorm_folded", count)
    return bool(count)
