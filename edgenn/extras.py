"""Optional dependencies: what each one enables and the pip extra that installs it.

`pip install edgenn` is the runtime only (numpy, safetensors, threadpoolctl, tqdm and the
compiled kernels): it loads and runs .enn and .onnx models (edgenn reads ONNX itself,
converters/onnx/proto.py). The rest is opt-in:

    convert  onnx    ONNX export (`edgenn export`), .tflite import (with tflite)
    numba    numba   the Numba kernels (tuner candidates beside the C ones)
    scipy    scipy   SciPy's erf in the reference kernels (else math.erf, exact but slower)
    scale    optuna  the search of `edgenn scale` (loading a family and `select` need none)
    lm       tokenizers  text in and out of `edgenn generate` (token ids need none)

`full` is all of them. Nothing here imports the packages: `have` asks importlib only.
"""
from __future__ import annotations

import functools
import importlib.util

from .errors import MissingDependencyError

EXTRA_OF = {"onnx": "convert", "numba": "numba", "scipy": "scipy", "matplotlib": "plot",
            "optuna": "scale", "tokenizers": "lm",
            "cryptography": "crypto", "dask": "dask", "distributed": "dask"}


@functools.lru_cache(maxsize=None)
def have(module: str) -> bool:
    """True when `module` can be imported (found on the path; not imported here)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, purpose: str) -> None:
    """MissingDependencyError naming the extra unless `module` is installed."""
    if not have(module):
        extra = EXTRA_OF.get(module, module)
        raise MissingDependencyError(
            f"{purpose} needs the {module!r} package, which is not installed: "
            f"pip install 'edgenn[{extra}]'")
