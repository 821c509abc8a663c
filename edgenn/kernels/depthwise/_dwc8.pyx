# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Depthwise 2-D convolution and pooling, 8 (AVX2) or 16 (AVX-512F) channels per SIMD
vector: the C loops of _dwc8.h.

dwc8(x, w8, b8, off, z, y, Q, obuf, ...) computes y = act(depthwise(x) + b + z) for the
whole layer on a row of the family's table (rows(): depthwise_c<lanes>__<isa>; depthwise.py
packs the operands for the row's lanes); pool8(...) MaxPool or
AveragePool (pool.py); maxpool_tiles_nchw(...) MaxPool with kernel == stride, no padding,
on NCHW planes directly (_pool_tiles.h); maxpool_bytes(...) MaxPool of uint8 / int8
planes (_pool_bytes.h)."""

from collections import namedtuple

from cython.parallel cimport prange
cimport numpy as cnp

from edgenn.kernels.native.tables import Table

cnp.import_array()


include "_cpu.pxi"

cdef extern from "_pool_tiles.h" nogil:
    ctypedef void (*maxpool_tiles_fn)(const float *x, float *y, long P, long H, long W, int kh,
                                      int kw, float *row) noexcept
    ctypedef void (*global_mean_fn)(const float *x, float *y, long R, long S) noexcept
    ctypedef struct pool_row:
        const char *name
        int isa
        maxpool_tiles_fn maxpool_tiles
        global_mean_fn global_mean_rows
    const pool_row pool_rows[]
    int POOL_ROW_COUNT

cdef extern from "_pool_bytes.h" nogil:
    ctypedef unsigned char uint8_t
    ctypedef signed char int8_t
    void maxpool_u8(const uint8_t *x, uint8_t *y, long P, long H, long W, long OH, long OW,
                    int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, uint8_t *row)
    void maxpool_s8(const int8_t *x, int8_t *y, long P, long H, long W, long OH, long OW,
                    int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int8_t *row)
    long maxpool_bytes_row(long W, long OW, int kw, int sw, int pw, int dw)

include "_epilogue.pxi"

cdef extern from "_dwc8.h" nogil:
    unsigned DWC_ACTS, DWC_EXPAND_ACTS
    ctypedef struct dwc8_expand:
        int K
        const float *w
        const float *b
        int mode
        float p0, p1
    ctypedef struct dwc8_geom:
        int kind
        const float *cnt
        int N, C, H, W, OH, OW, T
        int sh, sw, ph, pw, Hp, Wp
        int mode
        float p0, p1
        int has_z
        int L
        const dwc8_expand *ex
    ctypedef struct dwc_row:
        const char *name
        int isa
        int lanes
        void *group
    const dwc_row dwc_rows[]
    int DWC_ROW_COUNT
    int dwc8_run(const dwc_row *row, const float *x, const float *w8, const float *b8,
                 const long *off, const float *z, float *y, float *Q, float *obuf,
                 const dwc8_geom *g)
    int dwc8_run_share(const dwc_row *row, const float *x, const float *w8, const float *b8,
                       const long *off, const float *z, float *y, float *Q, float *obuf,
                       const dwc8_geom *g, int t, int nt)
    int dwc8_run_rows(const dwc_row *row, const float *x, const float *w8, const float *b8,
                      const long *off, const float *z, float *y, float *Q, float *obuf,
                      const dwc8_geom *g, int t, int nt)
    long dwc8_obuf_floats(int OH, int OW, int L)

ACTIVATIONS = _activations(DWC_ACTS)                   # _dwc8.h's
EXPAND_ACTIVATIONS = _activations(DWC_EXPAND_ACTS)     # the fused 1x1 expansion's
# The NCHW pooling loops' table (_pool_tiles.h's pool_rows): name, isa, usable (this CPU
# runs it; every row in the SIMDe-emulated build, _dwc8_emu)
PoolRow = namedtuple("PoolRow", "name isa usable")
POOL_TABLE = Table("pool_nchw", tuple(
    PoolRow(pool_rows[i].name.decode(), edgenn_isa_name(pool_rows[i].isa).decode(),
            bool(edgenn_row_usable(pool_rows[i].isa))) for i in range(POOL_ROW_COUNT)))
pool_rows_usable = POOL_TABLE.usable


cdef const pool_row *_pool_row(str row) except NULL:
    """The pooling table's row `row` (None: the best this CPU runs)."""
    return &pool_rows[POOL_TABLE.index(row or POOL_TABLE.best())]

