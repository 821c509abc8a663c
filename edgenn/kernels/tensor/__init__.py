"""Elementwise, data-movement, reduction, resize and embedding kernels that write into the
planned output (NumPy with out=, Numba loops)."""
