"""Shape rules of the reduce family: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum.

Canonical forms (newest opset): Reduce* take `axes` as an optional int64 input and the
attributes keepdims, noop_with_empty_axes. Softmax-likes carry `coerce_2d=1` when they come
from opset < 13, where the input is flattened to 2-D at `axis` before normalizing.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ...registry import TensorInfo, const_value, shape_rule

REDUCE_OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
SOFTMAX_OPS = ("Softmax", "LogSoftmax", "Hardmax")
OPS = REDUCE_OPS + SOFTMAX_OPS + ("ArgMax", "ArgMin", "CumSum")


def _where(node) -> str:
    return f"{node.op} node {node.name!r}"


def normalize_axes(node, axes, rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise GraphError(f"{_where(node)}: axis {a} is out of range for rank {rank}")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise GraphError(f"{_where(node)}: repeated axes {list(axes)}")
    return tuple(sorted(out))


def reduce_axes(node, ins) -> tuple[int, ...] | None:
    """Axes reduced by a Reduce* node, or None when it is a no-op (empty axes + noop)."""
    x = ins[0]
    rank = len(x.shape)
    axes_in = ins[1] if len(ins) > 1 else None
    if axes_in is None:
        axes = ()
    elif axes_in.value is not None:
        axes = tuple(int(a) for a in np.asarray(axes_in.value).reshape(-1))
    elif int(np.prod(axes_in.shape)) == 0:
        axes = ()
    else:
        const_value(node, axes_in, "axes")  # raises: the axes come from runtime data
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return None
        return tuple(range(rank))
    return normalize_axes(node, axes, rank)


def reduced_shape(shape, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _need(node, ins, n: int) -> None:
    if len(ins) < n or any(i is None for i in ins[:n]):
        raise GraphError(f"{_where(node)} needs {n} input(s), got {len(ins)}")


@shape_rule(*REDUCE_OPS)
def reduce_rule(node, ins):
    _need(node, ins, 1)
    x = ins[0]
    axes = reduce_axes(node, ins)
    if axes is None:
        return [TensorInfo(x.dtype, x.shape)]
    return [TensorInfo(x.dtype, reduced_shape(x.shape, axes, node.attrs.get("keepdims", 1)))]


@shape_rule("ArgMax", "ArgMin")
def arg_rule(node, ins):
    _need(node, ins, 1)
    x = ins[0]
    (axis,) = normalize_axes(node, [node.attrs.get("axis", 0)], len(x.shape))
    if x.shape[axis] == 0:
        raise GraphError(f"{_where(node)}: cannot take {node.op} over an empty axis "
                         f"(shape {x.shape})")
    return [TensorInfo("int64", reduced_shape(x.shape, (axis,), node.attrs.get("keepdims", 1)))]


@shape_rule(*SOFTMAX_OPS)
def softmax_rule(node, ins):
    _need(node, ins, 1)
    x = ins[0]
    rank = len(x.shape)
    axis = int(node.attrs.get("axis", -1))
    coerce = node.attrs.get("coerce_2d", 0)
    # the opset < 13 form flattens at `axis`, which may then be `rank` (nothing after it)
    if not (-rank <= axis < rank or (coerce and axis == rank)):
        raise GraphError(f"{_where(node)}: axis {axis} is out of range for rank {rank}")
    return [TensorInfo(x.dtype, x.shape)]


@shape_rule("CumSum")
def cumsum_rule(node, ins):
    _need(node, ins, 2)
    x, axis = ins[0], ins[1]
    if int(np.prod(axis.shape)) != 1 or axis.dtype not in ("int32", "int64"):
        raise GraphError(f"{_where(node)}: axis must be an int32/int64 scalar, got "
                         f"{axis.dtype}{list(axis.shape)}")
    if axis.value is not None:
        normalize_axes(node, [int(np.asarray(axis.value).reshape(()))], len(x.shape))
    return [TensorInfo(x.dtype, x.shape)]

# inputs that determine output shapes: must be constants for shape inference (planning)
CONST_INPUTS = {op: (1,) for op in REDUCE_OPS}
