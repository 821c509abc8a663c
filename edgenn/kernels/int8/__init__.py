"""int8 kernels: u8 x s8 GEMM / convolution (_qgemm.h and its VNNI tiles, rows in
qgemm_table.h), int8 depthwise (_qdw.h), the requantizing epilogue (_qepi.h),
QuantizeLinear / DequantizeLinear, and QConv / QGemm run on the fp32 kernels."""
