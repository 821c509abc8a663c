"""Tuning in the background: a session is ready with a first plan that timed nothing, and
a low-priority thread times the candidates that plan guessed, then swaps the tuned plan in.

The swap replaces the session's plan table (a new dict), never a plan in place: a call
reads the table once and runs the plan it found to its end, so every result is some
complete plan's. The tuner times only while a core is free of the session's calls
(`Activity`), and a measurement during which the calls took every core is taken again,
since its times would be the contention's, not the kernels'.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref

_STOP = threading.Event()           # set at interpreter exit: tuners stop between timings
atexit.register(_STOP.set)
RETRIES = 5                          # a measurement disturbed this often is used, not cached
ON_CPU = 0.9                         # a clean measurement ran on a core this share of its time


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Activity:
    """The session's calls in flight, for the background tuner: how many run now, and a
    count of the moments they took every core (`crowded`), read before and after a
    measurement to tell whether it ran beside them."""

    def __init__(self, threads_per_call: int):
        self.lock = threading.Lock()
        self.active = 0
        self.crowded = 0
        self.threads_per_call = threads_per_call
        self.capacity = cores()

    def enter(self) -> None:
        with self.lock:
            self.active += 1
            if self.active * self.threads_per_call >= self.capacity:
                self.crowded += 1

    def exit(self) -> None:
        with self.lock:
            self.active -= 1

    def busy(self, tuner_threads: int) -> bool:
        return self.active * self.threads_per_call + tuner_threads > self.capacity


class Gate:
    """What a background Tuner measures through (select.Tuner.gate): wait for a free
    core, measure, measure again if the session's calls crowded the cores meanwhile or
    the tuner's thread did not have its core (other processes: it runs at the lowest
    priority, so then its times are the machine's load, not the kernels'). `clean`: the
    last measurement was neither, so it may be cached."""

    def __init__(self, activity: Activity, threads: int):
        self.activity, self.threads = activity, threads
        self.clean = False
        self.measuring_s = 0.0           # the last call's time in measure(), waits excluded

    def measure(self, measure):
        self.measuring_s = 0.0
        for _ in range(RETRIES):
            while self.activity.busy(self.threads) and not _STOP.is_set():
                time.sleep(0.002)
            if _STOP.is_set():
                raise Stopped
            before = self.activity.crowded
            wall, cpu = time.perf_counter(), time.thread_time()
            result = measure()
            took = time.perf_counter() - wall
            self.measuring_s += took
            had_core = time.thread_time() - cpu >= ON_CPU * took
            self.clean = had_core and self.activity.crowded == before and \
                not self.activity.busy(self.threads)
            if self.clean:
                return result
        return result


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
            gate = Gate(session._activity, session.threads)
            del session                  # the session may go while its plan is timed
            try:
                plan = build(gate)
            except Stopped:
                continue
            except Exception as exc:  # noqa: BLE001 - the first plan stays; said on wait
                self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            session = self._session()
            if session is not None:
                session._swap(key, plan)
            del session
