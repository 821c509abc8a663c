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
KERNELS = "edgenn/kernels"
# every family's folder (edgenn/kernels/<family>/, native/ first): a header is found by its
# name wherever it lives, so the names are unique across families
FAMILIES = ["native"] + sorted(
    d for d in os.listdir(KERNELS) if d != "native" and os.path.isdir(os.path.join(KERNELS, d))
    and any(f.endswith((".h", ".pyx")) for f in os.listdir(os.path.join(KERNELS, d))))
INCLUDE_DIRS = [os.path.join(KERNELS, d) for d in FAMILIES] + [SIMDE, np.get_include()]
OMP = (["-fopenmp"], ["-fopenmp"])
NO_OMP = ([], [])


def kernel(family: str, name: str, opt: str = "-O3", omp=OMP, flags=(), emulated=False):
    """The extension edgenn.kernels.<family>.<name> from <family>/<name>.pyx. emulated: a
    tests-only twin whose SIMD bodies compile against SIMDe (any CPU runs every tier)."""
    return Extension(f"edgenn.kernels.{family}.{name}", [f"{KERNELS}/{family}/{name}.pyx"],
                     include_dirs=INCLUDE_DIRS,
                     define_macros=[("EDGENN_SIMDE", "1")] if emulated else [],
                     extra_compile_args=[opt, *flags, *omp[0]], extra_link_args=list(omp[1]))


# the native extensions, then (name ending in _emu) their SIMDe twins for the tests. The
# heaviest to compile come first: build_ext starts them in this order, so the cores finish
# together instead of one compiling the int8 kernels alone at the end.
extensions = [
    # int8: a bit-exact float epilogue, so no FMA contraction. The twin is built for the
    # baseline target with SIMDe's VNNI (no EDGENN_SIMDE: _qgemm_emu.pyx includes the
    # VNNI bodies itself), so a CPU without VNNI runs their bodies, exact
    kernel("int8", "_qgemm", flags=["-ffp-contract=off"]),
    kernel("int8", "_qgemm_emu", "-O1", NO_OMP),
    # depthwise c8 / c16 (and the NCHW pooling loops of pool/), NCHW rows, depthwise + 1x1
    kernel("depthwise", "_dwc8"),
    kernel("depthwise", "_dwc8_emu", "-O1", emulated=True),
    kernel("gemm", "_sgemm"),
    kernel("gemm", "_sgemm_emu", "-O1", emulated=True),
    kernel("winograd", "_winograd"),
    kernel("winograd", "_winograd_emu", "-O1", emulated=True),
    kernel("sparse", "_spmm"),
    kernel("sparse", "_spmm_emu", "-O1", emulated=True),
    kernel("direct", "_convdirect"),
    kernel("direct", "_convdirect_emu", "-O1", NO_OMP, emulated=True),
    kernel("recurrent", "_recurrent", omp=NO_OMP),
    kernel("recurrent", "_recurrent_emu", "-O1", NO_OMP, emulated=True),
    kernel("nbits", "_nbits"), kernel("nbits", "_nbits_emu", "-O1", NO_OMP, emulated=True),
    kernel("attention", "_gqa", flags=["-ffp-contract=off"]),
    kernel("attention", "_gqa_emu", "-O1", NO_OMP, ["-ffp-contract=off"], emulated=True),
    kernel("depthwise", "_dwrows"),
    kernel("depthwise", "_dwrows_emu", "-O1", NO_OMP, emulated=True),
    kernel("depthwise", "_dwproj"),
    kernel("depthwise", "_dwproj_emu", "-O1", emulated=True),
    kernel("rowops", "_rowops_emu", "-O1", flags=["-ffp-contract=off"], emulated=True),
    # no mul+add contraction: the quantize / QAdd passes must round as NumPy does
    kernel("rowops", "_rowops", flags=["-ffp-contract=off"]),
    kernel("gemm", "_im2col", omp=NO_OMP),
    kernel("tensor", "_eltwise", omp=NO_OMP),
    kernel("native", "_cpu", "-O2", NO_OMP),   # the one CPU probe, for edgenn.kernels.isa
    # the runtime's compiled run loop (runtime/_loop.pyx): bookkeeping, no kernel
    Extension("edgenn.runtime._loop", ["edgenn/runtime/_loop.pyx"], include_dirs=INCLUDE_DIRS,
              extra_compile_args=["-O2"]),
]

INCLUDE = re.compile(r'^\s*(?:#include|include|cdef extern from)\s+"([^"]+)"', re.M)


def local_headers(source: str) -> list[str]:
    """Every kernel file `source` includes, directly or through another one: an extension
    is rebuilt when any of them changes (a hand-kept list had missed some)."""
    found, todo = set(), [source]
    while todo:
        with open(todo.pop()) as f:
            for name in INCLUDE.findall(f.read()):
                for d in FAMILIES:
                    path = os.path.join(KERNELS, d, name)
                    if path not in found and os.path.exists(path):
                        found.add(path)
                        todo.append(path)
    return sorted(found)


TEST_KERNELS = os.environ.get("EDGENN_TEST_KERNELS", "")
extensions = [e for e in extensions
              if (e.name.endswith("_emu") and TEST_KERNELS)
              or (not e.name.endswith("_emu") and TEST_KERNELS != "only")]

# Cython's utility code (memoryviews, buffer checks, argument parsing: ~1 MB of C per
# module) generated once into one shared module that every kernel extension imports,
# instead of compiled into each: the bulk of a small extension's compile time. It is
# bookkeeping, not a kernel, so -O2. A tests-only build ("only") reuses the installed one.
SHARED_UTILITY = "edgenn.kernels._cyutility"
if TEST_KERNELS != "only":
    extensions.append(Extension(SHARED_UTILITY, [f"{KERNELS}/_cyutility.c"],
                                extra_compile_args=["-O2"]))

for ext in extensions:
    ext.depends = local_headers(ext.sources[0]) if ext.sources[0].endswith(".pyx") else []

# no debug info unless asked (EDGENN_DEBUG_BUILD=1, e.g. for valgrind): it is 3/4 of each .so
for ext in extensions:
    ext.extra_compile_args.append("-g" if os.environ.get("EDGENN_DEBUG_BUILD") else "-g0")

# every core compiles: Cython translates the sources in parallel, and build_ext compiles
# the extensions in parallel (setuptools' -j)
JOBS = max(os.cpu_count() or 1, 1)
# the generated C goes to build/cython, out of the source tree
setup(ext_modules=cythonize(extensions, nthreads=JOBS, build_dir="build/cython",
                            include_path=INCLUDE_DIRS[:len(FAMILIES)],
                            shared_utility_qualified_name=SHARED_UTILITY,
                            compiler_directives={"language_level": 3}),
      options={"build_ext": {"parallel": JOBS}})
