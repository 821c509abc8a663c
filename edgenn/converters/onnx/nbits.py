"""ONNX converters of the nbits family (graph/shapes/nbits.py).

com.microsoft.MatMulNBits becomes edgenn's MatMulNBits with the same inputs and attrs
(K, N, bits, block_size, accuracy_level; the weights stay packed). Refused by name: bits
other than 2 / 4 / 8, bfloat16, weights prepacked for a GPU (weight_prepacked), and the
"omitted projection" form whose packed B has a zero dimension.

com.microsoft.GatherBlockQuantized becomes edgenn's GatherBlockQuantized: uint8 data as
onnxruntime has it; int4 / uint4 data and zero points (constants) widened to int8, one
code per byte (the int8 form). graph/passes/nbits.py turns a constant table gathered
along axis 0 into a QGather once folding has made its inputs constant (the builder writes
the tied table as a Reshape of the lm_head's MatMulNBits weight). Refused by name:
float8 / float4 data, bfloat16 scales, int4 / uint4 data computed at run time.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...graph.shapes.nbits import GATHER_BITS, MATMUL_BITS
from ...registry import converter
from .importer import attribute_values
from .quant import _known_dtype

MATMUL_INPUTS = 6
GATHER_INPUTS = 4


def _refuse(onode, what: str, why: str):
    raise UnsupportedOpError({f"com.microsoft.{onode.op_type} ({what})": [onode.name]},
                             f"com.microsoft.{onode.op_type} {onode.name!r}: {why}")


def _trim(inputs: list[str]) -> list[str]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


@converter("com.microsoft.MatMulNBits")
def matmul_nbits(onode, ctx):
    attrs = attribute_values(onode)
    bits = int(attrs.get("bits", 4))
    if bits not in MATMUL_BITS:
        _refuse(onode, f"bits {bits}", f"bits={bits} is not supported (supported: 2, 4, 8)")
    if int(attrs.get("weight_prepacked", 0) or 0):
        _refuse(onode, "weight_prepacked", "weights prepacked for a GPU layout "
                                           "(weight_prepacked != 0) are not supported")
    for key in ("K", "N", "block_size"):
        if key not in attrs:
            _refuse(onode, f"no {key}", f"attribute {key} is required")
    inputs = list(onode.input)[:MATMUL_INPUTS]
    for i, name in enumerate(inputs):
        if _known_dtype(ctx, name) == "bfloat16":
            _refuse(onode, "bfloat16", f"input {i} is bfloat16 (float32 and float16 are)")
    b = ctx.const(inputs[1]) if len(inputs) > 1 else None
    if b is not None and b.ndim == 3 and 0 in b.shape:
        _refuse(onode, "empty B", f"an omitted projection (B of shape {b.shape}) is "
                                  f"not supported")
    keep = {"K": int(attrs["K"]), "N": int(attrs["N"]), "bits": bits,
            "block_size": int(attrs["block_size"]),
            "accuracy_level": int(attrs.get("accuracy_level", 0))}
    ctx.emit("MatMulNBits", _trim(inputs), [onode.output[0]], keep, onode.name)


def _widen_int4(onode, ctx, name: str, what: str) -> str:
    """An int4 / uint4 constant -> a new int8 constant of the same values (one a byte)."""
    value = ctx.const(name)
    if value is None:
        _refuse(onode, f"{what} computed at run time", f"int4 / uint4 {what} must be a "
                                                        f"constant")
    return ctx.add_const(f"{name}/int8", np.asarray(value).astype(np.int8))


@converter("com.microsoft.GatherBlockQuantized")
def gather_block_quantized(onode, ctx):
    attrs = attribute_values(onode)
    keep = {"bits": int(attrs.get("bits", 4)), "block_size": int(attrs.get("block_size", 128)),
            "gather_axis": int(attrs.get("gather_axis", 0)),
            "quantize_axis": int(attrs.get("quantize_axis", 1))}
    inputs = _trim(list(onode.input)[:GATHER_INPUTS])
    data_dtype = _known_dtype(ctx, inputs[0])
    if data_dtype in ("int4", "uint4"):
        if keep["bits"] != 4:
            _refuse(onode, f"bits {keep['bits']}", f"{data_dtype} data needs bits 4")
        inputs[0] = _widen_int4(onode, ctx, inputs[0], "data")
        if len(inputs) > 3:
            if _known_dtype(ctx, inputs[3]) != data_dtype:
                _refuse(onode, "zero_points dtype", "zero_points must have data's dtype")
            inputs[3] = _widen_int4(onode, ctx, inputs[3], "zero_points")
    elif data_dtype is not None and data_dtype != "uint8":
        _refuse(onode, f"data {data_dtype}", f"data of dtype {data_dtype} is not supported "
                                             f"(uint8, int4 and uint4 are)")
    elif keep["bits"] not in GATHER_BITS:
        _refuse(onode, f"bits {keep['bits']}", f"bits={keep['bits']} is not supported "
                                               f"(supported: 2, 4, 8)")
    if _known_dtype(ctx, inputs[2]) == "bfloat16":
        _refuse(onode, "bfloat16", "bfloat16 scales are not supported")
    ctx.emit("GatherBlockQuantized", inputs, [onode.output[0]], keep, onode.name)
