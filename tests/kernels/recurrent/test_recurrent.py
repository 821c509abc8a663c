"""LSTM, GRU, RNN: the reference against onnxruntime, the fast kernels (every tier this CPU
runs, and the AVX2 / AVX-512F bodies built on SIMDe) against the reference in float64.

Bound of the fast kernels, from the arithmetic: one step's pre-activations are sums of
n = I + H + 2 float32 products, within gamma_n = n eps / (1 - n eps) of the exact sum
relative to m = max(|x| |W| + |h| |R| + |b|) (Higham 2002, (3.5)); the activations add
at most 8 eps (exp to ~2 eps, one division, tanh through 1 - e over 1 + e); every gate
is 1-Lipschitz in its pre-activation and the cell update contracts (|f| < 1), so the
error of a step adds to what it inherits: after T steps at most
T (gamma_n m + 8 eps) (times max(|h|, 1) for Relu, which is not bounded by 1).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from support import kernel_tables as tables
from support.helpers import helper, make_model, ort_run

import edgenn
from edgenn.graph.ir import Node
from edgenn.kernels.recurrent import _recurrent; from edgenn.kernels.recurrent import _recurrent_emu; from edgenn.kernels.gemm import _sgemm; from edgenn.kernels.gemm import _sgemm_emu; from edgenn.kernels.recurrent import recurrent
from edgenn.kernels.reference.recurrent import run as reference_run
from edgenn.registry import TensorInfo

EPS = float(np.finfo(np.float32).eps)
PATHS = tables.paths(_recurrent.rows(), _recurrent_emu.rows())   # every row of _recurrent.h
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _lib(path):
    """-> (recurrence module, sgemm module of the same build, row)"""
    lib, row = tables.lib_and_row(path, _recurrent, _recurrent_emu)
    return lib, _sgemm_emu if lib is _recurrent_emu else _sgemm, row


def _weights(rng, op, nd, H, I, scale=1.0):
    """torch's initialization, U(-1/sqrt(H), 1/sqrt(H)), times scale."""
    g, k = GATES[op], scale / np.sqrt(H)
    w = rng.uniform(-k, k, (nd, g * H, I)).astype(np.float32)
    r = rng.uniform(-k, k, (nd, g * H, H)).astype(np.float32)
    b = rng.uniform(-k, k, (nd, 2 * g * H)).astype(np.float32)
    return w, r, b


def _case(rng, op, T, B, I, H, direction="forward", layout=0, bias=True, init=True,
          lens=False, peep=False, attrs=None, scale=1.0):
    """-> (node, inputs: list of arrays / None) for one recurrent node."""
    nd = 2 if direction == "bidirectional" else 1
    w, r, b = _weights(rng, op, nd, H, I, scale)
    x = rng.standard_normal((B, T, I) if layout else (T, B, I)).astype(np.float32)
    state = (B, nd, H) if layout else (nd, B, H)
    ins = [x, w, r, b if bias else None,
           rng.integers(0, T + 1, B).astype(np.int32) if lens else None,
           rng.standard_normal(state).astype(np.float32) * 0.5 if init else None]
    if op == "LSTM":
        ins += [rng.standard_normal(state).astype(np.float32) * 0.5 if init else None,
                rng.uniform(-0.5, 0.5, (nd, 3 * H)).astype(np.float32) if peep else None]
    a = {"hidden_size": H, "direction": direction, "layout": layout, **(attrs or {})}
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(ins)]
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    return Node(op, names, outs, a, f"{op.lower()}0"), ins


def _infos(ins, consts=(1, 2, 3, 7)):
    return [None if v is None else TensorInfo(v.dtype.name, v.shape,
                                              v if k in consts else None)
            for k, v in enumerate(ins)]


def _fast(path, node, ins):
    lib, gemm_lib, row = _lib(path)
    want = reference_run(node, ins)
    outs = [TensorInfo("float32", o.shape) for o in want]
    run = recurrent._make(row, lib, gemm_lib)(node, _infos(ins), outs)
    got = [np.full(o.shape, np.nan, np.float32) for o in want]
    run(ins, got)
    return got


def _bound(node, ins, exact) -> float:
    x, w, r = ins[0], ins[1], ins[2]
    hmax = max(1.0, float(np.max(np.abs(exact[0]), initial=0)),
               float(np.max(np.abs(ins[5]), initial=0)) if ins[5] is not None else 0.0)
    bmax = float(np.max(np.abs(ins[3]))) if ins[3] is not None else 0.0
    mag = float(np.max(np.abs(w).sum(-1))) * float(np.max(np.abs(x))) + \
        float(np.max(np.abs(r).sum(-1))) * hmax + 2 * bmax
    n = x.shape[-1] + r.shape[-1] + 2
    T = x.shape[1] if node.attrs.get("layout") else x.shape[0]
    return T * (n * EPS / (1 - n * EPS) * mag + 8 * EPS) * hmax


