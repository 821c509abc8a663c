"""Build: the Cython kernels are compiled here; Numba kernels compile on first use and are
cached on disk (EDGENN_CACHE_DIR, default ~/.cache/edgenn)."""
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension("edgenn.kernels.fast._im2col", ["edgenn/kernels/fast/_im2col.pyx"],
              include_dirs=[np.get_include()], extra_compile_args=["-O3"]),
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": 3}))
