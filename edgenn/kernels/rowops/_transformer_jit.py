"""The Numba functions behind kernels/rowops/transformer.py (and elementwise/epilogue).

They live at module level, in a module imported only when a kernel is prepared, so that
(1) `import edgenn` never imports numba and (2) Numba's on-disk cache (cache=True) hits on
every later process start: functions defined inside another function are recompiled.
"""
from types import SimpleNamespace

import numba
import numpy as np


f32, i32 = np.float32, np.int32
opts = dict(cache=True, nogil=True, error_model="numpy")
fast = dict(opts, fastmath={"reassoc", "nsz"})  # vectorizes; NaN still propagates
log2e, ln2_hi, ln2_lo = f32(1.4426950408889634), f32(0.693359375), f32(-2.12194440e-4)

@numba.njit(**fast)
def row_max(x):
    m = x[0]
    for j in range(1, x.size):
        m = max(m, x[j])
    return m

@numba.njit(**fast)
def row_sum(x):
    s = f32(0.0)
    for j in range(x.size):
        s += x[j]
    return s

@numba.njit(**opts)
def exp_into(x, shift, yi, sc):
    """y = exp(x - shift) for 1-D x and y (y may be x), given yi = y viewed as int32.
    sc = (pb, pbi, nb): float32 scratch of x's size, the same as int32, int32 scratch.
    The polynomial goes to pb and n to nb, then y's bits = pb's bits + n << 23; the
    separate scratch keeps every loop free of possible aliasing, so each vectorizes."""
    pb, pbi, nb = sc
    for j in range(x.size):  # v clamped; n + 128 = floor(v log2 e + 1/2) + 128 > 0
        v = x[j] - shift
        v = f32(-87.0) if v < f32(-87.0) else v
        v = f32(88.0) if v > f32(88.0) else v
        pb[j] = v
        nb[j] = i32(v * log2e + f32(128.5))  # truncation = floor: no libm call
    for j in range(x.size):  # 2^r on r = v - n ln 2 in [-ln2/2, ln2/2]
        fn = f32(nb[j]) - f32(128.0)
        v = pb[j]
        r = v - fn * ln2_hi - fn * ln2_lo
        q = f32(1.9875691500e-4)
        q = q * r + f32(1.3981999507e-3)
        q = q * r + f32(8.3334519073e-3)
        q = q * r + f32(4.1665795894e-2)
        q = q * r + f32(1.6666665459e-1)
        q = q * r + f32(5.0000001201e-1)
        pb[j] = q * r * r + r + f32(1.0)
    for j in range(x.size):  # times 2^n: n added to the exponent bits
        yi[j] = pbi[j] + ((nb[j] - i32(128)) << i32(23))

@numba.njit(**opts)
def softmax_row(x, y, yi, sc):
    """y = softmax(x) over one row; x may be y. A row with NaN, +inf or only -inf gives
    NaN, as the reference."""
    m = row_max(x)
    if not np.isfinite(m):
        for j in range(x.size):
            y[j] = np.nan
        return
    exp_into(x, m, yi, sc)
    inv = f32(1.0) / row_sum(y)
    tiny = f32(1.1754944e-38)   # FLT_MIN: subnormal probabilities flushed (see _rowops.h)
    for j in range(x.size):
        p = y[j] * inv
        y[j] = p if p >= tiny else f32(0.0)

@numba.njit(**opts)
def softmax_rows(x, y, yi, sc):
    """x, y (R, C) float32 (y may be x), yi = y viewed as int32, sc = scratch(C)."""
    for r in range(x.shape[0]):
        softmax_row(x[r], y[r], yi[r], sc)

@numba.njit(**opts)
def scale_mask_softmax(s, si, sc, scale, mask, kind):
    """Attention probabilities in place: s (R, T) scores = q @ k_t (R = S, or heads * S
    for heads stacked); s <- softmax(s * scale + mask) per row. mask (MS, T) with MS 1
    or S (row i uses mask row i % MS); kind 0 none, 1 additive (float32), 2 boolean
    (False = -inf)."""
    S, T = s.shape
    ms = mask.shape[0]
    for i in range(S):
        row = s[i]
        mi = i % ms
        if kind == 1:
            for j in range(T):
                row[j] = row[j] * scale + mask[mi, j]
        elif kind == 2:
            for j in range(T):
                row[j] = row[j] * scale if mask[mi, j] else -np.inf
        else:
            for j in range(T):
                row[j] = row[j] * scale
        softmax_row(row, row, si[i], sc)

