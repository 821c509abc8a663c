# The one list of fused activations (_epilogue.h) for a family's extension: its names in
# code order, and the names of a family's mask of computed codes.

cdef extern from "_epilogue.h":
    const char *edgenn_act_names[]
    int EDGENN_ACT_COUNT

ACTIVATION_NAMES = tuple(edgenn_act_names[i].decode() for i in range(EDGENN_ACT_COUNT))


def _activations(unsigned mask):
    """-> the names of the codes set in `mask` (a family's <FAMILY>_ACTS), in code order."""
    return tuple(n for i, n in enumerate(ACTIVATION_NAMES) if mask >> i & 1)
