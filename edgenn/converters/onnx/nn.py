"""ONNX converters of the nn family: bring older opset forms to the newest signature.

Conv, ConvTranspose, the pools, Gemm, MatMul, InstanceNormalization, LayerNormalization and
LRN need none (`generic` copies attributes and fills schema defaults; the kernels read
attributes missing in old opsets, e.g. MaxPool-7 dilations, with the newest defaults).
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...registry import converter
from .importer import attribute_values, schema_defaults

RESIZE_OPSET = 19  # the canonical (newest) Resize signature


def _refuse(onode, why: str):
    raise UnsupportedOpError({onode.op_type: [onode.name]}, f"{onode.op_type} {onode.name!r}: "
                             f"{why}")


def _attrs(onode, ctx, canonical_opset: int | None = None) -> dict:
    attrs = schema_defaults(onode.op_type, canonical_opset) if canonical_opset else {}
    attrs.update(schema_defaults(onode.op_type, ctx.opset))
    attrs.update(attribute_values(onode))
    return attrs


def _input(onode, i: int) -> str:
    return onode.input[i] if len(onode.input) > i else ""


@converter("BatchNormalization")
def batch_norm(onode, ctx):
    attrs = _attrs(onode, ctx, 15)
    if int(attrs.get("training_mode", 0)):
        _refuse(onode, "training_mode=1 is not supported (inference only)")
    if int(attrs.pop("spatial", 1)) != 1:  # opset 7-8
        _refuse(onode, "spatial=0 (per-activation statistics) is not supported")
    attrs.pop("is_test", None)
    if any(o for o in onode.output[1:]):
        _refuse(onode, "the running/saved mean and variance outputs exist only in training")
    ctx.emit("BatchNormalization", list(onode.input[:5]), [onode.output[0]], attrs, onode.name)


@converter("GroupNormalization")
def group_norm(onode, ctx):
    attrs = _attrs(onode, ctx, 21)
    if ctx.opset < 21:  # opset 18-20: scale and bias have one value per group
        attrs["per_group_scale"] = 1
    ctx.emit("GroupNormalization", list(onode.input), list(onode.output), attrs, onode.name)


@converter("RMSNormalization")
def rms_norm(onode, ctx):
    """Defined from opset 23 only, past the opsets `generic` fills defaults from: its
    defaults (axis -1, epsilon 1e-5, stash_type 1) come from that version's schema."""
    attrs = schema_defaults("RMSNormalization", 23)
    attrs.update(attribute_values(onode))
    ctx.emit("RMSNormalization", list(onode.input[:2]), [onode.output[0]], attrs, onode.name)


def _empty_to_omitted(ctx, name: str) -> str:
    value = ctx.const(name)
    return "" if value is not None and value.size == 0 else name


def _old_nearest_mode(ctx, scales: str) -> str:
    """Opset <= 10 nearest: ONNX Runtime rounds down when upsampling and up when
    downsampling; with constant scales that is one of the standard modes."""
    value = ctx.const(scales)
    if value is not None and np.all(value >= 1):
        return "floor"
    if value is not None and np.all(value <= 1):
        return "ceil"
    return "simple"


def _emit_resize(onode, ctx, inputs: list[str], attrs: dict):
    if attrs.get("mode") not in ("nearest", "linear", "cubic"):
        _refuse(onode, f"mode {attrs.get('mode')!r} is not supported")
    ctx.emit("Resize", inputs, [onode.output[0]], attrs, onode.name)


@converter("Resize")
def resize(onode, ctx):
    attrs = _attrs(onode, ctx, RESIZE_OPSET)
    if ctx.opset <= 10:  # Resize-10: (X, scales), asymmetric coordinates
        scales = _input(onode, 1)
        attrs.update(coordinate_transformation_mode="asymmetric",
                     nearest_mode=_old_nearest_mode(ctx, scales))
        _emit_resize(onode, ctx, [onode.input[0], "", scales, ""], attrs)
        return
    inputs = [onode.input[0]] + [_empty_to_omitted(ctx, _input(onode, i)) for i in (1, 2, 3)]
    _emit_resize(onode, ctx, inputs, attrs)


@converter("Upsample")
def upsample(onode, ctx):
    attrs = attribute_values(onode)
    mode = attrs.get("mode", "nearest")
    mode = "linear" if mode in ("linear", "bilinear") else mode
    if ctx.opset < 9:  # Upsample-7: scales is an attribute
        if "scales" not in attrs:
            _refuse(onode, "Upsample-7 without a scales attribute")
        scales = ctx.add_const(f"{onode.name}_scales", np.asarray(attrs["scales"], np.float32))
    else:
        scales = onode.input[1]
    ra = schema_defaults("Resize", RESIZE_OPSET)
    ra.update(mode=mode, coordinate_transformation_mode="asymmetric",
              nearest_mode="floor" if mode == "nearest" else ra.get("nearest_mode"))
    _emit_resize(onode, ctx, [onode.input[0], "", scales, ""], ra)
