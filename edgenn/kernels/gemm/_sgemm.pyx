# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of sgemm.h: packed fp32 GEMM with a fused epilogue (bias per row or per
column, residual Z, activation), on a row of the family's table (sgemm_table.h).

    ROWS                                            # the table: Row(name, isa, mr, nr, ...)
    g = SGemm(M, N, K, packed_a=pack_a(W), row="sgemm_6x16__avx2")   # conv: constant A
    g.run(x2d_or_image, out2d, z2d)                 # out (M, N) = act(W @ B + bias + Z)
    g = SGemm(M, N, K, packed_b=pack_b(Bmat))       # Gemm: constant B (the best row here)
    g.run(a2d, out2d, z2d)                          # out (M, N) = act(A @ Bmat + ...)
    g = SGemm(M, N, K, packed_wt=pack_b(W.T), row="sgemm_12x32__avx512f")  # rows mode
    g.run(b2d, out2d, z2d)                          # out (M, N) = act(W @ B + ...)
"""
from collections import namedtuple

from edgenn.kernels.native.tables import Table

import numpy as np
cimport numpy as cnp
from cython.parallel cimport prange

cnp.import_array()

include "_workspace.pxi"
include "_epilogue.pxi"

include "_cpu.pxi"
include "cstep.pxi"
from cpython.ref cimport PyObject

cdef extern from "sgemm_table.h" nogil:
    ctypedef struct sg_epi:
        const float *bias_row
        const float *bias_col
        const float *z
        long ldz
        int act
        float p0, p1
        const float *slope_row
    ctypedef struct sg_operand:
        const float *packed
        const float *src
        long rs, cs
    ctypedef struct sg_conv:
        const float *x
        int C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow
    int SG_MR, SG_NR
    unsigned SG_ACTS, SG_KSPLIT_ACTS
    ctypedef struct sg_row:
        const char *name
        int isa, mr, nr
        const void *tile
        const void *rows
    const sg_row sg_rows[]
    int SG_ROW_COUNT
    long sg_direct_chunk_bytes
    long sg_packed_a_size(long M, long K)
    long sg_packed_b_size(long K, long N)
    long sg_workspace_size(long M, long N, long K, int pack_a, int pack_b)
    void sg_pack_a(const float *src, long rs, long cs, long i0, long mc, long k0, long kc,
                   float *dst)
    void sg_pack_b(const float *src, long rs, long cs, long k0, long kc, long j0, long nc,
                   float *dst)
    void sg_gemm(long M, long N, long K, const sg_operand *a, const sg_operand *b,
                 const sg_conv *conv, float *C, long ldc, const sg_epi *e, float *ws,
                 const sg_row *row, int direct_b)
    void sg_gemm_cols(long M, long N, long K, const sg_operand *a, const sg_operand *b,
                      const sg_conv *conv, float *C, long ldc, const sg_epi *e, float *ws,
                      const sg_row *row, int direct_b, long j0, long j1)
    void sg_gemm_bconst_cols(long M, long N, long K, const sg_operand *a, const sg_operand *b,
                             float *C, long ldc, const sg_epi *e, float *ws,
                             const sg_row *row, long j0, long j1)
    void sg_gemm_rows(const sg_row *row, long N, long K, const float *wt, const float *B,
                      long ldb, float *C, long ldc, const sg_epi *e, long m_lo, long m_hi)
    void sg_gemm_rows_ksplit(const sg_row *row, long M, long N, long K, long kper, int parts,
                             const float *wt, const float *B, float *C, float *P,
                             const sg_epi *epis, int act, float p0, float p1)
    void sg_im2col(const sg_conv *g, float *cols, long k0, long k1)

ACTIVATIONS = _activations(SG_ACTS)        # every one (sgemm.h)
MR, NR = SG_MR, SG_NR


# One row of the table (sgemm_table.h): name (sgemm_<mr>x<nr>__<isa>), isa (the tier it
# needs, edgenn.kernels.isa's names), register tile mr x nr, usable (this CPU runs it: the
# one probe, EDGENN_MAX_ISA applied; every row in the emulated build) and rows_mode (it
# has the rows mode: SGemm(packed_wt=...)).
Row = namedtuple("Row", "name isa mr nr usable rows_mode")


def _table():
    cdef int i
    return tuple(Row(*(sg_rows[i].name.decode(), edgenn_isa_name(sg_rows[i].isa).decode(),
                      sg_rows[i].mr, sg_rows[i].nr, bool(edgenn_row_usable(sg_rows[i].isa)),
                      sg_rows[i].rows != NULL)) for i in range(SG_ROW_COUNT))


TABLE = Table("sgemm", _table())
ROWS = TABLE.rows        # the whole table, in its order (best last)
rows, row_index, best_row, row_of_isa = TABLE.usable, TABLE.index, TABLE.best, TABLE.best_of_isa


def wake_threads(int threads):
    """An empty OpenMP region of `threads` threads: workers that went to sleep are awake
    (and spinning) after it, as they are between a model's threaded layers (the tuner
    calls it before timing a candidate, runtime/select.py)."""
    cdef int t, k = 0
    if threads > 1:
        with nogil:
            for t in prange(threads, num_threads=threads, schedule="static"):
                k = t


cdef double _chain(long n) noexcept nogil:
    """n dependent multiply-adds: a fixed amount of one core's time."""
    cdef double x = 1.0
    cdef long i
    for i in range(n):
        x = x * 0.999999 + 1e-7
    return x


