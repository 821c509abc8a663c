"""Constant folding, dead-code elimination and pruning of unused constants."""
from __future__ import annotations

import numpy as np

from ...errors import EdgennError
from ...registry import REFERENCE
from ..infer import NONDETERMINISTIC, evaluate
from ..ir import Graph
from .util import SHAPE_ONLY, known_infos

# A folded result is stored in the model file, so folding must not blow the file up:
# fold when the result is small, or not much larger than the constants it comes from
# (an Expand/Tile/ConstantOfShape into a big tensor stays as runtime work).
SMALL = 1 << 16
GROWTH = 4
# DequantizeLinear of stored integer weights stays: folded, the weights would be stored as
# float32 (4x larger) and fuse_qdq could no longer turn the Conv/Gemm into QConv/QGemm.
# (At load, plan-time inference still computes whatever is left of it once.)
KEEP = {"DequantizeLinear"}


def _worth_folding(out_elems: int, in_elems: int) -> bool:
    return out_elems <= SMALL or out_elems <= GROWTH * in_elems


def fold_constants(graph: Graph) -> bool:
    """Replace every deterministic node whose outputs are computable by constants.

    Computable means: all inputs are constants, or (Shape/Size) the input's shape is known
    because the graph inputs it depends on are static, and so on down the chain. Nodes
    that write a graph output are kept (outputs stay node-produced), though their values
    still feed folding downstream.
    """
    if not graph.nodes:
        return False
    graph.toposort()
    ops = graph.op_counts()
    needs_shapes = any(op in ops for op in SHAPE_ONLY)
    if needs_shapes:
        infos = known_infos(graph)
        known = {k: i.value for k, i in infos.items() if i.value is not None}
    else:
        known = dict(graph.consts)
    outputs = graph.output_names()
    folded = []
    for node in graph.nodes:
        if node.op in NONDETERMINISTIC or node.op not in REFERENCE or not node.outputs:
            continue
        if node.op in KEEP:
            continue
        if any(o and o in graph.consts for o in node.outputs):
            continue
        if needs_shapes:
            if not all(not o or o in known for o in node.outputs):
                continue
            values = [known[o] if o else None for o in node.outputs]
        else:
            if not all(not i or i in known for i in node.inputs):
                continue
            try:
                values = evaluate(node, [known[i] if i else None for i in node.inputs])
            except EdgennError:
                continue
            for o, v in zip(node.outputs, values):
                if o:
                    known[o] = v
        if any(o in outputs for o in node.outputs):
            continue
        in_elems = sum(int(np.size(known[i])) for i in node.inputs
                       if i and i in known and node.op not in SHAPE_ONLY)
        out_elems = sum(int(np.size(v)) for v in values if v is not None)
        if not _worth_folding(out_elems, in_elems):
            continue
        for o, v in zip(node.outputs, values):
            if o:
                graph.consts[o] = np.require(v, requirements="C")
        folded.append(node)
    if not folded:
        return False
    ids = {id(n) for n in folded}
    graph.nodes = [n for n in graph.nodes if id(n) not in ids]
    graph.note_fusion("constant_fold", len(folded))
    prune_unused_consts(graph)
    return True


def eliminate_dead_code(graph: Graph) -> bool:
    """Drop nodes none of whose outputs is read (by a live node) or is a graph output."""
    graph.toposort()
    live = set(graph.output_names())
    keep = []
    for node in reversed(graph.nodes):
        if any(o and o in live for o in node.outputs):
            keep.append(node)
            live.update(i for i in node.inputs if i)
    if len(keep) == len(graph.nodes):
        return False
    removed = len(graph.nodes) - len(keep)
    keep.reverse()
    graph.nodes = keep
    graph.note_fusion("dead_node", removed)
    prune_unused_consts(graph)
    return True


def prune_unused_consts(graph: Graph) -> bool:
    """Remove constants no node reads and no graph output names."""
    used = {i for n in graph.nodes for i in n.inputs if i} | graph.output_names()
    unused = [name for name in graph.consts if name not in used]
    for name in unused:
        del graph.consts[name]
    return bool(unused)
