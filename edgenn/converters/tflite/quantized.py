"""Fully integer TFLite models -> edgenn's QDQ form, which graph/passes/qdq.py turns into
its integer kernels (QConv, QGemm, QAdd, uint8 data movement).

TFLite's int8 activations are asymmetric per tensor (scale s, zero point z in [-128,
127]); edgenn's integer kernels take uint8 activations. The two are the same numbers
shifted: q_u8 = q_i8 + 128 with zero point z + 128, exactly. So every run-time int8 tensor
t of the file becomes a uint8 tensor of the same name, and each op reading or writing
such tensors is imported as its float form between DequantizeLinear (per input) and
QuantizeLinear (per output): DQ(x_u8) -> Conv(DQ(w_s8), DQ(b_s32)) -> [act] -> Q -> y_u8.
Weights are int8 symmetric per output channel (zero point 0) and biases int32 at
s_x * s_w, which is the QDQ form the fusion pass maps onto QConv / QGemm one to one; ops
it does not map run as DQ -> float op -> Q (correct, only slower). Legacy uint8 models
(uint8 activations, asymmetric uint8 weights) import the same way; their weights, which
edgenn's int8 kernels cannot take, are dequantized to float constants at import.

The graph's inputs and outputs keep the file's types (int8 in, int8 out, as LiteRT's
API has them): int8 <-> uint8 at the boundary is DQ -> Q with the zero point moved by
128. QUANTIZE of a float input and DEQUANTIZE of an output map onto Q and DQ.

Rounding: the QDQ arithmetic rounds each requantization to nearest, ties to even, in
float32 (as XNNPACK's fp32 requantization, which LiteRT runs); TFLite's reference
kernels use a fixed-point multiplier that can differ by one step on ties.
"""
from __future__ import annotations

import numpy as np

from ...errors import ModelFormatError, UnsupportedOpError

WEIGHTED = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1}  # weight input
QUANT_DTYPES = ("int8", "uint8")


def is_quantized_activation(b, i: int) -> bool:
    t = b.t[i] if i >= 0 else None
    return t is not None and t.data is None and t.scale is not None and \
        t.dtype in QUANT_DTYPES


def is_quantized_const(b, i: int) -> bool:
    t = b.t[i] if i >= 0 else None
    return t is not None and t.data is not None and t.scale is not None and \
        t.dtype in ("int8", "uint8", "int16", "int32")


def involved(b, op) -> bool:
    """Does this op read or write run-time quantized tensors (or is it QUANTIZE)?"""
    return op.op == "QUANTIZE" or any(is_quantized_activation(b, i)
                                      for i in op.inputs + op.outputs)


def u8_params(b, i: int) -> tuple[str, str]:
    """(scale, uint8 zero point) constants of run-time quantized tensor i, made once."""
    if i not in b.u8_consts:
        t = b.t[i]
        if t.scale.size != 1:
            raise UnsupportedOpError({"per-channel quantized activations": [b.names[i]]})
        if not t.scale.reshape(-1)[0] > 0:
            raise ModelFormatError(f"tensor {b.names[i]!r}: a run-time quantized tensor "
                                   f"needs a scale > 0, not {float(t.scale.reshape(-1)[0])}")
        zp = int(t.zero_point.reshape(-1)[0]) + (128 if t.dtype == "int8" else 0)
        if not 0 <= zp <= 255:
            raise UnsupportedOpError({f"zero point {zp - 128} of an int8 tensor": [b.names[i]]})
        b.u8_consts[i] = (b.const(f"{b.names[i]}/scale", np.float32(t.scale.reshape(-1)[0])),
                         b.const(f"{b.names[i]}/zp", np.uint8(zp)))
    return b.u8_consts[i]


def u8_name(b, i: int) -> str:
    """The uint8 tensor that holds run-time quantized tensor i."""
    return b.u8_alias.get(i, b.names[i])


def float_view(b, i: int) -> str:
    """DQ(u8 tensor i) as a float tensor, one per reader (so each reader's pattern is
    its own; common-subexpression elimination merges what stays alike)."""
    s, z = u8_params(b, i)
    y = b.fresh(f"{b.names[i]}/dq")
    b.emit("DequantizeLinear", [u8_name(b, i), s, z], [y], {}, f"{b.names[i]}/dq")
    return y


def dequantized(t) -> np.ndarray:
    """A quantized constant's float32 value (per tensor or along t.axis)."""
    v = t.data.astype(np.float32)
    shape = [1] * v.ndim
    if t.scale.size > 1:
        shape[t.axis] = -1
    return ((v - t.zero_point.reshape(shape)) * t.scale.reshape(shape)).astype(np.float32)


