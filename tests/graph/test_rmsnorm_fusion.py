"""fuse_rmsnorm (graph/passes/layernorm.py): each decomposed RMS norm spelling becomes one
RMSNormalization, structurally (op counts) and numerically (the graph before, the graph
after, the planned session with the C row kernel and onnxruntime on the original model);
refused where an intermediate has another reader or the reduction is not over trailing
axes; a decomposed LayerNorm still becomes LayerNormalization."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from support.helpers import make_model, ort_run

import edgenn
from edgenn.converters.onnx.importer import import_onnx
from edgenn.graph import passes as P
from edgenn.graph.infer import execute

RNG = np.random.default_rng(0)
H = 64


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _nodes(square="pow", norm="div", gamma="right", eps_first=False, axes=(-1,)):
    """x -> y through the spelled-out RMS norm; square: pow | mul; norm: div (x / s) |
    reciprocal (x * Reciprocal(s)) | one_div (Div(1, s) * x); gamma: right | left | none."""
    n = helper.make_node
    nodes = [n("Pow", ["x", "two"], ["p"]) if square == "pow" else n("Mul", ["x", "x"], ["p"]),
             n("ReduceMean", ["p", "axes"], ["v"], keepdims=1),
             n("Add", ["eps", "v"] if eps_first else ["v", "eps"], ["e"]),
             n("Sqrt", ["e"], ["s"])]
    if norm == "div":
        nodes.append(n("Div", ["x", "s"], ["nx"]))
    elif norm == "reciprocal":
        nodes += [n("Reciprocal", ["s"], ["r"]), n("Mul", ["x", "r"], ["nx"])]
    else:
        nodes += [n("Div", ["one", "s"], ["r"]), n("Mul", ["r", "x"], ["nx"])]
    if gamma == "none":
        nodes.append(n("Identity", ["nx"], ["y"]))
    else:
        nodes.append(n("Mul", ["nx", "gamma"] if gamma == "right" else ["gamma", "nx"], ["y"]))
    inits = {"two": np.float32(2.0), "eps": np.float32(1e-6), "one": np.float32(1.0),
             "gamma": _rand(H), "axes": np.array(axes, np.int64)}
    used = {i for node in nodes for i in node.input}
    return nodes, {k: np.asarray(v) for k, v in inits.items() if k in used}


def _model(nodes, inits, x_shape=(2, 5, H), outputs=(("y", None),), opset=18):
    """outputs: (name, shape); None: x's shape."""
    return make_model(nodes, [("x", np.float32, list(x_shape))],
                      [(name, np.float32, list(x_shape) if shape is None else shape)
                       for name, shape in outputs], inits, opset)


def _check(m, feeds):
    """-> the optimized graph, after comparing before / after / session / onnxruntime."""
    before, after = import_onnx(m), import_onnx(m)
    P.optimize(after, "all")
    after.validate()
    want = ort_run(m, feeds)
    names = [o.name for o in m.graph.output]
    for got in (execute(before, feeds), execute(after, feeds)):
        for name, w in zip(names, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    session = edgenn.InferenceSession(m.SerializeToString()).run(None, feeds)
    for g_, w in zip(session, want):
        np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-6)
    return after


def _ops(g):
    return dict(g.op_counts())


@pytest.mark.parametrize("square,norm,gamma,eps_first", [
    ("pow", "div", "right", False),          # the decomposed SimplifiedLayerNormalization
    ("pow", "reciprocal", "left", False),    # torch.onnx's Llama: weight * (x * rsqrt(.))
    ("mul", "div", "left", True),
    ("mul", "reciprocal", "right", True),
    ("pow", "one_div", "left", False),       # rsqrt written as 1 / sqrt
    ("mul", "div", "none", False),           # no gamma: scale of ones
])
def test_fuse_rmsnorm(square, norm, gamma, eps_first):
    nodes, inits = _nodes(square, norm, gamma, eps_first)
    g = _check(_model(nodes, inits), {"x": _rand(2, 5, H) * 3})
    assert _ops(g) == {"RMSNormalization": 1}, _ops(g)
    node = next(n for n in g.nodes if n.op == "RMSNormalization")
    assert node.attrs["axis"] == -1 and abs(node.attrs["epsilon"] - 1e-6) < 1e-12
    assert node.outputs == ["y"] and g.consts[node.inputs[1]].shape == (H,)
    if gamma == "none":
        assert np.all(g.consts[node.inputs[1]] == 1)
    assert g.meta["fusions"]["rmsnorm_fused"] == 1


