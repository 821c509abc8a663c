# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Winograd F(m x m, 3 x 3) input and output transforms, in C (_winograd.h: AVX2+FMA over 8
tiles when the CPU has it, else a portable scalar build of the same code).

Layouts (see _winograd.h and winograd.py): x (N, C, H, W); V (alpha^2, C, Tb);
M (alpha^2, K, Tb); y, z (N, K, OH, OW); a block is the tile rows [row0, row0 + nrows) of
all images, Tb = nrows * tw tiles."""

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
