"""Build: the Cython kernels are compiled here; Numba kernels compile on first use and are
cached on disk (EDGENN_CACHE_DIR, default ~/.cache/edgenn)."""
import os

import numpy as np
import simde_py
from Cython.Build import cythonize
from setuptools import Extension, setup

SIMDE = simde_py.get_include()   # SIMDe: the tests' emulated tiers; off x86, the intrinsics

extensions = [
    # the one CPU probe (_cpu.h), for edgenn.kernels.isa
    Extension("edgenn.kernels.fast._cpu", ["edgenn/kernels/fast/_cpu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O2"],
              depends=["edgenn/kernels/fast/_cpu.h"]),
    Extension("edgenn.kernels.fast._im2col", ["edgenn/kernels/fast/_im2col.pyx"],
              include_dirs=[np.get_include()], extra_compile_args=["-O3"]),
    Extension("edgenn.kernels.fast._sgemm", ["edgenn/kernels/fast/_sgemm.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-fopenmp"], extra_link_args=["-fopenmp"],
              depends=["edgenn/kernels/fast/sgemm.h", "edgenn/kernels/fast/_simd_math.h",
                       "edgenn/kernels/fast/_cpu.h", "edgenn/kernels/fast/_workspace.pxi"]),
    Extension("edgenn.kernels.fast._winograd", ["edgenn/kernels/fast/_winograd.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-fopenmp"], extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/_winograd{s}.h"
                       for s in ("", "_tmpl", "_loops", "_run")]
              + ["edgenn/kernels/fast/sgemm.h", "edgenn/kernels/fast/sgemm_avx512.h"]),
    Extension("edgenn.kernels.fast._dwc8", ["edgenn/kernels/fast/_dwc8.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"],
              depends=["edgenn/kernels/fast/_dwc8.h", "edgenn/kernels/fast/_dwc_vec.h",
                       "edgenn/kernels/fast/_pool_bytes.h", "edgenn/kernels/fast/_bytes.h",
                       "edgenn/kernels/fast/_cpu.h", "edgenn/kernels/fast/_simd.h",
                       "edgenn/kernels/fast/_pool_tiles.h"]),
    # tests only: the c8 / c16 depthwise bodies (AVX2, AVX-512F) on SIMDe, any CPU
    Extension("edgenn.kernels.fast._dwc8_emu", ["edgenn/kernels/fast/_dwc8_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1", "-fopenmp"], extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_dwc8.pyx", "_dwc8.h", "_dwc_vec.h", "_pool_bytes.h", "_bytes.h",
                        "_pool_tiles.h", "_simd.h")]),
    Extension("edgenn.kernels.fast._rowops", ["edgenn/kernels/fast/_rowops.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE],
              # no mul+add contraction: the quantize / QAdd passes must round as NumPy does
              extra_compile_args=["-O3", "-ffp-contract=off"],
              depends=["edgenn/kernels/fast/_rowops.h", "edgenn/kernels/fast/_simd_math.h",
                       "edgenn/kernels/fast/_cpu.h"]),
    # tests only: the packed sgemm with its AVX2 / AVX-512F kernels on SIMDe (emulated)
    Extension("edgenn.kernels.fast._sgemm_emu", ["edgenn/kernels/fast/_sgemm_emu.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              define_macros=[("EDGENN_SIMDE", "1")], extra_compile_args=["-O1", "-fopenmp"],
              extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_sgemm.pyx", "sgemm.h", "sgemm_avx512.h", "_simd.h", "_simd_math.h",
                        "_workspace.pxi")]),
    # tests only: the AVX-512 VNNI micro-kernels against SIMDe, built for the baseline
    # target (no -m flags), so a CPU without VNNI runs their bodies (emulated, exact)
    Extension("edgenn.kernels.fast._qgemm_emu", ["edgenn/kernels/fast/_qgemm_emu.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O1"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_qgemm_vnni.h", "_qgemm_vnni_conv.h", "_qgemm_vnni_conv_shapes.h",
                        "_qgemm_vnni_tail.h", "_qgemm_implicit.pxi", "_qgemm_avxvnni.h",
                        "_qdw.h", "_qdw_sums.h",
                        "_qepi.h",
                        "_qdw_decl.pxi")]),
    # direct convolution for few input channels, and its SIMDe-emulated twin for the tests
    Extension("edgenn.kernels.fast._convdirect", ["edgenn/kernels/fast/_convdirect.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"],
              depends=["edgenn/kernels/fast/_convdirect.h", "edgenn/kernels/fast/_convdirect_vec.h",
                       "edgenn/kernels/fast/_phases.h", "edgenn/kernels/fast/_cpu.h"]),
    Extension("edgenn.kernels.fast._convdirect_emu", ["edgenn/kernels/fast/_convdirect_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1"],
              depends=["edgenn/kernels/fast/_convdirect.pyx", "edgenn/kernels/fast/_convdirect.h",
                       "edgenn/kernels/fast/_convdirect_vec.h"]),
    # depthwise convolution on NCHW planes (row pixels in lanes), and its SIMDe twin
    Extension("edgenn.kernels.fast._dwrows", ["edgenn/kernels/fast/_dwrows.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_dwrows.h", "_dwrows_vec.h", "_phases.h", "_cpu.h", "_simd.h")]),
    Extension("edgenn.kernels.fast._dwrows_emu", ["edgenn/kernels/fast/_dwrows_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_dwrows.pyx", "_dwrows.h", "_dwrows_vec.h", "_phases.h")]),
    # sparse 1x1 convolution and fully connected layers (weights in CSR), and their
    # SIMDe-emulated twin for the tests
    Extension("edgenn.kernels.fast._spmm", ["edgenn/kernels/fast/_spmm.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3", "-fopenmp"],
              extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_spmm.h", "_spmm_tile.h", "_spgemm.h", "_spgemm_dot.h", "_spgemm.pxi",
                        "_cpu.h")]),
    Extension("edgenn.kernels.fast._spmm_emu", ["edgenn/kernels/fast/_spmm_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1", "-fopenmp"], extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_spmm.pyx", "_spmm.h", "_spmm_tile.h", "_spgemm.h", "_spgemm_dot.h",
                        "_spgemm.pxi")]),
    # the recurrence of LSTM / GRU / RNN, and its SIMDe-emulated twin for the tests
    Extension("edgenn.kernels.fast._recurrent", ["edgenn/kernels/fast/_recurrent.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], extra_compile_args=["-O3"],
              depends=["edgenn/kernels/fast/_recurrent.h", "edgenn/kernels/fast/_recurrent_vec.h",
                       "edgenn/kernels/fast/_simd_math.h",
                       "edgenn/kernels/fast/_cpu.h"]),
    Extension("edgenn.kernels.fast._recurrent_emu", ["edgenn/kernels/fast/_recurrent_emu.pyx"],
              include_dirs=["edgenn/kernels/fast", SIMDE], define_macros=[("EDGENN_SIMDE", "1")],
              extra_compile_args=["-O1"],
              depends=["edgenn/kernels/fast/_recurrent.pyx", "edgenn/kernels/fast/_recurrent.h",
                       "edgenn/kernels/fast/_recurrent_vec.h"]),
    # int8 QConv / QGemm: bit-exact float epilogue, so no FMA contraction
    Extension("edgenn.kernels.fast._qgemm", ["edgenn/kernels/fast/_qgemm.pyx"],
              include_dirs=[np.get_include(), "edgenn/kernels/fast", SIMDE],
              extra_compile_args=["-O3", "-ffp-contract=off", "-fopenmp"],
              extra_link_args=["-fopenmp"],
              depends=[f"edgenn/kernels/fast/{h}" for h in
                       ("_qgemm.h", "_qgemm_vnni.h", "_qgemm_vnni_conv.h",
                        "_qgemm_vnni_conv_shapes.h", "_qgemm_vnni_tail.h", "_qgemm_implicit.pxi",
                        "_qgemm_avxvnni.h",
                        "_bytes.h",
                        "_cpu.h",
                        "_qdw.h", "_qdw_sums.h",
                        "_qepi.h", "_simd_math.h", "_workspace.pxi", "_qdw_decl.pxi")]),
]

# no debug info unless asked (EDGENN_DEBUG_BUILD=1, e.g. for valgrind): it is 3/4 of each .so
for ext in extensions:
    ext.extra_compile_args.append("-g" if os.environ.get("EDGENN_DEBUG_BUILD") else "-g0")

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": 3}))
