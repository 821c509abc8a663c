"""On-device fine-tuning (edgenn/train/finetune.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgenn
from edgenn.demo import DEMO_MODEL
from edgenn.errors import UnsupportedOpError
from edgenn.train import finetune
from edgenn.train.finetune import _grads

D = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))


def _accuracy(model, x, y) -> float:
    return float(np.mean(edgenn.InferenceSession(model).run(None, {"image": x})[0].argmax(1) == y))


def test_digits_last_layer_on_a_split_it_never_saw(tmp_path):
    """The device's camera mirrors the digits (a domain the model was not trained on):
    the last layer tuned on 200 of the held-out digits, mirrored, is judged on the other
    97, which neither training nor the model's own training saw."""
    x, y = D["images"][:, :, :, ::-1].copy(), D["labels"]
    order = np.random.default_rng(1).permutation(len(y))
    fit, held = order[:200], order[200:]
    before = _accuracy(DEMO_MODEL, x[held], y[held])
    tuned, report = finetune(DEMO_MODEL, x[fit], y[fit], layers=1, epochs=100)
    after = _accuracy(tuned, x[held], y[held])
    assert report["layers"] == ["/head/Gemm"] and report["samples"] == {"train": 160, "val": 40}
    assert after >= before + 0.2, (before, after)        # measured 0.28 -> 0.65
    path = tmp_path / "tuned.enn"
    edgenn.save(tuned, str(path))                        # saved back, runs the same
    np.testing.assert_array_equal(
        edgenn.InferenceSession(str(path)).run(None, {"image": x[held]})[0],
        edgenn.InferenceSession(tuned).run(None, {"image": x[held]})[0])
    # the body is untouched, the original model too
    assert _accuracy(DEMO_MODEL, D["images"], D["labels"]) > 0.98


def _mlp(rng):
    """x (N, 6) -> Gemm 6x16 -> Relu -> Gemm 16x16 [-> Relu] -> Gemm 16x3 -> Softmax."""
    w = lambda *s: numpy_helper.from_array(rng.normal(0, 0.5, s).astype(np.float32))  # noqa
    inits = [w(16, 6), w(16), w(16, 16), w(16), w(3, 16)]
    for t, n in zip(inits, ["w1", "b1", "w2", "b2", "w3"]):
        t.name = n
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["h2"], transB=1, name="fc2"),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("Gemm", ["r2", "w3"], ["logits"], transB=1, alpha=0.5, name="fc3"),
             helper.make_node("Softmax", ["logits"], ["p"], axis=-1, name="softmax")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      ["n", 6])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_two_layers_with_relu_and_no_bias_learn_a_new_task():
    rng = np.random.default_rng(0)
    model = _mlp(rng)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5)      # 3 classes the head never saw
    tuned, report = finetune(model, x[:300], y[:300], layers=2, epochs=150, lr=0.01)
    assert report["layers"] == ["fc2", "fc3"]
    sess = edgenn.InferenceSession(tuned)
    acc = float(np.mean(sess.run(None, {"x": x[300:]})[0].argmax(1) == y[300:]))
    base = float(np.mean(edgenn.InferenceSession(model).run(None, {"x": x[300:]})[0]
                         .argmax(1) == y[300:]))
    assert acc >= 0.8 and acc > base + 0.2, (base, acc)
    g = edgenn.load(model)
    assert np.array_equal(tuned.consts["w1"], g.consts["w1"])     # the frozen body


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(3)
    params = [(rng.normal(size=(5, 4)), rng.normal(size=5)), (rng.normal(size=(3, 5)),
                                                              rng.normal(size=3))]
    relus = [True, False]
    x, y = rng.normal(size=(7, 4)), rng.integers(0, 3, 7)
    loss, grads = _grads(params, relus, x, y, 1e-2)
    eps = 1e-6
    for k, (w, b) in enumerate(params):
        for arr, grad in ((w, grads[k][0]), (b, grads[k][1])):
            for idx in [(0,) * arr.ndim, tuple(s - 1 for s in arr.shape)]:
                old = arr[idx]
                arr[idx] = old + eps
                up = _grads(params, relus, x, y, 1e-2)[0]
                arr[idx] = old - eps
                down = _grads(params, relus, x, y, 1e-2)[0]
                arr[idx] = old
                assert abs((up - down) / (2 * eps) - grad[idx]) < 1e-5


def test_refuses_a_model_without_a_dense_head():
    from support.helpers import make_model
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", np.float32, [2, 3])],
                   [("y", np.float32, [2, 3])])
    with pytest.raises(UnsupportedOpError, match="fully connected"):
        finetune(m.SerializeToString(), np.zeros((4, 2, 3), np.float32), [0, 1, 0, 1])


def test_cli_finetune(tmp_path, capsys):
    from edgenn.cli import main
    x, y = D["images"][:, :, :, ::-1].copy(), D["labels"]
    np.savez(tmp_path / "mine.npz", images=x[:200], labels=y[:200])
    out = tmp_path / "tuned.enn"
    assert main(["finetune", DEMO_MODEL, "--data", str(tmp_path / "mine.npz"), "--epochs",
                 "60", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fine-tuned /head/Gemm on 160 samples" in text and out.exists()
    assert _accuracy(str(out), x[200:], y[200:]) > _accuracy(DEMO_MODEL, x[200:], y[200:])
    assert main(["finetune", DEMO_MODEL, "--data", str(tmp_path / "mine.npz"), "--labels",
                 "nope", "-o", str(out)]) != 0          # a clean refusal
