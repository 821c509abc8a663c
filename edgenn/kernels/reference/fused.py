"""Reference kernels of edgenn-internal fused ops (see graph/shapes/fused.py)."""
from __future__ import annotations

import math

import numpy as np

from ...registry import reference



@reference("FusedAttention")
def fused_attention(attrs, inputs):
    q, kt, v = inputs[0], inputs[1], inputs[2]     # (..., S, D), (..., D, T), (..., T, Dv)
    mask = inputs[3] if len(inputs) > 3 else None  # broadcastable to (..., S, T)
    dt = q.dtype.type
    scale = attrs.get("scale")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = np.matmul(q, kt) * dt(scale)
    if mask is not None:
        if attrs.get("mask_kind", "add") == "bool":
            scores = np.where(mask.astype(bool, copy=False), scores, dt(-np.inf))
        else:
            scores = scores + mask.astype(q.dtype, copy=False)
    # softmax over T with the row maximum subtracted (a fully masked row gives NaN, as the
    # unfused Softmax would)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    return [np.matmul(probs, v).astype(q.dtype, copy=False)]
