"""Reduce family: shape rules, reference kernels against onnxruntime, old-opset converters
(axes attribute -> input, Softmax's 2-D coercion before opset 13). ONNX node cases:
tests/ops/test_node_cases.py."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from support.opmodels import compare_ort, make_model, node

from edgenn.converters.onnx.importer import import_onnx
from edgenn.errors import DataDependentShapeError, GraphError
from edgenn.graph.infer import execute, infer
from edgenn.graph.ir import Node
from edgenn.graph.shapes.reduce import REDUCE_OPS
from edgenn.registry import SHAPE_RULES, TensorInfo

rng = np.random.default_rng(1)
X = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
XP = (np.abs(X) + 0.1).astype(np.float32)  # for ReduceLogSum


# -- Reduce* -------------------------------------------------------------------------------

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([1, -1], 0), ([0, 2, 3], 1), (None, 0),
                                           (None, 1)])
def test_reduce_opset18(op, axes, keepdims):
    x = XP if op == "ReduceLogSum" else X
    consts = {} if axes is None else {"axes": np.array(axes, np.int64)}
    inputs = ["x"] if axes is None else ["x", "axes"]
    opset = 13 if op == "ReduceSum" else 18
    compare_ort(make_model([node(op, inputs, keepdims=keepdims)], {"x": x}, consts,
                           opset=opset), {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_attribute_form(op):
    """ReduceSum before 13, the others before 18: axes attribute -> constant input."""
    x = XP if op == "ReduceLogSum" else X
    model = make_model([node(op, ["x"], axes=[2, -1], keepdims=0)], {"x": x}, opset=11)
    compare_ort(model, {"x": x}, rtol=1e-5, atol=1e-5)
    (n,) = import_onnx(model).nodes
    assert len(n.inputs) == 2 and "axes" not in n.attrs
    assert n.attrs["keepdims"] == 0 and n.attrs["noop_with_empty_axes"] == 0


def test_reduce_noop_with_empty_axes():
    model = make_model([node("ReduceMean", ["x", "axes"], noop_with_empty_axes=1)], {"x": X},
                       {"axes": np.zeros((0,), np.int64)}, opset=18)
    np.testing.assert_array_equal(compare_ort(model, {"x": X})[0], X)
    model = make_model([node("ReduceMax", ["x", "axes"], noop_with_empty_axes=0, keepdims=0)],
                       {"x": X}, {"axes": np.zeros((0,), np.int64)}, opset=18)
    compare_ort(model, {"x": X})


def test_reduce_integer_and_stability():
    xi = rng.integers(-50, 50, (3, 4, 5)).astype(np.int32)
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
               "ReduceL1"):
        opset = 13 if op == "ReduceSum" else 18
        xin = np.clip(xi, -3, 3) if op == "ReduceProd" else xi
        compare_ort(make_model([node(op, ["x", "a"], keepdims=0)], {"x": xin},
                               {"a": np.array([1], np.int64)}, opset=opset), {"x": xin})
    big = (X * 1000).astype(np.float32)  # exp(1000) overflows float32
    got = compare_ort(make_model([node("ReduceLogSumExp", ["x", "a"])], {"x": big},
                                 {"a": np.array([-1], np.int64)}, opset=18), {"x": big},
                      rtol=1e-5, atol=1e-3)
    assert np.isfinite(got[0]).all()


# -- ArgMax / ArgMin -----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (-1, 0, 0), (2, 1, 1), (1, 0, 1)])
def test_arg(op, axis, keepdims, last):
    x = rng.integers(0, 3, (2, 3, 4, 5)).astype(np.float32)  # many ties
    compare_ort(make_model([node(op, ["x"], axis=axis, keepdims=keepdims,
                                 select_last_index=last)], {"x": x}, opset=13), {"x": x})


# -- Softmax family ------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(13, None), (13, 1), (13, -2), (11, None), (11, 2),
                                        (11, 0), (11, -1), (7, None)])
def test_softmax_family(op, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    x = (X * 30).astype(np.float32)
    compare_ort(make_model([node(op, ["x"], **attrs)], {"x": x}, opset=opset), {"x": x},
                rtol=1e-5, atol=1e-6)


def test_softmax_old_opset_is_coerced_to_2d():
    model = make_model([node("Softmax", ["x"])], {"x": X}, opset=11)
    (n,) = import_onnx(model).nodes
    assert n.attrs["coerce_2d"] == 1 and n.attrs["axis"] == 1
    got = execute(import_onnx(model), {"x": X})["y"]
    # normalized over everything after axis 1, not over axis 1 alone
    np.testing.assert_allclose(got.reshape(2, -1).sum(axis=1), 1, rtol=1e-5)
    (n,) = import_onnx(make_model([node("Softmax", ["x"])], {"x": X}, opset=13)).nodes
    assert n.attrs["axis"] == -1 and not n.attrs.get("coerce_2d", 0)


def test_softmax_large_values_and_float16():
    x = np.array([[1000, 1001, 1002, -1e4], [-1000, -1001, 0, 3.4e38]], np.float32)
    for op in ("Softmax", "LogSoftmax"):
        got = compare_ort(make_model([node(op, ["x"])], {"x": x}, opset=13), {"x": x})
        assert not np.isnan(got[0]).any()
    xh = X.astype(np.float16)
    compare_ort(make_model([node("Softmax", ["x"])], {"x": xh}, opset=13), {"x": xh},
                rtol=2e-3, atol=1e-3)


# -- CumSum --------------------------------------------------------------------------------

@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [np.int32(1), np.int64(-1)])
def test_cumsum(exclusive, reverse, axis):
    compare_ort(make_model([node("CumSum", ["x", "a"], exclusive=exclusive, reverse=reverse)],
                           {"x": X}, {"a": np.asarray(axis)}, opset=14), {"x": X},
                rtol=1e-5, atol=1e-5)
    xi = rng.integers(-9, 9, (3, 4)).astype(np.int64)
    compare_ort(make_model([node("CumSum", ["x", "a"], exclusive=exclusive, reverse=reverse)],
                           {"x": xi}, {"a": np.asarray(axis)}, opset=14), {"x": xi})


# -- shape rules ---------------------------------------------------------------------------

def _rule(op, x_shape, attrs=None, axes=None, axes_shape=None, name="r1", x_dtype="float32"):
    ins = [TensorInfo(x_dtype, tuple(x_shape))]
    if axes is not None:
        ins.append(TensorInfo("int64", (len(axes),), np.array(axes, np.int64)))
    elif axes_shape is not None:
        ins.append(TensorInfo("int64", tuple(axes_shape)))
    n = Node(op, [f"i{k}" for k in range(len(ins))], ["o"], attrs or {}, name)
    return SHAPE_RULES[op](n, ins)[0]


def test_reduce_shapes():
    assert _rule("ReduceSum", (2, 3, 4), {"keepdims": 1}, [1]).shape == (2, 1, 4)
    assert _rule("ReduceSum", (2, 3, 4), {"keepdims": 0}, [-1, 0]).shape == (3,)
    assert _rule("ReduceMean", (2, 3, 4), {"keepdims": 0}).shape == ()
    assert _rule("ReduceMean", (2, 3, 4), {"keepdims": 1}).shape == (1, 1, 1)
    assert _rule("ReduceMax", (2, 3), {"noop_with_empty_axes": 1}, []).shape == (2, 3)
    assert _rule("ReduceMax", (2, 3), {"noop_with_empty_axes": 1},
                 axes_shape=(0,)).shape == (2, 3)
    out = _rule("ArgMax", (2, 3, 4), {"axis": -1, "keepdims": 0})
    assert (out.dtype, out.shape) == ("int64", (2, 3))
    assert _rule("Softmax", (2, 3), {"axis": 2, "coerce_2d": 1}).shape == (2, 3)


def test_reduce_shape_errors_name_the_node():
    with pytest.raises(DataDependentShapeError, match="'axes' of ReduceSum node 'rs'"):
        _rule("ReduceSum", (2, 3), axes_shape=(1,), name="rs")
    with pytest.raises(GraphError, match="out of range"):
        _rule("ReduceMean", (2, 3), axes=[2])
    with pytest.raises(GraphError, match="repeated"):
        _rule("ReduceMean", (2, 3), axes=[1, -1])
    with pytest.raises(GraphError, match="ArgMin node 'am'"):
        _rule("ArgMin", (2, 3), {"axis": 3}, name="am")
    with pytest.raises(GraphError, match="empty axis"):
        _rule("ArgMax", (2, 0), {"axis": 1})
    with pytest.raises(GraphError, match="out of range"):
        _rule("Softmax", (2, 3), {"axis": 2})


def test_shape_rules_match_kernels():
    x = X
    nodes = [node("ReduceSum", ["x", "a"], ["s"], keepdims=0),
             node("ArgMin", ["x"], ["am"], axis=2),
             node("Softmax", ["x"], ["sm"], axis=1),
             node("CumSum", ["x", "c"], ["cs"], exclusive=1),
             node("ReduceLogSumExp", ["x"], ["lse"], keepdims=0)]
    for opset in (13, 11):
        consts = {"c": np.int64(3)}
        if opset == 13:
            consts["a"] = np.array([0, 3], np.int64)
        else:
            nodes[0] = node("ReduceSum", ["x"], ["s"], keepdims=0, axes=[0, 3])
        model = make_model(nodes, {"x": x}, consts, opset=opset,
                           outputs=["s", "am", "sm", "cs", "lse"])
        compare_ort(model, {"x": x}, rtol=1e-5, atol=1e-5)
        g = import_onnx(model)
        infos = infer(g, {"x": x.shape})
        for name, v in execute(g, {"x": x}).items():
            assert (infos[name].dtype, infos[name].shape) == (v.dtype.name, v.shape), name


def test_onnxruntime_available():
    assert "CPUExecutionProvider" in ort.get_available_providers()
