"""Shared pytest fixtures."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest


def _tier_lines() -> list[str]:
    """Which kernel tiers this run exercises natively, and which through SIMDe."""
    from edgenn.kernels import isa
    lacking = [t for t in ("avxvnni", "avx512vnni") if not isa.usable(t)]
    lacking = f" ({', '.join(lacking)}: not on this CPU, emulated only)" if lacking else ""
    return [f"edgenn CPU: {isa.describe()}",
            f"edgenn tiers native: {', '.join(isa.tiers())}; emulated through SIMDe: "
            f"avx512vnni (6 x 32, 7 x 32 tiles) + avxvnni int8 micro-kernels, depthwise "
            f"sums{lacking}, avx512vnni "
            f"int8 depthwise (u8 plane, narrow rows), avx2 + avx512 sgemm, spmm, recurrent, "
            f"direct-conv, depthwise-rows, depthwise c8 / c16, depthwise-project and row-op "
            f"kernels, "
            f"NEON sgemm, Winograd transforms, depthwise c4, depthwise rows4, depthwise-project, "
            f"direct-conv and row-op rows; "
            f"arm64: cross-built, under qemu (tests/kernels/native/test_aarch64.py)"]


# the SIMDe twins: edgenn.kernels.<family>.<twin>
EMULATED = ("gemm._sgemm_emu", "int8._qgemm_emu", "depthwise._dwc8_emu", "direct._convdirect_emu",
            "depthwise._dwrows_emu", "depthwise._dwproj_emu", "sparse._spmm_emu",
            "recurrent._recurrent_emu", "winograd._winograd_emu", "rowops._rowops_emu",
            "nbits._nbits_emu", "attention._gqa_emu")


def _build_emulated_kernels() -> None:
    """The kernels' SIMDe-emulated twins (tests only: an install leaves them out) built in
    place from the source tree when missing or older than a kernel source; a build error
    fails the run (never a skip)."""
    import importlib.util
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    kernels = root / "edgenn" / "kernels"
    newest = max(f.stat().st_mtime for pattern in ("*/*.h", "*/*.pyx", "*/*.pxi")
                 for f in kernels.glob(pattern))
    missing = []
    for m in EMULATED:
        spec = importlib.util.find_spec(f"edgenn.kernels.{m}")
        if spec is None:
            missing.append(m)
        elif os.path.getmtime(spec.origin) < newest:   # stale: rebuilt from the sources
            os.remove(spec.origin)
            missing.append(m)
    if not missing:
        return
    build = tempfile.mkdtemp(prefix="edgenn-emu-build-")
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace",
                        "--build-temp", build, "--build-lib", build], cwd=root,
                       capture_output=True, text=True,
                       env={**os.environ, "EDGENN_TEST_KERNELS": "only"})
    if r.returncode:
        raise RuntimeError(f"building the emulated kernels {missing} failed:\n"
                           f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    importlib.invalidate_caches()


def pytest_configure(config):
    """Every test session starts from the same tuning state: an empty tuning cache of its
    own (not the user's ~/.cache/edgenn) and tune="cached", so a kernel choice never
    depends on what an earlier run cached or on the caller's EDGENN_TUNE, and a session's
    plan is tuned when it is made (the default, "background", swaps tuned plans in later:
    tests/runtime/test_background_tuning.py)."""
    config._edgenn_cache = tempfile.mkdtemp(prefix="edgenn-test-cache-")
    os.environ["EDGENN_CACHE_DIR"] = config._edgenn_cache
    os.environ["EDGENN_TUNE"] = "cached"
    # every load converts afresh (a test may patch a pass or a converter and reload a file):
    # the cache of converted graphs has its own tests (tests/converters/test_graph_cache.py)
    os.environ["EDGENN_GRAPH_CACHE"] = "0"
    _build_emulated_kernels()


def pytest_unconfigure(config):
    import shutil
    shutil.rmtree(getattr(config, "_edgenn_cache", ""), ignore_errors=True)


def pytest_report_header(config):
    return _tier_lines()


def pytest_terminal_summary(terminalreporter):
    """The same lines at the end, where `pytest -q` (the README's command) shows them."""
    for line in _tier_lines():
        terminalreporter.write_line(line)


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d):
            pass
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory) -> Path:
    """Where exported zoo models are cached across runs.

    $EDGENN_TEST_MODELS if set, else ~/.cache/edgenn-test-models; a per-session pytest tmp
    dir if neither is writable. Inside it, tests/support/models.py keys files by a hash of its own
    source (and the torch/onnx versions), so an edit to a builder re-exports.
    """
    from support.models import CACHE_ENV, default_cache_dir
    d = default_cache_dir()
    if _writable(d):
        return d
    if os.environ.get(CACHE_ENV):
        pytest.fail(f"${CACHE_ENV}={d} is not a writable directory")
    return tmp_path_factory.mktemp("edgenn-test-models")


@pytest.fixture(scope="session")
def zoo(model_cache_dir):
    """zoo(name) -> models.Case (path, feeds, expected onnxruntime outputs), built once."""
    from support.models import ZooCache
    return ZooCache(model_cache_dir)
