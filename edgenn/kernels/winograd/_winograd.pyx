# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Winograd F(m x m, 3 x 3) input and output transforms, in C (_winograd.h: AVX2+FMA over 8
tiles or ARM64 NEON over 4 when the CPU has it, else a portable scalar build of the same
code).

Layouts (see _winograd.h and winograd.py): x (N, C, H, W); V (alpha^2, C, Tb);
M (alpha^2, K, Tb); y, z (N, K, OH, OW); a block is the tile rows [row0, row0 + nrows) of
all images, Tb = nrows * tw tiles.

WinogradConv: the whole conv in one call, the alpha^2 GEMMs on edgenn's packed sgemm
(_winograd_run.h)."""
from collections import namedtuple

import numpy as np
cimport numpy as cnp

from edgenn.kernels.native.tables import Table

cnp.import_array()

include "_epilogue.pxi"

cdef extern from "_winograd.h" nogil:
    unsigned WINO_ACTS
    ctypedef struct wino_row:
        const char *name
        int isa
    const wino_row wino_rows[]
    int WINO_ROW_COUNT
    void wino_input(const wino_row *row, int m, const float *x, int C, int H, int W, int ph,
                    int pw, int th, int tw, int twp, int row0, int nrows,
                    float *V, float *P, float *xp, const float *zeros)
    void wino_output(const wino_row *row, int m, const float *M, float *y, int K, int OH,
                     int OW, int th, int tw, int twp, int row0, int nrows,
                     const float *bias, const float *z, int act, float p0, float p1,
                     float *Q, float *rowbuf)

include "_cpu.pxi"


ACTIVATIONS = _activations(WINO_ACTS)   # fused in the output transform (_winograd.h)


# the transforms' table (_winograd.h's wino_rows): one row per instruction set
Row = namedtuple("Row", "name isa usable")
TABLE = Table("winograd transforms", tuple(
    Row(wino_rows[i].name.decode(), edgenn_isa_name(wino_rows[i].isa).decode(),
        bool(edgenn_row_usable(wino_rows[i].isa))) for i in range(WINO_ROW_COUNT)))
ROWS, rows, row_index, best_row = TABLE.rows, TABLE.usable, TABLE.index, TABLE.best


cdef const wino_row *_row(row) except NULL:
    return &wino_rows[row_index(best_row() if row is None else row)]


def input_transform(int m, const float[:, :, :, ::1] x, int ph, int pw, int th, int tw,
                    int twp, int row0, int nrows, float[::1] V, float[::1] P, float[::1] xp,
                    const float[::1] zeros, row=None):
    """x (N, C, H, W) -> V (alpha^2, C, nrows*tw), flat; scratch P, xp, zeros (see .h);
    on the transforms' row `row` (None: the best this CPU runs)."""
    cdef const wino_row *r = _row(row)
    with nogil:
        wino_input(r, m, &x[0, 0, 0, 0], x.shape[1], x.shape[2], x.shape[3], ph, pw, th, tw,
                   twp, row0, nrows, &V[0], &P[0], &xp[0], &zeros[0])


def output_transform(int m, const float[::1] M, float[:, :, :, ::1] y, int th, int tw,
                     int twp, int row0, int nrows, const float[::1] bias,
                     const float[:, :, :, ::1] z, int act, float p0, float p1,
                     float[::1] Q, float[::1] rowbuf, row=None):
    """M (alpha^2, K, nrows*tw), flat -> y (N, K, OH, OW) = act(A^T m A + bias + z);
    bias and z may be None; on the transforms' row `row` (None: the best here)."""
    cdef const wino_row *r = _row(row)
    cdef const float *bp = NULL
    cdef const float *zp = NULL
    if bias is not None:
        bp = &bias[0]
    if z is not None:
        zp = &z[0, 0, 0, 0]
    with nogil:
        wino_output(r, m, &M[0], &y[0, 0, 0, 0], y.shape[1], y.shape[2], y.shape[3], th, tw,
                    twp, row0, nrows, bp, zp, act, p0, p1, &Q[0], &rowbuf[0])


cdef extern from "sgemm_table.h" nogil:
    ctypedef struct sg_row:
        int isa
    const sg_row sg_rows[]
    int SG_ROW_COUNT


cdef extern from "_winograd_run.h" nogil:
    ctypedef struct wino_plan:
        int m, C, H, W, K, OH, OW, ph, pw
        int th, tw, twp, rows_total, nrows
        const float *u
        long usize
        const float *bias
        int act
        float p0, p1
        int gemm_row
        int transform_row
        const float *zeros
    ctypedef struct wino_layout:
        long M, xp, kept, V, P, Q, rowbuf, gws, work
    int WINO_MAX_THREADS
    void wino_run(const wino_plan *p, const wino_layout *l, const float *x, const float *z,
                  float *y, float *kept, float *work, int threads)


