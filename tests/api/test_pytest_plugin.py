"""The pytest plugin edgenn ships (edgenn/pytest_plugin.py), run the way a user runs it:
a pytest process over the documented example, with pytest-benchmark storing results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "test_benchmark_my_model.py"


def test_user_example_benchmarks_edgenn_beside_onnxruntime(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", str(EXAMPLE), "-p", "no:cacheprovider",
                        f"--benchmark-json={out}", "--benchmark-min-rounds=3"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    runs = {b["extra_info"]["runtime"]: b for b in data["benchmarks"]}
    assert set(runs) == {"edgenn", "onnxruntime"}
    for b in runs.values():
        assert b["group"] == "digits.onnx (1 thread)"
        assert b["stats"]["rounds"] == 15 and b["stats"]["median"] > 0
        assert b["extra_info"]["threads"] == 1 and "family" in b["extra_info"]["cpu"]


def test_random_feeds_follow_the_inputs():
    from edgenn.pytest_plugin import random_feeds
    from edgenn.runtime.session import NodeArg
    args = [NodeArg("x", ["batch", 3], "tensor(float)", "float32"),
            NodeArg("ids", [2, "seq"], "tensor(int64)", "int64")]
    f = random_feeds(args, {"ids": (2, 5)})
    assert f["x"].shape == (1, 3) and f["x"].dtype == "float32"
    assert f["ids"].shape == (2, 5) and f["ids"].dtype == "int64"
