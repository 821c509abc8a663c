"""The `edgenn` command: every subcommand, exit codes, and no raw tracebacks on user errors."""
import subprocess
import sys

import numpy as np
import pytest
from support.helpers import helper, make_model, run_cli

from edgenn.cli import EXIT_MISMATCH, EXIT_OK, EXIT_REJECTED
from edgenn.demo import DEMO_MODEL


def test_convert_inspect_run_round_trip(tmp_path, capsys):
    enn = str(tmp_path / "d.enn")
    code, out, _ = run_cli(capsys, "convert", DEMO_MODEL, "-o", enn)
    assert code == EXIT_OK and "wrote" in out
    code, out, _ = run_cli(capsys, "inspect", enn)
    assert code == EXIT_OK and "Conv x" in out and "fused activations" in out
    x = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))["images"][:4]
    np.save(tmp_path / "x.npy", x)
    code, out, _ = run_cli(capsys, "run", enn, "--input", f"image={tmp_path / 'x.npy'}",
                           "--output-dir", str(tmp_path / "out"))
    assert code == EXIT_OK
    probs = np.load(tmp_path / "out" / "probs.npy")
    assert probs.shape == (4, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_convert_weight_only_shrinks_and_still_classifies(tmp_path, capsys, bits):
    import os
    import edgenn
    enn = str(tmp_path / f"d.{bits}.enn")
    code, out, _ = run_cli(capsys, "convert", DEMO_MODEL, "-o", enn, "--weights", bits)
    assert code == EXIT_OK and f"as {bits}" in out
    plain = str(tmp_path / "d.enn")
    run_cli(capsys, "convert", DEMO_MODEL, "-o", plain)
    # a 53 KB model: the graph JSON and the small raw tensors weigh as much as the weights
    assert os.path.getsize(enn) < os.path.getsize(plain) * (0.6 if bits == "int8" else 0.5)
    data = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))
    x = data["images"]
    want = edgenn.InferenceSession(plain).run(None, {"image": x})[0].argmax(1)
    got = edgenn.InferenceSession(enn).run(None, {"image": x})[0].argmax(1)
    assert np.mean(got == want) >= (0.99 if bits == "int8" else 0.95)


def test_check_reports_and_fails_on_tolerance(capsys):
    code, out, _ = run_cli(capsys, "check", DEMO_MODEL)
    assert code == EXIT_OK and "max relative error" in out and "probs" in out
    worst = float(out.split("max relative error ")[1].split()[0])
    # a tolerance below the error found must fail; with none found, 0 must pass
    tol = worst / 2 if worst > 0 else 0.0
    code, out, _ = run_cli(capsys, "check", DEMO_MODEL, "--tolerance", repr(tol))
    assert (code, "MISMATCH" in out) == ((EXIT_MISMATCH, True) if worst > 0 else (EXIT_OK, False))


def test_demo(capsys):
    code, out, _ = run_cli(capsys, "demo")
    assert code == EXIT_OK
    accuracy = float(out.split("held-out digits: ")[1].split("%")[0])
    assert accuracy >= 95.0


@pytest.mark.parametrize("make_bad", [
    lambda p: p.write_bytes(b""),
    lambda p: p.write_bytes(b"\x08\x00\x00garbage"),
    lambda p: p.write_bytes(open(DEMO_MODEL, "rb").read()[:5000]),
])
def test_corrupt_files_exit_3_with_a_message(tmp_path, capsys, make_bad):
    bad = tmp_path / "bad.onnx"
    make_bad(bad)
    for cmd in ("run", "inspect"):
        code, _, err = run_cli(capsys, cmd, str(bad))
        assert code == EXIT_REJECTED and err.startswith("edgenn: error:")


def test_missing_file_and_bad_input(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", str(tmp_path / "nope.onnx"))
    assert code == EXIT_REJECTED and "nope.onnx" in err
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 8, 8), np.float64))
    code, _, err = run_cli(capsys, "run", DEMO_MODEL, "--input", f"image={tmp_path / 'x.npy'}")
    assert code == EXIT_REJECTED and "must be float32, got float64" in err
    code, _, err = run_cli(capsys, "run", DEMO_MODEL, "--input", f"img={tmp_path / 'x.npy'}")
    assert code == EXIT_REJECTED and "unknown input" in err


def test_unsupported_op_lists_nodes(tmp_path, capsys):
    model = make_model([helper.make_node("Det", ["x"], ["y"], name="my_det")],
                       [("x", np.float32, [2, 2])], [("y", np.float32, [])])
    path = tmp_path / "det.onnx"
    path.write_bytes(model.SerializeToString())
    code, _, err = run_cli(capsys, "convert", str(path), "-o", str(tmp_path / "o.enn"))
    assert code == EXIT_REJECTED and "Det: my_det" in err


def test_console_script_and_usage_errors():
    r = subprocess.run([sys.executable, "-m", "edgenn.cli", "frobnicate"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = subprocess.run(["edgenn", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "convert" in r.stdout


def test_version(capsys):
    from edgenn.version import __version__
    code, out, _ = run_cli(capsys, "--version")
    assert code == EXIT_OK and out.strip() == f"edgenn {__version__}"
