"""The quant op family: QConv / QGemm references against plain loops written from the int8
spec, the ONNX quantization ops against onnxruntime and onnx.reference (bit-exact), and
the errors the shape rules and converters give."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgenn.errors import GraphError, UnsupportedOpError
from edgenn.graph.infer import execute
from edgenn.graph.ir import Graph, Node, ValueInfo
from edgenn.kernels.reference import nn as nn_ref
from edgenn.kernels.reference.quant import (conv_accumulate, gemm_accumulate,
                                            qconv_reference, qgemm_reference, requantize)
from edgenn.oplist import load_all
from edgenn.registry import SHAPE_RULES, TensorInfo
from edgenn import InferenceSession

load_all()
F32 = np.float32


def _rng(seed=0):
    return np.random.default_rng(seed)


# -- QConv / QGemm against loops written from the spec -----------------------------------------

def _loop_conv_acc(x, x_zp, w, bias, stride, pad, group):
    """acc[n, m, oh, ow] by plain Python loops (pad top/left/bottom/right = pad)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.full((n, c, h + 2 * pad, wd + 2 * pad), int(x_zp), np.int64)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((n, m, oh, ow), np.int64)
    for b in range(n):
        for o in range(m):
            g = o // (m // group)
            for i in range(oh):
                for j in range(ow):
                    win = xp[b, g * cg:(g + 1) * cg, i * stride:i * stride + kh,
                             j * stride:j * stride + kw] - int(x_zp)
                    acc[b, o, i, j] = int((win * w[o].astype(np.int64)).sum()) + \
                        (int(bias[o]) if bias is not None else 0)
    return acc


