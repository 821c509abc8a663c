"""One candidate measured on this host: latency of its tuned plan, fidelity on the held-out
data against the source model, size of its .enn.

fidelity, the search objective (`metric`): "auto" is accuracy when the data has labels,
else the top-1 agreement with the source model where the first output is a classifier's
(N, classes) or a sequence of class scores (N, T, classes: position by position, as a
CTC text recognizer's characters), else the worst output cosine; or one of them by name,
or "iou" (asked for by name): the overlap of the first output's map > 0.3 with the
source's (a detector's text mask), or "text" (by name): the characters a CTC text
recognizer reads, greedy-decoded from its (N, T, classes) scores (blank = class 0, as
PaddleOCR's and most CTC heads), 1 - edit distance / length against the source's strings;
the one metric that stays exact when another input width changes T.
Accuracy, top-1 and cosine are kept where they exist."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..graph import format as enn
from ..graph.ir import Graph
from ..quant.data import Batches
from ..quant.metrics import compare, fidelity
from ..quant.observe import Runner
from . import probe
from .factors import resize_feeds, resize_outputs, scaled_inputs

VERSION = 9      # of what a measurement holds: part of the cache key (9: dead filters'
                 # weight scales; 8: sequences rescaled and the text metric; 7: pattern pruning
                 # by output-channel pairs and of strided convs)


@dataclass
class Measurement:
    latency_ms: float
    fidelity: float
    cosine: float
    top1: float | None
    accuracy: float | None
    bytes: int
    profile: dict            # probe.Profile as JSON
    input_shapes: dict       # the one-sample shapes timed: {input: [dims]}

    def to_json(self) -> dict:
        return asdict(self)


class Reference:
    """The source model's outputs on the held-out batches (the fidelity baseline)."""

    def __init__(self, source: Graph, data: Batches, threads: int = 1):
        self.source, self.data, self.threads = source, data, threads
        runner = Runner(source, threads=threads)
        self.outputs = [runner.outputs(feed) for feed in data.feeds]
        self.labels = data.all_labels


def _accuracy(outs: list, labels) -> float | None:
    first = np.concatenate([o[0] for o in outs])
    if labels is None or first.ndim != 2 or len(first) != len(labels):
        return None
    return float(np.mean(first.argmax(1) == labels))


def one_sample(graph: Graph, feed: dict) -> dict:
    """The first sample of `feed` where the batch dim is free, else the model's own batch."""
    fixed = {v.name: v.shape[0] for v in graph.inputs if v.shape and isinstance(v.shape[0], int)}
    return {k: np.ascontiguousarray(v[:fixed.get(k, 1)] if np.ndim(v) else v)
            for k, v in feed.items()}


METRICS = ("auto", "accuracy", "top1", "cosine", "iou", "text")
IOU_THRESHOLD = 0.3     # a text detector's probability map binarized (PP-OCR's DB threshold)


def mask_iou(ref: list, outs: list, threshold: float = IOU_THRESHOLD) -> float | None:
    """Intersection over union of the first output's map > threshold, member against
    source, over all batches; None when the source's mask is empty (nothing to find in
    the data: the metric would say nothing)."""
    a = np.concatenate([o[0] for o in ref]) > threshold
    b = np.concatenate([o[0] for o in outs]) > threshold
    if a.shape != b.shape or not a.any():
        return None
    return float(np.logical_and(a, b).sum() / np.logical_or(a, b).sum())


def ctc_strings(scores: np.ndarray, blank: int = 0) -> list[tuple[int, ...]]:
    """(N, T, classes) scores -> per row the greedy CTC reading: the best class at each
    position, repeats merged, blanks dropped."""
    best = np.asarray(scores).argmax(-1)                     # (N, T)
    keep = np.ones_like(best, bool)
    keep[:, 1:] = best[:, 1:] != best[:, :-1]
    keep &= best != blank
    return [tuple(int(c) for c in row[k]) for row, k in zip(best, keep)]


def edit_distance(a: tuple, b: tuple) -> int:
    """Levenshtein distance (insertions, deletions, substitutions) of two sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def text_agreement(ref: list, outs: list) -> float | None:
    """1 - (summed edit distance of the member's readings from the source's) / (their
    summed length), over all batches (the first output: (N, T, classes) CTC scores, any
    T); None when it is not such an output or the source reads nothing."""
    if np.ndim(ref[0][0]) != 3:
        return None
    src = [s for o in ref for s in ctc_strings(o[0])]
    got = [s for o in outs for s in ctc_strings(o[0])]
    total = sum(len(s) for s in src)
    if not total or len(src) != len(got):
        return None
    return max(0.0, 1.0 - sum(edit_distance(a, b) for a, b in zip(src, got)) / total)


def objective(metric: str, acc, top1, cosine, iou=None, text=None) -> float:
    """The figure the search maximizes (module doc); `metric` "auto" takes the first of
    accuracy, top-1 agreement, cosine that the data and outputs give."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    chain = {"auto": (acc, top1, cosine), "accuracy": (acc,), "top1": (top1,),
             "cosine": (cosine,), "iou": (iou,), "text": (text,)}[metric]
    for v in chain:
        if v is not None:
            return float(v)
    raise ValueError(f"metric {metric!r} is not available here (accuracy needs labels, "
                     f"top1 a classifier's (N, classes) output, text a CTC recognizer's "
                     f"(N, T, classes) scores)")


def measure(graph: Graph, resolution: float, ref: Reference, threads: int = 1,
            rounds: int = 20, metric: str = "auto", nbytes: int | None = None) -> Measurement:
    """`graph` (of factors at `resolution`) against `ref`; nbytes: its .enn size if known."""
    from ..runtime.session import InferenceSession
    shapes = scaled_inputs(ref.source, resolution)
    data = resize_feeds(ref.data, shapes, ref.source.inputs)
    runner = Runner(graph, threads=threads)
    raw = [runner.outputs(feed) for feed in data.feeds]
    outs = [resize_outputs(o, r) for o, r in zip(raw, ref.outputs)]
    fid = fidelity(compare(ref.outputs, outs))
    acc = _accuracy(outs, ref.labels)
    top1 = fid["top1"]      # classifier rows, or positions of an (N, T, classes) output
    feed = one_sample(graph, data.feeds[0])
    sess = InferenceSession(graph, threads=threads,
                            input_shapes={k: v.shape for k, v in feed.items()})
    prof = probe.profile(sess, feed, rounds)
    ms = prof.latency_ms
    iou = mask_iou(ref.outputs, outs) if metric == "iou" else None
    text = text_agreement(ref.outputs, raw) if metric == "text" else None
    return Measurement(ms, objective(metric, acc, top1, fid["cosine"], iou, text),
                       float(fid["cosine"]), top1, acc,
                       len(enn.to_bytes(graph)) if nbytes is None else nbytes, prof.to_json(),
                       {k: list(v.shape) for k, v in feed.items()})
