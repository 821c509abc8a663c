"""Reference kernels of edgenn-internal fused ops (see graph/shapes/fused.py)."""
from __future__ import annotations

import math

import numpy as np

from ...graph.shapes.fused import PAIR_KEYS, PERM_ATTRS
from ...registry import reference
from .nn import conv



@reference("FusedAttention")
def fused_attention(attrs, inputs):
    # (..., S, D), (..., D, T), (..., T, Dv): the stored inputs through their perm_* attrs
    q, kt, v = (x if attrs.get(k) is None else np.transpose(x, attrs[k])
                for x, k in zip(inputs[:3], PERM_ATTRS))
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
    y = np.matmul(probs, v).astype(q.dtype, copy=False)
    return [y if attrs.get("perm_y") is None else np.transpose(y, attrs["perm_y"])]


@reference("AttentionMaskBias")
def attention_mask_bias(attrs, inputs):
    """See graph/shapes/fused.py: 0 where a key is kept, filter_value where masked."""
    mask, keys = inputs[0], inputs[1]
    b, t = keys.shape[0], keys.shape[1]
    j = np.arange(t)
    if mask.ndim == 1:
        end = mask[:b].astype(np.int64)[:, None]
        start = mask[b:].astype(np.int64)[:, None] if mask.shape[0] == 2 * b else 0
        keep = ((j >= start) & (j < end))[:, None, None, :]
    elif mask.ndim == 2:
        keep = (mask != 0)[:, None, None, :]
    else:
        keep = (mask != 0)[:, None, :, :]
    fill = np.float32(attrs.get("filter_value", -10000.0))
    return [np.where(keep, np.float32(0), fill).astype(np.float32)]


def _conv_pair(attrs, inputs, keys):
    x, w1, b1, w2, b2, z = (list(inputs) + [None] * 6)[:6]
    t = conv(attrs[keys[0]], [x, w1, b1])[0]
    return conv(attrs[keys[1]], [t, w2, b2, z])


@reference("ExpandDepthwise")
def expand_depthwise(attrs, inputs):
    """A 1x1 Conv, then the depthwise Conv of its output (kernels/depthwise/expand_depthwise.py):
    inputs x, w1, b1, w2, b2, z (a residual of the second), attrs "expand" / "depthwise"."""
    return _conv_pair(attrs, inputs, PAIR_KEYS["ExpandDepthwise"])


@reference("DepthwiseProject")
def depthwise_project(attrs, inputs):
    """A depthwise Conv, then the 1x1 Conv of its output (kernels/depthwise/depthwise_project.py):
    inputs as ExpandDepthwise's, attrs "depthwise" / "project"."""
    return _conv_pair(attrs, inputs, PAIR_KEYS["DepthwiseProject"])
