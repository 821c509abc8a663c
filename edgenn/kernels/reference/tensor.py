"""Reference kernels of the tensor family: shape manipulation, indexing, data movement.

Plain NumPy, dtype-agnostic: every kernel returns the dtype of its data input (or the
dtype ONNX specifies: int64 for Shape/Size/NonZero/TopK indices). Inputs are never
modified in place. The index arithmetic shared with the shape rules lives in
graph/shapes/tensor_geometry.py.
"""
from __future__ import annotations

import math

import numpy as np

from ...graph.dtypes import from_onnx
from ...graph.shapes.tensor_geometry import (  # noqa: F401 - shared with the shape rules
    _PAD_MODES, ints, norm_axis, norm_axes, reshape_target, flatten_shape, transpose_perm,
    squeeze_shape, unsqueeze_shape, split_sizes, slice_objects, sliced_shape,
    shape_bounds, pad_widths, padded_shape, range_count, depth_to_space_shape,
    space_to_depth_shape, gathernd_shape, onehot_shape, depth_value, topk_k,
    _wrap_indices)
from ...registry import reference

# -- kernels ---------------------------------------------------------------------------------


@reference("Reshape")
def reshape(attrs, inputs):
    x, shape = inputs
    return [x.reshape(reshape_target(x.shape, shape, attrs.get("allowzero", 0)))]


@reference("Flatten")
def flatten(attrs, inputs):
    x = inputs[0]
    return [x.reshape(flatten_shape(x.shape, attrs.get("axis", 1)))]


@reference("Transpose")
def transpose(attrs, inputs):
    x = inputs[0]
    return [np.require(np.transpose(x, transpose_perm(x.ndim, attrs.get("perm"))), requirements="C")]


@reference("Squeeze")
def squeeze(attrs, inputs):
    x = inputs[0]
    axes = inputs[1] if len(inputs) > 1 else None
    return [x.reshape(squeeze_shape(x.shape, axes))]


@reference("Unsqueeze")
def unsqueeze(attrs, inputs):
    x, axes = inputs
    return [x.reshape(unsqueeze_shape(x.shape, axes))]


@reference("Concat")
def concat(attrs, inputs):
    arrays = [a for a in inputs if a is not None]
    axis = norm_axis(attrs["axis"], arrays[0].ndim)
    return [np.concatenate(arrays, axis=axis)]


@reference("Split")
def split(attrs, inputs):
    x = inputs[0]
    sizes_in = inputs[1] if len(inputs) > 1 else None
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    sizes = split_sizes(x.shape[axis], sizes_in, attrs.get("num_outputs"))
    bounds = np.cumsum([0] + sizes)
    index = [slice(None)] * x.ndim
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(lo), int(hi))
        outs.append(np.require(x[tuple(index)], requirements="C"))
    return outs


@reference("Slice")
def slice_(attrs, inputs):
    x, starts, ends = inputs[:3]
    axes = inputs[3] if len(inputs) > 3 else None
    steps = inputs[4] if len(inputs) > 4 else None
    return [np.require(x[tuple(slice_objects(x.shape, starts, ends, axes, steps))], requirements="C")]


@reference("Gather")
def gather(attrs, inputs):
    x, idx = inputs
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    idx = _wrap_indices(idx, x.shape[axis], "Gather")
    return [np.asarray(np.take(x, idx, axis=axis))]


@reference("GatherElements")
def gather_elements(attrs, inputs):
    x, idx = inputs
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    idx = _wrap_indices(idx, x.shape[axis], "GatherElements")
    return [np.take_along_axis(x, idx, axis=axis)]


@reference("GatherND")
def gather_nd(attrs, inputs):
    # data (B..., D_b .. D_r-1), indices (B..., M..., k) -> (B..., M..., D_b+k ...)
    x, idx = inputs
    b = attrs.get("batch_dims", 0)
    out_shape = gathernd_shape(x.shape, idx.shape, b)
    k = idx.shape[-1]
    nbatch, m = math.prod(x.shape[:b]), math.prod(idx.shape[b:-1])
    data = x.reshape((nbatch,) + x.shape[b:])
    dims = np.array(x.shape[b:b + k], dtype=np.int64)
    idx = _wrap_indices(idx.reshape(nbatch, m, k), dims, "GatherND")
    batch = np.arange(nbatch)[:, None]
    picked = data[(batch,) + tuple(idx[..., j] for j in range(k))]
    return [picked.reshape(out_shape)]


_SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[where] = updates
    elif reduction in _SCATTER_UFUNCS:
        _SCATTER_UFUNCS[reduction].at(out, where, updates)
    else:
        raise ValueError(f"unknown reduction {reduction!r}")


@reference("ScatterND")
def scatter_nd(attrs, inputs):
    # indices (M..., k) address slices data[i_0, .., i_k-1]; updates (M..., D_k ...)
    x, idx, updates = inputs
    k = idx.shape[-1]
    dims = np.array(x.shape[:k], dtype=np.int64)
    flat = _wrap_indices(idx.reshape(-1, k), dims, "ScatterND")
    upd = updates.reshape((flat.shape[0],) + x.shape[k:])
    out = x.copy()
    _scatter(out, tuple(flat.T), upd, attrs.get("reduction", "none"))
    return [out]


@reference("ScatterElements")
def scatter_elements(attrs, inputs):
    x, idx, updates = inputs
    axis = norm_axis(attrs.get("axis", 0), x.ndim)
    idx = _wrap_indices(idx, x.shape[axis], "ScatterElements")
    where = list(np.ix_(*[np.arange(d) for d in idx.shape]))  # open grid over idx
    where[axis] = idx
    out = x.copy()
    _scatter(out, tuple(where), updates, attrs.get("reduction", "none"))
    return [out]


