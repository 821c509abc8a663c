"""Index arithmetic of the tensor ops, shared by their shape rules (graph/shapes/tensor.py)
and their reference kernels (kernels/reference/tensor.py): small functions of shapes and
values that raise ValueError on bad input (the shape rule's caller turns that into a
GraphError naming the node)."""
from __future__ import annotations

import math

import numpy as np

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def ints(value) -> list[int]:
    """A constant int tensor (any rank) -> flat list of Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes, rank: int) -> list[int]:
    out = [norm_axis(int(a), rank) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return out


def reshape_target(in_shape, shape, allowzero: int) -> tuple[int, ...]:
    """ONNX Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    shape = ints(shape)
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"shape {shape}: 0 at position {i} has no input dim to copy")
            d = in_shape[i]
        elif d < -1:
            raise ValueError(f"shape {shape} has a negative dim {d}")
        out.append(d)
    total = math.prod(in_shape)
    if out.count(-1) > 1:
        raise ValueError(f"shape {shape} has more than one -1")
    if -1 in out:
        if allowzero and 0 in shape:
            raise ValueError(f"shape {shape}: -1 together with 0 under allowzero=1")
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ValueError(f"cannot reshape {tuple(in_shape)} into {shape}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ValueError(f"cannot reshape {tuple(in_shape)} ({total} elements) into {shape}")
    return tuple(out)


def flatten_shape(in_shape, axis: int) -> tuple[int, int]:
    rank = len(in_shape)
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return math.prod(in_shape[:axis]), math.prod(in_shape[axis:])


def transpose_perm(rank: int, perm) -> list[int]:
    if perm is None or len(perm) == 0:
        return list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"perm {perm} is not a permutation of {rank} axes")
    return perm


def squeeze_shape(in_shape, axes) -> tuple[int, ...]:
    """axes None (or empty) squeezes every dim of size 1."""
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        return tuple(d for d in in_shape if d != 1)
    axes = norm_axes(ints(axes), len(in_shape))
    for a in axes:
        if in_shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {in_shape[a]}")
    return tuple(d for i, d in enumerate(in_shape) if i not in axes)


def unsqueeze_shape(in_shape, axes) -> tuple[int, ...]:
    axes = ints(axes)
    rank = len(in_shape) + len(axes)
    axes = norm_axes(axes, rank)
    rest = iter(in_shape)
    return tuple(1 if i in axes else next(rest) for i in range(rank))


def split_sizes(dim: int, split, num_outputs: int | None) -> list[int]:
    """Sizes of the parts: explicit `split`, else `num_outputs` parts of ceil(dim / n)
    with a smaller last part (opset 18)."""
    if split is not None:
        sizes = ints(split)
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise ValueError(f"split sizes {sizes} do not add up to dim {dim}")
        return sizes
    if not num_outputs or num_outputs < 1:
        raise ValueError("Split needs a 'split' input or 'num_outputs'")
    chunk = -(-dim // num_outputs)
    sizes = [chunk] * (num_outputs - 1) + [dim - chunk * (num_outputs - 1)]
    if sizes[-1] < 0:
        raise ValueError(f"cannot split dim {dim} into {num_outputs} parts")
    return sizes


def slice_objects(in_shape, starts, ends, axes, steps) -> list[slice]:
    """One Python slice per dim. ONNX's clamping of starts/ends (negative counts from the
    end, out-of-range clamps, for negative steps end -1 means 'before index 0') is exactly
    Python's slice semantics on the raw values, so raw values go straight into slice()."""
    rank = len(in_shape)
    starts, ends = ints(starts), ints(ends)
    if len(starts) != len(ends):
        raise ValueError(f"starts {starts} and ends {ends} differ in length")
    axes = list(range(len(starts))) if axes is None else norm_axes(ints(axes), rank)
    steps = [1] * len(starts) if steps is None else ints(steps)
    if not len(axes) == len(steps) == len(starts):
        raise ValueError("starts, ends, axes and steps differ in length")
    out = [slice(None)] * rank
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise ValueError("slice step 0")
        out[a] = slice(s, e, st)
    return out


def sliced_shape(in_shape, slices) -> tuple[int, ...]:
    return tuple(len(range(*s.indices(d))) for s, d in zip(slices, in_shape))


def shape_bounds(rank: int, start: int, end: int | None) -> tuple[int, int]:
    def clamp(i):
        i = i + rank if i < 0 else i
        return min(max(i, 0), rank)
    return clamp(start), clamp(rank if end is None else end)


def pad_widths(rank: int, pads, axes) -> list[tuple[int, int]]:
    """pads = [begin_0, begin_1, ..., end_0, end_1, ...] over `axes` (all axes if None)."""
    pads = ints(pads)
    axes = list(range(rank)) if axes is None else norm_axes(ints(axes), rank)
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads {pads} needs 2 values per axis for axes {axes}")
    widths = [(0, 0)] * rank
    n = len(axes)
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + n])
    return widths


