"""The fused epilogue's one description: activation names, their C codes and parameters;
and the epilogue applied in place on a conv/GEMM output where a kernel does not fuse it.

Activation names and params follow the fused Conv/Gemm attributes set by the graph passes.
The codes are _epilogue.h's, read from C (NAMES[code]); each C family exports the names it
fuses as its ACTIVATIONS. `act_args` turns a node's attributes into what every C kernel
takes: (code, p0, p1), the ONNX defaults filled.
"""
from __future__ import annotations

import numpy as np

from ..reference.special import erf
from ..rowops import _rowops

NAMES = _rowops.ACTIVATION_NAMES      # _epilogue.h's names, in code order
# ONNX's defaults of the parametrized activations (Clip min, max; HardSigmoid alpha, beta;
# LeakyRelu alpha)
DEFAULT_PARAMS = {"Clip": (-np.inf, np.inf), "HardSigmoid": (0.2, 0.5), "LeakyRelu": (0.01,)}
# what `activate` applies in NumPy (PRelu's per-channel slopes: only fused, in C)
IN_PLACE = frozenset(NAMES) - {"PRelu"}


def code(act: str) -> int:
    """The C code of activation `act` (ValueError for a name _epilogue.h lacks)."""
    try:
        return NAMES.index(act or "")
    except ValueError:
        raise ValueError(f"activation {act!r} is not one of {NAMES}") from None


def params(act: str, values) -> tuple[float, float]:
    """(p0, p1) of activation `act` given its attribute values (ONNX defaults if empty)."""
    p = [float(v) for v in (values or [])]
    p += DEFAULT_PARAMS.get(act or "", ())[len(p):]
    p += [0.0] * (2 - len(p))
    return p[0], p[1]


def act_args(node) -> tuple[int, float, float]:
    """-> (code, p0, p1) of the fused activation of `node` (PRelu: its slopes are the
    params, see constant_parts)."""
    act = node.attrs.get("activation", "") or ""
    return code(act), *params(act, node.attrs.get("activation_params"))


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
