"""ONNX converters of the recurrent family (LSTM, GRU, RNN, opset 7-22): the schema's
defaults filled in, the attributes checked once here (a clear error naming the node)."""
from __future__ import annotations

from ...errors import GraphError, UnsupportedOpError
from ...graph.ir import Node
from ...graph.shapes.recurrent import activations, directions
from ...registry import converter
from .importer import attribute_values, schema_defaults


@converter("LSTM", "GRU", "RNN")
def recurrent(onode, ctx):
    attrs = schema_defaults(onode.op_type, ctx.opset)
    attrs.update(attribute_values(onode))
    try:
        node = Node(onode.op_type, [], [], attrs, onode.name)
        directions(node)
        activations(node)
    except GraphError as exc:
        why = str(exc).split(': ', 1)[-1]
        raise UnsupportedOpError({f"{onode.op_type} ({why})": [onode.name]}, str(exc)) from exc
    ctx.emit(onode.op_type, list(onode.input), list(onode.output), attrs, onode.name)
