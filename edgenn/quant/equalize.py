"""Activation equalization in front of depthwise convolutions (a cross-layer equalization,
Nagel et al. 2019, restricted to the case that costs nothing).

Pattern:  t = act(Conv_P(x))  ->  Conv_D(t) depthwise, t read by nothing else, with act
positively homogeneous (none, Relu, LeakyRelu: act(x / s) = act(x) / s for s > 0).
Per-tensor uint8 quantization of t gives every channel the step of the widest channel;
in MobileNet-style nets the channel ranges of t differ by 5-10x, so narrow channels get a
few dozen levels (PP-OCR cls: the two inputs of depthwise convs with the widest channel
spread are the two most damaging activations of the model).

Rescaling channel c of t by 1/s_c (rows of W_P and b_P divided by s_c) and multiplying
channel c of the depthwise weights by s_c leaves the network's function unchanged, and
both layers have per-output-channel weight scales, so their weight quantization is
unchanged too: the only effect is that every channel of t now spans the same range.
s_c = clip(r_c / max_c r_c, 1/32, 1) with r_c = max |t_c| over the calibration data (the
floor keeps a nearly silent channel from being blown up by more than 32x).
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, Node
from ..graph.passes.util import View
from .data import Batches
from .observe import Runner
from .rewrite import is_depthwise

HOMOGENEOUS = ("", "Relu", "LeakyRelu")
MIN_SCALE = 1 / 32


def equalization_pairs(graph: Graph) -> list[tuple[Node, Node, str]]:
    """(producer conv, depthwise consumer, tensor between) for every matching pair."""
    view = View(graph)
    pairs = []
    for node in graph.nodes:
        if node.op != "Conv" or len(node.inputs) < 2:
            continue
        w = view.const(node.inputs[1])
        if w is None or w.ndim != 4 or not is_depthwise(node, w):
            continue
        t = node.inputs[0]
        p = view.prod(t, "Conv")
        if p is None or view.only_use(t) is not node or (p.attrs.get("activation") or "") \
                not in HOMOGENEOUS or (len(p.inputs) > 3 and p.inputs[3]):
            continue
        wp = view.const(p.inputs[1])
        if wp is None or wp.ndim != 4 or wp.shape[0] != w.shape[0] or wp.dtype != np.float32:
            continue
        if len(p.inputs) > 2 and p.inputs[2] and view.const(p.inputs[2]) is None:
            continue
        pairs.append((p, node, t))
    return pairs


def channel_ranges(graph: Graph, tensors: list[str], batches: Batches, progress=None,
                   threads: int = 1) -> dict[str, np.ndarray]:
    """max |t_c| per channel (axis 1) of each tensor over the batches."""
    runner = Runner(graph, observe=tensors, threads=threads)
    out: dict[str, np.ndarray] = {}
    for k, feed in enumerate(batches.feeds):
        values = runner.run(feed)
        for t in tensors:
            r = np.abs(values[t]).max(axis=tuple(d for d in range(values[t].ndim) if d != 1))
            out[t] = r if t not in out else np.maximum(out[t], r)
        if progress is not None:
            progress("equalizing: channel ranges", k + 1, len(batches))
    return out


def equalize(graph: Graph, batches: Batches, progress=None, threads: int = 1) -> list[dict]:
    """Equalize every pair in place (module doc). -> one record per pair."""
    pairs = equalization_pairs(graph)
    if not pairs:
        return []
    ranges = channel_ranges(graph, [t for _, _, t in pairs], batches, progress, threads)
    records = []
    for p, d, t in pairs:
        r = ranges[t].astype(np.float64)
        if not np.isfinite(r).all() or r.max() <= 0:
            continue
        s = np.clip(r / r.max(), MIN_SCALE, 1.0)
        s[r <= 0] = 1.0
        inv = (1.0 / s).astype(np.float64)
        wp = graph.consts[p.inputs[1]].astype(np.float64) * inv[:, None, None, None]
        p.inputs = list(p.inputs)
        p.inputs[1] = graph.add_const(f"{p.name}_weight_equalized", wp.astype(np.float32))
        if len(p.inputs) > 2 and p.inputs[2]:
            b = graph.consts[p.inputs[2]].astype(np.float64).reshape(-1) * inv
            p.inputs[2] = graph.add_const(f"{p.name}_bias_equalized", b.astype(np.float32))
        wd = graph.consts[d.inputs[1]].astype(np.float64) * s[:, None, None, None]
        d.inputs = list(d.inputs)
        d.inputs[1] = graph.add_const(f"{d.name}_weight_equalized", wd.astype(np.float32))
        records.append({"producer": p.name, "depthwise": d.name, "tensor": t,
                        "spread_before": float(r.max() / max(r[r > 0].min(), 1e-30)),
                        "spread_after": float((r / s).max() / max((r / s)[r > 0].min(), 1e-30))})
    from ..graph.passes.fold import prune_unused_consts
    prune_unused_consts(graph)
    return records
