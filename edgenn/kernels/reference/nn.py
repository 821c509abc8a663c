"""Reference kernels of the nn family: plain NumPy, written to be read.

Layouts: activations are (N, C, spatial...) (NCHW for 2-D); Conv weights (M, C/group, k...);
ConvTranspose weights (C, M/group, k...). Arithmetic stays in the input's dtype (float32 in,
float32 out). Geometry (output sizes, pads) comes from graph/shapes/nn.py so shape rule
and kernel agree by construction.
"""
from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...graph.shapes.nn import (STASH_DTYPES, conv_transpose_geometry, resize_plan,
                                window_geometry)
from ...registry import reference
from .special import erf


def _node(op: str):
    # the geometry helpers name the node in their errors; kernels have no node
    return SimpleNamespace(op=op, name="<kernel>")


# -- fused epilogue --------------------------------------------------------------------------

def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a non-positive argument only: no overflow for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def apply_activation(y: np.ndarray, act: str, params) -> np.ndarray:
    """y -> act(y) for the fused activations of Conv/Gemm (attrs activation/_params)."""
    if not act:
        return y
    p = [float(v) for v in (params or [])]
    t = y.dtype.type
    if act == "Relu":
        out = np.maximum(y, t(0))
    elif act == "Clip":
        out = np.clip(y, t(p[0]), t(p[1]))
    elif act == "HardSigmoid":
        alpha, beta = p if p else (0.2, 0.5)
        out = np.clip(y * t(alpha) + t(beta), t(0), t(1))
    elif act == "HardSwish":
        out = y * np.clip(y * t(1 / 6) + t(0.5), t(0), t(1))
    elif act == "Sigmoid":
        out = _sigmoid(y)
    elif act == "SiLU":
        out = y * _sigmoid(y)
    elif act == "LeakyRelu":
        alpha = p[0] if p else 0.01
        out = np.where(y >= 0, y, y * t(alpha))
    elif act == "Gelu":
        out = t(0.5) * y * (t(1) + erf(y * t(1 / math.sqrt(2))))
    elif act == "PRelu":      # one slope per channel, axis 1 (Conv's (N, M, ...) output)
        slope = np.asarray(p, y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
        out = np.where(y >= 0, y, y * slope)
    else:
        raise ValueError(f"unknown fused activation {act!r}")
    return out.astype(y.dtype, copy=False)


def _epilogue(y: np.ndarray, attrs: dict, z: np.ndarray | None) -> np.ndarray:
    if z is not None:
        y = y + z
    return apply_activation(y, attrs.get("activation", ""), attrs.get("activation_params"))


# -- convolution -------------------------------------------------------------------------------

def _taps(kernel):
    return itertools.product(*(range(k) for k in kernel))


def _tap_slices(tap, out, strides, dilations):
    """Spatial slices of a padded input that tap `tap` of the window reads, for all outputs."""
    return tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                 for t, o, s, d in zip(tap, out, strides, dilations))


