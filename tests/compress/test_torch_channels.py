"""Channel pruning of a PyTorch module (compress/torch_channels.py): on the zoo's
MobileNetV2 and ResNet-18 definitions, the groups are the inverted residuals' hidden
channels and the basic blocks' inner channels, the pruned copy runs with the same output
shape and fewer parameters, the original is untouched, and the pruned module exports to
ONNX and runs in edgenn with torch's outputs."""
import io

import numpy as np
import pytest
import torch
from support.models import nets

import edgenn
from edgenn.compress.torch_channels import prune_module, torch_groups


def _params(m) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("arch", ["mobilenet_v2", "resnet18"])
def test_prune_module_and_export(arch):
    torch.manual_seed(0)
    n = nets()
    model = (n.MobileNetV2(width=0.5) if arch == "mobilenet_v2"
             else n.ResNet(n.BasicBlock, [2, 2, 2, 2])).eval()
    x = torch.randn(1, 3, 96, 96)
    groups = torch_groups(model)
    if arch == "mobilenet_v2":   # expand -> dw -> project, and a non-residual block's
        # projection -> the next expand (nothing else reads those channels)
        with_dw = [g for g in groups if g.depthwise is not None]
        assert len(with_dw) == 17 and len(groups) - len(with_dw) == 2
    else:
        assert len(groups) == 8 and all(g.depthwise is None for g in groups)   # conv1 -> conv2
    before = [p.detach().clone() for p in model.parameters()]
    pruned, report = prune_module(model, ratio=0.5)
    assert all(k == round(m * 0.5) for m, k in report.values()) and len(report) == len(groups)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # untouched
    assert _params(pruned) < 0.85 * _params(model)
    with torch.no_grad():
        y = pruned.eval()(x)
    assert y.shape == model(x).shape
    buf = io.BytesIO()
    torch.onnx.export(pruned, (x,), buf, input_names=["x"], output_names=["y"],
                      opset_version=13, dynamo=False)
    got = edgenn.InferenceSession(buf.getvalue()).run(None, {"x": x.numpy()})[0]
    assert np.allclose(got, y.numpy(), rtol=1e-4, atol=1e-4 * float(np.abs(y.numpy()).max()))


def test_per_layer_override_and_unknown_names():
    torch.manual_seed(0)
    model = nets().ResNet(nets().BasicBlock, [1, 1, 1, 1]).eval()
    first = torch_groups(model)[0].producer
    pruned, report = prune_module(model, ratio=0.25, per_layer={first: 0.0})
    assert first not in report and len(report) == 3
    with pytest.raises(ValueError, match="not the producer"):
        prune_module(model, per_layer={"nope": 0.5})
