"""Timing a session: whole runs (median of a block) and per-step times (median of a few
profiled runs) for `edgenn inspect --plot`, the compression chain and scalable families."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class LayerTime:
    index: int        # step number in the plan
    op: str
    node: str
    kernel: str
    median_s: float


def layer_profile(sess, feeds: dict, rounds: int = 10, warmup: int = 2) -> list[LayerTime]:
    """Median time of each step of the session's plan over `rounds` profiled runs."""
    for _ in range(warmup):
        sess.run(None, feeds)
    per_step: dict[int, list[float]] = {}
    steps = {}
    for _ in range(rounds):
        timings: list = []
        sess.run(None, feeds, timings=timings)
        for k, (step, t0, t1) in enumerate(timings):
            per_step.setdefault(k, []).append(t1 - t0)
            steps[k] = step
    return [LayerTime(k, steps[k].node.op, steps[k].node.name, steps[k].choice.kernel,
                      float(np.median(ts))) for k, ts in sorted(per_step.items())]


def latency_ms(session, feeds: dict, rounds: int, warmup: int = 3) -> float:
    """Median ms of `rounds` whole runs after `warmup` runs."""
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3
