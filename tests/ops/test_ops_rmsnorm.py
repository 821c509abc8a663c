"""RMSNormalization (ONNX opset 23): the shape rule, the reference kernel and the planned
runtime against onnxruntime, over axes, scale shapes and epsilons; onnxruntime's
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization converted to it (the skip
sum output kept when read); the builder's fp32 decoder (8 layers) converted with no
ReduceMean left and its logits matching onnxruntime's.

Tolerance: one normalization in float32 by two runtimes (sums in different orders):
2e-6 relative to the output's largest magnitude; the decoder's logits 2e-5."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import edgenn
from edgenn import api
from edgenn.errors import GraphError
from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.oplist import load_all
from edgenn.registry import REFERENCE, TensorInfo

load_all()
RNG = np.random.default_rng(0)


def _f(*shape, mag=1.0):
    return (RNG.standard_normal(shape) * mag).astype(np.float32)


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _close(got, want, rtol=2e-6):
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(float(np.max(np.abs(want))), 1e-30)
    assert float(np.max(np.abs(got.astype(np.float64) - want))) <= rtol * scale


def _model(nodes, inputs: dict, inits: dict, outputs, opset=23, ms=False):
    vi = [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
          for k, v in inputs.items()]
    g = h.make_graph(nodes, "g", vi, [h.make_tensor_value_info(o, T.FLOAT, None)
                                      for o in outputs],
                     [nh.from_array(v, k) for k, v in inits.items()])
    opsets = [h.make_opsetid("", opset)] + ([h.make_opsetid("com.microsoft", 1)] if ms else [])
    model = h.make_model(g, opset_imports=opsets)
    model.ir_version = 10
    return model


CASES = [  # x shape, axis, scale shape, epsilon (None: the default, 1e-5), magnitude
    ((2, 5, 576), -1, (576,), 1e-6, 1.0),
    ((1, 1, 64), -1, (64,), None, 3.0),
    ((3, 7), 1, (7,), 1e-5, 1e3),
    ((2, 3, 9), 1, (3, 9), 1e-5, 1.0),     # two normalized dims
    ((2, 3, 9), -2, (1, 9), 1e-5, 1.0),    # scale broadcast over the normalized dims
    ((4, 6, 5), 0, (4, 6, 5), 1e-3, 1e-3),  # every dim normalized; eps matters
    ((2, 17), -1, (1,), 1e-5, 1.0),         # one scale value
]


@pytest.mark.parametrize("shape,axis,sshape,eps,mag", CASES)
@pytest.mark.parametrize("const_scale", [True, False])
def test_rms_normalization_matches_onnxruntime(shape, axis, sshape, eps, mag, const_scale):
    """The converted model (the C row kernel where it applies) and the reference kernel
    alone, each against onnxruntime's opset-23 RMSNormalization."""
    x, scale = _f(*shape, mag=mag), _f(*sshape)
    attrs = {"axis": axis} | ({} if eps is None else {"epsilon": eps})
    feeds = {"x": x} | ({} if const_scale else {"s": scale})
    model = _model([h.make_node("RMSNormalization", ["x", "s"], ["y"], **attrs)], feeds,
                   {"s": scale} if const_scale else {}, ["y"])
    want = _ort(model, feeds)[0]
    _close(edgenn.InferenceSession(model.SerializeToString()).run(None, feeds)[0], want)
    ref = REFERENCE["RMSNormalization"]({"axis": axis, "epsilon": 1e-5 if eps is None else eps,
                                         "stash_type": 1}, [x, scale])[0]
    _close(ref, want)


def test_converter_fills_the_opset_23_defaults():
    model = _model([h.make_node("RMSNormalization", ["x", "s"], ["y"])], {"x": _f(2, 8)},
                   {"s": _f(8)}, ["y"])
    node = next(n for n in api.convert(model, optimized=False).nodes
                if n.op == "RMSNormalization")
    assert node.attrs["axis"] == -1 and node.attrs["stash_type"] == 1
    assert abs(node.attrs["epsilon"] - 1e-5) < 1e-12