@reference("Conv")
def conv(attrs, inputs):
    x, w = inputs[0], inputs[1]                     # x (N, C, S...), w (M, C/g, K...)
    b = inputs[2] if len(inputs) > 2 else None      # (M,)
    z = inputs[3] if len(inputs) > 3 else None      # fused addend, output-shaped
    if x.dtype == np.float16:  # accumulate half precision in float32, as real kernels do
        wide = [None if i is None else i.astype(np.float32) for i in inputs]
        return [conv(attrs, wide)[0].astype(np.float16)]
    group = int(attrs.get("group", 1))
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    nsp = len(kernel)
    out, pb, pe, strides, dilations = window_geometry(_node("Conv"), attrs, x.shape[2:], kernel)
    w = w.astype(x.dtype, copy=False)

    if all(k == 1 for k in kernel) and not any(pb) and not any(pe) and group == 1:
        # pointwise: a plain matrix product over the channel axis
        xs = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
        xs = xs[(slice(None), slice(None)) + tuple(slice(0, o) for o in out)]
        y = np.matmul(w.reshape(m, c), xs.reshape(n, c, -1)).reshape(n, m, *out)
    else:
        xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe)))
        if cg == 1 and group == c:
            # depthwise (channel multiplier m // c): a weighted sum over the kernel taps
            src = xp if m == c else xp[:, np.arange(m) // (m // c)]
            y = np.zeros((n, m, *out), dtype=x.dtype)
            wt = w.reshape(m, -1)
            for i, tap in enumerate(_taps(kernel)):
                sl = (slice(None), slice(None)) + _tap_slices(tap, out, strides, dilations)
                y += src[sl] * wt[:, i].reshape((m,) + (1,) * nsp)
        else:
            # im2col: (N, C, O..., K...) windows -> (G, N*O, C/g*K) @ (G, C/g*K, M/g)
            ext = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
            win = sliding_window_view(xp, ext, axis=tuple(range(2, 2 + nsp)))
            win = win[(slice(None), slice(None))
                      + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
                      + tuple(slice(None, None, d) for d in dilations)]
            win = win.reshape(n, group, cg, *out, *kernel)
            order = (1, 0) + tuple(range(3, 3 + nsp)) + (2,) + tuple(range(3 + nsp, 3 + 2 * nsp))
            cols = win.transpose(order).reshape(group, n * math.prod(out), cg * math.prod(kernel))
            wm = w.reshape(group, m // group, -1).transpose(0, 2, 1)
            y = np.matmul(cols, wm)                               # (G, N*O, M/g)
            y = y.reshape(group, n, *out, m // group)             # -> (N, G, M/g, O...)
            y = y.transpose((1, 0, 2 + nsp) + tuple(range(2, 2 + nsp))).reshape(n, m, *out)
    if b is not None:
        y = y + b.astype(x.dtype, copy=False).reshape((m,) + (1,) * nsp)
    return [np.require(_epilogue(y, attrs, z), requirements="C").astype(x.dtype, copy=False)]


@reference("ConvTranspose")
def conv_transpose(attrs, inputs):
    x, w = inputs[0], inputs[1]                     # x (N, C, S...), w (C, M/g, K...)
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    n, c = x.shape[:2]
    mg = w.shape[1]
    m = mg * group
    kernel = w.shape[2:]
    nsp = len(kernel)
    insp = x.shape[2:]
    out, pb, strides, dilations = conv_transpose_geometry(
        _node("ConvTranspose"), attrs, insp, kernel)
    cg = c // group
    w = w.astype(x.dtype, copy=False)
    # every input pixel times every weight: (G, N*S, C/g) @ (G, C/g, M/g*K)
    xg = np.moveaxis(x.reshape(n, group, cg, -1), 2, 3).swapaxes(0, 1)  # (G, N, S, C/g)
    cols = np.matmul(xg.reshape(group, -1, cg), w.reshape(group, cg, -1))
    cols = cols.reshape(group, n, *insp, mg, *kernel)
    # scatter-add (col2im) onto the full, unpadded output grid
    full = [s * (i - 1) + d * (k - 1) + 1 for s, i, d, k in zip(strides, insp, dilations, kernel)]
    acc = np.zeros((n, group, mg, *full), dtype=x.dtype)
    for tap in _taps(kernel):
        part = cols[(slice(None), slice(None)) + (slice(None),) * nsp + (slice(None),) + tap]
        part = np.moveaxis(part, 2 + nsp, 2).swapaxes(0, 1)  # (N, G, M/g, S...)
        acc[(slice(None), slice(None), slice(None))
            + tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                    for t, d, i, s in zip(tap, dilations, insp, strides))] += part
    acc = acc.reshape(n, m, *full)
    # crop the pads (or zero-extend for output_padding / larger output_shape)
    y = np.zeros((n, m, *out), dtype=x.dtype)
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for o, f, p in zip(out, full, pb):
        lo, hi = max(0, p), min(f, p + o)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo - p, lo - p + max(0, hi - lo)))
    y[tuple(dst)] = acc[tuple(src)]
    if b is not None:
        y += b.astype(x.dtype, copy=False).reshape((m,) + (1,) * nsp)
    return [y]


# -- pools -------------------------------------------------------------------------------------

