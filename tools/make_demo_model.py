"""Train the embedded demo model: a small residual CNN on scikit-learn's 8x8 digits.

Reproducible (fixed seeds); writes edgenn/models/digits.onnx and digits_samples.npz (the
held-out test images the demo classifies) and digits.enn (converted, for installs without
onnx). Needs torch and scikit-learn (test extras).
    python tools/make_demo_model.py              # train + export + convert
    python tools/make_demo_model.py --enn        # only re-convert digits.enn
"""
import os
import sys

OUT = os.path.join(os.path.dirname(__file__), "..", "edgenn", "models")


def write_enn():
    """digits.enn, the converted model a runtime-only install (no onnx) runs in the demo."""
    import edgenn
    edgenn.convert(os.path.join(OUT, "digits.onnx"), os.path.join(OUT, "digits.enn"))


if __name__ == "__main__" and "--enn" in sys.argv[1:]:
    write_enn()
    sys.exit(0)

import numpy as np  # noqa: E402  (training only)
import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402


class Block(nn.Module):
    """Inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project, + input."""

    def __init__(self, c, expand=2):
        super().__init__()
        h = c * expand
        self.body = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(Block(16), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                                    nn.Hardswish(), Block(32))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x = x.mean(dim=(2, 3))
        return torch.softmax(self.head(x), dim=1)


def fit(model, x, y, epochs: int, seed: int | None = None, lr: float = 3e-3,
        cosine: bool = False, teacher=None) -> None:
    """Train `model` (softmax outputs) on images x, labels y: Adam, batches of 64, NLL
    loss; reseeded first unless seed is None; a cosine learning-rate decay if asked.
    teacher (softmax outputs): half the loss is the KL divergence from its predictions
    (distillation).
    Ends in eval mode. (Also the retraining loop of tests/compress/test_torch_masks.py and
    examples/compress_digits.py.)"""
    if seed is not None:
        torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * -(-len(x) // 64)) \
        if cosine else None
    xt, yt = torch.from_numpy(x), torch.from_numpy(np.asarray(y, np.int64))
    model.train()
    for _ in range(epochs):
        for b in torch.randperm(len(x)).split(64):
            xb = xt[b]
            opt.zero_grad()
            logp = torch.log(model(xb) + 1e-9)
            loss = nn.functional.nll_loss(logp, yt[b])
            if teacher is not None:
                with torch.no_grad():
                    target = teacher(xb)
                loss = 0.5 * loss + 0.5 * nn.functional.kl_div(logp, target,
                                                               reduction="batchmean")
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
    model.eval()


def main():
    torch.manual_seed(0)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    idx = np.random.default_rng(0).permutation(len(x))
    train, test = idx[:1500], idx[1500:]
    model = DigitsNet()
    fit(model, x[train], y[train], 30)
    with torch.no_grad():
        acc = (model(torch.from_numpy(x[test])).argmax(1).numpy() == y[test]).mean()
    print(f"held-out accuracy: {acc:.4f} on {len(test)} images")
    os.makedirs(OUT, exist_ok=True)
    torch.onnx.export(model, (torch.from_numpy(x[:1]),), os.path.join(OUT, "digits.onnx"),
                      input_names=["image"], output_names=["probs"], opset_version=13,
                      dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}},
                      dynamo=False)
    np.savez_compressed(os.path.join(OUT, "digits_samples.npz"), images=x[test],
                        labels=y[test])
    write_enn()
    write_enn()


if __name__ == "__main__":
    main()
