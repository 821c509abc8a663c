"""One session, many callers (runtime/context.py, runtime/threads.py).

8 Python threads share one session; each calls it 10 times on inputs of its own and
compares every result, bit for bit, with what a single caller got for the same input.
A shared activation or scratch buffer shows up here as a mismatch (before execution
contexts: 80 of 80 wrong on MobileNetV2).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import edgenn
from edgenn.runtime import session as session_module
from edgenn.runtime import threads as thread_control

THREADS, CALLS = 8, 10


def _variants(feeds: dict, count: int, seed: int = 0) -> list[dict]:
    """`count` different feeds like `feeds` (floats perturbed, ints kept)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        f = {}
        for k, v in feeds.items():
            if v.dtype.kind == "f":
                f[k] = (v + rng.normal(0, 0.5, v.shape)).astype(v.dtype)
            else:
                f[k] = v.copy()
        out.append(f)
    return out


def hammer(sess, variants: list[dict]) -> tuple[int, int]:
    """THREADS threads x CALLS calls, thread t on variant (t + call) % n, all released at
    once. -> (calls compared, wrong results)."""
    want = [sess.run(None, f) for f in variants]
    start = threading.Barrier(THREADS)
    wrong, done = [], []

    def caller(t: int) -> None:
        start.wait()
        for c in range(CALLS):
            k = (t + c) % len(variants)
            got = sess.run(None, variants[k])
            done.append(1)
            if not all(np.array_equal(a, b) for a, b in zip(got, want[k])):
                wrong.append((t, c))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(caller, range(THREADS)))
    return len(done), len(wrong)


def _check_shared(sess, feeds):
    calls, wrong = hammer(sess, _variants(feeds, THREADS))
    assert calls == THREADS * CALLS and wrong == 0, f"{wrong} of {calls} results wrong"
    plan = sess.plan
    assert 1 <= plan.contexts.created <= THREADS
    created = plan.contexts.created
    for f in _variants(feeds, 3, seed=1):     # steady state: contexts are reused
        sess.run(None, f)
    assert plan.contexts.created == created


def test_mobilenet_v2_shared_by_8_threads(zoo):
    case = zoo("mobilenet_v2-op13")
    _check_shared(edgenn.InferenceSession(str(case.path)), case.feeds)


@pytest.mark.slow
def test_minilm_shared_by_8_threads(zoo):
    case = zoo("minilm_l6-op17")
    sess = edgenn.InferenceSession(str(case.path), input_shapes=case.input_shapes)
    _check_shared(sess, case.feeds)


def test_int8_mobilenet_v2_shared_by_8_threads(zoo):
    case = zoo("mobilenet_v2-op13")
    (name, x), = case.feeds.items()
    calib = [{name: v[name]} for v in _variants(case.feeds, 2, seed=3)]
    q = edgenn.quantize(str(case.path), calib)
    sess = edgenn.InferenceSession(q)
    assert any(s.node.op == "QConv" for s in sess.plan.steps)
    _check_shared(sess, case.feeds)


def test_two_thread_session_shared(zoo):
    """threads=2 kernels (OpenMP or OpenBLAS) called from several threads at once."""
    case = zoo("mobilenet_v2-op13")
    sess = edgenn.InferenceSession(str(case.path), threads=2, tune="off")
    calls, wrong = hammer(sess, _variants(case.feeds, 4))
    assert wrong == 0 and calls == THREADS * CALLS


def test_new_shape_planned_once_under_concurrency(zoo, monkeypatch):
    case = zoo("bert_tiny-op17")
    sess = edgenn.InferenceSession(str(case.path))           # dynamic dims: no plan yet
    builds = []
    real = session_module.build

    def counting(*args, **kw):
        builds.append(1)
        return real(*args, **kw)
    monkeypatch.setattr(session_module, "build", counting)
    start = threading.Barrier(4)

    def caller(_):
        start.wait()
        return sess.run(None, case.feeds)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(caller, range(4)))
    assert len(builds) == 1
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            np.testing.assert_array_equal(a, b)


def test_two_sessions_different_threads_at_once(zoo):
    """threads=1 and threads=2 sessions called at the same time: both right."""
    case = zoo("bert_tiny-op17")
    one = edgenn.InferenceSession(str(case.path), threads=1, input_shapes=case.input_shapes)
    two = edgenn.InferenceSession(str(case.path), threads=2, input_shapes=case.input_shapes,
                                  tune="off")
    want1, want2 = one.run(None, case.feeds), two.run(None, case.feeds)
    bad = []

    def caller(k):
        s, want = (one, want1) if k % 2 else (two, want2)
        for _ in range(5):
            got = s.run(None, case.feeds)
            bad.extend(1 for a, b in zip(got, want) if not np.array_equal(a, b))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(caller, range(4)))
    assert not bad


def test_blas_gate_keeps_each_count():
    """Runs asking for different OpenBLAS counts never overlap; equal counts do."""
    from threadpoolctl import threadpool_info
    seen, inside = [], []
    order = threading.Lock()

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info()     # numpy's: the kernels' BLAS
                if i["user_api"] == "blas" and "numpy" in i["filepath"]]

    def user(threads, hold):
        with thread_control.blas(threads):
            with order:
                inside.append(threads)
                seen.append((threads, set(inside), blas_threads()))
            hold.wait(0.2)
            with order:
                inside.remove(threads)

    hold = threading.Event()
    ts = [threading.Thread(target=user, args=(t, hold)) for t in (1, 2, 1, 2, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(seen) == 5 and all(counts for _, _, counts in seen)
    for threads, others, counts in seen:
        assert others == {threads}, (threads, others)     # never with another count
        assert all(c == threads for c in counts), counts


def test_contexts_share_no_memory(zoo):
    """Two contexts of one plan: no activation block and no scratch array in common; the
    packed weights (bound constants) are the same objects."""
    case = zoo("mobilenet_v2-op13")
    plan = edgenn.InferenceSession(str(case.path)).plan
    assert plan.scratch, "MobileNetV2's kernels ask for scratch"
    a, b = plan.contexts.acquire(), plan.contexts.acquire()
    try:
        for x in a.blocks + a.scratch:
            assert not any(np.shares_memory(x, y) for y in b.blocks + b.scratch)
        assert [c.func for c in a.calls] == [c.func for c in b.calls]
    finally:
        plan.contexts.release(a)
        plan.contexts.release(b)


def test_scratch_handles():
    from edgenn.kernels import scratch
    with scratch.collect() as got:
        a = scratch.array((4, 5), np.float32)
        b = scratch.array(7, np.uint8, persistent=True, fill=3)
    assert got == [a, b]
    assert a.get().shape == (4, 5) and a.get() is a.get()      # private, stable
    assert (b.get() == 3).all()
    token, arrays = object(), [np.zeros((4, 5), np.float32), np.zeros(7, np.uint8)]
    a.token = b.token = token
    a.slot, b.slot = 0, 1
    with scratch.active(token, arrays):
        assert a.get() is arrays[0] and b.get() is arrays[1]
    with scratch.active(object(), arrays):                     # another plan's context
        assert a.get() is not arrays[0]
    with pytest.raises(ValueError):
        scratch.array(3, fill=1)          # a fill needs persistent scratch
