"""int8 latency: edgenn int8 (its own quantizer) vs onnxruntime int8 (quantize_static, QDQ,
per-channel, u8/s8, after quant_pre_process) vs MNN int8 (its own quantizer, KL, Session
API) vs the three fp32, pytest-benchmark.

    python -m pytest bench/test_bench_int8.py --benchmark-group-by=group \\
        --benchmark-columns=median,min,max
    EDGENN_BENCH_THREADS=2 python -m pytest bench/test_bench_int8.py ...

Both quantizers calibrate on the same 8 images (tests/support/models.py CALIBRATION_IMAGES). For
one interleaved table with fidelity and ratios use bench/compare_int8.py.

Transformers (test_dynamic_int8_latency): onnxruntime's quantize_dynamic model run by both
runtimes, edgenn's own quantizer, both fp32 (bench/compare_dynamic.py for the table)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import IMAGENET_MEAN, IMAGENET_STD, ZOO, imagenet_calibration  # noqa: E402
from support.quant_data import token_calibration  # noqa: E402

from edgenn.bench import (edgenn_runner, mnn_convert, mnn_int8_model,  # noqa: E402
                          mnn_session_runner, onnxruntime_dynamic_model, onnxruntime_int8_model,
                          onnxruntime_runner)

THREADS = int(os.environ.get("EDGENN_BENCH_THREADS", "1"))
MODELS = ["mobilenet_v2-op13", "resnet18-op17"]
RUNTIMES = ["edgenn-int8", "onnxruntime-int8", "mnn-int8", "edgenn-fp32", "onnxruntime-fp32",
            "mnn-fp32"]


@pytest.fixture(scope="module", params=MODELS)
def model(request, tmp_path_factory):
    import edgenn
    path, feeds = ZOO[request.param]()
    (name, x), = feeds.items()
    calib = [{name: b} for b in imagenet_calibration(x.shape[-1])]
    ours = str(tmp_path_factory.mktemp("int8") / "model.int8.enn")
    edgenn.save(edgenn.quantize(str(path), calib), ours)
    mnn_q = mnn_int8_model(str(path), [c[name] for c in calib], IMAGENET_MEAN, IMAGENET_STD)
    return (request.param, str(path), ours, onnxruntime_int8_model(str(path), calib), mnn_q,
            feeds)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_int8_latency(benchmark, model, runtime, tmp_path):
    name, fp32, ours, theirs, mnn_q, feeds = model
    shapes = {k: v.shape for k, v in feeds.items()}
    runner = {"edgenn-int8": lambda: edgenn_runner(ours, THREADS, shapes),
              "edgenn-fp32": lambda: edgenn_runner(fp32, THREADS, shapes),
              "onnxruntime-int8": lambda: onnxruntime_runner(theirs, THREADS),
              "onnxruntime-fp32": lambda: onnxruntime_runner(fp32, THREADS),
              "mnn-int8": lambda: mnn_session_runner(mnn_q, THREADS),
              "mnn-fp32": lambda: mnn_session_runner(mnn_convert(fp32, str(tmp_path)),
                                                     THREADS)}[runtime]()
    benchmark.group = f"{name} int8 ({THREADS} thread)"
    benchmark.extra_info.update(model=name, runtime=runtime, threads=THREADS)
    benchmark.pedantic(runner.run, args=(feeds,), rounds=15, warmup_rounds=3)


DYNAMIC_MODELS = ["minilm_l6-op17"]
DYNAMIC_RUNTIMES = ["edgenn-ort-dynamic", "onnxruntime-dynamic", "edgenn-int8", "edgenn-fp32",
                    "onnxruntime-fp32"]


@pytest.fixture(scope="module", params=DYNAMIC_MODELS)
def transformer(request, tmp_path_factory):
    import edgenn
    path, feeds = ZOO[request.param]()
    calib = token_calibration(feeds)
    ours = str(tmp_path_factory.mktemp("int8") / "model.int8.enn")
    edgenn.save(edgenn.quantize(str(path), calib), ours)
    return request.param, str(path), ours, onnxruntime_dynamic_model(str(path)), feeds


@pytest.mark.parametrize("runtime", DYNAMIC_RUNTIMES)
def test_dynamic_int8_latency(benchmark, transformer, runtime):
    name, fp32, ours, dynamic, feeds = transformer
    shapes = {k: v.shape for k, v in feeds.items()}
    runner = {"edgenn-ort-dynamic": lambda: edgenn_runner(dynamic, THREADS, shapes),
              "onnxruntime-dynamic": lambda: onnxruntime_runner(dynamic, THREADS),
              "edgenn-int8": lambda: edgenn_runner(ours, THREADS, shapes),
              "edgenn-fp32": lambda: edgenn_runner(fp32, THREADS, shapes),
              "onnxruntime-fp32": lambda: onnxruntime_runner(fp32, THREADS)}[runtime]()
    benchmark.group = f"{name} int8 dynamic ({THREADS} thread)"
    benchmark.extra_info.update(model=name, runtime=runtime, threads=THREADS)
    benchmark.pedantic(runner.run, args=(feeds,), rounds=15, warmup_rounds=3)
