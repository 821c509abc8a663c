"""ONNX converters of the tensor family: bring older opset forms to the newest signature.

Canonical forms (newest opset): Squeeze/Unsqueeze axes, Slice starts/ends/axes, TopK k,
Pad pads/constant_value and Split sizes are inputs. Split always carries either a `split`
input or `num_outputs` (= its number of outputs), because the reference kernel does not
see the node's outputs. Ops not listed here use the importer's `generic` converter.

Constant is converter-only: its value goes straight into Graph.consts under the node's
output name, so it never becomes a node.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...registry import converter
from .importer import attribute_values, generic, schema_defaults

# ONNX ops handled entirely by conversion (no node, so no shape rule or kernel)
CONVERTER_ONLY = ("Constant", "Scatter")


def _attrs(onode, ctx) -> dict:
    attrs = schema_defaults(onode.op_type, ctx.opset)
    attrs.update(attribute_values(onode))
    return attrs


def _int64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@converter("Constant")
def constant(onode, ctx):
    attrs = attribute_values(onode)
    if "value" in attrs:
        value = np.asarray(attrs["value"])
    elif "value_float" in attrs:
        value = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        value = np.array(attrs["value_floats"], dtype=np.float32).reshape(-1)
    elif "value_int" in attrs:
        value = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        value = np.array(attrs["value_ints"], dtype=np.int64).reshape(-1)
    else:
        kinds = sorted(attrs) or ["no value"]
        raise UnsupportedOpError({"Constant": [onode.name]},
                                 f"Constant with {', '.join(kinds)} (string or sparse "
                                 f"constants are not supported)")
    if value.dtype.kind in "OUS":
        raise UnsupportedOpError({"Constant": [onode.name]}, "string constants")
    ctx.graph.consts[onode.output[0]] = np.array(value, order="C")  # copy, keeps 0-d


def _axes_to_input(onode, ctx, first_opset: int) -> None:
    """Squeeze/Unsqueeze before opset 13: attribute `axes` -> int64 constant input."""
    if ctx.opset >= first_opset:
        return generic(onode, ctx)
    attrs = _attrs(onode, ctx)
    inputs = [onode.input[0]]
    axes = attrs.pop("axes", None)
    if axes is not None:
        inputs.append(ctx.add_const(f"{onode.name}_axes", _int64(axes)))
    elif onode.op_type == "Unsqueeze":
        raise GraphError(f"Unsqueeze node {onode.name!r} has no 'axes'")
    ctx.emit(onode.op_type, inputs, list(onode.output), attrs, onode.name)


@converter("Squeeze", "Unsqueeze")
def squeeze(onode, ctx):
    _axes_to_input(onode, ctx, 13)


@converter("Split")
def split(onode, ctx):
    attrs = _attrs(onode, ctx)
    inputs = list(onode.input)
    sizes = attrs.pop("split", None)  # opset < 13 attribute
    if sizes is not None and len(sizes):
        inputs = [inputs[0], ctx.add_const(f"{onode.name}_split", _int64(sizes))]
    if len(inputs) > 1 and inputs[1]:
        attrs.pop("num_outputs", None)
        inputs = inputs[:2]
    else:  # equal parts (the last smaller, opset 18): record how many
        n = attrs.get("num_outputs", len(onode.output))
        if n != len(onode.output):
            raise GraphError(f"Split node {onode.name!r}: num_outputs {n} but "
                             f"{len(onode.output)} outputs")
        attrs["num_outputs"] = n
        inputs = inputs[:1]
    ctx.emit("Split", inputs, list(onode.output), attrs, onode.name)


@converter("Slice")
def slice_(onode, ctx):
    if ctx.opset >= 10:
        return generic(onode, ctx)
    attrs = _attrs(onode, ctx)
    inputs = [onode.input[0]]
    for key in ("starts", "ends", "axes"):
        if key in attrs:
            inputs.append(ctx.add_const(f"{onode.name}_{key}", _int64(attrs.pop(key))))
    ctx.emit("Slice", inputs, list(onode.output), attrs, onode.name)


@converter("TopK")
def topk(onode, ctx):
    attrs = _attrs(onode, ctx)
    inputs = list(onode.input)
    if ctx.opset < 10:
        inputs = [inputs[0], ctx.add_const(f"{onode.name}_k", _int64([attrs.pop("k")]))]
    attrs.setdefault("largest", 1)  # before opset 11 TopK was always largest, sorted
    attrs.setdefault("sorted", 1)
    ctx.emit("TopK", inputs, list(onode.output), attrs, onode.name)


@converter("Pad")
def pad(onode, ctx):
    if ctx.opset >= 11:
        return generic(onode, ctx)
    attrs = _attrs(onode, ctx)
    pads = ctx.add_const(f"{onode.name}_pads", _int64(attrs.pop("pads")))
    # the kernel casts constant_value to the data dtype
    value = ctx.add_const(f"{onode.name}_value",
                          np.array(attrs.pop("value", 0.0), dtype=np.float32))
    ctx.emit("Pad", [onode.input[0], pads, value], list(onode.output), attrs, onode.name)


@converter("OneHot")
def one_hot(onode, ctx):
    attrs = _attrs(onode, ctx)
    if ctx.opset < 11:  # opset 9/10: negative indices are out of range (all off_value)
        attrs["negative_indices_off"] = 1
    ctx.emit("OneHot", list(onode.input), list(onode.output), attrs, onode.name)


@converter("Scatter")
def scatter(onode, ctx):
    """Scatter (opset 9-10, deprecated in 11) is ScatterElements without reduction."""
    attrs = _attrs(onode, ctx)
    attrs.setdefault("reduction", "none")
    ctx.emit("ScatterElements", list(onode.input), list(onode.output), attrs, onode.name)
