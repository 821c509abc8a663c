"""Elementwise family: shape rules, reference kernels against onnxruntime, old-opset
converters (Clip, Dropout), refused casts. ONNX node cases: tests/ops/test_node_cases.py.

The model helpers (`make_model`, `compare_ort`, `node`: tests/support/opmodels.py) are
shared with tests/ops/test_ops_reduce.py.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.helpers import ort_run
from support.opmodels import compare_ort, make_model, node

from edgenn.converters.onnx.importer import import_onnx
from edgenn.errors import GraphError, UnsupportedOpError
from edgenn.graph.infer import execute, infer
from edgenn.graph.ir import Node
from edgenn.graph.shapes import elementwise as ew_shapes
from edgenn.oplist import load_all
from edgenn.registry import SHAPE_RULES, TensorInfo

load_all()
OPS = ew_shapes.OPS

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
# values that overflow naive formulas: exp(100) in float32 is inf
WIDE = np.concatenate([np.linspace(-100, 100, 41), [-1e-3, 0.0, 1e-3, 88.7, -88.7]]
                      ).astype(np.float32).reshape(1, -1)


# -- binary / variadic vs onnxruntime ------------------------------------------------------

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("other_shape", [(8,), (3, 1, 1), (1, 3, 8, 1), (), (2, 3, 8, 8)])
def test_binary_broadcast(op, other_shape):
    b = np.asarray(rng.standard_normal(other_shape) + 3, dtype=np.float32)
    compare_ort(make_model([node(op, ["a", "b"])], {"a": X, "b": b}), {"a": X, "b": b})


def test_variadic_three_inputs_and_one():
    a, b, c = X, X[0, :1], X[:1, :1, :1, :4].copy()
    c = np.broadcast_to(c, (1, 1, 1, 4))[..., :1].copy()
    for op in ("Max", "Min", "Sum", "Mean"):
        compare_ort(make_model([node(op, ["a", "b", "c"])], {"a": a, "b": b, "c": c}),
                    {"a": a, "b": b, "c": c})
        compare_ort(make_model([node(op, ["a"])], {"a": a}), {"a": a})


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
def test_integer_div_truncates_toward_zero(dtype):
    signed = np.dtype(dtype).kind == "i"
    a = np.array([-7, 7, -7, 7, 9, 0, -1, 100], dtype) if signed else \
        np.array([7, 9, 0, 200, 255, 1, 3, 100], dtype)
    b = np.array([2, -2, -2, 2, 4, 3, 5, -7], dtype) if signed else \
        np.array([2, 4, 3, 7, 16, 1, 3, 9], dtype)
    got = compare_ort(make_model([node("Div", ["a", "b"])], {"a": a, "b": b}, opset=14),
                      {"a": a, "b": b})
    if signed:
        assert got[0].tolist()[:4] == [-3, -3, 3, 3]


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_mod(fmod, dtype):
    a = np.array([-7, 7, -7, 7, 9, 0, -4, 5], dtype)
    b = np.array([2, -2, -2, 3, 4, 3, 3, -8], dtype)
    if np.dtype(dtype).kind == "f" and fmod == 0:
        # onnxruntime rejects float Mod with fmod=0 before opset 28: check the ONNX
        # semantics (result takes the divisor's sign, like numpy's mod) directly
        graph = import_onnx(make_model([node("Mod", ["a", "b"], fmod=0)], {"a": a, "b": b}))
        got = execute(graph, {"a": a, "b": b})
        np.testing.assert_array_equal(next(iter(got.values())), np.mod(a, b))
        return
    compare_ort(make_model([node("Mod", ["a", "b"], fmod=fmod)], {"a": a, "b": b}),
                {"a": a, "b": b})


def test_pow_mixed_types():
    x = np.array([[1.5, 2, 3, -2]], np.float32)
    for e in (np.array([2, 3, 0, 3], np.int64), np.array([0.5, 2, -1, 2], np.float32)):
        compare_ort(make_model([node("Pow", ["x", "e"])], {"x": x, "e": e}, opset=15),
                    {"x": x, "e": e})
    xi = np.array([1, 2, 3, -2], np.int32)
    e = np.array([4., 5., 2., 3.], np.float32)
    compare_ort(make_model([node("Pow", ["x", "e"])], {"x": xi, "e": e}, opset=15),
                {"x": xi, "e": e})


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare(op):
    a = rng.integers(-3, 3, (2, 3, 4)).astype(np.int64)
    b = rng.integers(-3, 3, (3, 1)).astype(np.int64)
    compare_ort(make_model([node(op, ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b})
    af, bf = a.astype(np.float32), b.astype(np.float32)
    compare_ort(make_model([node(op, ["a", "b"])], {"a": af, "b": bf}), {"a": af, "b": bf})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    a = rng.random((2, 3, 4)) > 0.5
    b = rng.random((4,)) > 0.5
    compare_ort(make_model([node(op, ["a", "b"]), node("Not", ["y"], ["z"])],
                           {"a": a, "b": b}, outputs=["y", "z"]), {"a": a, "b": b})


def test_where_and_prelu():
    c = rng.random((2, 1, 8, 8)) > 0.5
    y = rng.standard_normal((3, 1, 1)).astype(np.float32)
    compare_ort(make_model([node("Where", ["c", "x", "y"], ["w"])], {"c": c, "x": X, "y": y}),
                {"c": c, "x": X, "y": y})
    slope = np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1)
    compare_ort(make_model([node("PRelu", ["x", "s"])], {"x": X}, {"s": slope}), {"x": X})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bitshift(direction, dtype):
    x = np.array([16, 4, 1, 255, 0, 7], dtype)
    s = np.array([1, 2, 3, 0, 5, 1], dtype)
    compare_ort(make_model([node("BitShift", ["x", "s"], direction=direction)],
                           {"x": x, "s": s}), {"x": x, "s": s})


# -- unary vs onnxruntime ------------------------------------------------------------------

UNARY_CASES = [
    ("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
    ("Celu", {"alpha": 2.0}), ("Sigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("Tanh", {}), ("Softplus", {}), ("Softsign", {}), ("Exp", {}),
    ("Neg", {}), ("Abs", {}), ("Ceil", {}), ("Floor", {}), ("Round", {}), ("Sign", {}),
    ("Sin", {}), ("Cos", {}), ("Atan", {}), ("Sinh", {}), ("Cosh", {}), ("Asinh", {}),
    ("Erf", {}), ("Identity", {}), ("Mish", {}), ("ThresholdedRelu", {"alpha": 0.5}),
    ("Shrink", {"lambd": 0.7, "bias": 0.2}), ("IsNaN", {}),
    ("IsInf", {"detect_negative": 0}),
]


@pytest.mark.parametrize("op,attrs", UNARY_CASES, ids=[c[0] for c in UNARY_CASES])
def test_unary(op, attrs):
    opset = 18 if op == "Mish" else 17
    compare_ort(make_model([node(op, ["x"], **attrs)], {"x": X}, opset=opset), {"x": X},
                rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("op", ["Sigmoid", "Softplus", "Mish", "Elu", "Selu", "Celu",
                                "Tanh", "HardSwish", "Softsign"])
def test_unary_numerically_stable(op):
    """Large |x|: no overflow to nan, and no float64 leaking out."""
    opset = 18 if op == "Mish" else 17
    got = compare_ort(make_model([node(op, ["x"])], {"x": WIDE}, opset=opset), {"x": WIDE},
                      rtol=2e-5, atol=2e-6)
    assert np.isfinite(got[0]).all()


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal", "Tan", "Asin", "Acos",
                                "Acosh", "Atanh"])
def test_unary_domain(op):
    x = np.array([[-2, -1, -0.5, 0, 0.25, 0.5, 0.99, 1, 1.5, 3, 100]], np.float32)
    compare_ort(make_model([node(op, ["x"])], {"x": x}), {"x": x}, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    compare_ort(make_model([node("Gelu", ["x"], approximate=approximate)], {"x": WIDE},
                           opset=20), {"x": WIDE}, rtol=2e-5, atol=2e-6)


def test_relu_int_and_float16():
    xi = np.array([-3, 0, 5], np.int32)
    compare_ort(make_model([node("Relu", ["x"])], {"x": xi}, opset=14), {"x": xi})
    xh = X.astype(np.float16)
    for op in ("Relu", "Sigmoid", "Tanh", "Exp"):
        compare_ort(make_model([node(op, ["x"])], {"x": xh}), {"x": xh}, rtol=2e-3, atol=2e-3)


# -- Clip, Cast, Dropout: canonical forms and old opsets -----------------------------------

def test_clip_forms():
    lo, hi = np.float32(-0.5), np.float32(0.7)
    compare_ort(make_model([node("Clip", ["x", "lo", "hi"])], {"x": X}, {"lo": lo, "hi": hi},
                           opset=13), {"x": X})
    compare_ort(make_model([node("Clip", ["x", "", "hi"])], {"x": X}, {"hi": hi}, opset=13),
                {"x": X})
    compare_ort(make_model([node("Clip", ["x"])], {"x": X}, opset=13), {"x": X})
    xi = np.arange(-5, 5, dtype=np.int8)
    compare_ort(make_model([node("Clip", ["x", "lo"])], {"x": xi}, {"lo": np.int8(-2)},
                           opset=13), {"x": xi})
    # opset 6..10: attributes, converted to constant inputs
    model = make_model([node("Clip", ["x"], min=-0.25, max=0.5)], {"x": X}, opset=10)
    compare_ort(model, {"x": X})
    g = import_onnx(model)
    (clip,) = g.nodes
    assert len(clip.inputs) == 3 and not clip.attrs
    assert float(g.consts[clip.inputs[1]]) == -0.25
    compare_ort(make_model([node("Clip", ["x"], max=0.5)], {"x": X}, opset=10), {"x": X})


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                                TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE,
                                TensorProto.INT8])
def test_cast(to):
    x = (X * 10).astype(np.float32)
    if to == TensorProto.UINT8:
        x = np.abs(x)
    compare_ort(make_model([node("Cast", ["x"], to=to)], {"x": x}), {"x": x})
    xi = np.array([-2, 0, 1, 300], np.int64)
    if to != TensorProto.UINT8 and to != TensorProto.INT8:
        compare_ort(make_model([node("Cast", ["x"], to=to)], {"x": xi}), {"x": xi})


def test_castlike():
    like = np.zeros((1,), np.int32)
    compare_ort(make_model([node("CastLike", ["x", "t"])], {"x": X * 7, "t": like}),
                {"x": X * 7, "t": like})


@pytest.mark.parametrize("to", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
                                TensorProto.STRING, TensorProto.INT4])
def test_cast_refused_types(to):
    model = make_model([node("Cast", ["x"], to=to)], {"x": X}, opset=21)
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(model)
    assert "Cast" in info.value.unsupported


def test_cast_from_string_refused():
    graph = helper.make_graph([node("Cast", ["x"], to=TensorProto.FLOAT)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError):
        import_onnx(model)


def _dropout_check(model):
    """y matches onnxruntime; the mask is all ones per the ONNX spec (onnxruntime 1.32
    returns an all-false mask in inference mode, so the mask is checked on its own)."""
    want_y = ort_run(model, {"x": X})[0]
    y, m = execute(import_onnx(model), {"x": X}).values()
    np.testing.assert_array_equal(y, want_y)
    assert y.dtype == want_y.dtype
    return m


def test_dropout_inference_forms():
    # opset 13: ratio input, training_mode false, mask requested
    m = _dropout_check(make_model([node("Dropout", ["x", "r", "t"], ["y", "m"])], {"x": X},
                                  {"r": np.float32(0.3), "t": np.array(False)}, opset=13,
                                  outputs=["y", "m"]))
    assert m.dtype == bool and m.shape == X.shape and m.all()
    # opset 10: ratio attribute -> constant input
    model = make_model([node("Dropout", ["x"], ["y", "m"], ratio=0.2)], {"x": X}, opset=10,
                       outputs=["y", "m"])
    m = _dropout_check(model)
    assert m.dtype == bool and m.all()
    assert len(import_onnx(model).nodes[0].inputs) == 2
    # opset 7: the mask has the input's type: bool mask + CastLike
    m = _dropout_check(make_model([node("Dropout", ["x"], ["y", "m"])], {"x": X}, opset=7,
                                  outputs=["y", "m"], out_types={"m": TensorProto.FLOAT}))
    assert m.dtype == np.float32 and (m == 1).all()


def test_dropout_training_refused():
    model = make_model([node("Dropout", ["x", "r", "t"], ["y"])], {"x": X},
                       {"r": np.float32(0.3), "t": np.array(True)}, opset=13)
    with pytest.raises(UnsupportedOpError):
        import_onnx(model)
    # ratio 0 in training mode is the identity: fine
    model = make_model([node("Dropout", ["x", "r", "t"], ["y"])], {"x": X},
                       {"r": np.float32(0.0), "t": np.array(True)}, opset=13)
    np.testing.assert_array_equal(execute(import_onnx(model), {"x": X})["y"], X)


# -- shape rules ---------------------------------------------------------------------------

def _rule(op, shapes, dtypes=None, attrs=None, values=None, name="n1"):
    dtypes = dtypes or ["float32"] * len(shapes)
    values = values or [None] * len(shapes)
    ins = [None if s is None else TensorInfo(d, tuple(s), v)
           for s, d, v in zip(shapes, dtypes, values)]
    n = Node(op, [f"i{k}" for k in range(len(shapes))], ["o", "m"], attrs or {}, name)
    return SHAPE_RULES[op](n, ins)


def test_shape_broadcast():
    assert _rule("Add", [(2, 3, 1, 5), (4, 1)])[0].shape == (2, 3, 4, 5)
    assert _rule("Sum", [(3,), (2, 1), (1, 1, 1)])[0].shape == (1, 2, 3)
    assert _rule("Mul", [(0, 3), (1, 3)])[0].shape == (0, 3)
    assert _rule("Where", [(2, 1), (1, 3), ()], ["bool", "float32", "float32"]
                 )[0].shape == (2, 3)
    out = _rule("Less", [(4, 5), (5,)])[0]
    assert (out.dtype, out.shape) == ("bool", (4, 5))
    assert _rule("Pow", [(3,), (3,)], ["float32", "int64"])[0].dtype == "float32"


def test_shape_errors_name_the_node():
    with pytest.raises(GraphError, match="Add node 'bad_add'.*do not broadcast"):
        _rule("Add", [(2, 3), (4,)], name="bad_add")
    with pytest.raises(GraphError, match="one dtype"):
        _rule("Add", [(2,), (2,)], ["float32", "int64"])
    with pytest.raises(GraphError, match="slope"):
        _rule("PRelu", [(1, 3), (2, 3)])
    with pytest.raises(GraphError, match="condition"):
        _rule("Where", [(1,), (1,), (1,)])
    with pytest.raises(GraphError, match="scalars"):
        _rule("Clip", [(3,), (2,)])
    with pytest.raises(UnsupportedOpError):
        _rule("Cast", [(3,)], attrs={"to": TensorProto.BFLOAT16})
    with pytest.raises(UnsupportedOpError):
        _rule("Dropout", [(3,), (), ()], ["float32", "float32", "bool"])  # runtime flag


def test_shape_rules_match_kernels():
    """Output dtype and shape of every claimed op agree between rule and reference."""
    model = make_model([node("Cast", ["x"], ["c"], to=TensorProto.INT32),
                        node("Div", ["c", "c"], ["d"]),
                        node("Greater", ["x", "x"], ["g"]),
                        node("Dropout", ["x"], ["dy", "dm"]),
                        node("Sigmoid", ["x"], ["s"])], {"x": X},
                       outputs=["d", "g", "dy", "dm", "s"], opset=13)
    g = import_onnx(model)
    infos = infer(g, {"x": X.shape})
    got = execute(g, {"x": X})
    for name, v in got.items():
        assert (infos[name].dtype, infos[name].shape) == (v.dtype.name, v.shape), name


def test_ops_listed():
    assert set(OPS) >= {"Add", "Gelu", "Cast", "CastLike", "Dropout", "BitShift", "Where"}
    assert len(OPS) == len(set(OPS))
