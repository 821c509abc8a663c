"""Every command and code snippet of README.md's "Quick start" runs (issue #45).

The shell commands (the 4-space indented lines starting with `edgenn `) run in-process
through edgenn.cli.main and must exit 0; the ```python blocks run in order in one
namespace. Each runs in a fresh temporary directory where the README's placeholder files
are made real from the shipped demo model, so a README that drifts from the code (a
renamed flag, a removed option, a changed API) fails here.

The placeholders: model.onnx is the demo digits CNN (edgenn/models/digits.onnx, input
"image" float32 (batch, 1, 8, 8)); model.enn is it converted; model.tflite a tiny float
TFLite network written with tests/support/tflite_writer.py (no download); x.npy one digit;
calib/ a folder of .npy batches and held/ a folder with one .npz of held-out digits and
their labels (the data forms of edgenn/quant/data.py), all from digits_samples.npz;
smollm2/ is the small Llama the decoder tests build (tests/support/decoders.py, its int4
onnxruntime-genai export) and decoder.onnx that model's fp32 export.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

import edgenn
from edgenn.cli import EXIT_OK, main
from edgenn.demo import DEMO_MODEL, DEMO_SAMPLES

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start() -> str:
    """The text of README.md's "## Quick start" section (up to the next "## " heading)."""
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no '## Quick start' section followed by another section"
    return m.group(1)


def readme_commands() -> list[str]:
    """The indented `edgenn ...` lines, trailing `# comments` stripped."""
    out = []
    for line in quick_start().splitlines():
        if line.startswith("    edgenn "):
            out.append(shlex.join(shlex.split(line, comments=True)))
    return out


def readme_python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", quick_start(), re.S | re.M)


COMMANDS = readme_commands()
PY_BLOCKS = readme_python_blocks()

# README token -> the token run here. Only where the demo digits model cannot stand in
# for the README's placeholder model as written:
TOKEN_MAP = {
    # the README's model has an input "x" of 1x3x224x224; the digits model's input is
    # "image" of (batch, 1, 8, 8)
    "x=x.npy": "image=x.npy",
    "x=1,3,224,224": "image=1,1,8,8",
}
if importlib.util.find_spec("MNN") is None:
    # MNN is in the bench extra, not the test extra: without it, compare with
    # onnxruntime alone (the --compare flag itself is still exercised)
    TOKEN_MAP["onnxruntime,mnn"] = "onnxruntime"

# subcommand -> arguments appended to the README's command
EXTRA_ARGS = {
    # keep the test fast: 3 interleaved rounds instead of the default 20
    "bench": ["--rounds", "3"],
}


def to_argv(command: str) -> list[str]:
    """The argv run for one README command: without `edgenn`, mapped, extras appended."""
    tokens = shlex.split(command)
    assert tokens[0] == "edgenn"
    argv = [TOKEN_MAP.get(t, t) for t in tokens[1:]]
    return argv + EXTRA_ARGS.get(argv[0], [])


def _digits():
    with np.load(DEMO_SAMPLES) as d:
        return d["images"], d["labels"]


def _tiny_tflite() -> bytes:
    """A float32 NHWC digits-shaped TFLite model (conv, global mean, fc, softmax)."""
    from support.tflite_writer import Net
    net = Net(seed=0)
    x = net.input("image", (1, 8, 8, 1))
    y = net.conv(x, 8, 3, stride=2, act="RELU6")
    net.output(net.softmax(net.fc(net.mean(y, (1, 2)), 10)))
    return net.build()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh cwd holding the README's placeholder files (module doc)."""
    images, labels = _digits()
    shutil.copy(DEMO_MODEL, tmp_path / "model.onnx")
    edgenn.convert(str(tmp_path / "model.onnx"), str(tmp_path / "model.enn"))
    (tmp_path / "model.tflite").write_bytes(_tiny_tflite())
    np.save(tmp_path / "x.npy", images[:1])
    (tmp_path / "calib").mkdir()
    for i in range(2):                                     # two batches of 50 digits
        np.save(tmp_path / "calib" / f"b{i}.npy", images[i * 50:(i + 1) * 50])
    (tmp_path / "held").mkdir()                            # the rest, with labels
    np.savez(tmp_path / "held" / "held.npz", image=images[100:], labels=labels[100:])
    from support.decoders import decoder
    shutil.copytree(decoder("int4"), tmp_path / "smollm2")
    fp32 = decoder("fp32")
    shutil.copy(fp32 / "model.onnx", tmp_path / "decoder.onnx")
    shutil.copy(fp32 / "model.onnx.data", tmp_path / "model.onnx.data")   # its weights
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_quick_start_is_found():
    """The extraction itself: it cannot silently find nothing."""
    assert len(COMMANDS) >= 8, COMMANDS
    assert len(PY_BLOCKS) >= 2, PY_BLOCKS
    # every mapping still names something in the README (a stale entry is drift too)
    tokens = {t for c in COMMANDS for t in shlex.split(c)}
    assert set(TOKEN_MAP) <= tokens, set(TOKEN_MAP) - tokens
    subcommands = {shlex.split(c)[1] for c in COMMANDS}
    assert set(EXTRA_ARGS) <= subcommands, set(EXTRA_ARGS) - subcommands


@pytest.mark.parametrize("command", COMMANDS, ids=COMMANDS)
def test_readme_command_runs(command, workdir, capsys):
    argv = to_argv(command)
    output = argv[argv.index("-o") + 1] if "-o" in argv else None
    if output:                      # written by this command, not left by the fixture
        (workdir / output).unlink(missing_ok=True)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == EXIT_OK, f"`{command}` (run as {argv}) exited {code}:\n{out}\n{err}"
    assert "Traceback" not in out + err
    if output:
        assert (workdir / output).is_file(), f"`{command}` did not write {output}"


def test_readme_python_snippets_run(workdir):
    # the README leaves `x` (an input batch) and `calibration_data` to the reader: here
    # digits from digits_samples.npz, the shape of the demo model's "image" input
    images, _ = _digits()
    namespace = {"x": images[:4], "calibration_data": images[:100]}
    (workdir / "model.enn").unlink()          # the first block writes it
    for i, block in enumerate(PY_BLOCKS):
        try:
            exec(compile(block, f"README.md quick start python block {i + 1}", "exec"),
                 namespace)
        except Exception as exc:   # noqa: BLE001 - name the block that drifted
            pytest.fail(f"README python block {i + 1} failed: {type(exc).__name__}: {exc}"
                        f"\n{block}")
    # what the blocks promise: the .enn written, probabilities out, the int8 model saved
    assert (workdir / "model.enn").is_file() and (workdir / "model.int8.enn").is_file()
    probs = namespace["probs"]
    assert probs.shape == (4, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
