"""Choosing the next token from logits: greedy, or sampled with temperature, top-k and
top-p (nucleus), after a repetition penalty (as Hugging Face's generate applies them)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass
class Sampling:
    """temperature 0 = greedy (argmax); top_k 0 = all tokens; top_p 1 = all;
    repetition_penalty 1 = none (> 1 makes tokens already in the sequence less likely:
    a positive logit divided by it, a negative one multiplied); seed: a fixed stream of
    draws (None = fresh)."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if not self.temperature >= 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be > 0, got "
                             f"{self.repetition_penalty}")


def penalize(logits: np.ndarray, seen: list[np.ndarray], penalty: float) -> np.ndarray:
    """logits (B, V) with each row's `seen` token ids penalized (a copy)."""
    if penalty == 1.0:
        return logits
    logits = logits.copy()
    for row, ids in zip(logits, seen):
        v = row[ids]
        row[ids] = np.where(v > 0, v / penalty, v * penalty)
    return logits


def pick(logits: np.ndarray, seen: list[np.ndarray], s: Sampling,
         rng: np.random.Generator) -> np.ndarray:
    """The next token of each row of logits (B, V) -> int64 (B,)."""
    logits = penalize(np.asarray(logits, np.float32), seen, s.repetition_penalty)
    if s.temperature == 0:
        return logits.argmax(axis=-1).astype(np.int64)
    return np.array([_draw(row / s.temperature, s, rng) for row in logits], np.int64)


def _draw(row: np.ndarray, s: Sampling, rng: np.random.Generator) -> int:
    ids = np.arange(row.size)
    if 0 < s.top_k < row.size:
        ids = np.argpartition(-row, s.top_k - 1)[:s.top_k]
    order = ids[np.argsort(-row[ids], kind="stable")]
    p = np.exp(row[order].astype(np.float64) - row[order[0]])
    p /= p.sum()
    if s.top_p < 1.0:     # the fewest most likely tokens whose mass reaches top_p
        keep = int(np.searchsorted(np.cumsum(p), s.top_p)) + 1
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[min(int(np.searchsorted(np.cumsum(p), rng.random())), len(p) - 1)])
