"""One knob for threads: Numba's pool and the BLAS pool (through threadpoolctl) together,
so the two never oversubscribe the cores. Called before planning and before every run;
cheap when nothing changed."""
from __future__ import annotations

import sys

_applied: int | None = None
_numba_applied: int | None = None
_limiter = None


def apply(threads: int) -> None:
    global _applied, _numba_applied, _limiter
    if threads != _applied:
        from threadpoolctl import threadpool_limits
        _limiter = threadpool_limits(limits=threads)  # process-wide; kept alive here
        _applied = threads
    # numba is imported lazily by the kernels that need it: set its pool once it exists
    if _numba_applied != threads and "numba" in sys.modules:
        import numba
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        _numba_applied = threads


def current() -> int | None:
    return _applied
