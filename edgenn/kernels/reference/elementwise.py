"""Reference kernels of the elementwise family (plain NumPy, the oracle).

Every kernel returns arrays of exactly the dtype its shape rule promises: float32 in,
float32 out (numpy scalar promotion is undone with `.astype(x.dtype, copy=False)`).
Inputs are never written to; a kernel may return an input itself (Identity, Dropout).
Floating-point domain errors (log(-1), 1/0, ...) give the IEEE results (nan, inf)
silently, as ONNX Runtime does.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import UnsupportedOpError
from ...graph.dtypes import from_onnx
from ...graph.shapes.elementwise import NUMERIC_DTYPES
from ...registry import reference
from .special import erf


def _quiet(fn):
    """Run a kernel with numpy floating-point warnings silenced (results stay IEEE)."""
    @functools.wraps(fn)
    def run(attrs, inputs):
        with np.errstate(all="ignore"):
            return fn(attrs, inputs)
    return run


def _sigmoid(x):
    # exp of -|x| never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0
    e = np.exp(-np.abs(x))
    r = 1 / (1 + e)
    return np.where(x >= 0, r, e * r)


def _softplus(x):
    return np.logaddexp(x, 0)  # log(1 + exp(x)) without overflow


def _elu(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _gelu(x, a):
    if a.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + erf(x * math.sqrt(0.5)))


def _shrink(x, a):
    lambd, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


# op -> f(x, attrs); each result is cast back to x's dtype by the kernel
UNARY = {
    "Relu": lambda x, a: np.maximum(x, 0),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, a.get("alpha", 0.01) * x),
    "Elu": lambda x, a: _elu(x, a.get("alpha", 1.0)),
    "Selu": lambda x, a: a.get("gamma", 1.0507009873554805) * _elu(
        x, a.get("alpha", 1.6732632423543772)),
    "Celu": lambda x, a: np.maximum(x, 0) + np.minimum(
        0, a.get("alpha", 1.0) * np.expm1(np.minimum(x, 0) / a.get("alpha", 1.0))),
    "Sigmoid": lambda x, a: _sigmoid(x),
    "HardSigmoid": lambda x, a: np.clip(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1),
    "HardSwish": lambda x, a: x * np.clip(x * (1 / 6) + 0.5, 0, 1),
    "Tanh": lambda x, a: np.tanh(x),
    "Softplus": lambda x, a: _softplus(x),
    "Softsign": lambda x, a: x / (1 + np.abs(x)),
    "Exp": lambda x, a: np.exp(x),
    "Log": lambda x, a: np.log(x),
    "Sqrt": lambda x, a: np.sqrt(x),
    "Reciprocal": lambda x, a: 1 / x,
    "Neg": lambda x, a: np.negative(x),
    "Abs": lambda x, a: np.abs(x),
    "Ceil": lambda x, a: np.ceil(x),
    "Floor": lambda x, a: np.floor(x),
    "Round": lambda x, a: np.round(x),  # half to even, as ONNX
    "Sign": lambda x, a: np.sign(x),
    "Sin": lambda x, a: np.sin(x),
    "Cos": lambda x, a: np.cos(x),
    "Tan": lambda x, a: np.tan(x),
    "Asin": lambda x, a: np.arcsin(x),
    "Acos": lambda x, a: np.arccos(x),
    "Atan": lambda x, a: np.arctan(x),
    "Sinh": lambda x, a: np.sinh(x),
    "Cosh": lambda x, a: np.cosh(x),
    "Asinh": lambda x, a: np.arcsinh(x),
    "Acosh": lambda x, a: np.arccosh(x),
    "Atanh": lambda x, a: np.arctanh(x),
    "Erf": lambda x, a: erf(x),
    "Identity": lambda x, a: x,
    "Gelu": _gelu,
    "Mish": lambda x, a: x * np.tanh(_softplus(x)),
    "ThresholdedRelu": lambda x, a: np.where(x > a.get("alpha", 1.0), x, 0),
    "Shrink": _shrink,
}


def _unary_kernel(op):
    f = UNARY[op]

    @_quiet
    def run(attrs, inputs):
        x = inputs[0]
        return [np.asarray(f(x, attrs)).astype(x.dtype, copy=False)]
    run.__name__ = f"ref_{op.lower()}"
    return run


for _op in UNARY:
    reference(_op)(_unary_kernel(_op))


@reference("IsNaN")
def ref_isnan(attrs, inputs):
    x = inputs[0]
    return [np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)]


@reference("IsInf")
def ref_isinf(attrs, inputs):
    x = inputs[0]
    if x.dtype.kind != "f":
        return [np.zeros(x.shape, bool)]
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    if neg and pos:
        return [np.isinf(x)]
    if pos:
        return [x == np.inf]
    if neg:
        return [x == -np.inf]
    return [np.zeros(x.shape, bool)]


@reference("Not")
def ref_not(attrs, inputs):
    return [np.logical_not(inputs[0])]


# -- binary / variadic ------------------------------------------------------------------

def _int_div(a, b):
    """Integer division rounding toward zero (C semantics), as ONNX Div on integers."""
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        # floor and trunc differ where the remainder is non-zero and the signs differ
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        q = q + fix.astype(q.dtype)
    return q


@reference("Div")
@_quiet
def ref_div(attrs, inputs):
    a, b = inputs[0], inputs[1]
    out = np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b)
    return [out.astype(a.dtype, copy=False)]


@reference("Mod")
@_quiet
def ref_mod(attrs, inputs):
    a, b = inputs[0], inputs[1]
    # fmod=1: sign of the dividend (C fmod); fmod=0: sign of the divisor (Python %)
    out = np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)
    return [out.astype(a.dtype, copy=False)]


@reference("BitShift")
def ref_bitshift(attrs, inputs):
    x, y = inputs[0], inputs[1]
    bits = x.dtype.itemsize * 8
    in_range = (y >= 0) & (y < bits)
    s = np.where(in_range, y, 0).astype(x.dtype)
    if attrs.get("direction", "RIGHT").upper() == "LEFT":
        out = np.where(in_range, np.left_shift(x, s), 0)
    else:
        # arithmetic shift for signed types; out of range leaves only the sign fill
        fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else 0
        out = np.where(in_range, np.right_shift(x, s), fill)
    return [out.astype(x.dtype, copy=False)]


def _pow(x, y):
    if x.dtype.kind == "f":
        if y.dtype == x.dtype:
            return np.power(x, y)
        return np.power(x, y.astype(np.float64) if y.dtype.kind != "f" else y)
    if y.dtype.kind in "iu" and not (y < 0).any():
        return np.power(x, y)  # exact integer powers
    return np.trunc(np.power(x.astype(np.float64), y.astype(np.float64)))


@reference("Pow")
@_quiet
def ref_pow(attrs, inputs):
    x, y = inputs[0], inputs[1]
    return [np.asarray(_pow(x, y)).astype(x.dtype, copy=False)]


def _binary_kernel(ufunc):
    def run(attrs, inputs):
        a = inputs[0]
        return [np.asarray(ufunc(a, inputs[1])).astype(a.dtype, copy=False)]
    return run


for _op, _uf in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)):
    reference(_op)(_quiet(_binary_kernel(_uf)))


def _logic_kernel(ufunc):
    def run(attrs, inputs):
        return [ufunc(inputs[0], inputs[1])]
    return run


for _op, _uf in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    reference(_op)(_logic_kernel(_uf))


def _compare_kernel(ufunc):
    def run(attrs, inputs):
        return [np.asarray(ufunc(inputs[0], inputs[1]), dtype=bool)]
    return run


for _op, _uf in (("Equal", np.equal), ("Less", np.less), ("Greater", np.greater),
                 ("LessOrEqual", np.less_equal), ("GreaterOrEqual", np.greater_equal)):
    reference(_op)(_compare_kernel(_uf))


def _variadic(ufunc):
    @_quiet
    def run(attrs, inputs):
        xs = [x for x in inputs if x is not None]
        out = functools.reduce(ufunc, xs)
        return [np.asarray(out).astype(xs[0].dtype, copy=False)]
    return run


reference("Max")(_variadic(np.maximum))
reference("Min")(_variadic(np.minimum))
reference("Sum")(_variadic(np.add))


@reference("Mean")
@_quiet
def ref_mean(attrs, inputs):
    xs = [x for x in inputs if x is not None]
    total = functools.reduce(np.add, xs)
    if xs[0].dtype.kind == "f":
        out = total / np.asarray(len(xs), xs[0].dtype)
    else:
        out = np.floor_divide(total, len(xs))
    return [np.asarray(out).astype(xs[0].dtype, copy=False)]


@reference("Where")
def ref_where(attrs, inputs):
    cond, x, y = inputs[0], inputs[1], inputs[2]
    return [np.where(cond, x, y).astype(x.dtype, copy=False)]


@reference("PRelu")
def ref_prelu(attrs, inputs):
    x, slope = inputs[0], inputs[1]
    return [np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)]


@reference("Clip")
def ref_clip(attrs, inputs):
    """min/max are optional scalar inputs; min > max gives max everywhere (as ONNX)."""
    x = inputs[0]
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo).reshape(()).astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi).reshape(()).astype(x.dtype))
    return [out]


def _cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    for dt in (x.dtype, dtype):
        if dt.name not in NUMERIC_DTYPES:
            raise UnsupportedOpError({"Cast": ["<reference>"]},
                                     f"casts from or to {dt.name} are not supported")
    with np.errstate(all="ignore"):
        return x.astype(dtype)


@reference("Cast")
def ref_cast(attrs, inputs):
    return [_cast(inputs[0], np.dtype(from_onnx(int(attrs["to"]))))]


@reference("CastLike")
def ref_castlike(attrs, inputs):
    return [_cast(inputs[0], inputs[1].dtype)]


@reference("Dropout")
def ref_dropout(attrs, inputs):
    """Inference: output = data, mask = all True. Training mode (random) is refused."""
    x = inputs[0]
    ratio = inputs[1] if len(inputs) > 1 else None
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None and bool(np.asarray(training).reshape(())) and \
            (ratio is None or float(np.asarray(ratio).reshape(())) != 0.0):
        raise UnsupportedOpError({"Dropout": ["<reference>"]},
                                 "training-mode Dropout (random masks) is not supported")
    return [x, np.ones(x.shape, dtype=bool)]
