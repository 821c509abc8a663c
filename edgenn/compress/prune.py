"""Pruning for the sparse convolution kernels (kernels/sparse/sparse.py).

Unstructured magnitude pruning of pointwise (1x1) convolutions, and pattern pruning of
3x3 ones (PatDNN, ASPLOS 2020): each 3x3 kernel keeps k of its 9 taps, in one of a few
patterns chosen per layer from the weights, and connectivity pruning removes whole
kernels (input channel -> output channel links) of the smallest norm.

sparsify(graph, 0.8) zeroes, in every group-1 1x1 Conv with constant weights, the 80% of
weights smallest in magnitude, layer by layer (ties broken by position, so the result is
deterministic); `per_layer` overrides the ratio for named nodes (0 keeps a layer dense),
`skip_first` leaves the first pointwise layer dense (the "Fast Sparse ConvNets" recipe:
it is cheap and sensitive). The graph's weights are replaced in place; no retraining here:
accuracy after pruning is measured by the caller on held-out data (edgenn.quant.report).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PruneReport:
    layers: dict = field(default_factory=dict)     # node name -> (weights, zeros after)

    @property
    def sparsity(self) -> float:
        total = sum(n for n, _ in self.layers.values())
        return sum(z for _, z in self.layers.values()) / max(total, 1)

    def table(self) -> str:
        rows = [f"pruned {len(self.layers)} convs to {self.sparsity:.1%} zeros"]
        for name, (n, z) in self.layers.items():
            rows.append(f"  {name[:56]:56} {n:>9,} weights  {z / max(n, 1):6.1%} zero")
        return "\n".join(rows)


def _convs(graph, kernel: tuple[int, int]):
    """The group-1 Conv nodes with constant weights of spatial size `kernel`, in graph
    order."""
    for node in graph.nodes:
        if node.op != "Conv" or len(node.inputs) < 2 or node.inputs[1] not in graph.consts:
            continue
        w = graph.consts[node.inputs[1]]
        if w.ndim == 4 and w.shape[2:] == kernel and node.attrs.get("group", 1) == 1:
            yield node


def pointwise_convs(graph):
    """The group-1 1x1 Conv nodes whose weights are constants, in graph order."""
    return _convs(graph, (1, 1))


def _pair_sums(a: np.ndarray):
    """Rows 2i and 2i + 1 of a summed (an odd last row alone) -> (group of each row,
    (groups, ...) sums)."""
    group = np.arange(len(a)) // 2
    sums = np.zeros((group[-1] + 1,) + a.shape[1:])
    np.add.at(sums, group, a)
    return group, sums


def magnitude_mask(w: np.ndarray, ratio: float, pair_axis: int | None = None) -> np.ndarray:
    """True where a weight is kept: all but the round(ratio * size) smallest |w|. With
    pair_axis (the output-channel axis), output channels 2i and 2i + 1 are pruned together
    at each position, by their summed w^2 (an odd last channel alone): both keep the same
    positions, so the sparse tiles load each input vector once for the pair."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"sparsity must be in [0, 1], got {ratio}")
    if pair_axis is not None and w.ndim >= 2 and w.shape[pair_axis] > 1:
        rows = np.moveaxis(w, pair_axis, 0)
        group, energy = _pair_sums(rows.reshape(rows.shape[0], -1).astype(np.float64) ** 2)
        keep = magnitude_mask(np.sqrt(energy), ratio)[group]
        return np.moveaxis(keep.reshape(rows.shape), 0, pair_axis)
    drop = int(round(ratio * w.size))
    keep = np.ones(w.size, bool)
    if drop:
        order = np.argsort(np.abs(w).reshape(-1), kind="stable")
        keep[order[:drop]] = False
    return keep.reshape(w.shape)


def pattern_library(w: np.ndarray, k: int, patterns: int) -> np.ndarray:
    """(P, KH*KW) bool: the `patterns` tap masks of k taps most often the k largest-|w|
    taps of a kernel of w (M, C, KH, KW), most frequent first."""
    flat = np.abs(w.reshape(-1, w.shape[2] * w.shape[3]))
    top = np.argsort(-flat, axis=1, kind="stable")[:, :k]
    masks = np.zeros_like(flat, bool)
    np.put_along_axis(masks, top, True, axis=1)
    uniq, counts = np.unique(masks, axis=0, return_counts=True)
    order = np.lexsort((np.arange(len(uniq)), -counts))      # ties: the first mask
    return uniq[order[:patterns]]


