"""Winograd convolution F(m x m, 3 x 3) for 3x3, stride 1, dilation 1, group 1 convs (Lavin &
Gray 2016): per m x m output tile, Y = A^T [(G g G^T) ⊙ (B^T d B)] A.

x (N, C, H, W), W (K, C, 3, 3) -> y (N, K, OH, OW), float32, with bias, residual z and the
activation fused into the output transform.

- prepare: U = G g G^T for every (k, c), stored (alpha^2, K, C) (float64 math, float32 result);
  all scratch is allocated here.
- run, per block of tile rows (tiles of every image in one sequence, so batch > 1 adds tiles):
  input transform x -> V (alpha^2, C, Tb) in C (_winograd.h), then alpha^2 independent GEMMs
  M[xi] = U[xi] (K x C) @ V[xi] (C x Tb) into a preallocated buffer, by one stacked
  np.matmul (OpenBLAS), no copies: V[xi] is C-contiguous; then the output transform +
  epilogue in C. Or all three in one C call (_winograd_run.h) with the GEMMs on edgenn's
  packed sgemm (U prepacked, V read in place).
  Blocks keep V and M near L2 size.

Error grows with m (the interpolation points 2, 1/2 ... widen the transforms' dynamic range):
max |y - ref| / max |ref| on ResNet-18's real activations is <= 8e-7 for F(2,3), <= 6e-6 for
F(4,3), <= 1.3e-5 for F(6,3) (tests/kernels/winograd/test_winograd.py checks the growth on realistic data).
Registered: winograd_f23, winograd_f43 (GEMMs on OpenBLAS), winograd_f{2,4}3_<tile>__<isa>
(GEMMs on that row of edgenn's packed sgemm table, and *_mt); each carries a cost estimate
(`winograd_seconds`).
"""
from __future__ import annotations

import math
from fractions import Fraction as Fr

import numpy as np

from ...registry import kernel
from .. import scratch
from ..gemm import _sgemm
from ..native import epilogue
from ..gemm.conv import geometry
from ..native.threading_cost import plan_threads

# ---- transform matrices (float64; the C code in _winograd.h has their closed forms) --------

