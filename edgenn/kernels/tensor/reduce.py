"""ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL2 on float32 with
plan-time axes: one NumPy reduction written straight into the planned output (the reference
allocates, converts and copies; on the small tensors of streaming models that overhead is
the cost, and inside a model its NumPy calls run with cold caches, so even a small
reduction costs several times what it does timed alone)."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from . import _eltwise
from ..reference.reduce import _axes

_UFUNC = {"ReduceSum": np.add, "ReduceMean": np.add, "ReduceMax": np.maximum,
          "ReduceMin": np.minimum}


def _reduced_axes(node, ins):
    """The reduced axes as the reference reads them (None: a no-op reduction)."""
    x = np.broadcast_to(np.zeros((), np.bool_), ins[0].shape)      # shape only, no memory
    axes_in = [ins[1].value] if len(ins) > 1 and ins[1] is not None else []
    return _axes(node.attrs, [x] + axes_in)


def _supports(node, ins, outs) -> bool:
    x = ins[0]
    if x.dtype != "float32" or len(ins) > 1 and ins[1] is not None and ins[1].value is None:
        return False
    return bool(x.shape) and 0 not in x.shape and _reduced_axes(node, ins) is not None


def _prepare(node, ins, outs):
    x = ins[0]
    axes = _reduced_axes(node, ins)
    reduce = _UFUNC[node.op].reduce
    scale = np.float32(1.0 / np.prod([x.shape[a] for a in axes])) \
        if node.op == "ReduceMean" else None
    kept = tuple(1 if k in axes else d for k, d in enumerate(x.shape))

    def run(inputs, outputs):
        y = outputs[0].reshape(kept)
        reduce(inputs[0], axis=axes, keepdims=True, out=y)
        if scale is not None:
            np.multiply(y, scale, out=y)
    return run


for _op in _UFUNC:
    kernel(_op, f"{_op[6:].lower()}_ufunc_reduce", supports=_supports)(_prepare)


def _trailing(node, ins):
    """(rows, n) when the reduced axes are the trailing ones (global pooling, a mean over
    the last axis), each row n contiguous values; else None."""
    axes = _reduced_axes(node, ins)
    rank = len(ins[0].shape)
    if axes is None or tuple(sorted(a % rank for a in axes)) != tuple(range(rank - len(axes), rank)):
        return None
    n = int(np.prod(ins[0].shape[rank - len(axes):]))
    return int(np.prod(ins[0].shape)) // n, n


def _rows_supports(node, ins, outs) -> bool:
    return _supports(node, ins, outs) and _trailing(node, ins) is not None


def _rows_error_bound(node, inputs) -> float:
    """elt_sum_rows' float32 sum: (n / 8 + 4) eps sum |x| per row (times the mean's 1/n)."""
    x = np.asarray(inputs[0], np.float64)
    rows, n = _trailing(node, [x] + [None if a is None else _Const(a) for a in inputs[1:]])
    scale = 1.0 / n if node.op == "ReduceMean" else 1.0
    return float((n / 8 + 4) * 2.0 ** -24 * np.abs(x).reshape(rows, n).sum(1).max() * scale)


class _Const:
    """An axes input as _reduced_axes reads it (its value)."""
    def __init__(self, value):
        self.value, self.shape = value, np.shape(value)


def _prepare_rows(node, ins, outs):
    """ReduceMean / ReduceSum over trailing axes as row sums in C (_eltwise.h)."""
    rows, n = _trailing(node, ins)
    scale = 1.0 / n if node.op == "ReduceMean" else 1.0
    sum_rows = _eltwise.sum_rows

    def run(inputs, outputs):
        sum_rows(inputs[0].reshape(rows, n), outputs[0].reshape(rows), scale)

    run.cstep = lambda ins, outs, in_cells, out_cells: _eltwise.sum_rows_step(
        rows, n, scale, in_cells[0], out_cells[0])
    return run


for _op in ("ReduceMean", "ReduceSum"):
    kernel(_op, f"{_op[6:].lower()}_rows_c", supports=_rows_supports,
           error_bound=_rows_error_bound)(_prepare_rows)


def _prepare_squares(node, ins, outs):
    """sum(x^2) [then sqrt]: the squares into a planned scratch, float32 sums (NumPy's
    pairwise summation: relative error ~1e-7 log2(n), where the reference sums in float64)."""
    x = ins[0]
    axes = _reduced_axes(node, ins)
    kept = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    squares = scratch.array(tuple(x.shape), np.float32)
    root = node.op == "ReduceL2"

    def run(inputs, outputs):
        y, sq = outputs[0].reshape(kept), squares.get()
        np.square(inputs[0], out=sq)
        np.add.reduce(sq, axis=axes, keepdims=True, out=y)
        if root:
            np.sqrt(y, out=y)
    return run


for _op in ("ReduceSumSquare", "ReduceL2"):
    kernel(_op, f"{_op[6:].lower()}_squares_reduce", supports=_supports)(_prepare_squares)