def padded_shape(in_shape, widths) -> tuple[int, ...]:
    out = tuple(d + b + e for d, (b, e) in zip(in_shape, widths))
    if any(d < 0 for d in out):
        raise ValueError(f"pads {widths} crop more than the input shape {tuple(in_shape)}")
    return out


def range_count(start, limit, delta) -> int:
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if delta == 0:
        raise ValueError("Range delta is 0")
    if start.dtype.kind in "iu":
        a, d = int(limit) - int(start), int(delta)
        return max(-((-a) // d), 0)
    return max(math.ceil(float(limit.astype(np.float64) - start.astype(np.float64))
                         / float(delta)), 0)


def depth_to_space_shape(in_shape, b: int) -> tuple[int, ...]:
    n, c, h, w = in_shape
    if b < 1 or c % (b * b):
        raise ValueError(f"channels {c} not divisible by blocksize^2 = {b * b}")
    return n, c // (b * b), h * b, w * b


def space_to_depth_shape(in_shape, b: int) -> tuple[int, ...]:
    n, c, h, w = in_shape
    if b < 1 or h % b or w % b:
        raise ValueError(f"spatial dims {h}x{w} not divisible by blocksize {b}")
    return n, c * b * b, h // b, w // b


def gathernd_shape(data_shape, idx_shape, batch_dims: int) -> tuple[int, ...]:
    b, k = batch_dims, idx_shape[-1]
    if not b < min(len(data_shape), len(idx_shape)):
        raise ValueError(f"batch_dims {b} must be below both ranks")
    if tuple(data_shape[:b]) != tuple(idx_shape[:b]):
        raise ValueError(f"batch dims differ: {data_shape[:b]} vs {idx_shape[:b]}")
    if not 1 <= k <= len(data_shape) - b:
        raise ValueError(f"indices last dim {k} must be in 1..{len(data_shape) - b}")
    return tuple(idx_shape[:-1]) + tuple(data_shape[b + k:])


def onehot_shape(idx_shape, depth: int, axis: int) -> tuple[int, ...]:
    rank = len(idx_shape) + 1
    axis = norm_axis(axis, rank)
    return tuple(idx_shape[:axis]) + (depth,) + tuple(idx_shape[axis:])


def depth_value(depth) -> int:
    d = np.asarray(depth).reshape(-1)
    if d.size != 1:
        raise ValueError(f"depth must hold one value, got shape {np.shape(depth)}")
    d = int(d[0])
    if d < 1:
        raise ValueError(f"depth {d} must be positive")
    return d


def topk_k(k, dim: int) -> int:
    k = ints(k)
    if len(k) != 1 or not 0 <= k[0] <= dim:
        raise ValueError(f"k {k} must be one value in 0..{dim}")
    return k[0]


def _wrap_indices(idx: np.ndarray, dim, what: str) -> np.ndarray:
    """Negative indices count from the end; out-of-range ones are an error."""
    idx = np.asarray(idx).astype(np.int64, copy=False)
    if np.any(idx >= dim) or np.any(idx < -dim):
        raise ValueError(f"{what} index out of range for dim(s) {dim}")
    return np.where(idx < 0, idx + dim, idx)
