"""ARM64: the C kernels build for aarch64 and compute the same numbers there.

- Every extension's C (Cython output + kernel headers) compiles with aarch64-linux-gnu-gcc
  (the x86 intrinsics come from SIMDe off x86: _simd.h), as `pip install` on a Raspberry
  Pi or Apple-silicon Linux box would compile it. The host's Python headers stand in for
  the target's (LP64 on both), so this is a compile check, not a wheel.
- kernels_check.c (the probe, the VNNI int8 micro-kernels through SIMDe, the portable
  int8 micro-kernel, sgemm and sparse rows; kernels_check_native.c: the depthwise (c<L>,
  NCHW rows, depthwise + 1x1), direct conv, Winograd transform, recurrent, pooling and
  row-op rows, NEON's among them, each against a plain reference or the portable row) runs under
  qemu-aarch64 on two CPUs: a Cortex-A53 (NEON only) and "max" (dot product, i8mm).
  Correctness only: no speed claims from emulation.

Needs Debian's gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (.ci/run
installs them). Without them these tests are skipped with that reason, unless
EDGENN_REQUIRE_AARCH64=1 (as in CI), where a missing toolchain is a failure.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "edgenn" / "kernels"
# every family folder a header may live in (setup.py's include path, native first)
INCLUDES = [f"-I{d}" for d in [KERNELS / "native"] + sorted(
    d for d in KERNELS.iterdir() if d.name != "native" and any(d.glob("*.h")))]
CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"


def _toolchain():
    missing = [t for t in (CC, QEMU) if shutil.which(t) is None]
    if missing:
        why = f"ARM64 lane needs {', '.join(missing)} (apt-get install gcc-aarch64-linux-gnu " \
              "libc6-dev-arm64-cross qemu-user)"
        if os.environ.get("EDGENN_REQUIRE_AARCH64") == "1":
            pytest.fail(why)
        pytest.skip(why)


def _simde() -> str:
    import simde_py
    return simde_py.get_include()


@pytest.fixture(scope="module")
def kernels_check(tmp_path_factory):
    _toolchain()
    exe = tmp_path_factory.mktemp("arm64") / "kernels_check"
    sources = [str(Path(__file__).with_name(f))
               for f in ("kernels_check.c", "kernels_check_native.c",
                                 "kernels_check_attention.c")]
    # no FMA contraction: the package builds the int8 and row-op kernels so (setup.py)
    out = subprocess.run([CC, "-static", "-O2", "-ffp-contract=off", f"-I{_simde()}", *INCLUDES,
                          *sources, "-o", str(exe), "-lm"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return exe


@pytest.mark.parametrize("cpu,tier", [("cortex-a53", "neon"), ("max", "neondot")])
def test_kernels_under_qemu(kernels_check, cpu, tier):
    env = {k: v for k, v in os.environ.items() if k != "EDGENN_MAX_ISA"}   # an x86 cap
    out = subprocess.run([QEMU, "-cpu", cpu, str(kernels_check)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert f"tier {tier}" in lines
    # the NEON rows ran (kernels_check.c runs every row the CPU has)
    for row in ("sgemm_6x16__neon", "depthwise_c4__neon", "conv_direct_8x12__neon",
                "depthwise_rows4__neon", "depthwise_project_8x12__neon",
                "winograd_transforms__neon", "recurrent_4x32__neon", "pool_nchw__neon",
                "spmm_32x1__neon", "rowops__neon", "nbits_f32_4x16__neon",
                "gqa_k4__neon"):
        assert any(re.match(rf"ok\s+{row} ", line) for line in lines), (row, lines)
    if tier == "neondot":   # and the dot-product int8 rows where the CPU has it
        for row in ("qgemm_u8s8_6x8__neondot", "nbits_i8_4x16__neondot"):
            assert any(re.match(rf"ok\s+{row} ", line) for line in lines), (row, lines)
    passed, failed = (int(w) for w in lines[-1].replace(",", "").split()[::2])
    assert failed == 0 and passed >= 60, lines[-1]


PYX = sorted(str(p.relative_to(KERNELS)) for p in KERNELS.glob("*/*.pyx"))


@pytest.mark.parametrize("pyx", PYX)
def test_extension_compiles_for_aarch64(pyx, tmp_path):
    _toolchain()
    c_file = tmp_path / Path(pyx).name.replace(".pyx", ".c")
    out = subprocess.run([sys.executable, "-m", "cython", "-3", *INCLUDES, str(KERNELS / pyx),
                          "-o", str(c_file)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    out = subprocess.run([CC, "-c", "-O0", "-fPIC", "-fopenmp", "-Werror=implicit-function-declaration",
                          f"-I{sysconfig.get_paths()['include']}", f"-I{np.get_include()}",
                          f"-I{_simde()}", *INCLUDES, str(c_file), "-o",
                          str(tmp_path / "x.o")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
