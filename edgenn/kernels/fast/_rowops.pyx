# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Row operations of transformer models in C (_rowops.h): softmax rows, attention
scale + mask + softmax, LayerNorm rows, erf, exact GELU, bias + GELU rows, sigmoid; the
tiled float32 transpose (_transpose.h).

float32 C-contiguous arrays; every function takes `avx2` (the AVX2+FMA build when true
and the CPU has it, else the portable one) and releases the GIL."""

from cython.parallel cimport prange

include "_epilogue.pxi"

cdef extern from "_cpu.h" nogil:
    int edgenn_isa_x86(int t)
    int EDGENN_ISA_AVX2
    int EDGENN_ISA_AVX512

cdef extern from "_rowops.h" nogil:
    int ROW_MASK_NONE, ROW_MASK_ADD, ROW_MASK_BOOL
    int ROW_ERF, ROW_GELU, ROW_SIGMOID
    void rowops_softmax_rows(int avx2, const float *x, float *y, long R, long C, int log)
    void rowops_scale_mask_softmax(int avx2, float *s, long R, long T, float scale,
                                   const void *mask, long MS, int kind)
    void rowops_layernorm_rows(int avx2, const float *x, const float *scale,
                               const float *bias, float eps, float *y, float *mean,
                               float *inv, long R, long C)
    void rowops_unary(int avx2, const float *x, float *y, long n, int fn)
    void rowops_bias_gelu_rows(int avx2, float *y, const float *bias, long R, long N)
    void rowops_quantize_u8(int avx2, const float *x, unsigned char *y, long n, float scale,
                            int zp, int divide)
    void rowops_dequantize_u8(int avx2, const unsigned char *x, float *y, long n,
                              float scale, int zp)
    void rowops_dynamic_quantize_u8(int avx2, const float *x, unsigned char *y, long n,
                                    float *scale, int *zp)
    void rowops_qadd_u8(int avx2, const unsigned char *a, const unsigned char *b,
                        unsigned char *y, long n, float sa, int za, float sb, int zb,
                        float sy, int zy, int relu)


cdef extern from "_transpose.h" nogil:
    int TR_MAX_RANK
    void tr_run(int tier, const float *x, float *y, int r, const long *shape, const int *perm)


cdef bint _avx2 = edgenn_isa_x86(EDGENN_ISA_AVX2)
cdef bint _avx512 = edgenn_isa_x86(EDGENN_ISA_AVX512)
HAS_AVX2 = _avx2
HAS_AVX512 = _avx512   # the attention softmax's AVX-512 build (scale_mask_softmax)


def softmax_rows(const float[:, ::1] x, float[:, ::1] y, bint avx2=True, bint log=False):
    """x, y (R, C), y may be x: y = softmax(x) per row (log: log-softmax)."""
    assert x.shape[0] == y.shape[0] and x.shape[1] == y.shape[1]
    cdef int a = avx2 and _avx2
    with nogil:
        rowops_softmax_rows(a, &x[0, 0], &y[0, 0], x.shape[0], x.shape[1], log)


cdef int _smx_tier(bint avx2, bint avx512):
    """The attention softmax's build: 2 AVX-512 (where allowed and present), 1 AVX2, 0."""
    return 0 if not (avx2 and _avx2) else 2 if (avx512 and _avx512) else 1


def scale_mask_softmax(float[:, ::1] s, float scale, const float[:, ::1] mask=None,
                       bint avx2=True, bint avx512=True):
    """s (R, T) <- softmax(s * scale + mask) per row; mask (MS, T) float32 (row i uses
    mask row i % MS) or None. avx2 / avx512 False: the builds below (tests)."""
    cdef const float *mp = NULL
    cdef long ms = 1
    if mask is not None:
        assert mask.shape[1] == s.shape[1]
        mp, ms = &mask[0, 0], mask.shape[0]
    cdef int a = _smx_tier(avx2, avx512)
    with nogil:
        rowops_scale_mask_softmax(a, &s[0, 0], s.shape[0], s.shape[1], scale, mp, ms,
                                  ROW_MASK_ADD)


def scale_bool_mask_softmax(float[:, ::1] s, float scale, const unsigned char[:, ::1] keep,
                            bint avx2=True, bint avx512=True):
    """s (R, T) <- softmax(where(keep, s * scale, -inf)) per row; keep (MS, T) a bool
    array viewed as uint8 (row i uses keep row i % MS)."""
    assert keep.shape[1] == s.shape[1]
    cdef int a = _smx_tier(avx2, avx512)
    with nogil:
        rowops_scale_mask_softmax(a, &s[0, 0], s.shape[0], s.shape[1], scale, &keep[0, 0],
                                  keep.shape[0], ROW_MASK_BOOL)


def layernorm_rows(const float[:, ::1] x, const float[::1] scale, const float[::1] bias,
                   float eps, float[:, ::1] y, float[::1] mean=None, float[::1] inv=None,
                   bint avx2=True):
    """x, y (R, C); scale (C,), bias (C,) or None; mean, inv (R,) or None: the saved
    statistics (inv = 1 / sqrt(var + eps))."""
    cdef long R = x.shape[0], C = x.shape[1]
    assert y.shape[0] == R and y.shape[1] == C and scale.shape[0] == C
    assert bias is None or bias.shape[0] == C
    assert (mean is None or mean.shape[0] == R) and (inv is None or inv.shape[0] == R)
    cdef const float *bp = NULL
    if bias is not None:
        bp = &bias[0]
    cdef float *mp = NULL if mean is None else &mean[0]
    cdef float *ip = NULL if inv is None else &inv[0]
    cdef int a = avx2 and _avx2
    with nogil:
        rowops_layernorm_rows(a, &x[0, 0], &scale[0], bp, eps, &y[0, 0], mp, ip, R, C)