def _check_fast(path, node, ins):
    got = _fast(path, node, ins)
    exact = reference_run(node, [None if v is None else
                                 (v.astype(np.float64) if v.dtype == np.float32 else v)
                                 for v in ins])
    bound = _bound(node, ins, exact)
    for g, e in zip(got, exact):
        assert g.shape == e.shape
        assert np.all(np.isfinite(g))
        err = float(np.max(np.abs(g - e), initial=0))
        assert err <= bound, (err, bound)


SHAPES = [(1, 1, 1, 1), (5, 1, 3, 8), (7, 3, 5, 17), (4, 2, 33, 64), (3, 5, 16, 130),
          (2, 4, 8, 9), (3, 9, 6, 20)]   # (T, B, I, H): H around the 8 / 16 / 64 /
# 128-float blocks; B around the 4 batch rows that share one pass over R^T


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fast_matches_float64(path, op, shape):
    rng = np.random.default_rng(hash((op, shape)) % 2**32)
    T, B, I, H = shape
    for direction, layout in itertools.product(("forward", "reverse", "bidirectional"), (0, 1)):
        node, ins = _case(rng, op, T, B, I, H, direction, layout)
        _check_fast(path, node, ins)


VARIANTS = {
    "no-bias-no-state": dict(bias=False, init=False),
    "sequence-lens": dict(lens=True),
    "clip": dict(attrs={"clip": 0.3}, scale=3.0),
    "relu": dict(attrs={"activations": ["Relu"] * 3}, scale=0.5),
    "sigmoid-all": dict(attrs={"activations": ["Sigmoid"] * 3}),
    "large-weights": dict(scale=8.0),      # saturated gates
}
LSTM_VARIANTS = {"peepholes": dict(peep=True),
                 "input-forget": dict(attrs={"input_forget": 1}, peep=True)}
GRU_VARIANTS = {"linear-before-reset": dict(attrs={"linear_before_reset": 1}),
                "linear-before-reset-no-bias": dict(attrs={"linear_before_reset": 1},
                                                    bias=False)}


def _variant_cases():
    for op in GATES:
        extra = LSTM_VARIANTS if op == "LSTM" else GRU_VARIANTS if op == "GRU" else {}
        for name, kw in {**VARIANTS, **extra}.items():
            yield op, name, kw


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op,variant,kw", list(_variant_cases()),
                         ids=[f"{o}-{n}" for o, n, _ in _variant_cases()])
def test_fast_attribute_extremes(path, op, variant, kw):
    rng = np.random.default_rng(7)
    kw = dict(kw)
    attrs = dict(kw.pop("attrs", {}))
    if "activations" in attrs:
        attrs["activations"] = attrs["activations"][:{"LSTM": 3, "GRU": 2, "RNN": 1}[op]] * 2
    for direction, layout in (("bidirectional", 0), ("reverse", 1)):
        node, ins = _case(rng, op, 6, 3, 5, 12, direction, layout, attrs=attrs, **kw)
        _check_fast(path, node, ins)


def test_sequence_lens_zero_and_full():
    """L_b = 0: zero rows and zero Y_h / Y_c (onnxruntime's reading); L_b = T runs every
    step; L_b = 2 stops after two."""
    rng = np.random.default_rng(3)
    node, ins = _case(rng, "LSTM", 5, 3, 4, 8, "bidirectional", init=True)
    ins[4] = np.array([0, 5, 2], np.int32)
    for path in PATHS:
        y, yh, yc = _fast(path, node, ins)
        assert np.all(y[:, :, 0] == 0) and np.all(y[2:, :, 2] == 0)
        assert np.all(yh[:, 0] == 0) and np.all(yc[:, 0] == 0)
        np.testing.assert_array_equal(yh[0, 2], y[1, 0, 2])   # forward: after step 1
        assert np.all(y[:, :, 1] != 0)


def _onnx_model(node, ins, opset=14):
    """One recurrent node as an ONNX model: weights as initializers, the rest inputs."""
    consts = {n: v for k, (n, v) in enumerate(zip(node.inputs, ins)) if n and k in (1, 2, 3, 7)}
    feeds = {n: v for k, (n, v) in enumerate(zip(node.inputs, ins))
             if n and k not in (1, 2, 3, 7)}
    ref = reference_run(node, ins)
    onode = helper.make_node(node.op, node.inputs, node.outputs, **node.attrs)
    model = make_model([onode], [(n, v.dtype, v.shape) for n, v in feeds.items()],
                       [(n, np.float32, o.shape) for n, o in zip(node.outputs, ref)],
                       consts, opset=opset)
    return model, feeds


