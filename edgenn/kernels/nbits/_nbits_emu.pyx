# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _nbits.pyx built again with EDGENN_SIMDE (setup.py), its AVX2, AVX-512F and
# NEON bodies on SIMDe for the baseline target, so any CPU runs and checks them.
include "_nbits.pyx"
