"""ONNX ModelProto -> edgenn Graph.

Every ONNX node goes through its converter (converters/onnx/<family>.py). Converters bring
each op to one canonical form, that of the newest ONNX opset (axes/split/... as inputs,
schema defaults filled in), so the shape rules and kernels handle one signature only.
Ops with no converter use `generic`, which copies attributes and fills schema defaults.
"""
from __future__ import annotations

import numpy as np

from ...errors import EdgennError, ModelFormatError, UnsupportedOpError
from ...graph.dtypes import from_onnx
from ...graph.ir import Graph, Node, ValueInfo
from ...registry import CONVERTERS, REFERENCE, SHAPE_RULES
from . import proto, schemas

MIN_OPSET, MAX_OPSET = 7, 21
# attributes added after MAX_OPSET whose semantics the kernels implement
KNOWN_NEWER_ATTRIBUTES = {"SpaceToDepth": {"mode"}}


class ConvertContext:
    """What a converter sees: the graph under construction, constants, the opset."""

    def __init__(self, graph: Graph, opset: int, parent: "ConvertContext | None" = None):
        self.graph = graph
        self.opset = opset
        self.parent = parent       # the enclosing scope's context, in a sub-graph
        self.source_opset = opset  # the model's declared opset (before clamping)

    def const(self, name: str) -> np.ndarray | None:
        """The value of tensor `name` if it is a constant (initializer or Constant node),
        of this scope or an enclosing one."""
        if not name:
            return None
        if name in self.graph.consts:
            return self.graph.consts[name]
        defined_here = any(name in n.outputs for n in self.graph.nodes) or \
            any(v.name == name for v in self.graph.inputs)
        return None if defined_here or self.parent is None else self.parent.const(name)

    def add_const(self, prefix: str, value) -> str:
        return self.graph.add_const(prefix, np.asarray(value))

    def emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict | None = None,
             name: str = "") -> Node:
        node = Node(op, list(inputs), list(outputs), dict(attrs or {}),
                    name or self.graph.unique_name(op.lower()))
        self.graph.nodes.append(node)
        return node


def attribute_values(onode: proto.Node) -> dict:
    attrs = {}
    for a in onode.attribute:
        if a.type in (proto.GRAPH, proto.GRAPHS):
            continue            # sub-graphs: the control-flow converters (control.py)
        value = a.value()
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        attrs[a.name] = value
    return attrs


def schema_defaults(op: str, opset: int) -> dict:
    """The defaults of `op`'s attributes at `opset` (a fresh dict the caller may change)."""
    schema = schemas.get(op, opset)
    if schema is None:
        return {}
    return {name: value.copy() if isinstance(value, (list, np.ndarray)) else value
            for name, value in schema.attributes.items() if value is not None}


def generic(onode: proto.Node, ctx: ConvertContext) -> None:
    """Copy the node, with schema defaults filled in for absent attributes."""
    attrs = schema_defaults(onode.op_type, ctx.opset)
    attrs.update(attribute_values(onode))
    ctx.emit(onode.op_type, list(onode.input), list(onode.output), attrs, onode.name)


def _value_info(v: proto.ValueInfo, untyped_ok: bool = False) -> ValueInfo:
    """A graph input / output; untyped_ok: a body's may leave its type or shape to
    inference (dtype "" / shape None: the planner binds them from the enclosing node)."""
    t = v.type
    if untyped_ok and t.kind is None:
        return ValueInfo(v.name, "", None)
    if untyped_ok and t.kind == "tensor" and t.shape is None:
        return ValueInfo(v.name, from_onnx(t.elem_type), None)    # rank unknown
    if t.kind != "tensor":
        raise UnsupportedOpError({"non-tensor value": [v.name]}, "only tensor inputs/outputs")
    shape = []
    for i, (dim_value, dim_param) in enumerate(t.shape or ()):
        if dim_value is not None and dim_value >= 0:
            shape.append(int(dim_value))
        else:
            shape.append(dim_param or f"{v.name}:{i}")
    return ValueInfo(v.name, from_onnx(t.elem_type), tuple(shape))


def _opset(model: proto.Model) -> int:
    for domain, version in model.opset_import:
        if domain in ("", "ai.onnx"):
            return int(version)
    return MAX_OPSET


def _unknown_version(onode: proto.Node, opset: int) -> int | None:
    """Models may declare opsets outside MIN_OPSET..MAX_OPSET. A node is accepted when its
    op's definition at the model's opset is one we implement: the same definition as at
    the nearest supported opset, or a newer one that changed only the types it admits
    (the dtype checks cover those) and so sets no attribute our definition lacks.
    -> the op's version when it needs semantics we do not know, else None."""
    nearest = min(max(opset, MIN_OPSET), MAX_OPSET)
    if opset == nearest:
        return None
    theirs, ours = schemas.get(onode.op_type, opset), schemas.get(onode.op_type, nearest)
    if theirs is None or ours is None:
        return None  # an op unknown at one of the two: the caller reports what it lacks
    if theirs.since_version == ours.since_version:
        return None
    known = set(ours.attributes) | KNOWN_NEWER_ATTRIBUTES.get(onode.op_type, set())
    if opset > MAX_OPSET and all(a.name in known for a in onode.attribute):
        return None
    return theirs.since_version


