# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _winograd.pyx built a second time with EDGENN_SIMDE (setup.py), its NEON
# transform row on SIMDe's NEON, so an x86 CPU runs that row's body and checks it
# (tests/kernels/winograd/test_winograd.py, the *-emulated rows).
include "_winograd.pyx"
