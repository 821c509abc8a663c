# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _rowops.pyx built a second time with EDGENN_SIMDE (setup.py): its AVX2 and
# NEON rows on SIMDe, so any CPU runs those rows' bodies and checks them
# (tests/kernels/rowops/test_rowops.py, the *-emulated rows).
include "_rowops.pyx"
