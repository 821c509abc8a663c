"""edgenn.from_torch: a PyTorch module (1-D conv + bidirectional GRU + linear head, two
outputs) exported by both torch.onnx exporters, checked against the module, run on new
inputs of other batch / time sizes; the check is enforced; bad examples are named."""
import numpy as np
import pytest
import torch

import edgenn
from edgenn.torchexport import ExportMismatchError


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 16, 3, padding=1)
        self.rnn = torch.nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(48, 5)

    def forward(self, x):                     # x (N, 4, T)
        h = torch.relu(self.conv(x)).transpose(1, 2)
        y, _ = self.rnn(h)
        return self.head(y).softmax(-1), y.mean(1)


@pytest.fixture(scope="module")
def module():
    torch.manual_seed(0)
    return Tagger().eval()


@pytest.mark.parametrize("exporter", ["auto", "torchscript"])
def test_exported_session_matches_the_module(module, exporter):
    x = torch.randn(2, 4, 30)
    sess = edgenn.from_torch(module, (x,), input_names=["x"], exporter=exporter,
                             dynamic_axes={"x": {0: "batch", 2: "time"}})
    assert sess.from_torch["exporter"] == ("dynamo" if exporter == "auto" else exporter)
    assert max(sess.from_torch["rel_err"]) < 1e-5
    assert "GRU" in {s.node.op for s in sess.plan.steps}
    for shape in [(1, 4, 30), (3, 4, 17)]:              # other batch and time sizes
        x2 = torch.randn(*shape)
        with torch.no_grad():
            want = [t.numpy() for t in module(x2)]
        got = sess.run(None, {"x": x2.numpy()})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_check_is_enforced(module):
    with pytest.raises(ExportMismatchError, match="differ"):
        edgenn.from_torch(module, (torch.randn(1, 4, 8),), tolerance=-1.0)


def test_save_enn_and_reload(module, tmp_path):
    x = torch.randn(1, 4, 12)
    path = tmp_path / "tagger.enn"
    sess = edgenn.from_torch(module, x, save=str(path))
    again = edgenn.InferenceSession(str(path))
    for a, b in zip(again.run(None, {again.get_inputs()[0].name: x.numpy()}),
                    sess.run(None, {sess.get_inputs()[0].name: x.numpy()})):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_bad_examples_are_named(module):
    with pytest.raises(edgenn.InputError, match="example input 0"):
        edgenn.from_torch(module, ("not a tensor",))
    with pytest.raises(edgenn.InputError, match="exporter"):
        edgenn.from_torch(module, torch.randn(1, 4, 8), exporter="onnx2")
