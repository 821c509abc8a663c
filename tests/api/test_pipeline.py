"""edgenn.compose: a voice-activity gate in front of a recognizer as one graph, one .enn,
one session. silero-vad (the wheel's real model) scores each chunk; only when it says
speech does the recognizer (a Conv1d + GRU + Linear built here with torch) run, else the
pipeline returns zero logits. Streamed over real speech (tests/support/speech.py) and checked
chunk by chunk against the same logic written in Python around the two separate models;
both branches must be taken."""
import importlib.resources

import numpy as np
import pytest
import torch
from support import speech

import edgenn
from edgenn.torchexport import export_onnx

T_OUT, CLASSES = 69, 30


class Recognizer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 16, 25, stride=8)
        self.rnn = torch.nn.GRU(16, 32, batch_first=True)
        self.head = torch.nn.Linear(32, CLASSES)

    def forward(self, x):                           # x (1, 576) -> (1, 69, 30)
        h = torch.relu(self.conv(x[:, None])).transpose(1, 2)
        return self.head(self.rnn(h)[0]).log_softmax(-1)


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    asr, _ = export_onnx(Recognizer().eval(), (torch.randn(1, 576),), ["x"], ["logits"])
    vad = str(importlib.resources.files("silero_vad").joinpath("data/silero_vad.onnx"))
    return vad, asr


def _pipeline(vad, asr):
    p = edgenn.compose({"audio": ("float32", (1, 576)), "state": ("float32", (2, 1, 128))})
    v = p.call(vad, name="vad", input=p["audio"], state=p["state"], sr=p.const(16000))
    speech_now = p.op("Greater", v["output"], p.const(0.5, "float32"))
    logits = p.if_(speech_now,
                   lambda b: [b.call(asr, name="asr", x=p["audio"])["logits"]],
                   lambda b: [b.const(np.zeros((1, T_OUT, CLASSES), np.float32))])
    return p.build(prob=v["output"], stateN=v["stateN"], logits=logits[0])


def test_gate_then_recognizer_matches_the_python_glue(models, tmp_path):
    speech.require_espeak()
    vad, asr = models
    graph = _pipeline(vad, asr)
    assert [n.op for n in graph.nodes].count("If") >= 1
    enn = tmp_path / "pipeline.enn"
    edgenn.save(graph, str(enn))
    one = edgenn.InferenceSession(str(enn))
    sess_vad, sess_asr = edgenn.InferenceSession(vad), edgenn.InferenceSession(asr)
    audio, _ = speech.speech(16000)
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros((1, 64), np.float32)
    taken = set()
    for k in range(len(audio) // 512):
        x = np.concatenate([context, audio[None, k * 512:(k + 1) * 512]], axis=1)
        context = x[:, -64:]
        prob, state_out, logits = one.run(None, {"audio": x, "state": state})
        p_ref, s_ref = sess_vad.run(None, {"input": x, "state": state,
                                           "sr": np.array(16000, np.int64)})
        # the two sessions may time different kernels: test_silero_vad.py's tolerances
        np.testing.assert_allclose(prob, p_ref, rtol=0, atol=1e-4)
        assert np.abs(state_out - s_ref).max() <= 1e-5 * np.abs(s_ref).max()
        spoke = bool(prob.reshape(-1)[0] > 0.5)        # the gate's own decision
        taken.add(spoke)
        want = sess_asr.run(None, {"x": x})[0] if spoke else np.zeros_like(logits)
        np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-5)
        state = s_ref
    assert taken == {True, False}


def test_bad_calls_are_named(models):
    vad, _ = models
    p = edgenn.compose({"audio": ("float32", (1, 576))})
    with pytest.raises(edgenn.InputError, match="missing inputs"):
        p.call(vad, input=p["audio"])
    with pytest.raises(edgenn.InputError, match="no pipeline input"):
        p["nope"]
    with pytest.raises(edgenn.InputError, match="list of pipeline tensors"):
        p.if_(p["audio"], lambda b: 3, lambda b: [])