def _pool_setup(op, attrs, x):
    kernel = [int(k) for k in attrs["kernel_shape"]]
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    out, pb, pe, strides, dilations = window_geometry(_node(op), attrs, x.shape[2:], kernel,
                                                      ceil_mode)
    # extra cells past the end padding that ceil_mode windows reach: never counted
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (i + b + e))
             for o, s, d, k, i, b, e in zip(out, strides, dilations, kernel, x.shape[2:], pb, pe)]
    return kernel, out, pb, pe, extra, strides, dilations


def _pad_value(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@reference("MaxPool")
def max_pool(attrs, inputs):
    x = inputs[0]
    kernel, out, pb, pe, extra, strides, dilations = _pool_setup("MaxPool", attrs, x)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(pb, pe, extra)],
                constant_values=_pad_value(x.dtype))
    y = None
    best = None
    for i, tap in enumerate(_taps(kernel)):
        v = xp[(slice(None), slice(None)) + _tap_slices(tap, out, strides, dilations)]
        if y is None:
            y, best = v.copy(), np.zeros(v.shape, dtype=np.int32)
        else:
            better = v > y          # strict: the first maximum in window order wins
            np.copyto(y, v, where=better)
            np.copyto(best, i, where=better)
    return [y, _argmax_indices(x.shape, best, kernel, out, pb, strides, dilations,
                               int(attrs.get("storage_order", 0)))]


def _argmax_indices(shape, best, kernel, out, pb, strides, dilations, storage_order):
    """MaxPool Indices: flat position of each window's maximum (tap number `best`) in the
    unpadded input; spatial dims row-major (storage_order 0) or column-major (1)."""
    taps = np.array(list(_taps(kernel)), dtype=np.int64).reshape(-1, len(kernel))
    n, c, sp = shape[0], shape[1], shape[2:]
    coords = []
    for a in range(len(kernel)):
        start = np.arange(out[a], dtype=np.int64) * strides[a] - pb[a]
        start = start.reshape((1, 1) + tuple(out[a] if j == a else 1 for j in range(len(kernel))))
        coords.append(start + taps[best, a] * dilations[a])
    flat = np.zeros(best.shape, dtype=np.int64)
    for a in (reversed(range(len(kernel))) if storage_order else range(len(kernel))):
        flat = flat * sp[a] + coords[a]
    plane = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * len(kernel))
    return flat + plane * math.prod(sp)


def _window_counts(size_in, out, pb, pe, extra, kernel, strides, dilations, include_pad):
    """How many counted cells each window covers: (O...) float array."""
    mask = np.zeros([b + i + e + x for b, i, e, x in zip(pb, size_in, pe, extra)], np.float64)
    if include_pad:
        mask[tuple(slice(0, b + i + e) for b, i, e in zip(pb, size_in, pe))] = 1
    else:
        mask[tuple(slice(b, b + i) for b, i in zip(pb, size_in))] = 1
    cnt = np.zeros(out)
    for tap in _taps(kernel):
        cnt += mask[_tap_slices(tap, out, strides, dilations)]
    return cnt


@reference("AveragePool")
def average_pool(attrs, inputs):
    x = inputs[0]
    kernel, out, pb, pe, extra, strides, dilations = _pool_setup("AveragePool", attrs, x)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(pb, pe, extra)])
    y = np.zeros((*x.shape[:2], *out), dtype=x.dtype)
    for tap in _taps(kernel):
        y += xp[(slice(None), slice(None)) + _tap_slices(tap, out, strides, dilations)]
    cnt = _window_counts(x.shape[2:], out, pb, pe, extra, kernel, strides, dilations,
                         bool(attrs.get("count_include_pad", 0)))
    return [(y / cnt.astype(x.dtype)).astype(x.dtype, copy=False)]


@reference("LpPool")
def lp_pool(attrs, inputs):
    x = inputs[0]
    p = float(attrs.get("p", 2))
    kernel, out, pb, pe, extra, strides, dilations = _pool_setup("LpPool", attrs, x)
    xp = np.pad(np.abs(x), [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(pb, pe, extra)])
    y = np.zeros((*x.shape[:2], *out), dtype=x.dtype)
    for tap in _taps(kernel):
        y += xp[(slice(None), slice(None)) + _tap_slices(tap, out, strides, dilations)] ** p
    return [(y ** (1 / p)).astype(x.dtype, copy=False)]


