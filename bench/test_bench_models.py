"""Per-model latency, edgenn vs onnxruntime (and MNN when installed), pytest-benchmark.

    pip install -e '.[test,bench]'
    python -m pytest bench/ --benchmark-group-by=param:name --benchmark-columns=median,min,max
    EDGENN_BENCH_THREADS=2 python -m pytest bench/ ...

Benchmarks, not tests: nothing here asserts a time. For one interleaved side-by-side table
use `edgenn bench MODEL --compare onnxruntime,mnn` (DESIGN.md: how to measure).
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO  # noqa: E402

from edgenn.bench import PEERS  # noqa: E402

THREADS = int(os.environ.get("EDGENN_BENCH_THREADS", "1"))
MODELS = ["mobilenet_v2-op13", "resnet18-op17", "minilm_l6-op17", "ppocr_v4_rec",
          "ppocr_mobile_v2_cls", "crnn_bilstm-op14"]
RUNTIMES = ["edgenn", "onnxruntime", "mnn"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    if request.param not in ZOO:
        pytest.skip(f"{request.param} not in the zoo")
    return request.param, ZOO[request.param]()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_latency(benchmark, benchmark_model, model, runtime):
    """edgenn and onnxruntime through the fixture edgenn ships for users' own models
    (edgenn/pytest_plugin.py); MNN through its runner."""
    name, (path, feeds) = model
    shapes = {k: v.shape for k, v in feeds.items()}
    if runtime in ("edgenn", "onnxruntime"):
        benchmark_model(str(path), feeds, runtime=runtime, threads=THREADS,
                        input_shapes=shapes)
        benchmark.group = f"{name} ({THREADS} thread)"
        return
    try:
        runner = PEERS[runtime](str(path), THREADS, shapes)
    except (ImportError, RuntimeError) as exc:
        pytest.skip(f"{runtime}: {exc}")
    benchmark.group = f"{name} ({THREADS} thread)"
    benchmark.extra_info.update(model=name, runtime=runtime, threads=THREADS)
    benchmark.pedantic(runner.run, args=(feeds,), rounds=15, warmup_rounds=3)
