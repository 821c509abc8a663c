"""session.bind: a call whose inputs stay bound to the caller's arrays between calls
(runtime/context.py BoundCall), as a decoder's token loop uses it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import edgenn
from edgenn.errors import InputError
from support.helpers import make_model


def _session():
    w = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Relu", ["h"], ["y"]),
                    helper.make_node("Add", ["y", "b"], ["z"])],
                   [("x", np.float32, [3, 8]), ("b", np.float32, [3, 5])],
                   [("y", np.float32, [3, 5]), ("z", np.float32, [3, 5])], {"w": w})
    return edgenn.InferenceSession(m.SerializeToString())


def test_each_call_reads_the_arrays_as_they_are_then():
    sess = _session()
    rng = np.random.default_rng(1)
    x, b = np.zeros((3, 8), np.float32), np.zeros((3, 5), np.float32)
    with sess.bind(["z", "y"], {"x": x, "b": b}) as call:
        for _ in range(4):
            x[...] = rng.standard_normal(x.shape)        # written in place between calls
            b[...] = rng.standard_normal(b.shape)
            z, y = call()
            want = sess.run(["z", "y"], {"x": x, "b": b})
            np.testing.assert_array_equal(z, want[0])
            np.testing.assert_array_equal(y, want[1])


def test_a_run_beside_a_bound_call_has_its_own_context():
    sess = _session()
    x, b = np.ones((3, 8), np.float32), np.ones((3, 5), np.float32)
    call = sess.bind(["z"], {"x": x, "b": b})
    first = call()[0].copy()
    other = sess.run(["z"], {"x": -x, "b": -b})[0]     # must not touch the bound buffers
    np.testing.assert_array_equal(call()[0], first)
    assert not np.array_equal(other, first)
    call.close()
    call.close()                                        # idempotent


@pytest.mark.parametrize("bad", ["strided", "dtype", "readonly"])
def test_arrays_that_cannot_be_read_in_place_are_refused(bad):
    sess = _session()
    x, b = np.ones((3, 8), np.float32), np.ones((3, 5), np.float32)
    if bad == "strided":
        x = np.ones((3, 16), np.float32)[:, ::2]
    elif bad == "dtype":
        b = b.astype(np.float64)
    else:
        x.flags.writeable = False
    with pytest.raises(InputError):
        sess.bind(["z"], {"x": x, "b": b})
    # the context went back: a normal run still works
    assert sess.run(["z"], {"x": np.ones((3, 8), np.float32),
                            "b": np.ones((3, 5), np.float32)})[0].shape == (3, 5)


@pytest.mark.parametrize("bound", [False, True])
def test_a_call_never_waits_on_blas_while_counted_as_activity(bound):
    """The background tuner may hold BLAS at another thread count while it waits for the
    session to be idle: a call must take BLAS before it counts as activity, or the two
    wait for each other."""
    import threading
    import time
    from edgenn.runtime import threads as thread_control
    w = np.ones((8, 5), np.float32)
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [("x", np.float32, [3, 8])], [("y", np.float32, [3, 5])], {"w": w})
    sess = edgenn.InferenceSession(m.SerializeToString(), threads=2)
    x = np.ones((3, 8), np.float32)
    sess.plan.uses_blas = True               # as a plan with a BLAS kernel
    holding, done = threading.Event(), threading.Event()

    def tuner():                             # background.py's gate, in miniature
        with thread_control.blas(1):
            holding.set()
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.2 or sess._activity.active:
                if time.perf_counter() - t0 > 10:
                    return                   # deadlocked: give up (the assert fails)
                time.sleep(0.002)
        done.set()

    t = threading.Thread(target=tuner)
    t.start()
    holding.wait()
    if bound:
        with sess.bind(["y"], {"x": x}) as call:
            y = call()[0]
    else:
        y = sess.run(["y"], {"x": x})[0]
    t.join()
    assert done.is_set(), "the call and the tuner waited for each other"
    np.testing.assert_allclose(y, x @ w)
