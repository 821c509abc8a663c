"""silero-vad (the ONNX the silero-vad wheel ships: LSTM inside nested If branches, a
run-time If on the sample rate) through its real streaming use on real speech
(tests/support/speech.py: espeak-ng sentences between silences), chunk by chunk with the carried
state, against onnxruntime at every chunk; then what the model is for: it finds the
speech.

Streaming as silero's own OnnxWrapper does it: chunks of 512 samples at 16 kHz (256 at
8 kHz), each fed with the last 64 (32) samples of the one before as context, the state
(2, 1, 128) carried. One session serves both rates (the If picks its branch per call).

Tolerance: two runtimes with different convolution algorithms (Winograd, im2col, packed
GEMM) and LSTM kernels; float32 sums of a few thousand products differ by ~1e-6 relative
to their magnitude. The LSTM cell state is not bounded by 1 (it reaches ~60 on this
audio), so the state is compared relative to its largest entry, 1e-5 (measured: 1.3e-6),
and the probability, a sigmoid of it, within 1e-4 (measured: 1.7e-5), over ~370 chunks
of carried state.
"""
from __future__ import annotations

import importlib.resources

import numpy as np
import pytest
from support import speech

import edgenn

STATE_RTOL, PROB_ATOL = 1e-5, 1e-4
CONTEXT = {16000: 64, 8000: 32}
CHUNK = {16000: 512, 8000: 256}


def _model(name: str = "silero_vad.onnx") -> str:
    return str(importlib.resources.files("silero_vad").joinpath(f"data/{name}"))


def _stream(runners, audio, rate):
    """Run every runner over the audio chunk by chunk; -> per runner (probs, states)."""
    ctx, n = CONTEXT[rate], CHUNK[rate]
    out = []
    for run in runners:
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros((1, ctx), np.float32)
        probs, states = [], []
        for k in range(len(audio) // n):
            x = np.concatenate([context, audio[None, k * n:(k + 1) * n]], axis=1)
            p, state = run({"input": x, "state": state, "sr": np.array(rate, np.int64)})
            context = x[:, -ctx:]
            probs.append(float(p.reshape(-1)[0]))
            states.append(state.copy())
        out.append((np.array(probs), np.stack(states)))
    return out


def _ort(path):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    return lambda feeds: s.run(None, feeds)


@pytest.fixture(scope="module")
def session():
    return edgenn.InferenceSession(_model(), threads=1)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_streaming_matches_onnxruntime_at_every_chunk(session, rate):
    speech.require_espeak()
    audio, mask = speech.speech(rate)
    (p_e, s_e), (p_o, s_o) = _stream([lambda f: session.run(None, f), _ort(_model())],
                                     audio, rate)
    assert len(p_e) > 100
    np.testing.assert_allclose(p_e, p_o, rtol=0, atol=PROB_ATOL)
    scale = np.abs(s_o).max(axis=(1, 2, 3), keepdims=True)          # per chunk
    assert np.all(np.abs(s_e - s_o) <= STATE_RTOL * scale), \
        float(np.max(np.abs(s_e - s_o) / scale))
    # and it does its job: high on the spoken chunks, low on the silent ones
    n = CHUNK[rate]
    spoken = np.array([mask[k * n:(k + 1) * n].mean() for k in range(len(p_e))])
    assert p_e[spoken == 1].mean() > 0.6, p_e[spoken == 1].mean()
    assert p_e[spoken == 0].mean() < 0.2, p_e[spoken == 0].mean()


def test_plans_the_runtime_if_and_inlines_the_shape_ifs():
    """The sample-rate If runs planned branches; the shape-guarded Ifs inside them fold
    away when the branch is planned (no If is left in the 16 kHz branch plan)."""
    session = edgenn.InferenceSession(_model(), threads=1,
                                      input_shapes={"input": (1, 576), "state": (2, 1, 128)})
    steps = {s.node.op: s.choice for s in session.plan.steps}
    assert steps["If"].kernel == "if_planned_branches"
    then_plan, else_plan = steps["If"].run.branch_plans      # 16 kHz, 8 kHz
    assert then_plan is not None
    for branch in [p for p in (then_plan, else_plan) if p is not None]:
        ops = {s.node.op for s in branch.plan.steps}
        assert "If" not in ops and {"Conv", "LSTM"} <= ops, ops
        assert all(s.choice.kernel != "reference" for s in branch.plan.steps
                   if s.node.op in ("Conv", "LSTM"))


def test_enn_round_trip_streams_the_same(session, tmp_path):
    speech.require_espeak()
    enn = tmp_path / "vad.enn"
    edgenn.convert(_model(), str(enn))
    again = edgenn.InferenceSession(str(enn), threads=1)
    audio, _ = speech.speech(16000)
    audio = audio[:512 * 40]
    (p1, s1), (p2, s2) = _stream([lambda f: session.run(None, f),
                                  lambda f: again.run(None, f)], audio, 16000)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(s1, s2)
