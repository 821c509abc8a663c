"""fp32 GEMM and convolution as GEMM: the packed sgemm (sgemm.h, its tiles
sgemm_<mr>x<nr>__<isa> in sgemm_<isa>.h, the rows in sgemm_table.h), Conv / Gemm on it with
the epilogue fused (conv_sgemm.py), and the BLAS / im2col kernels (gemm.py, conv.py)."""
