"""The compression chain (compress/chain.py, `edgenn compress`, `edgenn prune`) on the demo
digits CNN with its real held-out digits: every step measured, sizes and fidelity
consistent with what is saved and run."""
import numpy as np
from support.helpers import run_cli
from support.quant_data import digits

import edgenn
from edgenn.cli import EXIT_OK, EXIT_USAGE
from edgenn.compress.chain import compress
from edgenn.demo import DEMO_MODEL


def test_chain_measures_every_step_and_saves_what_it_measured(tmp_path):
    calib, held, labels = digits()
    data = {"image": held, "labels": labels}
    graph, rep = compress(DEMO_MODEL, calib, sparse=0.6, data=data, rounds=3)
    assert [s.name for s in rep.steps] == ["fp32", "pruned", "int8", "coded"]
    fp32, pruned, int8, coded = rep.steps
    assert fp32.cosine is None and fp32.accuracy > 0.95            # the demo model's level
    assert int8.bytes < pruned.bytes and coded.bytes < int8.bytes
    assert all(0.5 < s.cosine <= 1 + 1e-9 for s in rep.steps[1:])
    assert all(s.accuracy is not None and s.latency_ms > 0 for s in rep.steps)
    assert "1x1" in pruned.detail and "int8 layers" in int8.detail
    path = tmp_path / "c.enn"
    edgenn.save(graph, str(path))
    assert path.stat().st_size == coded.bytes                       # the size it reported
    # the saved model is the one measured: its accuracy on the held-out digits
    probs = edgenn.InferenceSession(str(path)).run(None, {"image": held})[0]
    assert abs(np.mean(probs.argmax(1) == labels) - coded.accuracy) < 1e-9
    table = rep.table()
    assert all(name in table for name in ("fp32", "pruned", "int8", "coded"))


def test_cli_prune_and_compress(tmp_path, capsys):
    calib, held, labels = digits()
    np.savez(tmp_path / "calib.npz", image=calib)
    np.savez(tmp_path / "held.npz", image=held, labels=labels)
    out = str(tmp_path / "p.enn")
    code, text, _ = run_cli(capsys, "prune", DEMO_MODEL, "-o", out, "--sparse", "0.7")
    assert code == EXIT_OK and "70.0% zero" in text
    g = edgenn.load(out)
    from edgenn.compress.prune import pointwise_convs
    pw = list(pointwise_convs(g))
    w = g.consts[pw[-1].inputs[1]]
    assert abs((w == 0).mean() - 0.7) < 0.01
    code, text, _ = run_cli(capsys, "compress", DEMO_MODEL, "--calib",
                            str(tmp_path / "calib.npz"), "--data", str(tmp_path / "held.npz"),
                            "--sparse", "0.5", "-o", str(tmp_path / "c.enn"))
    assert code == EXIT_OK and "coded" in text and (tmp_path / "c.enn").exists()
    code, text, _ = run_cli(capsys, "prune", DEMO_MODEL, "-o", out, "--sparse-fc", "0.5")
    assert code == EXIT_OK and "50.0% zero" in text
    g = edgenn.load(out)
    head = [n for n in g.nodes if n.op == "Gemm"][0]
    assert (g.consts[head.inputs[1]] == 0).mean() == 0.5
    code, _, err = run_cli(capsys, "prune", DEMO_MODEL, "-o", out)   # nothing to prune
    assert code == EXIT_USAGE and "give --sparse" in err


def test_cli_channel_pruning_with_a_config(tmp_path, capsys):
    calib, held, labels = digits()
    np.savez(tmp_path / "calib.npz", image=calib)
    cfg = tmp_path / "prune.json"
    code, text, _ = run_cli(capsys, "prune", DEMO_MODEL, "--write-config", str(cfg),
                            "--channels", "0.25")
    assert code == EXIT_OK and cfg.exists()
    out = tmp_path / "ch.enn"
    code, text, _ = run_cli(capsys, "prune", DEMO_MODEL, "-o", str(out), "--config", str(cfg),
                            "--calib", str(tmp_path / "calib.npz"))
    assert code == EXIT_OK and "refit (least squares)" in text
    probs = edgenn.InferenceSession(str(out)).run(None, {"image": held})[0]
    assert np.mean(probs.argmax(1) == labels) > 0.94
    code, _, err = run_cli(capsys, "prune", DEMO_MODEL, "--channels", "0.2")   # no -o
    assert code == EXIT_USAGE and "-o OUTPUT" in err


def test_search_keeps_the_most_pruned_chain_that_meets_the_fidelity():
    import pytest

    from edgenn.compress.chain import search
    calib, held, labels = digits()
    data = {"image": held, "labels": labels}
    graph, rep, tried = search(DEMO_MODEL, calib, fidelity=0.99, ratios=(0.5, 0.25, 0.1, 0.0),
                               data=data, rounds=2)
    assert rep.steps[-1].cosine >= 0.99
    assert {p for _, p, _, _ in tried} == {"int8", "int4w"}
    for precision in ("int8", "int4w"):       # per precision: the larger ratios failed, the
        mine = [t for t in tried if t[1] == precision]     # first to pass ends its ladder
        assert all(c < 0.99 for *_, c in mine[:-1]) and mine[-1][3] >= 0.99
    passed = [t for t in tried if t[3] >= 0.99]
    smallest = max(passed, key=lambda t: t[2])
    assert smallest[3] == rep.steps[-1].cosine                    # the smallest file kept
    assert rep.steps[0].bytes / rep.steps[-1].bytes == smallest[2]
    with pytest.raises(ValueError, match="no candidate meets"):
        search(DEMO_MODEL, calib, fidelity=0.999, target_size=5, ratios=(0.5, 0.0),
               data=data, rounds=2)
    with pytest.raises(ValueError, match="precisions"):
        search(DEMO_MODEL, calib, fidelity=0.9, precisions=("int3",), data=data)
    with pytest.raises(ValueError, match="per candidate"):     # not a precision's override
        search(DEMO_MODEL, calib, fidelity=0.9, precisions=("int8",), weight_only=4, data=data)


def test_chain_weight_only_int4_by_gptq(tmp_path, capsys):
    calib, held, labels = digits()
    data = {"image": held, "labels": labels}
    graph, rep = compress(DEMO_MODEL, calib, weight_only=4, data=data, rounds=3)
    assert [s.name for s in rep.steps] == ["fp32", "int4w", "coded"]
    fp32, w4, coded = rep.steps
    assert "by GPTQ" in w4.detail and w4.bytes < fp32.bytes / 2
    assert fp32.accuracy - w4.accuracy < 0.03 and w4.cosine > 0.99
    path = tmp_path / "w4.enn"
    edgenn.save(graph, str(path))
    assert path.stat().st_size == coded.bytes
    np.savez(tmp_path / "calib.npz", image=calib)
    code, text, _ = run_cli(capsys, "convert", DEMO_MODEL, "-o",
                            str(tmp_path / "c.enn"), "--weights", "int4", "--calib",
                            str(tmp_path / "calib.npz"), "--block", "16")
    assert code == EXIT_OK and "by GPTQ" in text
    code, _, err = run_cli(capsys, "convert", DEMO_MODEL, "-o",
                           str(tmp_path / "d.enn"), "--block", "16")
    assert code != EXIT_OK and "--weights" in err