@numba.njit(**opts)
def layernorm_rows(x, scale, bias, eps, y, mean, inv):
    """x, y (R, C); scale, bias (C,); mean, inv (R,) the saved statistics."""
    R, C = x.shape
    for r in range(R):
        xr, yr = x[r], y[r]
        mu = row_sum(xr) / f32(C)
        for j in range(C):
            d = xr[j] - mu
            yr[j] = d * d
        iv = f32(1.0) / np.sqrt(row_sum(yr) / f32(C) + eps)
        for j in range(C):
            yr[j] = (xr[j] - mu) * iv * scale[j] + bias[j]
        mean[r] = mu
        inv[r] = iv

@numba.njit(**opts)
def erf_one(x):
    v = min(max(x, f32(-4.0)), f32(4.0))
    x2 = v * v
    p = x2 * f32(-2.72614225801306e-10) + f32(2.77068142495902e-08)
    p = x2 * p + f32(-2.10102402082508e-06)
    p = x2 * p + f32(-5.69250639462346e-05)
    p = x2 * p + f32(-7.34990630326855e-04)
    p = x2 * p + f32(-2.95459980854025e-03)
    p = x2 * p + f32(-1.60960333262415e-02)
    q = x2 * f32(-1.45660718464996e-05) + f32(-2.13374055278905e-04)
    q = x2 * q + f32(-1.68282697438203e-03)
    q = x2 * q + f32(-7.37332916720468e-03)
    q = x2 * q + f32(-1.42647390514189e-02)
    return v * p / q

@numba.njit(**opts)
def erf(x, y):
    """x, y 1-D (y may be x)."""
    for j in range(x.size):
        y[j] = erf_one(x[j])

@numba.njit(**opts)
def gelu(x, y):
    """Exact GELU, x/2 (1 + erf(x/sqrt 2)); x, y 1-D, distinct. NaN stays NaN."""
    for j in range(x.size):
        v = x[j]
        y[j] = f32(0.5) * v * (f32(1.0) + erf_one(v * f32(0.7071067811865476)))

@numba.njit(**opts)
def gelu_inplace(y):
    for j in range(y.size):
        v = y[j]
        y[j] = f32(0.5) * v * (f32(1.0) + erf_one(v * f32(0.7071067811865476)))

@numba.njit(**opts)
def bias_gelu_rows(y, bias):
    """y (R, N) <- gelu(y + bias), bias (N,): the fused Gemm epilogue."""
    for r in range(y.shape[0]):
        yr = y[r]
        for j in range(y.shape[1]):
            v = yr[j] + bias[j]
            yr[j] = f32(0.5) * v * (f32(1.0) + erf_one(v * f32(0.7071067811865476)))

@numba.njit(**opts)
def sigmoid(x, y, sc):
    """y = 1 / (1 + exp(-x)) without overflow: e = exp(-|x|), then 1/(1+e) or e/(1+e);
    x, y 1-D; sc = scratch(x.size). NaN stays NaN."""
    pb, pbi, nb = sc
    for j in range(x.size):
        y[j] = -abs(x[j])
    exp_into(y, f32(0.0), pbi, sc)  # pb <- exp(-|x|) (exp_into reads y, writes pb)
    for j in range(x.size):
        e = pb[j]
        r = f32(1.0) / (f32(1.0) + e)
        y[j] = r if x[j] >= 0 else (e * r if x[j] < 0 else x[j])

JIT = SimpleNamespace(softmax_rows=softmax_rows, scale_mask_softmax=scale_mask_softmax,
                       layernorm_rows=layernorm_rows, erf=erf, gelu=gelu,
                       gelu_inplace=gelu_inplace,
                       bias_gelu_rows=bias_gelu_rows, sigmoid=sigmoid, exp_into=exp_into)
