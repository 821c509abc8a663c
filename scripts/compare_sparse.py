"""Sparse 1x1 convolutions against the dense algorithms, on this CPU, 1 thread by default.

1. Per layer: the pointwise shapes of MobileNetV2 (224x224) at sparsities 0.5 .. 0.95; for
   each, the tuner's median time of the best dense kernel and of the best sparse one (all
   candidates timed on the same inputs, in one process), their ratio and the crossover
   sparsity where sparse starts to win.
2. Whole model: MobileNetV2 dense against the same model with its pointwise convs pruned
   to --sparsity (compress/prune.py: magnitude, first pointwise layer kept dense), and
   ResNet-18 dense against its pattern-pruned self (k of 9 taps per 3x3 kernel from
   --patterns per layer, --connectivity of the kernels removed), all edgenn, interleaved
   rounds, medians; onnxruntime on the dense model as the yardstick.

    python scripts/compare_sparse.py                  # all parts
    python scripts/compare_sparse.py --part layers --threads 1
    python scripts/compare_sparse.py --part pattern --k 4 --connectivity 0.5
"""
import argparse
import os
import sys
import tempfile

import numpy as np
from onnx import helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import edgenn  # noqa: E402
from edgenn.bench import edgenn_runner, interleave, onnxruntime_runner, table  # noqa: E402
from edgenn.compress.prune import magnitude_mask, pattern_prune, sparsify  # noqa: E402
from edgenn.kernels import isa  # noqa: E402

# (input channels, output channels, H = W) of MobileNetV2's pointwise convs (a subset)
LAYERS = [(16, 96, 112), (24, 144, 56), (144, 24, 56), (32, 192, 28), (192, 64, 14),
          (64, 384, 14), (384, 96, 14), (160, 960, 7), (960, 320, 7), (320, 1280, 7)]
SPARSITIES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def _layer_model(k, m, hw, sparsity, rng):
    w = rng.standard_normal((m, k, 1, 1)).astype(np.float32)
    w = np.where(magnitude_mask(w, sparsity), w, 0).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="pw")
    relu = helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="relu6")
    inits = [helper.make_tensor(n, 1, a.shape, a.reshape(-1)) for n, a in
             (("w", w), ("b", rng.standard_normal(m).astype(np.float32)),
              ("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32)))]
    g = helper.make_graph([node, relu], "pw", [helper.make_tensor_value_info("x", 1, [1, k, hw, hw])],
                          [helper.make_tensor_value_info("y", 1, [1, m, hw, hw])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def layers(threads):
    rng = np.random.default_rng(0)
    print(f"{'layer (K -> M, HxW)':24} " + " ".join(f"{s:>7.0%}" for s in SPARSITIES)
          + "   crossover   (best sparse / best dense, median times)")
    for k, m, hw in LAYERS:
        ratios = []
        for s in SPARSITIES:
            sess = edgenn.InferenceSession(_layer_model(k, m, hw, s, rng), threads=threads,
                                           tune="full")
            conv = next(st for st in sess.plan.steps if st.node.op == "Conv")
            t = conv.choice.times
            dense = min(v for n, v in t.items() if not n.startswith("spmm"))
            sparse = min((v for n, v in t.items() if n.startswith("spmm")), default=np.inf)
            ratios.append(sparse / dense)
        cross = next((f"{s:.0%}" for s, r in zip(SPARSITIES, ratios) if r < 1), "> 95%")
        print(f"{f'{k} -> {m}, {hw}x{hw}':24} " + " ".join(f"{r:7.2f}" for r in ratios)
              + f"   {cross:>9}")


def whole_model(threads, rounds, model, prune, label):
    from models import ZOO
    path, feeds = ZOO[model]()
    graph = edgenn.load(str(path))
    rep = prune(graph)
    tmp = os.path.join(tempfile.mkdtemp(), "pruned.enn")
    edgenn.save(graph, tmp)
    print(f"{model}: {rep.table().splitlines()[0]}")
    shapes = {k: v.shape for k, v in feeds.items()}
    dense = edgenn_runner(str(path), threads, shapes)
    dense.name = "edgenn dense"
    sparse = edgenn_runner(tmp, threads, shapes)
    sparse.name = f"edgenn {label}"
    runners = interleave([dense, sparse, onnxruntime_runner(str(path), threads)], feeds, rounds)
    print(table(runners, threads))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("layers", "model", "pattern", "all"), default="all")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sparsity", type=float, default=0.8)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--patterns", type=int, default=8)
    p.add_argument("--connectivity", type=float, default=0.5)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    print(f"CPU: {isa.describe()}, {args.threads} thread(s)")
    if args.part in ("layers", "all"):
        layers(args.threads)
    if args.part in ("model", "all"):
        whole_model(args.threads, args.rounds, "mobilenet_v2-op13",
                    lambda g: sparsify(g, args.sparsity), f"{args.sparsity:.0%} 1x1")
    if args.part in ("pattern", "all"):
        whole_model(args.threads, args.rounds, "resnet18-op17",
                    lambda g: pattern_prune(g, args.k, args.patterns, args.connectivity),
                    f"k{args.k} c{args.connectivity:.0%}")


if __name__ == "__main__":
    main()
