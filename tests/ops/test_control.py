"""If, Loop and Scan end to end (ONNX models built here) against onnxruntime: run-time and
shape-decided conditions, nested bodies, captures of weights and of activations, loops
with a data-dependent trip count, scans both ways; the planned kernels against the
reference interpreter; the .enn round trip of bodies; hostile body descriptions."""
from __future__ import annotations

import json
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.helpers import ort_run

import edgenn

F = TensorProto.FLOAT


def _vi(name, t=F, shape=None):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _conv_branch(name, w, act):
    """A branch: Conv(x, w) + activation, its weight an initializer of the branch."""
    return helper.make_graph(
        [helper.make_node("Conv", ["x", f"{name}_w"], [f"{name}_c"], pads=[1, 1, 1, 1]),
         helper.make_node(act, [f"{name}_c"], [f"{name}_y"])],
        name, [], [_vi(f"{name}_y", F, [1, 4, 6, 6])], [numpy_helper.from_array(w, f"{name}_w")])


def if_model():
    """y = If(mean(x) > 0, relu(conv_a(x)), sigmoid(conv_b(x))) * 2; the condition is data."""
    rng = np.random.default_rng(0)
    wa = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    wb = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["b"], then_branch=_conv_branch("ta", wa, "Relu"),
                              else_branch=_conv_branch("tb", wb, "Sigmoid")),
             helper.make_node("Mul", ["b", "two"], ["y"])]
    return _model(nodes, [_vi("x", F, [1, 3, 6, 6])], [_vi("y", F, [1, 4, 6, 6])],
                  [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                   numpy_helper.from_array(np.array(2, np.float32), "two")])


@pytest.mark.parametrize("sign", [1, -1])
def test_runtime_if_matches_onnxruntime(sign):
    m = if_model()
    x = np.abs(np.random.default_rng(1).standard_normal((1, 3, 6, 6))).astype(np.float32) * sign
    sess = edgenn.InferenceSession(m.SerializeToString())
    assert {s.node.op: s.choice.kernel for s in sess.plan.steps}["If"] == "if_planned_branches"
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort_run(m, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)
    ref = edgenn.InferenceSession(m.SerializeToString(), reference=True)
    np.testing.assert_allclose(ref.run(None, {"x": x})[0], ort_run(m, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def test_shape_decided_if_is_inlined():
    """If(Shape(x)[0] == 1, ...): constant once the input shape is bound; the plan holds
    the chosen branch's nodes, not an If, and a new batch size picks the other one."""
    then_b = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "t", [], [_vi("t")])
    else_b = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "e", [], [_vi("e")])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Equal", ["n", "one"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)]
    m = _model(nodes, [_vi("x", F, ["n", 3])], [_vi("y", F, ["n", 3])],
               [numpy_helper.from_array(np.array(0, np.int64), "i0"),
                numpy_helper.from_array(np.array(1, np.int64), "one")])
    sess = edgenn.InferenceSession(m.SerializeToString())
    for n in (1, 4, 1):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ort_run(m, {"x": x})[0])
        assert "If" not in {s.node.op for s in sess.plan.steps}


def while_model():
    """A while loop: x = x * 1.5 + b until sum(x) > limit, at most M times; M and the
    limit are inputs (a data-dependent trip count); b is a captured weight."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_in", "k"], ["xk"]),
         helper.make_node("Add", ["xk", "b"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["tot"], keepdims=0),
         helper.make_node("Less", ["tot", "lim"], ["c_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []),
                 _vi("x_in", F, [4])], [_vi("c_out", TensorProto.BOOL, []), _vi("x_out", F, [4])],
        [numpy_helper.from_array(np.array(1.5, np.float32), "k")])
    nodes = [helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)]
    return _model(nodes, [_vi("M", TensorProto.INT64, []), _vi("c", TensorProto.BOOL, []),
                          _vi("x", F, [4]), _vi("lim", F, [])], [_vi("y", F, [4])],
                  [numpy_helper.from_array(np.array([0.1, -0.2, 0.3, 0.05], np.float32), "b")])


def test_while_loop_with_data_dependent_trip_count():
    m = while_model()
    sess = edgenn.InferenceSession(m.SerializeToString())
    assert {s.node.op: s.choice.kernel for s in sess.plan.steps}["Loop"] == "loop_planned_body"
    for M, lim, go in ((100, 40.0, True), (3, 1e9, True), (0, 1.0, True), (10, 5.0, False)):
        f = {"M": np.array(M, np.int64), "c": np.array(go),
             "x": np.array([1, 2, 0.5, 1], np.float32), "lim": np.array(lim, np.float32)}
        np.testing.assert_allclose(sess.run(None, f)[0], ort_run(m, f)[0], rtol=1e-6)


def scan_loop_model():
    """A cumulative sum by Scan (reverse over axis 1) feeding a counted Loop that stacks a
    scan output per iteration, the Loop's body holding an If on the iteration number."""
    sbody = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "col"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["col_out"])],
        "sbody", [_vi("acc_in", F, [3]), _vi("col", F, [3])],
        [_vi("acc_out", F, [3]), _vi("col_out", F, [3])])
    even = helper.make_graph([helper.make_node("Mul", ["v_in", "w"], ["ev"])], "even", [],
                             [_vi("ev", F, [3])])
    odd = helper.make_graph([helper.make_node("Sub", ["v_in", "w"], ["od"])], "odd", [],
                            [_vi("od", F, [3])])
    lbody = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Equal", ["r", "zero"], ["is_even"]),
         helper.make_node("If", ["is_even"], ["v_out"], then_branch=even, else_branch=odd),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["row"], keepdims=1)],
        "lbody", [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []),
                  _vi("v_in", F, [3])],
        [_vi("c_out", TensorProto.BOOL, []), _vi("v_out", F, [3]), _vi("row", F, [1])],
        [numpy_helper.from_array(np.array(2, np.int64), "two"),
         numpy_helper.from_array(np.array(0, np.int64), "zero")])
    nodes = [helper.make_node("Scan", ["acc0", "xs"], ["acc", "cums"], body=sbody,
                              num_scan_inputs=1, scan_input_axes=[1],
                              scan_input_directions=[1], scan_output_axes=[1]),
             helper.make_node("Loop", ["M", "t", "acc"], ["v", "rows"], body=lbody)]
    return _model(nodes, [_vi("acc0", F, [3]), _vi("xs", F, [3, 5]), _vi("w", F, [3])],
                  [_vi("acc", F, [3]), _vi("cums", F, [3, 5]), _vi("v", F, [3]),
                   _vi("rows", F, [6, 1])],
                  [numpy_helper.from_array(np.array(6, np.int64), "M"),
                   numpy_helper.from_array(np.array(True), "t")])


