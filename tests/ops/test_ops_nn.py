"""nn and fused op families: onnxruntime agreement, shape rules, fused forms. ONNX node
cases: tests/ops/test_node_cases.py.

Run: python -m pytest -x -q tests/ops/test_ops_nn.py
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.helpers import ort_run

from edgenn.converters.onnx.importer import import_onnx
from edgenn.errors import DataDependentShapeError, GraphError, UnsupportedOpError
from edgenn.graph.infer import evaluate, execute, infer_node
from edgenn.graph.ir import Node
from edgenn.graph.shapes import fused as fused_shapes
from edgenn.oplist import load_all
from edgenn.registry import TensorInfo

load_all()


# -- onnxruntime agreement ------------------------------------------------------------------------

_ONNX_DT = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("int64"): TensorProto.INT64,
            np.dtype("uint8"): TensorProto.UINT8}


def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def _model(op, feeds: dict, consts: dict, attrs: dict, opset: int = 19, n_out: int = 1,
           input_order=None):
    """One-node model: `feeds` become graph inputs, `consts` initializers."""
    names = input_order or [*feeds, *consts]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    ins = [helper.make_tensor_value_info(k, _ONNX_DT[v.dtype], v.shape) for k, v in feeds.items()]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()]
    x_type = _ONNX_DT[next(iter(feeds.values())).dtype]
    out_types = [x_type, TensorProto.INT64 if op == "MaxPool" else x_type, x_type]
    outs = [helper.make_tensor_value_info(f"y{i}", out_types[i], None) for i in range(n_out)]
    graph = helper.make_graph([node], "g", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compare(op, feeds, consts=None, attrs=None, opset=19, n_out=1, tol=1e-4, input_order=None):
    model = _model(op, feeds, consts or {}, attrs or {}, opset, n_out, input_order)
    want = ort_run(model, feeds)
    got = list(execute(import_onnx(model), feeds).values())
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (op, g.dtype, g.shape, w.dtype, w.shape)
        assert _rel_err(g, w) <= tol, (op, attrs, _rel_err(g, w))
    return got


RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


CONV_CASES = [
    # (x shape, w shape, attrs)
    ((1, 32, 56, 56), (64, 32, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 32, 56, 56), (32, 1, 3, 3), dict(group=32, pads=[1, 1, 1, 1])),             # depthwise
    ((1, 32, 28, 28), (64, 1, 3, 3), dict(group=32, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 32, 28, 28), (64, 8, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),              # grouped
    ((1, 64, 56, 56), (256, 64, 1, 1), {}),                                          # 1x1
    ((1, 64, 28, 28), (32, 64, 1, 1), dict(strides=[2, 2])),                         # 1x1 s2
    ((1, 16, 30, 30), (16, 16, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),    # dilated
    ((1, 3, 224, 224), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),      # stem
    ((1, 8, 17, 19), (8, 8, 3, 2), dict(strides=[2, 3], auto_pad="SAME_UPPER")),
    ((1, 8, 17, 19), (8, 8, 4, 4), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 8, 17, 19), (4, 8, 3, 3), dict(auto_pad="VALID", strides=[2, 1])),
    ((1, 8, 17, 19), (4, 8, 3, 3), dict(pads=[0, 1, 2, 0])),                          # asymmetric
    ((2, 16, 50), (8, 16, 5), dict(strides=[2], pads=[2, 2])),                       # 1-D
    ((1, 16, 40), (16, 1, 3), dict(group=16, dilations=[2], pads=[2, 2])),           # 1-D dw
    ((1, 4, 8, 9, 10), (6, 4, 3, 3, 3), dict(pads=[1] * 6, strides=[1, 2, 1])),      # 3-D
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv_vs_onnxruntime(xs, ws, attrs):
    m = ws[0]
    _compare("Conv", {"x": _r(*xs)}, {"w": _r(*ws), "b": _r(m)}, attrs)


CONVT_CASES = [
    ((1, 16, 14, 14), (16, 8, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 16, 14, 14), (16, 4, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1],
                                          output_padding=[1, 1])),
    ((2, 8, 9, 7), (8, 3, 3, 3), dict(dilations=[2, 1], strides=[1, 2])),
    ((1, 8, 9, 7), (8, 3, 3, 3), dict(strides=[2, 2], output_shape=[19, 16])),
    ((1, 8, 9, 7), (8, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 8, 20), (8, 4, 5), dict(strides=[3], pads=[1, 2])),
    ((1, 32, 10, 10), (32, 1, 3, 3), dict(group=32, strides=[2, 2], pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose_vs_onnxruntime(xs, ws, attrs):
    m = ws[1] * attrs.get("group", 1)
    _compare("ConvTranspose", {"x": _r(*xs)}, {"w": _r(*ws), "b": _r(m)}, attrs)


POOL_CASES = [
    ("MaxPool", (1, 64, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 8, 15, 17), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", (1, 8, 15, 17), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 0, 1, 2])),
    ("MaxPool", (2, 4, 13, 11), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("MaxPool", (1, 4, 20), dict(kernel_shape=[4], strides=[3], pads=[1, 1])),
    ("AveragePool", (1, 16, 28, 28), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 16, 28, 28), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                          count_include_pad=1)),
    ("AveragePool", (1, 8, 15, 17), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
                                         pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", (1, 8, 15, 17), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", (1, 8, 15, 17), dict(kernel_shape=[3, 2], auto_pad="SAME_LOWER")),
    ("LpPool", (1, 8, 15, 17), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=3)),
]


@pytest.mark.parametrize("op,xs,attrs", POOL_CASES)
def test_pools_vs_onnxruntime(op, xs, attrs):
    _compare(op, {"x": _r(*xs)}, {}, attrs)


def test_maxpool_indices_vs_onnxruntime():
    for order in (0, 1):
        _compare("MaxPool", {"x": _r(2, 3, 9, 11)}, {},
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                      storage_order=order), opset=12, n_out=2)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools_vs_onnxruntime(op):
    _compare(op, {"x": _r(2, 64, 7, 9)}, {}, {})


def test_norms_vs_onnxruntime():
    c = 32
    var = np.abs(_r(c)) + 0.1
    _compare("BatchNormalization", {"x": _r(2, c, 14, 14)},
             {"s": _r(c), "b": _r(c), "m": _r(c), "v": var}, {"epsilon": 1e-3})
    _compare("BatchNormalization", {"x": _r(2, c, 14, 14)},
             {"s": _r(c), "b": _r(c), "m": _r(c), "v": var}, {}, opset=7)
    _compare("InstanceNormalization", {"x": _r(2, c, 14, 14) * 3 + 1},
             {"s": _r(c), "b": _r(c)}, {"epsilon": 1e-4})
    x = _r(2, 128, 768) * 2 + 0.5
    _compare("LayerNormalization", {"x": x}, {"s": _r(768), "b": _r(768)}, {}, opset=17, n_out=3)
    _compare("LayerNormalization", {"x": _r(2, 4, 6, 8)}, {"s": _r(6, 8)}, {"axis": 2}, opset=17)
    _compare("LRN", {"x": _r(1, 16, 9, 9)}, {}, dict(size=5, alpha=1e-3, beta=0.7, bias=2.0))
    _compare("GroupNormalization", {"x": _r(2, 16, 5, 5)}, {"s": _r(16), "b": _r(16)},
             {"num_groups": 4, "epsilon": 1e-4}, opset=21)


def test_group_norm_opset18_per_group_scale():
    x, s, b = _r(2, 16, 5, 5), _r(4), _r(4)
    model = _model("GroupNormalization", {"x": x}, {"s": s, "b": b}, {"num_groups": 4},
                   opset=18)
    got = list(execute(import_onnx(model), {"x": x}).values())[0]
    xg = x.reshape(2, 4, -1).astype(np.float64)
    norm = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)
    want = norm * s[None, :, None] + b[None, :, None]
    assert _rel_err(got, want.reshape(x.shape)) < 1e-5


def test_matmul_gemm_vs_onnxruntime():
    _compare("Gemm", {"a": _r(4, 512)}, {"b": _r(1000, 512), "c": _r(1000)}, {"transB": 1})
    _compare("Gemm", {"a": _r(64, 8)}, {"b": _r(64, 16), "c": _r(8, 1)},
             {"transA": 1, "alpha": 0.5, "beta": 2.0})
    _compare("Gemm", {"a": _r(3, 5)}, {"b": _r(5, 4)}, {}, opset=13)
    _compare("Gemm", {"a": _r(3, 5)}, {"b": _r(5, 4), "c": _r(1)}, {}, opset=9)
    _compare("MatMul", {"a": _r(2, 12, 128, 64), "b": _r(2, 12, 64, 128)}, {}, {})
    _compare("MatMul", {"a": _r(3, 1, 5, 6), "b": _r(4, 6, 2)}, {}, {})
    _compare("MatMul", {"a": _r(6), "b": _r(2, 6, 3)}, {}, {})
    _compare("MatMul", {"a": _r(2, 3, 6), "b": _r(6)}, {}, {})
    _compare("MatMul", {"a": _r(1, 128, 768)}, {"b": _r(768, 3072)}, {})


RESIZE_CASES = [
    # (x shape, scales or None, sizes or None, attrs)
    ((1, 3, 16, 20), [1, 1, 2, 2], None, dict(mode="nearest")),
    ((1, 3, 16, 20), [1, 1, 2, 2], None, dict(mode="nearest",
                                                coordinate_transformation_mode="asymmetric",
                                                nearest_mode="floor")),
    ((1, 3, 16, 20), None, [1, 3, 37, 9], dict(mode="nearest", nearest_mode="round_prefer_ceil")),
    ((1, 3, 16, 20), None, [1, 3, 37, 9], dict(mode="nearest", nearest_mode="ceil",
                                               coordinate_transformation_mode="align_corners")),
    ((1, 3, 16, 20), [1, 1, 2, 2], None, dict(mode="linear")),
    ((1, 3, 16, 20), None, [1, 3, 23, 11], dict(mode="linear")),
    ((1, 3, 16, 20), None, [1, 3, 23, 11], dict(mode="linear",
                                                coordinate_transformation_mode="align_corners")),
    ((1, 3, 16, 20), None, [1, 3, 23, 1], dict(mode="linear",
                                               coordinate_transformation_mode="pytorch_half_pixel")),
    ((1, 3, 16, 20), None, [1, 3, 23, 11], dict(mode="linear",
                                                coordinate_transformation_mode="asymmetric")),
    ((2, 3, 16, 20), [1, 1, 2, 2], None, dict(mode="cubic")),
    ((1, 3, 16, 20), None, [1, 3, 23, 11], dict(mode="cubic", cubic_coeff_a=-0.5,
                                                exclude_outside=1)),
    ((1, 3, 16, 20), None, [1, 3, 32, 40], dict(mode="cubic",
                                                coordinate_transformation_mode="align_corners")),
    ((1, 2, 6, 7, 8), None, [1, 2, 9, 5, 11], dict(mode="linear")),                 # trilinear
]


@pytest.mark.parametrize("xs,scales,sizes,attrs", RESIZE_CASES)
def test_resize_vs_onnxruntime(xs, scales, sizes, attrs):
    consts = {"roi": np.zeros(0, np.float32)}
    consts["scales"] = np.array(scales or [], np.float32)
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
    _compare("Resize", {"x": _r(*xs)}, consts, attrs, opset=13,
             input_order=["x", "roi", "scales", *(["sizes"] if sizes else [])])


def test_resize_crop_and_opset10_and_upsample_vs_onnxruntime():
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8], np.float32)
    _compare("Resize", {"x": _r(1, 2, 10, 12)},
             {"roi": roi, "scales": np.zeros(0, np.float32), "sizes": np.array([1, 2, 7, 5])},
             dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                  extrapolation_value=-3.0), opset=13)
    x = _r(1, 2, 6, 8)
    _compare("Resize", {"x": x}, {"scales": np.array([1, 1, 2, 1.5], np.float32)},
             dict(mode="nearest"), opset=10)
    _compare("Resize", {"x": x}, {"scales": np.array([1, 1, 0.5, 0.75], np.float32)},
             dict(mode="nearest"), opset=10)
    _compare("Resize", {"x": x}, {"scales": np.array([1, 1, 2, 2], np.float32)},
             dict(mode="linear"), opset=10)
    _compare("Upsample", {"x": x}, {"scales": np.array([1, 1, 2, 3], np.float32)},
             dict(mode="nearest"), opset=9)
    _compare("Upsample", {"x": x}, {}, dict(mode="linear", scales=[1.0, 1.0, 2.0, 2.0]), opset=7)


def test_resize_older_opsets_antialias_axes_vs_onnxruntime():
    x = _r(1, 2, 7, 9)
    empty = np.zeros(0, np.float32)
    _compare("Resize", {"x": x}, {"roi": empty, "scales": np.array([1, 1, 1.6, 0.7], np.float32)},
             dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"),
             opset=11)
    _compare("Resize", {"x": x}, {"roi": empty, "scales": empty, "sizes": np.array([1, 2, 12, 5])},
             dict(mode="cubic"), opset=11)
    # opset 10, scales only known at run time, up on one axis and down on the other; the
    # coordinate 8 / 1.6f is exactly 5 in float32 (4.99999 in float64): ORT's float32 wins
    _compare("Resize", {"x": x, "scales": np.array([1, 1, 1.6, 0.7], np.float32)}, {},
             dict(mode="nearest"), opset=10)
    big = _r(1, 3, 40, 30)
    _compare("Resize", {"x": big}, {"roi": empty, "scales": empty, "sizes": np.array([13, 17])},
             dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_smaller",
                  antialias=1), opset=18)
    # 40 * 0.45f is 18 in float32 (ORT's output size), 17.99999 in float64
    _compare("Resize", {"x": big}, {"roi": empty, "scales": np.array([0.3, 0.45], np.float32)},
             dict(mode="cubic", axes=[3, 2], antialias=1), opset=18)
    _compare("Resize", {"x": big}, {"roi": empty,
                                    "scales": np.array([1, 1, 0.3, 0.45], np.float32)},
             dict(mode="linear", antialias=1,
                  coordinate_transformation_mode="half_pixel_symmetric"), opset=19)


def test_resize_uint8_nearest():
    x = RNG.integers(0, 255, (1, 3, 5, 6)).astype(np.uint8)
    _compare("Resize", {"x": x}, {"roi": np.zeros(0, np.float32),
                                  "scales": np.array([1, 1, 2, 2], np.float32)},
             dict(mode="nearest"), opset=13)


# -- shape rules ---------------------------------------------------------------------------------

def _infer(op, shapes, attrs=None, values=None, n_out=1):
    values = values or {}
    ins = [None if s is None else TensorInfo("float32" if i not in values else
                                             values[i].dtype.name, tuple(s), values.get(i))
           for i, s in enumerate(shapes)]
    node = Node(op, [f"i{i}" if s is not None else "" for i, s in enumerate(shapes)],
                [f"o{i}" for i in range(n_out)], attrs or {}, "n")
    return [(o.dtype, o.shape) for o in infer_node(node, ins, fold=False)]


def test_shape_rules():
    f = "float32"
    assert _infer("Conv", [(1, 32, 56, 56), (64, 32, 3, 3)],
                  dict(strides=[2, 2], pads=[1, 1, 1, 1])) == [(f, (1, 64, 28, 28))]
    assert _infer("Conv", [(1, 8, 17, 19), (8, 8, 3, 3)],
                  dict(strides=[2, 2], auto_pad="SAME_LOWER")) == [(f, (1, 8, 9, 10))]
    assert _infer("ConvTranspose", [(1, 16, 14, 14), (16, 8, 4, 4)],
                  dict(strides=[2, 2], pads=[1, 1, 1, 1])) == [(f, (1, 8, 28, 28))]
    assert _infer("ConvTranspose", [(1, 8, 9, 7), (8, 3, 3, 3)],
                  dict(group=2, strides=[2, 2], output_shape=[19, 16])) == [(f, (1, 6, 19, 16))]
    assert _infer("MaxPool", [(1, 1, 5, 5)], dict(kernel_shape=[2, 2], strides=[2, 2],
                                                  ceil_mode=1), n_out=2) == \
        [(f, (1, 1, 3, 3)), ("int64", (1, 1, 3, 3))]
    # a ceil_mode window that would start in the end padding is dropped
    assert _infer("AveragePool", [(1, 1, 4, 4)], dict(kernel_shape=[3, 3], strides=[2, 2],
                                                      pads=[1, 1, 1, 1], ceil_mode=1)) == \
        [(f, (1, 1, 3, 3))]
    assert _infer("GlobalAveragePool", [(2, 5, 7, 7)]) == [(f, (2, 5, 1, 1))]
    assert _infer("MatMul", [(7,), (3, 7, 2)]) == [(f, (3, 2))]
    assert _infer("MatMul", [(3, 1, 4, 7), (7, 5)]) == [(f, (3, 1, 4, 5))]
    assert _infer("Gemm", [(2, 9, 64), (32, 64), (32,)], dict(transB=1)) == [(f, (2, 9, 32))]
    assert _infer("LayerNormalization", [(2, 5, 8), (8,), (8,)], {"axis": -1}, n_out=3) == \
        [(f, (2, 5, 8)), (f, (2, 5, 1)), (f, (2, 5, 1))]
    sizes = np.array([1, 3, 7, 9], np.int64)
    assert _infer("Resize", [(1, 3, 4, 5), None, None, (4,)], {"mode": "nearest"},
                  values={3: sizes}) == [(f, (1, 3, 7, 9))]
    scales = np.array([2.0, 0.6], np.float32)
    assert _infer("Resize", [(1, 3, 4, 5), None, (2,)], {"axes": [2, 3]},
                  values={2: scales}) == [(f, (1, 3, 8, 3))]
    assert _infer("Resize", [(1, 3, 4, 8), None, None, (2,)],
                  {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
                  values={3: np.array([6, 6])}) == [(f, (1, 3, 3, 6))]


@pytest.mark.parametrize("op,shapes,attrs", [
    ("Conv", [(1, 32, 8, 8), (64, 16, 3, 3)], {}),                         # channels vs group
    ("Conv", [(1, 32, 8, 8), (64, 16, 3, 3)], {"group": 3}),
    ("Conv", [(1, 4, 2, 2), (4, 4, 3, 3)], {}),                            # kernel too big
    ("Conv", [(1, 4, 8, 8), (4, 4, 3, 3)], {"activation": "Tanh"}),        # unknown activation
    ("Conv", [(1, 4, 8, 8), (4, 4, 3, 3)], {"activation": "Clip", "activation_params": [0.0]}),
    ("MatMul", [(3, 4), (5, 6)], {}),
    ("Gemm", [(3, 4), (5, 6)], {}),
    ("Gemm", [(2, 3, 4), (4, 6)], {"transA": 1}),
    ("BatchNormalization", [(1, 3, 4, 4), (3,), (3,), (3,), (3,)], {"training_mode": 1}),
    ("MaxPool", [(1, 3, 4, 4)], {"kernel_shape": [2]}),
])
def test_shape_rule_errors(op, shapes, attrs):
    with pytest.raises(GraphError, match=op):
        _infer(op, shapes, attrs)


def test_resize_scales_not_constant_is_data_dependent_error():
    with pytest.raises(DataDependentShapeError, match="'scales' of Resize node"):
        _infer("Resize", [(1, 3, 4, 4), None, (4,)], {})


def test_unsupported_variants_are_refused():
    x = _r(2, 3, 4, 4)
    c = {k: _r(3) for k in "sbm"}
    c["v"] = np.abs(_r(3))
    model = _model("BatchNormalization", {"x": x}, c, {"training_mode": 1}, opset=15)
    with pytest.raises(UnsupportedOpError):
        import_onnx(model)


# -- fused forms (produced by the graph passes) ------------------------------------------------

def _eval(op, inputs, attrs):
    node = Node(op, [f"i{i}" if v is not None else "" for i, v in enumerate(inputs)], ["y"],
                attrs, "fused")
    ins = [None if v is None else TensorInfo.of(v) for v in inputs]
    (info,) = infer_node(node, [None if i is None else TensorInfo(i.dtype, i.shape) for i in ins],
                         fold=False)
    (y,) = evaluate(node, inputs)
    assert (y.dtype.name, y.shape) == (info.dtype, info.shape)
    return y


def _erf(x):
    return np.vectorize(math.erf)(x)


ACTS = {
    "": ([], lambda y: y),
    "Relu": ([], lambda y: np.maximum(y, 0)),
    "Clip": ([-0.5, 1.5], lambda y: np.clip(y, -0.5, 1.5)),
    "HardSwish": ([], lambda y: y * np.clip(y / 6 + 0.5, 0, 1)),
    "HardSigmoid": ([0.3, 0.4], lambda y: np.clip(0.3 * y + 0.4, 0, 1)),
    "Sigmoid": ([], lambda y: 1 / (1 + np.exp(-y))),
    "SiLU": ([], lambda y: y / (1 + np.exp(-y))),
    "LeakyRelu": ([0.1], lambda y: np.where(y >= 0, y, 0.1 * y)),
    "Gelu": ([], lambda y: 0.5 * y * (1 + _erf(y / math.sqrt(2)))),
}


@pytest.mark.parametrize("act", list(ACTS))
def test_fused_conv_activation_and_residual(act):
    params, fn = ACTS[act]
    x, w, b = _r(1, 8, 12, 12), _r(16, 8, 3, 3), _r(16)
    z = _r(1, 16, 6, 6)
    attrs = dict(strides=[2, 2], pads=[1, 1, 1, 1], group=1, activation=act,
                 activation_params=params)
    plain = evaluate(Node("Conv", ["x", "w", "b"], ["y"], dict(strides=[2, 2],
                                                               pads=[1, 1, 1, 1]), "c"),
                     [x, w, b])[0].astype(np.float64)
    y = _eval("Conv", [x, w, b, z], attrs)
    assert y.dtype == np.float32
    assert _rel_err(y, fn(plain + z)) < 1e-5
    y = _eval("Conv", [x, w, None, z], attrs)
    assert _rel_err(y, fn(plain - b.reshape(16, 1, 1) + z)) < 1e-5
    y = _eval("Conv", [x, w, b], attrs)
    assert _rel_err(y, fn(plain)) < 1e-5


def test_fused_depthwise_conv_with_clip():
    x, w, b = _r(1, 16, 10, 10), _r(16, 1, 3, 3), _r(16)
    base = dict(group=16, pads=[1, 1, 1, 1])
    plain = evaluate(Node("Conv", ["x", "w", "b"], ["y"], base, "c"), [x, w, b])[0]
    y = _eval("Conv", [x, w, b], dict(base, activation="Clip", activation_params=[0.0, 6.0]))
    np.testing.assert_allclose(y, np.clip(plain, 0, 6), rtol=1e-6)


@pytest.mark.parametrize("act", list(ACTS))
def test_fused_gemm_activation_and_residual(act):
    params, fn = ACTS[act]
    a, b, c, z = _r(5, 32), _r(16, 32), _r(16), _r(5, 16)
    want = (0.5 * a.astype(np.float64) @ b.T.astype(np.float64) + 2.0 * c + z)
    y = _eval("Gemm", [a, b, c, z], dict(transB=1, alpha=0.5, beta=2.0, activation=act,
                                         activation_params=params))
    assert y.dtype == np.float32
    assert _rel_err(y, fn(want)) < 1e-5


def test_gemm_batched_a_from_matmul_add():
    # MatMul(A (B, S, K), W (K, N)) + bias (N,) -> Gemm with A of rank 3
    a, w, bias = _r(2, 9, 64), _r(64, 32), _r(32)
    y = _eval("Gemm", [a, w, bias], dict(activation="Gelu"))
    want = a.astype(np.float64) @ w + bias
    assert y.shape == (2, 9, 32)
    assert _rel_err(y, ACTS["Gelu"][1](want)) < 1e-5
    z = _r(2, 9, 32)
    y = _eval("Gemm", [a, w, None, z], {})
    assert _rel_err(y, a.astype(np.float64) @ w + z) < 1e-5


def _attention_ref(q, kt, v, mask=None, scale=None, kind="add"):
    q, kt, v = (t.astype(np.float64) for t in (q, kt, v))
    s = q @ kt * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if kind == "bool" else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_fused_attention():
    b, h, s, t, d, dv = 2, 4, 7, 9, 16, 8
    q, k, v = _r(b, h, s, d), _r(b, h, t, d), _r(b, h, t, dv)
    kt = np.ascontiguousarray(k.swapaxes(-1, -2))
    y = _eval("FusedAttention", [q, kt, v], {})
    assert y.shape == (b, h, s, dv) and y.dtype == np.float32
    assert _rel_err(y, _attention_ref(q, kt, v)) < 1e-5
    # additive mask broadcast over heads, explicit scale; large scores stay finite
    mask = np.where(RNG.random((b, 1, s, t)) < 0.3, -1e9, 0).astype(np.float32)
    y = _eval("FusedAttention", [q * 30, kt, v, mask], {"scale": 0.5})
    assert np.isfinite(y).all()
    assert _rel_err(y, _attention_ref(q * 30, kt, v, mask, 0.5)) < 1e-5
    # boolean causal mask (S, T)
    causal = np.tril(np.ones((s, t), bool), k=t - s)
    y = _eval("FusedAttention", [q, kt, v, causal], {"mask_kind": "bool"})
    assert _rel_err(y, _attention_ref(q, kt, v, causal, kind="bool")) < 1e-5


def test_fused_attention_leading_dims():
    q, kt, v = _r(3, 5, 4), _r(3, 4, 6), _r(3, 6, 2)                       # rank 3
    assert _rel_err(_eval("FusedAttention", [q, kt, v], {}), _attention_ref(q, kt, v)) < 1e-5
    q, kt, v = _r(2, 2, 3, 5, 4), _r(2, 2, 3, 4, 6), _r(1, 2, 3, 6, 2)    # rank 5, broadcast
    y = _eval("FusedAttention", [q, kt, v], {})
    assert y.shape == (2, 2, 3, 5, 2)
    assert _rel_err(y, _attention_ref(q, kt, v)) < 1e-5


def test_fused_attention_reads_heads_through_perms():
    """perm_q / perm_k / perm_v / perm_y (the absorbed Transposes): the same result as the
    explicit transposes, against an independent reference."""
    b, s, t, h, d = 2, 5, 6, 3, 4
    q, k, v = _r(b, s, h, d), _r(b, t, h, d), _r(b, t, h, d)
    want = _attention_ref(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1),
                          v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    attrs = {"perm_q": [0, 2, 1, 3], "perm_k": [0, 2, 3, 1], "perm_v": [0, 2, 1, 3],
             "perm_y": [0, 2, 1, 3]}
    y = _eval("FusedAttention", [q, k, v], attrs)
    assert y.shape == (b, s, h, d) and _rel_err(y, want) < 1e-5
    with pytest.raises(GraphError, match="perm_q"):
        _eval("FusedAttention", [q, k, v], dict(attrs, perm_q=[0, 1, 2]))


def test_fused_attention_shape_errors():
    node = Node("FusedAttention", ["q", "k", "v"], ["y"], {}, "att")
    with pytest.raises(GraphError, match="FusedAttention"):
        fused_shapes.fused_attention(node, [TensorInfo("float32", (1, 2, 3, 4)),
                                            TensorInfo("float32", (1, 2, 5, 6)),
                                            TensorInfo("float32", (1, 2, 6, 4))])
    node = Node("FusedAttention", ["q", "k", "v", "m"], ["y"], {}, "att")
    with pytest.raises(GraphError, match="broadcast"):
        fused_shapes.fused_attention(node, [TensorInfo("float32", (1, 2, 3, 4)),
                                            TensorInfo("float32", (1, 2, 4, 6)),
                                            TensorInfo("float32", (1, 2, 6, 4)),
                                            TensorInfo("float32", (1, 2, 5, 6))])
