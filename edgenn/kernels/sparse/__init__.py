"""Sparse convolution and fully connected layers, weights in CSR (_spmm.h, _spgemm.h; rows in
spmm_table.h)."""
