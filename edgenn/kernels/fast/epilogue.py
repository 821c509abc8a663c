"""Fused epilogues applied in place on a conv/GEMM output: + bias, + residual, activation.

Activation names and params follow the fused Conv/Gemm attributes set by the graph passes:
activation in {"", Relu, Clip, HardSwish, HardSigmoid, Sigmoid, SiLU, LeakyRelu, Gelu}.
"""
from __future__ import annotations

import numpy as np

from ..reference.special import erf
from . import _rowops

IN_PLACE = {"", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "SiLU", "LeakyRelu",
            "Gelu"}


def activate(y: np.ndarray, kind: str, params, tmp: np.ndarray) -> None:
    """y <- activation(y), in place; tmp is scratch of y's shape."""
    if kind == "":
        return
    if kind == "Relu":
        np.maximum(y, 0, out=y)
    elif kind == "Clip":
        np.clip(y, params[0], params[1], out=y)
    elif kind == "HardSigmoid":
        np.multiply(y, params[0], out=y)
        np.add(y, params[1], out=y)
        np.clip(y, 0, 1, out=y)
    elif kind == "HardSwish":  # x * clip(x/6 + 1/2, 0, 1)
        np.multiply(y, 1 / 6, out=tmp)
        np.add(tmp, 0.5, out=tmp)
        np.clip(tmp, 0, 1, out=tmp)
        np.multiply(y, tmp, out=y)
    elif kind in ("Sigmoid", "SiLU"):
        np.negative(y, out=tmp)
        with np.errstate(over="ignore"):   # exp(-x) = inf for x << 0 gives the right 0
            np.exp(tmp, out=tmp)
        np.add(tmp, 1, out=tmp)
        if kind == "Sigmoid":
            np.reciprocal(tmp, out=y)
        else:
            np.divide(y, tmp, out=y)
    elif kind == "LeakyRelu":   # y < 0 ? alpha y : y (max(y, alpha y) only for 0 <= alpha <= 1)
        np.multiply(y, params[0], out=tmp)
        np.copyto(y, tmp, where=y < 0)
    elif kind == "Gelu" and y.dtype == np.float32 and y.flags.c_contiguous:
        flat = y.reshape(-1)  # exact GELU, one vectorized C pass (rows.py's _rowops)
        _rowops.gelu(flat, flat)
    elif kind == "Gelu":  # exact: x/2 (1 + erf(x/sqrt 2))
        np.multiply(y, np.float32(1 / np.sqrt(2)), out=tmp)
        tmp[...] = erf(tmp)
        np.add(tmp, 1, out=tmp)
        np.multiply(tmp, 0.5, out=tmp)
        np.multiply(y, tmp, out=y)
    else:
        raise AssertionError(kind)


def constant_parts(node, ins, m: int):
    """A fused Conv's constant epilogue as the C kernels take it: (bias float32 (m,) or
    None, activation, Clip's lo and hi (else 0), PRelu's slopes float32 (m,) or None)."""
    bias = None if len(ins) < 3 or ins[2] is None else \
        np.ascontiguousarray(np.asarray(ins[2].value, np.float32).reshape(m))
    act = node.attrs.get("activation", "")
    params = [float(v) for v in node.attrs.get("activation_params") or []]
    slope = np.array(params, np.float32) if act == "PRelu" else None
    lo, hi = (params + [0.0, 0.0])[:2] if act == "Clip" else (0.0, 0.0)
    return bias, act, lo, hi, slope


def supported(node) -> bool:
    return node.attrs.get("activation", "") in IN_PLACE
