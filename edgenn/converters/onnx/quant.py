"""ONNX converters of the quant family.

QuantizeLinear / DequantizeLinear keep the ONNX-21 signature (attrs axis, block_size;
QuantizeLinear also output_dtype, used only when the zero point is omitted). What edgenn
does not implement is refused here, at import, with the reason: blocked quantization
(block_size > 0) and the 4-bit, 2-bit and float8/float4 types. The shape rules check the
same again for graphs built by hand.

QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger and DynamicQuantizeLinear need no
converter (`generic`); QConv / QGemm are internal (made by graph/passes/qdq.py).
"""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...graph.shapes.quant import DEQUANT_DTYPES, FLOAT_DTYPES, QUANT_DTYPES
from ...registry import converter
from .importer import attribute_values, schema_defaults

CANONICAL_OPSET = 21


def _refuse(onode, what: str, why: str):
    """`what` names the unsupported variant in the importer's list of gaps (which keeps
    only the op names), `why` is the full reason for callers that catch this error."""
    raise UnsupportedOpError({f"{onode.op_type} ({what})": [onode.name]},
                             f"{onode.op_type} {onode.name!r}: {why}")


def _known_dtype(ctx, name: str) -> str | None:
    """The dtype of a constant or graph input (other tensors are checked by shape rules)."""
    if not name:
        return None
    value = ctx.const(name)
    if value is not None:
        return value.dtype.name
    for v in ctx.graph.inputs:
        if v.name == name:
            return v.dtype
    return None


def _onnx_dtype_name(onode, elem_type: int) -> str:
    from ...graph.dtypes import from_onnx
    try:
        return from_onnx(int(elem_type))
    except UnsupportedOpError:
        _refuse(onode, f"output_dtype {elem_type}", f"output_dtype {elem_type} is not a "
                                                    f"supported type")


def _attrs(onode, ctx) -> dict:
    attrs = schema_defaults(onode.op_type, CANONICAL_OPSET)
    attrs.update(schema_defaults(onode.op_type, ctx.opset))
    attrs.update(attribute_values(onode))
    if int(attrs.get("block_size", 0) or 0):
        _refuse(onode, "block_size", f"blocked quantization (block_size="
                                     f"{attrs['block_size']}) is not supported; per-tensor "
                                     f"and per-axis are")
    attrs.pop("saturate", None)  # applies to float8 outputs only
    return attrs


def _check_dtype(onode, dtype: str | None, what: str, allowed) -> None:
    if dtype is not None and dtype not in allowed:
        _refuse(onode, f"{what} dtype {dtype}",
                f"{what} dtype {dtype} is not supported (supported: {', '.join(allowed)}; "
                f"int4/uint4/int2/uint2, float8 and float4 are not)")


@converter("QuantizeLinear")
def quantize_linear(onode, ctx):
    attrs = _attrs(onode, ctx)
    inputs = list(onode.input)
    zp = inputs[2] if len(inputs) > 2 else ""
    out = int(attrs.pop("output_dtype", 0) or 0)
    if out:
        name = _onnx_dtype_name(onode, out)
        _check_dtype(onode, name, "output", QUANT_DTYPES)
        if not zp:
            attrs["output_dtype"] = name
    _check_dtype(onode, _known_dtype(ctx, zp), "output", QUANT_DTYPES)
    _check_dtype(onode, _known_dtype(ctx, inputs[1]), "y_scale", FLOAT_DTYPES + ("int32",))
    if not zp:
        inputs = inputs[:2]
    ctx.emit("QuantizeLinear", inputs, [onode.output[0]], attrs, onode.name)


@converter("DequantizeLinear")
def dequantize_linear(onode, ctx):
    attrs = _attrs(onode, ctx)
    inputs = list(onode.input)
    if len(inputs) > 2 and not inputs[2]:
        inputs = inputs[:2]
    _check_dtype(onode, _known_dtype(ctx, inputs[0]), "input", DEQUANT_DTYPES)
    _check_dtype(onode, _known_dtype(ctx, inputs[1]), "x_scale", FLOAT_DTYPES)
    ctx.emit("DequantizeLinear", inputs, [onode.output[0]], attrs, onode.name)
