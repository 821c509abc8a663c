# What a family's extension reads of the one CPU probe (_cpu.h): a tier's name, whether a
# tier runs here, and whether a table row runs in this build (every row in the tests'
# SIMDe-emulated twins, EMULATED).
cdef extern from "_cpu.h" nogil:
    const char *edgenn_isa_name(int t)
    int edgenn_isa_usable(int t)
    int edgenn_row_usable(int t)
    int EDGENN_EMULATED

EMULATED = bool(EDGENN_EMULATED)