# A row of the table (_dwc8.h's dwc_rows): name, isa (the tier it needs), lanes (channels
# per group), vector (a SIMD body: else the portable loops), usable (this CPU runs it;
# every row in the SIMDe-emulated build, _dwc8_emu)
Row = namedtuple("Row", "name isa lanes vector usable")
TABLE = Table("depthwise", tuple(
    Row(dwc_rows[i].name.decode(), edgenn_isa_name(dwc_rows[i].isa).decode(),
        dwc_rows[i].lanes, dwc_rows[i].group != NULL, bool(edgenn_row_usable(dwc_rows[i].isa)))
    for i in range(DWC_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index = TABLE.usable, TABLE.index


def best_row(int lanes) -> str:
    """The best row of `lanes` lanes this CPU runs (a portable one at worst)."""
    names = [r.name for r in rows() if r.lanes == lanes]
    return names[len(names) - 1]     # (no negative index: wraparound is off here)


def obuf_floats(int OH, int OW, int L=8) -> int:
    """Floats of dwc8's output buffer per thread: a row (OW, L), or a small plane's whole
    (OH*OW, L) (unpacked flat, _dwc8.h)."""
    return dwc8_obuf_floats(OH, OW, L)


def pool8(const float[:, :, :, ::1] x, const long[::1] off, const float[:, ::1] cnt,
          float[:, :, :, ::1] y, float[:, ::1] Q, float[:, ::1] obuf, int sh, int sw, int ph,
          int pw, int Hp, int Wp, bint is_max, str row):
    """MaxPool (is_max; Q pre-filled with -inf) or AveragePool (Q zeroed; cnt (OH, OW) the
    number of counted cells of each window): x (N, C, H, W) -> y (N, C, OH, OW). Q
    (threads, >= Hp*Wp*8), obuf (threads, >= OW*8): one row per OpenMP thread; row: a row of
    8 lanes (best_row(8)); threads > 1
    take even shares of the output rows, every channel group (the rows a share reads
    packed into its own Q)."""
    cdef dwc8_geom g
    g.ex = NULL
    g.kind = 1 if is_max else 2
    g.cnt = &cnt[0, 0]
    g.N, g.C, g.H, g.W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    g.OH, g.OW, g.T = y.shape[2], y.shape[3], off.shape[0]
    g.sh, g.sw, g.ph, g.pw, g.Hp, g.Wp = sh, sw, ph, pw, Hp, Wp
    g.mode, g.p0, g.p1, g.has_z, g.L = 0, 0, 0, 0, 8
    if y.shape[0] != g.N or y.shape[1] != g.C or cnt.shape[0] != g.OH or \
            cnt.shape[1] != g.OW or Q.shape[0] < 1 or obuf.shape[0] < Q.shape[0] or \
            Q.shape[1] < <long>Hp * Wp * 8 or obuf.shape[1] < <long>g.OW * 8:
        raise ValueError("pool8: y, counts or scratch do not match the layer")
    cdef const dwc_row *r = &dwc_rows[row_index(row)]
    if r.lanes != 8:
        raise ValueError(f"pool8: {row} is not a row of 8 lanes")
    cdef int t, nt = max(1, min(Q.shape[0], g.OH))
    if y.size == 0:
        return
    with nogil:
        if nt == 1:
            dwc8_run(r, &x[0, 0, 0, 0], NULL, NULL, &off[0], NULL, &y[0, 0, 0, 0], &Q[0, 0],
                     &obuf[0, 0], &g)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                dwc8_run_rows(r, &x[0, 0, 0, 0], NULL, NULL, &off[0], NULL, &y[0, 0, 0, 0],
                              &Q[t, 0], &obuf[t, 0], &g, t, nt)


def maxpool_tiles_nchw(const float[:, :, ::1] x, float[:, :, ::1] y, int kh, int kw,
                       float[::1] row, str build=None):
    """MaxPool with kernel == stride, no padding (_pool_tiles.h): x (P, H, W) -> y (P,
    H // kh, W // kw); row: scratch of W floats; build: a row of POOL_TABLE (None: the
    best this CPU runs)."""
    if y.shape[0] != x.shape[0] or y.shape[1] != x.shape[1] // kh or \
            y.shape[2] != x.shape[2] // kw or row.shape[0] < x.shape[2] or kh < 1 or kw < 1:
        raise ValueError("maxpool_tiles_nchw: shapes do not match")
    cdef const pool_row *p = _pool_row(build)
    if x.shape[0] == 0 or y.shape[1] == 0 or y.shape[2] == 0:
        return
    with nogil:
        p.maxpool_tiles(&x[0, 0, 0], &y[0, 0, 0], x.shape[0], x.shape[1], x.shape[2], kh, kw,
                        &row[0])


def maxpool_bytes_scratch(long W, long OW, int kw, int sw, int pw, int dw):
    """Bytes of row scratch maxpool_bytes needs."""
    return maxpool_bytes_row(W, OW, kw, sw, pw, dw)


def maxpool_bytes(const unsigned char[:, :, ::1] x, unsigned char[:, :, ::1] y, bint signed,
                  int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                  unsigned char[::1] row, int threads=1):
    """MaxPool of quantized planes (_pool_bytes.h): x (P, H, W) -> y (P, OH, OW), bytes read
    as int8 when `signed` else uint8 (pass int8 arrays as .view(np.uint8)); any window
    (kernel, strides, pads begin, dilations; the output size decides the end pads).
    threads > 1: OpenMP threads take even shares of the planes, each with its part of
    `row` (threads x maxpool_bytes_scratch bytes)."""
    cdef long P = x.shape[0], H = x.shape[1], W = x.shape[2], OH = y.shape[1], OW = y.shape[2]
    if y.shape[0] != P or min(kh, kw, sh, sw, dh, dw) < 1 or ph < 0 or pw < 0:
        raise ValueError("maxpool_bytes: bad geometry")
    if P == 0 or OH == 0 or OW == 0:
        return
    if H == 0 or W == 0:
        raise ValueError("maxpool_bytes: empty input planes")
    cdef long rb = maxpool_bytes_row(W, OW, kw, sw, pw, dw), p0, p1
    cdef int t, nt = max(1, min(threads, P))
    if row.shape[0] < rb * nt:
        raise ValueError("maxpool_bytes: row scratch too small")
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            p0 = P * t // nt
            p1 = P * (t + 1) // nt
            if signed:
                maxpool_s8(<const int8_t *>&x[p0, 0, 0], <int8_t *>&y[p0, 0, 0], p1 - p0, H,
                           W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw,
                           <int8_t *>&row[t * rb])
            else:
                maxpool_u8(&x[p0, 0, 0], &y[p0, 0, 0], p1 - p0, H, W, OH, OW, kh, kw, sh,
                           sw, ph, pw, dh, dw, &row[t * rb])


def global_pool(const float[:, ::1] x, float[::1] y, bint is_max, str build=None,
                int threads=1):
    """x (R, S) -> y (R,): mean (accumulated in double, four lanes; _pool_tiles.h) or max
    of each row; build: a row of POOL_TABLE (None: the best this CPU runs). threads > 1:
    OpenMP threads take even shares of the rows (each row's sum as on one thread)."""
    cdef Py_ssize_t R = x.shape[0], S = x.shape[1]
    if y.shape[0] != R:
        raise ValueError("global_pool: one output per row")
    if R == 0:
        return
    if S == 0:
        raise ValueError("global_pool: empty rows")
    cdef const pool_row *p = _pool_row(build)
    cdef int t, nt = max(1, min(threads, R))
    if nt == 1:
        with nogil:
            _global_rows(&x[0, 0], &y[0], 0, R, S, is_max, p)
        return
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            _global_rows(&x[0, 0], &y[0], R * t // nt, R * (t + 1) // nt, S, is_max, p)


cdef void _global_rows(const float *x, float *y, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t S,
                       bint is_max, const pool_row *p) noexcept nogil:
    """Rows [r0, r1) of global_pool (x rows S floats apart)."""
    cdef Py_ssize_t r, i
    cdef float m, v
    if r1 <= r0:
        return
    if not is_max:
        p.global_mean_rows(x + r0 * S, y + r0, r1 - r0, S)
        return
    for r in range(r0, r1):
        m = x[r * S]
        for i in range(1, S):
            v = x[r * S + i]
            if v > m:
                m = v
        y[r] = m


def dwc8(x, w8, b8, off, z, y, Q, obuf, int sh, int sw, int ph, int pw, int Hp, int Wp,
         int mode, float p0, float p1, bint has_z, str row, bint split_rows=False):
    """x (N, C, H, W) -> y (N, C, OH, OW); z like y when has_z (else any array); w8
    (ceil(C/L), T, L), b8 (ceil(C/L), L), off (T,), L the lanes of the table's row `row`;
    per thread t (Q.shape[0] OpenMP threads, each a range of the channel groups, or with
    split_rows of the output rows) Q[t] (>= Hp*Wp*L, zeroed), obuf[t] (>= obuf_floats(OH,
    OW, L)). One call of a Dwc8Layer (the kernels bind one at prepare)."""
    Dwc8Layer(w8, b8, off, x.shape, y.shape, sh, sw, ph, pw, Hp, Wp, mode, p0, p1, has_z,
              row, split_rows).run(x, z, y, Q, obuf)


def expand_dwc8(x, ew, eb, int emode, float ep0, float ep1, w8, b8, off, z, y, Q, obuf,
                int sh, int sw, int ph, int pw, int Hp, int Wp, int mode, float p0, float p1,
                bint has_z, str row, bint split_rows=False):
    """dwc8 of a fused 1x1 conv's output: x (N, K, H, W) its input, ew (ceil(C/L), K, L)
    its weights (zero past C), eb (ceil(C/L), L) its bias, emode / ep0 / ep1 its
    activation (one of those computed in registers: none, Relu, Clip, HardSigmoid,
    HardSwish, LeakyRelu); each group's padded plane is computed, never stored whole."""
    Dwc8Layer(w8, b8, off, x.shape, y.shape, sh, sw, ph, pw, Hp, Wp, mode, p0, p1, has_z,
              row, split_rows, ew, eb, emode, ep0, ep1).run(x, z, y, Q, obuf)


cdef class Dwc8Layer:
    """One depthwise conv (or ExpandDepthwise: ew / eb / emode / ep0 / ep1, the fused 1x1
    conv's, as expand_dwc8 takes them) bound once: its constant operands and geometry
    (dwc8's arguments) are kept as pointers, so a call passes and checks only x, z, y and
    the scratch Q / obuf (float32 C-contiguous arrays): the per-call overhead counts, a
    mobile net runs many such small layers."""
    cdef dwc8_geom g
    cdef dwc8_expand ex
    cdef object keep
    cdef const float *w8p
    cdef const float *b8p
    cdef const long *offp
    cdef const dwc_row *row
    cdef int split_rows, groups
    cdef long xsize, ysize, qfloats, ofloats

    def __init__(self, const float[:, :, ::1] w8, const float[:, ::1] b8, const long[::1] off,
                 xshape, yshape, int sh, int sw, int ph, int pw, int Hp, int Wp, int mode,
                 float p0, float p1, bint has_z, str row, bint split_rows=False,
                 const float[:, :, ::1] ew=None, const float[:, ::1] eb=None, int emode=0,
                 float ep0=0, float ep1=0):
        self.row = &dwc_rows[row_index(row)]
        cdef int L = w8.shape[2]
        if L != self.row.lanes or b8.shape[1] != L or w8.shape[1] != off.shape[0]:
            raise ValueError(f"dwc8: weights (groups, taps, lanes) with the {row}'s lanes")
        if len(xshape) != 4 or len(yshape) != 4:
            raise ValueError("dwc8: x and y are (N, C, H, W)")
        n, k, h, w = (int(v) for v in xshape)
        yn, c, oh, ow = (int(v) for v in yshape)
        if yn != n:
            raise ValueError("dwc8: x and y have the same batch")
        self.keep = (w8, b8, off, ew, eb)
        self.g.kind, self.g.cnt, self.g.ex = 0, NULL, NULL
        if ew is not None:
            if ew.shape[0] < w8.shape[0] or eb is None or eb.shape[0] < w8.shape[0] \
                    or ew.shape[2] != L or eb.shape[1] != L or ew.shape[1] != k \
                    or emode in (5, 6, 8):
                raise ValueError("expand_dwc8: weights (groups, K, lanes), an activation in "
                                 "registers")
            self.ex.K, self.ex.w, self.ex.b = k, &ew[0, 0, 0], &eb[0, 0]
            self.ex.mode, self.ex.p0, self.ex.p1 = emode, ep0, ep1
            self.g.ex = &self.ex
        elif k != c:
            raise ValueError("dwc8: x and y have the same channels")
        self.g.N, self.g.C, self.g.H, self.g.W = n, c, h, w
        self.g.OH, self.g.OW, self.g.T = oh, ow, off.shape[0]
        self.g.sh, self.g.sw, self.g.ph, self.g.pw, self.g.Hp, self.g.Wp = sh, sw, ph, pw, Hp, Wp
        self.g.mode, self.g.p0, self.g.p1, self.g.has_z, self.g.L = mode, p0, p1, has_z, L
        self.groups = (c + L - 1) // L
        if w8.shape[0] < self.groups or b8.shape[0] < self.groups:
            raise ValueError("dwc8: weights for fewer groups than the channels")
        self.w8p, self.b8p, self.offp = &w8[0, 0, 0], &b8[0, 0], &off[0]
        self.split_rows = split_rows
        self.xsize, self.ysize = <long>n * k * h * w, <long>n * c * oh * ow
        self.qfloats, self.ofloats = <long>Hp * Wp * L, dwc8_obuf_floats(oh, ow, L)

    def run(self, cnp.ndarray x, cnp.ndarray z, cnp.ndarray y, cnp.ndarray Q,
            cnp.ndarray obuf):
        """x (N, K, H, W) -> y (N, C, OH, OW), z like y when the layer has a residual (else
        any array); Q (threads, >= Hp*Wp*L) and obuf (threads, >= obuf_floats): one row per
        OpenMP thread. All float32, C-contiguous."""
        cdef int f = cnp.NPY_ARRAY_C_CONTIGUOUS
        if not (_f32c(x, f) and _f32c(y, f) and _f32c(Q, f) and _f32c(obuf, f)
                and cnp.PyArray_CHKFLAGS(y, cnp.NPY_ARRAY_WRITEABLE)
                and cnp.PyArray_SIZE(x) == self.xsize and cnp.PyArray_SIZE(y) == self.ysize
                and Q.ndim == 2 and obuf.ndim == 2 and obuf.shape[0] >= Q.shape[0] >= 1
                and Q.shape[1] >= self.qfloats and obuf.shape[1] >= self.ofloats):
            raise ValueError("dwc8: float32 C-contiguous x, y, Q, obuf of the layer's sizes")
        cdef const float *zp = NULL
        if self.g.has_z:
            if not (_f32c(z, f) and cnp.PyArray_SIZE(z) == self.ysize):
                raise ValueError("dwc8: the residual z is float32 C-contiguous, y's size")
            zp = <const float *>cnp.PyArray_DATA(z)
        cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
        cdef float *yp = <float *>cnp.PyArray_DATA(y)
        cdef float *qp = <float *>cnp.PyArray_DATA(Q)
        cdef float *op = <float *>cnp.PyArray_DATA(obuf)
        cdef long qs = Q.shape[1], os = obuf.shape[1]
        cdef int nt = Q.shape[0], t, rc = 0
        if self.ysize == 0:
            return
        with nogil:
            if nt == 1:
                rc = dwc8_run(self.row, xp, self.w8p, self.b8p, self.offp, zp, yp, qp, op,
                              &self.g)
            elif self.split_rows:    # thread t: every group, output rows [t*OH/nt, ..)
                for t in prange(nt, num_threads=nt, schedule="static"):
                    dwc8_run_rows(self.row, xp, self.w8p, self.b8p, self.offp, zp, yp,
                                  qp + t * qs, op + t * os, &self.g, t, nt)
            else:                    # thread t: its share of the (group, row) pairs
                for t in prange(nt, num_threads=nt, schedule="static"):
                    dwc8_run_share(self.row, xp, self.w8p, self.b8p, self.offp, zp, yp,
                                   qp + t * qs, op + t * os, &self.g, t, nt)
        if rc:
            raise ValueError("dwc8: the row and the lane count disagree")


cdef inline bint _f32c(cnp.ndarray a, int flags):
    return cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32 and cnp.PyArray_CHKFLAGS(a, flags)
