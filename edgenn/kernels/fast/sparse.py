"""Sparse convolutions (_spmm.pyx / _spmm.h): Conv candidates for layers whose constant
weights are mostly zeros (pruned: compress/prune.py), at least MIN_ZEROS of them.

- spmm_* (1x1, stride 1, no padding): x (N, K, H, W), W (M, K, 1, 1) -> y = act(W x + bias
  + z), W in CSR, each image's pixels the vector axis;
- spconv_* (any KH x KW, stride 1, any padding and dilation: pattern-pruned 3x3 layers):
  each image is copied once into zero-bordered (Hp, Wp) planes, `plane` floats apart; a
  kept tap (m, c, i, j) is then one multiply-add of the buffer shifted by c plane + i dh
  Wp + j dw onto the output laid out with Wp columns per row (the last Wp - OW dropped
  when copied out), so only the kept taps are computed, with no per-weight branch
  whatever the pattern.
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
from . import epilogue

MIN_ZEROS = 0.5       # below this the dense kernels always win (bench/test_bench_sparse.py)
ACTS = ("", "Relu", "Clip")


_last = (None, 0.0)   # (weights, their zero fraction): every sparse spec asks, in turn


def zero_fraction(w: np.ndarray) -> float:
    """Zeros / size; the last weights' answer kept, so the dozen sparse specs of one node
    count a large weight once (planning a BERT-size Gemm: ~1 ms a count)."""
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
    """A group-1, stride-1 2-D conv with mostly-zero constant weights and a fused epilogue
    the C code has."""
    x, w = ins[0], ins[1]
    a = node.attrs
    if not (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and len(w.shape) == 4 and a.get("group", 1) == 1
            and a.get("activation", "") in ACTS
            and tuple(a.get("strides") or (1, 1)) == (1, 1) and 0 not in x.shape):
        return False
    if len(ins) > 2 and ins[2] is not None and ins[2].value is None:
        return False
    if len(ins) > 3 and ins[3] is not None and tuple(ins[3].shape) != tuple(outs[0].shape):
        return False
    return zero_fraction(np.asarray(w.value)) >= MIN_ZEROS


def _supports(node, ins, outs) -> bool:
    return (_sparse_conv(node, ins, outs) and tuple(ins[1].shape[2:]) == (1, 1)
            and tuple(outs[0].shape[2:]) == tuple(ins[0].shape[2:]))


def _prepare(node, ins, outs, isa: str, lib=None):
    if lib is None:
        from . import _spmm as lib
    SparseConv1x1 = lib.SparseConv1x1
    n, k, h, wd = ins[0].shape
    m = ins[1].shape[0]
    w2d = np.asarray(ins[1].value, np.float32).reshape(m, k)
    bias, act, lo, hi = epilogue.constant_parts(node, ins, m)[:4]
    s = h * wd
    spmm = SparseConv1x1(*csr(w2d), k, s, bias, act, lo, hi, isa=isa)
    has_z = len(ins) > 3 and ins[3] is not None
    ws_h = scratch.array((max(spmm.workspace_floats, 1),), np.float32)

    def run(inputs, outputs):
        x, y, ws = inputs[0], outputs[0], ws_h.get()
        z = inputs[3] if has_z else None
        for b in range(n):
            spmm.run(x[b].reshape(k, s), y[b].reshape(m, s),
                     None if z is None else z[b].reshape(m, s), ws)
    run.kernel = spmm
    return run


def _shifted_supports(node, ins, outs) -> bool:
    return _sparse_conv(node, ins, outs) and tuple(ins[1].shape[2:]) != (1, 1)


def _prepare_shifted(node, ins, outs, isa: str, lib=None):
    """lib: the extension module (tests pass the SIMDe-emulated _spmm_emu)."""
    if lib is None:
        from . import _spmm as lib
    ShiftedSpMM, tile_pixels = lib.ShiftedSpMM, lib.tile_pixels
    from .conv import geometry
    n, c, h, wd = ins[0].shape
    w = np.asarray(ins[1].value, np.float32)
    m, _, kh, kw = w.shape
    oh, ow = outs[0].shape[2:]
    _, (pt, pl), (dh, dw) = geometry(node, ins[0].shape, w.shape, outs[0].shape)
    # the padded plane: wide and tall enough for every tap of every output pixel
    hp, wp = oh + (kh - 1) * dh, ow + (kw - 1) * dw
    hp, wp = max(hp, pt + h), max(wp, pl + wd)
    t = max(tile_pixels(isa), 1)
    p = -(-(oh * wp) // t) * t                       # output pixels, whole tiles
    # channel planes an odd number of cache lines apart: strides near a multiple of 4 KB
    # would put every channel's rows in the same L1 sets
    plane = -(-(hp * wp) // 16) * 16
    plane += 16 * ((plane // 16) % 2 == 0)
    row_ptr, col, val = csr(w.reshape(m, -1))
    cc, ii, jj = np.unravel_index(col, (c, kh, kw))
    off = cc.astype(np.int64) * plane + ii * dh * wp + jj * dw
    bias, act, lo, hi = epilogue.constant_parts(node, ins, m)[:4]
    k = ShiftedSpMM(row_ptr, off, val, p, bias, act, lo, hi, isa=isa)
    xp_h = scratch.array((max(k.reach, c * plane),), np.float32, persistent=True, fill=0.0)
    yp_h = scratch.array((m, p), np.float32)
    has_z = len(ins) > 3 and ins[3] is not None
    zp_h = scratch.array((m, p), np.float32) if has_z else None
    rows = slice(pt, pt + h), slice(pl, pl + wd)

    def run(inputs, outputs):
        x, y = inputs[0], outputs[0]
        xp, yp = xp_h.get(), yp_h.get()
        planes = xp[:c * plane].reshape(c, plane)[:, :hp * wp].reshape(c, hp, wp)
        image = planes[:, rows[0], rows[1]]
        out = yp[:, :oh * wp].reshape(m, oh, wp)[:, :, :ow]
        zp = zp_h.get() if has_z else None
        for b in range(n):
            np.copyto(image, x[b])                   # the zero borders stay as filled
            if has_z:
                np.copyto(zp[:, :oh * wp].reshape(m, oh, wp)[:, :, :ow], inputs[3][b])
            k.run(xp, yp, zp)
            np.copyto(y[b], out)
    run.kernel = k
    return run


# (1x1 name, shifted name, tier the spec needs, tier the C driver runs)
TIERS = (("spmm_64x1__avx512f", "spconv_64x1__avx512f", "avx512", "avx512"),
         ("spmm_32x1__avx512f", "spconv_32x1__avx512f", "avx512", "avx512_32"),
         ("spmm_32x1__avx2", "spconv_32x1__avx2", "avx2", "avx2"),
         ("spmm_32x1__scalar", "spconv_32x1__scalar", "", "scalar"))
for _name, _shifted, _tier, _isa in TIERS:
    kernel("Conv", _name, supports=_supports, isa=_tier)(
        lambda node, ins, outs, t=_isa: _prepare(node, ins, outs, t))
    kernel("Conv", _shifted, supports=_shifted_supports, isa=_tier)(
        lambda node, ins, outs, t=_isa: _prepare_shifted(node, ins, outs, t))
