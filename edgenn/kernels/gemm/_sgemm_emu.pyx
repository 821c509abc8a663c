# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
# Tests only: _sgemm.pyx built a second time with EDGENN_SIMDE (setup.py), its AVX2 and
# AVX-512F kernels on SIMDe for the baseline target, so a CPU without AVX-512 still runs
# the 12 x 32 kernel's body and checks it (tests/kernels/gemm/test_sgemm.py, the *-emulated tiers).
include "_sgemm.pyx"
