# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _dwc8.pyx built again with EDGENN_SIMDE (setup.py), its AVX2 (8 lanes) and
# AVX-512F (16) bodies on SIMDe for the baseline target, so any CPU runs and checks both.
include "_dwc8.pyx"
