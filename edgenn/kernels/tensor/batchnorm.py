"""BatchNormalization (inference form) that the graph passes could not fold into a Conv,
e.g. after a ConvTranspose + bias Add in PP-OCR's DB head.

x (N, C, ...) float32, scale / B / mean / var (C,) constants -> y = x * a[c] + b[c] with
a = scale / sqrt(var + eps), b = B - mean * a, folded once at prepare in float64 as the
reference does and rounded to float32; one Numba pass over x (_upsample_jit.channel_affine),
or, without numba, NumPy's multiply then add (the same float32 rounding, two passes).
"""
from __future__ import annotations

import numpy as np

from ...registry import kernel


def _supports(node, ins, outs) -> bool:
    x = ins[0]
    return (x.dtype == "float32" and outs[0].dtype == "float32" and len(x.shape) >= 2
            and len(node.outputs) == 1 and not int(node.attrs.get("training_mode", 0))
            and all(i is not None and i.value is not None for i in ins[1:5]))


def _affine(node, ins):
    """-> (a, b) float32 (C, 1), x3: x viewed as (N, C, spatial)."""
    scale, bias, mean, var = (np.asarray(i.value, np.float64) for i in ins[1:5])
    a = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    shape = ins[0].shape
    x3 = (shape[0], shape[1], int(np.prod(shape[2:], dtype=np.int64)))
    return a.astype(np.float32)[:, None], b.astype(np.float32)[:, None], x3


@kernel("BatchNormalization", "batchnorm_affine", supports=_supports, requires=("numba",))
def prepare(node, ins, outs):
    from . import _upsample_jit as jit  # imports numba: only once a model plans this kernel
    a, b, x3 = _affine(node, ins)
    a1, b1 = a.ravel(), b.ravel()

    def run(inputs, outputs):
        jit.channel_affine(inputs[0].reshape(x3), a1, b1, outputs[0].reshape(x3))
    return run


@kernel("BatchNormalization", "batchnorm_numpy", supports=_supports)
def prepare_numpy(node, ins, outs):
    a, b, x3 = _affine(node, ins)

    def run(inputs, outputs):
        y = outputs[0].reshape(x3)
        np.multiply(inputs[0].reshape(x3), a, out=y)
        np.add(y, b, out=y)
    return run