def test_shape_rule():
    x, s = TensorInfo("float32", (2, 3, 8)), TensorInfo("float32", (3, 8))
    node = Node("RMSNormalization", ["x", "s"], ["y"], {"axis": -2}, "rms")
    assert infer_node(node, [x, s])[0] == TensorInfo("float32", (2, 3, 8))
    for attrs, sc in [({"axis": 3}, s), ({"axis": -1}, TensorInfo("float32", (5,))),
                      ({"axis": -1, "stash_type": 7}, s)]:
        with pytest.raises(GraphError, match="RMSNormalization node 'rms'"):
            infer_node(Node("RMSNormalization", ["x", "s"], ["y"], attrs, "rms"), [x, sc])
    with pytest.raises(GraphError, match="not a float type"):
        infer_node(node, [TensorInfo("int32", (2, 3, 8)), s])


def _ms(op, ins, outs, **attrs):
    return h.make_node(op, ins, outs, domain="com.microsoft", **attrs)


@pytest.mark.parametrize("axis,eps", [(-1, 1e-6), (-1, None), (-2, 1e-5)])
def test_simplified_layer_norm_is_one_rms_normalization(axis, eps):
    x = _f(2, 5, 16)
    g = _f(16) if axis == -1 else _f(5, 16)
    attrs = {"axis": axis} | ({} if eps is None else {"epsilon": eps})
    model = _model([h.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], **attrs)],
                   {"x": x}, {"g": g}, ["y"], opset=17)
    ops = api.convert(model).op_counts()
    assert ops.get("RMSNormalization") == 1 and "ReduceMean" not in ops, ops
    _close(edgenn.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0],
           _ort(model, {"x": x})[0])


@pytest.mark.parametrize("bias,sum_out", [(False, False), (True, False), (False, True),
                                          (True, True)])
def test_skip_simplified_layer_norm(bias, sum_out):
    """input + skip [+ bias] then the norm; the sum output (output 3) written by the last
    Add when the model reads it."""
    feeds = {"x": _f(2, 5, 16), "s": _f(2, 5, 16)}
    inits = {"g": _f(16)} | ({"b": _f(16)} if bias else {})
    outs = ["y", "", "", "sum"] if sum_out else ["y"]
    model = _model([_ms("SkipSimplifiedLayerNormalization",
                        ["x", "s", "g"] + (["b"] if bias else []), outs, epsilon=1e-6)],
                   feeds, inits, [o for o in outs if o], opset=17, ms=True)
    ops = api.convert(model).op_counts()
    assert ops.get("RMSNormalization") == 1 and "ReduceMean" not in ops, ops
    assert ops.get("Add") == 1 + bias and "Identity" not in ops, ops
    got = edgenn.InferenceSession(model.SerializeToString()).run(None, feeds)
    for g_, w in zip(got, _ort(model, feeds)):
        _close(g_, w)


def test_builder_decoder_norms_are_rms_normalization():
    """Every (Skip)SimplifiedLayerNormalization of the builder's fp32 decoder (the small
    Llama of support/decoders.py: 2 layers, 2 key / value heads of 16) is one
    RMSNormalization (no ReduceMean left), and the logits of an 8-token prompt match
    onnxruntime's."""
    from support.decoders import decoder
    LM_FP32 = str(decoder("fp32") / "model.onnx")
    graph = api.convert(LM_FP32)
    ops = graph.op_counts()
    assert "ReduceMean" not in ops and ops.get("RMSNormalization", 0) == 5, ops
    feeds = {"input_ids": RNG.integers(0, 1000, (1, 8)).astype(np.int64),
             "attention_mask": np.ones((1, 8), np.int64)}
    for i in range(2):    # no past: the cache of 2 key / value heads of 16, empty
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = np.zeros((1, 2, 0, 16), np.float32)
    import onnxruntime as ort
    want = ort.InferenceSession(LM_FP32, providers=["CPUExecutionProvider"]).run(
        ["logits"], feeds)[0]
    got = edgenn.InferenceSession(LM_FP32).run(["logits"], feeds)[0]
    _close(got, want, rtol=2e-5)


@pytest.mark.parametrize("axis", [-1, 1])
def test_exported_as_its_definition(axis):
    """edgenn export writes opset 21: RMSNormalization as Mul, ReduceMean, Add, Sqrt, Div,
    Mul, which onnxruntime runs to the same values."""
    from edgenn.converters.onnx.exporter import to_model
    x, scale = _f(2, 5, 16), _f(16) if axis == -1 else _f(5, 16)
    model = _model([h.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis,
                                epsilon=1e-4)], {"x": x}, {"s": scale}, ["y"])
    exported = to_model(api.convert(model))
    assert "RMSNormalization" not in {n.op_type for n in exported.graph.node}
    _close(_ort(exported, {"x": x})[0], _ort(model, {"x": x})[0])
