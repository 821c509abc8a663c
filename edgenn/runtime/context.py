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
import time

import numpy as np

from ..errors import EdgennError, ExecutionError, InputError, ResourceLimitError
from ..kernels import scratch
from . import memory
from ._loop import Input, StepLoop


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
        step_inputs = [[resolve(r) for r in step.in_refs] for step in plan.steps]
        step_outputs = [[resolve(r) for r in step.out_refs] for step in plan.steps]
        self.calls = [functools.partial(step.choice.run, ins, outs)
                      for step, ins, outs in zip(plan.steps, step_inputs, step_outputs)]
        self.readers = [_readers(name, lay.root, plan, step_inputs) for name in plan.input_names]
        self.token = plan.token
        self.steps = plan.steps
        with scratch.active(plan.token, self.scratch):   # C steps bind their scratch now
            self.loop = _compiled_loop(plan, arrays, lay.root, step_inputs, step_outputs,
                                       self.calls, self.inputs, self.readers)
        # the Python steps that resolve scratch handles need the context's scratch active
        self.has_scratch = any(s.choice.scratch and not self.loop.is_compiled(k)
                               for k, s in enumerate(plan.steps))

    def run(self, feeds: list[np.ndarray], output_names: list[str],
            timings: list | None = None) -> list[np.ndarray]:
        """One call: feeds bound (read in place, or copied in), every step, outputs copied
        out. timings: a list that receives (step, start, end) perf_counter times of every
        step (profiling; the steps are then called from Python one by one)."""
        outputs = [self.outputs[name] for name in output_names]
        try:
            if timings is None and not self.has_scratch:
                return self.loop.call(feeds, outputs)
            bound = self.loop.bind(feeds)
            try:
                with scratch.active(self.token, self.scratch):
                    if timings is None:
                        self.loop.run()
                    else:
                        self._timed(timings)
            finally:
                self.loop.unbind(bound)
            return [o.copy() for o in outputs]
        except EdgennError:
            raise
        except Exception as exc:      # name the node (its data may be out of range)
            raise _named(self.steps[self.loop.at].node, exc) from exc

    def _timed(self, timings: list) -> None:
        """Every step called from Python, its (step, start, end) appended to timings."""
        for k, call in enumerate(self.calls):
            self.loop.at = k
            t0 = time.perf_counter()
            call()
            timings.append((self.steps[k], t0, time.perf_counter()))

    def run_bound(self) -> None:
        """Every step, on inputs already bound (BoundCall): no copy in or out."""
        try:
            with scratch.active(self.token, self.scratch):
                self.loop.run()
        except EdgennError:
            raise
        except Exception as exc:
            raise _named(self.steps[self.loop.at].node, exc) from exc


class BoundCall:
    """One caller's context of `plan`, held until close(), its inputs bound to the
    caller's arrays (every one read in place, so writing an array between calls is the
    next call's input, and a kernel that updates an input in place updates the caller's
    array): each call() runs the steps only, and returns the outputs as views of the
    context's buffers, valid until the next call. onnxruntime's IO binding, for loops
    that call one plan many times (a decoder's token steps)."""

    def __init__(self, plan, feeds: list[np.ndarray], output_names: list[str]):
        self._plan = plan
        self._ctx = plan.contexts.acquire()
        try:
            for name, buf, x in zip(plan.input_names, self._ctx.inputs, feeds):
                if not (x.dtype == buf.dtype and x.shape == buf.shape and
                        x.flags.c_contiguous and x.flags.writeable):
                    raise InputError(f"input {name!r}: a bound array must be C-contiguous, "
                                     f"writable, {buf.dtype} {buf.shape}")
            if any(r is None for r in self._ctx.readers):
                raise InputError("an input that is also an output (or a view of one) "
                                 "cannot be bound")
            self._bound = self._ctx.loop.bind(feeds)
        except BaseException:
            plan.contexts.release(self._ctx)
            raise
        self._outputs = [self._ctx.outputs[n] for n in output_names]

    def __call__(self) -> list[np.ndarray]:
        self._ctx.run_bound()
        return self._outputs

    def close(self) -> None:
        """Unbind (no reference to the caller's arrays is kept) and give the context back."""
        if self._ctx is None:
            return
        self._ctx.loop.unbind(self._bound)
        self._plan.contexts.release(self._ctx)
        self._ctx = None


def _readers(name: str, root: dict, plan, step_inputs: list) -> list | None:
    """[(a step's input list, slot, the planned array)] of every read of input
    `name` or of a view of it; None when a graph output is one of them (the outputs are
    copied from the planned buffers)."""
    views = {t for t, r in root.items() if r == name} | {name}
    if any(ref[0] == "tensor" and ref[1] in views for ref in plan.output_refs.values()):
        return None
    return [(ins, j, ins[j]) for step, ins in zip(plan.steps, step_inputs)
            for j, ref in enumerate(step.in_refs)
            if ref is not None and ref[0] == "tensor" and ref[1] in views]


