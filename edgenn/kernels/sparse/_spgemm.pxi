# Included by _spmm.pyx (and so built on SIMDe too, by _spmm_emu.pyx): the sparse fully
# connected layers of _spgemm.h.

cdef extern from "spmm_table.h" nogil:
    long spg_ws(long K, long N, const sp_row *row)
    void spg_tiled_ld(const float *x, float *y, long M, long K, long N, long ld,
                      const sp_epi *e, const sp_row *row, float *ws)


cdef class SparseGemm(_Sparse):
    """y (M, N) = act(x (M, K) W (K, N) + bias + z) for any M, with W^T (N, K) in CSR:
    row_ptr (N + 1,) over the outputs, col (nnz,) their k in [0, K). row: an SPMV row
    (algo "spmv": gathered dot products, for few rows) or a TABLE row (algo "tiled": y^T =
    W^T x^T on the spmm register tiles, blocks of the row's pixels rows of x packed
    transposed in ws, for many rows). N here is _Sparse's M."""
    cdef readonly long K
    cdef readonly str algo
    cdef readonly object col
    cdef const spv_row *spmv

    def __init__(self, row_ptr, col, val, long K, bias=None, str act="", float lo=0,
                 float hi=0, str row=None):
        row = row or SPMV.best()
        if row in SPMV:
            self.algo, self.spmv = "spmv", &spv_rows[SPMV.index(row)]
        else:
            self.algo, self.tile = "tiled", &sp_rows[row_index(row)]
        col = np.ascontiguousarray(col, np.int32)
        if K < 1 or (col.size and (col.min() < 0 or col.max() >= K)):
            raise ValueError("inconsistent CSR weights: a column outside [0, K)")
        off = col.astype(np.int64) * self.tile.pixels if self.algo == "tiled" else None
        self._setup(row_ptr, off, val, bias, act, lo, hi, row)
        self.K, self.col = K, col

    @property
    def N(self) -> int:
        return self.M

    @property
    def workspace_floats(self) -> int:
        return spg_ws(self.K, self.M, self.tile) if self.algo == "tiled" else 0

    def run(self, const float[:, ::1] x, float[:, ::1] y, const float[:, ::1] z=None,
            float[::1] ws=None, int threads=1):
        """x (M, K) -> y (M, N); z (M, N) residual or None; ws: workspace_floats floats per
        thread; the outputs n split over `threads`."""
        cdef long m = x.shape[0]
        if x.shape[1] != self.K or y.shape[0] != m or y.shape[1] != self.M:
            raise ValueError(f"shapes: x ({x.shape[0]}, {x.shape[1]}), y ({y.shape[0]}, "
                             f"{y.shape[1]}) for W ({self.K}, {self.M})")
        if z is not None and (z.shape[0] != m or z.shape[1] != self.M):
            raise ValueError("residual shape != output shape")
        cdef int t, nt = _threads(threads, self.M)
        cdef long per = self.workspace_floats, need = per * nt, n0, n1, N = self.M
        if need and (ws is None or ws.shape[0] < need):
            raise ValueError(f"workspace of {need} floats needed")
        if m == 0:
            return
        cdef sp_epi e = self.e, part
        e.z = NULL if z is None else &z[0, 0]
        cdef const int[::1] cc = self.col
        cdef const int *colp = &cc[0] if cc.shape[0] else NULL
        cdef float *wsp = &ws[0] if need else NULL
        cdef bint tiled = self.algo == "tiled"
        with nogil:
            for t in prange(nt, num_threads=nt, schedule="static"):
                n0 = _row_start(N, t, nt)          # y's columns n0 .. n1, rows N apart
                n1 = _row_start(N, t + 1, nt)
                part = _part(&e, n0, 1)            # z's columns from n0 too
                if tiled:
                    spg_tiled_ld(&x[0, 0], &y[0, n0], m, self.K, n1 - n0, N, &part,
                                 self.tile, wsp + t * per if wsp != NULL else NULL)
                else:
                    self.spmv.run(&x[0, 0], &y[0, n0], m, self.K, n1 - n0, N, &part, colp)
