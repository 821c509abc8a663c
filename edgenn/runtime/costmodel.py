"""A cost model fitted to the tuner's own measurements, for the first plan of a session
(tune="background"), which times nothing.

Every measurement the tuner makes is kept with the node's work features (`features`):
log2 of its multiply-adds, of the bytes its inputs and outputs move, of its constant
weights' bytes, of its output channels, its reduction length and its output rows. Per
(op, kernel), log2(seconds) is fitted as a linear function of them (ridge least squares);
with few samples, as log2(flops) plus a constant. The samples are those this CPU's tuner
measured (the tuning cache) and those shipped for the CPU family (costdata/, written by
tools/fit_cost_model.py on the machines edgenn is tested on). `pick` returns the kernel
with the lowest predicted time and every candidate's prediction (the planner's fusion
decision compares them as it compares measured times).
"""
from __future__ import annotations

import glob
import json
import math
import os
import threading

import numpy as np

FEATURES = ("flops", "io_bytes", "weight_bytes", "out_channels", "reduction", "rows")
MIN_SAMPLES = 8            # fewer: time ~ flops, the constant fitted
RIDGE = 1e-2               # per sample, on the slopes (not the intercept)
DATA = os.path.join(os.path.dirname(__file__), "costdata")

_lock = threading.Lock()
_models: dict = {}         # (threads, cache size) -> CostModel


def _prod(shape) -> int:
    return math.prod(int(d) for d in shape)


def _conv_macs(w_shape, out_shape) -> int:
    """A conv's multiply-adds: every output element sums C/g x kh x kw products."""
    return _prod(out_shape) * _prod(w_shape[1:])


def _macs(op: str, node, ins, outs) -> int:
    out = outs[0].shape if outs and outs[0] is not None else ()
    if op in ("ExpandDepthwise", "DepthwiseProject") and len(ins) > 3 and ins[3] is not None:
        w1, w2 = ins[1].shape, ins[3].shape
        mid_rows = _prod(ins[0].shape[2:]) if op == "ExpandDepthwise" else _prod(out[2:])
        first = out[0] * mid_rows * _prod(w1) if len(out) == 4 else 0
        return first + _conv_macs(w2, out)
    if "Conv" in op and len(ins) > 1:
        w = next((i.shape for i in ins[1:] if i is not None and len(i.shape) == 4), None)
        if w is not None:
            return _conv_macs(w, out)
    if op in ("Gemm", "MatMul", "QGemm", "FusedMatMul", "MatMulInteger", "QLinearMatMul") \
            and ins and ins[0] is not None and len(ins[0].shape) >= 1:
        a = ins[0].shape
        k = a[0] if op == "Gemm" and node.attrs.get("transA") else a[-1]
        return _prod(out) * int(k)
    return _prod(out)


def features(node, ins, outs) -> list[float]:
    """The node's work, as FEATURES (log2 of each, + 1 inside the log)."""
    macs = _macs(node.op, node, ins, outs)
    io = sum(_prod(i.shape) * np.dtype(i.dtype).itemsize
             for i in list(ins) + list(outs) if i is not None and i.value is None)
    weights = sum(_prod(i.shape) * np.dtype(i.dtype).itemsize
                  for i in ins if i is not None and i.value is not None)
    out = outs[0].shape if outs and outs[0] is not None else (1,)
    channels = out[1] if len(out) == 4 else out[-1] if out else 1
    rows = _prod(out[2:]) * out[0] if len(out) == 4 else _prod(out[:-1])
    reduction = macs / max(_prod(out), 1)
    return [round(math.log2(v + 1), 4)
            for v in (macs, io, weights, channels, reduction, rows)]


class CostModel:
    """Per (op, kernel): the fitted weights of [1, *features] -> log2(seconds)."""

    def __init__(self, samples):
        by_kernel: dict = {}
        for op, kernel, feats, seconds in samples:
            if seconds > 0 and len(feats) == len(FEATURES):
                by_kernel.setdefault((op, kernel), []).append((feats, math.log2(seconds)))
        self.weights = {key: _fit(rows) for key, rows in by_kernel.items()}

    def predict(self, op: str, kernel: str, feats) -> float | None:
        w = self.weights.get((op, kernel))
        if w is None:
            return None
        return float(2.0 ** (w[0] + np.dot(w[1:], feats)))


def _fit(rows) -> np.ndarray:
    x = np.array([f for f, _ in rows], np.float64)
    y = np.array([t for _, t in rows], np.float64)
    if len(rows) < MIN_SAMPLES:        # time ~ flops: only the constant is fitted
        w = np.zeros(len(FEATURES) + 1)
        w[1] = 1.0
        w[0] = float(np.mean(y - x[:, 0]))
        return w
    mean = x.mean(axis=0)
    xc = x - mean
    slopes = np.linalg.solve(xc.T @ xc + RIDGE * len(rows) * np.eye(xc.shape[1]),
                             xc.T @ (y - y.mean()))
    return np.concatenate(([y.mean() - mean @ slopes], slopes))


def samples_of(entries: dict) -> list:
    """(op, kernel, features, seconds) of every tuning-cache entry that carries them."""
    out = []
    for entry in entries.values():
        if isinstance(entry, dict) and "features" in entry and "op" in entry:
            for kernel, seconds in entry.get("times", {}).items():
                out.append((entry["op"], kernel, entry["features"], seconds))
    return out


def shipped_samples(threads: int) -> list:
    """The samples shipped for this CPU (its model and tier), else for its tier."""
    from ..kernels import isa
    tier = isa.active_tier()
    files = sorted(glob.glob(os.path.join(DATA, f"*-{tier}-t{threads}.json")))
    if not files:
        return []
    mine = _cpu_file_key()
    chosen = next((f for f in files if os.path.basename(f).startswith(mine)), files[0])
    with open(chosen) as f:
        return [tuple(s) for s in json.load(f)["samples"]]


def _cpu_file_key() -> str:
    from ..kernels import isa
    return "".join(c if c.isalnum() else "_" for c in isa.cpu_model()).strip("_")


def shipped_name(threads: int) -> str:
    """The file tools/fit_cost_model.py writes for this CPU, tier and thread count."""
    from ..kernels import isa
    return os.path.join(DATA, f"{_cpu_file_key()}-{isa.active_tier()}-t{threads}.json")


def current(threads: int) -> CostModel:
    """The model for this CPU at `threads`: shipped samples and this machine's tuning
    cache (refitted when the cache has grown)."""
    from . import tunecache
    entries = tunecache.load(threads)
    key = (threads, len(entries))
    with _lock:
        model = _models.get(key)
    if model is None:
        model = CostModel(shipped_samples(threads) + samples_of(dict(entries)))
        with _lock:
            _models.clear()
            _models[key] = model
    return model


def pick(node, ins, outs, names: list[str], threads: int):
    """-> (the kernel of `names` predicted fastest, {kernel: predicted seconds}), or
    (None, {}) when no candidate has a prediction."""
    feats = features(node, ins, outs)
    model = current(threads)
    predicted = {n: t for n in names
                 if (t := model.predict(node.op, n, feats)) is not None}
    if not predicted:
        return None, {}
    return min(predicted, key=predicted.get), predicted
