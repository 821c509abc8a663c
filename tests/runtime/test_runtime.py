"""The planned runtime: input validation, memory planning, views, dynamic shapes."""
import numpy as np
import pytest
from support.helpers import helper, make_model, ort_run, rel_err

import edgenn
from edgenn.errors import InputError, UnsupportedOpError
from edgenn.runtime import memory


def chain_model(n=6, c=8):
    """x -> Conv -> Relu -> (Conv -> Relu)... -> Reshape -> y, plus a second output."""
    rng = np.random.default_rng(1)
    nodes, inits, prev = [], {}, "x"
    for i in range(n):
        inits[f"w{i}"] = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
        inits[f"b{i}"] = rng.standard_normal(c).astype(np.float32)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                      pads=[1, 1, 1, 1], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    inits["shape"] = np.array([0, -1], np.int64)
    nodes.append(helper.make_node("Reshape", [prev, "shape"], ["y"], name="flat"))
    nodes.append(helper.make_node("Sigmoid", ["r0"], ["side"], name="side"))
    return make_model(nodes, [("x", np.float32, ["N", c, 10, 10])],
                      [("y", np.float32, ["N", c * 100]), ("side", np.float32, ["N", c, 10, 10])], inits)


@pytest.fixture(scope="module")
def chain():
    return chain_model()


def test_matches_onnxruntime_and_reference(chain):
    x = np.random.default_rng(0).standard_normal((2, 8, 10, 10)).astype(np.float32)
    want = ort_run(chain, {"x": x})
    fast = edgenn.InferenceSession(chain.SerializeToString()).run(None, {"x": x})
    ref = edgenn.InferenceSession(chain.SerializeToString(), reference=True).run(None, {"x": x})
    for a, b, c in zip(fast, ref, want):
        assert a.shape == c.shape
        assert rel_err(a, c) <= 1e-5 and rel_err(b, c) <= 1e-5


def test_memory_is_shared_and_views_cost_no_step(chain):
    sess = edgenn.InferenceSession(chain.SerializeToString(), input_shapes={"x": (1, 8, 10, 10)})
    plan = sess.plan
    assert "Reshape" not in {s.node.op for s in plan.steps}
    per_tensor = 8 * 10 * 10 * 4
    # 13 tensors are written; liveness lets them share a handful of buffers (the kernels'
    # transient scratch is planned and counted with them; persistent scratch, such as a
    # zero-bordered input copy, lives per execution context: persistent_bytes)
    assert plan.planned_bytes <= 6 * per_tensor + plan.scratch_bytes
    transient = [h.nbytes for h in plan.scratch if not h.persistent]
    assert plan.planned_bytes >= max(transient + [per_tensor])


def test_outputs_are_not_aliased_between_runs(chain):
    sess = edgenn.InferenceSession(chain.SerializeToString())
    x = np.ones((1, 8, 10, 10), np.float32)
    y1, _ = sess.run(None, {"x": x})
    keep = y1.copy()
    sess.run(None, {"x": -x})
    np.testing.assert_array_equal(y1, keep)


