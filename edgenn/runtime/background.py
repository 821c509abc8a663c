"""Tuning in the background: a session is ready with a first plan that timed nothing, and
a low-priority thread times the candidates that plan guessed, then swaps the tuned plan in.

The swap replaces the session's plan table (a new dict), never a plan in place: a call
reads the table once and runs the plan it found to its end, so every result is some
complete plan's. The tuner times in the session's idle time only (`Gate`): a round of
timing starts when no call is in flight, and one a call overlapped is dropped, so the
calls are never slowed for long (at most by the round that was running when they came)
and the times kept are the kernels' own.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref

from . import _loop

_STOP = threading.Event()           # set at interpreter exit: tuners stop between timings
atexit.register(_STOP.set)
ON_CPU = 0.9                         # an undisturbed round ran on a core this share of its time


Activity = _loop.Activity   # the calls in flight: runtime/_loop.pyx


_current = threading.local()        # the Gate of the background tuning on this thread


class Gate:
    """What a background Tuner measures through (select.Tuner.gate). The tuner times
    only while the session is idle: each round of a timing loop (round_start /
    round_clean) first waits until no call is in flight, and a round during which a call
    started, or the tuner's thread did not have its core (other processes: it runs at
    the lowest priority), is dropped, since its times are not the kernels'. `clean`: the
    last measurement got enough undisturbed rounds to be cached."""

    def __init__(self, activity: Activity):
        self.activity = activity
        self.clean = True
        self.measuring_s = 0.0           # the last measurement's time, waits excluded
        self._waited = 0.0

    def measure(self, measure):
        _current.gate = self
        self.clean, self._waited = True, 0.0
        t0 = time.perf_counter()
        try:
            self._wait_idle()
            return measure()
        finally:
            self.measuring_s = time.perf_counter() - t0 - self._waited
            _current.gate = None

    def _wait_idle(self) -> None:
        t0 = time.perf_counter()
        while self.activity.active and not _STOP.is_set():
            time.sleep(0.002)
        if _STOP.is_set():
            raise Stopped
        self._waited += time.perf_counter() - t0

    def round_start(self):
        self._wait_idle()
        return self.activity.started, time.perf_counter(), time.thread_time()

    def round_clean(self, token) -> bool:
        started, wall, cpu = token
        took = time.perf_counter() - wall
        return self.activity.started == started and \
            time.thread_time() - cpu >= ON_CPU * took


def round_start():
    """Before a round of a timing loop: on a background tuner's thread, wait until the
    session is idle; -> a token for round_clean (None elsewhere)."""
    gate = getattr(_current, "gate", None)
    return None if gate is None else (gate, gate.round_start())


def round_clean(token) -> bool:
    """After the round: whether its times may be kept (always, outside the background)."""
    return token is None or token[0].round_clean(token[1])


def not_enough_clean_rounds() -> None:
    """A timing loop kept too few undisturbed rounds: its result is used, not cached."""
    gate = getattr(_current, "gate", None)
    if gate is not None:
        gate.clean = False


class Stopped(BaseException):
    """The interpreter is exiting: the background tuner gives up (a BaseException, so
    no handler on the way that catches Exception turns it into a planning error)."""


def lower_priority() -> None:
    """This thread at the lowest CPU priority (Linux: per thread), where allowed."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


class BackgroundTuning:
    """One thread per session, tuning the plans whose first version guessed, one after
    another; `wait(timeout)` returns when none is left (True) or the time is out."""

    def __init__(self, session):
        self._session = weakref.ref(session)
        self._pending: list = []
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def submit(self, key, build) -> None:
        """build(gate) -> the tuned plan for input shapes `key`, timed through gate."""
        with self._lock:
            self._pending.append((key, build))
            self._idle.clear()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="edgenn-tune",
                                                daemon=True)
                self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def _work(self) -> None:
        lower_priority()
        while True:
            with self._lock:
                if not self._pending or _STOP.is_set():
                    self._pending.clear()
                    self._thread = None
                    self._idle.set()
                    return
                key, build = self._pending.pop(0)
            session = self._session()
            if session is None:
                continue
            gate = Gate(session._activity)
            del session
            try:
                plan = build(gate)
            except Stopped:
                continue
            except Exception as exc:  # noqa: BLE001 - the first plan stays, the error is kept
                self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            session = self._session()
            if session is not None:
                session._swap(key, plan)
            del session
