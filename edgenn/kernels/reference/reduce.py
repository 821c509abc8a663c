"""Reference kernels of the reduce family (plain NumPy, the oracle).

Reductions keep the input dtype (float32 in, float32 out; integer sums accumulate in the
input type as ONNX does). Reductions over an empty set give the identity of the operation:
0 for sums, 1 for products, -inf / +inf (or the integer limits) for max / min, -inf for the
log-sums.
"""
from __future__ import annotations

import numpy as np

from ...registry import reference


def _axes(attrs, inputs) -> tuple[int, ...] | None:
    """Reduced axes (sorted, non-negative) or None for a no-op reduction."""
    x = inputs[0]
    axes_in = inputs[1] if len(inputs) > 1 else None
    axes = () if axes_in is None else tuple(int(a) for a in np.asarray(axes_in).reshape(-1))
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else tuple(range(x.ndim))
    return tuple(sorted(a % x.ndim for a in axes))


def _lowest(dtype: np.dtype):
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _reduction(fn):
    """Wrap fn(x, axes, keepdims) -> array into a kernel that handles axes and dtype."""
    def run(attrs, inputs):
        x = inputs[0]
        axes = _axes(attrs, inputs)
        if axes is None:
            return [x]
        keepdims = bool(attrs.get("keepdims", 1))
        with np.errstate(all="ignore"):
            out = fn(x, axes, keepdims)
        return [np.asarray(out).astype(x.dtype, copy=False)]
    return run


def _acc(x) -> np.dtype:
    """Accumulator type of a sum: the input type, but float32 for float16."""
    return np.dtype(np.float32) if x.dtype == np.float16 else x.dtype


def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=_acc(x))


def _float(x):
    """x as a float array for log/sqrt-type reductions (ints go through float64)."""
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _max(x, axes, keepdims):
    return np.max(x, axis=axes, keepdims=keepdims, initial=_lowest(x.dtype))


def _min(x, axes, keepdims):
    return np.min(x, axis=axes, keepdims=keepdims, initial=_highest(x.dtype))


def _mean(x, axes, keepdims):
    if x.dtype.kind == "f":
        return np.mean(x, axis=axes, keepdims=keepdims, dtype=_acc(x))
    return np.mean(x, axis=axes, keepdims=keepdims)


def _l2(x, axes, keepdims):
    # accumulate squares in float64 so float32 inputs neither overflow nor lose digits
    x64 = x.astype(np.float64)
    return np.sqrt(np.sum(x64 * x64, axis=axes, keepdims=keepdims))


def _logsumexp(x, axes, keepdims):
    x = _float(x)
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)  # shift by the max, if finite
    s = np.sum(np.exp(x - m), axis=axes, keepdims=True)
    out = np.log(s) + m
    return out if keepdims else np.squeeze(out, axis=axes)


REDUCTIONS = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, axes, k: np.prod(x, axis=axes, keepdims=k, dtype=x.dtype),
    "ReduceL1": lambda x, axes, k: np.sum(np.abs(x), axis=axes, keepdims=k, dtype=_acc(x)),
    "ReduceL2": _l2,
    "ReduceSumSquare": lambda x, axes, k: np.sum(np.square(x, dtype=_acc(x)), axis=axes,
                                                 keepdims=k, dtype=_acc(x)),
    "ReduceLogSum": lambda x, axes, k: np.log(np.sum(_float(x), axis=axes, keepdims=k)),
    "ReduceLogSumExp": _logsumexp,
}
for _op, _fn in REDUCTIONS.items():
    reference(_op)(_reduction(_fn))


def _argext(fn):
    def run(attrs, inputs):
        x = inputs[0]
        axis = int(attrs.get("axis", 0)) % x.ndim
        if attrs.get("select_last_index", 0):
            n = x.shape[axis]
            idx = n - 1 - fn(np.flip(x, axis=axis), axis=axis)
        else:
            idx = fn(x, axis=axis)
        if attrs.get("keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [np.asarray(idx, dtype=np.int64)]
    return run


reference("ArgMax")(_argext(np.argmax))
reference("ArgMin")(_argext(np.argmin))


def _softmax_like(fn):
    """Apply fn(x, axis) along `axis`; coerce_2d (opset < 13) flattens to 2-D at axis."""
    def run(attrs, inputs):
        x = inputs[0]
        axis = int(attrs.get("axis", -1))
        if attrs.get("coerce_2d", 0):
            axis = axis + x.ndim if axis < 0 else axis
            rows = int(np.prod(x.shape[:axis], dtype=np.int64))
            cols = int(np.prod(x.shape[axis:], dtype=np.int64))
            with np.errstate(all="ignore"):
                out = fn(x.reshape(rows, cols), 1)
            return [out.reshape(x.shape).astype(x.dtype, copy=False)]
        with np.errstate(all="ignore"):
            out = fn(x, axis % x.ndim)
        return [out.astype(x.dtype, copy=False)]
    return run


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))  # subtract the row max
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x, axis):
    """1 at the first maximum along axis, 0 elsewhere."""
    out = np.zeros_like(x)
    if x.size:
        idx = np.expand_dims(np.argmax(x, axis=axis), axis)
        np.put_along_axis(out, idx, 1, axis=axis)
    return out


reference("Softmax")(_softmax_like(_softmax))
reference("LogSoftmax")(_softmax_like(_log_softmax))
reference("Hardmax")(_softmax_like(_hardmax))


@reference("CumSum")
def ref_cumsum(attrs, inputs):
    x = inputs[0]
    axis = int(np.asarray(inputs[1]).reshape(())) % x.ndim
    y = np.flip(x, axis) if attrs.get("reverse", 0) else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if attrs.get("exclusive", 0) and out.shape[axis]:
        # shift by one along axis: out[0] = 0, out[i] = sum of y[:i]
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)),
                              np.take(out, np.arange(out.shape[axis] - 1), axis=axis)],
                             axis=axis)
    if attrs.get("reverse", 0):
        out = np.flip(out, axis)
    return [np.require(out, requirements="C")]
