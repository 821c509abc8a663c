"""Scaled dot-product attention spelled as MatMul/Div/Add/Softmax/MatMul => FusedAttention.

    s = MatMul(q, k_t) ; [s = s / c | s * c] ; [s = s + mask] ; p = Softmax(s, axis=-1)
    y = MatMul(p, v)
=>  y = FusedAttention(q, k_t, v[, mask]; scale)  = softmax(q @ k_t * scale + mask) @ v

Every intermediate must be read by the next node only. A scale applied to q or k before
the first MatMul stays where it is.

absorb_attention_transposes: the Transposes that split heads ((B, S, H, D) -> (B, H, S, D),
K to (B, H, D, T)) and merge them back become the FusedAttention's perm_q / perm_k /
perm_v / perm_y (graph/shapes/fused.py): its kernel reads each head's block in place, with
a row stride, instead of four copies per layer (MiniLM-L6: 18 of its 24 copies).
Only perms that keep the stored last axis as each matrix's last one are taken (BLAS reads
those rows in place at full speed; K's transpose to k_t stays a copy); each Transpose must
be read by the attention alone.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..shapes.fused import PERM_ATTRS, inverse
from .util import (View, new_node, rank_of, remove_nodes, replace_chain, rewrite_and_note,
                   sample_bindings)


def _last_axis(graph: Graph, view: View, softmax: Node, infos) -> bool:
    axis = int(softmax.attrs.get("axis", -1))
    if axis == -1:
        return True
    r = rank_of(graph, view, softmax.inputs[0], infos)
    return r is not None and axis == r - 1


def fuse_attention(graph: Graph) -> bool:
    ops = graph.op_counts()
    if "Softmax" not in ops or ops.get("MatMul", 0) < 2:
        return False
    infos = None

    def rewrite(graph: Graph, view: View, sm: Node) -> bool:
        nonlocal infos
        if sm.op != "Softmax":
            return False
        pv = view.only_use(sm.outputs[0])
        if pv is None or pv.op != "MatMul" or pv.inputs[0] != sm.outputs[0]:
            return False
        chain = [sm, pv]
        t = sm.inputs[0]
        mask = ""
        node = view.prod(t)
        if node is not None and node.op == "Add" and view.only_use(t) is sm:
            # the scores side is the one that leads back to the MatMul
            for s, m in (node.inputs, node.inputs[::-1]):
                if _scores_chain(view, s) is not None:
                    mask, t = m, s
                    chain.insert(0, node)
                    break
            else:
                return False
        found = _scores_chain(view, t)
        if found is None or view.only_use(t) is not chain[0]:
            return False
        qk, scale, pre = found
        if infos is None:
            infos = sample_bindings(graph)
        if not _last_axis(graph, view, sm, infos[0]):
            return False
        ins = [qk.inputs[0], qk.inputs[1], pv.inputs[1]] + ([mask] if mask else [])
        if not _shapes_fit(infos, ins, t):
            return False
        fused = new_node(graph, "FusedAttention", ins, pv.outputs, {"scale": float(scale)},
                         "attention")
        replace_chain(graph, [qk] + pre + chain, fused)
        return True

    return rewrite_and_note(graph, rewrite, "attention_fused")


def _shapes_fit(sets, ins, scores: str) -> bool:
    """q, k_t, v of rank >= 3, and a mask that broadcasts to the scores without growing
    them (the Add in the original graph may broadcast either way)."""
    for infos in sets:
        if any(i not in infos for i in ins + [scores]):
            return False
        if min(len(infos[i].shape) for i in ins[:3]) < 3:
            return False
        if len(ins) > 3:
            target = tuple(infos[scores].shape)
            try:
                if np.broadcast_shapes(infos[ins[3]].shape, target) != target:
                    return False
            except ValueError:
                return False
    return True


def _scores_chain(view: View, t: str):
    """t = MatMul(q, k_t) [then / c or * c]: (matmul node, scale, [scale node])."""
    node = view.prod(t)
    if node is None:
        return None
    if node.op == "MatMul":
        if view.is_const(node.inputs[1]) or view.is_const(node.inputs[0]):
            return None
        return node, 1.0, []
    if node.op in ("Div", "Mul"):
        co = view.const_operand(node)
        if co is None or (node.op == "Div" and co[0] != node.inputs[0]) or co[1] == 0:
            return None
        mm = view.prod(co[0], "MatMul")
        if mm is None or view.only_use(co[0]) is not node:
            return None
        if view.is_const(mm.inputs[1]) or view.is_const(mm.inputs[0]):
            return None
        scale = 1.0 / co[1] if node.op == "Div" else co[1]
        return mm, scale, [node]
    return None


def absorb_attention_transposes(graph: Graph) -> bool:
    if "FusedAttention" not in graph.op_counts() or "Transpose" not in graph.op_counts():
        return False

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        if node.op != "FusedAttention":
            return False
        taken = []
        for i, key in enumerate(PERM_ATTRS):
            t = view.prod(node.inputs[i], "Transpose")
            if node.attrs.get(key) is None and t is not None and \
                    view.only_use(node.inputs[i]) is node and \
                    _strided_matrix(t.attrs.get("perm")):
                node.inputs[i] = t.inputs[0]
                node.attrs[key] = [int(p) for p in t.attrs["perm"]]
                taken.append(t)
        t = view.only_use(node.outputs[0])
        if node.attrs.get("perm_y") is None and t is not None and t.op == "Transpose" and \
                _strided_matrix(inverse(t.attrs.get("perm"))):
            node.attrs["perm_y"] = [int(p) for p in t.attrs["perm"]]
            node.outputs = list(t.outputs)
            taken.append(t)
        remove_nodes(graph, taken)
        return bool(taken)

    return rewrite_and_note(graph, rewrite, "attention_transposes_absorbed")


def _strided_matrix(perm) -> bool:
    """perm (the stored array transposed by it gives the matrix stack) keeps the stored
    last axis as the matrices' last one: rows read with a stride, which BLAS takes in place
    at its full speed. A matrix read transposed is not taken: BLAS multiplies a stack read
    so (K (B, T, H, D) as k_t (B, H, D, T)) slower than a contiguous copy of it, by more
    than the copy saves. An implicit perm (reverse every axis)
    is not taken either: the rank is not known here."""
    if not perm or len(perm) < 3:
        return False
    return int(perm[-1]) == len(perm) - 1
