"""Build: the Cython kernels are compiled here; Numba kernels compile on first use and are
cached on disk (EDGENN_CACHE_DIR, default ~/.cache/edgenn).

The SIMDe-emulated twins of the kernels (the *_emu extensions) exist for the tests only:
they are built when EDGENN_TEST_KERNELS is set ("1": with the rest, "only": alone), which
tests/conftest.py does on demand (`python setup.py build_ext --inplace`), so an install
compiles the runtime's kernels alone."""
import os
import re

import numpy as np
import simde_py
from Cython.Build import cythonize
from setuptools import Extension, setup

SIMDE = simde_py.get_include()   # SIMDe: the tests' emulated tiers; off x86, the intrinsics

extensions = [
    # the one CPU probe (_cpu.h), for edgenn.kernels.isa
    Extension("edgenn.kernels.fast._cpu", ["edgenn/kernels/fast/_cpu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O2"]),
    Extension("edgenn.kernels.fast._im2col", ["edgenn/kernels/fast/_im2col.pyx"],
              include_dirs=[np.get_include()], extra_compile_args=["-O3"]),
    Extension("edgenn.kernels.fast._sgemm", ["edgenn/kernels/fast/_sgemm.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-fopenmp"], extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._winograd", ["edgenn/kernels/fast/_winograd.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-fopenmp"], extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._dwc8", ["edgenn/kernels/fast/_dwc8.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    # tests only: the c8 / c16 depthwise bodies (AVX2, AVX-512F) on SIMDe, any CPU
    Extension("edgenn.kernels.fast._dwc8_emu", ["edgenn/kernels/fast/_dwc8_emu.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1", "-fopenmp"], extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._rowops", ["edgenn/kernels/fast/_rowops.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE],
              # no mul+add contraction: the quantize / QAdd passes must round as NumPy does
              extra_compile_args=["-O3", "-ffp-contract=off", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    # tests only: the packed sgemm with its AVX2 / AVX-512F kernels on SIMDe (emulated)
    Extension("edgenn.kernels.fast._sgemm_emu", ["edgenn/kernels/fast/_sgemm_emu.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              define_macros=[("EDGENN_SIMDE", "1")], extra_compile_args=["-O1", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    # tests only: the AVX-512 VNNI micro-kernels against SIMDe, built for the baseline
    # target (no -m flags), so a CPU without VNNI runs their bodies (emulated, exact)
    Extension("edgenn.kernels.fast._qgemm_emu", ["edgenn/kernels/fast/_qgemm_emu.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O1"]),
    # direct convolution for few input channels, and its SIMDe-emulated twin for the tests
    Extension("edgenn.kernels.fast._convdirect", ["edgenn/kernels/fast/_convdirect.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._convdirect_emu", ["edgenn/kernels/fast/_convdirect_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1"]),
    # depthwise convolution on NCHW planes (row pixels in lanes), and its SIMDe twin
    Extension("edgenn.kernels.fast._dwrows", ["edgenn/kernels/fast/_dwrows.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._dwrows_emu", ["edgenn/kernels/fast/_dwrows_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1"]),
    # a depthwise conv and the 1x1 conv of its output in bands, and its SIMDe twin
    Extension("edgenn.kernels.fast._dwproj", ["edgenn/kernels/fast/_dwproj.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._dwproj_emu", ["edgenn/kernels/fast/_dwproj_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1", "-fopenmp"], extra_link_args=["-fopenmp"]),
    # sparse 1x1 convolution and fully connected layers (weights in CSR), and their
    # SIMDe-emulated twin for the tests
    Extension("edgenn.kernels.fast._spmm", ["edgenn/kernels/fast/_spmm.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
    Extension("edgenn.kernels.fast._spmm_emu", ["edgenn/kernels/fast/_spmm_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1", "-fopenmp"], extra_link_args=["-fopenmp"]),
    # the recurrence of LSTM / GRU / RNN, and its SIMDe-emulated twin for the tests
    Extension("edgenn.kernels.fast._recurrent", ["edgenn/kernels/fast/_recurrent.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3"]),
    Extension("edgenn.kernels.fast._recurrent_emu", ["edgenn/kernels/fast/_recurrent_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1"]),
    # int8 QConv / QGemm: bit-exact float epilogue, so no FMA contraction
    Extension("edgenn.kernels.fast._qgemm", ["edgenn/kernels/fast/_qgemm.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-ffp-contract=off", "-fopenmp"],
              extra_link_args=["-fopenmp"]),
]

KERNELS = "edgenn/kernels/fast"
INCLUDE = re.compile(r'^\s*(?:#include|include|cdef extern from)\s+"([^"]+)"', re.M)


def local_headers(source: str) -> list[str]:
    """Every file of KERNELS that `source` includes, directly or through another one: an
    extension is rebuilt when any of them changes (a hand-kept list had missed some)."""
    found, todo = set(), [source]
    while todo:
        with open(todo.pop()) as f:
            for name in INCLUDE.findall(f.read()):
                path = os.path.join(KERNELS, name)
                if path not in found and os.path.exists(path):
                    found.add(path)
                    todo.append(path)
    return sorted(found)


TEST_KERNELS = os.environ.get("EDGENN_TEST_KERNELS", "")
extensions = [e for e in extensions
              if (e.name.endswith("_emu") and TEST_KERNELS)
              or (not e.name.endswith("_emu") and TEST_KERNELS != "only")]

for ext in extensions:
    ext.depends = local_headers(ext.sources[0])

# no debug info unless asked (EDGENN_DEBUG_BUILD=1, e.g. for valgrind): it is 3/4 of each .so
for ext in extensions:
    ext.extra_compile_args.append("-g" if os.environ.get("EDGENN_DEBUG_BUILD") else "-g0")

# every core compiles: Cython translates the sources in parallel, and build_ext compiles
# the extensions in parallel (setuptools' -j)
JOBS = max(os.cpu_count() or 1, 1)
setup(ext_modules=cythonize(extensions, nthreads=JOBS,
                            compiler_directives={"language_level": 3}),
      options={"build_ext": {"parallel": JOBS}})