_MATRICES = {
    2: dict(
        BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        G=[[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
        AT=[[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: dict(
        BT=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        G=[[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
           [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
        AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
            [0, 1, -1, 8, -8, 1]]),
    # points 0, 1, -1, 2, -2, 1/2, -1/2, inf
    6: dict(
        BT=[[1, 0, Fr(-21, 4), 0, Fr(21, 4), 0, -1, 0],
            [0, 1, 1, Fr(-17, 4), Fr(-17, 4), 1, 1, 0],
            [0, -1, 1, Fr(17, 4), Fr(-17, 4), -1, 1, 0],
            [0, Fr(1, 2), Fr(1, 4), Fr(-5, 2), Fr(-5, 4), 2, 1, 0],
            [0, Fr(-1, 2), Fr(1, 4), Fr(5, 2), Fr(-5, 4), -2, 1, 0],
            [0, 2, 4, Fr(-5, 2), -5, Fr(1, 2), 1, 0],
            [0, -2, 4, Fr(5, 2), -5, Fr(-1, 2), 1, 0],
            [0, -1, 0, Fr(21, 4), 0, Fr(-21, 4), 0, 1]],
        G=[[1, 0, 0], [Fr(-2, 9), Fr(-2, 9), Fr(-2, 9)], [Fr(-2, 9), Fr(2, 9), Fr(-2, 9)],
           [Fr(1, 90), Fr(1, 45), Fr(2, 45)], [Fr(1, 90), Fr(-1, 45), Fr(2, 45)],
           [Fr(32, 45), Fr(16, 45), Fr(8, 45)], [Fr(32, 45), Fr(-16, 45), Fr(8, 45)],
           [0, 0, 1]],
        AT=[[1, 1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, Fr(1, 2), Fr(-1, 2), 0],
            [0, 1, 1, 4, 4, Fr(1, 4), Fr(1, 4), 0], [0, 1, -1, 8, -8, Fr(1, 8), Fr(-1, 8), 0],
            [0, 1, 1, 16, 16, Fr(1, 16), Fr(1, 16), 0],
            [0, 1, -1, 32, -32, Fr(1, 32), Fr(-1, 32), 1]]),
}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """-> (B^T (alpha, alpha), G (alpha, 3), A^T (m, alpha)) of F(m, 3), float64."""
    d = _MATRICES[m]
    return tuple(np.array([[float(v) for v in row] for row in d[k]]) for k in ("BT", "G", "AT"))


def weight_transform(w: np.ndarray, m: int) -> np.ndarray:
    """w (K, C, 3, 3) -> U (alpha^2, K, C) float32, U[i*alpha + j, k, c] = (G w[k, c] G^T)[i, j]."""
    _, g, _ = matrices(m)
    alpha = m + 2
    k, c = w.shape[:2]
    # separable, as plain float32 matrix products over contiguous planes (3-term sums):
    # R = G w over the first tap axis, then U = R G^T over the second
    g = g.astype(np.float32)
    taps = np.require(w.transpose(2, 3, 0, 1), dtype=np.float32, requirements="C")  # (3,3,K,C)
    rows = (g @ taps.reshape(3, -1)).reshape(alpha, 3, k * c)          # (alpha, 3, K*C)
    return np.matmul(g, rows).reshape(alpha * alpha, k, c)             # (alpha^2, K, C)


# ---- cost model -----------------------------------------------------------------------------

# Rates fitted on one x86 core with OpenBLAS (the estimates are only compared with each
# other): transforms in ns per element of V
# (alpha^2 * C * tiles) and of M (alpha^2 * K * tiles), tiles rounded up to the 8 lanes a
# vector handles; sgemm GFLOP/s falls with the narrow dimension n as peak * n / (n + half)
# (n = tiles for the alpha^2 GEMMs, so the products of few tiles run far below peak).
_NS_IN = {2: 0.8, 4: 0.9, 6: 2.2}
_NS_OUT = {2: 0.5, 4: 0.7, 6: 1.3}
_GEMM_PEAK, _GEMM_HALF = 30.0, 8.0      # alpha^2 GEMMs (K x C) @ (C x tiles)
_IM2COL_PEAK, _IM2COL_HALF = 28.0, 4.0  # (K x 9C) @ (9C x pixels), im2col included


def _sgemm_seconds(flops: float, n: int, peak: float, half: float) -> float:
    return flops / (peak * 1e9 * n / (n + half))


def winograd_seconds(c: int, k: int, h: int, w: int, m: int, batch: int = 1) -> float:
    """Estimated seconds of Winograd F(m, 3) on a 3x3 stride-1 conv, c -> k channels, output
    h x w: input transform + alpha^2 GEMMs (K x C) @ (C x tiles) + output transform."""
    a2 = (m + 2) ** 2
    th, tw = math.ceil(h / m), math.ceil(w / m)
    tiles, lanes = batch * th * tw, batch * th * math.ceil(tw / 8) * 8
    gemm = _sgemm_seconds(2.0 * a2 * k * c * tiles, tiles, _GEMM_PEAK, _GEMM_HALF)
    return gemm + a2 * lanes * (_NS_IN[m] * c + _NS_OUT[m] * k) * 1e-9


def direct_seconds(c: int, k: int, h: int, w: int, batch: int = 1) -> float:
    """Estimated seconds of the im2col + sgemm conv (conv_gemm) on the same conv."""
    return batch * _sgemm_seconds(2.0 * 9 * k * c * h * w, h * w, _IM2COL_PEAK, _IM2COL_HALF)


def winograd_cost_ratio(c: int, k: int, h: int, w: int, m: int) -> float:
    """Estimated time of the im2col + sgemm conv over the time of Winograd F(m, 3), for a 3x3
    stride-1 conv with c input and k output channels and an h x w output (batch 1).

    > 1: Winograd is expected to win by that factor; below ~0.7 it is hopeless and the
    autotuner can skip timing it. The idea of MNN's `bestWinogradUnit` (direct cost against
    input transform + alpha^2 GEMMs + output transform per tile; MNN keeps the best unit and
    none below 1), here in seconds from rates measured on this machine, so the transforms
    and the skinny GEMMs of few tiles (7x7 outputs, 512 channels) are priced honestly.
    """
    return direct_seconds(c, k, h, w) / winograd_seconds(c, k, h, w, m)


def _cost(m: int):
    """KernelSpec.cost: estimated seconds (comparable with other kernels' estimates)."""
    def cost(node, ins, outs):
        n, c = ins[0].shape[:2]
        _, k, oh, ow = outs[0].shape
        return winograd_seconds(c, k, oh, ow, m, n)
    return cost


# ---- the kernel -----------------------------------------------------------------------------

_BLOCK_BYTES = 2 << 20     # V + M of one block of tile rows: about L2 + some L3 (measured)
_MIN_BLOCK_TILES = 64      # fewer tiles make the per-xi GEMMs too skinny for OpenBLAS
_MIN_OWN_TILES = 32        # edgenn's sgemm: one 12 x 32 register tile wide


def _supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    a = node.attrs
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and tuple(w.shape[2:]) == (3, 3) and a.get("group", 1) == 1
            and list(a.get("strides") or [1, 1]) == [1, 1]
            and list(a.get("dilations") or [1, 1]) == [1, 1]
            and epilogue.supported(node)
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None))


def _blocks(rows_total: int, per_row: int, tw: int, block_bytes: int, min_tiles: int,
            threads: int) -> int:
    """Tile rows per block: V + M of a block near block_bytes, at least min_tiles tiles,
    balanced; threads > 1: at least `threads` blocks where each still has min_tiles / 2
    (else WinogradConv shares out each block's products instead)."""
    nrows = max(1, block_bytes // per_row, -(-min_tiles // tw))
    split = -(-rows_total // threads)
    if threads > 1 and split * tw >= min_tiles // 2:   # (28x28 F(4,3): 28 + 21 tiles)
        nrows = min(nrows, split)
    return -(-rows_total // -(-rows_total // nrows))  # balance the blocks


def _prepare(node, ins, outs, m: int, block_bytes: int = _BLOCK_BYTES, gemm_row: str = "",
             threads: int = 1, transform_row: str | None = None):
    """gemm_row "": the alpha^2 GEMMs on OpenBLAS (np.matmul), the transforms called per
    block from here; a row of the sgemm table (_sgemm.ROWS): the whole conv in one C call
    (_winograd.WinogradConv) with the GEMMs on that row (U prepacked, V read in place),
    blocks (or, with fewer blocks than threads, each block's products) shared out over
    `threads` OpenMP threads. transform_row: the transforms' row (_winograd.ROWS), None
    for the best this CPU runs."""
    x, w, y = ins[0], ins[1].value, outs[0]
    n, c, h, wd = x.shape
    k = w.shape[0]
    _, _, oh, ow = y.shape
    _, (ph, pw), _ = geometry(node, x.shape, w.shape, y.shape)
    a2 = (m + 2) ** 2
    u = weight_transform(w, m)
    bias = (np.require(ins[2].value, dtype=np.float32, requirements="C")
            if len(ins) > 2 and ins[2] is not None else None)
    from . import _winograd as cw
    act, params = node.attrs.get("activation", ""), list(node.attrs.get("activation_params", []))
    cact, p0, p1 = epilogue.act_args(node)
    post = ""                 # fused in C, or else applied afterwards (epilogue.activate)
    if act not in cw.ACTIVATIONS:
        cact, post = epilogue.code(""), act
    th, tw = -(-oh // m), -(-ow // m)
    per_row = a2 * (c + k) * tw * 4  # bytes of V and M per tile row
    if gemm_row:
        nrows = _blocks(n * th, per_row, tw, block_bytes, _MIN_OWN_TILES, threads)
        conv = _own_gemm_conv(m, x.shape, y.shape, ph, pw, nrows, u, bias, cact, p0, p1,
                              gemm_row, threads, transform_row)
        kept_h = scratch.array(conv.kept_floats, np.float32, persistent=True, fill=0.0)
        work_h = scratch.array(conv.work_floats, np.float32)
        has_z = len(ins) > 3 and ins[3] is not None
        tmp_h = scratch.array(y.shape, np.float32) if post else None

        def run(inputs, outputs):
            out = outputs[0]
            conv.run(inputs[0], out, inputs[3] if has_z else None, kept_h.get(), work_h.get())
            if post:
                epilogue.activate(out, post, params, tmp_h.get())
        return run
    nrows = _blocks(n * th, per_row, tw, block_bytes, _MIN_BLOCK_TILES, 1)
    return _blas_run(m, ins, y, u, ph, pw, th, tw, nrows, bias, cact, p0, p1, post, params,
                     transform_row)


def _own_gemm_conv(m, shape_x, shape_y, ph, pw, nrows, u, bias, cact, p0, p1, row, threads,
                   transform_row):
    from . import _winograd as cw
    k, c = u.shape[1:]
    tw = -(-shape_y[3] // m)
    gws = _sgemm.direct_workspace_bytes(k, nrows * tw, c) // 4
    return cw.WinogradConv(m, shape_x, shape_y, ph, pw, nrows, _sgemm.pack_a_batch(u),
                           _sgemm.packed_a_size(k, c), bias, cact, p0, p1,
                           _sgemm.row_index(row), gws, threads, transform_row)


def _blas_run(m, ins, y, u, ph, pw, th, tw, nrows, bias, cact, p0, p1, post, params,
              transform_row):
    from . import _winograd as cw
    n, c = ins[0].shape[:2]
    k = u.shape[1]
    alpha = m + 2
    a2 = alpha * alpha
    twp = -(-tw // 8) * 8
    rows_total = n * th
    blocks = [(r, min(nrows, rows_total - r)) for r in range(0, rows_total, nrows)]
    has_z = len(ins) > 3 and ins[3] is not None

    # scratch of the execution context; mbuf and xp keep their zeros (+8: the output pass
    # reads ahead; xp's padding), the others are rewritten by every call
    vbuf_h = scratch.array(a2 * c * nrows * tw, np.float32)
    mbuf_h = scratch.array(a2 * k * nrows * tw + 8, np.float32, persistent=True, fill=0.0)
    pbuf_h = scratch.array((nrows * m + 2) * alpha * twp, np.float32)
    xp_h = scratch.array(twp * m + alpha, np.float32, persistent=True, fill=0.0)
    zeros = np.zeros(alpha * twp, np.float32)      # read only
    qbuf_h = scratch.array(m * alpha * twp, np.float32)
    rowbuf_h = scratch.array(twp * m, np.float32)
    tmp_h = scratch.array(y.shape, np.float32) if post else None
    cin, cout = cw.input_transform, cw.output_transform
    trow = cw.best_row() if transform_row is None else transform_row

    def run(inputs, outputs):
        xs, out = inputs[0], outputs[0]
        z = inputs[3] if has_z else None
        vbuf, mbuf, pbuf, xp = vbuf_h.get(), mbuf_h.get(), pbuf_h.get(), xp_h.get()
        qbuf, rowbuf = qbuf_h.get(), rowbuf_h.get()
        for r0, nr in blocks:
            tb = nr * tw
            vflat, mflat = vbuf[:a2 * c * tb], mbuf[:a2 * k * tb]
            cin(m, xs, ph, pw, th, tw, twp, r0, nr, vflat, pbuf, xp, zeros, trow)
            np.matmul(u, vflat.reshape(a2, c, tb), out=mflat.reshape(a2, k, tb))
            cout(m, mflat, out, th, tw, twp, r0, nr, bias, z, cact, p0, p1, qbuf, rowbuf, trow)
        if post:
            epilogue.activate(out, post, params, tmp_h.get())
    return run


@kernel("Conv", "winograd_f23", supports=_supports, cost=_cost(2), pool="blas")
def prepare_f23(node, ins, outs):
    return _prepare(node, ins, outs, 2)


@kernel("Conv", "winograd_f43", supports=_supports, cost=_cost(4), pool="blas")
def prepare_f43(node, ins, outs):
    return _prepare(node, ins, outs, 4)


# the alpha^2 GEMMs on edgenn's own packed sgemm, per tier: no BLAS call overhead and
# full-width register tiles where OpenBLAS is weak, the skinny products of few tiles
# (ResNet-18's 14x14 and 7x7 layers: 16 tiles per product). *_mt: the products over the
# session's OpenMP threads (the transforms stay on one).
def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and _supports(node, ins, outs)


# One spec per SIMD row of the sgemm table (the portable row's products are OpenBLAS's
# above): winograd_f{2,4}3_<tile>__<isa>.
for _m in (2, 4):
    for _row in _sgemm.ROWS:
        if _row.isa == "scalar":
            continue
        _name = f"winograd_f{_m}3_{_row.name[len('sgemm_'):]}"
        kernel("Conv", _name, supports=_supports, cost=_cost(_m), isa=_row.isa)(
            lambda node, ins, outs, m=_m, r=_row.name: _prepare(node, ins, outs, m, gemm_row=r))
        kernel("Conv", _name + "_mt", supports=_mt_supports, cost=_cost(_m), isa=_row.isa)(
            lambda node, ins, outs, m=_m, r=_row.name: _prepare(
                node, ins, outs, m, gemm_row=r, threads=plan_threads()))


# F(6,3) works (tests/kernels/winograd/test_winograd.py) but is not registered: on ResNet-18 it is never faster
# than F(4,3) here (the transforms cost twice as much and the tiles pad more), and its error,
# ~1.3e-5 of max |y| on real activations, misses the 1e-5 every registered kernel is held to.
def prepare_f63(node, ins, outs):
    return _prepare(node, ins, outs, 6)
