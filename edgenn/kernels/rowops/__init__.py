"""Row operations of transformer and vision models in C (_rowops.h: softmax, LayerNorm, GELU,
quantize, ...), and their Numba + BLAS counterparts (transformer.py)."""
