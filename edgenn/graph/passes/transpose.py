"""push_transposes: move Transposes through layout-agnostic ops until they meet their
inverses and cancel (the layout churn a TFLite conversion leaves: graph/converters/tflite).

Rewrites, each exact:
- Transpose(Transpose(x, q), p) -> Transpose(x, q[p]) (nothing when that is the identity);
- op(Transpose(x, p)) -> Transpose(op(x), p) for elementwise ops whose other inputs are
  one-element constants (Relu, Sigmoid, Clip, HardSwish, ...), for binary elementwise ops
  whose other input is a constant (broadcast to the rank, then permuted by p's inverse) or
  the same Transpose of another tensor, for Pad (pads permuted), Concat of tensors all
  transposed alike (axis p[axis]) and reductions that keep their dims (axes p[a]);
  QuantizeLinear with per-tensor parameters is elementwise too, so transposes sink
  through it onto the 8-bit data;
- Transpose(DequantizeLinear(x)) -> DequantizeLinear(Transpose(x)) for per-tensor
  DequantizeLinear: the one rewrite that moves a transpose up, so a quantized op reads
  DQ(x_q) directly (the form the integer fusion needs) and the transpose moves bytes.
  DequantizeLinear is not one the sink moves through, so the two never undo each other;
- op(DQ(Transpose(x, p))) -> Transpose(op(DQ(x)), p) when op is one the first rules sink
  through (an elementwise float op or a Pad between the DQ and its Q);
- op(DQ(Transpose(a, p)), DQ(Transpose(b, p)), ...) -> Transpose(op(DQ(a), DQ(b), ...), p)
  for a binary elementwise op or a Concat whose every operand is (DQ of) the same
  Transpose (a residual Add or a Concat of a quantized graph), each read once.
A Transpose is moved only when the op is its only consumer (so nothing is duplicated);
the op moves above it and takes its name, so graph outputs keep theirs.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View

UNARY = {"Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Selu",
         "Neg", "Abs", "Exp", "Log", "Sqrt", "Identity", "Clip", "Softplus", "Softsign",
         "Erf", "Gelu", "Mish", "Celu", "Cast", "Reciprocal", "Floor", "Ceil", "Round",
         "QuantizeLinear"}
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Pow"}
REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}


def _perm(node: Node) -> list[int] | None:
    p = node.attrs.get("perm")
    return [int(v) for v in p] if p else None


def _inverse(p: list[int]) -> list[int]:
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return inv


def _scalar_const(view: View, name: str) -> bool:
    v = view.const(name) if name else None
    return not name or (v is not None and v.size == 1)


def _fold_pair(graph: Graph, view: View, t: Node) -> bool:
    src = view.prod(t.inputs[0], "Transpose")
    if src is None or _perm(src) is None or _perm(t) is None:
        return False
    q, p = _perm(src), _perm(t)
    if len(q) != len(p):
        return False
    c = [q[i] for i in p]
    if c == list(range(len(c))):
        graph.nodes[graph.nodes.index(t)] = Node("Identity", [src.inputs[0]], list(t.outputs),
                                                 {}, t.name)
    else:
        t.inputs = [src.inputs[0]]
        t.attrs = dict(t.attrs, perm=c)
    return True


def _permuted_const(graph: Graph, value: np.ndarray, p: list[int], prefix: str) -> str:
    r = len(p)
    v = value.reshape((1,) * (r - value.ndim) + value.shape) if value.ndim < r else value
    return graph.add_const(prefix, np.ascontiguousarray(v.transpose(_inverse(p))))


def _below(graph: Graph, op: Node, new_inputs: list[str], attrs: dict, p: list[int],
           t: Node) -> None:
    """op (now reading untransposed inputs) -> Transpose(p) after it, writing op's
    outputs, so graph outputs keep their names."""
    mid = graph.unique_name(f"{op.outputs[0]}_pre_transpose")
    i = graph.nodes.index(op)
    graph.nodes[i:i + 1] = [Node(op.op, new_inputs, [mid], attrs, op.name),
                            Node("Transpose", [mid], list(op.outputs), {"perm": list(p)},
                                 graph.unique_name(f"{t.name}_sunk"))]


def _per_tensor_dq(view: View, node: Node | None) -> bool:
    """A DequantizeLinear with one-element scale and zero point (elementwise)."""
    return node is not None and node.op == "DequantizeLinear" and \
        all(_scalar_const(view, i) for i in node.inputs[1:])


def _sink(graph: Graph, view: View, t: Node) -> bool:
    """Move Transpose t below its only consumer when that consumer allows it."""
    p = _perm(t)
    y = t.outputs[0]
    op = view.only_use(y)
    if p is None or op is None or op.bodies():
        return False
    x = t.inputs[0]
    k = op.inputs.index(y)
    new_inputs = None
    attrs = dict(op.attrs)
    if op.op in UNARY and k == 0 and all(_scalar_const(view, i) for i in op.inputs[1:]):
        new_inputs = [x] + op.inputs[1:]
    elif op.op in BINARY and len(op.inputs) == 2 and op.inputs.count(y) == 1:
        other = op.inputs[1 - k]
        ot = view.prod(other, "Transpose")
        if view.is_const(other):
            c = view.const(other)
            if c.ndim > len(p):
                return False
            other = other if c.size == 1 else _permuted_const(graph, c, p, f"{other}_perm")
        elif ot is not None and _perm(ot) == p and view.only_use(other) is op:
            other = ot.inputs[0]
        else:
            return False
        new_inputs = [x, other] if k == 0 else [other, x]
    elif op.op == "Pad" and k == 0 and view.is_const(op.inputs[1]) and \
            (len(op.inputs) < 4 or not op.inputs[3]):
        pads = view.const(op.inputs[1]).reshape(-1)
        r = len(p)
        if pads.size != 2 * r:
            return False
        new = np.zeros(2 * r, np.int64)
        for i in range(r):
            new[p[i]], new[r + p[i]] = pads[i], pads[r + i]
        new_inputs = [x, graph.add_const(f"{op.name}_pads", new)] + op.inputs[2:]
    elif op.op == "Concat":
        srcs = [view.prod(i, "Transpose") for i in op.inputs]
        if any(s is None or _perm(s) != p or view.only_use(s.outputs[0]) is not op
               for s in srcs) or len(set(op.inputs)) != len(op.inputs):
            return False
        axis = int(op.attrs.get("axis", 0))
        axis = axis + len(p) if axis < 0 else axis
        attrs["axis"] = p[axis]
        new_inputs = [s.inputs[0] for s in srcs]
    elif op.op in REDUCE and k == 0 and int(op.attrs.get("keepdims", 1)) and \
            len(op.inputs) > 1 and view.is_const(op.inputs[1]):
        axes = view.const(op.inputs[1]).reshape(-1)
        r = len(p)
        new_axes = np.array(sorted(p[int(a) % r] for a in axes), np.int64)
        new_inputs = [x, graph.add_const(f"{op.name}_axes", new_axes)]
    if new_inputs is None:
        return False
    _below(graph, op, new_inputs, attrs, p, t)
    return True


def _hoist_over_dequantize(graph: Graph, view: View, t: Node) -> bool:
    dq = view.prod(t.inputs[0])
    if not _per_tensor_dq(view, dq) or view.only_use(dq.outputs[0]) is not t:
        return False
    mid = graph.unique_name(f"{dq.inputs[0]}_transposed")
    i = graph.nodes.index(dq)
    graph.nodes[i:i + 1] = [Node("Transpose", [dq.inputs[0]], [mid], dict(t.attrs), t.name),
                            Node("DequantizeLinear", [mid] + dq.inputs[1:], list(t.outputs),
                                 dict(dq.attrs), dq.name)]
    graph.nodes.remove(t)
    return True


def _sink_through_dequantize(graph: Graph, view: View, t: Node) -> bool:
    dq = view.only_use(t.outputs[0])
    if not _per_tensor_dq(view, dq) or dq.inputs[0] != t.outputs[0]:
        return False
    op = view.only_use(dq.outputs[0])
    if op is None or (op.op not in UNARY and op.op != "Pad"):
        return False
    saved = list(graph.nodes)
    mid = graph.unique_name(f"{t.inputs[0]}_dq")
    moved = Node("Transpose", [mid], list(dq.outputs), dict(t.attrs), t.name)
    i = graph.nodes.index(dq)
    graph.nodes[i:i + 1] = [Node("DequantizeLinear", [t.inputs[0]] + dq.inputs[1:], [mid],
                                 dict(dq.attrs), dq.name), moved]
    graph.nodes.remove(t)
    if _sink(graph, View(graph), moved):
        return True
    graph.nodes[:] = saved                      # op would not take it: as it was
    return False


def _transposed_operand(view: View, name: str, p: list[int], reader: Node) -> Node | None:
    """`name` = T_p(x) or per-tensor DQ(T_p(x)), each node read by `reader` only -> the
    node whose input 0 is T_p(x)'s output (T itself or the DQ)."""
    node = view.prod(name)
    if node is None or view.only_use(name) is not reader:
        return None
    if node.op == "DequantizeLinear":
        if not _per_tensor_dq(view, node):
            return None
        t = view.prod(node.inputs[0], "Transpose")
        ok = t is not None and _perm(t) == p and view.only_use(t.outputs[0]) is node
        return node if ok else None
    return node if node.op == "Transpose" and _perm(node) == p else None


