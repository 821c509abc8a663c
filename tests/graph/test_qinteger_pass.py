"""fuse_integer_matmul on models quantized by onnxruntime:

- quantize_dynamic (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(a_scale * w_scale)
  [-> Add(bias)], per tensor and per channel, int8 weights): every MatMulInteger becomes a
  QGemm with run-time a_scale / a_zp and a float output. The fused QGemm does the same float32
  operations in the same order as the ONNX ops, so edgenn's fast plan is bit-exact against
  the unfused graph run op by op on the NumPy references (no transcendental activations
  here); against onnxruntime within float noise (its MatMulInteger sums may saturate).
- QLinearMatMul (quantize_static, QOperator format): QGemm with a uint8 output, bit-exact
  against the reference and against onnxruntime's literal run.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

from edgenn.api import load  # noqa: E402
from support.helpers import ort_run  # noqa: E402
from edgenn.graph.passes import optimize  # noqa: E402
from edgenn import InferenceSession  # noqa: E402

F32 = np.float32
D, H, SEQ = 48, 96, 10


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, F32), name)


def mlp_block(seed=0, act="relu"):
    """x (2, SEQ, D): three projections of x (query / key / value-like, one shared dynamic
    quantization), a two-layer MLP with bias (+ Relu), a residual Add, a bias-free MatMul."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def linear(x, k, n, name, bias=True):
        inits.append(_const(name + "_w", rng.normal(0, 0.2, (k, n))))
        nodes.append(helper.make_node("MatMul", [x, name + "_w"], [name + "_mm"], name))
        if not bias:
            return name + "_mm"
        inits.append(_const(name + "_b", rng.normal(0, 0.5, n)))
        nodes.append(helper.make_node("Add", [name + "_mm", name + "_b"], [name + "_out"],
                                      name + "_add"))
        return name + "_out"

    q, k, v = (linear("x", D, D, n) for n in ("q", "k", "v"))
    nodes.append(helper.make_node("Add", [q, k], ["qk"], "qk"))
    nodes.append(helper.make_node("Add", ["qk", v], ["qkv"], "qkv"))
    h = linear("qkv", D, H, "fc1")
    if act == "relu":
        nodes.append(helper.make_node("Relu", [h], ["h_act"], "relu"))
        h = "h_act"
    elif act == "gelu":   # the erf spelling: x * (1 + erf(x / sqrt(2))) * 0.5
        inits.extend([_const("sqrt2", np.sqrt(2.0)), _const("one", 1.0), _const("half", 0.5)])
        nodes.extend([helper.make_node("Div", [h, "sqrt2"], ["g_div"], "g_div"),
                      helper.make_node("Erf", ["g_div"], ["g_erf"], "g_erf"),
                      helper.make_node("Add", ["g_erf", "one"], ["g_add"], "g_add"),
                      helper.make_node("Mul", [h, "g_add"], ["g_mul"], "g_mul"),
                      helper.make_node("Mul", ["g_mul", "half"], ["h_act"], "g_half")])
        h = "h_act"
    out = linear(h, H, D, "fc2")
    nodes.append(helper.make_node("Add", [out, "x"], ["res"], "residual"))
    y = linear("res", D, 7, "head", bias=False)
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, SEQ, D])], [helper.make_tensor_value_info(
            y, TensorProto.FLOAT, [2, SEQ, 7])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _out(model) -> str:
    return model.graph.output[0].name


def _feeds(seed):
    return {"x": np.random.default_rng(seed).normal(0, 1, (2, SEQ, D)).astype(F32)}


def quantize_dynamic(model, tmp_path, per_channel, reduce_range=False):
    src, dst = tmp_path / "m.onnx", tmp_path / f"m_dyn{int(per_channel)}{int(reduce_range)}.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst), per_channel=per_channel,
                                  reduce_range=reduce_range,
                                  weight_type=quantization.QuantType.QInt8)
    return dst


def unfused_reference(path, feeds):
    """The imported graph, only decluttered, run op by op on the NumPy references."""
    g = load(str(path), optimized=False)
    optimize(g, "declutter")
    assert "QGemm" not in g.op_counts()
    return InferenceSession(g, reference=True).run(None, feeds)[0]