def weight(b, i: int, perm, prefix: str, integer: bool) -> str:
    """Weight tensor i permuted by `perm`, as the Conv / Gemm input it becomes: with
    `integer` (the op's activations are quantized) an int8 symmetric weight stays int8
    behind a DequantizeLinear (the form QConv / QGemm take); any other quantized weight
    (uint8, or int8 of a hybrid float model) is dequantized at import; float stays."""
    t, value = b.t[i], b.value(i)      # value: float16 weights DEQUANTIZEd at import too
    if value is None:
        raise UnsupportedOpError({"run-time weights": [prefix]})
    perm = list(perm) if perm is not None else list(range(value.ndim))
    if not is_quantized_const(b, i):
        return b.const(prefix, np.ascontiguousarray(value.transpose(perm)))
    if integer and t.dtype == "int8" and not np.any(t.zero_point):
        w = b.const(prefix, np.ascontiguousarray(t.data.transpose(perm)))
        axis = perm.index(t.axis) if t.scale.size > 1 else 0
        return _dq_const(b, w, t, axis, prefix, np.int8)
    return b.const(prefix, np.ascontiguousarray(dequantized(t).transpose(perm)))


def _dq_const(b, value_name: str, t, axis: int, prefix: str, zp_dtype) -> str:
    scale = t.scale.astype(np.float32)
    scale = scale.reshape(()) if scale.size == 1 else scale
    zp = np.zeros(scale.shape, zp_dtype)
    y = b.fresh(f"{prefix}/dq")
    b.emit("DequantizeLinear", [value_name, b.const(f"{prefix}/scale", scale),
                                b.const(f"{prefix}/zp", zp)], [y], {"axis": axis},
           f"{prefix}/dq")
    return y


def _bias(b, i: int, prefix: str) -> str:
    """An int32 bias at the accumulator scale, behind a DequantizeLinear."""
    t = b.t[i]
    if t.dtype != "int32" or np.any(t.zero_point):
        return b.const(prefix, dequantized(t))
    return _dq_const(b, b.names[i], t, 0, prefix, np.int32)


def boundary(b, inputs: list[int], outputs: list[int]) -> None:
    """int8 graph inputs -> their uint8 aliases (DQ -> Q); outputs get aliases that
    finish() converts back."""
    for i in inputs + outputs:
        if is_quantized_activation(b, i) and b.t[i].dtype == "int8":
            b.u8_alias[i] = b.fresh(f"{b.names[i]}~u8")
    for i in inputs:
        if i in b.u8_alias:
            f = _dq_int8(b, b.names[i], i)
            s, z = u8_params(b, i)
            b.emit("QuantizeLinear", [f, s, z], [b.u8_alias[i]], {}, f"{b.names[i]}/to_u8")


def finish(b, outputs: list[int]) -> None:
    for o in outputs:
        if o in b.u8_alias:
            f = b.fresh(f"{b.names[o]}/float")
            s, z = u8_params(b, o)
            b.emit("DequantizeLinear", [b.u8_alias[o], s, z], [f], {}, f"{b.names[o]}/dq")
            b.emit("QuantizeLinear", [f, s, _int8_zp(b, o)], [b.names[o]], {},
                   f"{b.names[o]}/to_s8")


def _int8_zp(b, i: int) -> str:
    return b.const(f"{b.names[i]}/zp_s8", np.int8(int(b.t[i].zero_point.reshape(-1)[0])))


def _dq_int8(b, name: str, i: int) -> str:
    f = b.fresh(f"{name}/float")
    b.emit("DequantizeLinear", [name, u8_params(b, i)[0], _int8_zp(b, i)], [f], {},
           f"{name}/dq")
    return f


def convert(b, op, convert_float) -> None:
    """Import `op`, which touches quantized tensors, as DQ -> float op -> Q."""
    if op.op == "QUANTIZE":
        src, dst = op.inputs[0], op.outputs[0]
        x = float_view(b, src) if is_quantized_activation(b, src) else b.names[src]
        s, z = u8_params(b, dst)
        b.emit("QuantizeLinear", [x, s, z], [u8_name(b, dst)], {}, b.names[dst])
        return
    if op.op == "DEQUANTIZE":
        b.emit("Identity", [float_view(b, op.inputs[0])], [b.names[op.outputs[0]]], {},
               b.names[op.outputs[0]])
        return
    saved: dict[int, str] = {}
    quantized_in = is_quantized_activation(b, op.inputs[0]) if op.inputs else False
    for k, i in enumerate(op.inputs):
        if i < 0 or i in saved:
            continue
        if is_quantized_activation(b, i):
            saved[i], b.names[i] = b.names[i], float_view(b, i)
        elif is_quantized_const(b, i) and op.op in WEIGHTED and k == 2 and quantized_in:
            saved[i], b.names[i] = b.names[i], _bias(b, i, f"{b.names[i]}/bias")
        elif is_quantized_const(b, i) and not (op.op in WEIGHTED and k == WEIGHTED[op.op]):
            saved[i], b.names[i] = b.names[i], b.const(f"{b.names[i]}/float",
                                                       dequantized(b.t[i]))
    outs = [o for o in op.outputs if is_quantized_activation(b, o)]
    floats = {}
    for o in outs:
        saved[o], b.names[o] = b.names[o], b.fresh(f"{b.names[o]}/float")
        floats[o] = b.names[o]
    b.integer_weights = quantized_in
    try:
        convert_float(b, op)
    finally:
        b.integer_weights = False
        for i, n in saved.items():
            b.names[i] = n
    for o in outs:
        s, z = u8_params(b, o)
        b.emit("QuantizeLinear", [floats[o], s, z], [u8_name(b, o)], {}, f"{b.names[o]}/q")