def _conv_case(seed=0, group=1, c=4, m=6, wbits=7):
    rng = _rng(seed)
    lim = 2 ** (wbits - 1) - 1
    x = rng.integers(0, 256, (2, c, 7, 6), dtype=np.uint8)
    w = rng.integers(-lim, lim + 1, (m, c // group, 3, 3), dtype=np.int8)
    w_scale = (rng.random(m) * 0.004 + 0.001).astype(F32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    return x, F32(0.05), np.uint8(120), w, w_scale, bias


@pytest.mark.parametrize("group", [1, 2])
def test_conv_accumulate_is_exact(group):
    x, xs, xz, w, ws, b = _conv_case(group=group, wbits=8)
    attrs = dict(strides=[2, 2], pads=[1, 1, 1, 1], group=group)
    acc = conv_accumulate(x, xz, w, None, b, attrs)
    assert acc.dtype == np.int32
    np.testing.assert_array_equal(acc, _loop_conv_acc(x, xz, w, b, 2, 1, group))


def _spec_integer_path(acc, xs, ws, ys, yz, lo=0.0, hi=255.0):
    """The integer path of the spec, element by element in float32."""
    out = np.empty(acc.shape, np.uint8)
    for idx in np.ndindex(*acc.shape):
        mult = F32(F32(xs) * F32(ws[idx[1]])) / F32(ys)
        q = F32(np.rint(F32(F32(acc[idx]) * mult))) + F32(yz)
        out[idx] = int(min(max(q, lo), hi))
    return out


def test_qconv_integer_path_relu_and_clip():
    x, xs, xz, w, ws, b = _conv_case()
    ys, yz = F32(0.07), np.uint8(30)
    attrs = dict(strides=[1, 1], pads=[1, 1, 1, 1], group=1)
    acc = _loop_conv_acc(x, xz, w, b, 1, 1, 1)
    plain = qconv_reference(x, xs, xz, w, ws, np.zeros(6, np.int8), ys, yz, b, **attrs)
    np.testing.assert_array_equal(plain, _spec_integer_path(acc, xs, ws, ys, yz))
    relu = qconv_reference(x, xs, xz, w, ws, np.zeros(6, np.int8), ys, yz, b,
                           activation="Relu", **attrs)
    np.testing.assert_array_equal(relu, np.maximum(plain, yz))
    clip = qconv_reference(x, xs, xz, w, ws, np.zeros(6, np.int8), ys, yz, b,
                           activation="Clip", activation_params=[0.0, 6.0], **attrs)
    hi = np.rint(F32(6.0) / ys) + F32(yz)
    np.testing.assert_array_equal(clip, np.clip(plain, yz, hi))
    # clip-then-quantize gives the same: quantization is monotone
    v = acc.astype(F32) * (xs * ws.reshape(1, -1, 1, 1))
    np.testing.assert_array_equal(clip, requantize(acc, 1, xs, ws, ys, yz, activation="Clip",
                                                   activation_params=[0.0, 6.0]))
    assert np.abs(clip.astype(int) - np.clip(np.rint(np.clip(v, 0, 6) / ys) + 30, 0, 255)
                  ).max() <= 1


def test_qconv_float_path_residual_activation_and_float_output():
    x, xs, xz, w, ws, b = _conv_case(seed=1, group=2)
    attrs = dict(strides=[1, 1], pads=[1, 1, 1, 1], group=2)
    acc = _loop_conv_acc(x, xz, w, b, 1, 1, 2)
    z = _rng(2).integers(0, 256, acc.shape, dtype=np.uint8)
    zs, zz, ys, yz = F32(0.03), np.uint8(100), F32(0.05), np.uint8(10)
    # float path, written out from the spec
    v = acc.astype(np.int32).astype(F32) * (xs * ws).reshape(1, -1, 1, 1)
    v = v + (z.astype(np.int32) - 100).astype(F32) * zs
    v = nn_ref.apply_activation(v, "HardSwish", [])
    want = np.clip(np.rint(v * (F32(1) / ys)) + F32(yz), 0, 255).astype(np.uint8)
    got = qconv_reference(x, xs, xz, w, ws, np.zeros(6, np.int8), ys, yz, b, z, zs, zz,
                          activation="HardSwish", **attrs)
    np.testing.assert_array_equal(got, want)
    # no y_scale: float32 output, no rounding
    f = qconv_reference(x, xs, xz, w, ws, np.zeros(6, np.int8), None, None, b, z, zs, zz,
                        activation="HardSwish", **attrs)
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f, v)


def test_qgemm_matches_spec_and_batches_rows():
    rng = _rng(3)
    a = rng.integers(0, 256, (2, 5, 40), dtype=np.uint8)
    b = rng.integers(-127, 128, (40, 9), dtype=np.int8)
    bs = (rng.random(9) * 0.01 + 0.001).astype(F32)
    bias = rng.integers(-500, 500, 9).astype(np.int32)
    acc = (a.astype(np.int64) - 7) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(gemm_accumulate(a, np.uint8(7), b, None, bias), acc)
    ys, yz = F32(0.4), np.uint8(128)
    got = qgemm_reference(a, F32(0.02), np.uint8(7), b, bs, np.zeros(9, np.int8), ys, yz, bias)
    mult = F32(0.02) * bs / ys
    want = np.clip(np.rint(acc.astype(F32) * mult) + F32(128), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)
    gelu = qgemm_reference(a, F32(0.02), np.uint8(7), b, bs, np.zeros(9, np.int8), None, None,
                           bias, activation="Gelu")
    np.testing.assert_array_equal(
        gelu, nn_ref.apply_activation(acc.astype(F32) * (F32(0.02) * bs), "Gelu", []))


# -- ONNX ops against onnxruntime / onnx.reference ---------------------------------------------

def _model(node, inputs, inits, opset=13):
    """inputs: [(name, array)] fed at run time; inits: {name: array}; one output, its type
    from onnx's shape inference."""
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
          for n, v in inputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    probe = helper.make_model(helper.make_graph([node], "g", vi, [], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(probe).graph.value_info
    out = [v for v in inferred if v.name == node.output[0]]
    g = helper.make_graph([node], "g", vi, out, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ours(model, feeds, reference=True):
    return InferenceSession(model.SerializeToString(), reference=reference).run(None, feeds)


def _ort(model, feeds):
    import onnxruntime as ort
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_quantize_linear_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, 127.4], F32)
    m = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), [("x", x)],
               {"s": F32(1.0), "z": np.uint8(0)})
    np.testing.assert_array_equal(_ours(m, {"x": x})[0], [0, 2, 2, 0, 0, 255, 0, 127])
    m8 = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), [("x", x)],
                {"s": F32(1.0), "z": np.int8(1)})
    np.testing.assert_array_equal(_ours(m8, {"x": x})[0], [1, 3, 3, 1, -1, 127, -128, 127])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_per_axis_match_onnxruntime(dtype):
    rng = _rng(4)
    x = rng.normal(0, 3, (2, 3, 4)).astype(F32)
    s = np.array([0.02, 0.05, 0.1], F32)
    info = np.iinfo(dtype)
    z = np.array([info.min // 2 + info.max // 3, 0, 3], dtype)
    q = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1),
               [("x", x)], {"s": s, "z": z}, opset=21)
    got, want = _ours(q, {"x": x})[0], _ort(q, {"x": x})[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    d = _model(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
               [("q", got)], {"s": s, "z": z}, opset=21)
    np.testing.assert_array_equal(_ours(d, {"q": got})[0], _ort(d, {"q": got})[0])


def test_dynamic_quantize_linear_matches_onnx_reference():
    from onnx.reference import ReferenceEvaluator
    x = _rng(5).normal(1, 2, (3, 7)).astype(F32)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
        [helper.make_tensor_value_info(n, t, None)
         for n, t in (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT),
                      ("z", TensorProto.UINT8))]),
        opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    for got, want in zip(_ours(m, {"x": x}), ReferenceEvaluator(m).run(None, {"x": x})):
        np.testing.assert_array_equal(got, want)


