"""pytest fixtures for benchmarking your own models, edgenn beside onnxruntime, with
pytest-benchmark (installed with edgenn, the plugin is registered for every pytest run;
the fixtures do nothing unless a test asks for them).

    # test_my_model.py
    import pytest

    @pytest.mark.parametrize("runtime", ["edgenn", "onnxruntime"])
    def test_latency(benchmark_model, runtime):
        benchmark_model("my_model.onnx", runtime=runtime, threads=1)

    $ pytest test_my_model.py --benchmark-group-by=param:runtime --benchmark-autosave
    $ pytest-benchmark compare            # this run against the saved ones

benchmark_model(model, feeds=None, runtime="edgenn", threads=1, rounds=15, warmup=3,
input_shapes=None, group=None) times one run per round (pytest-benchmark's pedantic mode),
groups the results by model (or under `group`), and stores in each result's extra_info the runtime, thread count,
CPU and edgenn kernel tier, so saved runs from different machines stay telling apart.
feeds=None: random inputs of the model's input shapes (dynamic dims from input_shapes,
else 1). edgenn_session(model, **options): an edgenn.InferenceSession made once per test
session for the same arguments.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

RUNTIMES = ("edgenn", "onnxruntime")


def random_feeds(inputs, input_shapes=None, seed: int = 0) -> dict:
    """Inputs for NodeArg-like `inputs` (name, shape, dtype or onnxruntime's type)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in inputs:
        shape = (input_shapes or {}).get(arg.name) or \
            [d if isinstance(d, int) and d >= 0 else 1 for d in arg.shape]
        dtype = getattr(arg, "dtype", None) or _dtype_of(arg.type)
        if np.dtype(dtype).kind == "f":
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif np.dtype(dtype).kind == "b":
            feeds[arg.name] = rng.random(shape) < 0.5
        else:
            feeds[arg.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def _dtype_of(onnx_type: str) -> str:
    name = onnx_type[len("tensor("):-1] if onnx_type.startswith("tensor(") else onnx_type
    return {"float": "float32", "double": "float64"}.get(name, name)


def _make(runtime: str, model, threads: int, input_shapes):
    if runtime == "edgenn":
        import edgenn
        # tuned before the first run: the benchmark times the tuned plan, not the first one
        sess = edgenn.InferenceSession(model, threads=threads, input_shapes=input_shapes,
                                       tune="cached")
    elif runtime == "onnxruntime":
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        source = model if isinstance(model, (bytes, str)) else os.fspath(model)
        sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    else:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    return sess


@pytest.fixture(scope="session")
def edgenn_session():
    """edgenn_session(model, **options) -> an InferenceSession, one per argument set."""
    made = {}

    def make(model, **options):
        key = (os.fspath(model) if not isinstance(model, bytes) else model,
               tuple(sorted((k, repr(v)) for k, v in options.items())))
        if key not in made:
            import edgenn
            made[key] = edgenn.InferenceSession(model, **options)
        return made[key]
    return make


@pytest.fixture
def benchmark_model(benchmark):
    """benchmark_model(model, feeds=None, runtime="edgenn", threads=1, ...) -> the outputs
    of the last timed run (see the module docstring)."""
    def run(model, feeds=None, runtime: str = "edgenn", threads: int = 1, rounds: int = 15,
            warmup: int = 3, input_shapes=None, group: str | None = None):
        from edgenn.kernels import isa
        sess = _make(runtime, model, threads, input_shapes)
        feeds = feeds if feeds is not None else random_feeds(sess.get_inputs(), input_shapes)
        name = os.path.basename(os.fspath(model)) if not isinstance(model, bytes) else "bytes"
        benchmark.group = group or f"{name} ({threads} thread{'s' if threads > 1 else ''})"
        benchmark.extra_info.update(model=name, runtime=runtime, threads=threads,
                                    cpu=isa.describe())
        return benchmark.pedantic(sess.run, args=(None, feeds), rounds=rounds,
                                  warmup_rounds=warmup)
    return run
