"""MatMul with constant 2-D weights (and a bias Add) => Gemm.

Gemm here has edgenn's extended semantics: A may have rank > 2 when transA == 0,
Gemm(A (..., K), B (K, N), C (N,)) -> (..., N).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View, probe_infos, new_node, rank_of, replace_chain, rewrite_and_note

GEMM_ATTRS = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}


def _bias_vector(view: View, name: str, n: int, dtype) -> np.ndarray | None:
    """A constant that is a bias over the last axis of size n, as an (n,) vector."""
    c = view.const(name)
    if c is None or c.dtype != dtype or c.size != n or c.ndim < 1 or c.shape[-1] != n:
        return None
    return c.reshape(n)


def matmul_add_to_gemm(graph: Graph) -> bool:
    """MatMul(A, W const 2-D) [+ Add(bias const (N,))] => Gemm(A, W[, bias]).

    Also absorbs a bias Add that follows a Gemm with no C and no activation (keeping its
    residual input Z, if it has one).
    """
    ops = graph.op_counts()
    if "MatMul" not in ops and "Gemm" not in ops:
        return False
    infos = None

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        nonlocal infos
        if node.op == "MatMul":
            weights, trans_b = _weights(view, node.inputs[1])
            w = None if weights is None else view.const(weights)
            if w is None or w.ndim != 2 or w.dtype.kind != "f" or view.is_const(node.inputs[0]):
                return False
            if infos is None:
                infos = probe_infos(graph)
            r = rank_of(graph, view, node.inputs[0], infos)
            if r is not None and r < 2:
                return False  # a 1-D MatMul drops an axis; Gemm would not
            gemm = new_node(graph, "Gemm", [node.inputs[0], weights], node.outputs,
                            dict(GEMM_ATTRS, transB=trans_b, activation="",
                                 activation_params=[]), node.name)
            replace_chain(graph, [node], gemm)
            _absorb_bias(graph, View(graph), gemm)
            return True
        if node.op == "Gemm":
            return _absorb_bias(graph, view, node)
        return False

    return rewrite_and_note(graph, rewrite, "matmul_to_gemm")


def _weights(view: View, name: str) -> tuple[str | None, int]:
    """(the constant MatMul's B reads, transB): B itself, or the constant a 2-D Transpose
    turns into B (a tied embedding table read as the output projection: too large to
    fold, and Gemm reads it transposed as it is)."""
    if view.is_const(name):
        return name, 0
    t = view.prod(name, "Transpose")
    if t is not None and view.is_const(t.inputs[0]) and view.const(t.inputs[0]).ndim == 2 \
            and list(t.attrs.get("perm") or [1, 0]) == [1, 0]:
        return t.inputs[0], 1
    return None, 0


def _absorb_bias(graph: Graph, view: View, gemm: Node) -> bool:
    if len(gemm.inputs) > 2 and gemm.inputs[2]:
        return False
    if gemm.attrs.get("activation"):
        return False
    w = view.const(gemm.inputs[1])
    if w is None or w.ndim != 2:
        return False
    y = gemm.outputs[0]
    add = view.only_use(y)
    if add is None or add.op != "Add":
        return False
    other = view.other_input(add, y)
    n = w.shape[0] if gemm.attrs.get("transB", 0) else w.shape[1]
    bias = None if other is None else _bias_vector(view, other, n, w.dtype)
    if bias is None:
        return False
    if view.const(other).ndim > 1:  # (1, ..., N) broadcasts; fine only if it adds no axes
        r = rank_of(graph, view, gemm.inputs[0], probe_infos(graph))
        if r is None or r < view.const(other).ndim:
            return False
    attrs = dict(gemm.attrs, beta=1.0)
    # a residual Z (input 3, fuse_residual_add) stays: y = A W + C + Z
    fused = new_node(graph, "Gemm",
                     [gemm.inputs[0], gemm.inputs[1], graph.add_const(gemm.name + "_C", bias)]
                     + list(gemm.inputs[3:]), [add.outputs[0]], attrs, gemm.name)
    replace_chain(graph, [gemm, add], fused)
    return True
