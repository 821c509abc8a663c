# cython: language_level=3
"""The C kernels' one CPU probe (_cpu.h) for Python: feature bits, the host's tier and
the tier in force (EDGENN_MAX_ISA applied). edgenn.kernels.isa is the API."""

cdef extern from "_cpu.h" nogil:
    int edgenn_cpu_probe()
    int edgenn_tier_of(int f)
    int edgenn_isa()
    int edgenn_isa_x86(int t)

FEATURE_BITS = {
    "avx2": 1 << 0, "fma": 1 << 1, "avx512f": 1 << 2, "avx512bw": 1 << 3, "avx512vl": 1 << 4,
    "avx512dq": 1 << 5, "avx512vnni": 1 << 6, "avxvnni": 1 << 7, "neon": 1 << 8,
    "dotprod": 1 << 9, "os_ymm": 1 << 10, "os_zmm": 1 << 11,
}


def features():
    """-> the set of feature names this CPU (and OS) has."""
    cdef int f = edgenn_cpu_probe()
    return frozenset(name for name, bit in FEATURE_BITS.items() if f & bit)


def host_tier():
    """-> the host's best tier number, ignoring EDGENN_MAX_ISA."""
    return edgenn_tier_of(edgenn_cpu_probe())


def active_tier():
    """-> the tier number the C kernels use (EDGENN_MAX_ISA applied, read once)."""
    return edgenn_isa()


def x86_usable(int tier):
    """-> whether the C kernels may use x86 tier number `tier` (the cap applied; for
    avxvnni the feature checked too)."""
    return bool(edgenn_isa_x86(tier))
