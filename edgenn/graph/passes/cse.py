"""Common-subexpression elimination: identical constants become one, then nodes with the
same op, inputs and attributes become one (torch exports repeat Shape(x) -> Gather
chains once per use)."""
from __future__ import annotations

import hashlib

import numpy as np

from ..infer import NONDETERMINISTIC
from ..ir import Graph

CONST_LIMIT = 1 << 12  # elements: only small constants are compared (scalars, shapes, axes)


def _key(value) -> object:
    """A hashable, exact key of an attribute value or constant."""
    if isinstance(value, np.ndarray):
        return ("a", value.dtype.str, value.shape,
                hashlib.sha1(np.require(value, requirements="C").tobytes()).hexdigest())
    if isinstance(value, (list, tuple)):
        return ("l", tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return ("d", tuple(sorted((k, _key(v)) for k, v in value.items())))
    if isinstance(value, float):
        return ("f", value.hex() if value == value else "nan")
    return (type(value).__name__, value)


def _merge_consts(graph: Graph) -> int:
    outputs = graph.output_names()
    seen: dict[object, str] = {}
    alias: dict[str, str] = {}
    for name, v in graph.consts.items():
        if v.size > CONST_LIMIT or name in outputs:
            continue
        k = _key(v)
        if k in seen:
            alias[name] = seen[k]
        else:
            seen[k] = name
    if not alias:
        return 0
    for n in graph.nodes:
        n.inputs = [alias.get(i, i) for i in n.inputs]
    for name in alias:
        del graph.consts[name]
    return len(alias)


def eliminate_common_subexpressions(graph: Graph) -> bool:
    if len(graph.consts) < 2 and max(graph.op_counts().values(), default=0) < 2:
        return False
    merged = _merge_consts(graph)
    graph.toposort()
    outputs = graph.output_names()
    seen: dict[object, list[str]] = {}
    alias: dict[str, str] = {}
    dead = set()
    for node in graph.nodes:
        node.inputs = [alias.get(i, i) for i in node.inputs]
        if node.op in NONDETERMINISTIC or not node.outputs or node.bodies():
            continue                  # control flow: bodies are never compared
        k = (node.op, tuple(node.inputs), _key(node.attrs), len(node.outputs))
        first = seen.get(k)
        if first is None:
            seen[k] = node.outputs
            continue
        if any(o in outputs for o in node.outputs) or \
                any(bool(a) != bool(b) for a, b in zip(node.outputs, first)):
            continue
        for a, b in zip(node.outputs, first):
            if a:
                alias[a] = b
        dead.add(id(node))
    if dead:
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        graph.note_fusion("common_subexpression", len(dead))
    return bool(merged or dead)