def _view_and_identity_model():
    """x is read through a Reshape view (a + 1) and is also the graph output `same`."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["xv"]),
             helper.make_node("Add", ["xv", "one"], ["y"]),
             helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Mul", ["z", "two"], ["w"])]
    return make_model(nodes, [("x", np.float32, [2, 3, 4]), ("z", np.float32, [5])],
                      [("y", np.float32, [6, 4]), ("same", np.float32, [2, 3, 4]),
                       ("w", np.float32, [5])],
                      {"shape": np.array([6, 4], np.int64), "one": np.float32(1),
                       "two": np.float32(2)})


def test_inputs_are_read_in_place_never_written_nor_kept(chain):
    """A C-contiguous, writable feed of the planned dtype and shape is read in place by the
    steps that read it; the caller's array is never written and no reference to it is
    kept after the call. Any other feed is copied."""
    import gc
    import weakref
    sess = edgenn.InferenceSession(chain.SerializeToString(), input_shapes={"x": (2, 8, 10, 10)})
    want = ort_run(chain, {"x": np.random.default_rng(5).standard_normal(
        (2, 8, 10, 10)).astype(np.float32)})
    ctx = sess.plan.contexts.acquire()
    sess.plan.contexts.release(ctx)
    x = np.random.default_rng(5).standard_normal((2, 8, 10, 10)).astype(np.float32)
    before = x.copy()
    assert len(ctx.loop.bind([x])) == 1                        # read in place by conv0
    (slots,) = ctx.readers
    assert [np.shares_memory(ins[j], x) for ins, j, _ in slots] == [True]
    ctx.loop.unbind([*ctx.loop.bind([x])])
    assert not any(np.shares_memory(ins[j], x) for ins, j, _ in slots)
    got = sess.run(None, {"x": x})
    np.testing.assert_array_equal(x, before)                   # never written
    for a, b in zip(got, want):
        assert rel_err(a, b) < 1e-4
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None                                       # not kept
    # copied: not contiguous, read-only; the same results
    xs = np.asfortranarray(before)
    ro = before.copy()
    ro.flags.writeable = False
    for feed in (xs, ro):
        assert ctx.loop.bind([feed]) == []
        for a, b in zip(sess.run(None, {"x": feed}), want):
            assert rel_err(a, b) < 1e-4


def test_input_read_through_a_view_or_returned_as_an_output():
    m = _view_and_identity_model()
    sess = edgenn.InferenceSession(m.SerializeToString())
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    z = np.arange(5, dtype=np.float32)
    y, same, w = sess.run(None, {"x": x, "z": z})
    np.testing.assert_array_equal(y, x.reshape(6, 4) + 1)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(w, z * 2)
    assert not np.shares_memory(same, x)
    x += 100                                  # the returned output is the caller's own
    np.testing.assert_array_equal(same, x - 100)


def test_dynamic_batch_plans_per_shape(chain):
    sess = edgenn.InferenceSession(chain.SerializeToString())
    for n in (1, 3, 1):
        x = np.random.default_rng(n).standard_normal((n, 8, 10, 10)).astype(np.float32)
        y, side = sess.run(["y", "side"], {"x": x})
        assert y.shape == (n, 800) and rel_err(y, ort_run(chain, {"x": x})[0]) <= 1e-5
    assert len(sess._plans) == 2


def test_input_errors_name_what_was_expected(chain):
    sess = edgenn.InferenceSession(chain.SerializeToString())
    x = np.zeros((1, 8, 10, 10), np.float32)
    with pytest.raises(InputError, match="unknown input.*'z'.*expects: x float32"):
        sess.run(None, {"z": x})
    with pytest.raises(InputError, match="missing input"):
        sess.run(None, {})
    with pytest.raises(InputError, match="'x' must be float32, got float64"):
        sess.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(InputError, match=r"shape \(1, 7, 10, 10\).*expects"):
        sess.run(None, {"x": np.zeros((1, 7, 10, 10), np.float32)})
    with pytest.raises(InputError, match="unknown output"):
        sess.run(["nope"], {"x": x})


def test_metadata_like_onnxruntime(chain):
    sess = edgenn.InferenceSession(chain.SerializeToString())
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.shape, inp.type) == ("x", ["N", 8, 10, 10], "tensor(float)")
    assert [o.name for o in sess.get_outputs()] == ["y", "side"]


def test_unsupported_ops_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("DFT", ["a"], ["b"], name="dft1"),
             helper.make_node("Det", ["x"], ["c"], name="det1"),
             helper.make_node("DFT", ["b"], ["d"], name="dft2")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 2])],
        [helper.make_tensor_value_info("d", 1, None), helper.make_tensor_value_info("c", 1, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError) as exc:
        edgenn.InferenceSession(model.SerializeToString())
    msg = str(exc.value)
    assert "DFT: dft1, dft2" in msg and "Det: det1" in msg
    assert exc.value.unsupported == {"DFT": ["dft1", "dft2"], "Det": ["det1"]}


def test_buffer_assignment_never_overlaps_live_tensors():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lts = []
        for i in range(rng.integers(1, 15)):
            first = int(rng.integers(-1, 10))
            lts.append(memory.Lifetime(f"t{i}", int(rng.integers(0, 1000)), first,
                                       first + int(rng.integers(0, 6))))
        owner, caps = memory.assign(lts)
        for a in lts:
            assert caps[owner[a.name]] >= a.nbytes
            for b in lts:
                if a is not b and owner[a.name] == owner[b.name]:
                    # same buffer: one must be dead (last read) before the other is written
                    assert a.last < b.first or b.last < a.first, (a, b)


@pytest.mark.parametrize("tune", ["off", "cached"])
@pytest.mark.parametrize("alpha", [2.0, -0.5, 0.01])
def test_fused_leaky_relu_any_alpha_matches_onnxruntime(tune, alpha):
    """Conv + LeakyRelu fuse whatever alpha; every kernel bound, timed or not (tune="off"
    binds the first capable one unchecked), computes y < 0 ? alpha y : y."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["y"], alpha=alpha)]
    model = make_model(nodes, [("x", np.float32, [1, 4, 12, 12])],
                       [("y", np.float32, [1, 8, 12, 12])], {"w": w})
    x = rng.standard_normal((1, 4, 12, 12)).astype(np.float32)
    sess = edgenn.InferenceSession(model.SerializeToString(), tune=tune)
    got = sess.run(None, {"x": x})[0]
    assert [n.op for n in sess.graph.nodes] == ["Conv"]          # fused
    assert rel_err(got, ort_run(model, {"x": x})[0]) < 1e-5
