"""A runtime-only install: running an .enn needs numpy, safetensors, threadpoolctl, tqdm and
the compiled kernels, never onnx, Numba or SciPy (edgenn/extras.py).

- the runtime with those packages made unimportable (a child process whose import
  system refuses them): zoo models, as .enn and as .onnx (edgenn's own ONNX reader), run
  there and match onnxruntime; the demo and `edgenn convert` run there;
- the shipped digits.enn is the same model as a fresh conversion of digits.onnx;
- the real thing (slow): `pip wheel .`, a fresh virtual environment with the wheel and what
  it requires, the demo and a model run there, and its size against onnxruntime + numpy.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from support.models import rel_err

import edgenn
from edgenn.demo import DEMO_ENN, DEMO_MODEL, DEMO_SAMPLES
from edgenn.graph import format as enn

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("onnx", "numba", "llvmlite", "scipy", "optuna")
TOL = 1e-4   # as tests/api/test_models.py: edgenn against onnxruntime, fp32
MODELS = ("mobilenet_v2-op13", "bert_tiny-op20", "yolo_tiny-op18", "ppocr_v4_det")

# prepended to the child's code: those packages cannot be found, as in a lean install
BLOCK = textwrap.dedent(f"""
    import sys
    class _Lean:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {OPTIONAL!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}} (lean install)")
            return None
    sys.meta_path.insert(0, _Lean())