@pytest.mark.parametrize("reduce_range", [False, True], ids=["8bit", "7bit"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_quantize_dynamic_fuses_and_is_bit_exact(per_channel, reduce_range, tmp_path):
    """7-bit weights (reduce_range): bit-exact with onnxruntime too. 8-bit weights: its
    AVX2 u8 x s8 sums saturate (measured here: 24% of the output range off the float
    model), edgenn's stay exact and closer to the float model."""
    model = mlp_block()
    path = quantize_dynamic(model, tmp_path, per_channel, reduce_range)
    imported = onnx.load(str(path))
    n_products = sum(n.op_type == "MatMulInteger" for n in imported.graph.node)
    assert n_products == 6
    fused = load(str(path))
    ops = dict(fused.op_counts())
    assert ops.get("QGemm") == n_products and "MatMulInteger" not in ops, ops
    assert "Cast" not in ops and "Relu" not in ops, ops   # casts gone, Relu in the epilogue
    # one DynamicQuantizeLinear per distinct input (x is shared by three products)
    assert ops["DynamicQuantizeLinear"] == sum(
        n.op_type == "DynamicQuantizeLinear" for n in imported.graph.node)
    biased = [n for n in fused.nodes if n.op == "QGemm" and len(n.inputs) > 12]
    assert len(biased) == 5, [n.inputs for n in fused.nodes if n.op == "QGemm"]
    session = InferenceSession(str(path))
    for seed in (1, 2):
        feeds = _feeds(seed)
        got = session.run(None, feeds)[0]
        np.testing.assert_array_equal(got, unfused_reference(path, feeds))
        ort_y = ort_run(path, feeds)[0]
        if reduce_range:
            np.testing.assert_array_equal(got, ort_y)
        else:
            float_y = ort_run(tmp_path / "m.onnx", feeds)[0]
            assert np.abs(got - float_y).max() <= np.abs(ort_y - float_y).max()
    chosen = {s.node.name: s.choice.kernel for s in session.plan.steps}
    runs = {s.node.name: s.choice.run for s in session.plan.steps}
    # the integer GEMM kernels (any tier: they carry their arithmetic), not a float fallback
    assert all(hasattr(runs[n.name], "wide") for n in fused.nodes if n.op == "QGemm"), chosen
    assert any(k == "dynamic_quantize_u8_c" for k in chosen.values()), chosen


def test_quantize_dynamic_gelu_block_close_to_reference(tmp_path):
    """Gelu (erf form) fused into the QGemm epilogue: float rounding of erf only."""
    model = mlp_block(seed=3, act="gelu")
    path = quantize_dynamic(model, tmp_path, per_channel=False)
    fused = load(str(path))
    acts = [n.attrs.get("activation") for n in fused.nodes if n.op == "QGemm"]
    assert "Gelu" in acts, dict(fused.op_counts())
    feeds = _feeds(4)
    got = InferenceSession(str(path)).run(None, feeds)[0]
    want = unfused_reference(path, feeds)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_qlinear_matmul_becomes_qgemm_bit_exact(tmp_path):
    model = mlp_block(seed=5)
    src, dst = tmp_path / "m.onnx", tmp_path / "m_qop.onnx"
    onnx.save(model, src)
    batches = iter([_feeds(s) for s in range(10, 14)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantization.quantize_static(str(src), str(dst), Reader(),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8,
                                 op_types_to_quantize=["MatMul"])
    imported = onnx.load(str(dst))
    n_q = sum(n.op_type == "QLinearMatMul" for n in imported.graph.node)
    assert n_q >= 5, [n.op_type for n in imported.graph.node]
    fused = load(str(dst))
    ops = dict(fused.op_counts())
    assert "QLinearMatMul" not in ops and ops.get("QGemm", 0) >= n_q, ops
    feeds = _feeds(20)
    got = InferenceSession(str(dst)).run(None, feeds)[0]
    np.testing.assert_array_equal(got, unfused_reference(dst, feeds))
    literal = ort_run(dst, feeds, literal=True)[0]
    err = np.abs(got - literal).max() / np.abs(literal).max()
    assert err <= 2e-2, err   # ORT's u8 x s8 kernels may saturate with 8-bit weights


def test_patterns_that_do_not_match_stay_correct(tmp_path):
    """uint8 weights (a non-zero weight zero point) are not fused: reference kernels."""
    model = mlp_block(seed=6)
    src, dst = tmp_path / "m.onnx", tmp_path / "m_u8.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QUInt8)
    fused = load(str(dst))
    assert "MatMulInteger" in fused.op_counts()
    feeds = _feeds(7)
    got = InferenceSession(str(dst)).run(None, feeds)[0]
    np.testing.assert_array_equal(got, unfused_reference(dst, feeds))


def small_cnn(seed=0):
    """x (1, 3, 20, 18): 3x3 padded conv + Relu, depthwise 3x3 stride 2 + Clip(0, 6),
    grouped 3x3 (group 2), 1x1 with bias, a 1x1 without bias."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(x, cin, cout, k, name, group=1, stride=1, pad=None, bias=True):
        pad = k // 2 if pad is None else pad
        inits.append(_const(name + "_w", rng.normal(0, 0.3, (cout, cin // group, k, k))))
        ins = [x, name + "_w"]
        if bias:
            inits.append(_const(name + "_b", rng.normal(0, 0.5, cout)))
            ins.append(name + "_b")
        nodes.append(helper.make_node("Conv", ins, [name], name, kernel_shape=[k, k],
                                      pads=[pad] * 4, strides=[stride] * 2, group=group))
        return name

    y = conv("x", 3, 8, 3, "c1")
    nodes.append(helper.make_node("Relu", [y], ["r1"], "relu1"))
    y = conv("r1", 8, 8, 3, "dw", group=8, stride=2)
    inits.extend([_const("lo", 0.0), _const("hi", 6.0)])
    nodes.append(helper.make_node("Clip", [y, "lo", "hi"], ["r2"], "clip"))
    y = conv("r2", 8, 12, 3, "grouped", group=2)
    y = conv(y, 12, 16, 1, "pw", pad=0)
    y = conv(y, 16, 5, 1, "head", pad=0, bias=False)
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 20, 18])], [helper.make_tensor_value_info(
            y, TensorProto.FLOAT, [1, 5, 10, 9])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("reduce_range", [False, True], ids=["8bit", "7bit"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_quantize_dynamic_convs_fuse_and_are_bit_exact(per_channel, reduce_range, tmp_path):
    """ConvInteger (onnxruntime's quantize_dynamic on a CNN) => QConv with the run-time
    x_scale, the conv bias and the Relu / Clip in its epilogue: bit-exact with the unfused
    graph, and with onnxruntime for 7-bit weights."""
    model = small_cnn()
    path = quantize_dynamic(model, tmp_path, per_channel, reduce_range)
    imported = onnx.load(str(path))
    n_convs = sum(n.op_type == "ConvInteger" for n in imported.graph.node)
    fused = load(str(path))
    ops = dict(fused.op_counts())
    if n_convs:
        assert ops.get("QConv") == n_convs and "ConvInteger" not in ops, ops
        assert "Relu" not in ops and "Clip" not in ops and "Cast" not in ops, ops
    session = InferenceSession(str(path))
    rng = np.random.default_rng(8)
    for _ in range(2):
        feeds = {"x": rng.normal(0, 1, (1, 3, 20, 18)).astype(F32)}
        got = session.run(None, feeds)[0]
        np.testing.assert_array_equal(got, unfused_reference(path, feeds))
        if reduce_range:
            np.testing.assert_array_equal(got, ort_run(path, feeds)[0])
    assert n_convs == 5, n_convs   # per_channel: onnxruntime keeps convs per tensor


def test_per_channel_conv_scale_shaped_to_broadcast(tmp_path):
    """A weight scale of shape (M, 1, 1) (one per output channel, broadcasting over NCHW)
    is fused as QConv's per-channel w_scale; a scale that would broadcast along W is not."""
    path = quantize_dynamic(small_cnn(), tmp_path, per_channel=False)
    m = onnx.load(str(path))
    scale = next(t for t in m.graph.initializer if t.name == "c1_w_scale")
    values = np.linspace(0.5, 1.5, 8, dtype=F32) * numpy_helper.to_array(scale)
    scale.CopyFrom(numpy_helper.from_array(values.reshape(8, 1, 1), "c1_w_scale"))
    bad = next(t for t in m.graph.initializer if t.name == "pw_w_scale")
    bad.CopyFrom(numpy_helper.from_array(
        np.full(9, numpy_helper.to_array(bad), F32), "pw_w_scale"))   # along W (9 columns)
    onnx.save(m, tmp_path / "edited.onnx")
    fused = load(str(tmp_path / "edited.onnx"))
    first = next(n for n in fused.nodes if n.op == "QConv")
    assert fused.consts[first.inputs[4]].shape == (8,)
    assert fused.op_counts()["QConv"] == 4 and fused.op_counts()["ConvInteger"] == 1
    feeds = {"x": np.random.default_rng(9).normal(0, 1, (1, 3, 20, 18)).astype(F32)}
    got = InferenceSession(str(tmp_path / "edited.onnx")).run(None, feeds)[0]
    np.testing.assert_array_equal(got, unfused_reference(tmp_path / "edited.onnx", feeds))


def test_fused_dynamic_model_round_trips_through_enn(tmp_path):
    """QGemm / QConv with run-time scales and float biases save to .enn and load back to
    the same graph and outputs."""
    from edgenn.api import convert
    for name, model, feeds in (("mlp", mlp_block(seed=11), _feeds(12)),
                               ("cnn", small_cnn(seed=13), {"x": np.random.default_rng(14)
                                .normal(0, 1, (1, 3, 20, 18)).astype(F32)})):
        path = quantize_dynamic(model, tmp_path, per_channel=False)
        enn = tmp_path / f"{name}.enn"
        graph = convert(str(path), str(enn))
        loaded = load(str(enn))
        assert dict(loaded.op_counts()) == dict(graph.op_counts())
        want = InferenceSession(str(path)).run(None, feeds)[0]
        np.testing.assert_array_equal(InferenceSession(str(enn)).run(None, feeds)[0], want)
