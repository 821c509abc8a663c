"""Folding constant affine maps into the weights of a Conv / Gemm.

fold_conv_batchnorm: inference BatchNormalization after Conv / Gemm / MatMul.
fold_conv_affine:    per-output-channel (or scalar) Mul / Add after Conv / Gemm (paddle
                     exports conv biases and learnable scales as separate nodes).
fold_input_affine:   scalar Mul / Add before an unpadded Conv.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import (View, new_node, probe_infos, rank_of, remove_nodes, replace_chain,
                   rewrite_and_note, rewrite_each)


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
    w2 = (w.astype(np.float64) * s[None, :]).astype(w.dtype)
    fused = new_node(graph, "Gemm",
                     [mm.inputs[0], graph.add_const(mm.name + "_W", w2),
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

    return rewrite_and_note(graph, rewrite, "batchnorm_folded")


# -- per-channel Mul / Add after Conv or Gemm ----------------------------------------------
def _channel_vector(c: np.ndarray, rank: int | None, axis_from_end: int, m: int):
    """A constant that varies at most along one output-channel axis, as an (m,) vector.

    `axis_from_end` is the channel axis counted from the end of an output of rank `rank`
    (rank None: only 1-D or 1-element constants, which add no axes). None if it is not
    such a constant, or if broadcasting it would add axes to the output.
    """
    if c.dtype.kind != "f":
        return None
    if c.size == 1 and (c.ndim <= 1 or (rank is not None and c.ndim <= rank)):
        return np.full(m, c.reshape(-1)[0], dtype=np.float64)
    if rank is None:
        if c.ndim != 1 or axis_from_end != 1:
            return None
        rank = 1
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    ch = rank - axis_from_end
    if any(d != 1 for i, d in enumerate(shape) if i != ch) or shape[ch] not in (1, m):
        return None
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (m,))


def fold_conv_affine(graph: Graph) -> bool:
    """Conv/Gemm (constant weights, no activation yet) -> Mul or Add by a per-output-channel
    (or scalar) constant => the scale folded into W (and B), the shift into B."""
    ops = graph.op_counts()
    if not ({"Mul", "Add"} & set(ops)) or not ({"Conv", "Gemm"} & set(ops)):
        return False
    infos = None

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        nonlocal infos
        if node.op not in ("Mul", "Add") or len(node.inputs) != 2:
            return False
        for x, cname in (node.inputs, node.inputs[::-1]):
            p = view.prod(x, ("Conv", "Gemm"))
            c = view.const(cname)
            if p is None or c is None or view.only_use(x) is not node:
                continue
            if p.attrs.get("activation") or (len(p.inputs) > 3 and p.inputs[3]):
                continue
            w = view.const(p.inputs[1])
            if w is None or w.dtype != c.dtype:
                continue
            if p.op == "Conv":
                v = _channel_vector(c, w.ndim, w.ndim - 1, w.shape[0])
                ok = v is not None and _affine_conv(graph, view, p, node, v)
            else:
                if infos is None:
                    infos = probe_infos(graph)
                rank = rank_of(graph, view, p.inputs[0], infos)
                ok = w.ndim == 2 and not p.attrs.get("transA", 0)
                if ok:
                    n = w.shape[0] if p.attrs.get("transB", 0) else w.shape[1]
                    v = _channel_vector(c, rank, 1, n)
                    ok = v is not None and _affine_gemm(graph, view, p, node, v)
            if ok:
                return True
        return False

    return rewrite_and_note(graph, rewrite, "affine_folded")


def _affine_conv(graph: Graph, view: View, conv: Node, node: Node, v) -> bool:
    w = view.const(conv.inputs[1])
    has_b = len(conv.inputs) > 2 and bool(conv.inputs[2])
    b = view.const(conv.inputs[2]) if has_b else None
    if has_b and b is None:
        return False
    b0 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    if node.op == "Mul":
        w = (w.astype(np.float64) * v.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = None if b is None else b0 * v
    else:
        b2 = b0 + v
    ins = [conv.inputs[0], graph.add_const(conv.name + "_W", w)]
    if b2 is not None:
        ins.append(graph.add_const(conv.name + "_B", b2.astype(w.dtype)))
    conv.inputs = ins
    conv.outputs = [node.outputs[0]]
    replace_chain(graph, [conv, node], conv)
    return True


def _affine_gemm(graph: Graph, view: View, gemm: Node, node: Node, v) -> bool:
    w = view.const(gemm.inputs[1])
    trans_b = gemm.attrs.get("transB", 0)
    n = v.shape[0]
    c = None
    if len(gemm.inputs) > 2 and gemm.inputs[2]:
        c = view.const(gemm.inputs[2])
        if c is None or c.size not in (1, n) or (c.ndim == 2 and c.shape[0] != 1) or c.ndim > 2:
            return False
    alpha, beta = float(gemm.attrs.get("alpha", 1.0)), float(gemm.attrs.get("beta", 1.0))
    c0 = None if c is None else np.broadcast_to(c.astype(np.float64).reshape(-1), (n,)) * beta
    w2 = w.astype(np.float64) * alpha
    if node.op == "Mul":
        w2 = w2 * (v[:, None] if trans_b else v[None, :])
        c2 = None if c0 is None else c0 * v
    else:
        c2 = v if c0 is None else c0 + v
    ins = [gemm.inputs[0], graph.add_const(gemm.name + "_W", w2.astype(w.dtype))]
    if c2 is not None:
        ins.append(graph.add_const(gemm.name + "_C", c2.astype(w.dtype)))
    fused = new_node(graph, "Gemm", ins, [node.outputs[0]],
                     dict(gemm.attrs, alpha=1.0, beta=1.0), gemm.name)
    replace_chain(graph, [gemm, node], fused)
    return True


# -- scalar Mul / Add before an unpadded Conv (PP-OCR's learnable affine after activations)
def _unpadded(conv: Node) -> bool:
    pads = conv.attrs.get("pads") or []
    return conv.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and \
        not any(int(p) for p in pads)


def fold_input_affine(graph: Graph) -> bool:
    """Mul(x, a) / Add(x, b) with scalar constants, read only by a Conv with no padding =>
    W' = a W;  B' = B + b * sum of W over its input channels and taps.

    Padding would pad with zeros where the original saw b, so padded Convs are left alone.
    """
    ops = graph.op_counts()
    if "Conv" not in ops or not ({"Mul", "Add"} & set(ops)):
        return False

    folded = 0

    def rewrite(graph: Graph, view: View, conv: Node) -> bool:
        nonlocal folded
        n = 0
        while _fold_one(graph, view, conv):  # a chain x * a + b folds step by step
            n += 1
            view = View(graph)
        folded += n
        return n > 0

    rewrite_each(graph, rewrite)
    if folded:
        graph.note_fusion("input_affine_folded", folded)
    return bool(folded)


def _fold_one(graph: Graph, view: View, conv: Node) -> bool:
    if conv.op != "Conv" or not _unpadded(conv):
        return False
    x = conv.inputs[0]
    node = view.prod(x, ("Mul", "Add"))
    if node is None or view.only_use(x) is not conv:
        return False
    co = view.const_operand(node)
    w = view.const(conv.inputs[1])
    if co is None or w is None or w.dtype.kind != "f":
        return False
    k_value = view.const(view.other_input(node, co[0]))
    if k_value.dtype != w.dtype or k_value.ndim > w.ndim:
        return False
    has_b = len(conv.inputs) > 2 and bool(conv.inputs[2])
    b = view.const(conv.inputs[2]) if has_b else None
    if has_b and b is None:
        return False
    src, k = co
    w64 = w.astype(np.float64)
    b0 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    if node.op == "Mul":
        w_new, b_new = w64 * k, (None if b is None else b0)
    else:
        w_new, b_new = w64, b0 + k * w64.reshape(w.shape[0], -1).sum(axis=1)
    w_name = graph.add_const(conv.name + "_W", w_new.astype(w.dtype))
    bias = "" if b_new is None else graph.add_const(conv.name + "_B", b_new.astype(w.dtype))
    z = list(conv.inputs[3:])  # the fused residual, if any, stays 4th
    conv.inputs = [src, w_name, bias] + z if (bias or z) else [src, w_name]
    remove_nodes(graph, [node])
    return True
