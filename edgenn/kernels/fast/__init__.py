"""Fast kernels: Cython and Numba implementations registered beside the reference ones.

Numba compiles on first use and caches to EDGENN_CACHE_DIR (default ~/.cache/edgenn/numba),
so it is set before numba is first imported.
"""
import os

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(
    os.environ.get("EDGENN_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "edgenn")),
    "numba"))

from . import conv, depthwise, gemm  # noqa: E402,F401  (registration)
