"""Upsampling and joining kernels writing straight into the planned output: Resize,
ConvTranspose, Concat. float32 only.

Resize (x (N, C, H, W) or any rank): the per-axis source indices and tap weights are the
reference's own (kernels/reference/nn.py `_source_coords` / `_axis_taps`), computed once at
prepare from the constant scales/sizes, so the result matches the reference bit for bit:
  - nearest with an integer factor f on every resized axis (idx == o // f, e.g. asymmetric /
    floor, the PP-OCR / YOLO FPN upsampling): on H, W only a Numba loop writing whole rows
    (_upsample_jit.nearest_int), else one broadcast copy into the output viewed as
    (..., n_in, f, ...);
  - otherwise, axis by axis as the reference (nearest: a take; linear / cubic: sum over taps
    of take * weight in tap order) into buffers preallocated at prepare, the last pass into
    the output.
  tf_crop_and_resize (roi, extrapolation) stays on the reference.

ConvTranspose (2-D, group 1, constant weights): one GEMM per image, cols (M*kh*kw, H*W) =
W^T (M*kh*kw, C) @ X (C, H*W), then col2im. When stride == kernel, dilation 1 and the output
is the full grid (no pads / output_padding) the taps do not overlap and col2im is a
Numba row scatter plus bias (_upsample_jit.tile_scatter; the 2x2/s2 upsampling of DB heads); otherwise taps are scatter-added into a
zeroed full-grid buffer that is cropped into the output.

Concat: np.concatenate(..., out=).
"""
from __future__ import annotations

import numpy as np

from ...graph.shapes.nn import conv_transpose_geometry, resize_plan
from ...registry import kernel
from ...extras import have
from .. import scratch
from ..reference.nn import _axis_taps, _source_coords
from ..reference.tensor import norm_axis

F32 = "float32"


def _jit():
    """The Numba loops (imported only once a model plans them), or None without numba:
    then the NumPy paths below run instead."""
    if not have("numba"):
        return None
    from . import _upsample_jit
    return _upsample_jit


# -- Resize -----------------------------------------------------------------------------------

def _const(info):
    """Constant value of an optional input (None if omitted or empty)."""
    if info is None or info.value is None or np.asarray(info.value).size == 0:
        return None
    return np.asarray(info.value)


