"""Winograd F(m x m, 3 x 3) convolution: the transforms (wino_rows) and their GEMMs on the
gemm family's rows."""
