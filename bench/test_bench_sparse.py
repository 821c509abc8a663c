"""Pruned models against their dense selves, pytest-benchmark: MobileNetV2 with its 1x1
weights 80% sparse (the spmm kernels) and ResNet-18 pattern-pruned (k = 4 of 9 taps, 50%
of the kernels cut: the spconv kernels), both edgenn, plus onnxruntime on the dense model.

    python -m pytest bench/test_bench_sparse.py --benchmark-group-by=group \\
        --benchmark-columns=median,min,max
    EDGENN_BENCH_THREADS=2 python -m pytest bench/test_bench_sparse.py ...

The per-layer crossover (the sparsity from which the sparse 1x1 kernel beats the dense
one, layer shape by layer shape) is scripts/compare_sparse.py --part layers; one
interleaved table of the whole models is its --part model / pattern.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from models import ZOO  # noqa: E402

THREADS = int(os.environ.get("EDGENN_BENCH_THREADS", "1"))
CASES = {"mobilenet_v2-op13": ("sparsify", {"ratio": 0.8}),
         "resnet18-op17": ("pattern_prune", {"k": 4, "connectivity": 0.5})}


@pytest.fixture(scope="module", params=sorted(CASES))
def model(request, tmp_path_factory):
    import edgenn
    from edgenn.compress import prune
    path, feeds = ZOO[request.param]()
    fn, kwargs = CASES[request.param]
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
