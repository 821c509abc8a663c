"""Fidelity metrics of a quantized model's tensors against the fp32 ones.

Accumulated over batches (shapes may differ from batch to batch, e.g. text lines of
different widths), per tensor:
  cosine      mean over samples (axis 0) of the cosine similarity of the flattened sample;
              cosine_min, the worst sample;
  sqnr_db     10 log10(sum ref^2 / sum (test - ref)^2) over everything;
  max_abs     max |test - ref|;
  top1        for classifier-like outputs ((N, C) or (N, T, C), C >= 2): the fraction of
              rows whose argmax over the last axis agrees.
"""
from __future__ import annotations

import math

import numpy as np


class Agreement:
    """Running fidelity of one tensor over batches."""

    def __init__(self):
        self.cos_sum = 0.0
        self.cos_min = math.inf
        self.samples = 0
        self.signal = 0.0
        self.noise = 0.0
        self.max_abs = 0.0
        self.top1_hits = 0
        self.top1_rows = 0
        self.classifier = None

    def add(self, ref: np.ndarray, test: np.ndarray) -> None:
        ref = np.asarray(ref, np.float64)
        test = np.asarray(test, np.float64)
        if ref.shape != test.shape:
            raise ValueError(f"shapes differ: fp32 {ref.shape}, quantized {test.shape}")
        if ref.size == 0:
            return
        n = ref.shape[0] if ref.ndim else 1
        r, t = ref.reshape(n, -1), test.reshape(n, -1)
        dot = np.sum(r * t, axis=1)
        norms = np.linalg.norm(r, axis=1) * np.linalg.norm(t, axis=1)
        same = np.all(r == t, axis=1)
        cos = np.where(norms > 0, dot / np.maximum(norms, 1e-300), np.where(same, 1.0, 0.0))
        self.cos_sum += float(cos.sum())
        self.cos_min = min(self.cos_min, float(cos.min()))
        self.samples += n
        self.signal += float(np.sum(ref * ref))
        self.noise += float(np.sum((test - ref) ** 2))
        self.max_abs = max(self.max_abs, float(np.max(np.abs(test - ref))))
        classifier = ref.ndim in (2, 3) and ref.shape[-1] >= 2
        self.classifier = classifier if self.classifier is None else self.classifier and classifier
        if classifier:
            a, b = ref.argmax(axis=-1), test.argmax(axis=-1)
            self.top1_hits += int(np.sum(a == b))
            self.top1_rows += int(a.size)

    def result(self) -> dict:
        out = {"cosine": self.cos_sum / self.samples if self.samples else math.nan,
               "cosine_min": self.cos_min if self.samples else math.nan,
               "sqnr_db": sqnr_db(self.signal, self.noise),
               "max_abs": self.max_abs, "samples": self.samples}
        if self.classifier and self.top1_rows:
            out["top1"] = self.top1_hits / self.top1_rows
        return out


def sqnr_db(signal: float, noise: float) -> float:
    if noise <= 0:
        return math.inf
    if signal <= 0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def compare(ref_batches: list[list[np.ndarray]], test_batches: list[list[np.ndarray]]
            ) -> list[dict]:
    """Per output: the Agreement result over all batches (lists of per-batch outputs)."""
    n_out = len(ref_batches[0])
    acc = [Agreement() for _ in range(n_out)]
    for ref, test in zip(ref_batches, test_batches):
        for k in range(n_out):
            acc[k].add(ref[k], test[k])
    return [a.result() for a in acc]


def fidelity(results: list[dict]) -> dict:
    """One summary of per-output results: the worst output's cosine and top-1 agreement."""
    cos = min((r["cosine"] for r in results), default=math.nan)
    top1 = [r["top1"] for r in results if "top1" in r]
    return {"cosine": cos, "top1": min(top1) if top1 else None}


def meets(summary: dict, target: float) -> bool:
    """The fidelity target: cosine >= target and, for classifier outputs, top-1 >= target."""
    ok = summary["cosine"] >= target
    if summary.get("top1") is not None:
        ok = ok and summary["top1"] >= target
    return ok