cdef inline void _unary(const float[::1] x, float[::1] y, int fn, bint avx2):
    assert x.shape[0] == y.shape[0]
    cdef int a = avx2 and _avx2
    with nogil:
        rowops_unary(a, &x[0], &y[0], x.shape[0], fn)


def gelu(const float[::1] x, float[::1] y, bint avx2=True):
    """Exact GELU, x/2 (1 + erf(x/sqrt 2)); x, y (n,), y may be x."""
    _unary(x, y, ROW_GELU, avx2)


def erf(const float[::1] x, float[::1] y, bint avx2=True):
    _unary(x, y, ROW_ERF, avx2)


def sigmoid(const float[::1] x, float[::1] y, bint avx2=True):
    _unary(x, y, ROW_SIGMOID, avx2)


def bias_gelu_rows(float[:, ::1] y, const float[::1] bias, bint avx2=True):
    """y (R, N) <- gelu(y + bias), bias (N,)."""
    assert bias.shape[0] == y.shape[1]
    cdef int a = avx2 and _avx2
    with nogil:
        rowops_bias_gelu_rows(a, &y[0, 0], &bias[0], y.shape[0], y.shape[1])


def quantize_u8(const float[::1] x, unsigned char[::1] y, float scale, int zero_point,
                bint divide=True, bint avx2=True, int threads=1):
    """y = clamp(rint(x / scale) + zero_point, 0, 255) (divide) or rint(x * scale) + ...;
    threads > 1: OpenMP threads take 64-element-aligned ranges (elementwise: the same
    bytes)."""
    assert x.shape[0] == y.shape[0]
    cdef int a = avx2 and _avx2
    cdef long n = x.shape[0], per, lo, t
    if n == 0:
        return
    if threads <= 1:
        with nogil:
            rowops_quantize_u8(a, &x[0], &y[0], n, scale, zero_point, divide)
        return
    per = ((n + threads - 1) // threads + 63) // 64 * 64
    with nogil:
        for t in prange(threads, num_threads=threads, schedule="static"):
            lo = t * per
            if lo < n:
                rowops_quantize_u8(a, &x[lo], &y[lo], min(per, n - lo), scale, zero_point,
                                   divide)


def dynamic_quantize_u8(const float[::1] x, unsigned char[::1] y, bint avx2=True):
    """ONNX DynamicQuantizeLinear: y = quantize(x) over [min(x, 0), max(x, 0)];
    -> (scale, zero_point)."""
    assert x.shape[0] == y.shape[0]
    cdef int a = avx2 and _avx2
    cdef float scale = 1.0 / 255
    cdef int zp = 0
    if x.shape[0] == 0:
        return scale, zp
    with nogil:
        rowops_dynamic_quantize_u8(a, &x[0], &y[0], x.shape[0], &scale, &zp)
    return scale, zp


def dequantize_u8(const unsigned char[::1] x, float[::1] y, float scale, int zero_point,
                  bint avx2=True):
    """y = float32(x - zero_point) * scale."""
    assert x.shape[0] == y.shape[0]
    cdef int a = avx2 and _avx2
    if x.shape[0] == 0:
        return
    with nogil:
        rowops_dequantize_u8(a, &x[0], &y[0], x.shape[0], scale, zero_point)


def qadd_u8(const unsigned char[::1] a, const unsigned char[::1] b, unsigned char[::1] y,
            float sa, int za, float sb, int zb, float sy, int zy, bint relu,
            bint avx2=True):
    """y = clamp(rint([relu]((a - za) * sa + (b - zb) * sb) / sy) + zy, 0, 255)."""
    assert a.shape[0] == b.shape[0] == y.shape[0]
    cdef int av = avx2 and _avx2
    if a.shape[0] == 0:
        return
    with nogil:
        rowops_qadd_u8(av, &a[0], &b[0], &y[0], a.shape[0], sa, za, sb, zb, sy, zy, relu)


def transpose(const float[::1] x, float[::1] y, shape, perm, bint avx2=True):
    """y (flat, contiguous) = x (flat, contiguous, of `shape`) transposed by perm, in 8 x 8
    tiles (_transpose.h). The source's last axis must not be the output's last
    (perm[-1] != len(shape) - 1: NumPy's copy already reads rows there)."""
    cdef int r = len(shape), k
    cdef long dims[8]
    cdef int p[8]
    if not 2 <= r <= TR_MAX_RANK or sorted(perm) != list(range(r)) or perm[r - 1] == r - 1:
        raise ValueError(f"transpose: perm {list(perm)} of rank {r} is not one this kernel takes")
    cdef long total = 1
    for k in range(r):
        dims[k] = shape[k]
        p[k] = perm[k]
        total *= dims[k]
    if x.shape[0] != total or y.shape[0] != total:
        raise ValueError("transpose: x and y must hold prod(shape) floats")
    if total == 0:
        return
    cdef int tier = 1 if (avx2 and _avx2) else 0
    with nogil:
        tr_run(tier, &x[0], &y[0], r, dims, p)
