"""Converters of the com.microsoft contrib ops that onnxruntime's tools write into
exported models, where edgenn has the op they stand for.

DynamicQuantizeLSTM (quantize_dynamic on a recurrent model): an LSTM whose W (D, I, 4H)
and R (D, H, 4H) are int8 / uint8 with a scale and zero point per direction (or per
direction and gate row). The weights are dequantized once at import into the standard
LSTM layout (D, 4H, I) / (D, 4H, H), and the node becomes edgenn's LSTM: onnxruntime
also quantizes the activations (X and h, per step), edgenn keeps them float, so it is
the closer of the two to the float model (tests/kernels/recurrent/test_recurrent.py measures both).
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...registry import converter
from .importer import attribute_values, schema_defaults


def _dequantized(ctx, onode, k_w: int, k_scale: int, k_zp: int, prefix: str) -> str:
    names = list(onode.input) + [""] * 12
    w, scale, zp = (ctx.const(names[k]) for k in (k_w, k_scale, k_zp))
    if w is None or scale is None:
        raise UnsupportedOpError({"com.microsoft.DynamicQuantizeLSTM": [onode.name]},
                                 f"{onode.name!r}: quantized weights must be constants")
    zp = np.zeros_like(scale, np.int32) if zp is None else zp.astype(np.int32)
    d, _, g = w.shape
    s = scale.reshape(d, 1, -1) if scale.size > d else scale.reshape(d, 1, 1)
    z = zp.reshape(d, 1, -1) if zp.size > d else zp.reshape(d, 1, 1)
    f = ((w.astype(np.int32) - z).astype(np.float32) * s.astype(np.float32))
    return ctx.add_const(f"{onode.name}/{prefix}", np.ascontiguousarray(f.transpose(0, 2, 1)))


@converter("com.microsoft.DynamicQuantizeLSTM")
def dynamic_quantize_lstm(onode, ctx):
    attrs = schema_defaults("LSTM", 14)
    attrs.update(attribute_values(onode))
    names = list(onode.input) + [""] * 12
    w = _dequantized(ctx, onode, 1, 8, 9, "W")
    r = _dequantized(ctx, onode, 2, 10, 11, "R")
    inputs = [names[0], w, r] + names[3:8]
    while inputs and not inputs[-1]:
        inputs.pop()
    ctx.emit("LSTM", inputs, list(onode.output), attrs, onode.name)
