"""QuantizeLinear / DequantizeLinear, per tensor, uint8 <-> float32, DynamicQuantizeLinear and
QAdd: one C pass each (_rowops quantize_u8 / dequantize_u8, AVX2 with a portable fallback;
DynamicQuantizeLinear adds a min / max pass), bit-exact with the ONNX reference
(x / scale in float32, round half to even, saturate).

int8 <-> float32 (a TFLite model's int8 inputs and outputs) reuse the uint8 passes:
q_s8 and q_s8 + 128 (its bytes with the top bit flipped) are the same numbers with the
zero point moved by 128, so DQ(x_s8, z) = DQ_u8(x ^ 0x80, z + 128) and
Q_s8(x, z) = Q_u8(x, z + 128) ^ 0x80, exactly (saturation included)."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..rowops import _rowops
from ..native.threading_cost import c_cost, plan_threads, threaded_only


def scalar(info):
    """The float/int value of a constant per-tensor scale or zero point, else None."""
    if info is None or info.value is None or np.asarray(info.value).size != 1:
        return None
    return np.asarray(info.value).reshape(-1)[0]


BYTES = ("uint8", "int8")


def _quantize_supports(node, ins, outs) -> bool:
    """float32 x, constant scalar float32 scale, constant uint8 / int8 zero point."""
    zp = ins[2] if len(ins) > 2 else None
    return (ins[0].dtype == "float32" and outs[0].dtype in BYTES
            and ins[1].dtype == "float32" and scalar(ins[1]) is not None
            and zp is not None and zp.dtype == outs[0].dtype and scalar(zp) is not None)


def _dequantize_supports(node, ins, outs) -> bool:
    """uint8 / int8 x, constant scalar float32 scale, constant (or omitted) zero point."""
    zp = ins[2] if len(ins) > 2 else None
    return (ins[0].dtype in BYTES and outs[0].dtype == "float32"
            and ins[1].dtype == "float32" and scalar(ins[1]) is not None
            and (zp is None or scalar(zp) is not None))


# the threads' split pays from about this many elements (a model's float input: 150K)
QUANTIZE_MT_MIN = 1 << 15


def _large_quantize_supports(node, ins, outs) -> bool:
    return int(np.prod(ins[0].shape)) >= QUANTIZE_MT_MIN and _quantize_supports(node, ins, outs)


@kernel("QuantizeLinear", "quantize_u8_c", supports=_quantize_supports, cost=c_cost)
def prepare_quantize(node, ins, outs, threads: int = 1):
    signed = outs[0].dtype == "int8"
    scale, zp = np.float32(scalar(ins[1])), int(scalar(ins[2])) + (128 if signed else 0)
    quantize = _rowops.quantize_u8

    def run(inputs, outputs):
        y = outputs[0].reshape(-1).view(np.uint8)
        quantize(inputs[0].reshape(-1), y, scale, zp, True, None, threads)
        if signed:
            np.bitwise_xor(y, 0x80, out=y)
    return run


# the session's threads over ranges of the elements (a model's input quantized on one
# thread leaves the others idle for a visible share of a small int8 model's run)
kernel("QuantizeLinear", "quantize_u8_c_mt", supports=threaded_only(_large_quantize_supports), cost=c_cost)(
    lambda node, ins, outs: prepare_quantize(node, ins, outs, plan_threads()))


@kernel("DequantizeLinear", "dequantize_u8_c", supports=_dequantize_supports, cost=c_cost)
def prepare_dequantize(node, ins, outs):
    signed = ins[0].dtype == "int8"
    scale = np.float32(scalar(ins[1]))
    zp = (int(scalar(ins[2])) if len(ins) > 2 and ins[2] is not None else 0) + \
        (128 if signed else 0)
    dequantize = _rowops.dequantize_u8
    flipped = scratch.array((int(np.prod(ins[0].shape)),), np.uint8) if signed else None

    def run(inputs, outputs):
        x = inputs[0].reshape(-1)
        if signed:                  # the uint8 bytes of x + 128, into planned scratch
            x = np.bitwise_xor(x.view(np.uint8), 0x80, out=flipped.get())
        dequantize(x, outputs[0].reshape(-1), scale, zp)
    return run


def _qadd_supports(node, ins, outs) -> bool:
    return all(scalar(ins[i]) is not None for i in (1, 2, 4, 5, 6, 7))


@kernel("QAdd", "qadd_u8_c", supports=_qadd_supports, cost=c_cost)
def prepare_qadd(node, ins, outs):
    """Q([Relu](DQ(a) + DQ(b))) in one pass over the uint8 tensors (_rowops qadd_u8)."""
    sa, za, sb, zb, sy, zy = (scalar(ins[i]) for i in (1, 2, 4, 5, 6, 7))
    sa, sb, sy = np.float32(sa), np.float32(sb), np.float32(sy)
    za, zb, zy = int(za), int(zb), int(zy)
    relu = node.attrs.get("activation", "") == "Relu"
    qadd = _rowops.qadd_u8

    def run(inputs, outputs):
        qadd(inputs[0].reshape(-1), inputs[3].reshape(-1), outputs[0].reshape(-1),
             sa, za, sb, zb, sy, zy, relu)
    return run


@kernel("DynamicQuantizeLinear", "dynamic_quantize_u8_c", cost=c_cost,
        supports=lambda node, ins, outs: ins[0].dtype == "float32")
def prepare_dynamic_quantize(node, ins, outs):
    """One min / max pass and one quantize pass in C (the reference's float32 parameter
    arithmetic; NaN-free inputs)."""
    dynamic_quantize = _rowops.dynamic_quantize_u8

    def run(inputs, outputs):
        scale, zp = dynamic_quantize(inputs[0].reshape(-1), outputs[0].reshape(-1))
        outputs[1][...] = scale
        outputs[2][...] = zp
    return run
