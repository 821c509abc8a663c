"""Execution contexts: everything one call of a plan writes.

A Plan is immutable once built (bound kernels, packed weights, constants, the memory
layout). An ExecutionContext holds one copy of what a run writes: the activation blocks
(liveness-planned, kernels' transient scratch included), the kernels' persistent scratch,
and the step callables bound to those arrays. A plan keeps a pool of them: a call takes a
free context (a new one only when every context is busy) and gives it back after, so the
steady state allocates nothing and concurrent callers never share memory.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..kernels import scratch
from . import memory


class ExecutionContext:
    """The arrays and bound steps of one caller of `plan` (see the module docstring)."""

    def __init__(self, plan):
        lay = plan.layout
        self.blocks = memory.allocate(lay.capacities)
        arrays: dict[str, np.ndarray] = {}
        for t, (dtype, shape) in lay.tensors.items():
            if t not in lay.root:
                arrays[t] = memory.view(self.blocks[lay.owner[t]], dtype, shape)
        for t, r in lay.root.items():
            arrays[t] = arrays[r].reshape(lay.tensors[t][1])
        self.scratch: list[np.ndarray] = []
        self.persistent_bytes = 0
        for slot, h in enumerate(plan.scratch):
            if h.persistent:
                a = memory.view(memory.allocate([h.nbytes])[0], h.dtype.name, h.shape)
                if h.fill is not None:
                    a.fill(h.fill)
                self.persistent_bytes += h.nbytes
            else:
                a = memory.view(self.blocks[lay.owner[scratch_name(slot)]], h.dtype.name,
                                h.shape)
            self.scratch.append(a)

        def resolve(ref):
            if ref is None:
                return None
            kind, value = ref
            return value if kind == "const" else arrays[value]

        self.inputs = [arrays[name] for name in plan.input_names]
        self.outputs = {name: resolve(ref) for name, ref in plan.output_refs.items()}
        self.calls = [functools.partial(step.choice.run, [resolve(r) for r in step.in_refs],
                                        [resolve(r) for r in step.out_refs])
                      for step in plan.steps]
        self.token = plan.token

    def run(self, feeds: list[np.ndarray], output_names: list[str]) -> list[np.ndarray]:
        for buf, x in zip(self.inputs, feeds):
            np.copyto(buf, x)
        with scratch.active(self.token, self.scratch):
            for call in self.calls:
                call()
        return [self.outputs[name].copy() for name in output_names]


def scratch_name(slot: int) -> str:
    """The memory planner's name of transient scratch `slot` (never a tensor name)."""
    return f"\x00scratch{slot}"


class ContextPool:
    """Free contexts of one plan; grows on demand, reuses what was given back."""

    def __init__(self, plan):
        self._plan = plan
        self._free: list[ExecutionContext] = []
        self._lock = threading.Lock()
        self.created = 0

    def acquire(self) -> ExecutionContext:
        with self._lock:
            if self._free:
                return self._free.pop()
            self.created += 1
        return ExecutionContext(self._plan)

    def release(self, ctx: ExecutionContext) -> None:
        with self._lock:
            self._free.append(ctx)
