# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _dwrows.pyx built again with EDGENN_SIMDE (setup.py), its AVX2 and AVX-512F
# bodies on SIMDe for the baseline target, so any CPU runs and checks both widths.
include "_dwrows.pyx"
