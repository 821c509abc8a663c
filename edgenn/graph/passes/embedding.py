"""Gather from a transposed constant table => a Gather of its columns.

A decoder with tied embeddings stores one (hidden, vocabulary) table for the output
projection and reads its embedding rows as Gather(Transpose(table), ids). The table is
too large to fold the Transpose into a second copy, and transposing it on every call
reads all of it; gathering columns (axis 1) and moving the gathered axis last reads only
the rows' values.
"""
from __future__ import annotations

from ..ir import Graph, Node
from .util import View, new_node, probe_infos, rank_of, replace_chain, rewrite_and_note


def gather_from_transposed_table(graph: Graph) -> bool:
    """Gather(Transpose(W const (D, V)), ids, axis 0) -> (ids..., D) =>
    Transpose(Gather(W, ids, axis 1) -> (D, ids...), perm (1, ..., r, 0))."""
    if "Gather" not in graph.op_counts() or "Transpose" not in graph.op_counts():
        return False
    infos = None

    def rewrite(graph: Graph, view: View, node: Node) -> bool:
        nonlocal infos
        if node.op != "Gather" or int(node.attrs.get("axis", 0)) not in (0, -2):
            return False
        t = view.prod(node.inputs[0], "Transpose")
        if t is None or not view.is_const(t.inputs[0]):
            return False
        table = view.const(t.inputs[0])
        if table.ndim != 2 or list(t.attrs.get("perm") or [1, 0]) != [1, 0]:
            return False
        if infos is None:
            infos = probe_infos(graph)
        r = rank_of(graph, view, node.inputs[1], infos)
        if r is None:
            return False
        columns = graph.unique_name(f"{node.name or 'gather'}/columns")
        gather = new_node(graph, "Gather", [t.inputs[0], node.inputs[1]], [columns],
                          {"axis": 1}, node.name)
        moved = new_node(graph, "Transpose", [columns], node.outputs,
                         {"perm": list(range(1, r + 1)) + [0]}, f"{node.name}/last")
        replace_chain(graph, [node], gather)
        graph.nodes.insert(graph.nodes.index(gather) + 1, moved)
        return True

    return rewrite_and_note(graph, rewrite, "gather_transposed_table")
