"""ONNX converters of the elementwise family: older-opset forms -> the newest signature.

Ops not listed here need no converter: `generic` copies them with schema defaults filled.
  Clip     opset < 11: min/max attributes -> constant inputs
  Dropout  opset < 12: ratio attribute -> constant input; opset < 10: the mask has the
           input's type -> bool mask followed by CastLike
  Cast / CastLike: refuse string, bfloat16, float8, 4- and 2-bit types up front
  Equal    refuse string inputs up front (edgenn's tensors are numeric)
"""
from __future__ import annotations

import numpy as np

from ...errors import EdgennError, UnsupportedOpError
from ...graph.dtypes import from_onnx
from ...graph.shapes.elementwise import NUMERIC_DTYPES
from ...registry import converter
from .importer import attribute_values, schema_defaults


def _attrs(onode, ctx) -> dict:
    attrs = schema_defaults(onode.op_type, ctx.opset)
    attrs.update(attribute_values(onode))
    return attrs


def known_dtype(ctx, name: str) -> str | None:
    """dtype of a constant or graph input, None for tensors computed by nodes."""
    if not name:
        return None
    if name in ctx.graph.consts:
        return ctx.graph.consts[name].dtype.name
    for v in ctx.graph.inputs:
        if v.name == name:
            return v.dtype
    return None


def _refuse(onode, dtype: str):
    raise UnsupportedOpError({onode.op_type: [onode.name]},
                             f"casts from or to {dtype} are not supported "
                             f"(supported: bool, integer and float16/32/64 types)")


def _check_cast_input(onode, ctx) -> None:
    src = known_dtype(ctx, onode.input[0])
    if src is not None and src not in NUMERIC_DTYPES:
        _refuse(onode, src)


@converter("Cast")
def convert_cast(onode, ctx):
    attrs = _attrs(onode, ctx)
    if "to" not in attrs:
        raise UnsupportedOpError({onode.op_type: [onode.name]}, "Cast without 'to'")
    to = attrs["to"]
    if isinstance(to, str):  # opset 1-5 spelled the type as a string
        raise UnsupportedOpError({onode.op_type: [onode.name]}, "Cast with a string 'to'")
    try:
        dtype = from_onnx(int(to))
    except EdgennError:
        dtype = f"ONNX type #{to}"
    if dtype not in NUMERIC_DTYPES:
        _refuse(onode, dtype)
    _check_cast_input(onode, ctx)
    ctx.emit("Cast", list(onode.input), list(onode.output), attrs, onode.name)


@converter("CastLike")
def convert_castlike(onode, ctx):
    _check_cast_input(onode, ctx)
    target = known_dtype(ctx, onode.input[1]) if len(onode.input) > 1 else None
    if target is not None and target not in NUMERIC_DTYPES:
        _refuse(onode, target)
    ctx.emit("CastLike", list(onode.input), list(onode.output), _attrs(onode, ctx), onode.name)


@converter("Equal")
def convert_equal(onode, ctx):
    """Equal also compares strings (opset 19); edgenn's tensors are numeric only."""
    for name in onode.input:
        dtype = known_dtype(ctx, name)
        if dtype is not None and dtype not in NUMERIC_DTYPES:
            raise UnsupportedOpError({onode.op_type: [onode.name]},
                                     f"Equal on {dtype} tensors is not supported")
    ctx.emit("Equal", list(onode.input), list(onode.output), _attrs(onode, ctx), onode.name)


@converter("Clip")
def convert_clip(onode, ctx):
    attrs = attribute_values(onode)
    inputs = list(onode.input)
    if ctx.opset < 11:
        lo, hi = attrs.pop("min", None), attrs.pop("max", None)
        inputs = inputs[:1]
        inputs.append("" if lo is None else ctx.add_const(f"{onode.name}_min",
                                                          np.float32(lo)))
        inputs.append("" if hi is None else ctx.add_const(f"{onode.name}_max",
                                                          np.float32(hi)))
        while inputs and not inputs[-1]:
            inputs.pop()
    ctx.emit("Clip", inputs, list(onode.output), attrs, onode.name)


@converter("Dropout")
def convert_dropout(onode, ctx):
    attrs = attribute_values(onode)
    inputs = list(onode.input)
    outputs = list(onode.output)
    if ctx.opset < 12:
        ratio = attrs.pop("ratio", 0.5)
        attrs.pop("is_test", None)
        inputs = inputs[:1] + [ctx.add_const(f"{onode.name}_ratio", np.float32(ratio))]
    else:
        training = ctx.const(inputs[2]) if len(inputs) > 2 else None
        ratio = ctx.const(inputs[1]) if len(inputs) > 1 else None
        if training is not None and bool(training.reshape(())) and \
                (ratio is None or float(ratio.reshape(())) != 0.0):
            raise UnsupportedOpError({onode.op_type: [onode.name]},
                                     "training-mode Dropout (random masks) is not supported")
    if ctx.opset < 10 and len(outputs) > 1 and outputs[1]:
        # the mask had the input's type before opset 10: bool mask -> CastLike(mask, data)
        mask = ctx.graph.unique_name(f"{onode.name}_mask_bool")
        ctx.emit("Dropout", inputs, [outputs[0], mask], attrs, onode.name)
        ctx.emit("CastLike", [mask, inputs[0]], [outputs[1]], {"saturate": 1})
        return
    ctx.emit("Dropout", inputs, outputs, attrs, onode.name)