@reference("GlobalAveragePool")
def global_average_pool(attrs, inputs):
    x = inputs[0]
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=x.dtype)]


@reference("GlobalMaxPool")
def global_max_pool(attrs, inputs):
    x = inputs[0]
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]


@reference("GlobalLpPool")
def global_lp_pool(attrs, inputs):
    x = inputs[0]
    p = float(attrs.get("p", 2))
    s = (np.abs(x) ** p).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
    return [(s ** (1 / p)).astype(x.dtype, copy=False)]


# -- normalizations ----------------------------------------------------------------------------

def _per_channel(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(C,) -> (C, 1, ...) to broadcast over (N, C, spatial...)."""
    return v.astype(x.dtype, copy=False).reshape((-1,) + (1,) * (x.ndim - 2))


@reference("BatchNormalization")
def batch_norm(attrs, inputs):
    x, scale, bias, mean, var = inputs[:5]          # x (N, C, ...), the rest (C,)
    eps = float(attrs.get("epsilon", 1e-5))
    a = scale / np.sqrt(var.astype(np.float64) + eps)
    b = bias - mean * a
    y = x * _per_channel(a, x) + _per_channel(b, x)
    return [y.astype(x.dtype, copy=False)]


def _standardize(x: np.ndarray, axes: tuple, eps: float):
    """(x - mean) / sqrt(var + eps) over `axes`; also returns mean and 1/std."""
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    inv = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + x.dtype.type(eps))
    return d * inv, mean, inv


@reference("InstanceNormalization")
def instance_norm(attrs, inputs):
    x, scale, bias = inputs[:3]
    xs = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    norm, _, _ = _standardize(xs, tuple(range(2, x.ndim)), float(attrs.get("epsilon", 1e-5)))
    y = norm * _per_channel(scale, xs) + _per_channel(bias, xs)
    return [y.astype(x.dtype, copy=False)]


@reference("LayerNormalization")
def layer_norm(attrs, inputs):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = int(attrs.get("axis", -1)) % x.ndim
    stash = np.dtype(STASH_DTYPES.get(int(attrs.get("stash_type", 1)), "float32"))
    xs = x.astype(stash, copy=False)
    norm, mean, inv = _standardize(xs, tuple(range(axis, x.ndim)),
                                   float(attrs.get("epsilon", 1e-5)))
    y = norm.astype(x.dtype, copy=False) * scale.astype(x.dtype, copy=False)
    if bias is not None:
        y = y + bias.astype(x.dtype, copy=False)
    return [y.astype(x.dtype, copy=False), mean, inv]


@reference("RMSNormalization")
def rms_norm(attrs, inputs):
    """ONNX opset 23: in the stash dtype (float32 for stash_type 1), over the dims from
    `axis` on, normalized = x / sqrt(mean(x * x) + eps), cast back to x's dtype; then
    y = normalized * scale, in scale's dtype."""
    x, scale = inputs[0], inputs[1]
    axis = int(attrs.get("axis", -1)) % x.ndim
    stash = np.dtype(STASH_DTYPES.get(int(attrs.get("stash_type", 1)), "float32"))
    xs = x.astype(stash, copy=False)
    ms = (xs * xs).mean(axis=tuple(range(axis, x.ndim)), keepdims=True, dtype=stash)
    rms = np.sqrt(ms + stash.type(attrs.get("epsilon", 1e-5)))
    norm = (xs / rms).astype(x.dtype, copy=False)
    return [(norm.astype(scale.dtype, copy=False) * scale).astype(scale.dtype, copy=False)]


@reference("GroupNormalization")
def group_norm(attrs, inputs):
    x, scale, bias = inputs[:3]
    groups = int(attrs["num_groups"])
    n, c = x.shape[:2]
    stash = np.dtype(STASH_DTYPES.get(int(attrs.get("stash_type", 1)), "float32"))
    xg = x.astype(stash, copy=False).reshape(n, groups, -1)
    norm, _, _ = _standardize(xg, (2,), float(attrs.get("epsilon", 1e-5)))
    norm = norm.reshape(x.shape).astype(x.dtype, copy=False)
    if attrs.get("per_group_scale", 0):  # opset 18-20: scale and bias are per group
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    y = norm * _per_channel(scale, x) + _per_channel(bias, x)
    return [y.astype(x.dtype, copy=False)]


@reference("LRN")
def lrn(attrs, inputs):
    x = inputs[0]                                   # (N, C, ...)
    size = int(attrs["size"])
    alpha, beta = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    s = sum(sq[:, i:i + c] for i in range(size))   # channels c-lo .. c+hi
    t = x.dtype.type
    y = x / (t(bias) + t(alpha / size) * s) ** t(beta)
    return [y.astype(x.dtype, copy=False)]


# -- matrix products ---------------------------------------------------------------------------

@reference("MatMul")
def matmul(attrs, inputs):
    a, b = inputs
    return [np.matmul(a, b)]


@reference("Gemm")
def gemm(attrs, inputs):
    a, b = inputs[0], inputs[1]                     # a (M, K) or (..., K), b (K, N)
    c = inputs[2] if len(inputs) > 2 else None
    z = inputs[3] if len(inputs) > 3 else None
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if int(attrs.get("transA", 0)):
        a = a.T
    if int(attrs.get("transB", 0)):
        b = b.T
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c * beta if beta != 1.0 else c)
    if y.dtype != a.dtype:
        y = (np.rint(y) if a.dtype.kind in "iu" else y).astype(a.dtype)
    return [np.require(_epilogue(y, attrs, z), requirements="C").astype(a.dtype, copy=False)]


