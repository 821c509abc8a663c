"""Shape rules of the nn family: convolutions, pools, normalizations, Gemm/MatMul, Resize.

The window geometry (`window_geometry`, `conv_transpose_geometry`) and the Resize plan
(`resize_plan`) live here and are reused by the reference kernels, so the shape a rule
announces and the shape a kernel produces come from one computation.

Conv and Gemm also carry the fused-epilogue attributes the graph passes produce:
`activation` (see ACTIVATIONS) with `activation_params`, and an optional extra input Z
added before the activation (a fused residual Add).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from ...registry import TensorInfo, const_value, shape_rule

OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
       "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
       "BatchNormalization", "InstanceNormalization", "LayerNormalization",
       "RMSNormalization", "GroupNormalization", "LRN", "Gemm", "MatMul", "Resize", "Upsample")

# fused activation name -> number of activation_params it accepts; PRelu: one slope per
# output channel (Conv only: axis 1 of y, as ONNX PRelu's (M, 1, ...) slope broadcasts)
ACTIVATIONS = {"": (0,), "Relu": (0,), "Clip": (2,), "HardSwish": (0,),
               "HardSigmoid": (0, 2), "Sigmoid": (0,), "SiLU": (0,),
               "LeakyRelu": (0, 1), "Gelu": (0,), "PRelu": ()}
FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16")


def _where(node) -> str:
    return f"{node.op} node {node.name!r}"


def check_activation(node) -> None:
    act = node.attrs.get("activation", "") or ""
    params = list(node.attrs.get("activation_params", []) or [])
    if act not in ACTIVATIONS:
        raise GraphError(f"{_where(node)}: unknown fused activation {act!r} "
                         f"(known: {sorted(a for a in ACTIVATIONS if a)})")
    if act == "PRelu":
        if node.op != "Conv" or not params:
            raise GraphError(f"{_where(node)}: a fused PRelu needs a Conv and its slopes")
        return
    if len(params) not in ACTIVATIONS[act]:
        raise GraphError(f"{_where(node)}: fused activation {act!r} takes "
                         f"{' or '.join(map(str, ACTIVATIONS[act]))} params, got {params}")


def _ints(value, n: int, default: int, node, key: str) -> list[int]:
    if value is None or (hasattr(value, "__len__") and len(value) == 0):
        return [default] * n
    out = [int(v) for v in value]
    if len(out) != n:
        raise GraphError(f"{_where(node)}: attribute {key}={out} needs {n} values")
    return out


def window_geometry(node, attrs: dict, in_spatial, kernel, ceil_mode: bool = False):
    """Output size and padding of a sliding-window op (Conv, pools) over spatial dims.

    -> (out_spatial, pads_begin, pads_end, strides, dilations). With ceil_mode, the extra
    cells the last window reaches past the explicit end padding are not part of pads_end
    (pool kernels pad for them separately and never count them).
    """
    n = len(in_spatial)
    strides = _ints(attrs.get("strides"), n, 1, node, "strides")
    dilations = _ints(attrs.get("dilations"), n, 1, node, "dilations")
    pads = _ints(attrs.get("pads"), 2 * n, 0, node, "pads")
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(k < 1 for k in kernel):
        raise GraphError(f"{_where(node)}: strides {strides}, dilations {dilations} and "
                         f"kernel {list(kernel)} must be >= 1")
    out, begin, end = [], [], []
    for i in range(n):
        size, s, ext = in_spatial[i], strides[i], dilations[i] * (kernel[i] - 1) + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max(0, (o - 1) * s + ext - size)
            small = total // 2
            b = small if auto_pad == "SAME_UPPER" else total - small
            e = total - b
        elif auto_pad == "VALID":
            b = e = 0
            o = (-(-(size - ext + 1) // s)) if ceil_mode else (size - ext) // s + 1
        elif auto_pad == "NOTSET":
            b, e = pads[i], pads[n + i]
            span = size + b + e - ext
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= size + b:  # the last window would start in the end padding
                    o -= 1
            else:
                o = span // s + 1
        else:
            raise GraphError(f"{_where(node)}: unknown auto_pad {auto_pad!r}")
        if o < 1:
            raise GraphError(f"{_where(node)}: window {ext} (kernel {kernel[i]}, dilation "
                             f"{dilations[i]}) does not fit spatial size {size} with pads "
                             f"({b}, {e}) on axis {i + 2}")
        out.append(o)
        begin.append(b)
        end.append(e)
    return out, begin, end, strides, dilations


def _expect_rank(node, x: TensorInfo, min_rank: int = 3) -> None:
    if len(x.shape) < min_rank:
        raise GraphError(f"{_where(node)}: input of shape {x.shape} needs rank >= {min_rank} "
                         f"(N, C, spatial...)")


def _expect_float(node, x: TensorInfo) -> None:
    if x.dtype not in FLOAT_DTYPES:
        raise GraphError(f"{_where(node)}: input dtype {x.dtype} is not a float type")


def _broadcastable_to(node, what: str, shape, target) -> None:
    """Unidirectional broadcast check: `shape` must broadcast to `target` unchanged."""
    try:
        if np.broadcast_shapes(tuple(shape), tuple(target)) != tuple(target):
            raise ValueError
    except ValueError:
        raise GraphError(f"{_where(node)}: {what} of shape {tuple(shape)} does not broadcast "
                         f"to {tuple(target)}") from None


# -- convolution -----------------------------------------------------------------------------

@shape_rule("Conv")
def conv(node, ins):
    x, w = ins[0], ins[1]
    _expect_rank(node, x)
    _expect_float(node, x)
    check_activation(node)
    group = int(node.attrs.get("group", 1))
    if len(w.shape) != len(x.shape):
        raise GraphError(f"{_where(node)}: weight shape {w.shape} and input shape {x.shape} "
                         f"differ in rank")
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    if group < 1 or c % group or m % group or cg * group != c:
        raise GraphError(f"{_where(node)}: input channels {c}, weight shape {w.shape} and "
                         f"group {group} do not agree (need W (M, C/group, k...))")
    kernel = list(w.shape[2:])
    ks = node.attrs.get("kernel_shape")
    if ks is not None and len(ks) and list(map(int, ks)) != kernel:
        raise GraphError(f"{_where(node)}: kernel_shape {list(ks)} != weight shape {w.shape}")
    out, *_ = window_geometry(node, node.attrs, x.shape[2:], kernel)
    y = (n, m, *out)
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (m,):
        raise GraphError(f"{_where(node)}: bias of shape {ins[2].shape} must be ({m},)")
    if len(ins) > 3 and ins[3] is not None:
        _broadcastable_to(node, "fused addend Z", ins[3].shape, y)
    slopes = node.attrs.get("activation_params") or []
    if node.attrs.get("activation") == "PRelu" and len(slopes) != m:
        raise GraphError(f"{_where(node)}: fused PRelu has {len(slopes)} slopes for {m} "
                         f"output channels")
    return [TensorInfo(x.dtype, y)]


def conv_transpose_geometry(node, attrs: dict, in_spatial, kernel):
    """-> (out_spatial, pads_begin, strides, dilations) of ConvTranspose (ONNX formulas)."""
    n = len(in_spatial)
    strides = _ints(attrs.get("strides"), n, 1, node, "strides")
    dilations = _ints(attrs.get("dilations"), n, 1, node, "dilations")
    out_pad = _ints(attrs.get("output_padding"), n, 0, node, "output_padding")
    pads = _ints(attrs.get("pads"), 2 * n, 0, node, "pads")
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    out_shape = attrs.get("output_shape")
    if out_shape is not None and len(out_shape):
        out_shape = [int(v) for v in out_shape][-n:]  # some exporters include N and C
        if len(out_shape) != n:
            raise GraphError(f"{_where(node)}: output_shape {list(attrs['output_shape'])} "
                             f"needs {n} spatial values")
    else:
        out_shape = None
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise GraphError(f"{_where(node)}: unknown auto_pad {auto_pad!r}")
    out, begin = [], []
    for i in range(n):
        full = strides[i] * (in_spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
        if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = out_shape[i] if out_shape is not None else in_spatial[i] * strides[i]
            total = full - o
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        elif auto_pad == "VALID":
            o, b = full, 0
        else:
            b = pads[i]
            o = full - pads[i] - pads[n + i]
        if o < 1:
            raise GraphError(f"{_where(node)}: output size {o} < 1 on spatial axis {i}")
        out.append(o)
        begin.append(b)
    return out, begin, strides, dilations


@shape_rule("ConvTranspose")
def conv_transpose(node, ins):
    x, w = ins[0], ins[1]
    _expect_rank(node, x)
    _expect_float(node, x)
    group = int(node.attrs.get("group", 1))
    c = x.shape[1]
    if len(w.shape) != len(x.shape) or w.shape[0] != c or group < 1 or c % group:
        raise GraphError(f"{_where(node)}: weight shape {w.shape} must be (C={c}, M/group, "
                         f"k...) for input {x.shape} and group {group}")
    m = w.shape[1] * group
    out, *_ = conv_transpose_geometry(node, node.attrs, x.shape[2:], w.shape[2:])
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (m,):
        raise GraphError(f"{_where(node)}: bias of shape {ins[2].shape} must be ({m},)")
    return [TensorInfo(x.dtype, (x.shape[0], m, *out))]


# -- pools -------------------------------------------------------------------------------------

def _kernel_shape(node, x) -> list[int]:
    ks = node.attrs.get("kernel_shape")
    if ks is None or len(ks) != len(x.shape) - 2:
        raise GraphError(f"{_where(node)}: kernel_shape {ks} must have {len(x.shape) - 2} "
                         f"values for input {x.shape}")
    return [int(k) for k in ks]


@shape_rule("MaxPool", "AveragePool", "LpPool")
def pool(node, ins):
    x = ins[0]
    _expect_rank(node, x)
    if node.op != "MaxPool":
        _expect_float(node, x)
    kernel = _kernel_shape(node, x)
    out, *_ = window_geometry(node, node.attrs, x.shape[2:], kernel,
                              bool(node.attrs.get("ceil_mode", 0)))
    y = (*x.shape[:2], *out)
    outs = [TensorInfo(x.dtype, y)]
    if node.op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
        outs.append(TensorInfo("int64", y))
    return outs


@shape_rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(node, ins):
    x = ins[0]
    _expect_rank(node, x)
    return [TensorInfo(x.dtype, (*x.shape[:2], *([1] * (len(x.shape) - 2))))]


# -- normalizations ----------------------------------------------------------------------------

@shape_rule("BatchNormalization")
def batch_norm(node, ins):
    x = ins[0]
    _expect_float(node, x)
    if int(node.attrs.get("training_mode", 0)):
        raise GraphError(f"{_where(node)}: training_mode=1 is not supported (inference only)")
    if len(x.shape) < 2:
        raise GraphError(f"{_where(node)}: input shape {x.shape} needs rank >= 2")
    c = x.shape[1]
    for name, t in zip(("scale", "B", "mean", "var"), ins[1:5]):
        if t is None or tuple(t.shape) != (c,):
            raise GraphError(f"{_where(node)}: {name} must have shape ({c},), got "
                             f"{None if t is None else t.shape}")
    return [TensorInfo(x.dtype, x.shape)]


@shape_rule("InstanceNormalization")
def instance_norm(node, ins):
    x = ins[0]
    _expect_rank(node, x)
    _expect_float(node, x)
    c = x.shape[1]
    for name, t in zip(("scale", "B"), ins[1:3]):
        if t is None or tuple(t.shape) != (c,):
            raise GraphError(f"{_where(node)}: {name} must have shape ({c},)")
    return [TensorInfo(x.dtype, x.shape)]


STASH_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "float32"}


def layer_norm_axis(node, rank: int) -> int:
    axis = int(node.attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise GraphError(f"{_where(node)}: axis {axis} out of range for rank {rank}")
    return axis % rank


@shape_rule("LayerNormalization")
def layer_norm(node, ins):
    x = ins[0]
    _expect_float(node, x)
    axis = layer_norm_axis(node, len(x.shape))
    for name, t in zip(("Scale", "B"), ins[1:3]):
        if t is not None:
            _broadcastable_to(node, name, t.shape, x.shape)
    stash = STASH_DTYPES.get(int(node.attrs.get("stash_type", 1)))
    if stash is None:
        raise GraphError(f"{_where(node)}: stash_type {node.attrs.get('stash_type')} unknown")
    stat_shape = (*x.shape[:axis], *([1] * (len(x.shape) - axis)))
    return [TensorInfo(x.dtype, x.shape), TensorInfo(stash, stat_shape),
            TensorInfo(stash, stat_shape)][:max(1, len(node.outputs))]


@shape_rule("RMSNormalization")
def rms_norm(node, ins):
    """ONNX opset 23: X (..., normalized dims from `axis` on), scale broadcast to X
    unidirectionally; Y has X's shape and scale's dtype (V)."""
    x, scale = ins[0], ins[1]
    _expect_float(node, x)
    _expect_float(node, scale)
    layer_norm_axis(node, len(x.shape))
    _broadcastable_to(node, "scale", scale.shape, x.shape)
    if STASH_DTYPES.get(int(node.attrs.get("stash_type", 1))) is None:
        raise GraphError(f"{_where(node)}: stash_type {node.attrs.get('stash_type')} unknown")
    return [TensorInfo(scale.dtype, x.shape)]


@shape_rule("GroupNormalization")
def group_norm(node, ins):
    x = ins[0]
    _expect_rank(node, x)
    _expect_float(node, x)
    groups = int(node.attrs.get("num_groups", 0))
    c = x.shape[1]
    if groups < 1 or c % groups:
        raise GraphError(f"{_where(node)}: num_groups {groups} must divide channels {c}")
    want = groups if node.attrs.get("per_group_scale", 0) else c
    for name, t in zip(("scale", "bias"), ins[1:3]):
        if t is None or tuple(t.shape) != (want,):
            raise GraphError(f"{_where(node)}: {name} must have shape ({want},)")
    return [TensorInfo(x.dtype, x.shape)]


@shape_rule("LRN")
def lrn(node, ins):
    x = ins[0]
    _expect_rank(node, x, 2)
    _expect_float(node, x)
    if int(node.attrs.get("size", 0)) < 1:
        raise GraphError(f"{_where(node)}: attribute size must be >= 1")
    return [TensorInfo(x.dtype, x.shape)]


# -- matrix products ---------------------------------------------------------------------------

def matmul_shape(node, a, b) -> tuple[int, ...]:
    if not a or not b:
        raise GraphError(f"{_where(node)}: MatMul operands must have rank >= 1, got {a} @ {b}")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise GraphError(f"{_where(node)}: inner dimensions differ: {tuple(a)} @ {tuple(b)}")
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise GraphError(f"{_where(node)}: batch dims of {tuple(a)} and {tuple(b)} do not "
                         f"broadcast") from None
    out = [*batch, a2[-2], b2[-1]]
    if len(a) == 1:
        del out[-2]
    if len(b) == 1:
        del out[-1]
    return tuple(out)


@shape_rule("MatMul")
def matmul(node, ins):
    a, b = ins[0], ins[1]
    if a.dtype != b.dtype:
        raise GraphError(f"{_where(node)}: operand dtypes differ ({a.dtype}, {b.dtype})")
    return [TensorInfo(a.dtype, matmul_shape(node, a.shape, b.shape))]


@shape_rule("Gemm")
def gemm(node, ins):
    a, b = ins[0], ins[1]
    check_activation(node)
    ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
    if len(b.shape) != 2 or len(a.shape) < 2 or (ta and len(a.shape) != 2):
        raise GraphError(f"{_where(node)}: needs B of rank 2 and A of rank 2 (or rank > 2 "
                         f"with transA=0); got A {a.shape}, B {b.shape}, transA={ta}")
    k = a.shape[-2] if ta else a.shape[-1]
    rows = (a.shape[-1],) if ta else tuple(a.shape[:-1])
    kb, n = (b.shape[1], b.shape[0]) if tb else tuple(b.shape)
    if k != kb:
        raise GraphError(f"{_where(node)}: inner dimensions differ: A {a.shape} "
                         f"(transA={ta}) and B {b.shape} (transB={tb})")
    y = (*rows, n)
    for name, t in zip(("C", "Z"), ins[2:4]):
        if t is not None:
            _broadcastable_to(node, name, t.shape, y)
    return [TensorInfo(a.dtype, y)]


# -- Resize ------------------------------------------------------------------------------------

RESIZE_MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")
# "simple" is internal: ONNX opset <= 10 nearest (floor when upsampling, ceil when down)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def _given(t) -> bool:
    return t is not None and int(np.prod(t.shape)) > 0


def resize_plan(node, attrs: dict, shape, roi, scales, sizes):
    """Work out Resize's output shape and, per axis, the scale and roi to transform with.

    roi/scales/sizes are np.ndarray or None (an empty array counts as absent).
    -> (out_shape, scale per axis (float), roi_start per axis, roi_end per axis)
    """
    rank = len(shape)
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if mode not in RESIZE_MODES:
        raise GraphError(f"{_where(node)}: unknown mode {mode!r}")
    if ctm not in COORD_MODES:
        raise GraphError(f"{_where(node)}: unknown coordinate_transformation_mode {ctm!r}")
    if attrs.get("nearest_mode", "round_prefer_floor") not in NEAREST_MODES:
        raise GraphError(f"{_where(node)}: unknown nearest_mode {attrs.get('nearest_mode')!r}")
    axes = attrs.get("axes")
    axes = list(range(rank)) if axes is None or len(axes) == 0 else \
        [int(a) + rank if int(a) < 0 else int(a) for a in axes]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise GraphError(f"{_where(node)}: axes {attrs.get('axes')} invalid for rank {rank}")
    have_scales = scales is not None and scales.size > 0
    have_sizes = sizes is not None and sizes.size > 0
    if have_scales == have_sizes:
        raise GraphError(f"{_where(node)}: exactly one of scales and sizes must be given")
    given = scales if have_scales else sizes
    if given.ndim != 1 or given.size != len(axes):
        raise GraphError(f"{_where(node)}: {'scales' if have_scales else 'sizes'} "
                         f"{given.tolist()} needs one value per resized axis ({len(axes)})")
    scale = [1.0] * rank
    out = list(shape)
    if have_scales:
        for a, s in zip(axes, given.tolist()):
            if not s > 0:
                raise GraphError(f"{_where(node)}: scales must be > 0, got {given.tolist()}")
            # float32 product, as ONNX Runtime (and PyTorch's floor(10 * 0.7) = 7) have it
            scale[a] = float(np.float32(s))
            out[a] = int(np.floor(np.float32(s) * np.float32(shape[a])))
    else:
        want = [int(v) for v in given.tolist()]
        if any(v < 0 for v in want) or any(shape[a] == 0 for a in axes):
            raise GraphError(f"{_where(node)}: cannot resize {tuple(shape)} to sizes {want}")
        if policy == "stretch":
            for a, v in zip(axes, want):
                out[a], scale[a] = v, float(np.float32(v) / np.float32(shape[a]))
        elif policy in ("not_larger", "not_smaller"):
            ratios = [np.float32(v) / np.float32(shape[a]) for a, v in zip(axes, want)]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a] = int(np.floor(s * np.float32(shape[a]) + np.float32(0.5)))
                scale[a] = float(s)
        else:
            raise GraphError(f"{_where(node)}: unknown keep_aspect_ratio_policy {policy!r}")
    start, end = [0.0] * rank, [1.0] * rank
    if ctm == "tf_crop_and_resize" and roi is not None and roi.size:  # absent: whole input
        roi = roi.reshape(-1).astype(np.float64)
        if roi.size != 2 * len(axes):
            raise GraphError(f"{_where(node)}: roi {roi.tolist()} needs {2 * len(axes)} values")
        for i, a in enumerate(axes):
            start[a], end[a] = float(roi[i]), float(roi[len(axes) + i])
    if any(o < 0 for o in out):
        raise GraphError(f"{_where(node)}: negative output shape {out}")
    return tuple(out), scale, start, end


def _const(node, info, what: str):
    if info is None or int(np.prod(info.shape)) == 0:
        return None
    return np.asarray(const_value(node, info, what))


@shape_rule("Resize")
def resize(node, ins):
    x = ins[0]
    ins = list(ins) + [None] * (4 - len(ins))
    # roi moves the sampling grid but never the output shape: it need not be constant
    out, *_ = resize_plan(node, node.attrs, x.shape, None, _const(node, ins[2], "scales"),
                          _const(node, ins[3], "sizes"))
    return [TensorInfo(x.dtype, out)]


@shape_rule("Upsample")
def upsample(node, ins):
    # The converter turns Upsample into Resize; this rule covers a hand-built Upsample.
    x = ins[0]
    scales = _const(node, ins[1], "scales")
    if scales is None or scales.size != len(x.shape):
        raise GraphError(f"{_where(node)}: scales must have {len(x.shape)} values")
    return [TensorInfo(x.dtype, tuple(int(math.floor(float(s) * d))
                                      for s, d in zip(scales.tolist(), x.shape)))]

# op -> indices of inputs whose values determine output shapes (constants at plan time)
CONST_INPUTS = {"Resize": (1, 2, 3), "Upsample": (1,)}