def cores_available(int threads, long n=100000, int rounds=3):
    """How far `threads` OpenMP threads run at once right now: the time of one thread's
    share of work alone over the time of `threads` threads each doing that share at once,
    the best of `rounds` (1.0: every thread had a core; 1 / threads: they shared one).
    On a shared machine a second vCPU is taken for seconds at a time: the pool choice
    (runtime/session.py) is not cached when made in such a moment."""
    import time
    cdef int t
    cdef double sink = 0.0
    if threads <= 1:
        return 1.0
    best_one = best_all = float("inf")
    for _ in range(rounds):
        wake_threads(threads)
        t0 = time.perf_counter()
        with nogil:
            sink += _chain(n)
        t1 = time.perf_counter()
        with nogil:
            for t in prange(threads, num_threads=threads, schedule="static"):
                sink += _chain(n)
        t2 = time.perf_counter()
        best_one, best_all = min(best_one, t1 - t0), min(best_all, t2 - t1)
    return float(min(1.0, best_one / best_all)) if sink == sink else 0.0


def set_direct_chunk(long nbytes):
    """Tuning knob (benchmarks): L1 bytes per B chunk in the direct path; 0 = generic."""
    global sg_direct_chunk_bytes
    sg_direct_chunk_bytes = nbytes


def pack_a(const float[:, :] a):
    """A (M, K), any strides -> packed MR-row panels (1-D float32) for SGemm(packed_a=)."""
    cdef long m = a.shape[0], k = a.shape[1]
    out = np.zeros(max(sg_packed_a_size(m, k), 1), np.float32)
    cdef float[::1] o = out
    if m and k:
        sg_pack_a(&a[0, 0], a.strides[0] // 4, a.strides[1] // 4, 0, m, 0, k, &o[0])
    return out


def pack_b(const float[:, :] b):
    """B (K, N), any strides -> packed NR-column panels (1-D float32) for SGemm(packed_b=)."""
    cdef long k = b.shape[0], n = b.shape[1]
    out = np.zeros(max(sg_packed_b_size(k, n), 1), np.float32)
    cdef float[::1] o = out
    if k and n:
        sg_pack_b(&b[0, 0], b.strides[0] // 4, b.strides[1] // 4, 0, k, 0, n, &o[0])
    return out


def pack_a_batch(const float[:, :, :] a):
    """A (count, M, K), any strides -> the count packed A operands back to back (1-D),
    each packed_a_size(M, K) floats (the Winograd U[xi], _winograd.WinogradConv)."""
    cdef long count = a.shape[0], m = a.shape[1], k = a.shape[2], i
    cdef long size = sg_packed_a_size(m, k)
    out = np.zeros(max(count * size, 1), np.float32)
    cdef float[::1] o = out
    if m and k:
        for i in range(count):
            sg_pack_a(&a[i, 0, 0], a.strides[1] // 4, a.strides[2] // 4, 0, m, 0, k,
                      &o[i * size])
    return out


def packed_a_size(long m, long k):
    """Floats of one packed A (M, K) operand (pack_a / pack_a_batch)."""
    return sg_packed_a_size(m, k)


def direct_workspace_bytes(long M, long N, long K, int threads=1):
    """Workspace bytes of the direct path (A prepacked, B read in place) for one product
    (M, K) x (K, N), times `threads` (one slice each): _winograd_run.h's alpha^2 GEMMs."""
    return sg_workspace_size(M, N, K, 0, 1) * 4 * max(threads, 1)


cdef inline long _part(long panels, int t, int nt) noexcept nogil:
    """First row / column of thread t's share: panels of SG_NR split as evenly as whole
    panels allow."""
    return t * panels // nt * SG_NR


cdef enum:
    MAX_K_PARTS = 16            # k_split: at most this many threads (partial products)
# the activations the sum of a K split's partial products applies (sg_sum_parts)
K_SPLIT_ACTIVATIONS = _activations(SG_KSPLIT_ACTS)


def _k_parts(long K, int threads):
    """-> (input channels per thread, threads) of a K split: whole groups of 16 channels,
    ceil(groups / threads) a thread, the way a channel-split depthwise layer (_dwc8.pyx,
    16 lanes) gives its groups to its threads, so each multiplies what it wrote."""
    cdef long groups = (K + 15) // 16
    cdef long per = (groups + min(threads, MAX_K_PARTS) - 1) // min(threads, MAX_K_PARTS)
    return per * 16, (groups + per - 1) // per


# -- the compiled run loop's form of run_images (kernels/native/_cstep.h) -----------------

ctypedef struct images_step:
    PyObject *g                 # the SGemm (held by the kernel's run, which the plan holds)
    void **x
    void **out
    void **z                    # NULL: no residual
    long n
    float *ws
    bint nogil

NOGIL_MACS = 1 << 17


cdef int _images_step(const void *params) noexcept:
    cdef const images_step *p = <const images_step *>params
    cdef SGemm g = <SGemm>p.g
    cdef const float *z = NULL if p.z == NULL else <const float *>p.z[0]
    if p.nogil:
        with nogil:
            g._run_batch(<const float *>p.x[0], <float *>p.out[0], z, p.n, p.ws)
    else:
        g._run_batch(<const float *>p.x[0], <float *>p.out[0], z, p.n, p.ws)
    return 0


cdef class SGemm:
    """One planned product out (M, N) = act(A (M, K) @ B (K, N) + bias + Z).

    Exactly one of packed_a / packed_b / packed_wt is given (the constant operand, from
    pack_a / pack_b); run() gets the other one. packed_wt = pack_b(W.T), the rows mode of
    rows that have it (the AVX-512F 12 x 32): out = W @ B with B (K, N) read in place,
    computed as B^T W^T so that a small N (a 7x7 conv's 49 pixels) is not cut into
    16-wide vectors; threads split M, or with k_split (a 1x1 conv, activation none, Relu
    or Clip) K: each thread multiplies its input channels (the same groups of 16 a
    channel-split depthwise layer before it wrote on that thread, _dwc8.pyx) into its
    partial product in the workspace, then each sums a share of them (sg_sum_parts).
    conv = (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow) makes
    run() take B as one image x (C, H, W) and pack its im2col columns on the fly;
    direct_b=True reads a unit-stride B in place (no packing; 1x1 convs). Activation
    params as in the fused Conv/Gemm attrs (PRelu: one slope per row of A). row: the
    table row (name) it runs on, None for the best this CPU runs.
    threads > 1: run_images splits the columns (output pixels) into that many contiguous
    NR-aligned ranges, one OpenMP thread each with its own workspace. B constant (a Gemm's
    weights): run() splits the columns over the threads.
    ws: a caller's workspace of workspace_bytes (None: the object's own, see _workspace.pxi)."""
    cdef long M, N, K, wsize, panels
    cdef int threads
    cdef object keep            # arrays whose buffers the C structs point into
    cdef object own_ws
    cdef sg_epi epi
    cdef sg_operand const_op
    cdef int a_is_const, is_conv, direct_b, rows
    cdef const sg_row *row
    cdef sg_conv geom
    cdef long kper              # k_split: input channels per thread (a multiple of 16)
    cdef int kparts             # k_split: threads (partial products); 0 = threads split M

    def __init__(self, long M, long N, long K, packed_a=None, packed_b=None, bias_row=None,
                 bias_col=None, str act="", params=(), conv=None, bint direct_b=False,
                 int threads=1, row=None, packed_wt=None,
                 bint k_split=False):
        assert sum(v is not None for v in (packed_a, packed_b, packed_wt)) == 1, "one constant operand"
        self.M, self.N, self.K = M, N, K
        self.rows = packed_wt is not None
        self.a_is_const = packed_a is not None or self.rows
        const = packed_wt if self.rows else packed_a if packed_a is not None else packed_b
        packed = np.require(const, np.float32, requirements="C")
        need = (sg_packed_b_size(K, M) if self.rows else sg_packed_a_size(M, K)
                if self.a_is_const else sg_packed_b_size(K, N))
        assert packed.size >= need, "packed operand too small"
        br = None if bias_row is None else np.require(bias_row, np.float32, requirements="C").ravel()
        bc = None if bias_col is None else np.require(bias_col, np.float32, requirements="C").ravel()
        assert br is None or br.size == M
        assert bc is None or bc.size == N
        self.keep = (packed, br, bc)
        cdef float[::1] pv = packed
        self.const_op.packed = &pv[0]
        self.const_op.src = NULL
        cdef const float[::1] v
        self.epi.bias_row = NULL
        self.epi.bias_col = NULL
        if br is not None:
            v = br
            self.epi.bias_row = &v[0]
        if bc is not None:
            v = bc
            self.epi.bias_col = &v[0]
        self.epi.z = NULL
        from ..native import epilogue
        self.epi.act = epilogue.code(act)
        self.epi.slope_row = NULL
        if act == "PRelu":          # params: one slope per row (a conv's output channel)
            slopes = np.require(params, np.float32, requirements="C")
            assert slopes.size == M, "PRelu needs one slope per row"
            self.keep = self.keep + (slopes,)
            v = slopes
            self.epi.slope_row = &v[0]
            self.epi.p0 = self.epi.p1 = 0.0
        else:
            self.epi.p0, self.epi.p1 = epilogue.params(act, params)
        self.is_conv = conv is not None
        if self.is_conv:
            assert self.a_is_const
            (self.geom.C, self.geom.H, self.geom.W, self.geom.kh, self.geom.kw, self.geom.sh,
             self.geom.sw, self.geom.ph, self.geom.pw, self.geom.dh, self.geom.dw,
             self.geom.oh, self.geom.ow) = conv
            assert K == self.geom.C * self.geom.kh * self.geom.kw
            assert N == self.geom.oh * self.geom.ow
        self.wsize = sg_workspace_size(M, N, K, not self.a_is_const, self.a_is_const)
        if self.rows and self.is_conv:   # the explicit im2col (K, N), shared by the threads
            self.wsize = K * N
        # threads only where each gets >= 2 panels of NR columns (rows mode: NR channels);
        # thread t takes panels [t * P / nt, (t + 1) * P / nt): balanced to one panel (whole
        # 32-wide steps each had left MobileNetV2's 96-channel 1x1 convs on one thread and
        # split 49 pixels 32 / 17)
        self.panels = ((M if self.rows else N) + SG_NR - 1) // SG_NR
        self.threads = max(1, min(threads, self.panels // 2))
        self.own_ws = None
        self.row = &sg_rows[row_index(best_row() if row is None else row)]
        self.direct_b = direct_b
        if self.rows and self.row.rows == NULL:
            raise ValueError(f"rows mode (packed_wt): row {self.row_name!r} has none")
        self.kparts = 0
        if k_split and self.rows and not self.is_conv and threads > 1 and K > 0 \
                and act in K_SPLIT_ACTIVATIONS:
            self.kper, self.kparts = _k_parts(K, threads)
            if self.kparts > 1:
                self.threads = self.kparts
                self.wsize = self.kparts * M * N
            else:
                self.kparts = 0

    @property
    def k_parts(self):
        """Threads splitting K (k_split; 0: the threads split M or N)."""
        return self.kparts

    @property
    def row_name(self):
        """The table row it runs on."""
        return self.row.name.decode()

    @property
    def simd(self):
        """The instruction-set tier of its row (reports)."""
        return edgenn_isa_name(self.row.isa).decode()

    @property
    def workspace_bytes(self):
        return self.wsize * (1 if self.rows else self.threads) * 4

    cdef float *_ws(self, ws) except NULL:
        if ws is None:
            if self.own_ws is None:
                self.own_ws = _own_ws(self.workspace_bytes)
            ws = self.own_ws
        return <float *>_ws_data(ws, self.workspace_bytes, "SGemm")

    def run_images(self, cnp.ndarray x, cnp.ndarray out, cnp.ndarray z=None, ws=None):
        """Conv fast path, A constant: x (n, C, H, W), out (n, M, OH, OW), z like out (or
        None), float32; out C-contiguous, x / z copied if strided; one call for the batch, no memoryview
        set-up (a per-call cost that matters for the many short layers of a mobile net)."""
        cdef long n
        cdef sg_conv g = self.geom
        cdef float *zp = NULL
        cdef int flags = cnp.NPY_ARRAY_C_CONTIGUOUS
        if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32 and not cnp.PyArray_CHKFLAGS(x, flags):
            x = np.ascontiguousarray(x)          # strided view: one copy
        if z is not None and cnp.PyArray_TYPE(z) == cnp.NPY_FLOAT32 \
                and not cnp.PyArray_CHKFLAGS(z, flags):
            z = np.ascontiguousarray(z)
        if not (self.a_is_const and cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT32
                and cnp.PyArray_TYPE(out) == cnp.NPY_FLOAT32
                and cnp.PyArray_CHKFLAGS(x, flags) and cnp.PyArray_CHKFLAGS(out, flags)
                and cnp.PyArray_CHKFLAGS(out, cnp.NPY_ARRAY_WRITEABLE)
                and x.ndim >= 1 and out.ndim >= 1 and x.shape[0] == out.shape[0]):
            raise ValueError("run_images: float32 C-contiguous (n, ...) arrays required")
        n = x.shape[0]
        if cnp.PyArray_SIZE(x) != n * self.K * (1 if self.is_conv else self.N) \
                and not self.is_conv:
            raise ValueError("run_images: x size")
        if self.is_conv and cnp.PyArray_SIZE(x) != n * g.C * g.H * g.W:
            raise ValueError("run_images: x size")
        if cnp.PyArray_SIZE(out) != n * self.M * self.N:
            raise ValueError("run_images: out size")
        if z is not None:
            if not (cnp.PyArray_TYPE(z) == cnp.NPY_FLOAT32 and cnp.PyArray_CHKFLAGS(z, flags)
                    and cnp.PyArray_SIZE(z) == n * self.M * self.N):
                raise ValueError("run_images: z must be float32 C-contiguous, out-sized")
            zp = <float *>cnp.PyArray_DATA(z)
        cdef float *wsp = self._ws(ws)
        with nogil:
            self._run_batch(<float *>cnp.PyArray_DATA(x), <float *>cnp.PyArray_DATA(out), zp,
                            n, wsp)

    cdef void _run_batch(self, const float *xp, float *op, const float *zp, long n,
                         float *wsp) noexcept nogil:
        """run_images' work on checked pointers: n images of x into out (z or NULL)."""
        cdef long b, xs, os
        cdef sg_operand var
        cdef sg_epi e = self.epi
        cdef sg_conv g = self.geom
        cdef const sg_conv *gp = NULL
        cdef int t, nt = self.threads
        if self.M == 0 or self.N == 0 or n == 0:
            return
        xs = g.C * g.H * g.W if self.is_conv else self.K * self.N
        os = self.M * self.N
        var.packed = NULL
        var.src = NULL
        var.rs = self.N
        var.cs = 1
        if self.is_conv:
            gp = &g
        for b in range(n):
            if self.is_conv:
                g.x = xp + b * xs
            else:
                var.src = xp + b * xs
            if zp != NULL:
                e.z = zp + b * os
                e.ldz = self.N
            if self.rows:
                self._run_rows(xp + b * xs, op + b * os, &e, wsp)
            elif nt == 1:
                sg_gemm(self.M, self.N, self.K, &self.const_op, &var, gp, op + b * os,
                        self.N, &e, wsp, self.row, self.direct_b)
            else:
                for t in prange(nt, num_threads=nt, schedule="static"):
                    sg_gemm_cols(self.M, self.N, self.K, &self.const_op, &var, gp,
                                 op + b * os, self.N, &e, wsp + t * self.wsize,
                                 self.row, self.direct_b, _part(self.panels, t, nt),
                                 min(self.N, _part(self.panels, t + 1, nt)))

    def images_cstep(self, long n, x_cell, out_cell, z_cell, ws):
        """run_images on n images as a C step (kernels/native/_cstep.h): x, out (and z)
        through their cells, checked as run_images checks them by the caller (the
        kernel's cstep); ws: this context's workspace (or None: the object's own)."""
        if not self.a_is_const:
            return None
        cdef images_step *p = <images_step *>malloc(sizeof(images_step))
        if p == NULL:
            raise MemoryError()
        p.g = <PyObject *>self
        p.x, p.out = cell(x_cell), cell(out_cell)
        p.z = NULL if z_cell is None else cell(z_cell)
        p.n = n
        p.ws = self._ws(ws)
        # the GIL is let go only where the work is long next to letting it go and taking
        # it back
        p.nogil = n * self.M * self.N * self.K >= NOGIL_MACS
        return new_cstep(_images_step, p)

    cdef void _run_rows(self, const float *x, float *out, const sg_epi *e, float *ws) noexcept nogil:
        """Rows mode, one image: B is x itself (1x1) or its im2col in ws (split over the
        threads by K rows), then the channels split over the threads."""
        cdef int t, nt = self.threads
        cdef sg_conv g = self.geom
        cdef const float *bsrc = x
        if self.is_conv:
            g.x = x
            if nt == 1:
                sg_im2col(&g, ws, 0, self.K)
            else:
                for t in prange(nt, num_threads=nt, schedule="static"):
                    sg_im2col(&g, ws, t * self.K // nt, (t + 1) * self.K // nt)
            bsrc = ws
        if self.kparts:
            self._run_k_split(bsrc, out, e, ws)
        elif nt == 1:
            sg_gemm_rows(self.row, self.N, self.K, self.const_op.packed, bsrc, self.N, out,
                         self.N, e, 0, self.M)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                sg_gemm_rows(self.row, self.N, self.K, self.const_op.packed, bsrc, self.N, out,
                             self.N, e, _part(self.panels, t, nt),
                             min(self.M, _part(self.panels, t + 1, nt)))

    cdef void _run_k_split(self, const float *b, float *out, const sg_epi *e,
                           float *ws) noexcept nogil:
        """Rows mode, threads splitting K (sg_gemm_rows_ksplit): part t's input channels
        [t*kper, (t+1)*kper) into partial product ws[t] (M, N), the bias in the first, z in
        the last; then each thread sums its share of the outputs."""
        cdef sg_epi parts[MAX_K_PARTS]
        cdef int t, nt = self.kparts
        for t in range(nt):
            parts[t] = e[0]
            parts[t].act = 0
            parts[t].slope_row = NULL
            if t > 0:
                parts[t].bias_row = NULL
            if t < nt - 1:
                parts[t].z = NULL
        sg_gemm_rows_ksplit(self.row, self.M, self.N, self.K, self.kper, nt,
                            self.const_op.packed, b, out, ws, parts, e.act, e.p0, e.p1)

    def run(self, src, float[:, ::1] out, const float[:, ::1] z=None, ws=None):
        """src: B (K, N) (any strides), or the image (C, H, W) for conv, when A is the
        constant; A (M, K) (any strides) when B is. out (M, N) C-contiguous; z like out."""
        cdef sg_operand var
        cdef const float[:, :] s2
        cdef const float[:, :, ::1] s3
        cdef sg_epi e = self.epi
        cdef const sg_conv *gp = NULL
        cdef sg_conv g
        cdef int t
        assert out.shape[0] == self.M and out.shape[1] == self.N
        if self.M == 0 or self.N == 0:
            return
        if z is not None:
            assert z.shape[0] == self.M and z.shape[1] == self.N
            e.z = &z[0, 0]
            e.ldz = z.strides[0] // 4
        var.packed = NULL
        if self.is_conv:
            s3 = src
            assert (s3.shape[0] == self.geom.C and s3.shape[1] == self.geom.H
                    and s3.shape[2] == self.geom.W)
            g = self.geom
            g.x = &s3[0, 0, 0]
            gp = &g
            var.src = NULL
            var.rs = var.cs = 0
        else:
            if self.rows:       # B read in place: unit column stride
                src = np.require(src, np.float32, requirements="C")
            s2 = src
            if self.a_is_const:
                assert s2.shape[0] == self.K and s2.shape[1] == self.N
            else:
                assert s2.shape[0] == self.M and s2.shape[1] == self.K
            var.src = &s2[0, 0]
            var.rs = s2.strides[0] // 4
            var.cs = s2.strides[1] // 4
        cdef float *wsp = self._ws(ws)
        cdef float *c = &out[0, 0]
        cdef long ldc = out.strides[0] // 4
        if self.rows and self.is_conv:
            if ldc != self.N:
                raise ValueError("run: the rows mode of a conv writes a contiguous out")
            with nogil:
                self._run_rows(g.x, c, &e, wsp)
            return
        with nogil:
            if self.rows:
                sg_gemm_rows(self.row, self.N, self.K, self.const_op.packed, var.src, var.rs,
                             c, ldc, &e, 0, self.M)
            elif self.a_is_const:
                sg_gemm(self.M, self.N, self.K, &self.const_op, &var, gp, c, ldc, &e, wsp,
                        self.row, self.direct_b)
            elif self.threads == 1:   # B constant (few rows: GEMVs, sgemm.h)
                sg_gemm_bconst_cols(self.M, self.N, self.K, &var, &self.const_op, c, ldc, &e,
                                    wsp, self.row, 0, self.N)
            else:       # B constant: the columns split, A packed by each thread
                for t in prange(self.threads, num_threads=self.threads, schedule="static"):
                    sg_gemm_bconst_cols(self.M, self.N, self.K, &var, &self.const_op, c, ldc,
                                        &e, wsp + t * self.wsize, self.row,
                                        _part(self.panels, t, self.threads),
                                        min(self.N, _part(self.panels, t + 1, self.threads)))
