"""Retraining with masks (compress/torch_masks.py): the digits CNN trained in torch, its 1x1
convs 80% magnitude-pruned and its strided 3x3 conv pattern-pruned (4 of 9 taps, half the
kernels), fine-tuned with the masks held, exported, and run by edgenn on the sparse
kernels with torch's outputs."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))   # make_demo_model

import edgenn  # noqa: E402
from edgenn.compress import torch_masks  # noqa: E402


def _data():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    idx = np.random.default_rng(0).permutation(len(x))
    return x[idx[:1500]], d.target[idx[:1500]], x[idx[1500:]], d.target[idx[1500:]]


def _train(model, x, y, epochs, seed):
    from make_demo_model import fit
    fit(model, x, y, epochs, seed)


def _accuracy(model, x, y):
    with torch.no_grad():
        return float(np.mean(model(torch.from_numpy(x)).argmax(1).numpy() == y))


def test_masks_hold_through_fine_tuning_and_the_export_runs_sparse():
    import copy

    from make_demo_model import DigitsNet
    torch.manual_seed(0)
    x, y, xh, yh = _data()
    dense = DigitsNet()
    _train(dense, x, y, epochs=15, seed=0)
    acc_dense = _accuracy(dense, xh, yh)
    model = copy.deepcopy(dense)
    masked = torch_masks.apply(model, sparse=0.8, pattern=4, connectivity=0.5)
    # the block convs but the first 1x1, and the 16 -> 32 strided 3x3 (the stem reads the image)
    assert "blocks.1" in masked and "stem.0" not in masked and "blocks.0.body.0" not in masked
    assert all(abs(z - 0.8) < 0.01 for n, z in masked.items() if n != "blocks.1")
    assert masked["blocks.1"] > 0.75                 # 4 of 9 taps of half the kernels kept
    acc_masked = _accuracy(model, xh, yh)
    mask = {n: m.weight_mask.clone() for n, m in model.named_modules() if hasattr(m, "weight_mask")}
    _train(model, x, y, epochs=8, seed=1)
    acc_tuned = _accuracy(model, xh, yh)
    for n, m in model.named_modules():
        if n in mask:                                 # the optimiser never revived a weight
            assert torch.all(m.weight[mask[n] == 0] == 0)
    assert acc_tuned >= acc_dense - 0.02, (acc_dense, acc_masked, acc_tuned)
    torch_masks.finalize(model)
    assert not any(hasattr(m, "weight_mask") for m in model.modules())
    sess = edgenn.from_torch(model, (torch.from_numpy(xh[:4]),))
    got = sess.run(None, {sess.get_inputs()[0].name: xh[:4]})[0]
    with torch.no_grad():
        want = model(torch.from_numpy(xh[:4])).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    step_kernels = {s.choice.kernel for s in sess.plan.steps}
    offered = [n for s in sess.plan.steps for n in getattr(s.choice, "times", {}) or {}]
    assert step_kernels and any(n.startswith(("spmm", "spconv")) for n in offered + list(step_kernels))


@pytest.mark.parametrize("loss", ["soft_ce", "mse"])
def test_distill_brings_a_masked_student_back_to_its_teacher(loss):
    """No labels: a classifier's 80%-masked copy, fine-tuned on unlabeled inputs to the
    original's outputs, gets closer to them (KL over held-out inputs), masks held."""
    import copy
    torch.manual_seed(3)
    teacher = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 5), torch.nn.Softmax(dim=1)).eval()
    student = copy.deepcopy(teacher)
    masked = torch_masks.apply(student, sparse_fc=0.8)
    rng = np.random.default_rng(0)
    x, held = (rng.standard_normal((n, 20)).astype(np.float32) for n in (2048, 512))

    def kl():
        with torch.no_grad():
            t, s = teacher(torch.from_numpy(held)), student(torch.from_numpy(held))
            return float((t * (torch.log(t + 1e-8) - torch.log(s + 1e-8))).sum(1).mean())
    before = kl()
    seen = []
    losses = torch_masks.distill(student, teacher, x, epochs=6, lr=3e-3, loss=loss,
                                 progress=lambda e, v: seen.append(e))
    assert seen == list(range(6)) and len(losses) == 6 and not student.training
    assert kl() < 0.3 * before, (before, kl())
    for name, m in student.named_modules():
        if name in masked:
            assert torch.all(m.weight[m.weight_mask == 0] == 0)
    with pytest.raises(ValueError, match="soft_ce"):
        torch_masks.distill(student, teacher, x, loss="kl")
