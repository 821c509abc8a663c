"""Liveness-based buffer planning: tensors whose lifetimes do not overlap share memory.

Every intermediate tensor is assigned a buffer at plan time; `run` then writes into views
of those buffers and allocates nothing. View-like ops (Reshape, Flatten, Squeeze, ...)
produce no step at all: their output is a reshaped view of the input's buffer, and the
input's buffer stays alive for as long as any of its views is read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALIGN = 64  # bytes: cache line, and what SIMD kernels like


@dataclass
class Buffer:
    capacity: int = 0


@dataclass
class Lifetime:
    name: str
    nbytes: int
    first: int   # step that writes it (-1 for graph inputs)
    last: int    # last step that reads it (len(steps) for graph outputs)


def assign(lifetimes: list[Lifetime]) -> tuple[dict[str, int], list[int]]:
    """Greedy best-fit: walk tensors by first use; reuse the smallest free buffer that
    fits, else grow the largest free one, else open a new one.
    -> (tensor -> buffer index, capacity in bytes of each buffer)."""
    buffers: list[Buffer] = []
    owner: dict[str, int] = {}
    busy_until: list[int] = []  # per buffer: the last step that still reads it
    for t in sorted(lifetimes, key=lambda t: (t.first, -t.nbytes)):
        # a buffer read at step s can be rewritten by a step > s (never by step s itself)
        free = [b for b in range(len(buffers)) if busy_until[b] < t.first]
        fitting = [b for b in free if buffers[b].capacity >= t.nbytes]
        if fitting:
            b = min(fitting, key=lambda b: buffers[b].capacity)
        elif free:
            b = max(free, key=lambda b: buffers[b].capacity)
        else:
            buffers.append(Buffer())
            busy_until.append(-2)
            b = len(buffers) - 1
        buffers[b].capacity = max(buffers[b].capacity, t.nbytes)
        busy_until[b] = t.last
        owner[t.name] = b
    return owner, [b.capacity for b in buffers]


def allocate(capacities: list[int]) -> list[np.ndarray]:
    """One aligned uint8 block per buffer."""
    blocks = []
    for cap in capacities:
        raw = np.empty(cap + ALIGN, dtype=np.uint8)
        offset = (-raw.ctypes.data) % ALIGN
        blocks.append(raw[offset:offset + cap])
    return blocks


def view(block: np.ndarray, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return block[:n].view(dt).reshape(shape)