@reference("Shape")
def shape(attrs, inputs):
    x = inputs[0]
    lo, hi = shape_bounds(x.ndim, attrs.get("start", 0), attrs.get("end"))
    return [np.array(x.shape[lo:hi], dtype=np.int64)]


@reference("Size")
def size(attrs, inputs):
    return [np.array(inputs[0].size, dtype=np.int64)]


@reference("Expand")
def expand(attrs, inputs):
    x, shape = inputs
    out = np.broadcast_shapes(x.shape, tuple(ints(shape)))
    return [np.array(np.broadcast_to(x, out))]


@reference("Tile")
def tile(attrs, inputs):
    x, repeats = inputs
    reps = ints(repeats)
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ValueError(f"repeats {reps} must be {x.ndim} non-negative values")
    return [np.tile(x, reps)]


@reference("ConstantOfShape")
def constant_of_shape(attrs, inputs):
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    shape = ints(inputs[0])
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dim in shape {shape}")
    return [np.full(shape, value[0], dtype=value.dtype)]


@reference("Range")
def range_(attrs, inputs):
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs)
    n = range_count(start, limit, delta)
    if start.dtype.kind in "iu":
        values = int(start) + np.arange(n, dtype=np.int64) * int(delta)
    else:  # start + i * delta, computed in float64 and rounded once
        values = float(start) + np.arange(n, dtype=np.float64) * float(delta)
    return [values.astype(start.dtype)]


@reference("TopK")
def topk(attrs, inputs):
    x, k = inputs
    axis = norm_axis(attrs.get("axis", -1), x.ndim)
    k = topk_k(k, x.shape[axis])
    if attrs.get("largest", 1):
        # descending, ties by lower index first: stable ascending sort of the reversed
        # axis, read backwards
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = x.shape[axis] - 1 - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64, copy=False)
    return [np.take_along_axis(x, idx, axis=axis), idx]


@reference("Trilu")
def trilu(attrs, inputs):
    x = inputs[0]
    k = int(np.asarray(inputs[1]).reshape(())) if len(inputs) > 1 and inputs[1] is not None \
        else 0
    rows, cols = x.shape[-2:]
    diff = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # j - i
    keep = diff >= k if attrs.get("upper", 1) else diff <= k
    return [np.where(keep, x, np.zeros((), x.dtype))]


@reference("OneHot")
def one_hot(attrs, inputs):
    indices, depth, values = inputs
    depth = depth_value(depth)
    values = np.asarray(values).reshape(-1)
    off, on = values[0], values[1]
    axis = norm_axis(attrs.get("axis", -1), indices.ndim + 1)
    idx = np.asarray(indices).astype(np.int64)
    if not attrs.get("negative_indices_off", 0):  # opset >= 11: negatives count from the end
        idx = np.where(idx < 0, idx + depth, idx)
    # hot[..., d] is True where idx == d; out-of-range indices match no d
    hot = idx[..., None] == np.arange(depth, dtype=np.int64)
    hot = np.moveaxis(hot, -1, axis)
    return [np.where(hot, on, off).astype(values.dtype, copy=False)]


@reference("EyeLike")
def eye_like(attrs, inputs):
    x = inputs[0]
    if x.ndim != 2:
        raise ValueError(f"EyeLike needs a 2-D input, got shape {x.shape}")
    dtype = x.dtype if attrs.get("dtype") is None else np.dtype(from_onnx(attrs["dtype"]))
    return [np.eye(x.shape[0], x.shape[1], k=attrs.get("k", 0), dtype=dtype)]


@reference("DepthToSpace")
def depth_to_space(attrs, inputs):
    # x (N, C, H, W) -> (N, C / b^2, H * b, W * b)
    x = inputs[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    out = depth_to_space_shape(x.shape, b)
    if attrs.get("mode", "DCR") == "DCR":  # depth index = (bh * b + bw) * C' + c'
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: depth index = (c' * b + bh) * b + bw
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [np.require(t, requirements="C").reshape(out)]


@reference("SpaceToDepth")
def space_to_depth(attrs, inputs):
    # x (N, C, H, W) -> (N, C * b^2, H / b, W / b); inverse of DepthToSpace in the same mode
    x = inputs[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    out = space_to_depth_shape(x.shape, b)
    t = x.reshape(n, c, h // b, b, w // b, b)
    if attrs.get("mode", "DCR") == "DCR":
        t = t.transpose(0, 3, 5, 1, 2, 4)
    else:
        t = t.transpose(0, 1, 3, 5, 2, 4)
    return [np.require(t, requirements="C").reshape(out)]




@reference("Pad")
def pad(attrs, inputs):
    x, pads = inputs[:2]
    value = inputs[2] if len(inputs) > 2 else None
    axes = inputs[3] if len(inputs) > 3 else None
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise ValueError(f"unknown pad mode {mode!r}")
    widths = pad_widths(x.ndim, pads, axes)
    padded_shape(x.shape, widths)  # validates
    # negative pads crop: do that first, then pad with the non-negative widths
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        fill = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
        return [np.pad(x, widths, mode="constant", constant_values=np.array(fill).astype(x.dtype))]
    return [np.pad(x, widths, mode=_PAD_MODES[mode])]


@reference("NonZero")
def non_zero(attrs, inputs):
    x = inputs[0]
    return [np.array(np.nonzero(x.reshape(x.shape or (1,))), dtype=np.int64).reshape(
        max(x.ndim, 1), -1)]
