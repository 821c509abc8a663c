"""Sparse convolutions (_spmm.pyx / _spmm.h): Conv candidates for layers whose constant
weights are mostly zeros (pruned: compress/prune.py), at least MIN_ZEROS of them.

- spmm_* (1x1, stride 1, no padding): x (N, K, H, W), W (M, K, 1, 1) -> y = act(W x + bias
  + z), W in CSR, each image's pixels the vector axis;
- spconv_* (any KH x KW, any stride, padding and dilation: pattern-pruned 3x3 layers):
  each image is copied once into zero-bordered planes, one per channel and stride phase
  (_phase_layout: phase (p, q) holds the padded pixels (sh u + p, sw v + q), Hq x Wq),
  `plane` floats apart; a kept tap (m, c, i, j) is then one multiply-add of the buffer
  shifted by its phase plane + (i dh // sh) Wq + j dw // sw onto the output laid out with
  Wq columns per row (the last Wq - OW dropped when copied out), so only the kept taps
  are computed, with no per-weight branch whatever the pattern, and a stride-2 layer
  reads contiguous rows like a stride-1 one.
act "" / Relu / Clip is fused in the C epilogue (the rest stay with the dense kernels).
One spec per tier, named after the tile (pixels x output channels per register block) and
ISA as XNNPACK names its microkernels; the tuner times them against the dense algorithms
(Winograd included) and keeps the faster layer by layer, so a model pruned below the
crossover sparsity is never slower.
"""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..native import epilogue
from ..native.threading_cost import plan_threads, threaded_only

MIN_ZEROS = 0.5       # below this the dense kernels always win (bench/test_bench_sparse.py)


def _spmm():
    from . import _spmm
    return _spmm


_last = (None, 0.0)   # (weights, their zero fraction): every sparse spec asks, in turn


def zero_fraction(w: np.ndarray) -> float:
    """Zeros / size; the last weights' answer kept, so the dozen sparse specs of one node
    count a large weight once (each count reads the whole weight)."""
    global _last
    last = _last
    if last[0] is w:
        return last[1]
    f = 1.0 - np.count_nonzero(w) / max(w.size, 1)
    _last = (w, f)
    return f


def csr(w2d: np.ndarray):
    """(M, K) -> (row_ptr int32 (M+1,), col int32 (nnz,), val float32 (nnz,)), row-major,
    each row's nonzeros in increasing k."""
    rows, cols = np.nonzero(w2d)
    row_ptr = np.zeros(w2d.shape[0] + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=w2d.shape[0]), out=row_ptr[1:])
    return row_ptr, cols.astype(np.int32), w2d[rows, cols].astype(np.float32)


def _sparse_conv(node, ins, outs) -> bool:
    """A group-1 2-D conv with mostly-zero constant weights and a fused epilogue the C code
    has."""
    x, w = ins[0], ins[1]
    a = node.attrs
    if not (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and len(w.shape) == 4 and a.get("group", 1) == 1
            and a.get("activation", "") in _spmm().ACTIVATIONS and 0 not in x.shape):
        return False
    if len(ins) > 2 and ins[2] is not None and ins[2].value is None:
        return False
    if len(ins) > 3 and ins[3] is not None and tuple(ins[3].shape) != tuple(outs[0].shape):
        return False
    return zero_fraction(np.asarray(w.value)) >= MIN_ZEROS


def _pointwise(node, ins, outs) -> bool:
    """1x1, stride 1, no padding: the output pixels are the input's."""
    return (tuple(ins[1].shape[2:]) == (1, 1)
            and tuple(node.attrs.get("strides") or (1, 1)) == (1, 1)
            and tuple(outs[0].shape[2:]) == tuple(ins[0].shape[2:]))


def _supports(node, ins, outs) -> bool:
    return _sparse_conv(node, ins, outs) and _pointwise(node, ins, outs)


def _prepare(node, ins, outs, row: str, lib=None, threads: int = 1):
    """row: a name in lib.TABLE; threads > 1: the output channels split over OpenMP
    threads (the *_mt specs)."""
    if lib is None:
        from . import _spmm as lib
    SparseConv1x1 = lib.SparseConv1x1
    n, k, h, wd = ins[0].shape
    m = ins[1].shape[0]
    w2d = np.asarray(ins[1].value, np.float32).reshape(m, k)
    bias, act, lo, hi = epilogue.constant_parts(node, ins, m)[:4]
    s = h * wd
    spmm = SparseConv1x1(*csr(w2d), k, s, bias, act, lo, hi, row=row)
    has_z = len(ins) > 3 and ins[3] is not None
    ws_h = scratch.array((max(spmm.workspace_floats * threads, 1),), np.float32)

    def run(inputs, outputs):
        x, y, ws = inputs[0], outputs[0], ws_h.get()
        z = inputs[3] if has_z else None
        for b in range(n):
            spmm.run(x[b].reshape(k, s), y[b].reshape(m, s),
                     None if z is None else z[b].reshape(m, s), ws, threads)
    run.kernel = spmm
    return run


def _shifted_supports(node, ins, outs) -> bool:
    return _sparse_conv(node, ins, outs) and not _pointwise(node, ins, outs)