cdef class WinogradConv:
    """A whole Winograd conv in one C call (_winograd_run.h): per block of tile rows the
    input transform, the alpha^2 GEMMs on edgenn's packed sgemm, table row `gemm_row`
    (_sgemm.row_index; U prepacked by _sgemm.pack_a_batch), the output transform +
    epilogue; `threads` OpenMP threads; the transforms on their row `transform_row` (a
    name, None: the best this CPU runs).

    run(x, y, z, kept, work): x (N, C, H, W), y / z (N, K, OH, OW) float32 C-contiguous (z
    may be None); kept: float32 of >= kept_floats, zero-filled once and kept between calls;
    work: float32 of >= work_floats (every thread's share of each)."""
    cdef wino_plan plan
    cdef wino_layout lay
    cdef int threads
    cdef object keep
    cdef readonly long kept_floats, work_floats
    cdef long n, c, h, w, k, oh, ow

    def __init__(self, int m, shape_x, shape_y, int ph, int pw, int nrows, packed_u,
                 long usize, bias, int act, float p0, float p1, int gemm_row, long gws_floats,
                 int threads=1, transform_row=None):
        self.n, self.c, self.h, self.w = shape_x
        _, self.k, self.oh, self.ow = shape_y
        alpha = m + 2
        th, tw = (self.oh + m - 1) // m, (self.ow + m - 1) // m   # (cdivision: no -(-a // b))
        twp = (tw + 7) // 8 * 8
        if not (0 <= gemm_row < SG_ROW_COUNT and edgenn_row_usable(sg_rows[gemm_row].isa)):
            raise ValueError(f"gemm_row {gemm_row}: not a row of the sgemm table this CPU runs")
        if not 1 <= threads <= WINO_MAX_THREADS:
            raise ValueError(f"threads must be 1..{WINO_MAX_THREADS}")
        u = np.require(packed_u, np.float32, requirements="C")
        if u.size < alpha * alpha * usize:
            raise ValueError("packed U too small")
        b = None if bias is None else np.require(bias, np.float32, requirements="C")
        if b is not None and b.size != self.k:
            raise ValueError("bias must have K values")
        zeros = np.zeros(alpha * twp, np.float32)
        self.keep = (u, b, zeros)
        cdef const float[::1] uv = u.ravel()       # (read-only weights: a mapped .enn)
        cdef const float[::1] zv = zeros
        cdef const float[::1] bv
        self.plan.m, self.plan.C, self.plan.H, self.plan.W = m, self.c, self.h, self.w
        self.plan.K, self.plan.OH, self.plan.OW, self.plan.ph, self.plan.pw = \
            self.k, self.oh, self.ow, ph, pw
        self.plan.th, self.plan.tw, self.plan.twp = th, tw, twp
        self.plan.rows_total, self.plan.nrows = self.n * th, nrows
        self.plan.u, self.plan.usize = &uv[0], usize
        self.plan.bias = NULL
        if b is not None:
            bv = b
            self.plan.bias = &bv[0]
        self.plan.act, self.plan.p0, self.plan.p1 = act, p0, p1
        self.plan.gemm_row = gemm_row
        self.plan.transform_row = row_index(best_row() if transform_row is None
                                            else transform_row)
        self.plan.zeros = &zv[0]
        self.threads = threads
        a2 = alpha * alpha
        # one thread's slices, floats (M: +8, the output pass reads ahead)
        self.lay.M, self.lay.xp = 0, a2 * self.k * nrows * tw + 8
        self.lay.kept = self.lay.xp + twp * m + alpha
        self.lay.V, self.lay.P = 0, a2 * self.c * nrows * tw
        self.lay.Q = self.lay.P + (nrows * m + 2) * alpha * twp
        self.lay.rowbuf = self.lay.Q + m * alpha * twp
        self.lay.gws = self.lay.rowbuf + twp * m
        self.lay.work = self.lay.gws + gws_floats
        self.kept_floats, self.work_floats = threads * self.lay.kept, threads * self.lay.work

    def run(self, cnp.ndarray x, cnp.ndarray y, cnp.ndarray z, cnp.ndarray kept,
            cnp.ndarray work):
        cdef int flags = cnp.NPY_ARRAY_C_CONTIGUOUS
        cdef cnp.ndarray buf
        cdef const float *zp = NULL
        for arr, shape in ((x, (self.n, self.c, self.h, self.w)),
                           (y, (self.n, self.k, self.oh, self.ow)),
                           (z, (self.n, self.k, self.oh, self.ow))):
            if arr is None:
                continue
            buf = arr
            if not (cnp.PyArray_TYPE(buf) == cnp.NPY_FLOAT32
                    and cnp.PyArray_CHKFLAGS(buf, flags) and np.shape(buf) == shape):
                raise ValueError(f"WinogradConv: float32 C-contiguous {shape} required")
        if not cnp.PyArray_CHKFLAGS(y, cnp.NPY_ARRAY_WRITEABLE):
            raise ValueError("WinogradConv: y must be writeable")
        for buf, need, name in ((kept, self.kept_floats, "kept"), (work, self.work_floats, "work")):
            if not (cnp.PyArray_TYPE(buf) == cnp.NPY_FLOAT32
                    and cnp.PyArray_CHKFLAGS(buf, flags)
                    and cnp.PyArray_CHKFLAGS(buf, cnp.NPY_ARRAY_WRITEABLE)
                    and cnp.PyArray_SIZE(buf) >= need):
                raise ValueError(f"WinogradConv: scratch {name!r} too small")
        if self.n == 0 or self.k == 0 or self.oh == 0 or self.ow == 0:
            return
        if z is not None:
            zp = <const float *>cnp.PyArray_DATA(z)
        cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
        cdef float *yp = <float *>cnp.PyArray_DATA(y)
        cdef float *kp = <float *>cnp.PyArray_DATA(kept)
        cdef float *wp = <float *>cnp.PyArray_DATA(work)
        with nogil:
            wino_run(&self.plan, &self.lay, xp, zp, yp, kp, wp, self.threads)
