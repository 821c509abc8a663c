"""The first plan's cost model (runtime/costmodel.py): the work features of a node, the
fit, the pick, and a first plan that binds its predictions."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgenn
from edgenn.graph.ir import Node
from edgenn.runtime import costmodel
from edgenn.registry import TensorInfo


def _info(shape, value=None, dtype="float32"):
    return TensorInfo(dtype, tuple(shape), value)


@pytest.mark.parametrize("n, c, h, w, k, kh, stride, group", [
    (1, 16, 28, 28, 32, 3, 1, 1), (2, 32, 14, 14, 32, 3, 2, 32), (1, 64, 7, 7, 128, 1, 1, 1)])
def test_conv_features_are_its_work(n, c, h, w, k, kh, stride, group):
    oh = (h + 2 * (kh // 2) - kh) // stride + 1
    weight = np.zeros((k, c // group, kh, kh), np.float32)
    node = Node("Conv", ["x", "w"], ["y"], {"group": group, "strides": [stride] * 2}, "c")
    f = costmodel.features(node, [_info((n, c, h, w)), _info(weight.shape, weight)],
                           [_info((n, k, oh, oh))])
    macs = n * k * oh * oh * (c // group) * kh * kh
    io = 4 * (n * c * h * w + n * k * oh * oh)
    want = [macs, io, weight.nbytes, k, macs / (n * k * oh * oh), n * oh * oh]
    assert f == [round(math.log2(v + 1), 4) for v in want]


def test_fit_recovers_a_power_law():
    """time = 2e-10 * macs^0.9 * io^0.1: the fit predicts unseen shapes within 1%."""
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(40):
        f = [float(v) for v in rng.uniform(10, 30, len(costmodel.FEATURES))]
        samples.append(("Conv", "k", f, 2e-10 * 2 ** (0.9 * f[0] + 0.1 * f[1])))
    model = costmodel.CostModel(samples)
    for _ in range(10):
        f = [float(v) for v in rng.uniform(12, 28, len(costmodel.FEATURES))]
        want = 2e-10 * 2 ** (0.9 * f[0] + 0.1 * f[1])
        assert abs(model.predict("Conv", "k", f) / want - 1) < 0.01


def test_few_samples_scale_with_the_work():
    """Under MIN_SAMPLES a kernel's time is taken as proportional to its multiply-adds."""
    model = costmodel.CostModel([("Gemm", "g", [20.0] + [1.0] * 5, 1e-3)])
    assert model.predict("Gemm", "g", [21.0] + [9.0] * 5) == pytest.approx(2e-3)
    assert model.predict("Gemm", "other", [21.0] * 6) is None
    assert model.predict("Conv", "g", [21.0] * 6) is None


def test_pick_is_the_lowest_prediction(monkeypatch):
    node = Node("Gemm", ["a", "b"], ["y"], {}, "g")
    ins, outs = [_info((4, 64)), _info((64, 32), np.zeros((64, 32), np.float32))], \
        [_info((4, 32))]
    f = costmodel.features(node, ins, outs)
    fake = costmodel.CostModel([("Gemm", "slow", f, 2e-5)] + [("Gemm", "fast", f, 1e-5)])
    monkeypatch.setattr(costmodel, "current", lambda threads: fake)
    best, predicted = costmodel.pick(node, ins, outs, ["slow", "fast", "unknown"], 1)
    assert best == "fast" and set(predicted) == {"slow", "fast"}
    assert predicted["fast"] == pytest.approx(1e-5)
    assert costmodel.pick(node, ins, outs, ["unknown"], 1) == (None, {})


def _convs(channels, hw, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(channels, channels[1:])):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((b, a, 3, 3)) / np.sqrt(9 * a)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"y{i}"], pads=[1, 1, 1, 1]))
        prev = f"y{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, channels[0], hw, hw])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_first_plan_binds_predictions_from_what_the_tuner_measured(tmp_path, monkeypatch):
    """One network tuned (its measurements cached with their features); a differently
    sized one then gets a first plan predicted from them, right and untimed."""
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costmodel, "shipped_samples", lambda threads: [])
    edgenn.InferenceSession(_convs((3, 16, 32, 32), 32), tune="full")
    other = _convs((3, 24, 24, 48), 40, seed=1)
    monkeypatch.delenv("EDGENN_TUNE")
    sess = edgenn.InferenceSession(other)
    first = sess.plan
    reasons = [s.choice.reason for s in first.steps]
    assert any(r == "first plan: predicted by the cost model" for r in reasons), reasons
    assert all(s.choice.times for s in first.steps if "predicted" in s.choice.reason)
    x = np.random.default_rng(3).standard_normal((1, 3, 40, 40)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = edgenn.InferenceSession(other, reference=True).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert sess.wait_tuned(120)


def test_shipped_samples_cover_this_tier_or_none():
    """A shipped file, where one exists for this CPU's tier, holds well-formed samples."""
    samples = costmodel.shipped_samples(1)
    for op, kernel, feats, seconds in samples[:200]:
        assert isinstance(op, str) and isinstance(kernel, str)
        assert len(feats) == len(costmodel.FEATURES) and seconds > 0
