"""Thread counts belong to a session, not to the process.

Three pools can run a plan's kernels:
- edgenn's OpenMP kernels (*_mt) take their thread count from the plan (fixed at prepare);
- Numba's pool: its thread count is per calling thread (numba.set_num_threads is
  thread-local), set before every run of the caller's session;
- OpenBLAS's pool, whose thread count is one process-wide setting. Runs of plans that call
  BLAS pass the gate below: any number of them run at once while they ask for the same
  count; a run asking for another count waits until those are done, then sets it. So two
  sessions with threads=1 and threads=2 each get what they asked, also when called at once.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

_gate = threading.Condition()
_blas_threads: int | None = None     # the count OpenBLAS is set to
_blas_users = 0                      # runs inside the gate now
_controller = None                   # threadpoolctl's handle on the BLAS libraries


def _set_blas(threads: int) -> None:
    """OpenBLAS at `threads`. The count in force is read back, not remembered: user code or
    another library (threadpoolctl, torch, scikit-learn) may have changed it meanwhile."""
    global _blas_threads, _controller
    if _controller is None:        # found once: numpy's BLAS, the one the kernels call
        import numpy  # noqa: F401
        from threadpoolctl import ThreadpoolController
        _controller = ThreadpoolController().select(user_api="blas")
    for lib in _controller.lib_controllers:
        if lib.get_num_threads() != threads:
            # threadpoolctl >= 3.6 lets only one Python thread (the first to set it) change
            # OpenBLAS's count and silently ignores the others; the gate already makes the
            # change exclusive, so any caller's thread may make it
            setter = getattr(lib, "_real_set_num_threads", lib.set_num_threads)
            setter(threads)
    _blas_threads = threads


@contextmanager
def blas(threads: int):
    """Run the block with OpenBLAS at `threads` (see the module docstring)."""
    global _blas_users
    with _gate:
        while _blas_users and _blas_threads != threads:
            _gate.wait()
        if not _blas_users:
            _set_blas(threads)
        _blas_users += 1
    try:
        yield
    finally:
        with _gate:
            _blas_users -= 1
            if not _blas_users:
                _gate.notify_all()


def numba_threads(threads: int) -> None:
    """Numba's thread count for the calling thread (once numba is imported)."""
    if "numba" in sys.modules:
        import numba
        want = min(threads, numba.config.NUMBA_NUM_THREADS)
        if numba.get_num_threads() != want:
            numba.set_num_threads(want)


def current_blas() -> int | None:
    return _blas_threads


# OpenBLAS's workers spin for a while after each call before they sleep (its THREAD_TIMEOUT,
# 2^28 cycles by default: ~0.1 s); OpenMP kernels timed in that window share the cores with
# them
BLAS_SPIN_S = 0.25


def wait_blas_idle() -> None:
    """Wait until OpenBLAS's workers have gone to sleep after the last BLAS call, so what is
    timed next runs on free cores (the pool timing, the family probe)."""
    time.sleep(BLAS_SPIN_S)
