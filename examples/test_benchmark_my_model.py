"""A user's own benchmark suite: edgenn beside onnxruntime on one model, through the
fixtures edgenn ships (edgenn/pytest_plugin.py) and pytest-benchmark.

    pip install 'edgenn[test]'        # or: pip install edgenn pytest-benchmark onnxruntime
    pytest examples/test_benchmark_my_model.py --benchmark-group-by=group \\
        --benchmark-columns=median,min,max --benchmark-autosave
    pytest-benchmark compare          # later runs against the saved ones
"""
import os

import pytest

MODEL = os.environ.get("MY_MODEL") or os.path.join(
    os.path.dirname(__file__), "..", "edgenn", "models", "digits.onnx")


@pytest.mark.parametrize("runtime", ["edgenn", "onnxruntime"])
def test_latency(benchmark_model, runtime):
    probs, = benchmark_model(MODEL, runtime=runtime, threads=1,
                             input_shapes={"image": (16, 1, 8, 8)})
    assert probs.shape == (16, 10)