def test_qlinear_conv_and_matmul_are_bit_exact_with_onnxruntime():
    # 7-bit weights: onnxruntime's AVX2 u8s8 kernels cannot saturate, so it is exact too
    x, xs, xz, w, ws, b = _conv_case(seed=6)
    inits = {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": np.zeros(6, np.int8),
             "ys": F32(0.09), "yz": np.uint8(77), "b": b}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 0, 1, 1], strides=[1, 2])
    m = _model(node, [("x", x)], inits)
    want = _ort(m, {"x": x})[0]
    np.testing.assert_array_equal(_ours(m, {"x": x})[0], want)
    # imported QLinearConv becomes QConv (same inputs, integer path)
    from edgenn.api import load
    assert load(m).op_counts()["QConv"] == 1
    a = _rng(7).integers(0, 256, (3, 4, 33), dtype=np.uint8)
    bm = _rng(8).integers(0, 256, (33, 5), dtype=np.uint8)
    mm = _model(helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                                 ["y"]), [("a", a)],
                {"as": F32(0.1), "az": np.uint8(3), "b": bm, "bs": F32(0.01),
                 "bz": np.uint8(128), "ys": F32(2.0), "yz": np.uint8(100)})
    np.testing.assert_array_equal(_ours(mm, {"a": a})[0], _ort(mm, {"a": a})[0])


def test_conv_integer_and_matmul_integer_are_exact():
    rng = _rng(9)
    x = rng.integers(0, 256, (1, 4, 6, 6), dtype=np.uint8)
    w = rng.integers(-128, 128, (3, 4, 3, 3), dtype=np.int8)
    m = _model(helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1]),
               [("x", x)], {"w": w, "xz": np.uint8(9)}, opset=10)
    got = _ours(m, {"x": x})[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _loop_conv_acc(x, 9, w, None, 1, 1, 1))
    a = rng.integers(0, 256, (2, 5, 64), dtype=np.uint8)
    b = rng.integers(-128, 128, (64, 7), dtype=np.int8)
    bz = rng.integers(-3, 3, 7).astype(np.int8)
    mm = _model(helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]), [("a", a)],
                {"b": b, "az": np.uint8(200), "bz": bz}, opset=10)
    want = (a.astype(np.int64) - 200) @ (b.astype(np.int64) - bz)
    np.testing.assert_array_equal(_ours(mm, {"a": a})[0], want)


# -- errors ------------------------------------------------------------------------------------

def _infos(*arrays):
    return [None if a is None else TensorInfo.of(np.asarray(a)) for a in arrays]


