"""Numba loops of upsample.py and batchnorm.py (imported lazily: numba costs ~0.35 s).

The upsampling loops write every output row contiguously, reading from a few short-strided
source streams; numpy's broadcast / transposed copies would run inner loops of length
f (2..8) instead.
"""
import numba


@numba.njit(cache=True, nogil=True)
def nearest_int(x, fh, fw, y):
    """x (P, H, W) -> y (P, H*fh, W*fw): y[p, i*fh + a, j*fw + b] = x[p, i, j].
    fw 2 / 4 get constant-trip inner loops (unrolled into in-order stores: much faster
    than a variable-trip inner loop here; fw 8 gains nothing from it)."""
    p_, h, w = x.shape
    for p in range(p_):
        for i in range(h):
            s = x[p, i]
            for a in range(fh):
                r = y[p, i * fh + a]
                if fw == 2:
                    for j in range(w):
                        v = s[j]
                        r[2 * j] = v
                        r[2 * j + 1] = v
                elif fw == 4:
                    for j in range(w):
                        v = s[j]
                        for b in range(4):
                            r[4 * j + b] = v
                else:
                    for j in range(w):
                        v = s[j]
                        for b in range(fw):
                            r[j * fw + b] = v


@numba.njit(cache=True, nogil=True)
def tile_scatter(cols, bias, y):
    """cols (M, kh, kw, H, W), bias (M,) -> y (M, H*kh, W*kw):
    y[m, i*kh + a, j*kw + b] = cols[m, a, b, i, j] + bias[m] (non-overlapping taps)."""
    m_, kh, kw, h, w = cols.shape
    for m in range(m_):
        bm = bias[m]
        for i in range(h):
            for a in range(kh):
                r = y[m, i * kh + a]
                if kw == 2:   # the common 2x2/s2: two streams interleaved, stores in order
                    s0 = cols[m, a, 0, i]
                    s1 = cols[m, a, 1, i]
                    for j in range(w):
                        r[2 * j] = s0[j] + bm
                        r[2 * j + 1] = s1[j] + bm
                else:
                    for j in range(w):
                        for b in range(kw):
                            r[j * kw + b] = cols[m, a, b, i, j] + bm


@numba.njit(cache=True, nogil=True)
def channel_affine(x, a, b, y):
    """x, y (N, C, S): y[n, c, :] = x[n, c, :] * a[c] + b[c] (BatchNormalization)."""
    n_, c_, s_ = x.shape
    for n in range(n_):
        for c in range(c_):
            ac, bc = a[c], b[c]
            xr, yr = x[n, c], y[n, c]
            for s in range(s_):
                yr[s] = xr[s] * ac + bc
