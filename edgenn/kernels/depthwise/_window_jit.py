"""Numba loops behind the depthwise_numba, maxpool_numba and avgpool_numba kernels
(depthwise.py, pool.py).

Imported lazily by those files: importing numba costs 0.35 s, so nothing here is touched
until a model actually plans one of these kernels. Functions are module-level so Numba's
disk cache finds them again in the next process.

One layout trick serves every window op. Each input plane x (H, W) is copied once into a
padded *polyphase* plane P (sh, sw, Hq, Wq), flattened:

    P[a, b, u, v] = xpad[u*sh + a, v*sw + b]       (xpad = x padded with `fill`)

so that the tap (i, j) of output (oy, ox) is  P_flat[off[i, j] + oy*Wq + ox],  with
off[i, j] = ((i*dh % sh)*sw + j*dw % sw)*Hq*Wq + (i*dh // sh)*Wq + j*dw // sw. Strides,
dilations and padding all disappear into the offsets: every tap is a contiguous,
bounds-check-free run over the output grid laid out with row pitch Wq >= OW, which LLVM
vectorizes (AVX2 here). The Wq - OW extra columns of each row are computed and dropped.
Pad cells are written once, when P is allocated (the pack only ever writes interior cells).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ..native import epilogue

jit = numba.njit(cache=True, nogil=True)

# activation codes (_epilogue.h's, through epilogue.NAMES): named here, as constants the
# compiled functions fold, and checked against the one description at import (numba's
# on-disk cache keys on this file alone)
NONE, RELU, CLIP, HARDSWISH, HARDSIGMOID, SIGMOID, SILU, LEAKYRELU, GELU = range(9)
assert epilogue.NAMES[:9] == ("", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid",
                              "SiLU", "LeakyRelu", "Gelu"), epilogue.NAMES
# Runs over the output are computed in whole blocks of BLOCK floats (LLVM's vector loop
# with its 4x interleave), so no short run ever falls into the scalar remainder loop; the
# scratch buffers carry BLOCK floats of slack for it (see depthwise.Polyphase).
BLOCK = 32


@jit
def blocks(n):
    return (n + BLOCK - 1) // BLOCK * BLOCK


@jit
def pack(xc, P, ph, pw, sh, sw, Hq, Wq):
    """xc (H, W) -> interior cells of the polyphase plane P (flat); pads stay untouched."""
    H, W = xc.shape
    u, a = ph // sh, ph % sh             # padded row r = iy + ph = u*sh + a, stepped below
    for iy in range(H):
        if iy > 0:
            a += 1
            if a == sh:
                a = 0
                u += 1
        if u >= Hq:                      # rows no window reaches
            break
        src = xc[iy]
        if sw == 1:
            dst = P[(a * Hq + u) * Wq + pw:]
            for ix in range(min(W, Wq - pw)):
                dst[ix] = src[ix]
        elif sw == 2:                    # even ix -> phase pw % 2, odd ix -> the other
            ve, vo = pw // 2, (pw + 1) // 2
            de = P[((a * 2 + pw % 2) * Hq + u) * Wq + ve:]
            do = P[((a * 2 + (pw + 1) % 2) * Hq + u) * Wq + vo:]
            ne, no = min((W + 1) // 2, Wq - ve), min(W // 2, Wq - vo)
            n2 = min(ne, no)
            for t in range(n2):
                de[t] = src[2 * t]
                do[t] = src[2 * t + 1]
            for t in range(max(n2, 0), ne):
                de[t] = src[2 * t]
            for t in range(max(n2, 0), no):
                do[t] = src[2 * t + 1]
        else:
            for b in range(sw):          # padded columns c = v*sw + b, input ix = c - pw
                vlo = max(0, (pw - b + sw - 1) // sw)
                vhi = min(Wq, (W - 1 + pw - b) // sw + 1)
                if vhi <= vlo:
                    continue
                dst = P[((a * sw + b) * Hq + u) * Wq + vlo:]
                s = src[vlo * sw + b - pw:]
                for t in range(vhi - vlo):
                    dst[t] = s[t * sw]


# -- weighted tap sums: tmp[k] = bias + sum_t w[t] * P[off[t] + k0 + k], k < nk ---------------

@jit
def _taps9(P, off, w, t, init, tmp, k0, nk):
    """Nine taps t..t+8 held in scalars; the first group (t == 0) starts from `init`, the
    others accumulate onto tmp."""
    p0 = P[off[t] + k0:]
    p1 = P[off[t + 1] + k0:]
    p2 = P[off[t + 2] + k0:]
    p3 = P[off[t + 3] + k0:]
    p4 = P[off[t + 4] + k0:]
    p5 = P[off[t + 5] + k0:]
    p6 = P[off[t + 6] + k0:]
    p7 = P[off[t + 7] + k0:]
    p8 = P[off[t + 8] + k0:]
    w0, w1, w2, w3, w4 = w[t], w[t + 1], w[t + 2], w[t + 3], w[t + 4]
    w5, w6, w7, w8 = w[t + 5], w[t + 6], w[t + 7], w[t + 8]
    if t == 0:
        for k in range(nk):
            tmp[k] = (init + w0 * p0[k] + w1 * p1[k] + w2 * p2[k] + w3 * p3[k] + w4 * p4[k]
                      + w5 * p5[k] + w6 * p6[k] + w7 * p7[k] + w8 * p8[k])
    else:
        for k in range(nk):
            tmp[k] = (tmp[k] + w0 * p0[k] + w1 * p1[k] + w2 * p2[k] + w3 * p3[k] + w4 * p4[k]
                      + w5 * p5[k] + w6 * p6[k] + w7 * p7[k] + w8 * p8[k])


@jit
def _taps3(P, off, w, t, tmp, k0, nk):
    p0 = P[off[t] + k0:]
    p1 = P[off[t + 1] + k0:]
    p2 = P[off[t + 2] + k0:]
    w0, w1, w2 = w[t], w[t + 1], w[t + 2]
    for k in range(nk):
        tmp[k] = tmp[k] + w0 * p0[k] + w1 * p1[k] + w2 * p2[k]


@jit
def _taps1(P, off, w, t, tmp, k0, nk):
    p0 = P[off[t] + k0:]
    w0 = w[t]
    for k in range(nk):
        tmp[k] = tmp[k] + w0 * p0[k]


@jit
def tap_sum(P, off, w, bias, tmp, k0, nk):
    """tmp[:nk] = bias + sum over taps, in groups of 9, 3 and 1 taps per pass (nk is a
    multiple of BLOCK)."""
    T = off.shape[0]
    t = 0
    if T >= 9:
        _taps9(P, off, w, 0, bias, tmp, k0, nk)
        t = 9
    else:
        for k in range(nk):
            tmp[k] = bias
    while T - t >= 9:
        _taps9(P, off, w, t, bias, tmp, k0, nk)
        t += 9
    while T - t >= 3:
        _taps3(P, off, w, t, tmp, k0, nk)
        t += 3
    while t < T:
        _taps1(P, off, w, t, tmp, k0, nk)
        t += 1


@jit
def tap_max(P, off, tmp, k0, nk):
    """tmp[:nk] = max over taps (v > m ? v : m, as the reference; nk a multiple of BLOCK)."""
    T = off.shape[0]
    p0 = P[off[0] + k0:]
    for k in range(nk):
        tmp[k] = p0[k]
    t = 1
    while T - t >= 3:
        p0 = P[off[t] + k0:]
        p1 = P[off[t + 1] + k0:]
        p2 = P[off[t + 2] + k0:]
        for k in range(nk):
            m = tmp[k]
            v = p0[k]
            m = v if v > m else m
            v = p1[k]
            m = v if v > m else m
            v = p2[k]
            tmp[k] = v if v > m else m
        t += 3
    while t < T:
        p0 = P[off[t] + k0:]
        for k in range(nk):
            m = tmp[k]
            v = p0[k]
            tmp[k] = v if v > m else m
        t += 1


# -- epilogue on one output row, straight from the L1-resident tmp row --------------------------

@jit
def _sigmoid(v):
    e = math.exp(-abs(v))               # never overflows
    return 1.0 / (1.0 + e) if v >= 0 else e / (1.0 + e)


@jit
def _act_transcendental(s, d, n, mode):
    """d[:n] = Sigmoid, SiLU or exact Gelu of s[:n] (in float64; scalar libm calls)."""
    for i in range(n):
        v = np.float64(s[i])
        if mode == SIGMOID:
            d[i] = _sigmoid(v)
        elif mode == SILU:
            d[i] = v * _sigmoid(v)
        else:
            d[i] = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))


@numba.njit(cache=True, nogil=True, inline="always")
def act_row(s, d, n, mode, p0, p1):
    """d[:n] = activation(s[:n]) for the cheap (vectorized) activations; p0, p1 float32
    params (Clip lo/hi, HardSigmoid alpha/beta, LeakyRelu alpha). Inlined by Numba: in
    per-row code, an array view passed to a real call costs atomic refcounts each time.
    (The Sigmoid, SiLU and Gelu loops live apart, in _act_transcendental: inlined here,
    their libm calls slowed the cheap activations 4x.)"""
    zero = np.float32(0.0)
    one = np.float32(1.0)
    if mode == NONE:
        for i in range(n):
            d[i] = s[i]
    elif mode == RELU:
        for i in range(n):
            v = s[i]
            d[i] = zero if v < zero else v
    elif mode == CLIP:
        for i in range(n):
            v = s[i]
            v = p0 if v < p0 else v
            d[i] = p1 if v > p1 else v
    elif mode == HARDSIGMOID:
        for i in range(n):
            v = s[i] * p0 + p1
            v = zero if v < zero else v
            d[i] = one if v > one else v
    elif mode == HARDSWISH:
        sixth = np.float32(1 / 6)
        half = np.float32(0.5)
        for i in range(n):
            v = s[i]
            g = v * sixth + half
            g = zero if g < zero else g
            g = one if g > one else g
            d[i] = v * g
    else:  # LEAKYRELU
        for i in range(n):
            v = s[i]
            d[i] = v if v >= zero else v * p0


@jit
def _finish_rows(tmp, Wq, out, oy0, oy1, z, has_z, mode, p0, p1):
    """out[oy0:oy1] = act(tmp rows (+ z)); tmp row r starts at r*Wq. The activation runs
    over the whole block in place (vectorized, dropped columns included), then the rows
    are copied out."""
    OW = out.shape[1]
    if has_z:
        for oy in range(oy0, oy1):
            s = tmp[(oy - oy0) * Wq:]
            zr = z[oy]
            for ox in range(OW):
                s[ox] += zr[ox]
    n = blocks((oy1 - oy0) * Wq)
    if mode >= SIGMOID and mode != LEAKYRELU:
        _act_transcendental(tmp, tmp, n, mode)
    elif mode != NONE:
        act_row(tmp, tmp, n, mode, p0, p1)
    for oy in range(oy0, oy1):
        s = tmp[(oy - oy0) * Wq:]
        d = out[oy]
        for ox in range(OW):
            d[ox] = s[ox]


# -- depthwise convolution ---------------------------------------------------------------------

@jit
def dw_plane(xc, P, w, off, bias, tmp, out, z, has_z, ph, pw, sh, sw, Hq, Wq, rows,
             mode, p0, p1):
    """One channel: xc (H, W), w (T,) taps, out (OH, OW), z (OH, OW) residual if has_z."""
    pack(xc, P, ph, pw, sh, sw, Hq, Wq)
    OH = out.shape[0]
    for oy0 in range(0, OH, rows):
        oy1 = min(OH, oy0 + rows)
        tap_sum(P, off, w, bias, tmp, oy0 * Wq, blocks((oy1 - oy0) * Wq))
        _finish_rows(tmp, Wq, out, oy0, oy1, z, has_z, mode, p0, p1)


@jit
def depthwise(x, w, off, bias, z, has_z, y, P, tmp, ph, pw, sh, sw, Hq, Wq, rows,
              mode, p0, p1):
    """x (N, C, H, W), w (C, T), bias (C,), z like y (or a dummy), y (N, C, OH, OW);
    P (threads, L) polyphase scratch with pads pre-filled, tmp (threads, >= rows*Wq)."""
    N, C = x.shape[0], x.shape[1]
    for idx in range(N * C):
        b, c = idx // C, idx % C
        zc = z[b, c] if has_z else z[0, 0]
        dw_plane(x[b, c], P[0], w[c], off, bias[c], tmp[0], y[b, c], zc, has_z,
                 ph, pw, sh, sw, Hq, Wq, rows, mode, p0, p1)


@numba.njit(cache=True, nogil=True, parallel=True)
def depthwise_par(nt, x, w, off, bias, z, has_z, y, P, tmp, ph, pw, sh, sw, Hq, Wq, rows,
                  mode, p0, p1):
    """depthwise() over nt <= len(P) threads, channels interleaved."""
    N, C = x.shape[0], x.shape[1]
    for t in prange(nt):
        for idx in range(t, N * C, nt):
            b, c = idx // C, idx % C
            zc = z[b, c] if has_z else z[0, 0]
            dw_plane(x[b, c], P[t], w[c], off, bias[c], tmp[t], y[b, c], zc, has_z,
                     ph, pw, sh, sw, Hq, Wq, rows, mode, p0, p1)


# -- pooling -----------------------------------------------------------------------------------

@jit
def pool_plane(xc, P, off, ones, tmp, out, inv, is_max, ph, pw, sh, sw, Hq, Wq, rows):
    """One channel of MaxPool (is_max; P pads -inf) or AveragePool (P pads 0; inv (L,) is
    1 / (counted cells of each window) laid out like the tmp rows, row pitch Wq)."""
    pack(xc, P, ph, pw, sh, sw, Hq, Wq)
    OH, OW = out.shape
    for oy0 in range(0, OH, rows):
        oy1 = min(OH, oy0 + rows)
        nk = blocks((oy1 - oy0) * Wq)
        if is_max:
            tap_max(P, off, tmp, oy0 * Wq, nk)
        else:
            tap_sum(P, off, ones, np.float32(0.0), tmp, oy0 * Wq, nk)
            iv = inv[oy0 * Wq:]
            for k in range(nk):
                tmp[k] *= iv[k]
        for oy in range(oy0, oy1):
            s = tmp[(oy - oy0) * Wq:]
            d = out[oy]
            for ox in range(OW):
                d[ox] = s[ox]


@jit
def pool(x, off, ones, inv, is_max, y, P, tmp, ph, pw, sh, sw, Hq, Wq, rows):
    """x (N, C, H, W) -> y (N, C, OH, OW); P (threads, L), tmp (threads, >= rows*Wq)."""
    N, C = x.shape[0], x.shape[1]
    for idx in range(N * C):
        b, c = idx // C, idx % C
        pool_plane(x[b, c], P[0], off, ones, tmp[0], y[b, c], inv, is_max,
                   ph, pw, sh, sw, Hq, Wq, rows)


@numba.njit(cache=True, nogil=True, parallel=True)
def pool_par(nt, x, off, ones, inv, is_max, y, P, tmp, ph, pw, sh, sw, Hq, Wq, rows):
    """pool() over nt <= len(P) threads, channels interleaved."""
    N, C = x.shape[0], x.shape[1]
    for t in prange(nt):
        for idx in range(t, N * C, nt):
            b, c = idx // C, idx % C
            pool_plane(x[b, c], P[t], off, ones, tmp[t], y[b, c], inv, is_max,
                       ph, pw, sh, sw, Hq, Wq, rows)