# -- Resize ------------------------------------------------------------------------------------

def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _source_coords(ctm: str, n_out: int, n_in: int, scale: float, start: float, end: float):
    """x_original for each output index along one axis; also the extrapolated mask.

    Computed in float32 like ONNX Runtime, so nearest-neighbour ties (e.g. 8 / 1.6f) fall
    the same way; returned as float64 for the tap arithmetic.
    """
    f = np.float32
    o = np.arange(n_out, dtype=f)
    scale, n_in_f, half = f(scale), f(n_in), f(0.5)
    # the resized length before flooring to an integer: ONNX (and its conformance data)
    # uses it for align_corners and tf_crop_and_resize when `scales` is given
    length = scale * n_in_f
    outside = None
    if ctm == "half_pixel":
        xo = (o + half) / scale - half
    elif ctm == "half_pixel_symmetric":
        adjustment = f(n_out) / length
        offset = n_in_f / f(2) * (f(1) - adjustment)
        xo = offset + (o + half) / scale - half
    elif ctm == "pytorch_half_pixel":
        xo = (o + half) / scale - half if n_out > 1 else np.zeros(n_out, f)
    elif ctm == "align_corners":
        xo = o * (n_in_f - f(1)) / (length - f(1)) if n_out > 1 else np.zeros(n_out, f)
    elif ctm == "asymmetric":
        xo = o / scale
    elif ctm == "tf_half_pixel_for_nn":  # opset 11-12
        xo = (o + half) / scale
    elif ctm == "tf_crop_and_resize":
        start, end = f(start), f(end)
        if n_out > 1:
            xo = start * (n_in_f - f(1)) + o * (end - start) * (n_in_f - f(1)) / (length - f(1))
        else:
            xo = np.full(n_out, half * (start + end) * (n_in_f - f(1)), f)
        outside = (xo < 0) | (xo > n_in - 1)
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {ctm!r}")
    return xo.astype(np.float64), outside


