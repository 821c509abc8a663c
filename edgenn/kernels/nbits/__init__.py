"""MatMulNBits: weight-only 2 / 4 / 8-bit GEMM / GEMV, the codes unpacked in registers
(_nbits.h's rows)."""
