"""The digits CNN (the demo model, tools/make_demo_model.py) compressed about 10x with
retraining, starting from the shipped weights and distilling them (each retraining step's
loss half the labels', half the KL divergence from the shipped model's predictions): half
the channels of its inverted-residual groups removed (torch_channels) and retrained,
BatchNorm folded into the convs, 1x1 / fully connected weights masked step by step (40,
60, 70, then 80% zeros, retrained after each step; the strided 3x3 pattern-pruned,
torch_masks), then trained on the int4 grid (torch_quant), weight-only int4 codes of that
grid, compact coded .enn. Held-out accuracy on scikit-learn's digits (297 images never
trained on) per training seed, and the size against the shipped fp32 ONNX
(edgenn/models/digits.onnx).

    python examples/compress_digits.py [--seeds 0 10 20 30 40] [--channels 0.5] [--sparse 0.8]
"""
from __future__ import annotations

import argparse
import copy
import io
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))   # make_demo_model
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


def shipped_module():
    """DigitsNet holding the shipped ONNX's weights (its BatchNorms folded into the convs
    on export: here each conv's bias sits in its BatchNorm, whose statistics are 0 and
    1 - eps), so the retraining starts from the model it compresses."""
    import torch
    from torch import nn
    model = DigitsNet()
    graph = edgenn.load(DEMO_MODEL)
    weights = [[graph.consts[i] for i in n.inputs[1:3]] for n in graph.nodes
               if n.op in ("Conv", "Gemm")]
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    norms = {id(conv): bn for conv, bn in _conv_norms(model)}
    with torch.no_grad():
        for layer, (w, b) in zip(layers, weights, strict=True):
            layer.weight.copy_(torch.from_numpy(w))
            if layer.bias is not None:
                layer.bias.copy_(torch.from_numpy(b))
                continue
            bn = norms[id(layer)]
            bn.weight.fill_(1.0), bn.bias.copy_(torch.from_numpy(b))
            bn.running_mean.zero_(), bn.running_var.fill_(1.0 - bn.eps)
    return model.eval()


def _conv_norms(model):
    """(conv, the BatchNorm right after it) pairs in module order."""
    from torch import nn
    mods = list(model.modules())
    return [(a, b) for a, b in zip(mods, mods[1:])
            if isinstance(a, nn.Conv2d) and isinstance(b, nn.BatchNorm2d)]


def train(model, x, y, epochs: int, seed: int, lr: float, teacher=None) -> None:
    fit(model, x, y, epochs, seed, lr, cosine=True, teacher=teacher)


def accuracy(run, x, y) -> float:
    return float(np.mean(run(x).argmax(1) == y))


def latency_us(sess, image) -> float:
    from edgenn.runtime.profile import latency_ms
    return latency_ms(sess, {"image": image}, rounds=300) * 1e3


def main():
    import torch
    from torch.fx.experimental.optimization import fuse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 10, 20, 30, 40])
    p.add_argument("--channels", type=float, default=0.5)
    p.add_argument("--sparse", type=float, default=0.8)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--gradual", type=float, nargs="*", default=[0.4, 0.6, 0.7],
                   help="sparsities masked and retrained before --sparse (one shot: none)")
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--distill", action=argparse.BooleanOptionalAction, default=True,
                   help="retrain against the dense model's predictions too")
    p.add_argument("--from-shipped", action=argparse.BooleanOptionalAction, default=True,
                   help="start from (and distill) the shipped weights, not a dense model "
                        "retrained here")
    args = p.parse_args()
    torch.set_num_threads(1)
    x, y, xh, yh = data()
    shipped = edgenn.InferenceSession(DEMO_MODEL, threads=1)
    onnx_bytes = os.path.getsize(DEMO_MODEL)
    print(f"shipped fp32 ONNX: {onnx_bytes} B, held-out accuracy "
          f"{accuracy(lambda a: shipped.run(None, {'image': a})[0], xh, yh):.2%} "
          f"({len(xh)} images), {latency_us(shipped, xh[:1]):.1f} us (1 image, 1 thread)")
    if args.from_shipped:
        dense = shipped_module()
        label = "the shipped weights in torch"
    else:
        torch.manual_seed(0)
        dense = DigitsNet()
        train(dense, x, y, 30, 0, 3e-3)                 # make_demo_model's recipe
        label = "dense, retrained here"
    with torch.no_grad():
        print(f"{label}: {accuracy(lambda a: dense(torch.from_numpy(a)).numpy(), xh, yh):.2%}")
    for seed in args.seeds:
        kd = dict(teacher=dense if args.distill else None)
        model, _ = prune_module(copy.deepcopy(dense), ratio=args.channels)
        train(model, x, y, 15, seed + 1, 1e-3, **kd)
        model = fuse(model.eval())                      # BatchNorm into the convs
        steps = [s for s in args.gradual if s < args.sparse] + [args.sparse]
        for i, sparse in enumerate(steps):              # masks, retrained, a step at a time
            if i:
                torch_masks.finalize(model)             # the next masks keep these zeros
            torch_masks.apply(model, sparse=sparse, sparse_fc=sparse, pattern=4,
                              connectivity=0.5)
            train(model, x, y, args.epochs if i == len(steps) - 1 else 25, seed + 2 + 10 * i,
                  1e-3, **kd)
        torch_quant.apply(model, bits=4, block=args.block)
        train(model, x, y, args.epochs, seed + 3, 5e-4, **kd)
        torch_quant.finalize(model)
        torch_masks.finalize(model)
        buf = io.BytesIO()
        torch.onnx.export(model, (torch.from_numpy(xh[:1]),), buf, input_names=["image"],
                          output_names=["probs"], opset_version=13, dynamo=False,
                          dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}})
        graph = edgenn.load(buf.getvalue())
        chain = [("retrained fp32 ONNX", buf.getvalue())]
        trained = {k: v.copy() for k, v in graph.consts.items()}
        compress_weights(graph, 4, min_elements=64, block=args.block, fit="maxabs")
        exact = sum(np.array_equal(graph.consts[k], trained[k])
                    for k in graph.meta["weight_codecs"])
        chain.append(("int4 codes, plain .enn", enn.to_bytes(graph)))
        graph.meta["entropy_coding"] = "zstd"
        chain.append(("compact coded .enn", enn.to_bytes(graph)))
        print(f"seed {seed}: int4 codes of the trained grid: {exact} of "
              f"{len(graph.meta['weight_codecs'])} weights exact")
        for label, blob in chain:
            sess = edgenn.InferenceSession(blob, threads=1)
            acc = accuracy(lambda a: sess.run(None, {"image": a})[0], xh, yh)
            print(f"  {label:24s} {len(blob):6d} B  {onnx_bytes / len(blob):5.2f}x smaller  "
                  f"held-out accuracy {acc:.2%}  {latency_us(sess, xh[:1]):6.1f} us "
                  f"(1 image, 1 thread)")


if __name__ == "__main__":
    main()
