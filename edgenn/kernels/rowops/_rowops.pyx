# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Row operations of transformer models in C (_rowops.h): softmax rows, attention
scale + mask + softmax, LayerNorm rows, RMS norm rows, erf, exact GELU, bias + GELU rows,
sigmoid; the tiled float32 transpose (_transpose.h).

float32 C-contiguous arrays; every function takes `build`, a row of the table (TABLE,
_rowops.h's rowops_rows; None: the best this CPU runs), and releases the GIL."""
from collections import namedtuple

from cython.parallel cimport prange

from edgenn.kernels.native.tables import Table

include "_epilogue.pxi"

include "_cpu.pxi"
include "cstep.pxi"

cdef extern from "_rowops.h" nogil:
    int ROW_MASK_NONE, ROW_MASK_ADD, ROW_MASK_BOOL
    int ROW_ERF, ROW_GELU, ROW_SIGMOID
    ctypedef void (*tr2d_fn)(const float *src, long lds, float *dst, long ldd, long n, long m)
    ctypedef struct rowops_row:
        const char *name
        int isa
        tr2d_fn transpose2d
    const rowops_row rowops_rows[]
    int ROWOPS_ROW_COUNT
    void rowops_softmax_rows(const rowops_row *rw, const float *x, float *y, long R, long C,
                             int log)
    void rowops_scale_mask_softmax(const rowops_row *rw, float *s, long R, long T, float scale,
                                   const void *mask, long MS, int kind)
    void rowops_layernorm_rows(const rowops_row *rw, const float *x, const float *scale,
                               const float *bias, float eps, float *y, float *mean,
                               float *inv, long R, long C)
    void rowops_rmsnorm_rows(const rowops_row *rw, const float *x, const float *scale,
                             float eps, float *y, long R, long C)
    void rowops_unary(const rowops_row *rw, const float *x, float *y, long n, int fn)
    void rowops_bias_gelu_rows(const rowops_row *rw, float *y, const float *bias, long R,
                               long N)
    void rowops_quantize_u8(const rowops_row *rw, const float *x, unsigned char *y, long n,
                            float scale, int zp, int divide)
    void rowops_dequantize_u8(const rowops_row *rw, const unsigned char *x, float *y, long n,
                              float scale, int zp)
    void rowops_dynamic_quantize_u8(const rowops_row *rw, const float *x, unsigned char *y,
                                    long n, float *scale, int *zp)
    void rowops_qadd_u8(const rowops_row *rw, const unsigned char *a, const unsigned char *b,
                        unsigned char *y, long n, float sa, int za, float sb, int zb,
                        float sy, int zy, int relu)
    int TR_MAX_RANK
    void tr_run(tr2d_fn tile, const float *x, float *y, int r, const long *shape,
                const int *perm)

# A row of the table (_rowops.h's rowops_rows): name, isa (the tier it needs), usable
# (this CPU runs it)
Row = namedtuple("Row", "name isa usable")
TABLE = Table("rowops", tuple(
    Row(rowops_rows[i].name.decode(), edgenn_isa_name(rowops_rows[i].isa).decode(),
        bool(edgenn_row_usable(rowops_rows[i].isa)))
    for i in range(ROWOPS_ROW_COUNT)))
ROWS = TABLE.rows
rows = TABLE.usable
cdef int _best = TABLE.index(TABLE.best())


cdef const rowops_row *_row(str build) except NULL:
    """The table's row `build` (None: the best this CPU runs)."""
    return &rowops_rows[_best if build is None else TABLE.index(build)]


# -- C steps for the runtime's compiled run loop (kernels/native/_cstep.h) ----------------

ctypedef struct row_step:
    void **x
    void **y
    long R, C
    int fn                           # ROW_* of rowops_unary, or log for softmax
    const rowops_row *row


cdef int _unary_step(const void *params) noexcept nogil:
    cdef const row_step *p = <const row_step *>params
    rowops_unary(p.row, <const float *>p.x[0], <float *>p.y[0], p.C, p.fn)
    return 0


cdef int _softmax_step(const void *params) noexcept nogil:
    cdef const row_step *p = <const row_step *>params
    rowops_softmax_rows(p.row, <const float *>p.x[0], <float *>p.y[0], p.R, p.C, p.fn)
    return 0


cdef object _row_step(nogil_step_fn fn, long R, long C, int f, x_cell, y_cell, str build):
    cdef row_step *p = <row_step *>malloc(sizeof(row_step))
    if p == NULL:
        raise MemoryError()
    p.x, p.y, p.R, p.C, p.fn, p.row = cell(x_cell), cell(y_cell), R, C, f, _row(build)
    return new_nogil_cstep(fn, p, R * C)


def sigmoid_cstep(long n, x_cell, y_cell, str build=None):
    """sigmoid over n values as a C step (the `sigmoid` below, cells of x and y)."""
    return _row_step(_unary_step, 1, n, ROW_SIGMOID, x_cell, y_cell, build)


def gelu_cstep(long n, x_cell, y_cell, str build=None):
    return _row_step(_unary_step, 1, n, ROW_GELU, x_cell, y_cell, build)


def softmax_cstep(long R, long C, bint log, x_cell, y_cell, str build=None):
    """softmax_rows on (R, C) as a C step."""
    return _row_step(_softmax_step, R, C, log, x_cell, y_cell, build)


def softmax_rows(const float[:, ::1] x, float[:, ::1] y, str build=None, bint log=False):
    """x, y (R, C), y may be x: y = softmax(x) per row (log: log-softmax)."""
    assert x.shape[0] == y.shape[0] and x.shape[1] == y.shape[1]
    cdef const rowops_row *a = _row(build)
    with nogil:
        rowops_softmax_rows(a, &x[0, 0], &y[0, 0], x.shape[0], x.shape[1], log)


def scale_mask_softmax(float[:, ::1] s, float scale, const float[:, ::1] mask=None,
                       str build=None):
    """s (R, T) <- softmax(s * scale + mask) per row; mask (MS, T) float32 (row i uses
    mask row i % MS) or None."""
    cdef const float *mp = NULL
    cdef long ms = 1
    if mask is not None:
        assert mask.shape[1] == s.shape[1]
        mp, ms = &mask[0, 0], mask.shape[0]
    cdef const rowops_row *a = _row(build)
    with nogil:
        rowops_scale_mask_softmax(a, &s[0, 0], s.shape[0], s.shape[1], scale, mp, ms,
                                  ROW_MASK_ADD)


def scale_bool_mask_softmax(float[:, ::1] s, float scale, const unsigned char[:, ::1] keep,
                            str build=None):
    """s (R, T) <- softmax(where(keep, s * scale, -inf)) per row; keep (MS, T) a bool
    array viewed as uint8 (row i uses keep row i % MS)."""
    assert keep.shape[1] == s.shape[1]
    cdef const rowops_row *a = _row(build)
    with nogil:
        rowops_scale_mask_softmax(a, &s[0, 0], s.shape[0], s.shape[1], scale, &keep[0, 0],
                                  keep.shape[0], ROW_MASK_BOOL)


def layernorm_rows(const float[:, ::1] x, const float[::1] scale, const float[::1] bias,
                   float eps, float[:, ::1] y, float[::1] mean=None, float[::1] inv=None,
                   str build=None):
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
    cdef const rowops_row *a = _row(build)
    with nogil:
        rowops_layernorm_rows(a, &x[0, 0], &scale[0], bp, eps, &y[0, 0], mp, ip, R, C)


def rmsnorm_rows(const float[:, ::1] x, const float[::1] scale, float eps, float[:, ::1] y,
                 str build=None):
    """x, y (R, C), y may be x; scale (C,): y = x / sqrt(mean(x^2) + eps) * scale per row
    (ONNX RMSNormalization over the last axis, float32)."""
    cdef long R = x.shape[0], C = x.shape[1]
    assert y.shape[0] == R and y.shape[1] == C and scale.shape[0] == C and C > 0
    cdef const rowops_row *a = _row(build)
    if R == 0:
        return
    with nogil:
        rowops_rmsnorm_rows(a, &x[0, 0], &scale[0], eps, &y[0, 0], R, C)


cdef inline void _unary(const float[::1] x, float[::1] y, int fn, str build):
    assert x.shape[0] == y.shape[0]
    cdef const rowops_row *a = _row(build)
    with nogil:
        rowops_unary(a, &x[0], &y[0], x.shape[0], fn)


def gelu(const float[::1] x, float[::1] y, str build=None):
    """Exact GELU, x/2 (1 + erf(x/sqrt 2)); x, y (n,), y may be x."""
    _unary(x, y, ROW_GELU, build)


def erf(const float[::1] x, float[::1] y, str build=None):
    _unary(x, y, ROW_ERF, build)


def sigmoid(const float[::1] x, float[::1] y, str build=None):
    _unary(x, y, ROW_SIGMOID, build)


def bias_gelu_rows(float[:, ::1] y, const float[::1] bias, str build=None):
    """y (R, N) <- gelu(y + bias), bias (N,)."""
    assert bias.shape[0] == y.shape[1]
    cdef const rowops_row *a = _row(build)
    with nogil:
        rowops_bias_gelu_rows(a, &y[0, 0], &bias[0], y.shape[0], y.shape[1])


def quantize_u8(const float[::1] x, unsigned char[::1] y, float scale, int zero_point,
                bint divide=True, str build=None, int threads=1):
    """y = clamp(rint(x / scale) + zero_point, 0, 255) (divide) or rint(x * scale) + ...;
    threads > 1: OpenMP threads take 64-element-aligned ranges (elementwise: the same
    bytes)."""
    assert x.shape[0] == y.shape[0]
    cdef const rowops_row *a = _row(build)
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


def dynamic_quantize_u8(const float[::1] x, unsigned char[::1] y, str build=None):
    """ONNX DynamicQuantizeLinear: y = quantize(x) over [min(x, 0), max(x, 0)];
    -> (scale, zero_point)."""
    assert x.shape[0] == y.shape[0]
    cdef const rowops_row *a = _row(build)
    cdef float scale = 1.0 / 255
    cdef int zp = 0
    if x.shape[0] == 0:
        return scale, zp
    with nogil:
        rowops_dynamic_quantize_u8(a, &x[0], &y[0], x.shape[0], &scale, &zp)
    return scale, zp


def dequantize_u8(const unsigned char[::1] x, float[::1] y, float scale, int zero_point,
                  str build=None):
    """y = float32(x - zero_point) * scale."""
    assert x.shape[0] == y.shape[0]
    cdef const rowops_row *a = _row(build)
    if x.shape[0] == 0:
        return
    with nogil:
        rowops_dequantize_u8(a, &x[0], &y[0], x.shape[0], scale, zero_point)


def qadd_u8(const unsigned char[::1] a, const unsigned char[::1] b, unsigned char[::1] y,
            float sa, int za, float sb, int zb, float sy, int zy, bint relu,
            str build=None):
    """y = clamp(rint([relu]((a - za) * sa + (b - zb) * sb) / sy) + zy, 0, 255)."""
    assert a.shape[0] == b.shape[0] == y.shape[0]
    cdef const rowops_row *av = _row(build)
    if a.shape[0] == 0:
        return
    with nogil:
        rowops_qadd_u8(av, &a[0], &b[0], &y[0], a.shape[0], sa, za, sb, zb, sy, zy, relu)


def transpose(const float[::1] x, float[::1] y, shape, perm, str build=None):
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
    cdef const rowops_row *rw = _row(build)
    with nogil:
        tr_run(rw.transpose2d, &x[0], &y[0], r, dims, p)
