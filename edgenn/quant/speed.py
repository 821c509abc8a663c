"""The speed check of `quantize`: int8 only where it pays on this CPU.

The autotuner may run an int8 layer through an fp32 kernel (the `*_f32` QConv / QGemm
candidates: dequantize, fp32 kernel, requantize) because that is faster here, e.g. a 3x3
conv on fp32 Winograd. Such a layer still pays for its uint8 input and output: a
dequantize and a quantize pass and the Q / DQ of its neighbours. The check builds the
tuned plan of the int8 model, lists those layers, quantizes again with them kept fp32,
times both models whole (interleaved runs, medians) and keeps the faster one. The layers
kept fp32 store their weights as weight-only int8 (the "qblock" codec, decoded at load),
so the model stays as small as the all-int8 one.
"""
from __future__ import annotations

import time

import numpy as np

from ..graph.ir import Graph

MARGIN = 0.02   # the fp32 variant must be this much faster: below it, timing noise decides


def timing_feeds(graph: Graph, feeds: dict) -> dict:
    """One calibration batch cut to one sample where the batch dim is symbolic."""
    out = {}
    for v in graph.inputs:
        x = np.asarray(feeds[v.name])
        dynamic_batch = v.shape and not isinstance(v.shape[0], int)
        out[v.name] = x[:1] if dynamic_batch and x.ndim and x.shape[0] > 1 else x
    return out


def fp32_kernel_layers(fused: Graph, records: list[dict], feeds: dict,
                       threads: int = 1) -> list[str]:
    """Names (in the fp32 graph) of the int8 layers the tuned plan runs on fp32 kernels."""
    from ..runtime.session import InferenceSession
    session = InferenceSession(fused, threads=threads)
    session.run(None, feeds)
    layer_of = {r["weight"]: r["node"] for r in records if r.get("weight")}
    return [layer_of[s.node.inputs[3]] for s in session.plan.steps
            if s.node.op in ("QConv", "QGemm") and "_f32" in s.choice.kernel
            and len(s.node.inputs) > 3 and s.node.inputs[3] in layer_of]


def faster(a: Graph, b: Graph, feeds: dict, threads: int = 1, rounds: int = 15
           ) -> tuple[float, float]:
    """Median seconds of a whole run of each graph, runs interleaved (a, b, a, b...)."""
    from ..runtime.session import InferenceSession
    sessions = [InferenceSession(g, threads=threads) for g in (a, b)]
    times: list[list[float]] = [[], []]
    for r in range(rounds + 2):
        for k, s in enumerate(sessions):
            t0 = time.perf_counter()
            s.run(None, feeds)
            if r >= 2:                      # two warm-up rounds
                times[k].append(time.perf_counter() - t0)
    return float(np.median(times[0])), float(np.median(times[1]))


def code_fp32_weights(graph: Graph, layers) -> None:
    """The weights of these fp32 layers stored as weight-only int8 (compress/weights.py)."""
    from ..compress.weights import compress_weights
    layers = set(layers)
    names = {n.inputs[1] for n in graph.nodes if n.name in layers and len(n.inputs) > 1}
    # the graph's own codec table (its metadata may be a shallow copy of the source's)
    graph.meta["weight_codecs"] = dict(graph.meta.get("weight_codecs", {}))
    compress_weights(graph, bits=8, names=names, fit="maxabs")   # as the int8 layers' (minmax)
