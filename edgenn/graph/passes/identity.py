"""Removal of nodes that compute nothing at inference time."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View, bypass, rewrite_and_note, sample_bindings

IDENTITY_LIKE = ("Identity", "Dropout", "Cast", "Reshape")


def _dtype_of(graph: Graph, name: str, infos: dict) -> str | None:
    if name in infos:
        return infos[name].dtype
    if name in graph.consts:
        return graph.consts[name].dtype.name
    for v in graph.inputs:
        if v.name == name:
            return v.dtype
    return None


def _is_noop(graph: Graph, view: View, node: Node, infos: dict, static: bool) -> bool:
    if node.op == "Identity":
        return True
    if node.op == "Dropout":
        # inference: Dropout is the identity unless training_mode is (or may be) true,
        # and its mask output must be unread
        if len(node.outputs) > 1 and node.outputs[1] and (
                view.uses(node.outputs[1]) or node.outputs[1] in view.outputs):
            return False
        if len(node.inputs) > 2 and node.inputs[2]:
            mode = view.const(node.inputs[2])
            if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
                return False
        return not node.attrs.get("training_mode", 0)
    if node.op == "Cast":
        to = node.attrs.get("to")
        src = _dtype_of(graph, node.inputs[0], infos)
        if src is None or to is None:
            return False
        try:
            from ..dtypes import from_onnx
            target = from_onnx(int(to)) if not isinstance(to, str) else np.dtype(to).name
        except Exception:
            return False
        return target == src
    if node.op == "Reshape":
        a, b = infos.get(node.inputs[0]), infos.get(node.outputs[0])
        return static and a is not None and b is not None and tuple(a.shape) == tuple(b.shape)
    return False


def remove_identity(graph: Graph) -> bool:
    """Identity, inference Dropout, Cast to the same dtype, Reshape to the same shape."""
    ops = graph.op_counts()
    if not any(op in ops for op in IDENTITY_LIKE):
        return False
    # Cast needs only dtypes (any binding will do); Reshape needs shapes, so static only
    infos, static = {}, False
    if "Cast" in ops or "Reshape" in ops:
        sets = sample_bindings(graph)
        infos, static = sets[0], len(sets) == 1

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        if node.op not in IDENTITY_LIKE or not node.inputs or not node.inputs[0]:
            return False
        if not _is_noop(graph, view, node, infos, static):
            return False
        return bypass(graph, view, node, node.outputs[0], node.inputs[0])

    return rewrite_and_note(graph, rewrite, "identity_removed")
