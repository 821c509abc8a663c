"""Scratch memory of a kernel: asked for in `prepare`, owned by the execution context.

A kernel's `prepare` must not keep arrays that `run` writes (im2col columns, packed input
panels, padded planes, ...): one plan is shared by every thread that calls the session, so
such an array would be shared too and the callers would overwrite each other's work.
Instead `prepare` asks for it:

    cols = scratch.array((k, n), np.float32)      # a handle, no memory yet
    def run(inputs, outputs):
        c = cols.get()                            # this call's array

Inside a plan's run, `get()` returns the calling execution context's array: transient
scratch is planned together with the activations (it lives only during its step, so it
shares memory with tensors that are dead then, and it is counted in the plan's bytes);
`persistent=True` scratch keeps its content from call to call of the same context
(borders filled once with `fill`). Outside a plan (tuning, tests) each handle falls back
to a private array of its own.

The planner collects the handles a `prepare` created with `collect()`.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

_tls = threading.local()   # .recording: list of handles; .context: (token, arrays)


class Scratch:
    """One scratch array of one prepared kernel (see the module docstring)."""
    __slots__ = ("shape", "dtype", "persistent", "fill", "token", "slot", "_own")

    def __init__(self, shape, dtype, persistent: bool, fill):
        self.shape = tuple(int(d) for d in (shape if isinstance(shape, tuple) else (shape,)))
        self.dtype = np.dtype(dtype)
        self.persistent, self.fill = persistent, fill
        self.token, self.slot, self._own = None, -1, None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def get(self) -> np.ndarray:
        ctx = getattr(_tls, "context", None)
        if ctx is not None and ctx[0] is self.token:
            return ctx[1][self.slot]
        if self._own is None:                  # outside a plan: a private array
            self._own = self.new()
        return self._own

    def release_own(self) -> None:
        """Drop the private array (used while the kernel ran outside a plan)."""
        self._own = None

    def new(self) -> np.ndarray:
        """A fresh array of this handle's shape and dtype (filled if it asks for a fill)."""
        a = np.empty(self.shape, self.dtype)
        if self.fill is not None:
            a.fill(self.fill)
        return a


def array(shape, dtype=np.float32, persistent: bool = False, fill=None) -> Scratch:
    """Ask for a scratch array; `fill` (persistent only) is written once per context."""
    if fill is not None and not persistent:
        raise ValueError("only persistent scratch keeps a fill")
    h = Scratch(shape, dtype, persistent, fill)
    rec = getattr(_tls, "recording", None)
    if rec is not None:
        rec.append(h)
    return h


def bytes_(nbytes: int) -> Scratch:
    """A transient uint8 workspace of `nbytes` (for a C kernel's run(..., ws=))."""
    return array((max(int(nbytes), 1),), np.uint8)


@contextmanager
def collect():
    """Record the handles created inside the block (nested blocks record into their own
    list and into the enclosing one)."""
    outer = getattr(_tls, "recording", None)
    mine: list[Scratch] = []
    _tls.recording = mine
    try:
        yield mine
    finally:
        _tls.recording = outer
        if outer is not None:
            outer.extend(mine)


class active:
    """Handles of `token` (a plan) resolve to `arrays` (one context's) inside the block
    (a class, not a generator: it is entered on every run of a plan)."""

    __slots__ = ("context", "prev")

    def __init__(self, token, arrays: list):
        self.context = (token, arrays)

    def __enter__(self):
        self.prev = getattr(_tls, "context", None)
        _tls.context = self.context

    def __exit__(self, *exc):
        _tls.context = self.prev
