"""ONNX converters of the reduce family: older-opset forms -> the newest signature.

  Reduce*   axes attribute (ReduceSum before opset 13, the others before 18) -> constant
            int64 input; keepdims / noop_with_empty_axes always present
  Softmax, LogSoftmax, Hardmax before opset 13: the input is coerced to 2-D at `axis`
            (default 1) -> attribute coerce_2d=1, which the shape rule and kernel honour
ArgMax/ArgMin and CumSum need no converter (`generic`).
"""
from __future__ import annotations

import numpy as np

from ...graph.shapes.reduce import REDUCE_OPS, SOFTMAX_OPS
from ...registry import converter
from .importer import MAX_OPSET, attribute_values, schema_defaults

NEWEST = MAX_OPSET  # newest opset edgenn reads; its signature is the canonical one


@converter(*REDUCE_OPS)
def convert_reduce(onode, ctx):
    attrs = schema_defaults(onode.op_type, NEWEST)      # keepdims, noop_with_empty_axes
    attrs.update(schema_defaults(onode.op_type, ctx.opset))
    attrs.update(attribute_values(onode))
    inputs = list(onode.input)
    axes = attrs.pop("axes", None)
    if axes is not None and len(axes):  # opset < 18 (< 13 for ReduceSum): attribute form
        inputs = inputs[:1] + [ctx.add_const(f"{onode.name}_axes",
                                             np.asarray(axes, dtype=np.int64))]
    ctx.emit(onode.op_type, inputs, list(onode.output), attrs, onode.name)


@converter(*SOFTMAX_OPS)
def convert_softmax(onode, ctx):
    attrs = schema_defaults(onode.op_type, ctx.opset)
    attrs.update(attribute_values(onode))
    if ctx.opset < 13:
        attrs.setdefault("axis", 1)
        attrs["coerce_2d"] = 1
    ctx.emit(onode.op_type, list(onode.input), list(onode.output), attrs, onode.name)
