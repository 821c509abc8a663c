# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Depthwise 2-D convolution and pooling, 8 (AVX2) or 16 (AVX-512F) channels per SIMD
vector: the C loops of _dwc8.h.

dwc8(x, w8, b8, off, z, y, Q, obuf, ...) computes y = act(depthwise(x) + b + z) for the
whole layer (depthwise.py, prepare_c8, packs the operands for the tier's lanes); pool8(...) MaxPool or
AveragePool (pool.py); maxpool_tiles_nchw(...) MaxPool with kernel == stride, no padding,
on NCHW planes directly (_pool_tiles.h); maxpool_bytes(...) MaxPool of uint8 / int8
planes (_pool_bytes.h)."""

from cython.parallel cimport prange


cdef extern from "_cpu.h" nogil:
    int edgenn_isa_x86(int t)
    int EDGENN_ISA_AVX2, EDGENN_ISA_AVX512

cdef extern from "_pool_tiles.h" nogil:
    void maxpool_tiles(int avx2, const float *x, float *y, long P, long H, long W, int kh,
                       int kw, float *row)
    void global_mean_rows(int avx2, const float *x, float *y, long R, long S)

cdef extern from "_pool_bytes.h" nogil:
    ctypedef unsigned char uint8_t
    ctypedef signed char int8_t
    void maxpool_u8(const uint8_t *x, uint8_t *y, long P, long H, long W, long OH, long OW,
                    int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, uint8_t *row)
    void maxpool_s8(const int8_t *x, int8_t *y, long P, long H, long W, long OH, long OW,
                    int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int8_t *row)
    long maxpool_bytes_row(long W, long OW, int kw, int sw, int pw, int dw)

cdef extern from "_dwc8.h" nogil:
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
    int DWC_GENERIC, DWC_AVX2, DWC_AVX512, DWC_HAVE_16
    int dwc8_run(int tier, const float *x, const float *w8, const float *b8,
                 const long *off, const float *z, float *y, float *Q, float *obuf,
                 const dwc8_geom *g)
    int dwc8_run_groups(int tier, const float *x, const float *w8, const float *b8,
                        const long *off, const float *z, float *y, float *Q, float *obuf,
                        const dwc8_geom *g, int g0, int g1)
    int dwc8_run_part(int tier, const float *x, const float *w8, const float *b8,
                      const long *off, const float *z, float *y, float *Q, float *obuf,
                      const dwc8_geom *g, int g0, int g1, int oy0, int oy1)
    long dwc8_obuf_floats(int OH, int OW, int L)

cdef extern from *:
    """
    #ifdef EDGENN_SIMDE
    #define DWC_EMULATED 1
    #else
    #define DWC_EMULATED 0
    #endif
    """
    int DWC_EMULATED

EMULATED = bool(DWC_EMULATED)
cdef bint _avx2 = EMULATED or edgenn_isa_x86(EDGENN_ISA_AVX2)
cdef bint _avx512 = DWC_HAVE_16 and (EMULATED or edgenn_isa_x86(EDGENN_ISA_AVX512))
HAS_AVX2 = _avx2
# lanes -> whether this CPU (or EDGENN_MAX_ISA) runs that width's vector body (in the
# SIMDe-emulated build, _dwc8_emu, every width)
HAVE = {8: bool(_avx2), 16: bool(_avx512)}


def obuf_floats(int OH, int OW, int L=8) -> int:
    """Floats of dwc8's output buffer per thread: a row (OW, L), or a small plane's whole
    (OH*OW, L) (unpacked flat, _dwc8.h)."""
    return dwc8_obuf_floats(OH, OW, L)


def pool8(const float[:, :, :, ::1] x, const long[::1] off, const float[:, ::1] cnt,
          float[:, :, :, ::1] y, float[::1] Q, float[::1] obuf, int sh, int sw, int ph, int pw,
          int Hp, int Wp, bint is_max, bint avx2):
    """MaxPool (is_max; Q pre-filled with -inf) or AveragePool (Q zeroed; cnt (OH, OW) the
    number of counted cells of each window): x (N, C, H, W) -> y (N, C, OH, OW)."""
    cdef dwc8_geom g
    g.ex = NULL
    g.kind = 1 if is_max else 2
    g.cnt = &cnt[0, 0]
    g.N, g.C, g.H, g.W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    g.OH, g.OW, g.T = y.shape[2], y.shape[3], off.shape[0]
    g.sh, g.sw, g.ph, g.pw, g.Hp, g.Wp = sh, sw, ph, pw, Hp, Wp
    g.mode, g.p0, g.p1, g.has_z, g.L = 0, 0, 0, 0, 8
    cdef int tier = DWC_AVX2 if avx2 and _avx2 else DWC_GENERIC
    with nogil:
        dwc8_run(tier, &x[0, 0, 0, 0], NULL, NULL, &off[0], NULL, &y[0, 0, 0, 0], &Q[0],
                 &obuf[0], &g)


def maxpool_tiles_nchw(const float[:, :, ::1] x, float[:, :, ::1] y, int kh, int kw,
                       float[::1] row, bint avx2):
    """MaxPool with kernel == stride, no padding (_pool_tiles.h): x (P, H, W) -> y (P,
    H // kh, W // kw); row: scratch of W floats."""
    if y.shape[0] != x.shape[0] or y.shape[1] != x.shape[1] // kh or \
            y.shape[2] != x.shape[2] // kw or row.shape[0] < x.shape[2] or kh < 1 or kw < 1:
        raise ValueError("maxpool_tiles_nchw: shapes do not match")
    cdef int use_avx2 = avx2 and _avx2
    if x.shape[0] == 0 or y.shape[1] == 0 or y.shape[2] == 0:
        return
    with nogil:
        maxpool_tiles(use_avx2, &x[0, 0, 0], &y[0, 0, 0], x.shape[0], x.shape[1],
                      x.shape[2], kh, kw, &row[0])


def maxpool_bytes_scratch(long W, long OW, int kw, int sw, int pw, int dw):
    """Bytes of row scratch maxpool_bytes needs."""
    return maxpool_bytes_row(W, OW, kw, sw, pw, dw)


def maxpool_bytes(const unsigned char[:, :, ::1] x, unsigned char[:, :, ::1] y, bint signed,
                  int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                  unsigned char[::1] row):
    """MaxPool of quantized planes (_pool_bytes.h): x (P, H, W) -> y (P, OH, OW), bytes read
    as int8 when `signed` else uint8 (pass int8 arrays as .view(np.uint8)); any window
    (kernel, strides, pads begin, dilations; the output size decides the end pads)."""
    cdef long P = x.shape[0], H = x.shape[1], W = x.shape[2], OH = y.shape[1], OW = y.shape[2]
    if y.shape[0] != P or min(kh, kw, sh, sw, dh, dw) < 1 or ph < 0 or pw < 0:
        raise ValueError("maxpool_bytes: bad geometry")
    if P == 0 or OH == 0 or OW == 0:
        return
    if H == 0 or W == 0:
        raise ValueError("maxpool_bytes: empty input planes")
    if row.shape[0] < maxpool_bytes_row(W, OW, kw, sw, pw, dw):
        raise ValueError("maxpool_bytes: row scratch too small")
    with nogil:
        if signed:
            maxpool_s8(<const int8_t *>&x[0, 0, 0], <int8_t *>&y[0, 0, 0], P, H, W, OH, OW,
                       kh, kw, sh, sw, ph, pw, dh, dw, <int8_t *>&row[0])
        else:
            maxpool_u8(&x[0, 0, 0], &y[0, 0, 0], P, H, W, OH, OW, kh, kw, sh, sw, ph, pw,
                       dh, dw, &row[0])


def global_pool(const float[:, ::1] x, float[::1] y, bint is_max, bint avx2=True):
    """x (R, S) -> y (R,): mean (accumulated in double, four lanes; _pool_tiles.h) or max
    of each row. avx2 False: the portable loops (tests)."""
    cdef Py_ssize_t R = x.shape[0], S = x.shape[1], r, i
    cdef float m, v
    if y.shape[0] != R:
        raise ValueError("global_pool: one output per row")
    if R == 0:
        return
    if S == 0:
        raise ValueError("global_pool: empty rows")
    cdef int use_avx2 = avx2 and _avx2
    if not is_max:
        with nogil:
            global_mean_rows(use_avx2, &x[0, 0], &y[0], R, S)
        return
    with nogil:
        for r in range(R):
            m = x[r, 0]
            for i in range(1, S):
                v = x[r, i]
                if v > m:
                    m = v
            y[r] = m


def dwc8(const float[:, :, :, ::1] x, const float[:, :, ::1] w8, const float[:, ::1] b8,
         const long[::1] off, const float[:, :, :, ::1] z, float[:, :, :, ::1] y,
         float[:, ::1] Q, float[:, ::1] obuf, int sh, int sw, int ph, int pw, int Hp, int Wp,
         int mode, float p0, float p1, bint has_z, bint vector, bint split_rows=False):
    """x (N, C, H, W) -> y (N, C, OH, OW); z like y when has_z (else any 4-D array);
    w8 (ceil(C/L), T, L), b8 (ceil(C/L), L), off (T,), L = 8 (AVX2) or 16 (AVX-512F) lanes;
    per thread t (Q.shape[0] OpenMP threads, each a range of the channel groups, or with
    split_rows of the output rows) Q[t] (>= Hp*Wp*L, zeroed), obuf[t] (>= obuf_floats(OH,
    OW, L)). vector False, or a width this CPU (or EDGENN_MAX_ISA) lacks: the portable C
    loops, any L."""
    if x.shape[1] != y.shape[1]:
        raise ValueError("dwc8: x and y have the same channels")
    _dwc8_run(x, NULL, w8, b8, off, z, y, Q, obuf, sh, sw, ph, pw, Hp, Wp, mode, p0, p1,
              has_z, vector, split_rows)


def expand_dwc8(const float[:, :, :, ::1] x, const float[:, :, ::1] ew, const float[:, ::1] eb,
                int emode, float ep0, float ep1, const float[:, :, ::1] w8,
                const float[:, ::1] b8, const long[::1] off, const float[:, :, :, ::1] z,
                float[:, :, :, ::1] y, float[:, ::1] Q, float[:, ::1] obuf, int sh, int sw,
                int ph, int pw, int Hp, int Wp, int mode, float p0, float p1, bint has_z,
                bint vector, bint split_rows=False):
    """dwc8 of a fused 1x1 conv's output: x (N, K, H, W) its input, ew (ceil(C/L), K, L)
    its weights (zero past C), eb (ceil(C/L), L) its bias, emode / ep0 / ep1 its
    activation (one of those computed in registers: none, Relu, Clip, HardSigmoid,
    HardSwish, LeakyRelu); each group's padded plane is computed, never stored whole."""
    cdef dwc8_expand ex
    cdef int L = w8.shape[2]
    if ew.shape[0] < w8.shape[0] or eb.shape[0] < w8.shape[0] or ew.shape[2] != L \
            or eb.shape[1] != L or ew.shape[1] != x.shape[1] or emode in (5, 6, 8):
        raise ValueError("expand_dwc8: weights (groups, K, lanes), an activation in registers")
    ex.K, ex.w, ex.b = x.shape[1], &ew[0, 0, 0], &eb[0, 0]
    ex.mode, ex.p0, ex.p1 = emode, ep0, ep1
    _dwc8_run(x, &ex, w8, b8, off, z, y, Q, obuf, sh, sw, ph, pw, Hp, Wp, mode, p0, p1,
              has_z, vector, split_rows)


cdef _dwc8_run(const float[:, :, :, ::1] x, const dwc8_expand *ex, const float[:, :, ::1] w8,
               const float[:, ::1] b8, const long[::1] off, const float[:, :, :, ::1] z,
               float[:, :, :, ::1] y, float[:, ::1] Q, float[:, ::1] obuf, int sh, int sw,
               int ph, int pw, int Hp, int Wp, int mode, float p0, float p1, bint has_z,
               bint vector, bint split_rows):
    cdef dwc8_geom g
    cdef int L = w8.shape[2]
    if L not in HAVE or b8.shape[1] != L or w8.shape[1] != off.shape[0]:
        raise ValueError("dwc8: 8 or 16 lanes, weights (groups, taps, lanes)")
    if y.shape[0] != x.shape[0]:
        raise ValueError("dwc8: x and y have the same batch")
    g.kind, g.cnt, g.ex = 0, NULL, ex
    g.N, g.C, g.H, g.W = x.shape[0], y.shape[1], x.shape[2], x.shape[3]
    g.OH, g.OW, g.T = y.shape[2], y.shape[3], off.shape[0]
    g.sh, g.sw, g.ph, g.pw, g.Hp, g.Wp = sh, sw, ph, pw, Hp, Wp
    g.mode, g.p0, g.p1, g.has_z, g.L = mode, p0, p1, has_z, L
    cdef const float *zp = &z[0, 0, 0, 0] if has_z else NULL
    cdef int tier = (DWC_AVX512 if L == 16 else DWC_AVX2) if vector and HAVE[L] \
        else DWC_GENERIC
    cdef int nt = Q.shape[0], groups = (g.C + L - 1) // L, t
    cdef int per = (groups + nt - 1) // nt
    if Q.shape[1] < <long>Hp * Wp * L or obuf.shape[1] < dwc8_obuf_floats(g.OH, g.OW, L) \
            or obuf.shape[0] < nt or w8.shape[0] < groups or b8.shape[0] < groups:
        raise ValueError("dwc8: scratch smaller than the geometry needs")
    cdef int rc = 0
    if nt == 1:
        with nogil:
            rc = dwc8_run(tier, &x[0, 0, 0, 0], &w8[0, 0, 0], &b8[0, 0], &off[0], zp,
                          &y[0, 0, 0, 0], &Q[0, 0], &obuf[0, 0], &g)
        if rc:
            raise ValueError("dwc8: the tier and the lane count disagree")
        return
    if split_rows:      # thread t: every group of output rows [t*OH/nt, (t+1)*OH/nt)
        with nogil:
            for t in prange(nt, num_threads=nt, schedule="static"):
                dwc8_run_part(tier, &x[0, 0, 0, 0], &w8[0, 0, 0], &b8[0, 0], &off[0], zp,
                              &y[0, 0, 0, 0], &Q[t, 0], &obuf[t, 0], &g, 0, groups,
                              t * g.OH // nt, (t + 1) * g.OH // nt)
        return
    with nogil:
        for t in prange(nt, num_threads=nt, schedule="static"):
            dwc8_run_groups(tier, &x[0, 0, 0, 0], &w8[0, 0, 0], &b8[0, 0], &off[0], zp,
                            &y[0, 0, 0, 0], &Q[t, 0], &obuf[t, 0], &g, t * per,
                            min(groups, (t + 1) * per))
