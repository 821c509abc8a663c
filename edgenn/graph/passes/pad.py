"""fold_pad_into_conv: Pad(x, zeros around the spatial axes) -> Conv  =>  Conv(x) with the
pads added to its own.

TensorFlow-style SAME padding on stride-2 convs exports as an explicit Pad before the Conv
(EfficientNet-Lite, MobileNet ports): a whole extra copy of the activation per layer. A
Conv's own padding reads zeros, so the fold is exact when the Pad is constant mode with
value 0, pads only the spatial axes, never crops, and feeds nothing but that Conv.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View, replace_chain, rewrite_and_note


def _spatial_pads(view: View, pad: Node, rank: int) -> list[int] | None:
    """The Pad's widths as Conv pads [x1_begin, x2_begin, ..., x1_end, ...], if foldable."""
    if pad.attrs.get("mode", "constant") != "constant" or len(pad.inputs) < 2:
        return None
    if len(pad.inputs) > 3 and pad.inputs[3]:
        return None                                   # axes: rare, left alone
    if len(pad.inputs) > 2 and pad.inputs[2]:
        value = view.const(pad.inputs[2])
        if value is None or value.size > 1 or np.any(value != 0):
            return None
    widths = view.const(pad.inputs[1])
    if widths is None or widths.size != 2 * rank:
        return None
    widths = [int(v) for v in widths.reshape(-1)]
    begin, end = widths[:rank], widths[rank:]
    if begin[:2] != [0, 0] or end[:2] != [0, 0] or min(widths) < 0:
        return None
    return begin[2:] + end[2:]


def fold_pad_into_conv(graph: Graph) -> bool:
    """The rewrite of the module docstring; True if anything changed."""
    ops = graph.op_counts()
    if "Pad" not in ops or "Conv" not in ops:
        return False

    def rewrite(graph: Graph, view: View, pad: Node) -> bool:
        if pad.op != "Pad":
            return False
        conv = view.only_use(pad.outputs[0])
        if conv is None or conv.op != "Conv" or conv.inputs[0] != pad.outputs[0] or \
                pad.outputs[0] in conv.inputs[1:]:
            return False
        w = view.const(conv.inputs[1])
        if w is None:
            return False
        spatial = w.ndim - 2
        mode = conv.attrs.get("auto_pad", "NOTSET") or "NOTSET"
        if mode not in ("NOTSET", "VALID"):
            return False
        extra = _spatial_pads(view, pad, w.ndim)
        if extra is None:
            return False
        own = [0] * (2 * spatial) if mode == "VALID" else \
            [int(p) for p in (conv.attrs.get("pads") or [0] * (2 * spatial))]
        conv.attrs["pads"] = [a + b for a, b in zip(own, extra)]
        conv.attrs["auto_pad"] = "NOTSET"
        conv.inputs[0] = pad.inputs[0]
        replace_chain(graph, [pad, conv], conv)
        return True

    return rewrite_and_note(graph, rewrite, "pad_folded_into_conv")