def test_scan_and_counted_loop_with_nested_if(tmp_path):
    m = scan_loop_model()
    rng = np.random.default_rng(2)
    f = {"acc0": rng.standard_normal(3).astype(np.float32),
         "xs": rng.standard_normal((3, 5)).astype(np.float32),
         "w": rng.standard_normal(3).astype(np.float32) * 0.5 + 1}
    want = ort_run(m, f)
    sess = edgenn.InferenceSession(m.SerializeToString())
    kernels = {s.node.op: s.choice.kernel for s in sess.plan.steps}
    assert kernels["Scan"] == "scan_planned_body" and kernels["Loop"] == "loop_planned_body"
    for got, w in zip(sess.run(None, f), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    enn = tmp_path / "cf.enn"
    edgenn.convert(m.SerializeToString(), str(enn))
    again = edgenn.InferenceSession(str(enn))
    for a, b in zip(again.run(None, f), sess.run(None, f)):
        np.testing.assert_array_equal(a, b)


def _rewrite_graph_json(data: bytes, edit) -> bytes:
    """An .enn with its graph description changed by edit(doc) (checksum recomputed: a
    well-formed file that lies, not a corrupt one)."""
    import zlib
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    doc = json.loads(header["__metadata__"]["graph"])
    edit(doc)
    text = json.dumps(doc)
    header["__metadata__"]["graph"] = text
    header["__metadata__"]["graph_crc32"] = str(zlib.crc32(text.encode()) & 0xFFFFFFFF)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


def _loop_node(doc):
    return next(n for n in doc["nodes"] if n["op"] == "Loop")


@pytest.mark.parametrize("edit", [
    lambda d: _loop_node(d)["attrs"].pop("body"),                                # no body
    lambda d: _loop_node(d)["attrs"].update(captures=["nowhere"] * 9),           # too many
    lambda d: _loop_node(d)["attrs"]["body"]["__graph__"]["nodes"][0].update(
        inputs=["undefined_tensor"]),                                            # dangling
    lambda d: _loop_node(d)["attrs"]["body"]["__graph__"].update(nodes="x"),      # wrong type
    lambda d: _loop_node(d)["attrs"].update(body={"__graph__": {"nodes": []}}),  # truncated
], ids=["no-body", "captures", "dangling-input", "nodes-not-a-list", "no-inputs"])
def test_hostile_bodies_are_named_errors(tmp_path, edit):
    m = while_model()
    enn = tmp_path / "w.enn"
    edgenn.convert(m.SerializeToString(), str(enn))
    bad = _rewrite_graph_json(enn.read_bytes(), edit)
    with pytest.raises(edgenn.EdgennError):
        sess = edgenn.InferenceSession(bad)
        sess.run(None, {"M": np.array(3, np.int64), "c": np.array(True),
                        "x": np.ones(4, np.float32), "lim": np.array(9.0, np.float32)})


def test_runaway_loop_is_bounded():
    """A loop with neither M nor a condition that stops never hangs a caller: the
    reference interpreter stops at MAX_ITERATIONS (set small here)."""
    from edgenn.kernels.reference import control
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Add", ["x_in", "one"], ["x_out"])], "b",
                             [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []),
                              _vi("x_in", F, [1])],
                             [_vi("c_out", TensorProto.BOOL, []), _vi("x_out", F, [1])],
                             [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    m = _model([helper.make_node("Loop", ["", "c", "x"], ["y"], body=body)],
               [_vi("c", TensorProto.BOOL, []), _vi("x", F, [1])], [_vi("y", F, [1])])
    old = control.MAX_ITERATIONS
    control.MAX_ITERATIONS = 1000
    try:
        y = edgenn.InferenceSession(m.SerializeToString(), reference=True).run(
            None, {"c": np.array(True), "x": np.zeros(1, np.float32)})[0]
    finally:
        control.MAX_ITERATIONS = old
    assert y[0] == 1000