def _compiled_loop(plan, arrays: dict, root: dict, step_inputs: list, step_outputs: list,
                   calls: list, inputs: list, readers: list) -> StepLoop:
    """The context's StepLoop (runtime/_loop.pyx): a C step for every step whose kernel
    offers one for these arrays (run.cstep(ins, outs, in_cells, out_cells) -> capsule or
    None), the Python call for the rest. C steps read and write C-contiguous arrays only:
    a step with any other (a strided constant) stays a Python call. A cell per tensor the
    C steps use (a view shares its root's: the same first element) and per constant they
    read."""
    cells: dict = {}            # root tensor name, or id of a constant -> (cell, array)

    def cell_of(ref, array):
        if ref is None:
            return None
        key = root.get(ref[1], ref[1]) if ref[0] == "tensor" else id(ref[1])
        if key not in cells:
            cells[key] = (len(cells), arrays[key] if ref[0] == "tensor" else array)
        return cells[key][0]

    wanted = []                 # (step, cells of its inputs, of its outputs)
    for k, (step, ins, outs) in enumerate(zip(plan.steps, step_inputs, step_outputs)):
        if getattr(step.choice.run, "cstep", None) is not None and all(
                a is None or a.flags.c_contiguous for a in ins + outs):
            wanted.append((k, [cell_of(r, a) for r, a in zip(step.in_refs, ins)],
                           [cell_of(r, a) for r, a in zip(step.out_refs, outs)]))
    loop = StepLoop(calls, len(cells))
    for c, a in cells.values():
        loop.set_cell(c, a)
    for k, in_cells, out_cells in wanted:
        def address(c):
            return None if c is None else loop.cell_address(c)
        capsule = plan.steps[k].choice.run.cstep(step_inputs[k], step_outputs[k],
                                                 [address(c) for c in in_cells],
                                                 [address(c) for c in out_cells])
        if capsule is not None:
            loop.set_cstep(k, capsule)
    loop.set_inputs([Input(buf, slots, cells[name][0] if name in cells else -1)
                     for name, buf, slots in zip(plan.input_names, inputs, readers)])
    return loop


def _named(node, exc: Exception) -> EdgennError:
    """A kernel's exception as an edgenn error that names the node: out-of-range data
    (indices, ...) is the caller's input, memory is a limit, anything else a failure."""
    where = f"{node.op} node {node.name!r}"
    if isinstance(exc, MemoryError):
        return ResourceLimitError(f"{where}: out of memory while running: {exc}")
    if isinstance(exc, (IndexError, ValueError, OverflowError, ZeroDivisionError)):
        return InputError(f"{where}: {exc}")
    return ExecutionError(f"{where} failed: {type(exc).__name__}: {exc}")


def scratch_name(slot: int) -> str:
    """The memory planner's name of transient scratch `slot` (never a tensor name)."""
    return f"\x00scratch{slot}"


class ContextPool:
    """Free contexts of one plan; grows on demand, reuses what was given back. At most
    max_memory // (one context's bytes) contexts exist (at least one): past that, a caller
    waits for a context to come back instead of allocating beyond the limit."""

    def __init__(self, plan, max_memory: int | None = None):
        self._plan = plan
        self._free: list[ExecutionContext] = []
        self._cond = threading.Condition()
        self._waiting = 0                 # callers waiting in acquire's slow path
        self.created = 0
        per = max(plan.context_bytes, 1)
        self.max_contexts = max(1, max_memory // per) if max_memory else 1 << 30

    def acquire(self) -> ExecutionContext:
        try:              # the steady state: a free context, no lock (list.pop is atomic)
            return self._free.pop()
        except IndexError:
            pass
        with self._cond:
            self._waiting += 1
            try:
                while not self._free and self.created >= self.max_contexts:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            if self._free:
                return self._free.pop()
            self.created += 1
        try:
            return ExecutionContext(self._plan)
        except MemoryError as exc:
            self._uncreate()
            raise ResourceLimitError(f"out of memory for an execution context of "
                                     f"{self._plan.context_bytes} bytes") from exc
        except BaseException:
            self._uncreate()
            raise

    def _uncreate(self) -> None:
        with self._cond:
            self.created -= 1
            self._cond.notify()

    def release(self, ctx: ExecutionContext) -> None:
        """Give `ctx` back. A waiter counts itself under the lock before it looks at the
        free list, and this appends before it looks at the count: either the waiter sees
        the context, or this sees the waiter and wakes it."""
        self._free.append(ctx)
        if self._waiting:
            with self._cond:
                self._cond.notify()
