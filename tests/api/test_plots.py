"""`edgenn inspect --plot` and `edgenn bench --plot` (edgenn/plots.py): the per-layer profile
covers every step of the plan with the kernel it runs, the pictures are real PNGs, and
without matplotlib the option fails with the extra to install."""
import numpy as np
import pytest
from support.helpers import run_cli

import edgenn
from edgenn import extras, plots
from edgenn.cli import EXIT_OK, EXIT_REJECTED
from edgenn.demo import DEMO_ENN, DEMO_MODEL, DEMO_SAMPLES

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = open(path, "rb").read()
    assert data[:8] == PNG, f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_layer_profile_covers_every_step_with_its_kernel():
    images = np.load(DEMO_SAMPLES)["images"][:8]
    sess = edgenn.InferenceSession(DEMO_ENN, input_shapes={"image": images.shape})
    profile = plots.layer_profile(sess, {"image": images}, rounds=5)
    steps = sess.plan.steps
    assert [p.index for p in profile] == list(range(len(steps)))
    assert [(p.op, p.node, p.kernel) for p in profile] == \
        [(s.node.op, s.node.name, s.choice.kernel) for s in steps]
    assert all(p.median_s > 0 for p in profile)
    table = plots.profile_table(profile, top=3)
    slowest = max(profile, key=lambda p: p.median_s)
    assert slowest.node[:36] in table.splitlines()[1]


def test_inspect_plot_writes_the_profile_png(tmp_path, capsys):
    png = tmp_path / "profile.png"
    code, out, _ = run_cli(capsys, "inspect", DEMO_MODEL, "--plot", str(png))
    assert code == EXIT_OK and "per-layer profile:" in out and f"wrote {png}" in out
    w, h = _png_size(png)
    assert w > 400 and h > 200


def test_bench_plot_writes_the_side_by_side_png(tmp_path, capsys):
    png = tmp_path / "bench.png"
    code, out, _ = run_cli(capsys, "bench", DEMO_MODEL, "--rounds", "5", "--plot", str(png))
    assert code == EXIT_OK and "onnxruntime" in out
    w, h = _png_size(png)
    assert w > 300 and h > 200


def test_bench_of_an_enn_times_edgenn_alone(capsys):
    code, out, _ = run_cli(capsys, "bench", DEMO_ENN, "--rounds", "3")
    assert code == EXIT_OK
    assert "the peers read ONNX" in out and "onnxruntime  " not in out


def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(extras, "have", lambda module: module != "matplotlib")
    code, _, err = run_cli(capsys, "bench", DEMO_ENN, "--rounds", "2",
                           "--plot", str(tmp_path / "b.png"))
    assert code == EXIT_REJECTED and "edgenn[plot]" in err
    assert not (tmp_path / "b.png").exists()
    with pytest.raises(edgenn.MissingDependencyError):
        plots.plot_bench([], str(tmp_path / "c.png"), "x", 1)
