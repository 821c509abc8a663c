"""edgenn export: the optimized graph as ONNX. Fused Conv / Gemm epilogues, attention,
1-D convs made 2-D, recurrent ops and control-flow bodies come out as standard ONNX that
onnx.checker accepts (full check: shape inference included) and onnxruntime runs to the
original model's outputs; int8 ops keep edgenn's form in the ai.edgenn domain."""
import subprocess
import sys

import numpy as np
import onnx
import pytest
from support.helpers import ort_run
from support.models import ZOO

import edgenn
from edgenn.converters.onnx.exporter import DOMAIN, export
from edgenn.tools import rel_err

# fused Conv + Clip + residual; attention + LayerNorm + Gelu; LSTM; nested If + LSTM +
# 1-D convs; SiLU, Resize, Split
MODELS = ["mobilenet_v2-op13", "bert_tiny-op17", "crnn_bilstm-op14", "silero_vad",
          "yolo_tiny-op18"]


@pytest.mark.parametrize("name", MODELS)
def test_export_runs_in_onnxruntime(name, tmp_path):
    path, feeds = ZOO[name]()
    out = tmp_path / f"{name}.onnx"
    model = export(str(path), str(out))
    onnx.checker.check_model(model, full_check=True)
    fused = edgenn.load(str(path)).meta.get("fusions", {})
    assert fused or name == "silero_vad"                 # it is the optimized graph
    want = ort_run(path, feeds)
    got = ort_run(out, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and rel_err(g, w) <= 1e-4, (name, rel_err(g, w))


def test_fused_per_channel_prelu_exports(tmp_path):
    """Pointwise Convs with their per-channel PRelu fused (a TFLite face model's blocks)
    come out as Conv -> PRelu with (M, 1, 1) slopes and run in onnxruntime to edgenn's
    outputs."""
    from support.mediapipe_models import image_input, path as mediapipe_path
    src = mediapipe_path("face_landmark")
    graph = edgenn.load(str(src))
    assert any(n.attrs.get("activation") == "PRelu" for n in graph.nodes)
    model = export(graph, str(tmp_path / "face.onnx"))
    onnx.checker.check_model(model, full_check=True)
    sess = edgenn.InferenceSession(str(src))
    feeds = {a.name: image_input(tuple(a.shape)) for a in sess.get_inputs()}
    got = ort_run(tmp_path / "face.onnx", feeds)
    for g, w in zip(got, sess.run(None, feeds)):
        assert rel_err(g, w) <= 1e-4


def test_int8_ops_keep_the_edgenn_domain(tmp_path):
    from support import quant_data
    calib, x, _ = quant_data.digits()
    graph = edgenn.quantize(quant_data.DEMO_MODEL, calib)
    model = export(graph, str(tmp_path / "digits.int8.onnx"))
    custom = {n.op_type for n in model.graph.node if n.domain == DOMAIN}
    assert "QConv" in custom, custom
    assert any(o.domain == DOMAIN for o in model.opset_import)
    onnx.checker.check_model(model)


def test_cli_export(tmp_path):
    path, feeds = ZOO["crnn_bilstm-op14"]()
    enn = tmp_path / "m.enn"
    edgenn.convert(str(path), str(enn))
    out = tmp_path / "m.onnx"
    r = subprocess.run([sys.executable, "-m", "edgenn.cli", "export", str(enn), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and out.exists()
    np.testing.assert_allclose(ort_run(out, feeds)[0], ort_run(path, feeds)[0],
                               rtol=1e-4, atol=1e-5)