def _resize_supports(node, ins, outs) -> bool:
    a = node.attrs
    if ins[0].dtype != F32 or outs[0].dtype != F32 or 0 in outs[0].shape or 0 in ins[0].shape:
        return False
    if a.get("mode", "nearest") not in ("nearest", "linear", "cubic"):
        return False
    if a.get("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        return False
    # scales / sizes must be known now (inputs 2 / 3, possibly omitted)
    for i in (2, 3):
        if len(ins) > i and ins[i] is not None and ins[i].value is None:
            return False
    return len(ins) > 2 and (_const(ins[2]) is not None or
                             (len(ins) > 3 and _const(ins[3]) is not None))


def _axis_plans(node, shape, scales, sizes):
    """[(axis, idx (n_out, T) intp, wts (n_out, T) float32 or None)] of the resized axes,
    skipping identity axes exactly as the reference does."""
    a = node.attrs
    out, scales, starts, ends = resize_plan(node, a, shape, None, scales, sizes)
    ctm = a.get("coordinate_transformation_mode", "half_pixel")
    plans = []
    for axis, (n_out, n_in) in enumerate(zip(out, shape)):
        sc = scales[axis]
        if n_out == n_in and sc == 1.0:
            continue
        xo, _ = _source_coords(ctm, n_out, n_in, sc, starts[axis], ends[axis])
        idx, wts = _axis_taps(a, xo, n_in, sc)
        plans.append((axis, idx, None if wts is None else wts.astype(np.float32)))
    return out, plans


def _integer_nearest(shape, plans):
    """Per-axis integer factors if every resized axis is nearest with idx == o // f."""
    factors = [1] * len(shape)
    for axis, idx, wts in plans:
        n_in, n_out = shape[axis], idx.shape[0]
        if wts is not None or n_out % n_in:
            return None
        f = n_out // n_in
        if not np.array_equal(idx[:, 0], np.arange(n_out) // f):
            return None
        factors[axis] = f
    return factors


@kernel("Resize", "resize_numpy", supports=_resize_supports)
def prepare_resize(node, ins, outs):
    shape, oshape = tuple(ins[0].shape), tuple(outs[0].shape)
    out, plans = _axis_plans(node, shape, _const(ins[2]),
                             _const(ins[3]) if len(ins) > 3 else None)
    assert tuple(out) == oshape, (out, oshape)
    if not plans:
        def run_copy(inputs, outputs):
            np.copyto(outputs[0], inputs[0])
        return run_copy

    factors = _integer_nearest(shape, plans)
    jit = _jit() if factors is not None else None
    if jit and len(shape) >= 2 and all(f == 1 for f in factors[:-2]):
        # the usual case, H and W only: a Numba loop writing whole output rows
        fh, fw = factors[-2:]
        x3 = (-1,) + shape[-2:]
        y3 = (-1,) + oshape[-2:]

        def run_nearest_hw(inputs, outputs):
            jit.nearest_int(inputs[0].reshape(x3), fh, fw, outputs[0].reshape(y3))
        return run_nearest_hw
    if factors is not None:
        # y viewed as (..., n_in, f, ...) <- x viewed as (..., n_in, 1, ...)
        yshape = [d for n, f in zip(shape, factors) for d in ((n, f) if f > 1 else (n,))]
        xshape = [d for n, f in zip(shape, factors) for d in ((n, 1) if f > 1 else (n,))]

        def run_nearest(inputs, outputs):
            np.copyto(outputs[0].reshape(yshape), inputs[0].reshape(xshape))
        return run_nearest

    # general: one pass per resized axis; the last one writes the output
    passes, cur = [], list(shape)
    for k, (axis, idx, wts) in enumerate(plans):
        cur[axis] = idx.shape[0]
        last = k == len(plans) - 1
        acc = None if last else scratch.array(tuple(cur), np.float32)
        tmp = None if wts is None or wts.shape[1] == 1 else scratch.array(tuple(cur), np.float32)
        bshape = (1,) * axis + (idx.shape[0],) + (1,) * (len(shape) - axis - 1)
        taps = [(np.ascontiguousarray(idx[:, t]),
                 None if wts is None else np.ascontiguousarray(wts[:, t]).reshape(bshape))
                for t in range(idx.shape[1])]
        passes.append((axis, taps, acc, tmp))

    def run(inputs, outputs):
        work = inputs[0]
        for axis, taps, acc, tmp in passes:
            acc = outputs[0] if acc is None else acc.get()
            tmp = None if tmp is None else tmp.get()
            i0, w0 = taps[0]
            np.take(work, i0, axis=axis, out=acc, mode="clip")  # in range: no buffering
            if w0 is not None:
                np.multiply(acc, w0, out=acc)
                for i, w in taps[1:]:
                    np.take(work, i, axis=axis, out=tmp, mode="clip")
                    np.multiply(tmp, w, out=tmp)
                    np.add(acc, tmp, out=acc)
            work = acc
    return run


# -- ConvTranspose ----------------------------------------------------------------------------

def _convt_supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    return (len(x.shape) == 4 and x.dtype == F32 and outs[0].dtype == F32
            and w.value is not None and int(node.attrs.get("group", 1)) == 1
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None)
            and not node.attrs.get("activation"))


@kernel("ConvTranspose", "convtranspose_gemm", supports=_convt_supports, pool="blas")
def prepare_convtranspose(node, ins, outs):
    x, w = ins[0], ins[1]
    n, c, h, wd = x.shape
    _, m, kh, kw = w.shape
    y_shape = outs[0].shape
    out, pb, strides, dil = conv_transpose_geometry(node, node.attrs, (h, wd), (kh, kw))
    assert tuple(out) == tuple(y_shape[2:]), (out, y_shape)
    wt = np.ascontiguousarray(w.value.astype(np.float32).reshape(c, m * kh * kw).T)
    b = None
    if len(ins) > 2 and ins[2] is not None:
        b = ins[2].value.astype(np.float32).reshape(m, 1, 1)
    cols_h = scratch.array((m * kh * kw, h * wd), np.float32)
    sh, sw = strides
    full = [s * (i - 1) + d * (k - 1) + 1 for s, i, d, k in zip(strides, (h, wd), dil, (kh, kw))]

    tiles = (sh, sw) == (kh, kw) and tuple(dil) == (1, 1) and list(full) == list(out) \
        and not any(pb)
    jit = _jit() if tiles else None
    if jit:
        # taps tile the output: y[m, i*kh + a, j*kw + b] = cols[m, a, b, i, j] + b[m]
        bias = np.zeros(m, np.float32) if b is None else np.ascontiguousarray(b.reshape(m))

        def run_tile(inputs, outputs):
            xs, y = inputs[0], outputs[0]
            cols = cols_h.get()
            for i in range(n):
                np.matmul(wt, xs[i].reshape(c, h * wd), out=cols)
                jit.tile_scatter(cols.reshape(m, kh, kw, h, wd), bias, y[i])
        return run_tile

    acc_h = scratch.array((m, *full), np.float32)
    src, dst = [slice(None)], [slice(None)]
    for o, f, p in zip(out, full, pb):
        lo, hi = max(0, p), min(f, p + o)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo - p, lo - p + max(0, hi - lo)))
    src, dst = tuple(src), tuple(dst)
    covers = all(s.stop - s.start == o for s, o in zip(dst[1:], out))
    tap_slices = [(a, bb, (slice(None),
                           slice(a * dil[0], a * dil[0] + (h - 1) * sh + 1, sh),
                           slice(bb * dil[1], bb * dil[1] + (wd - 1) * sw + 1, sw)))
                  for a in range(kh) for bb in range(kw)]

    def run(inputs, outputs):
        xs, y = inputs[0], outputs[0]
        cols, acc = cols_h.get(), acc_h.get()
        cols6 = cols.reshape(m, kh, kw, h, wd)
        for i in range(n):
            np.matmul(wt, xs[i].reshape(c, h * wd), out=cols)
            acc.fill(0)
            for a, bb, sl in tap_slices:
                np.add(acc[sl], cols6[:, a, bb], out=acc[sl])
            yi = y[i]
            if not covers:
                yi.fill(0)
            np.copyto(yi[dst], acc[src])
            if b is not None:
                np.add(yi, b, out=yi)
    return run


# -- Concat -----------------------------------------------------------------------------------

@kernel("Concat", "concat_out",
        supports=lambda node, ins, outs: outs[0].dtype == F32
        and all(i is None or i.dtype == F32 for i in ins) and len(outs[0].shape) > 0)
def prepare_concat(node, ins, outs):
    axis = norm_axis(node.attrs["axis"], len(outs[0].shape))
    keep = [k for k, i in enumerate(ins) if i is not None]

    def run(inputs, outputs):
        np.concatenate([inputs[k] for k in keep], axis=axis, out=outputs[0])
    return run
