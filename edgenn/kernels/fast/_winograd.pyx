# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Winograd F(m x m, 3 x 3) input and output transforms, in C (_winograd.h: AVX2+FMA over 8
tiles when the CPU has it, else a portable scalar build of the same code).

Layouts (see _winograd.h and winograd.py): x (N, C, H, W); V (alpha^2, C, Tb);
M (alpha^2, K, Tb); y, z (N, K, OH, OW); a block is the tile rows [row0, row0 + nrows) of
all images, Tb = nrows * tw tiles.

WinogradConv: the whole conv in one call, the alpha^2 GEMMs on edgenn's packed sgemm
(_winograd_run.h)."""
import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "_winograd.h" nogil:
    int wino_isa_forced
    int wino_use_avx2()
    void wino_input(int m, const float *x, int C, int H, int W, int ph, int pw,
                    int th, int tw, int twp, int row0, int nrows,
                    float *V, float *P, float *xp, const float *zeros)
    void wino_output(int m, const float *M, float *y, int K, int OH, int OW,
                     int th, int tw, int twp, int row0, int nrows,
                     const float *bias, const float *z, int act, float p0, float p1,
                     float *Q, float *rowbuf)


def set_isa(int isa):
    """-1: best the CPU has (default); 0: force the portable scalar code; 1: AVX2 if present."""
    global wino_isa_forced
    wino_isa_forced = isa


def uses_avx2():
    return bool(wino_use_avx2())


def input_transform(int m, const float[:, :, :, ::1] x, int ph, int pw, int th, int tw,
                    int twp, int row0, int nrows, float[::1] V, float[::1] P, float[::1] xp,
                    const float[::1] zeros):
    """x (N, C, H, W) -> V (alpha^2, C, nrows*tw), flat; scratch P, xp, zeros (see .h)."""
    with nogil:
        wino_input(m, &x[0, 0, 0, 0], x.shape[1], x.shape[2], x.shape[3], ph, pw, th, tw,
                   twp, row0, nrows, &V[0], &P[0], &xp[0], &zeros[0])


def output_transform(int m, const float[::1] M, float[:, :, :, ::1] y, int th, int tw,
                     int twp, int row0, int nrows, const float[::1] bias,
                     const float[:, :, :, ::1] z, int act, float p0, float p1,
                     float[::1] Q, float[::1] rowbuf):
    """M (alpha^2, K, nrows*tw), flat -> y (N, K, OH, OW) = act(A^T m A + bias + z);
    bias and z may be None."""
    cdef const float *bp = NULL
    cdef const float *zp = NULL
    if bias is not None:
        bp = &bias[0]
    if z is not None:
        zp = &z[0, 0, 0, 0]
    with nogil:
        wino_output(m, &M[0], &y[0, 0, 0, 0], y.shape[1], y.shape[2], y.shape[3], th, tw,
                    twp, row0, nrows, bp, zp, act, p0, p1, &Q[0], &rowbuf[0])


cdef extern from "_winograd_run.h" nogil:
    ctypedef struct wino_plan:
        int m, C, H, W, K, OH, OW, ph, pw
        int th, tw, twp, rows_total, nrows
        const float *u
        long usize
        const float *bias
        int act
        float p0, p1
        int tier
        const float *zeros
    ctypedef struct wino_scratch:
        float *V
        float *M
        float *P
        float *xp
        float *Q
        float *rowbuf
        float *gws
    int WINO_MAX_THREADS
    void wino_run(const wino_plan *p, const float *x, const float *z, float *y,
                  const wino_scratch *s, int threads)


SCRATCH = ("V", "M", "P", "xp", "Q", "rowbuf", "gws")


cdef class WinogradConv:
    """A whole Winograd conv in one C call (_winograd_run.h): per block of tile rows the
    input transform, the alpha^2 GEMMs on edgenn's packed sgemm of `tier` (U prepacked by
    _sgemm.pack_a_batch), the output transform + epilogue; `threads` OpenMP threads.

    run(x, y, z, scratch): x (N, C, H, W), y / z (N, K, OH, OW) float32 C-contiguous (z
    may be None); scratch: a dict of SCRATCH name -> float32 array of threads x the
    per-thread size given in `sizes` (M and xp zero-filled once and kept)."""
    cdef wino_plan plan
    cdef int threads
    cdef object keep
    cdef readonly dict sizes
    cdef long n, c, h, w, k, oh, ow

    def __init__(self, int m, shape_x, shape_y, int ph, int pw, int nrows, packed_u,
                 long usize, bias, int act, float p0, float p1, int tier, long gws_floats,
                 int threads=1):
        self.n, self.c, self.h, self.w = shape_x
        _, self.k, self.oh, self.ow = shape_y
        alpha = m + 2
        th, tw = (self.oh + m - 1) // m, (self.ow + m - 1) // m   # (cdivision: no -(-a // b))
        twp = (tw + 7) // 8 * 8
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
        self.plan.act, self.plan.p0, self.plan.p1, self.plan.tier = act, p0, p1, tier
        self.plan.zeros = &zv[0]
        self.threads = threads
        a2 = alpha * alpha
        # per thread, floats (M: +8, the output pass reads ahead)
        self.sizes = dict(V=a2 * self.c * nrows * tw, M=a2 * self.k * nrows * tw + 8,
                          P=(nrows * m + 2) * alpha * twp, xp=twp * m + alpha,
                          Q=m * alpha * twp, rowbuf=twp * m, gws=gws_floats)

    def run(self, cnp.ndarray x, cnp.ndarray y, cnp.ndarray z, dict scratch):
        cdef int flags = cnp.NPY_ARRAY_C_CONTIGUOUS
        cdef wino_scratch s[64]
        cdef float *ptr[7]
        cdef int i, t
        cdef cnp.ndarray buf
        cdef const float *xp
        cdef float *yp
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
        for i, name in enumerate(SCRATCH):
            buf = scratch[name]
            if not (cnp.PyArray_TYPE(buf) == cnp.NPY_FLOAT32
                    and cnp.PyArray_CHKFLAGS(buf, flags)
                    and cnp.PyArray_CHKFLAGS(buf, cnp.NPY_ARRAY_WRITEABLE)
                    and cnp.PyArray_SIZE(buf) >= self.sizes[name] * self.threads):
                raise ValueError(f"WinogradConv: scratch {name!r} too small")
            ptr[i] = <float *>cnp.PyArray_DATA(buf)
        for t in range(self.threads):
            s[t].V = ptr[0] + t * <long>self.sizes["V"]
            s[t].M = ptr[1] + t * <long>self.sizes["M"]
            s[t].P = ptr[2] + t * <long>self.sizes["P"]
            s[t].xp = ptr[3] + t * <long>self.sizes["xp"]
            s[t].Q = ptr[4] + t * <long>self.sizes["Q"]
            s[t].rowbuf = ptr[5] + t * <long>self.sizes["rowbuf"]
            s[t].gws = ptr[6] + t * <long>self.sizes["gws"]
        if self.n == 0 or self.k == 0 or self.oh == 0 or self.ow == 0:
            return
        xp = <const float *>cnp.PyArray_DATA(x)
        yp = <float *>cnp.PyArray_DATA(y)
        if z is not None:
            zp = <const float *>cnp.PyArray_DATA(z)
        with nogil:
            wino_run(&self.plan, xp, zp, yp, s, self.threads)
