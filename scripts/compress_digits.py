"""The digits CNN (the demo model, scripts/make_demo_model.py) compressed about 10x with
retraining: half the channels of its inverted-residual groups removed (torch_channels) and
retrained, BatchNorm folded into the convs, 1x1 / fully connected weights 80% masked and
the strided 3x3 pattern-pruned (torch_masks), retrained, then trained on the int4 grid
(torch_quant), weight-only int4 codes of that grid, compact coded .enn. Held-out accuracy
on scikit-learn's digits (297 images never trained on) per training seed, and the size
against the shipped fp32 ONNX (edgenn/models/digits.onnx).

    python scripts/compress_digits.py [--seeds 0 10 20] [--channels 0.5] [--sparse 0.8]
"""
from __future__ import annotations

import argparse
import copy
import io
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from make_demo_model import DigitsNet, fit  # noqa: E402

import edgenn  # noqa: E402
from edgenn.compress import torch_masks, torch_quant  # noqa: E402
from edgenn.compress.torch_channels import prune_module  # noqa: E402
from edgenn.compress.weights import compress_weights  # noqa: E402
from edgenn.demo import DEMO_MODEL  # noqa: E402
from edgenn.graph import format as enn  # noqa: E402


def data():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    idx = np.random.default_rng(0).permutation(len(x))      # make_demo_model's split
    return x[idx[:1500]], d.target[idx[:1500]], x[idx[1500:]], d.target[idx[1500:]]


def train(model, x, y, epochs: int, seed: int, lr: float) -> None:
    fit(model, x, y, epochs, seed, lr, cosine=True)


def accuracy(run, x, y) -> float:
    return float(np.mean(run(x).argmax(1) == y))


def main():
    import torch
    from torch.fx.experimental.optimization import fuse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 10, 20])
    p.add_argument("--channels", type=float, default=0.5)
    p.add_argument("--sparse", type=float, default=0.8)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--block", type=int, default=128)
    args = p.parse_args()
    torch.set_num_threads(1)
    x, y, xh, yh = data()
    shipped = edgenn.InferenceSession(DEMO_MODEL)
    onnx_bytes = os.path.getsize(DEMO_MODEL)
    print(f"shipped fp32 ONNX: {onnx_bytes} B, held-out accuracy "
          f"{accuracy(lambda a: shipped.run(None, {'image': a})[0], xh, yh):.2%} "
          f"({len(xh)} images)")
    torch.manual_seed(0)
    dense = DigitsNet()
    train(dense, x, y, 30, 0, 3e-3)                     # make_demo_model's recipe
    with torch.no_grad():
        print(f"dense, retrained here: {accuracy(lambda a: dense(torch.from_numpy(a)).numpy(), xh, yh):.2%}")
    for seed in args.seeds:
        model, _ = prune_module(copy.deepcopy(dense), ratio=args.channels)
        train(model, x, y, 15, seed + 1, 1e-3)
        model = fuse(model.eval())                      # BatchNorm into the convs
        torch_masks.apply(model, sparse=args.sparse, sparse_fc=args.sparse, pattern=4,
                          connectivity=0.5)
        train(model, x, y, args.epochs, seed + 2, 1e-3)
        torch_quant.apply(model, bits=4, block=args.block)
        train(model, x, y, args.epochs, seed + 3, 5e-4)
        torch_quant.finalize(model)
        torch_masks.finalize(model)
        buf = io.BytesIO()
        torch.onnx.export(model, (torch.from_numpy(xh[:1]),), buf, input_names=["image"],
                          output_names=["probs"], opset_version=13, dynamo=False,
                          dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}})
        graph = edgenn.load(buf.getvalue())
        trained = {k: v.copy() for k, v in graph.consts.items()}
        compress_weights(graph, 4, min_elements=64, block=args.block, fit="maxabs")
        exact = sum(np.array_equal(graph.consts[k], trained[k])
                    for k in graph.meta["weight_codecs"])
        graph.meta["entropy_coding"] = "zstd"
        blob = enn.to_bytes(graph)
        sess = edgenn.InferenceSession(blob)
        acc = accuracy(lambda a: sess.run(None, {"image": a})[0], xh, yh)
        print(f"seed {seed}: {len(blob)} B, {onnx_bytes / len(blob):.2f}x smaller, held-out "
              f"accuracy {acc:.2%}; int4 codes of the trained grid: {exact} of "
              f"{len(graph.meta['weight_codecs'])} weights exact")


if __name__ == "__main__":
    main()
