"""edgenn's own low-bit weights for decoders (compress/nbits.py): float Gemms become
MatMulNBits nodes whose codes onnxruntime reads as it reads its own exports."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import edgenn
from edgenn.compress.nbits import quantize_matmuls
from edgenn.converters.onnx.exporter import to_model
from edgenn.errors import InputError
from edgenn.kernels.reference.nbits import dequantize_nbits
from edgenn.lm import Generator
from support.decoders import decoder
from support.helpers import run_cli


def _prefill_feed(graph, prompt):
    feed = {"input_ids": np.array([prompt], np.int64),
            "attention_mask": np.ones((1, len(prompt)), np.int64)}
    for v in graph.inputs:
        if v.name.startswith("past_key_values"):
            feed[v.name] = np.zeros((1, v.shape[1], 0, 16), np.float32)
    return feed


@pytest.mark.parametrize("bits,block", [(4, 32), (4, 16), (8, 64)])
def test_codes_are_read_alike_by_onnxruntime(bits, block):
    """The quantized decoder exported to ONNX and run by onnxruntime (accuracy_level 0:
    it dequantizes as edgenn does) gives edgenn's logits within float32 rounding."""
    graph = edgenn.load(str(decoder("fp32") / "model.onnx"))
    done = quantize_matmuls(graph, bits, block, accuracy_level=0, fit="maxabs")
    assert done["layers"] == 11 and done["tables"] == 1
    # what is stored: codes (K padded to whole blocks) and one float32 scale per block
    stored = {n.inputs[1]: graph.consts[n.inputs[1]].nbytes + graph.consts[n.inputs[2]].nbytes
              for n in graph.nodes if n.op == "MatMulNBits"}
    assert done["bytes_after"] == sum(stored.values())
    for n in graph.nodes:
        if n.op == "MatMulNBits":
            kb = -(-n.attrs["K"] // block)
            assert graph.consts[n.inputs[1]].shape == (n.attrs["N"], kb, block * bits // 8)
    feed = _prefill_feed(graph, [5, 77, 301, 12, 900])
    mine = edgenn.InferenceSession(graph).run(["logits"], feed)[0]
    s = ort.InferenceSession(to_model(graph).SerializeToString(),
                             providers=["CPUExecutionProvider"])
    theirs = s.run(["logits"], feed)[0]
    np.testing.assert_allclose(mine, theirs, atol=1e-4 * np.abs(theirs).max())


def test_each_weight_is_within_half_a_step_of_its_code():
    graph = edgenn.load(str(decoder("fp32") / "model.onnx"))
    weights = {n.name: (graph.consts[n.inputs[1]], n.attrs.get("transB", 0))
               for n in graph.nodes if n.op == "Gemm"}
    quantize_matmuls(graph, 4, 32, fit="maxabs")
    checked = 0
    for n in graph.nodes:
        if n.op != "MatMulNBits" or n.name not in weights:
            continue
        w, trans = weights[n.name]
        wt = w if trans else w.T
        b, scales = graph.consts[n.inputs[1]], graph.consts[n.inputs[2]]
        got = dequantize_nbits(b, scales, None, None, n.attrs["K"], n.attrs["N"], 4, 32)
        step = np.repeat(scales.reshape(wt.shape[0], -1), 32, axis=1)[:, :wt.shape[1]]
        assert np.all(np.abs(got - wt) <= step / 2 * (1 + 1e-6))
        checked += 1
    assert checked >= 9


def test_cli_weights_int4_then_generate(tmp_path, capsys):
    out = tmp_path / "q4.enn"
    code, text, err = run_cli(capsys, "quantize", str(decoder("fp32") / "model.onnx"),
                              "--weights", "int4", "-o", str(out))
    assert code == 0, err
    assert "MatMulNBits layers" in text
    ops = edgenn.load(str(out)).op_counts()
    assert ops["MatMulNBits"] == 11 and "Gemm" not in ops and ops["QGather"] == 1
    tokens = Generator(str(out), context_length=512, eos_token_ids=[]).generate([1, 2, 3], 8)
    assert len(tokens) == 8
    code, _, err = run_cli(capsys, "quantize", str(out), "--weights", "int4", "--block",
                           "24", "-o", str(tmp_path / "bad.enn"))
    assert code != 0 and "block" in err


def test_bad_arguments_are_named():
    graph = edgenn.load(str(decoder("fp32") / "model.onnx"))
    for kwargs in ({"bits": 3}, {"block": 48}, {"fit": "best"}):
        with pytest.raises(InputError):
            quantize_matmuls(graph, **kwargs)
