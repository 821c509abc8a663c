"""Sparse 1x1 convolutions and fully connected layers against the dense algorithms, on this
CPU, 1 thread by default.

1. Per layer: the pointwise shapes of MobileNetV2 (224x224) at sparsities 0.5 .. 0.95; for
   each, the tuner's median time of the best dense kernel and of the best sparse one (all
   candidates timed on the same inputs, in one process), their ratio and the crossover
   sparsity where sparse starts to win.
2. Whole model: MobileNetV2 dense against the same model with its pointwise convs pruned
   to --sparsity (compress/prune.py: magnitude, first pointwise layer kept dense), and
   ResNet-18 dense against its pattern-pruned self (k of 9 taps per 3x3 kernel from
   --patterns per layer, --connectivity of the kernels removed), all edgenn, interleaved
   rounds, medians; onnxruntime on the dense model as the yardstick.
3. Fully connected (--part fc): per layer as in 1, the Gemm shapes of an MLP (784 -> 1024
   -> 1024 -> 10) and of a MiniLM-size transformer's FFN (384 <-> 1536) at batch 1 (the
   spmv kernels) and 64 rows (a batch, or a transformer's tokens: the spgemm kernels);
   then as in 2, that MLP (Gemm + Relu, weights from a fixed seed) dense against its
   weights pruned to --sparsity (sparsify(layers=fully_connected), every layer), at
   batch 1 and 64.

The per-layer times are the tuner's (each candidate timed back to back, its weights warm
in cache); the whole-model rounds interleave the runtimes, so each run finds its weights
where the others' runs left them.

    python bench/compare_sparse.py                    # all parts
    python bench/compare_sparse.py --part layers --threads 1
    python bench/compare_sparse.py --part pattern --k 4 --connectivity 0.5
    python bench/compare_sparse.py --part fc --sparsity 0.9
"""
import argparse
import os
import sys
import tempfile
from collections import Counter

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import edgenn  # noqa: E402
from edgenn.bench import edgenn_runner, interleave, onnxruntime_runner, table  # noqa: E402
from edgenn.compress.prune import (fully_connected, magnitude_mask, pattern_prune,  # noqa: E402
                                   sparsify)
from edgenn.kernels import isa  # noqa: E402
from support.helpers import mlp  # noqa: E402

# (input channels, output channels, H = W) of MobileNetV2's pointwise convs (a subset)
LAYERS = [(16, 96, 112), (24, 144, 56), (144, 24, 56), (32, 192, 28), (192, 64, 14),
          (64, 384, 14), (384, 96, 14), (160, 960, 7), (960, 320, 7), (320, 1280, 7)]
SPARSITIES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
# (K, N) of fully connected layers: the MLP's, then a MiniLM-size FFN's; at these rows
FC_LAYERS = [(784, 1024), (1024, 1024), (1024, 10), (384, 1536), (1536, 384)]
FC_ROWS = (1, 64)
MLP = (784, 1024, 1024, 10)
SPARSE_CONV, SPARSE_FC = ("spmm",), ("spmv", "spgemm")    # the sparse candidates' names


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


def _fc_model(k, n, rows, sparsity):
    """One Gemm (+ Relu) K -> N on (rows, K), its weight pruned to `sparsity`."""
    graph = edgenn.load(mlp((k, n), rows, relu_last=True))
    sparsify(graph, sparsity, skip_first=False, layers=fully_connected)
    return graph


def _best(sess, op, sparse):
    """The tuner's median seconds of the best dense and of the best sparse candidate (names
    starting with `sparse`; inf if none was offered) of the plan's first `op` step."""
    t = next(st for st in sess.plan.steps if st.node.op == op).choice.times
    dense = min(v for n, v in t.items() if not n.startswith(sparse))
    return dense, min((v for n, v in t.items() if n.startswith(sparse)), default=np.inf)


