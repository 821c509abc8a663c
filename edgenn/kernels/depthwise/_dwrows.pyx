# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _dwrows.h: depthwise convolution on NCHW planes, row pixels in lanes.

    row = rows()[-1].name                # a row of the table (_dwrows.h's dwr_rows)
    hp, wq = plane(x.shape, y.shape, (kh, kw), strides, pads, dilations, row)
    P = np.zeros((threads, hp * sw * wq), np.float32)     # borders stay zero
    run(x, w, bias, z, y, P, kh, kw, strides, pads, dilations, act, lo, hi, row)
"""
from collections import namedtuple

import numpy as np
from cython.parallel cimport prange

from edgenn.kernels.native.tables import Table

include "_cpu.pxi"

include "_epilogue.pxi"

cdef extern from "_dwrows.h" nogil:
    unsigned DWR_ACTS
    int DWR_MAX_TAPS
    ctypedef struct dwr_args:
        const float *x
        const float *w
        const float *bias
        const float *z
        float *y
        long N, C, H, W, KH, KW, SH, SW, DH, DW, PT, PL, OH, OW
        long Hp, Wq
        int act
        float lo, hi
    void dwr_plane(const dwr_args *a, long L, long *hp, long *wq)
    ctypedef void (*dwr_planes_fn)(const dwr_args *a, float *P, long p0, long p1) noexcept
    ctypedef struct dwr_row:
        const char *name
        int isa
        long lanes
        dwr_planes_fn planes
    const dwr_row dwr_rows[]
    int DWR_ROW_COUNT

# A row of the table (_dwrows.h's dwr_rows): name, isa (the tier it needs), lanes, usable
# (this CPU runs it; every row in the SIMDe-emulated build)
Row = namedtuple("Row", "name isa lanes usable")
TABLE = Table("depthwise_rows", tuple(
    Row(dwr_rows[i].name.decode(), edgenn_isa_name(dwr_rows[i].isa).decode(),
        dwr_rows[i].lanes, bool(edgenn_row_usable(dwr_rows[i].isa))) for i in range(DWR_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index = TABLE.usable, TABLE.index
ACTIVATIONS = _activations(DWR_ACTS)       # a clamp or nothing
MAX_TAPS = DWR_MAX_TAPS


cdef dwr_args _geometry(tuple xs, tuple ys, long kh, long kw, strides, pads, dilations):
    cdef dwr_args a
    a.N, a.C, a.H, a.W = xs
    a.OH, a.OW = ys[2], ys[3]
    a.KH, a.KW = kh, kw
    a.SH, a.SW = strides
    a.PT, a.PL = pads
    a.DH, a.DW = dilations
    if not (a.SH > 0 and a.SW > 0 and a.DH > 0 and a.DW > 0 and a.PT >= 0 and a.PL >= 0
            and 0 < kh * kw <= DWR_MAX_TAPS and ys[0] == a.N and ys[1] == a.C):
        raise ValueError("depthwise_rows: unsupported geometry")
    return a


def plane(tuple xs, tuple ys, long kh, long kw, strides, pads, dilations, str row):
    """-> (Hp, Wq): one thread's phase plane for `row` is Hp x SW x Wq floats."""
    cdef dwr_args a = _geometry(xs, ys, kh, kw, strides, pads, dilations)
    cdef long hp, wq
    dwr_plane(&a, ROWS[row_index(row)].lanes, &hp, &wq)
    return int(hp), int(wq)


def run(const float[:, :, :, ::1] x, const float[:, ::1] w, bias, z,
        float[:, :, :, ::1] y, float[:, ::1] P, long kh, long kw, strides, pads, dilations,
        str act, float lo, float hi, str row):
    """y = act(depthwise(x, w) + bias (+ z)); w (C, kh * kw); bias (C,) or None; z like
    y or None; P (threads, Hp * SW * Wq) zero-filled once (plane()); the planes split over
    P's rows (OpenMP threads)."""
    cdef const dwr_row *r = &dwr_rows[row_index(row)]
    cdef tuple xs = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
    cdef tuple ys = (y.shape[0], y.shape[1], y.shape[2], y.shape[3])
    cdef dwr_args a = _geometry(xs, ys, kh, kw, strides, pads, dilations)
    cdef long hp, wq
    dwr_plane(&a, r.lanes, &hp, &wq)
    a.Hp, a.Wq = hp, wq
    if P.shape[1] < hp * a.SW * wq or w.shape[0] != a.C or w.shape[1] != kh * kw:
        raise ValueError("depthwise_rows: scratch or weights do not match")
    cdef const float[::1] bv
    cdef const float[:, :, :, ::1] zv
    a.x, a.w, a.y = &x[0, 0, 0, 0], &w[0, 0], &y[0, 0, 0, 0]
    a.bias = NULL
    a.z = NULL
    if bias is not None:
        bv = bias
        if bv.shape[0] != a.C:
            raise ValueError("depthwise_rows: one bias per channel")
        a.bias = &bv[0]
    if z is not None:
        zv = z
        if (zv.shape[0], zv.shape[1], zv.shape[2], zv.shape[3]) != ys:
            raise ValueError("depthwise_rows: z must have the output's shape")
        a.z = &zv[0, 0, 0, 0]
    a.act, a.lo, a.hi = ACTIVATION_NAMES.index(act), lo, hi
    cdef long planes = a.N * a.C
    cdef int t, nt = max(1, min(P.shape[0], planes))
    if planes == 0 or a.OH == 0 or a.OW == 0:
        return
    with nogil:
        if nt == 1:
            r.planes(&a, &P[0, 0], 0, planes)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                r.planes(&a, &P[t, 0], t * planes // nt, (t + 1) * planes // nt)