def _phase_layout(x_shape, w_shape, y_shape, strides, pads, dils, tile: int):
    """Where the shifted kernel reads: the zero-bordered image split into its sh x sw
    stride phases (phase (p, q) of channel c holds padded pixels (sh u + p, sw v + q)), so
    tap (i, j) of any stride is a stride-1 shift of one phase plane by (i dh // sh,
    j dw // sw) - for stride 1 the one phase is the padded image itself.
    -> (hq, wq) of a phase plane, plane floats (odd cache lines apart: strides near a
    multiple of 4 KB would put every channel's rows in the same L1 sets), output pixels P
    (oh rows of wq columns, whole tiles)."""
    (kh, kw), (oh, ow) = w_shape[2:], y_shape[2:]
    (sh, sw), (dh, dw) = strides, dils
    hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    plane = -(-(hq * wq) // 16) * 16
    plane += 16 * ((plane // 16) % 2 == 0)
    p = -(-(oh * wq) // max(tile, 1)) * max(tile, 1)
    return hq, wq, plane, p


def _phase_views(planes, x_shape, strides, pads):
    """[(view of the phase planes, view of the image)] pairs covering every padded pixel a
    phase holds that lies inside the image: copying the image views into the plane views
    fills the planes (their borders stay zero). planes: (C, sh, sw, hq, wq)."""
    (_, _, h, wd), (sh, sw), (pt, pl) = x_shape, strides, pads
    hq, wq = planes.shape[3:]
    out = []
    for p in range(sh):
        u0 = max(0, -(-(pt - p) // sh))                    # first u with sh u + p >= pt
        u1 = min(hq, (h - 1 + pt - p) // sh + 1)           # last with sh u + p - pt < h
        for q in range(sw):
            v0 = max(0, -(-(pl - q) // sw))
            v1 = min(wq, (wd - 1 + pl - q) // sw + 1)
            if u1 > u0 and v1 > v0:
                r0, c0 = sh * u0 + p - pt, sw * v0 + q - pl
                out.append((planes[:, p, q, u0:u1, v0:v1],
                            (slice(r0, r0 + sh * (u1 - u0 - 1) + 1, sh),
                             slice(c0, c0 + sw * (v1 - v0 - 1) + 1, sw))))
    return out


def _prepare_shifted(node, ins, outs, row: str, lib=None, threads: int = 1):
    """row: a name in lib.TABLE; lib: the extension module (tests pass the SIMDe-emulated
    _spmm_emu); threads > 1: the output channels split over OpenMP threads (the *_mt
    specs)."""
    if lib is None:
        from . import _spmm as lib
    ShiftedSpMM, tile_pixels = lib.ShiftedSpMM, lib.tile_pixels
    from ..gemm.conv import geometry
    n, c, h, wd = ins[0].shape
    w = np.asarray(ins[1].value, np.float32)
    m, _, kh, kw = w.shape
    oh, ow = outs[0].shape[2:]
    strides, pads, (dh, dw) = geometry(node, ins[0].shape, w.shape, outs[0].shape)
    sh, sw = strides
    hq, wq, plane, p = _phase_layout(ins[0].shape, w.shape, outs[0].shape, strides, pads,
                                     (dh, dw), tile_pixels(row))
    row_ptr, col, val = csr(w.reshape(m, -1))
    cc, ii, jj = np.unravel_index(col, (c, kh, kw))
    phase = (ii * dh % sh) * sw + jj * dw % sw
    off = (cc.astype(np.int64) * (sh * sw) + phase) * plane \
        + (ii * dh // sh) * wq + jj * dw // sw
    bias, act, lo, hi = epilogue.constant_parts(node, ins, m)[:4]
    k = ShiftedSpMM(row_ptr, off, val, p, bias, act, lo, hi, row=row)
    floats = c * sh * sw * plane
    xp_h = scratch.array((max(k.reach, floats),), np.float32, persistent=True, fill=0.0)
    yp_h = scratch.array((m, p), np.float32)
    has_z = len(ins) > 3 and ins[3] is not None
    zp_h = scratch.array((m, p), np.float32) if has_z else None

    def run(inputs, outputs):
        x, y = inputs[0], outputs[0]
        xp, yp = xp_h.get(), yp_h.get()
        planes = xp[:floats].reshape(c, sh, sw, plane)[..., :hq * wq].reshape(
            c, sh, sw, hq, wq)
        copies = _phase_views(planes, x.shape, strides, pads)
        out = yp[:, :oh * wq].reshape(m, oh, wq)[:, :, :ow]
        zp = zp_h.get() if has_z else None
        for b in range(n):
            for dst, (rows, cols) in copies:         # the zero borders stay as filled
                np.copyto(dst, x[b][:, rows, cols])
            if has_z:
                np.copyto(zp[:, :oh * wq].reshape(m, oh, wq)[:, :, :ow], inputs[3][b])
            k.run(xp, yp, zp, threads)
            np.copyto(y[b], out)
    run.kernel = k
    return run


CONV_MIN_PIXELS = 32     # narrower tiles serve the FC layers' few rows (sparse_gemm.py)


def conv_rows() -> tuple:
    """The table's rows the sparse convolutions are offered on, best first."""
    return tuple(r for r in reversed(_spmm().ROWS) if r.pixels >= CONV_MIN_PIXELS)


def shifted_name(row: str) -> str:
    """The tap-shifted conv's spec name on a row (spmm_... -> spconv_...)."""
    return row.replace("spmm_", "spconv_", 1)


def _register():
    """Per row (conv_rows): a 1x1 spec named after it and a tap-shifted one (shifted_name);
    the vector rows also split the output channels over the session's threads (*_mt)."""
    for row in conv_rows():
        isa = "" if row.isa == "scalar" else row.isa
        for spec, sup, prep in ((row.name, _supports, _prepare),
                                (shifted_name(row.name), _shifted_supports, _prepare_shifted)):
            kernel("Conv", spec, supports=sup, isa=isa)(
                lambda node, ins, outs, r=row.name, f=prep: f(node, ins, outs, r))
            if isa:
                kernel("Conv", spec + "_mt", supports=threaded_only(sup), isa=isa, pool="omp")(
                    lambda node, ins, outs, r=row.name, f=prep: f(node, ins, outs, r,
                                                                  threads=plan_threads()))


_register()