def crossover(title, cases, op, sparse, threads):
    """Per layer of `cases` [(label, model_at(sparsity))], at every sparsity: the model tuned
    in full, best sparse / best dense `op` candidate; the crossover is the first sparsity
    where sparse wins ("<= 50%": already at the first). A second row gives both times
    (microseconds)."""
    print(f"{title:24} " + " ".join(f"{s:>11.0%}" for s in SPARSITIES)
          + "   crossover   (best sparse / best dense, the tuner's median times)")
    for label, model_at in cases:
        times = [_best(edgenn.InferenceSession(model_at(s), threads=threads, tune="full"),
                       op, sparse) for s in SPARSITIES]
        ratios = [sp / d for d, sp in times]
        cross = next((f"{'<= ' if s == SPARSITIES[0] else ''}{s:.0%}"
                      for s, r in zip(SPARSITIES, ratios) if r < 1), f"> {SPARSITIES[-1]:.0%}")
        print(f"{label:24} " + " ".join(f"{r:11.2f}" for r in ratios) + f"   {cross:>9}")
        print(f"{'  dense / sparse us':24} "
              + " ".join(f"{d * 1e6:.0f}/{sp * 1e6:.0f}".rjust(11) for d, sp in times))


def layers(threads):
    rng = np.random.default_rng(0)
    crossover("layer (K -> M, HxW)",
              [(f"{k} -> {m}, {hw}x{hw}",
                lambda s, k=k, m=m, hw=hw: _layer_model(k, m, hw, s, rng))
               for k, m, hw in LAYERS], "Conv", SPARSE_CONV, threads)


def fc_layers(threads):
    crossover("FC layer (K -> N, rows)",
              [(f"{k} -> {n}, {rows} row{'s' if rows > 1 else ''}",
                lambda s, k=k, n=n, rows=rows: _fc_model(k, n, rows, s))
               for rows in FC_ROWS for k, n in FC_LAYERS], "Gemm", SPARSE_FC, threads)


def zoo(model):
    from support.models import ZOO
    path, feeds = ZOO[model]()
    return model, str(path), feeds


def mlps():
    """(name, .onnx path, feeds) of the MLP at each of FC_ROWS."""
    out = tempfile.mkdtemp()
    for rows in FC_ROWS:
        path = os.path.join(out, f"mlp-b{rows}.onnx")
        onnx.save(mlp(MLP, rows), path)
        x = np.random.default_rng(1).standard_normal((rows, MLP[0])).astype(np.float32)
        yield f"MLP {' -> '.join(map(str, MLP))}, batch {rows}", path, {"x": x}


def whole_model(threads, rounds, model, prune, label):
    name, path, feeds = model
    graph = edgenn.load(path)
    rep = prune(graph)
    tmp = os.path.join(tempfile.mkdtemp(), "pruned.enn")
    edgenn.save(graph, tmp)
    print(f"{name}: {len(rep.layers)} layers pruned to {rep.sparsity:.1%} zeros")
    shapes = {k: v.shape for k, v in feeds.items()}
    dense = edgenn_runner(path, threads, shapes)
    dense.name = "edgenn dense"
    sparse = edgenn_runner(tmp, threads, shapes)
    sparse.name = f"edgenn {label}"
    runners = interleave([dense, sparse, onnxruntime_runner(path, threads)], feeds, rounds)
    print(table(runners, threads))
    chosen = Counter(st.choice.kernel for st in sparse.session.plan.steps
                     if st.node.name in rep.layers)
    print(f"{sparse.name}'s pruned layers run: "
          + ", ".join(f"{k} x{n}" for k, n in sorted(chosen.items())))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("layers", "model", "pattern", "fc", "all"), default="all")
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
        whole_model(args.threads, args.rounds, zoo("mobilenet_v2-op13"),
                    lambda g: sparsify(g, args.sparsity), f"{args.sparsity:.0%} 1x1")
    if args.part in ("pattern", "all"):
        whole_model(args.threads, args.rounds, zoo("resnet18-op17"),
                    lambda g: pattern_prune(g, args.k, args.patterns, args.connectivity),
                    f"k{args.k} c{args.connectivity:.0%}")
    if args.part in ("fc", "all"):
        fc_layers(args.threads)
        for model in mlps():
            print()
            whole_model(args.threads, args.rounds, model,
                        lambda g: sparsify(g, args.sparsity, skip_first=False,
                                           layers=fully_connected), f"{args.sparsity:.0%} FC")


if __name__ == "__main__":
    main()
