"""Quantization-aware fine-tuning for weight-only codes (compress/torch_quant.py): the layers
train on the codec's own grid, so the exported weights are coded with no further loss
(fit="maxabs" finds each block's scale from its quantized values), masks compose."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import edgenn  # noqa: E402
from edgenn.compress import torch_masks, torch_quant  # noqa: E402
from edgenn.compress.weights import compress_weights, encode  # noqa: E402


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 24, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(24, 40, 1), torch.nn.ReLU(),            # a 1x1 for the masks
        torch.nn.Conv2d(40, 40, 5, padding=2, groups=40),        # rows of 25: one block
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(40, 10), torch.nn.Softmax(dim=1)).eval()


@pytest.mark.parametrize("bits, block", [(4, 64), (4, 16), (8, None)])
def test_fake_quant_is_the_codecs_grid(bits, block):
    w = torch.randn(40, 24, 3, 3) * torch.linspace(0.01, 3, 40)[:, None, None, None]
    got = torch_quant.fake_quant(w, bits, block or (1 << 30)).numpy()
    from edgenn.compress.weights import row_block
    from edgenn.graph.codecs import decode
    k = 24 * 9
    coded = encode(w.numpy(), 0, bits, fit="maxabs",
                   block=row_block(k, block or k, bits))
    np.testing.assert_array_equal(got, decode(coded["q"], coded["scale"], coded["meta"]))


def test_gradients_pass_the_rounding():
    w = torch.randn(8, 32, requires_grad=True)
    torch_quant.fake_quant(w, 4, 32).sum().backward()
    assert torch.equal(w.grad, torch.ones_like(w))


def test_trained_on_the_grid_then_coded_without_loss(tmp_path):
    teacher = _net()
    student = _net()
    masked = torch_masks.apply(student, sparse=0.75, skip_first=False)
    names = torch_quant.apply(student, bits=4, block=64)
    assert "2" in masked and set(names) == {"0", "2", "4", "7"}
    x = np.random.default_rng(1).standard_normal((256, 3, 8, 8)).astype(np.float32)
    torch_masks.distill(student, teacher, x, epochs=2, lr=1e-3)
    with torch.no_grad():
        trained = student(torch.from_numpy(x[:16])).numpy()
    torch_quant.finalize(student)
    torch_masks.finalize(student)
    assert not any(hasattr(m, "_edgenn_fq") or hasattr(m, "weight_mask")
                   for m in student.modules())
    with torch.no_grad():          # the folded module computes what it computed training
        np.testing.assert_allclose(student(torch.from_numpy(x[:16])).numpy(), trained,
                                   atol=1e-6)
    assert float((student[2].weight == 0).float().mean()) >= 0.75
    buf = io.BytesIO()
    torch.onnx.export(student, (torch.from_numpy(x[:1]),), buf, input_names=["x"],
                      output_names=["y"], opset_version=13, dynamo=False,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    graph = edgenn.load(buf.getvalue())
    before = {k: v.copy() for k, v in graph.consts.items()}
    report = compress_weights(graph, 4, min_elements=64, block=64, fit="maxabs")
    assert report["tensors"] == 4
    for name in graph.meta["weight_codecs"]:       # the codes decode to the trained weights
        np.testing.assert_array_equal(graph.consts[name], before[name])
    sess = edgenn.InferenceSession(graph)
    np.testing.assert_allclose(sess.run(None, {"x": x[:16]})[0], trained, atol=1e-5)


def test_bits_are_checked():
    with pytest.raises(ValueError, match="8 or 4"):
        torch_quant.apply(_net(), bits=3)


def test_the_order_with_the_masks_is_checked():
    net = _net()
    torch_quant.apply(net, bits=4)
    with pytest.raises(ValueError, match="before torch_quant.apply"):
        torch_masks.apply(net, sparse=0.5, skip_first=False)
    net = _net()
    torch_masks.apply(net, sparse=0.5, skip_first=False)
    torch_quant.apply(net, bits=4)
    with pytest.raises(ValueError, match="torch_quant.finalize first"):
        torch_masks.finalize(net)
    with pytest.raises(ValueError, match="even"):
        torch_quant.apply(_net(), bits=4, block=33)
