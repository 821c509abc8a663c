"""Special functions of the reference kernels, without a hard SciPy dependency."""
from __future__ import annotations

import math

import numpy as np

from ...extras import have

_math_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """erf elementwise, in x's float dtype: SciPy's ufunc where installed, else the C
    library's erf (math.erf, exact to double precision) element by element."""
    x = np.asarray(x)
    if have("scipy"):
        from scipy.special import erf as scipy_erf  # lazily: scipy.special costs ~0.3 s
        out = scipy_erf(x)
    else:
        out = np.asarray(_math_erf(x.astype(np.float64)), dtype=np.float64)  # 0-d too
    return out.astype(x.dtype, copy=False) if x.dtype.kind == "f" else out