def _axis_taps(attrs: dict, xo: np.ndarray, n_in: int, scale: float):
    """Input indices (n_out, taps) and weights (n_out, taps) of one axis' interpolation."""
    mode = attrs.get("mode", "nearest")
    if mode == "nearest":
        nm = attrs.get("nearest_mode", "round_prefer_floor")
        if nm == "simple":
            nm = "ceil" if scale < 1 else "floor"
        idx = {"round_prefer_floor": lambda v: np.ceil(v - 0.5),
               "round_prefer_ceil": lambda v: np.floor(v + 0.5),
               "floor": np.floor, "ceil": np.ceil}[nm](xo)
        return np.clip(idx, 0, n_in - 1).astype(np.intp)[:, None], None
    s = min(scale, 1.0) if int(attrs.get("antialias", 0)) else 1.0  # filter stretch 1/s
    reach = 1 if mode == "linear" else 2
    first = math.floor(-reach / s) + 1
    offsets = np.arange(first, 1 - first + 1)                        # tap offsets
    base = np.ceil(xo) - 1                                           # ratio in (0, 1]
    ratio = xo - base
    d = (offsets[None, :] - ratio[:, None]) * s
    if mode == "linear":
        wts = np.clip(1 - np.abs(d), 0, None)
    else:
        wts = _cubic(d, float(attrs.get("cubic_coeff_a", -0.75)))
    if s != 1.0:
        wts = wts / wts.sum(axis=1, keepdims=True)
    idx = base[:, None].astype(np.int64) + offsets[None, :]
    if int(attrs.get("exclude_outside", 0)):
        wts = np.where((idx < 0) | (idx >= n_in), 0.0, wts)
        total = wts.sum(axis=1, keepdims=True)
        wts = wts / np.where(total == 0, 1, total)
    return np.clip(idx, 0, n_in - 1).astype(np.intp), wts


def _resize(attrs: dict, x: np.ndarray, out_shape, scales, starts, ends) -> np.ndarray:
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    work = x if x.dtype.kind == "f" or attrs.get("mode", "nearest") == "nearest" \
        else x.astype(np.float32)
    masks = []
    for axis, (n_out, n_in) in enumerate(zip(out_shape, x.shape)):
        sc, st, en = scales[axis], starts[axis], ends[axis]
        if n_out == n_in and sc == 1.0 and (ctm != "tf_crop_and_resize" or (st, en) == (0, 1)):
            continue  # identity along this axis
        if n_out == 0 or n_in == 0:
            shape = list(work.shape)
            shape[axis] = n_out
            work = np.zeros(shape, dtype=work.dtype)
            continue
        xo, outside = _source_coords(ctm, n_out, n_in, sc, st, en)
        idx, wts = _axis_taps(attrs, xo, n_in, sc)
        if wts is None:
            work = np.take(work, idx[:, 0], axis=axis)
        else:
            shape = (1,) * axis + (n_out,) + (1,) * (work.ndim - axis - 1)
            acc = None
            for t in range(idx.shape[1]):
                term = np.take(work, idx[:, t], axis=axis) * \
                    wts[:, t].astype(work.dtype).reshape(shape)
                acc = term if acc is None else acc + term
            work = acc
        if outside is not None and outside.any():
            masks.append(outside.reshape((1,) * axis + (n_out,) + (1,) * (x.ndim - axis - 1)))
    if masks:
        work = np.where(np.logical_or.reduce(np.broadcast_arrays(*masks)) if len(masks) > 1
                        else masks[0], work.dtype.type(attrs.get("extrapolation_value", 0.0)),
                        work)
    if work.dtype != x.dtype:
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            work = np.clip(np.rint(work), info.min, info.max)
        work = work.astype(x.dtype)
    return work


def _opt(inputs, i):
    v = inputs[i] if len(inputs) > i else None
    return None if v is None or v.size == 0 else np.asarray(v)


@reference("Resize")
def resize(attrs, inputs):
    x = inputs[0]
    out, scales, starts, ends = resize_plan(_node("Resize"), attrs, x.shape, _opt(inputs, 1),
                                            _opt(inputs, 2), _opt(inputs, 3))
    return [_resize(attrs, x, out, scales, starts, ends)]


@reference("Upsample")
def upsample(attrs, inputs):
    # opset 7-9 semantics: asymmetric coordinates, nearest rounds down
    mode = "linear" if attrs.get("mode", "nearest") in ("linear", "bilinear") else "nearest"
    ra = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    x = inputs[0]
    out, scales, starts, ends = resize_plan(_node("Upsample"), ra, x.shape, None,
                                            np.asarray(inputs[1], dtype=np.float32), None)
    return [_resize(ra, x, out, scales, starts, ends)]