def _initializers(g: proto.Graph) -> dict[str, np.ndarray]:
    if g.sparse_initializer:
        raise UnsupportedOpError({"sparse initializer": g.sparse_initializer},
                                 "sparse initializers are not supported")
    consts = {}
    for t in g.initializer:
        consts[t.name] = t.array()
    return consts


def convert_nodes(onodes, ctx: ConvertContext, missing: dict, opset: int) -> None:
    """Convert ONNX nodes into ctx.graph; every op that cannot be converted is added to
    `missing` (op -> node names) instead of raising, so all gaps are listed at once."""
    for i, onode in enumerate(onodes):
        if not onode.name:
            onode.name = f"{onode.op_type}_{i}"
        if onode.domain not in ("", "ai.onnx"):
            qualified = f"{onode.domain}.{onode.op_type}"
            contrib = CONVERTERS.get(qualified)      # e.g. com.microsoft ops (contrib.py)
            if contrib is None:
                missing.setdefault(qualified, []).append(onode.name)
                continue
            try:
                contrib(onode, ctx)
            except UnsupportedOpError as exc:
                for op, names in exc.unsupported.items():
                    missing.setdefault(op, []).extend(names)
            continue
        newer = _unknown_version(onode, opset)
        if newer:
            missing.setdefault(f"{onode.op_type} (version {newer})", []).append(onode.name)
            continue
        conv = CONVERTERS.get(onode.op_type)
        if conv is None and not (onode.op_type in SHAPE_RULES and onode.op_type in REFERENCE):
            missing.setdefault(onode.op_type, []).append(onode.name)
            continue
        try:
            (conv or generic)(onode, ctx)
        except UnsupportedOpError as exc:
            for op, names in exc.unsupported.items():
                missing.setdefault(op, []).extend(names)


def subgraph(gproto, ctx: ConvertContext, missing: dict) -> Graph:
    """A control-flow op's body (If branch, Loop / Scan body) as a Graph: its formal
    inputs, outputs, nodes and constants. Tensors of the enclosing scopes it reads stay
    free names (graph/control.py: captures)."""
    consts = _initializers(gproto)
    sub = Graph(nodes=[], consts=consts,
                inputs=[_value_info(v, True) for v in gproto.input if v.name not in consts],
                outputs=[_value_info(v, True) for v in gproto.output], meta={})
    sctx = ConvertContext(sub, ctx.opset, parent=ctx)
    sctx.source_opset = ctx.source_opset
    convert_nodes(gproto.node, sctx, missing, ctx.source_opset)
    return sub


def from_model(model: proto.Model) -> Graph:
    """Convert a loaded ModelProto. Raises UnsupportedOpError listing every gap at once."""
    from ...oplist import load_converters
    load_converters()
    opset = _opset(model)
    g = model.graph
    consts = _initializers(g)
    const_names = set(consts)
    inputs = [_value_info(v) for v in g.input if v.name not in const_names]
    strings = [v.name for v in inputs if v.dtype == "object"]
    if strings:       # no kernel computes on strings (a string output is the op's to refuse)
        raise UnsupportedOpError({"string input": strings}, "string inputs are not supported")
    graph = Graph(nodes=[], consts=consts,
                  inputs=inputs,
                  outputs=[_value_info(v) for v in g.output],
                  meta={"opset": opset, "producer": model.producer_name,
                        "source_nodes": len(g.node), "graph_name": g.name,
                        "domain": model.domain, "doc_string": model.doc_string,
                        "graph_doc_string": g.doc_string,
                        "model_version": int(model.model_version),
                        "metadata_props": dict(model.metadata_props)})
    ctx = ConvertContext(graph, min(max(opset, MIN_OPSET), MAX_OPSET))
    ctx.source_opset = opset
    missing: dict[str, list[str]] = {}
    convert_nodes(g.node, ctx, missing, opset)
    if missing:
        raise UnsupportedOpError(missing, "nothing was run; these ops need support first")
    graph.validate()
    return graph


def load_onnx(source) -> proto.Model:
    """Parse ONNX from a path, bytes or an onnx.ModelProto (serialized and read back, so
    there is one reader). Reading runs no code from the file (proto.py)."""
    if hasattr(source, "SerializeToString"):
        return proto.parse(source.SerializeToString())
    if isinstance(source, (bytes, bytearray, memoryview)):
        return proto.parse(bytes(source))
    return proto.read(source)


def import_onnx(source) -> Graph:
    """ONNX (path, bytes or ModelProto) -> Graph. A model the converters trip over for
    any reason is a ModelFormatError (never a bare exception from deep inside)."""
    model = source if isinstance(source, proto.Model) else load_onnx(source)
    if not model.graph.node and not model.graph.output:
        raise ModelFormatError("the ONNX model has no graph")
    try:
        return from_model(model)
    except EdgennError:
        raise
    except RecursionError as exc:
        raise ModelFormatError("the ONNX model is nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - a malformed model, said as one
        raise ModelFormatError(f"malformed ONNX model: {type(exc).__name__}: {exc}") from exc
