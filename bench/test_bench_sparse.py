"""Pruned models against their dense selves, pytest-benchmark: MobileNetV2 with its 1x1
weights 80% sparse (the spmm kernels), ResNet-18 pattern-pruned (k = 4 of 9 taps, 50%
of the kernels cut: the spconv kernels) and an MLP 784 -> 1024 -> 1024 -> 10 (Gemm + Relu,
tests/support/helpers.py's mlp) with every weight 80% sparse at batch 1 (mlp-b1: the spmv kernels)
and 64 (mlp-b64: spgemm), all edgenn, plus onnxruntime on the dense model.

    python -m pytest bench/test_bench_sparse.py --benchmark-group-by=group \\
        --benchmark-columns=median,min,max
    python -m pytest bench/test_bench_sparse.py -k mlp --benchmark-group-by=group
    EDGENN_BENCH_THREADS=2 python -m pytest bench/test_bench_sparse.py ...

The per-layer crossover (the sparsity from which the sparse kernel beats the dense one,
layer shape by layer shape) is bench/compare_sparse.py --part layers (1x1 convs) / fc;
one interleaved table of the whole models is its --part model / pattern / fc.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.helpers import mlp  # noqa: E402
from support.models import ZOO  # noqa: E402

THREADS = int(os.environ.get("EDGENN_BENCH_THREADS", "1"))
MLP_ROWS = {"mlp-b1": 1, "mlp-b64": 64}
CASES = {"mobilenet_v2-op13": ("sparsify", {"ratio": 0.8}),
         "resnet18-op17": ("pattern_prune", {"k": 4, "connectivity": 0.5}),
         **{name: ("sparsify", {"ratio": 0.8, "skip_first": False, "layers": "fully_connected"})
            for name in MLP_ROWS}}


def _source(name, tmp_path_factory):
    """(.onnx path, feeds): a zoo model's, or the MLP's written at its batch."""
    if name not in MLP_ROWS:
        return ZOO[name]()
    import numpy as np
    import onnx
    rows = MLP_ROWS[name]
    path = tmp_path_factory.mktemp("mlp") / f"{name}.onnx"
    onnx.save(mlp(rows=rows), str(path))
    return path, {"x": np.random.default_rng(1).standard_normal((rows, 784)).astype(np.float32)}


@pytest.fixture(scope="module", params=sorted(CASES))
def model(request, tmp_path_factory):
    import edgenn
    from edgenn.compress import prune
    path, feeds = _source(request.param, tmp_path_factory)
    fn, kwargs = CASES[request.param]
    kwargs = {k: getattr(prune, v) if k == "layers" else v for k, v in kwargs.items()}
    graph = edgenn.load(str(path))
    getattr(prune, fn)(graph, **kwargs)
    pruned = str(tmp_path_factory.mktemp("sparse") / "pruned.enn")
    edgenn.save(graph, pruned)
    return request.param, str(path), pruned, feeds


@pytest.mark.parametrize("variant", ["edgenn-pruned", "edgenn-dense", "onnxruntime-dense"])
def test_pruned_latency(benchmark, benchmark_model, model, variant):
    name, dense, pruned, feeds = model
    runtime = variant.split("-")[0]
    benchmark_model(pruned if variant == "edgenn-pruned" else dense, feeds, runtime=runtime,
                    threads=THREADS, input_shapes={k: v.shape for k, v in feeds.items()},
                    group=f"{name} pruned vs dense ({THREADS} thread)")
    benchmark.extra_info.update(variant=variant)