""")


def _child(code: str, tmp_path, timeout=600) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(BLOCK + textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def test_runtime_runs_enn_models_without_onnx_numba_scipy(zoo, tmp_path):
    jobs = []
    for name in MODELS:
        case = zoo(name)
        path = tmp_path / f"{name}.enn"
        edgenn.convert(str(case.path), str(path))
        (tmp_path / f"{name}.onnx").write_bytes(case.path.read_bytes())
        np.savez(tmp_path / f"{name}.feeds.npz", **case.feeds)
        jobs.append((name, str(path), case.input_shapes))
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    res = _child(f"""
        import json, sys
        import numpy as np
        import edgenn
        for name, path, shapes in json.load(open("jobs.json")):
            feeds = dict(np.load(name + ".feeds.npz"))
            sess = edgenn.InferenceSession(path, threads=1, input_shapes=shapes)
            outs = sess.run(None, feeds)
            np.savez(name + ".out.npz", *outs)
        for name, path, shapes in json.load(open("jobs.json")):   # .onnx: edgenn's reader
            feeds = dict(np.load(name + ".feeds.npz"))
            sess = edgenn.InferenceSession(path[:-4] + ".onnx", threads=1,
                                           input_shapes=shapes)
            np.savez(name + ".onnx-out.npz", *sess.run(None, feeds))
        from edgenn.cli import main
        assert main(["demo"]) == 0
        assert main(["convert", {DEMO_MODEL!r}, "-o", "x.enn"]) == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL!r})
        assert not loaded, loaded
    """, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "accuracy on" in res.stdout
    for name in MODELS:
        expected = zoo(name).expected
        for kind in ("out", "onnx-out"):
            got = np.load(tmp_path / f"{name}.{kind}.npz")
            got = [got[f"arr_{i}"] for i in range(len(got.files))]
            assert len(got) == len(expected)
            errors = [rel_err(g, e) for g, e in zip(got, expected)]
            assert max(errors) <= TOL, f"{name} ({kind}): {errors}"


def test_a_family_loads_and_selects_without_the_extras(tmp_path):
    """The device side of a scalable family (load_family, the probe, select) needs none
    of onnx, numba, scipy or optuna: only the search that built it does."""
    from support.quant_data import digits

    from edgenn.scale.build import build
    calib, held, labels = digits()
    family = tmp_path / "digits.ennf"
    build(DEMO_MODEL, calib, {"image": held, "labels": labels}, output=str(family),
          budget=3, cache_root=None, rounds=5)
    np.save(tmp_path / "held.npy", held[:4])
    r = _child(f"""
        import sys, numpy as np, edgenn
        fam = edgenn.load_family({str(family)!r})
        sess = fam.select(latency_ms=1e3)
        out = sess.run(None, {{"image": np.load("held.npy")}})[0]
        assert out.shape == (4, 10), out.shape
        loaded = sorted(m for m in {OPTIONAL!r} if m in sys.modules)
        assert not loaded, loaded
        print("ok", len(fam.members))
    """, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ok")


def test_shipped_demo_enn_is_the_converted_demo_model():
    """digits.enn (what a lean install's demo runs) = convert(digits.onnx) today: same ops,
    attributes and weights; regenerate with `python tools/make_demo_model.py --enn`."""
    shipped = enn.load(DEMO_ENN)
    fresh = edgenn.load(DEMO_MODEL)
    hint = "edgenn/models/digits.enn is stale: python tools/make_demo_model.py --enn"
    assert [(n.op, n.inputs, n.outputs) for n in shipped.nodes] == \
        [(n.op, n.inputs, n.outputs) for n in fresh.nodes], hint
    assert [repr(sorted(n.attrs.items())) for n in shipped.nodes] == \
        [repr(sorted(n.attrs.items())) for n in fresh.nodes], hint
    assert sorted(shipped.consts) == sorted(fresh.consts), hint
    for k, v in fresh.consts.items():
        assert np.array_equal(np.asarray(shipped.consts[k]), v), f"{k}: {hint}"
    images = np.load(DEMO_SAMPLES)["images"]
    a = edgenn.InferenceSession(DEMO_ENN).run(None, {"image": images})[0]
    b = edgenn.InferenceSession(DEMO_MODEL).run(None, {"image": images})[0]
    assert np.array_equal(a, b)


def _installed_bytes(dists) -> int:
    """Bytes of the files pip installed for these distributions (their RECORD)."""
    total = 0
    for d in dists:
        for f in metadata.distribution(d).files or ():
            p = Path(f.locate())
            total += p.stat().st_size if p.is_file() else 0
    return total


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_is_lean(tmp_path):
    """pip wheel . -> fresh venv -> pip install the wheel: the demo and an .enn model run;
    nothing optional is installed; the install is no larger than onnxruntime + numpy."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=900, capture_output=True)
    wheel, = wheels.glob("edgenn-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # pip from outside (--python): the venv holds only edgenn and what it requires
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                    "--disable-pip-version-check", str(wheel)], check=True, timeout=900,
                   capture_output=True)
    site = next(venv.glob("lib/python*/site-packages"))
    names = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert "edgenn" in names
    assert not names & {"onnx", "numba", "llvmlite", "scipy"}, names
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    demo = subprocess.run([str(venv / "bin" / "edgenn"), "demo"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "held-out digits" in demo.stdout
    lean = _dir_bytes(site)
    peer = _installed_bytes(["onnxruntime", "numpy"])
    print(f"lean install {lean / 1e6:.1f} MB, onnxruntime + numpy {peer / 1e6:.1f} MB")
    assert lean <= peer, (lean, peer)


def test_erf_without_scipy_is_exact_on_every_rank(monkeypatch):
    import math

    from edgenn.kernels.reference import special
    monkeypatch.setattr(special, "have", lambda module: module != "scipy")
    for x in (np.float32(0.3), np.array(-1.25, np.float32), np.linspace(-4, 4, 13),
              np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)):
        got = special.erf(x)
        want = np.vectorize(math.erf)(np.asarray(x, np.float64))
        assert np.shape(got) == np.shape(x)
        assert np.asarray(got).dtype == np.asarray(x).dtype
        assert np.allclose(got, want, rtol=0, atol=float(np.finfo(np.asarray(x).dtype).eps))


def test_rare_dtypes_without_onnx_are_unsupported_not_a_crash(monkeypatch):
    from edgenn.errors import UnsupportedOpError
    from edgenn.graph import dtypes
    monkeypatch.setattr(dtypes, "have", lambda module: module != "onnx")
    assert dtypes.from_onnx(1) == "float32"
    with pytest.raises(UnsupportedOpError):
        dtypes.from_onnx(16)          # bfloat16: onnx's table
    with pytest.raises(UnsupportedOpError):
        dtypes.to_onnx("bfloat16")