def _qconv_ins(**over):
    x, xs, xz, w, ws, b = _conv_case()
    ins = dict(x=x, xs=xs, xz=xz, w=w, ws=ws, wz=np.zeros(6, np.int8), ys=F32(0.1),
               yz=np.uint8(3), b=b)
    ins.update(over)
    return _infos(*ins.values())


def test_qconv_shape_rule_errors_name_node_and_problem():
    node = Node("QConv", [], ["y"], {"pads": [1, 1, 1, 1]}, "conv7")
    out = SHAPE_RULES["QConv"](node, _qconv_ins())
    assert out[0].dtype == "uint8" and out[0].shape == (2, 6, 7, 6)
    assert SHAPE_RULES["QConv"](node, _qconv_ins()[:6])[0].dtype == "float32"
    with pytest.raises(GraphError, match=r"QConv node 'conv7'.*w_zero_point must be all zeros"):
        SHAPE_RULES["QConv"](node, _qconv_ins(wz=np.ones(6, np.int8)))
    with pytest.raises(GraphError, match=r"'conv7': x has dtype float32, expected uint8"):
        SHAPE_RULES["QConv"](node, _qconv_ins(x=np.zeros((2, 4, 7, 6), F32)))
    with pytest.raises(GraphError, match=r"w_scale of shape \(5,\) must be a scalar or \(6,\)"):
        SHAPE_RULES["QConv"](node, _qconv_ins(ws=np.ones(5, F32)))
    with pytest.raises(GraphError, match=r"fused activation 'Gelu'"):
        SHAPE_RULES["QConv"](Node("QConv", [], ["y"], {"activation": "Gelu"}, "c"),
                             _qconv_ins())
    z = np.zeros((2, 6, 5, 4), np.uint8)
    with pytest.raises(GraphError, match=r"residual z of shape \(2, 6, 5, 4\) must have the "
                                         r"output shape \(2, 6, 7, 6\)"):
        SHAPE_RULES["QConv"](node, _qconv_ins() + _infos(z, F32(1), np.uint8(0)))


def test_quantize_linear_refusals_are_clear():
    x = np.zeros((2, 4), F32)
    blocked = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1,
                                      block_size=2),
                     [("x", x)], {"s": np.ones((2, 2), F32), "z": np.zeros((2, 2), np.uint8)},
                     opset=21)
    with pytest.raises(UnsupportedOpError, match=r"QuantizeLinear \(block_size\)"):
        InferenceSession(blocked.SerializeToString())
    int4 = helper.make_model(helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT4, [2, 4])],
        [numpy_helper.from_array(F32(1), "s"),
         helper.make_tensor("z", TensorProto.INT4, [], [0])]),
        opset_imports=[helper.make_opsetid("", 21)])
    int4.ir_version = 10
    with pytest.raises(UnsupportedOpError, match=r"QuantizeLinear \(output dtype int4\)"):
        InferenceSession(int4.SerializeToString())
    # a hand-built graph hits the same check in the shape rule, with the full reason
    g = Graph([Node("DequantizeLinear", ["q", "s"], ["y"], {}, "dq")],
              [ValueInfo("q", "int4", (3,))], [ValueInfo("y", "float32", (3,))],
              {"s": np.ones((), F32)})
    with pytest.raises(UnsupportedOpError, match=r"input dtype int4 is not supported"):
        SHAPE_RULES["DequantizeLinear"](g.nodes[0], [TensorInfo("int4", (3,)),
                                                     TensorInfo.of(g.consts["s"])])


def test_dequantize_int32_bias_and_execute():
    b = np.array([-7, 0, 2 ** 30], np.int32)
    g = Graph([Node("DequantizeLinear", ["b", "s"], ["y"], {"axis": 0}, "dq")],
              [ValueInfo("b", "int32", (3,))], [ValueInfo("y", "float32", (3,))],
              {"s": np.array([0.5, 1.0, 2.0 ** -30], F32)})
    np.testing.assert_array_equal(execute(g, {"b": b})["y"], [-3.5, 0.0, 1.0])