ORT_CASES = [
    ("LSTM", dict(direction="bidirectional", lens=True, peep=True)),
    ("LSTM", dict(direction="reverse", attrs={"clip": 0.5}, scale=3.0)),
    ("LSTM", dict(direction="forward", attrs={"input_forget": 1})),
    ("LSTM", dict(direction="forward", attrs={"activations": ["HardSigmoid", "Softsign",
                                                              "LeakyRelu"],
                                              "activation_alpha": [0.3, 0.2],
                                              "activation_beta": [0.4]})),
    ("GRU", dict(direction="bidirectional", lens=True)),
    ("GRU", dict(direction="forward", attrs={"linear_before_reset": 1})),
    ("GRU", dict(direction="reverse", attrs={"activations": ["Sigmoid", "Relu"]}, scale=0.5)),
    ("RNN", dict(direction="bidirectional", lens=True)),
    ("RNN", dict(direction="forward", attrs={"activations": ["Relu"]}, scale=0.5)),
    ("RNN", dict(direction="forward", attrs={"activations": ["ScaledTanh"],
                                             "activation_alpha": [1.5],
                                             "activation_beta": [0.7]})),
    ("RNN", dict(direction="reverse", attrs={"activations": ["Elu"]})),
]


@pytest.mark.parametrize("op,kw", ORT_CASES, ids=[f"{o}-{i}" for i, (o, _) in enumerate(ORT_CASES)])
def test_matches_onnxruntime(op, kw):
    """Reference and the planned session (fast kernel where it applies) vs onnxruntime."""
    rng = np.random.default_rng(5)
    kw = dict(kw)
    node, ins = _case(rng, op, 9, 3, 6, 10, kw.pop("direction"), **kw)
    model, feeds = _onnx_model(node, ins)
    want = ort_run(model, feeds)
    sess = edgenn.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_tuner_picks_a_fast_kernel():
    rng = np.random.default_rng(1)
    node, ins = _case(rng, "LSTM", 20, 1, 32, 64, "bidirectional")
    model, feeds = _onnx_model(node, ins)
    sess = edgenn.InferenceSession(model.SerializeToString())
    kernels = [s.choice.kernel for s in sess.plan.steps]
    assert kernels and all(k.startswith("lstm_sgemm_gemv__") for k in kernels), kernels
    np.testing.assert_allclose(sess.run(None, feeds)[0], ort_run(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)


def test_bad_attributes_are_named_errors():
    """An unknown direction or activation, or the wrong number of activations: the
    import refuses the node by name and says why."""
    from onnx import TensorProto
    for attrs, why in (({"direction": "sideways"}, "direction"),
                       ({"activations": ["Gelu"]}, "activation"),
                       ({"activations": ["Tanh", "Tanh", "Tanh"]}, "activations")):
        onode = helper.make_node("RNN", ["x", "w", "r"], ["y"], "rnn0", hidden_size=4, **attrs)
        g = helper.make_graph(
            [onode], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [helper.make_tensor("w", TensorProto.FLOAT, [1, 4, 2], np.zeros(8)),
             helper.make_tensor("r", TensorProto.FLOAT, [1, 4, 4], np.zeros(16))])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
        with pytest.raises(edgenn.UnsupportedOpError, match=f"rnn0(.|\\n)*|{why}") as e:
            edgenn.InferenceSession(m.SerializeToString())
        assert "rnn0" in str(e.value) and why in str(e.value)


def test_dynamic_quantized_lstm_from_onnxruntime(tmp_path):
    """quantize_dynamic writes com.microsoft.DynamicQuantizeLSTM (int8 W, R); edgenn
    dequantizes the weights at import and runs its float LSTM. onnxruntime quantizes the
    activations too, so the measure is the float model: edgenn must be at least as close
    to it as onnxruntime's quantized run is (both carry the int8 weight error)."""
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(32, 48, bidirectional=True)
            self.head = torch.nn.Linear(96, 10)

        def forward(self, x):
            return self.head(self.rnn(x)[0])
    torch.manual_seed(0)
    fp32, q = tmp_path / "tagger.onnx", tmp_path / "tagger.q.onnx"
    torch.onnx.export(Tagger().eval(), (torch.randn(20, 1, 32),), str(fp32), dynamo=False,
                      opset_version=14, input_names=["x"])
    quantize_dynamic(str(fp32), str(q), weight_type=QuantType.QInt8)
    import onnx
    assert "DynamicQuantizeLSTM" in {n.op_type for n in onnx.load(str(q)).graph.node}
    x = np.random.default_rng(0).standard_normal((20, 1, 32)).astype(np.float32)
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    want = ort.InferenceSession(str(fp32), o, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    theirs = ort.InferenceSession(str(q), o, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    sess = edgenn.InferenceSession(str(q))
    assert any(s.node.op == "LSTM" and s.choice.kernel.startswith("lstm_sgemm_gemv")
               for s in sess.plan.steps)
    ours = sess.run(None, {"x": x})[0]
    scale = np.abs(want).max()
    err_ours, err_theirs = np.abs(ours - want).max() / scale, np.abs(theirs - want).max() / scale
    assert err_ours <= err_theirs and err_ours < 0.05, (err_ours, err_theirs)