def test_fuse_rmsnorm_old_reduce_mean_and_symbolic_dims():
    """opset 13: ReduceMean's axes an attribute; batch and length symbolic."""
    nodes, inits = _nodes("pow", "reciprocal", "left")
    del inits["axes"]
    rm = nodes[1]
    del rm.input[1:]
    rm.attribute.append(helper.make_attribute("axes", [2]))
    m = _model(nodes, inits, x_shape=("B", "S", H), opset=13)
    g = _check(m, {"x": _rand(3, 7, H)})
    assert _ops(g) == {"RMSNormalization": 1}, _ops(g)


def test_fuse_rmsnorm_two_trailing_axes():
    nodes, inits = _nodes("mul", "div", "right", axes=(-2, -1))
    inits["gamma"] = _rand(5, H)
    g = _check(_model(nodes, inits), {"x": _rand(2, 5, H)})
    assert _ops(g) == {"RMSNormalization": 1}, _ops(g)
    assert next(n for n in g.nodes if n.op == "RMSNormalization").attrs["axis"] == -2


@pytest.mark.parametrize("shared", ["p", "v", "e", "s", "r"])
def test_rmsnorm_not_fused_when_an_intermediate_has_another_reader(shared):
    nodes, inits = _nodes("pow", "reciprocal", "right")
    nodes.append(helper.make_node("Neg", [shared], ["z"]))
    m = _model(nodes, inits, outputs=(("y", None), ("z", None if shared == "p" else [2, 5, 1])))
    g = _check(m, {"x": _rand(2, 5, H)})
    assert "RMSNormalization" not in _ops(g), _ops(g)


def test_rmsnorm_not_fused_over_a_leading_axis():
    nodes, inits = _nodes("pow", "div", "right", axes=(1,))
    inits["gamma"] = _rand(1, 5, 1)
    g = _check(_model(nodes, inits), {"x": _rand(2, 5, H)})
    assert "RMSNormalization" not in _ops(g), _ops(g)


def test_gamma_of_another_reader_stays_a_mul():
    """The normalized x read elsewhere too: the norm fuses (scale of ones), gamma's Mul
    stays, the other reader sees the normalized x."""
    nodes, inits = _nodes("pow", "div", "right")
    nodes.append(helper.make_node("Neg", ["nx"], ["z"]))
    g = _check(_model(nodes, inits, outputs=(("y", None), ("z", None))), {"x": _rand(2, 5, H)})
    assert _ops(g).get("RMSNormalization") == 1 and _ops(g).get("Mul") == 1, _ops(g)


def test_decomposed_layernorm_is_still_layernormalization():
    """A LayerNorm's d, d^2, mean, + eps, sqrt, d / s is an RMS norm of d: fuse_layernorm,
    earlier in the pipeline, takes the whole chain."""
    n = helper.make_node
    nodes = [n("ReduceMean", ["x", "axes"], ["m"]), n("Sub", ["x", "m"], ["d"]),
             n("Pow", ["d", "two"], ["p"]), n("ReduceMean", ["p", "axes"], ["v"]),
             n("Add", ["v", "eps"], ["e"]), n("Sqrt", ["e"], ["s"]),
             n("Div", ["d", "s"], ["nx"]), n("Mul", ["nx", "gamma"], ["y"])]
    inits = {"two": np.asarray(np.float32(2)), "eps": np.asarray(np.float32(1e-5)),
             "gamma": _rand(H), "axes": np.array([-1], np.int64)}
    g = _check(_model(nodes, inits), {"x": _rand(2, 5, H) + 1})
    assert _ops(g) == {"LayerNormalization": 1}, _ops(g)
