"""Shared helpers for graph passes: a use/def view of the graph, constant look-ups, and
the few edits every rewrite needs (remove nodes, replace a chain by one node, bypass).

A pass keeps a `View` while it scans and builds a fresh one after each rewrite; views are
cheap (one walk over the nodes) and never go stale that way.
"""
from __future__ import annotations

import numpy as np

from ...errors import EdgennError
from ...registry import REFERENCE, SHAPE_RULES, TensorInfo
from ..infer import FOLD_LIMIT, NONDETERMINISTIC, evaluate, infer_node
from ..ir import Graph, Node

# ops whose output depends only on the *shape* of their input, not its values
SHAPE_ONLY = {"Shape", "Size"}
# the largest constant computed where only shapes, ranks and dtypes are asked for (shape
# arithmetic is on small tensors; a model's dequantized weights need not be computed)
SHAPE_FOLD_LIMIT = 1 << 16


class View:
    """Producers, consumers and graph outputs of one graph state."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer: dict[str, Node] = graph.producers()
        self.users: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for i in dict.fromkeys(n.inputs):      # a node is one user of x in Mul(x, x)
                if i:
                    self.users.setdefault(i, []).append(n)
        self.outputs = graph.output_names()
        self.alive = {id(n) for n in graph.nodes}

    # -- queries -------------------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        return self.graph.consts.get(name) if name else None

    def is_const(self, name: str) -> bool:
        return bool(name) and name in self.graph.consts

    def prod(self, name: str, op: str | tuple[str, ...] | None = None) -> Node | None:
        """The node producing `name` (if its op is `op`, when given)."""
        n = self.producer.get(name) if name else None
        if n is None or op is None:
            return n
        return n if n.op == op or (isinstance(op, tuple) and n.op in op) else None

    def uses(self, name: str) -> list[Node]:
        """Distinct consumer nodes of tensor `name`."""
        return self.users.get(name, [])

    def only_use(self, name: str) -> Node | None:
        """The single consumer node of `name`, if it has exactly one and is no graph output."""
        users = self.users.get(name, [])
        if len(users) != 1 or name in self.outputs:
            return None
        return users[0]

    def private(self, name: str, *nodes: Node) -> bool:
        """True if `name` is read only by `nodes` (at least one) and is not a graph output."""
        users = self.users.get(name, [])
        ids = {id(n) for n in nodes}
        return bool(users) and name not in self.outputs and all(id(u) in ids for u in users)

    def scalar(self, name: str) -> float | None:
        """The value of a one-element constant, else None."""
        v = self.const(name)
        if v is None or v.size != 1 or v.dtype.kind not in "fiu":
            return None
        return float(v.reshape(-1)[0])

    def other_input(self, node: Node, name: str) -> str | None:
        """For a binary node one of whose inputs is `name`: the other input."""
        if len(node.inputs) != 2:
            return None
        a, b = node.inputs
        if a == name:
            return b
        if b == name:
            return a
        return None

    def const_operand(self, node: Node) -> tuple[str, float] | None:
        """For a binary node with one scalar-constant input: (other input, scalar)."""
        if len(node.inputs) != 2:
            return None
        a, b = node.inputs
        sb, sa = self.scalar(b), self.scalar(a)
        if sb is not None and not self.is_const(a):
            return a, sb
        if sa is not None and not self.is_const(b):
            return b, sa
        return None


def close(value: float | None, target: float, rtol: float = 1e-4) -> bool:
    return value is not None and abs(value - target) <= rtol * max(1.0, abs(target))


# -- edits ------------------------------------------------------------------------------
def remove_nodes(graph: Graph, nodes) -> None:
    ids = {id(n) for n in nodes}
    graph.nodes = [n for n in graph.nodes if id(n) not in ids]


def replace_chain(graph: Graph, chain: list[Node], new: Node) -> Node:
    """Put `new` where the last node of `chain` (in graph order) was, removing the chain.

    Every input of the chain is available before its last node, so order stays valid.
    """
    ids = {id(n) for n in chain}
    last = max(i for i, n in enumerate(graph.nodes) if id(n) in ids)
    out: list[Node] = []
    for i, n in enumerate(graph.nodes):
        if i == last:
            out.append(new)
        elif id(n) not in ids:
            out.append(n)
    graph.nodes = out
    return new


def move_after_last(graph: Graph, node: Node, chain: list[Node]) -> None:
    """Move `node` to the position of the last of `chain` and drop the others of `chain`."""
    replace_chain(graph, [node, *chain], node)


def rename_tensor(graph: Graph, old: str, new: str) -> None:
    """Rename tensor `old` to `new` everywhere (producer output and all readers)."""
    for n in graph.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
        n.outputs = [new if o == old else o for o in n.outputs]


def bypass(graph: Graph, view: View, node: Node, out: str, src: str) -> bool:
    """Remove `node`, making readers of its output `out` read `src` instead.

    If `out` is a graph output, the producer of `src` is renamed to write `out` (the
    user-visible name never changes); that is impossible when `src` is a graph input,
    a constant or itself a graph output, and then nothing is changed (returns False).
    """
    if out in view.outputs:
        p = view.prod(src)
        if p is None or src in view.outputs:
            return False
        remove_nodes(graph, [node])
        rename_tensor(graph, src, out)
        return True
    remove_nodes(graph, [node])
    for n in graph.nodes:
        n.inputs = [src if i == out else i for i in n.inputs]
    return True


def new_node(graph: Graph, op: str, inputs, outputs, attrs=None, base: str = "") -> Node:
    return Node(op, list(inputs), list(outputs), dict(attrs or {}),
                graph.unique_name(base or op.lower()))


def rewrite_each(graph: Graph, rewrite) -> int:
    """Call `rewrite(graph, view, node) -> bool` on every live node; count rewrites."""
    view = View(graph)
    count = 0
    for node in list(graph.nodes):
        if id(node) not in view.alive:
            continue
        if rewrite(graph, view, node):
            count += 1
            view = View(graph)
    return count


def rewrite_and_note(graph: Graph, rewrite, fusion: str) -> bool:
    """rewrite_each, recording the number of rewrites under graph.meta["fusions"][fusion];
    True if anything changed (the return value every pass gives the pipeline)."""
    count = rewrite_each(graph, rewrite)
    if count:
        graph.note_fusion(fusion, count)
    return bool(count)


# -- what is known of tensors -----------------------------------------------------------
def _shape_dummy(info: TensorInfo) -> np.ndarray:
    """An array of the right dtype and shape that costs no memory (for Shape/Size)."""
    return np.broadcast_to(np.zeros((), dtype=info.dtype), info.shape)


def known_infos(graph: Graph, input_shapes: dict | None = None,
                fold_limit: int | None = None) -> dict[str, TensorInfo]:
    """Dtype, shape and (where computable) value of every tensor that can be inferred.

    Like `infer.infer`, but never raises: a node whose op is not registered or whose rule
    cannot run (e.g. a shape that depends on a dynamic input) just leaves its outputs
    unknown. Shape/Size of a tensor of known shape get values, so the Shape ->
    Gather -> Unsqueeze -> Concat chains torch emits fold when inputs are static. Values
    of more than `fold_limit` elements are left uncomputed (shape and dtype only).
    """
    fold_limit = FOLD_LIMIT if fold_limit is None else fold_limit
    from ...oplist import load_rules
    load_rules()
    infos: dict[str, TensorInfo] = {name: TensorInfo.of(v) for name, v in graph.consts.items()}
    for v in graph.inputs:
        shape = (input_shapes or {}).get(v.name, v.shape)
        if all(isinstance(d, int) and d >= 0 for d in shape):
            infos[v.name] = TensorInfo(v.dtype, tuple(int(d) for d in shape))
    for node in graph.nodes:
        ins = [infos.get(i) if i else None for i in node.inputs]
        if any(i and info is None for i, info in zip(node.inputs, ins)):
            continue
        try:
            if node.op in SHAPE_ONLY and node.op in REFERENCE and ins and ins[0] is not None \
                    and ins[0].value is None:
                values = evaluate(node, [_shape_dummy(ins[0])])
                outs = [TensorInfo.of(v) for v in values]
            elif node.op not in SHAPE_RULES:
                if node.op in REFERENCE and node.op not in NONDETERMINISTIC and \
                        all(i is None or i.value is not None for i in ins) and \
                        sum(i.value.size for i in ins if i is not None) <= fold_limit:
                    outs = [TensorInfo.of(v) for v in
                            evaluate(node, [None if i is None else i.value for i in ins])]
                else:
                    continue
            else:
                outs = infer_node(node, ins, fold=node.op in REFERENCE, fold_limit=fold_limit)
        except EdgennError:
            continue
        for name, info in zip(node.outputs, outs):
            if name:
                infos[name] = info
    return infos


def rank_of(graph: Graph, view: View, name: str, infos: dict | None = None) -> int | None:
    """The rank of tensor `name` when it is known without concrete shapes."""
    if infos and name in infos:
        return len(infos[name].shape)
    if name in graph.consts:
        return graph.consts[name].ndim
    for v in graph.inputs:
        if v.name == name:
            return len(v.shape)
    p = view.prod(name)
    if p is not None and p.op == "Flatten":
        return 2
    return None


def sample_bindings(graph: Graph) -> list[dict[str, TensorInfo]]:
    """Tensor infos under the graph's own static input shapes or, when inputs have
    symbolic dims, under two unrelated bindings of every symbol.

    Use: ranks and dtypes (binding-independent) from any set; a shape counts as known
    only when all sets agree (`agreed_shape`). Two tensors whose shapes agree under both
    bindings have equal shapes for the ops of CNNs and transformers, whose output dims are
    simple functions of the input dims.
    """
    symbols = sorted({d for v in graph.inputs for d in v.shape if not isinstance(d, int)},
                     key=str)
    if not symbols:
        return [known_infos(graph, fold_limit=SHAPE_FOLD_LIMIT)]
    sets = []
    for base, step in ((64, 2), (97, 3)):
        bind = {s: base + step * i for i, s in enumerate(symbols)}
        shapes = {v.name: tuple(d if isinstance(d, int) else bind[d] for d in v.shape)
                  for v in graph.inputs}
        sets.append(known_infos(graph, shapes, fold_limit=SHAPE_FOLD_LIMIT))
    return sets


def probe_infos(graph: Graph) -> dict[str, TensorInfo]:
    """Infos good for ranks and dtypes (see sample_bindings), never for dim values. With
    symbolic input dims, also under a binding of multiples of 64: a detector's feature
    pyramid (stride-32 features upsampled and added to stride-16 ones) only type-checks
    for input sizes its strides divide, which the two odd bindings are not."""
    sets = sample_bindings(graph)
    symbols = sorted({d for v in graph.inputs for d in v.shape if not isinstance(d, int)},
                     key=str)
    if not symbols:
        return sets[0]
    bind = {sym: 128 + 64 * i for i, sym in enumerate(symbols)}
    shapes = {v.name: tuple(d if isinstance(d, int) else bind[d] for d in v.shape)
              for v in graph.inputs}
    merged = dict(known_infos(graph, shapes, fold_limit=SHAPE_FOLD_LIMIT))
    for infos in sets:   # dtypes and ranks do not depend on the binding
        for name, info in infos.items():
            merged.setdefault(name, info)
    return merged


def agreed_shape(sets: list[dict], name: str) -> tuple[int, ...] | None:
    shapes = {tuple(s[name].shape) if name in s else None for s in sets}
    if len(shapes) != 1:
        return None
    return shapes.pop()
