"""One knob for threads: Numba's pool and the BLAS pool (through threadpoolctl) together,
so the two never oversubscribe the cores."""
from __future__ import annotations

import sys

_applied: int | None = None
_limiter = None


def apply(threads: int) -> None:
    global _applied, _limiter
    if threads == _applied:
        return
    from threadpoolctl import threadpool_limits
    _limiter = threadpool_limits(limits=threads)  # process-wide; kept alive here
    if "numba" in sys.modules:  # never import numba just to set this
        import numba
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    _applied = threads


def current() -> int | None:
    return _applied
