"""The plan context: what a kernel's `supports` / `prepare` may know of the plan being
built (its session's thread count, the thread pool it runs on). The planner sets it for
the thread that builds the plan, so two sessions planning at once (threads=1 and
threads=2) each prepare their kernels for their own count; kernels never read process
state for it."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

_tls = threading.local()


@dataclass(frozen=True)
class PlanContext:
    threads: int = 1
    pool: str = "blas"     # threads > 1: "blas" or "omp" kernels (runtime/session.py)
    # threads > 1: 1x1 convs read after a channel-split layer split their input channels
    # the same way (conv_sgemm's rows mode; the session times plans with and without)
    k_split: bool = False


_DEFAULT = PlanContext()


def current() -> PlanContext:
    return getattr(_tls, "ctx", None) or _DEFAULT


@contextmanager
def planning(ctx: PlanContext):
    prev = getattr(_tls, "ctx", None)
    _tls.ctx = ctx
    try:
        yield ctx
    finally:
        _tls.ctx = prev
