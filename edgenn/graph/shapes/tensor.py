"""Shape rules of the tensor family: shape manipulation, indexing, data movement.

Shape-determining inputs (Reshape shape, Slice starts/ends/axes/steps, Expand shape, Tile
repeats, Pad pads, TopK k, OneHot depth, Range, ConstantOfShape, Squeeze/Unsqueeze axes,
Split sizes) must be constants here: `TensorInfo.value`. That is what folds the
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains torch exports once the input
shapes are bound (graph/infer.py then evaluates the reference kernel on the constants).

NonZero has a data-dependent output shape: its rule answers only when the input is a
constant (so NonZero works when it folds away) and otherwise raises UnsupportedOpError.
The importer accepts NonZero (it is registered), so a NonZero on runtime data is reported
when shapes are inferred at load, not at import.

The index arithmetic is shared with the reference kernels (kernels/reference/tensor.py).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from . import tensor_geometry as ref
from ..dtypes import from_onnx
from ...registry import TensorInfo, const_value, shape_rule

# Constant is converter-only (its value goes into Graph.consts): see
# converters/onnx/tensor.py CONVERTER_ONLY.
OPS = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat",
       "Split", "Slice", "Gather", "GatherElements", "GatherND", "ScatterND",
       "ScatterElements", "Shape", "Size", "Expand", "Tile", "ConstantOfShape", "Range",
       "TopK", "Trilu", "OneHot", "EyeLike", "DepthToSpace", "SpaceToDepth", "Pad",
       "NonZero")

# op -> indices of the inputs whose values determine output shapes: they must be constants
# (initializers, or folded from Shape chains) when shapes are inferred.
CONST_INPUTS = {"Reshape": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
                "Slice": (1, 2, 3, 4), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
                "Range": (0, 1, 2), "TopK": (1,), "OneHot": (1,), "Pad": (1, 3)}


def _input(ins, i):
    return ins[i] if i < len(ins) else None


def _const(node, ins, i, what: str, optional: bool = False):
    """Value of constant input i; None if omitted and optional; GraphError if not constant."""
    info = _input(ins, i)
    if info is None:
        if optional:
            return None
        raise GraphError(f"{node.op} node {node.name!r}: missing input {what!r}")
    return const_value(node, info, what)


def _check(node, ok: bool, msg: str) -> None:
    if not ok:
        raise GraphError(f"{node.op} node {node.name!r}: {msg}")


@shape_rule("Reshape")
def reshape(node, ins):
    x = ins[0]
    shape = _const(node, ins, 1, "shape")
    return [TensorInfo(x.dtype, ref.reshape_target(x.shape, shape,
                                                   node.attrs.get("allowzero", 0)))]


@shape_rule("Flatten")
def flatten(node, ins):
    x = ins[0]
    return [TensorInfo(x.dtype, ref.flatten_shape(x.shape, node.attrs.get("axis", 1)))]


@shape_rule("Transpose")
def transpose(node, ins):
    x = ins[0]
    perm = ref.transpose_perm(len(x.shape), node.attrs.get("perm"))
    _check(node, len(perm) == len(x.shape), f"perm {perm} does not match rank {len(x.shape)}")
    return [TensorInfo(x.dtype, tuple(x.shape[p] for p in perm))]


@shape_rule("Squeeze")
def squeeze(node, ins):
    x = ins[0]
    axes = _const(node, ins, 1, "axes", optional=True)
    return [TensorInfo(x.dtype, ref.squeeze_shape(x.shape, axes))]


@shape_rule("Unsqueeze")
def unsqueeze(node, ins):
    x = ins[0]
    axes = _const(node, ins, 1, "axes")
    return [TensorInfo(x.dtype, ref.unsqueeze_shape(x.shape, axes))]


@shape_rule("Concat")
def concat(node, ins):
    xs = [i for i in ins if i is not None]
    _check(node, bool(xs), "no inputs")
    rank = len(xs[0].shape)
    _check(node, "axis" in node.attrs, "attribute 'axis' is required")
    axis = ref.norm_axis(node.attrs["axis"], rank)
    for x in xs:
        _check(node, x.dtype == xs[0].dtype, f"inputs mix dtypes {[i.dtype for i in xs]}")
        _check(node, len(x.shape) == rank and all(
            a == b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if i != axis),
            f"input shapes {[i.shape for i in xs]} differ off axis {axis}")
    out = list(xs[0].shape)
    out[axis] = sum(x.shape[axis] for x in xs)
    return [TensorInfo(xs[0].dtype, tuple(out))]


@shape_rule("Split")
def split(node, ins):
    x = ins[0]
    axis = ref.norm_axis(node.attrs.get("axis", 0), len(x.shape))
    sizes = ref.split_sizes(x.shape[axis], _const(node, ins, 1, "split", optional=True),
                            node.attrs.get("num_outputs"))
    _check(node, len(sizes) == len(node.outputs),
           f"{len(sizes)} split sizes for {len(node.outputs)} outputs")
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(TensorInfo(x.dtype, tuple(shape)))
    return outs


@shape_rule("Slice")
def slice_(node, ins):
    x = ins[0]
    slices = ref.slice_objects(x.shape, _const(node, ins, 1, "starts"),
                               _const(node, ins, 2, "ends"),
                               _const(node, ins, 3, "axes", optional=True),
                               _const(node, ins, 4, "steps", optional=True))
    return [TensorInfo(x.dtype, ref.sliced_shape(x.shape, slices))]


@shape_rule("Gather")
def gather(node, ins):
    x, idx = ins
    axis = ref.norm_axis(node.attrs.get("axis", 0), len(x.shape))
    return [TensorInfo(x.dtype, x.shape[:axis] + idx.shape + x.shape[axis + 1:])]


@shape_rule("GatherElements")
def gather_elements(node, ins):
    x, idx = ins
    _check(node, len(idx.shape) == len(x.shape),
           f"indices rank {len(idx.shape)} != data rank {len(x.shape)}")
    ref.norm_axis(node.attrs.get("axis", 0), len(x.shape))
    return [TensorInfo(x.dtype, idx.shape)]


@shape_rule("GatherND")
def gather_nd(node, ins):
    x, idx = ins
    return [TensorInfo(x.dtype, ref.gathernd_shape(x.shape, idx.shape,
                                                   node.attrs.get("batch_dims", 0)))]


_REDUCTIONS = ("none", "add", "mul", "max", "min")


@shape_rule("ScatterND")
def scatter_nd(node, ins):
    x, idx, upd = ins
    _check(node, node.attrs.get("reduction", "none") in _REDUCTIONS,
           f"unknown reduction {node.attrs.get('reduction')!r}")
    k = idx.shape[-1] if idx.shape else 0
    _check(node, len(idx.shape) >= 1 and 1 <= k <= len(x.shape),
           f"indices shape {idx.shape} does not index data of shape {x.shape}")
    want = tuple(idx.shape[:-1]) + tuple(x.shape[k:])
    _check(node, tuple(upd.shape) == want, f"updates shape {upd.shape}, expected {want}")
    return [TensorInfo(x.dtype, x.shape)]


@shape_rule("ScatterElements")
def scatter_elements(node, ins):
    x, idx, upd = ins
    _check(node, node.attrs.get("reduction", "none") in _REDUCTIONS,
           f"unknown reduction {node.attrs.get('reduction')!r}")
    ref.norm_axis(node.attrs.get("axis", 0), len(x.shape))
    _check(node, idx.shape == upd.shape and len(idx.shape) == len(x.shape),
           f"indices {idx.shape} / updates {upd.shape} do not fit data {x.shape}")
    return [TensorInfo(x.dtype, x.shape)]


# Shape and Size are the exception to "rules return no values": their value is known from
# the input's shape alone, even when the input itself is runtime data. Returning it here is
# what lets infer() fold the Shape -> Gather -> ... -> Reshape chains downstream.
@shape_rule("Shape")
def shape(node, ins):
    dims = ins[0].shape
    lo, hi = ref.shape_bounds(len(dims), node.attrs.get("start", 0), node.attrs.get("end"))
    value = np.array(dims[lo:hi], dtype=np.int64)
    return [TensorInfo("int64", value.shape, value)]


@shape_rule("Size")
def size(node, ins):
    return [TensorInfo("int64", (), np.array(math.prod(ins[0].shape), dtype=np.int64))]


@shape_rule("Expand")
def expand(node, ins):
    x = ins[0]
    shape = tuple(ref.ints(_const(node, ins, 1, "shape")))
    return [TensorInfo(x.dtype, tuple(int(d) for d in np.broadcast_shapes(x.shape, shape)))]


@shape_rule("Tile")
def tile(node, ins):
    x = ins[0]
    reps = ref.ints(_const(node, ins, 1, "repeats"))
    _check(node, len(reps) == len(x.shape) and all(r >= 0 for r in reps),
           f"repeats {reps} must be {len(x.shape)} non-negative values")
    return [TensorInfo(x.dtype, tuple(d * r for d, r in zip(x.shape, reps)))]


@shape_rule("ConstantOfShape")
def constant_of_shape(node, ins):
    shape = ref.ints(_const(node, ins, 0, "input"))
    _check(node, all(d >= 0 for d in shape), f"negative dim in shape {shape}")
    value = node.attrs.get("value")
    dtype = "float32" if value is None else np.asarray(value).dtype.name
    return [TensorInfo(dtype, tuple(shape))]


@shape_rule("Range")
def range_(node, ins):
    start = _const(node, ins, 0, "start")
    n = ref.range_count(start, _const(node, ins, 1, "limit"), _const(node, ins, 2, "delta"))
    return [TensorInfo(ins[0].dtype, (n,))]


@shape_rule("TopK")
def topk(node, ins):
    x = ins[0]
    axis = ref.norm_axis(node.attrs.get("axis", -1), len(x.shape))
    k = ref.topk_k(_const(node, ins, 1, "K"), x.shape[axis])
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorInfo(x.dtype, shape), TensorInfo("int64", shape)]


@shape_rule("Trilu")
def trilu(node, ins):
    x = ins[0]
    _check(node, len(x.shape) >= 2, f"input rank {len(x.shape)} < 2")
    return [TensorInfo(x.dtype, x.shape)]


@shape_rule("OneHot")
def one_hot(node, ins):
    idx, _, values = ins[:3]
    depth = ref.depth_value(_const(node, ins, 1, "depth"))
    _check(node, math.prod(values.shape) == 2, f"values shape {values.shape} is not [2]")
    return [TensorInfo(values.dtype, ref.onehot_shape(idx.shape, depth,
                                                      node.attrs.get("axis", -1)))]


@shape_rule("EyeLike")
def eye_like(node, ins):
    x = ins[0]
    _check(node, len(x.shape) == 2, f"input shape {x.shape} is not 2-D")
    dt = node.attrs.get("dtype")
    dtype = x.dtype if dt is None else from_onnx(dt)
    return [TensorInfo(dtype, x.shape)]


def _block_rearrange(node, ins, out_shape):
    """DepthToSpace / SpaceToDepth: x (N, C, H, W), mode DCR or CRD; out_shape(x shape,
    blocksize) is the reference's shape function of the op."""
    x = ins[0]
    _check(node, len(x.shape) == 4, f"input shape {x.shape} is not 4-D")
    _check(node, node.attrs.get("mode", "DCR") in ("DCR", "CRD"),
           f"unknown mode {node.attrs.get('mode')!r}")
    return [TensorInfo(x.dtype, out_shape(x.shape, node.attrs["blocksize"]))]


@shape_rule("DepthToSpace")
def depth_to_space(node, ins):
    return _block_rearrange(node, ins, ref.depth_to_space_shape)


@shape_rule("SpaceToDepth")
def space_to_depth(node, ins):
    return _block_rearrange(node, ins, ref.space_to_depth_shape)


@shape_rule("Pad")
def pad(node, ins):
    x = ins[0]
    _check(node, node.attrs.get("mode", "constant") in ref._PAD_MODES,
           f"unknown mode {node.attrs.get('mode')!r}")
    widths = ref.pad_widths(len(x.shape), _const(node, ins, 1, "pads"),
                            _const(node, ins, 3, "axes", optional=True))
    value = _input(ins, 2)
    _check(node, value is None or math.prod(value.shape) <= 1,
           f"constant_value shape {value and value.shape} is not a scalar")
    return [TensorInfo(x.dtype, ref.padded_shape(x.shape, widths))]


@shape_rule("NonZero")
def non_zero(node, ins):
    x = ins[0]
    if x.value is None:
        raise UnsupportedOpError({"NonZero": [node.name]}, "data-dependent output shape")
    count = int(np.count_nonzero(x.value))
    return [TensorInfo("int64", (max(len(x.shape), 1), count))]