def _sink_below_dequantized_operands(graph: Graph, view: View, t: Node) -> bool:
    p = _perm(t)
    dq = view.only_use(t.outputs[0])
    op = view.only_use(dq.outputs[0]) if dq is not None and dq.op == "DequantizeLinear" \
        else None
    if p is None or op is None or not (op.op == "Concat" or
                                       (op.op in BINARY and len(op.inputs) == 2)):
        return False
    if len(set(op.inputs)) != len(op.inputs):
        return False
    found = [_transposed_operand(view, i, p, op) for i in op.inputs]
    if any(f is None for f in found):
        return False
    new_inputs = []
    for name, node in zip(op.inputs, found):
        if node.op == "Transpose":
            new_inputs.append(node.inputs[0])
        else:                         # the DQ now reads the untransposed data
            node.inputs = [view.prod(node.inputs[0]).inputs[0]] + node.inputs[1:]
            new_inputs.append(name)
    attrs = dict(op.attrs)
    if op.op == "Concat":
        axis = int(attrs.get("axis", 0))
        attrs["axis"] = p[axis + len(p) if axis < 0 else axis]
    _below(graph, op, new_inputs, attrs, p, t)
    return True


def push_transposes(graph: Graph) -> bool:
    """The rewrites of the module docstring until none applies; True if any did."""
    if "Transpose" not in graph.op_counts():
        return False
    changed = False
    for _ in range(10 * len(graph.nodes) + 10):        # each step removes or lowers one
        view = View(graph)
        did = False
        for t in list(graph.nodes):
            if t.op != "Transpose" or id(t) not in view.alive:
                continue
            if _fold_pair(graph, view, t) or _sink(graph, view, t) or \
                    _sink_through_dequantize(graph, view, t) or \
                    _hoist_over_dequantize(graph, view, t) or \
                    _sink_below_dequantized_operands(graph, view, t):
                did = True
                break
        if not did:
            break
        changed = True
        graph.toposort()
    if changed:
        from .fold import eliminate_dead_code
        eliminate_dead_code(graph)
    return changed
