"""conv1d_as_2d: a 1-D Conv (x (N, C, L), W (M, C/g, K) constant) => Unsqueeze(x, 2) ->
2-D Conv over (N, C, 1, L) with W (M, C/g, 1, K) -> Squeeze(2).

The fast convolutions (im2col / packed sgemm, Winograd, depthwise, sparse) are 2-D; audio
and sequence models (silero-vad, wav2vec-style front ends, TCNs) are 1-D. A height of one
is the same arithmetic, every attribute maps (kernel_shape, strides, dilations, pads
gain a leading 1 / 0; auto_pad keeps its meaning with a 1-tall kernel), and Unsqueeze /
Squeeze are views, so the rewrite costs nothing and gives 1-D layers the whole tuner.
Runs after the activation / residual fusions (a fused Conv keeps its epilogue; a fused
residual gains the same unsqueeze).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View, rewrite_and_note


def _lift(values, fill: int, n: int = 1) -> list[int] | None:
    if values is None or len(values) == 0:
        return None
    return [fill] * n + [int(v) for v in values]


def conv1d_as_2d(graph: Graph) -> bool:
    if "Conv" not in graph.op_counts():
        return False

    def rewrite(graph: Graph, view: View, conv: Node) -> bool:
        if conv.op != "Conv" or len(conv.inputs) < 2:
            return False
        w = view.const(conv.inputs[1])
        if w is None or w.ndim != 3:
            return False
        a = dict(conv.attrs)
        if a.get("kernel_shape"):
            a["kernel_shape"] = _lift(a["kernel_shape"], 1)
        for key in ("strides", "dilations"):
            if a.get(key):
                a[key] = _lift(a[key], 1)
        if a.get("pads"):
            p = [int(v) for v in a["pads"]]
            if len(p) != 2:
                return False
            a["pads"] = [0, p[0], 0, p[1]]
        axes = graph.add_const(f"{conv.name}_axis2", np.array([2], np.int64))
        w4 = graph.add_const(f"{conv.name}_w2d", w.reshape(w.shape[0], w.shape[1], 1,
                                                           w.shape[2]))
        x4 = graph.unique_name(f"{conv.inputs[0]}_2d")
        y4 = graph.unique_name(f"{conv.outputs[0]}_2d")
        nodes = [Node("Unsqueeze", [conv.inputs[0], axes], [x4], {},
                      graph.unique_name(f"{conv.name}_to2d"))]
        ins = [x4, w4] + list(conv.inputs[2:3])
        if len(conv.inputs) > 3 and conv.inputs[3]:          # a fused residual
            z4 = graph.unique_name(f"{conv.inputs[3]}_2d")
            nodes.append(Node("Unsqueeze", [conv.inputs[3], axes], [z4], {},
                              graph.unique_name(f"{conv.name}_z2d")))
            ins = [x4, w4, conv.inputs[2] if len(conv.inputs) > 2 else "", z4]
        nodes.append(Node("Conv", ins, [y4], a, conv.name))
        nodes.append(Node("Squeeze", [y4, axes], [conv.outputs[0]], {},
                          graph.unique_name(f"{conv.name}_to1d")))
        k = graph.nodes.index(conv)
        graph.nodes[k:k + 1] = nodes
        return True

    return rewrite_and_note(graph, rewrite, "conv1d_as_2d")