def pattern_mask(w: np.ndarray, k: int = 4, patterns: int = 8,
                 connectivity: float = 0.0, pairs: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """-> (keep mask like w, pattern index per kernel (M, C), -1 where the kernel is
    removed): every kernel gets the library pattern that keeps most of its energy (sum
    of w^2), then the `connectivity` fraction of kernels with the least kept energy go.
    pairs: output channels 2i and 2i + 1 choose together (pattern and removal by their
    summed energy), so both rows of a pair keep the same taps: the sparse kernels then
    load each input vector once for the two (PatDNN's filter grouping; an odd last
    channel chooses alone)."""
    m, c, kh, kw = w.shape
    lib = pattern_library(w, k, patterns)                                   # (P, T)
    energy = (w.reshape(m, c, kh * kw).astype(np.float64) ** 2) @ lib.T     # (M, C, P)
    group, by_group = _pair_sums(energy) if pairs else (np.arange(m), energy)
    choice = np.argmax(by_group, axis=2)                                    # (G, C)
    kept = np.take_along_axis(by_group, choice[..., None], axis=2)[..., 0]
    drop = int(round(connectivity * choice.size))
    if drop:
        choice.reshape(-1)[np.argsort(kept.reshape(-1), kind="stable")[:drop]] = -1
    choice = choice[group]                                                  # (M, C)
    keep = np.where(choice[..., None] >= 0, lib[np.maximum(choice, 0)], False)
    return keep.reshape(w.shape), choice


IMAGE_CHANNELS = 4    # a conv reading this few channels sees the image: cheap, sensitive


def pattern_convs(graph):
    """The group-1 3x3 Conv nodes with constant weights, any stride (the ones the sparse
    shifted kernel runs: strided ones through their stride phases), in graph order."""
    return _convs(graph, (3, 3))


def pattern_prune(graph, k: int = 4, patterns: int = 8, connectivity: float = 0.5,
                  skip_image: bool = True, pairs: bool = True) -> PruneReport:
    """Pattern + connectivity pruning of every group-1 3x3 Conv (with skip_image, those
    reading <= IMAGE_CHANNELS channels - the image - stay dense); pairs: output channels
    chosen in pairs (pattern_mask)."""
    if not 1 <= k <= 9 or patterns < 1:
        raise ValueError(f"k must be in [1, 9] and patterns >= 1, got k={k}, {patterns}")
    report = PruneReport()
    for node in pattern_convs(graph):
        name = node.inputs[1]
        w = np.asarray(graph.consts[name])
        if skip_image and w.shape[1] <= IMAGE_CHANNELS:
            report.layers[node.name] = (w.size, int(w.size - np.count_nonzero(w)))
            continue
        keep, _ = pattern_mask(w, k, patterns, connectivity, pairs)
        pruned = np.where(keep, w, 0).astype(w.dtype)
        graph.consts[name] = pruned
        report.layers[node.name] = (w.size, int(w.size - np.count_nonzero(pruned)))
    return report


def fully_connected(graph):
    """The MatMul / Gemm nodes whose weight (input 1) is a 2-D constant no other node
    reads (the sparse Gemm kernels' layers, kernels/sparse/sparse_gemm.py), in graph order."""
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for name in node.inputs:
            readers[name] = readers.get(name, 0) + 1
    for node in graph.nodes:
        if node.op not in ("MatMul", "Gemm") or len(node.inputs) < 2:
            continue
        w = graph.consts.get(node.inputs[1])
        if w is not None and w.ndim == 2 and readers[node.inputs[1]] == 1 and \
                not node.attrs.get("transA", 0):
            yield node


def _output_axis(node) -> int:
    """The output-channel axis of a Conv / MatMul / Gemm weight (input 1)."""
    if node.op == "Conv" or node.op == "Gemm" and node.attrs.get("transB", 0):
        return 0
    return -1


def sparsify(graph, ratio: float, per_layer: dict | None = None,
             skip_first: bool = True, layers=pointwise_convs,
             pairs: bool = False) -> PruneReport:
    """`layers`: pointwise_convs (default) or fully_connected (MatMul / Gemm weights);
    pairs: output channels pruned in pairs (magnitude_mask's pair_axis)."""
    per_layer = dict(per_layer or {})
    report = PruneReport()
    for i, node in enumerate(layers(graph)):
        r = per_layer.pop(node.name, 0.0 if (skip_first and i == 0) else ratio)
        name = node.inputs[1]
        w = np.asarray(graph.consts[name])
        axis = _output_axis(node) if pairs else None
        pruned = np.where(magnitude_mask(w, r, axis), w, 0).astype(w.dtype)
        graph.consts[name] = pruned
        report.layers[node.name] = (w.size, int(w.size - np.count_nonzero(pruned)))
    if per_layer:
        raise ValueError(f"no {layers.__name__.replace('_', ' ')} layer named "
                         f"{sorted(per_layer)}")
    return report
