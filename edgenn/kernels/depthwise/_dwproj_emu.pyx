# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _dwproj.pyx built again with EDGENN_SIMDE (setup.py), its AVX-512F body on
# SIMDe for the baseline target, so any CPU runs and checks it.
include "_dwproj.pyx"
