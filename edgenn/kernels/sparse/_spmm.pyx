# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _spmm.h: sparse convolutions with their weights in CSR.

    k = SparseConv1x1(row_ptr, col, val, K, S, bias, act, lo, hi, row="spmm_32x1__avx2")
    k.run(x2d, y2d, z2d, ws)   # y (M, S) = act(W x (K, S) + bias + z); ws: workspace_floats
    k = ShiftedSpMM(row_ptr, off, val, P, bias, act, lo, hi, row="spmm_32x1__avx2")
    k.run(xp, yp, zp)          # yp (M, P) = act(sum_j val[j] xp[off[j]:][:P] + bias + zp)
    k = SparseGemm(row_ptr, col, val, K, bias, act, lo, hi, row="spmv_4x8__avx2")
    k.run(x2d, y2d, z2d, ws)   # y (M, N) = act(x (M, K) W + bias + z), W^T (N, K) in CSR

row: a name in the family's tables (spmm_table.h): TABLE (register tiles of pixels) or,
for SparseGemm, SPMV (gathered dot products); rows() / spmv_rows() are those this CPU runs.

Every run takes threads=: the output channels are split over that many OpenMP threads in
ranges of whole pairs (_row_start: a pair of paired rows stays together), each computed by
the same tile code as on one thread, so the result has the same bits on any count; the
workspace (workspace_floats, when there is one) is then needed once per thread.
"""
from collections import namedtuple

import numpy as np
from cython.parallel cimport prange

from edgenn.kernels.native.tables import Table

include "_cpu.pxi"

include "_epilogue.pxi"

cdef extern from "_spmm.h" nogil:
    unsigned SP_ACTS
    ctypedef struct sp_epi:
        const int *row_ptr
        const long *off
        const float *val
        const float *bias
        const float *z
        int act
        float lo, hi
        int paired
    int SP_ALIGN
    ctypedef struct sp_row:
        const char *name
        int isa
        long pixels
        void *tile
    long sp_tile(const sp_row *row)
    void spmm_run(const float *x, float *y, long M, long K, long S, const sp_epi *e,
                  const long *off_tail, const sp_row *row, float *ws)
    void spmm_shifted(const float *xp, float *yp, long M, long P, const sp_epi *e,
                      const sp_row *row)

cdef extern from "spmm_table.h" nogil:
    ctypedef void (*spv_fn)(const float *x, float *y, long M, long K, long N, long ld,
                            const sp_epi *e, const int *col) noexcept
    ctypedef struct spv_row:
        const char *name
        int isa
        spv_fn run
    const sp_row sp_rows[]
    const spv_row spv_rows[]
    int SP_ROW_COUNT, SPV_ROW_COUNT

ACTIVATIONS = _activations(SP_ACTS)       # a clamp or nothing


# A row of the tile table (sp_rows): name, isa (the tier it needs), pixels (the tile's
# width; the portable row's blocks), vector (a SIMD tile: else the portable loops), usable
Row = namedtuple("Row", "name isa pixels vector usable")
# A row of the spmv table (spv_rows): name, isa, usable
SpmvRow = namedtuple("SpmvRow", "name isa usable")
TABLE = Table("spmm", tuple(
    Row(sp_rows[i].name.decode(), edgenn_isa_name(sp_rows[i].isa).decode(), sp_rows[i].pixels,
        sp_rows[i].tile != NULL, bool(edgenn_row_usable(sp_rows[i].isa)))
    for i in range(SP_ROW_COUNT)))
SPMV = Table("spmv", tuple(
    SpmvRow(spv_rows[i].name.decode(), edgenn_isa_name(spv_rows[i].isa).decode(),
            bool(edgenn_row_usable(spv_rows[i].isa))) for i in range(SPV_ROW_COUNT)))
ROWS, SPMV_ROWS = TABLE.rows, SPMV.rows
rows, row_index, best_row = TABLE.usable, TABLE.index, TABLE.best
spmv_rows = SPMV.usable


def tile_pixels(str row) -> int:
    """Pixels a row's vector tile needs a run's pixel count to be a multiple of (0: the
    portable loops take any)."""
    return sp_tile(&sp_rows[row_index(row)])


cdef inline long _row_start(long M, int t, int nt) noexcept nogil:
    """First output row of thread t of nt (t = nt: M): whole pairs of rows, in order. Its
    results are assigned in the prange body, which makes them each thread's own."""
    return min(M, 2 * (t * ((M + 1) // 2) // nt))


cdef inline sp_epi _part(const sp_epi *e, long m0, long ldz) noexcept nogil:
    """e for the output rows from m0 on (its z rows ldz floats apart)."""
    cdef sp_epi p = e[0]
    p.row_ptr = e.row_ptr + m0
    if e.bias != NULL:
        p.bias = e.bias + m0
    if e.z != NULL:
        p.z = e.z + m0 * ldz
    return p


cdef inline int _threads(int threads, long M) noexcept nogil:
    return max(1, min(threads, (M + 1) // 2))


cdef class _Sparse:
    """CSR weights (row_ptr int32 (M+1,), off int64 (nnz,) or None when the kernel reads
    none, val float32 (nnz,)), bias float32 (M,) or None, the fused activation ("" /
    "Relu" / "Clip" with [lo, hi])."""
    cdef readonly object row_ptr, off, val, bias
    cdef readonly long M
    cdef readonly bint paired
    cdef readonly str row
    cdef sp_epi e
    cdef const sp_row *tile

    cdef _setup(self, row_ptr, off, val, bias, str act, float lo, float hi, str row):
        if act not in ACTIVATIONS:
            raise ValueError(f"activation {act!r} not fused here")
        self.row_ptr = np.ascontiguousarray(row_ptr, np.int32)
        self.off = np.ascontiguousarray(np.zeros(0) if off is None else off, np.int64)
        self.val = np.ascontiguousarray(val, np.float32)
        self.M = self.row_ptr.shape[0] - 1
        if self.M < 1 or self.row_ptr[0] != 0 \
                or self.row_ptr[len(self.row_ptr) - 1] != self.val.shape[0] \
                or (off is not None and self.off.shape[0] != self.val.shape[0]) \
                or np.any(np.diff(self.row_ptr) < 0):
            raise ValueError("inconsistent CSR weights")
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        if self.bias is not None and self.bias.shape[0] != self.M:
            raise ValueError("bias length != M")
        self.row = row
        cdef const int[::1] rp = self.row_ptr
        cdef const long[::1] oo = self.off
        cdef const float[::1] vv = self.val
        cdef const float[::1] bb
        self.e.row_ptr = &rp[0]
        self.e.off = &oo[0] if oo.shape[0] else NULL
        self.e.val = &vv[0] if vv.shape[0] else NULL
        self.e.bias = NULL
        if self.bias is not None:
            bb = self.bias
            self.e.bias = &bb[0]
        self.e.act = ACTIVATION_NAMES.index(act)
        self.e.lo = 0 if act == "Relu" else lo
        self.e.hi = np.inf if act == "Relu" else hi
        self.paired = off is not None and _pairs_share_positions(self.row_ptr, self.off)
        self.e.paired = self.paired


def _pairs_share_positions(row_ptr, off) -> bool:
    """Rows 2i and 2i + 1 (all pairs; an odd last row aside) have the same nonzero count
    and offsets, as pattern pruning by output-channel pairs leaves them."""
    counts = np.diff(row_ptr)
    whole = len(counts) // 2 * 2
    if whole == 0 or not np.array_equal(counts[0:whole:2], counts[1:whole:2]):
        return False
    row = np.repeat(np.arange(len(counts)), counts)
    return bool(np.array_equal(off[(row % 2 == 0) & (row < whole)], off[row % 2 == 1]))


cdef class SparseConv1x1(_Sparse):
    """A 1x1 conv on images of S pixels: W (M, K) in CSR with column indices `col`."""
    cdef readonly long K, S
    cdef readonly object off_tail

    def __init__(self, row_ptr, col, val, long K, long S, bias=None, str act="",
                 float lo=0, float hi=0, str row=None):
        row = row or best_row()
        self.tile = &sp_rows[row_index(row)]
        col = np.ascontiguousarray(col, np.int64)
        if col.size and (col.min() < 0 or col.max() >= K):
            raise ValueError("inconsistent CSR weights: a column outside [0, K)")
        self._setup(row_ptr, col * S, val, bias, act, lo, hi, row)
        self.K, self.S = K, S
        self.off_tail = np.ascontiguousarray(col * max(sp_tile(self.tile), 1))

    @property
    def workspace_floats(self) -> int:
        cdef long t = sp_tile(self.tile)
        return (self.K + 2 * self.M) * t + (SP_ALIGN if t else 0)

    def run(self, const float[:, ::1] x, float[:, ::1] y, const float[:, ::1] z=None,
            float[::1] ws=None, int threads=1):
        """x (K, S) -> y (M, S); z (M, S) residual or None; ws: workspace_floats floats per
        thread."""
        if x.shape[0] != self.K or x.shape[1] != self.S or y.shape[0] != self.M \
                or y.shape[1] != self.S:
            raise ValueError(f"shapes: x ({x.shape[0]}, {x.shape[1]}), y ({y.shape[0]}, "
                             f"{y.shape[1]}) for W ({self.M}, {self.K}) on {self.S} pixels")
        if z is not None and (z.shape[0] != self.M or z.shape[1] != self.S):
            raise ValueError("residual shape != output shape")
        cdef int t, nt = _threads(threads, self.M)
        cdef long per = self.workspace_floats, need = per * nt, m0, m1
        if need and (ws is None or ws.shape[0] < need):
            raise ValueError(f"workspace of {need} floats needed")
        cdef sp_epi e = self.e, part
        e.z = NULL if z is None else &z[0, 0]
        cdef const long[::1] ot = self.off_tail
        cdef const long *otp = &ot[0] if ot.shape[0] else NULL
        cdef float *wsp = &ws[0] if need else NULL
        cdef long S = self.S, K = self.K
        if S == 0:
            return
        with nogil:
            if nt == 1:
                spmm_run(&x[0, 0], &y[0, 0], self.M, K, S, &e, otp, self.tile, wsp)
            else:
                for t in prange(nt, num_threads=nt, schedule="static"):
                    m0 = _row_start(self.M, t, nt)
                    m1 = _row_start(self.M, t + 1, nt)
                    part = _part(&e, m0, S)
                    spmm_run(&x[0, 0], &y[m0, 0], m1 - m0, K, S, &part, otp, self.tile,
                             wsp + t * per if wsp != NULL else NULL)


cdef class ShiftedSpMM(_Sparse):
    """Tap-shifted rows of one padded, flattened image: yp (M, P) = act(sum over the
    nonzeros j of row m of val[j] * xp[off[j] : off[j] + P] + bias + zp). P must be a whole
    number of tiles (tile_pixels(row)); xp must hold max(off) + P floats."""
    cdef readonly long P, reach

    def __init__(self, row_ptr, off, val, long P, bias=None, str act="", float lo=0,
                 float hi=0, str row=None):
        row = row or best_row()
        self.tile = &sp_rows[row_index(row)]
        off = np.ascontiguousarray(off, np.int64)
        if off.size and off.min() < 0:
            raise ValueError("inconsistent CSR weights: a negative offset")
        self._setup(row_ptr, off, val, bias, act, lo, hi, row)
        cdef long t = sp_tile(self.tile)
        if P < 1 or (t and P % t):
            raise ValueError(f"P = {P} is not a whole number of {t}-pixel tiles")
        self.P = P
        self.reach = (int(off.max()) if off.size else 0) + P

    def run(self, const float[::1] xp, float[:, ::1] yp, const float[:, ::1] zp=None,
            int threads=1):
        if xp.shape[0] < self.reach or yp.shape[0] != self.M or yp.shape[1] != self.P:
            raise ValueError(f"shapes: xp {xp.shape[0]} floats (needs {self.reach}), yp "
                             f"({yp.shape[0]}, {yp.shape[1]}) for ({self.M}, {self.P})")
        if zp is not None and (zp.shape[0] != self.M or zp.shape[1] != self.P):
            raise ValueError("residual shape != output shape")
        cdef sp_epi e = self.e, part
        e.z = NULL if zp is None else &zp[0, 0]
        cdef int t, nt = _threads(threads, self.M)
        cdef long m0, m1, P = self.P
        with nogil:
            if nt == 1:
                spmm_shifted(&xp[0], &yp[0, 0], self.M, P, &e, self.tile)
            else:
                for t in prange(nt, num_threads=nt, schedule="static"):
                    m0 = _row_start(self.M, t, nt)
                    m1 = _row_start(self.M, t + 1, nt)
                    part = _part(&e, m0, P)
                    spmm_shifted(&xp[0], &yp[m0, 0], m1 - m0, P, &part, self.tile)


include "_spgemm.pxi"
