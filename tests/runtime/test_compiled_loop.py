"""The compiled run loop (runtime/_loop.pyx): steps whose kernels offer a C step run as
plain C calls, the rest through Python, in one loop; inputs read in place reach the C
steps through their cells; errors still name the node."""
import threading

import numpy as np
import pytest
from support.chains import CHAIN_OPS, chain_feeds, chain_model
from support.helpers import helper, make_model, ort_run, rel_err

import edgenn
from edgenn.errors import InputError
from edgenn.kernels.tensor.elementwise import collapse_broadcast


def _context(sess):
    ctx = sess.plan.contexts.acquire()
    sess.plan.contexts.release(ctx)
    return ctx


def _callers_in_threads_agree(sess, xs: list, calls: int) -> bool:
    """One thread per input x of xs, each calling `calls` times: every result is the one
    a lone call gives for its x."""
    wants = [sess.run(None, {"x": x})[0] for x in xs]
    bad = []

    def caller(i):
        for _ in range(calls):
            if not np.array_equal(sess.run(None, {"x": xs[i]})[0], wants[i]):
                bad.append(i)
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return not bad


@pytest.mark.parametrize("nodes", [1, 10, 50])
def test_chains_run_as_c_steps_and_match_onnxruntime(nodes):
    model = chain_model(nodes)
    feeds = chain_feeds()
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="off")
    got = sess.run(None, feeds)
    for a, b in zip(got, ort_run(model, feeds)):
        assert rel_err(a, b) < 1e-5
    # every step but Tanh's (a NumPy ufunc, no C form) is a C step
    tanh = sum(CHAIN_OPS[i % len(CHAIN_OPS)] == "Tanh" for i in range(nodes))
    assert _context(sess).loop.compiled == len(sess.plan.steps) - tanh
    again = sess.run(None, feeds)                 # a second call: the same bits
    assert all(np.array_equal(a, b) for a, b in zip(got, again))


def test_broadcasts_collapse_to_three_dims_or_refuse():
    """collapse_broadcast's dims and strides walk both operands as NumPy broadcasts them,
    over random shapes of rank <= 5; a pattern that needs more than 3 dims is refused."""
    rng = np.random.default_rng(3)
    refused = 0
    for _ in range(400):
        rank = int(rng.integers(0, 6))
        y = tuple(int(d) for d in rng.integers(1, 5, rank))
        a = tuple(d if rng.random() < 0.6 else 1 for d in y)[int(rng.integers(0, rank + 1)):]
        b = tuple(d if rng.random() < 0.6 else 1 for d in y)[int(rng.integers(0, rank + 1)):]
        y = np.broadcast_shapes(a, b)
        dims = collapse_broadcast(a, b, y)
        if dims is None:
            refused += 1
            continue
        n, sa, sb = dims
        av = np.arange(int(np.prod(a)), dtype=np.float64)
        bv = np.arange(int(np.prod(b)), dtype=np.float64) * 1000
        want = (av.reshape(a) + bv.reshape(b)).reshape(-1)
        i, j, k = np.meshgrid(*[np.arange(d) for d in n], indexing="ij")
        got = av[i * sa[0] + j * sa[1] + k * sa[2]] + bv[i * sb[0] + j * sb[1] + k * sb[2]]
        np.testing.assert_array_equal(got.reshape(-1), want)
    assert refused < 400
    # alternating broadcast dims do not merge: 5 dims, refused (the ufunc runs them)
    assert collapse_broadcast((2, 1, 3, 1, 2), (1, 3, 1, 3, 1), (2, 3, 3, 3, 2)) is None
    assert collapse_broadcast((2, 3, 4), (4,), (2, 3, 4)) == ((1, 6, 4), (0, 4, 1), (0, 0, 1))


def test_an_input_read_in_place_reaches_the_c_steps_and_is_let_go():
    """The first step (Add, a C step) reads the caller's array through its cell: the
    context's own buffer is never read that call; after it the cell is the buffer's
    again (a copied feed is read from there)."""
    model = chain_model(6)
    feeds = chain_feeds()
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="off")
    want = sess.run(None, feeds)[0]
    ctx = _context(sess)
    ctx.inputs[0].fill(np.nan)                    # in place: the buffer is not read
    got = ctx.run([feeds["x"]], ["y"])[0]
    np.testing.assert_array_equal(got, want)
    strided = np.zeros((1, 128), np.float32)[:, ::2]
    strided[...] = feeds["x"]                     # not contiguous: copied into the buffer
    np.testing.assert_array_equal(ctx.run([strided], ["y"])[0], want)
    ctx.inputs[0].fill(0)                         # the cell reads the buffer again
    ctx.loop.run()
    assert not np.array_equal(ctx.outputs["y"], want)


def test_a_python_steps_error_inside_the_loop_names_its_node():
    """Add (C) -> Gather (Python) -> Mul (C): an out-of-range index fails the call with
    the Gather node named, and the next call runs."""
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    nodes = [helper.make_node("Add", ["x", "one"], ["a"], name="add"),
             helper.make_node("Gather", ["a", "idx"], ["g"], name="pick", axis=0),
             helper.make_node("Mul", ["g", "two"], ["y"], name="double")]
    model = make_model(nodes, [("x", np.float32, [4, 3]), ("idx", np.int64, [2])],
                       [("y", np.float32, [2, 3])],
                       {"one": np.ones((4, 3), np.float32), "two": np.full((1, 3), 2, np.float32)})
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="off")
    assert _context(sess).loop.compiled == 2
    with pytest.raises(InputError, match="pick"):
        sess.run(None, {"x": table, "idx": np.array([0, 9], np.int64)})
    (y,) = sess.run(None, {"x": table, "idx": np.array([3, 1], np.int64)})
    np.testing.assert_array_equal(y, (table[[3, 1]] + 1) * 2)


def test_callers_in_threads_each_get_their_own_result():
    model = chain_model(10)
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="off")
    xs = [np.random.default_rng(s).standard_normal((1, 64)).astype(np.float32)
          for s in range(8)]
    assert _callers_in_threads_agree(sess, xs, calls=200)


def test_large_c_steps_let_the_gil_go_and_match_onnxruntime():
    """Steps over >= CSTEP_NOGIL_VALUES values run with the GIL let go (their released
    forms): the same results as onnxruntime, with callers in threads."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             helper.make_node("ReduceMean", ["p"], ["y"], axes=[2, 3], keepdims=0,
                              name="mean")]
    model = make_model(nodes, [("x", np.float32, [1, 64, 32, 32])],
                       [("y", np.float32, [1, 64])],
                       {"bias": rng.standard_normal((64, 1, 1)).astype(np.float32)}, opset=13)
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="off")
    offered = sum(hasattr(s.choice.run, "cstep") for s in sess.plan.steps)
    assert offered >= 4 and _context(sess).loop.compiled == offered
    xs = [rng.standard_normal((1, 64, 32, 32)).astype(np.float32) for _ in range(4)]
    for x in xs:
        assert rel_err(sess.run(None, {"x": x})[0], ort_run(model, {"x": x})[0]) < 1e-5
    assert _callers_in_threads_agree(sess, xs, calls=20)
