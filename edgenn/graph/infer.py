"""Shape, dtype and constant propagation over a graph with concrete input shapes.

One walk in topological order: each node's shape rule gives its outputs' dtype and shape;
when every input of a node is a known constant and the op is deterministic, its reference
kernel computes the outputs' values too. This folds the Shape/Gather/Unsqueeze/Concat
chains torch emits as soon as the input shapes are bound.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import EdgennError, GraphError, UnsupportedOpError
from ..registry import REFERENCE, SHAPE_RULES, TensorInfo
from .ir import Graph, Node

NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}
FOLD_LIMIT = 1 << 24  # elements: larger results stay as runtime work


def unsupported_ops(graph: Graph) -> dict[str, list[str]]:
    missing: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op not in SHAPE_RULES or n.op not in REFERENCE:
            missing.setdefault(n.op, []).append(n.name)
    return missing


def infer(graph: Graph, input_shapes: dict[str, tuple[int, ...]] | None = None,
          fold: bool = True) -> dict[str, TensorInfo]:
    """Return TensorInfo for every tensor. Inputs whose shape is not concrete (and not in
    `input_shapes`) make their dependents unknown: those tensors are left out."""
    infos: dict[str, TensorInfo] = {name: TensorInfo.of(v) for name, v in graph.consts.items()}
    for v in graph.inputs:
        shape = (input_shapes or {}).get(v.name, v.shape)
        if all(isinstance(d, int) and d >= 0 for d in shape):
            infos[v.name] = TensorInfo(v.dtype, tuple(shape))
    for node in graph.nodes:
        ins = [infos.get(i) if i else None for i in node.inputs]
        if any(i and info is None for i, info in zip(node.inputs, ins)):
            continue  # depends on an unbound dim
        outs = infer_node(node, ins, fold)
        for name, info in zip(node.outputs, outs):
            if name:
                infos[name] = info
    return infos


def infer_node(node: Node, ins: list[TensorInfo | None], fold: bool = True,
               fold_limit: int = FOLD_LIMIT) -> list[TensorInfo]:
    rule = SHAPE_RULES.get(node.op)
    if rule is None:
        raise UnsupportedOpError({node.op: [node.name]})
    try:
        outs = rule(node, ins)
    except EdgennError:
        raise
    except Exception as exc:  # a rule tripping on bad shapes: say where
        shapes = [None if i is None else i.shape for i in ins]
        raise GraphError(f"{node.op} node {node.name!r}: cannot infer output shape from "
                         f"input shapes {shapes}: {exc}") from exc
    extra = [o for o in node.outputs[len(outs):] if o]
    if extra:   # a hand-made or fuzzed model naming outputs the op does not have
        raise GraphError(f"{node.op} node {node.name!r} names {len(node.outputs)} outputs; "
                         f"the op produces {len(outs)} here (no {extra[:4]})")
    if fold and node.op not in NONDETERMINISTIC and all(
            i is None or i.value is not None for i in ins) and \
            sum(math.prod(o.shape) for o in outs) <= fold_limit:
        values = evaluate(node, [None if i is None else i.value for i in ins])
        outs = [TensorInfo.of(v) for v in values[:len(outs)]]
    return outs


def evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Run the reference kernel of one node."""
    try:
        values = REFERENCE[node.op](node.attrs, inputs)
    except EdgennError:
        raise
    except Exception as exc:
        shapes = [None if i is None else (i.dtype.name, i.shape) for i in inputs]
        raise GraphError(f"{node.op} node {node.name!r} failed on inputs {shapes}: {exc}") from exc
    return [np.asarray(v) for v in values]


def execute(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The plainest interpreter: reference kernels, node by node, no planning.

    The oracle for pass tests (outputs before == after a pass) and for the planned runtime.
    """
    from ..oplist import load_rules
    load_rules()
    env: dict[str, np.ndarray] = dict(graph.consts)
    env.update(feeds)
    for node in graph.nodes:
        values = evaluate(node, [env[i] if i else None for i in node.inputs])
        for name, v in zip(node.outputs, values):
            if name:
                env[name] = v
    return {v.name: env[v.name] for v in graph.outputs}
