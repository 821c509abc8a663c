"""Decoder language models, pytest-benchmark: a 64-token prefill (to the first token) and
a prefill with 16 more greedy tokens per runtime (their difference / 16: the time per
decoded token), on the same export
(tests/support/decoders.py, SmolLM2-135M's width with 8 layers; EDGENN_BENCH_DECODER
names another shape:precision), the runners of bench/compare_decoders.py: edgenn's
Generator, onnxruntime's session loop, onnxruntime-genai, and llama.cpp where a GGUF of
the same weights lies beside the export (bench/decoder_gguf.py).

    python -m pytest bench/test_bench_decoders.py --benchmark-group-by=group \
        --benchmark-columns=median,min,max
    EDGENN_BENCH_THREADS=2 python -m pytest bench/test_bench_decoders.py ...

Benchmarks, not tests: nothing here asserts a time. For the interleaved side-by-side table
use bench/compare_decoders.py.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import compare_decoders as cd  # noqa: E402

THREADS = int(os.environ.get("EDGENN_BENCH_THREADS", "1"))
MODELS = os.environ.get("EDGENN_BENCH_DECODER", "smollm2-8l:int4,smollm2-8l:fp32").split(",")
RUNNERS = {"edgenn": cd.Edgenn, "onnxruntime": cd.OnnxRuntime,
           "onnxruntime-genai": cd.Genai, "llama.cpp": cd.LlamaCpp}


@pytest.fixture(scope="module", params=[(m, r) for m in MODELS for r in RUNNERS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def runner(request):
    name, runtime = request.param
    folder = cd._folder(name)
    if runtime == "llama.cpp" and not cd.LlamaCpp.available(folder):
        pytest.skip(f"no GGUF beside {folder} (bench/decoder_gguf.py writes one)")
    return name, runtime, RUNNERS[runtime](folder, THREADS), cd._prompt(folder, 64)


def test_prefill_and_16_tokens(benchmark, runner):
    name, runtime, r, prompt = runner
    benchmark.group = f"{name} prefill + 16 tokens ({THREADS} thread)"
    benchmark.extra_info.update(model=name, runtime=runtime, threads=THREADS)
    benchmark.pedantic(r.run, args=(prompt, 17), rounds=10, warmup_rounds=2)


def test_prefill(benchmark, runner):
    name, runtime, r, prompt = runner
    benchmark.group = f"{name} prefill, 64 tokens ({THREADS} thread)"
    benchmark.extra_info.update(model=name, runtime=runtime, threads=THREADS)
    benchmark.pedantic(r.run, args=(prompt, 1), rounds=10, warmup_rounds=2)
