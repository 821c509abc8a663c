/* Depthwise 2-D convolution and 2-D pooling, eight channels per SIMD vector ("c8"), for
 * _dwc8.pyx.
 *
 * x (N, C, H, W) -> y (N, C, OH, OW), float32, NCHW. Per image and group of eight channels
 * c0..c0+7: the planes are interleaved into a zero-padded Q (Hp, Wp, 8); then every tap of
 * every output pixel is one 8-lane multiply-add whatever the stride or dilation, with no
 * bounds checks and no short rows (7x7 and 14x14 planes are as efficient as 112x112).
 * The epilogue (bias, residual z, activation) is applied to the accumulator in registers,
 * then each output row of the group is scattered back to the eight NCHW planes.
 * MaxPool (Q padded with -inf) and AveragePool (Q padded with 0, sum / count) are the same
 * loops with max or plain sums over the taps, in the reference's tap order.
 *
 * Two builds of the same loops: dwc8_avx2 (AVX2+FMA, chosen at run time when the CPU has
 * them) and dwc8_generic (any x86-64; plain C over the eight lanes).
 */
#include "_cpu.h"
#include <math.h>
#include <string.h>
#include "_simd.h"

enum { ACT_NONE, ACT_RELU, ACT_CLIP, ACT_HARDSIGMOID, ACT_HARDSWISH, ACT_SIGMOID, ACT_SILU,
       ACT_LEAKYRELU, ACT_GELU };

enum { KIND_CONV, KIND_MAX, KIND_AVG };

typedef struct {
    int kind;                       /* depthwise conv, MaxPool or AveragePool */
    const float *cnt;               /* AveragePool: counted cells of each window (OH, OW) */
    int N, C, H, W, OH, OW, T;      /* T taps, row-major (i, j) */
    int sh, sw, ph, pw, Hp, Wp;     /* strides, pads begin, padded plane */
    int mode; float p0, p1;         /* activation code and params */
    int has_z;
} dwc8_geom;

/* Interleave channels c0..c0+nl-1 of image xb (C, H, W) into Q (Hp, Wp, 8). */
static void dwc8_pack(const float *xb, int c0, int nl, float *Q, const dwc8_geom *g)
{
    const long plane = (long)g->H * g->W;
    for (int l = 0; l < nl; l++) {
        const float *src = xb + (long)(c0 + l) * plane;
        for (int iy = 0; iy < g->H; iy++) {
            float *dst = Q + (((long)(iy + g->ph) * g->Wp + g->pw) * 8 + l);
            const float *s = src + (long)iy * g->W;
            for (int ix = 0; ix < g->W; ix++)
                dst[ix * 8] = s[ix];
        }
    }
}

/* Planes narrower than one vector (W < 8) are packed, and output planes with OW < 8
 * unpacked, as one flat run of H*W pixels, eight at a time through a transpose (a 7-wide
 * row was 56 scalar moves). Interleaved in one process, Clip 3x3, 1 thread: 960x7x7
 * 40 -> 29 us, 576x14x14 stride 2 27 -> 21 us (AMD EPYC 26/2, Zen 5); 62 -> 47 and
 * 45 -> 38 us (AMD EPYC 25/1, Zen 3), other planes within 1-2%. Flat for W < 16 too was
 * slower on 14x14 (576 channels 57 -> 70 us): rows of 14 are one vector and a 6-pixel
 * tail already, and the flat run's per-pixel cell stores cost more. */
#define DWC8_FLAT_MAX_W 8

/* r[p] <- pixel p's eight channels: 8 pixels from each of the 8 planes s, s + plane, ... */
EDGENN_AVX2 static inline __attribute__((always_inline)) void dwc8_gather8_avx2(
        const float *s, long plane, __m256 r[8])
{
    for (int l = 0; l < 8; l++)
        r[l] = _mm256_loadu_ps(s + l * plane);
    simd_transpose8_ps(r);
}

/* Is the input plane packed flat (dwc8_pack_flat_avx2)? / the output unpacked flat? */
static inline int dwc8_flat_dims(int H, int W)
{
    return W < DWC8_FLAT_MAX_W && (long)H * W >= 8;
}
static inline int dwc8_flat_in(const dwc8_geom *g) { return dwc8_flat_dims(g->H, g->W); }
static inline int dwc8_flat_out(const dwc8_geom *g) { return dwc8_flat_dims(g->OH, g->OW); }

/* A small plane of a full group as one flat run: eight pixels at a time through a
 * transpose (the tail block overlapping), each pixel's vector stored to its padded cell.
 * Its own function, called instead of the row-wise pack below (a flag inside that one ran
 * its 14x14 planes 4-5% slower, AMD EPYC 25/1 (Zen 3)). */
EDGENN_AVX2
static void dwc8_pack_flat_avx2(const float *xb, int c0, float *Q, const dwc8_geom *g)
{
    const long plane = (long)g->H * g->W;
    const float *src = xb + (long)c0 * plane;
    const int W = g->W;
    __m256 r[8];
    for (long i = 0; i < plane; i += 8) {
        if (i > plane - 8)
            i = plane - 8;
        dwc8_gather8_avx2(src + i, plane, r);
        int iy = (int)(i / W), ix = (int)(i % W);
        for (int p = 0; p < 8; p++, ix++) {
            while (ix >= W) {
                ix -= W;
                iy++;
            }
            _mm256_storeu_ps(Q + ((long)(iy + g->ph) * g->Wp + ix + g->pw) * 8, r[p]);
        }
    }
}

/* dwc8_pack for a full group (nl == 8), eight pixels at a time through a transpose; the
 * tail is one more block ending at the last pixel (overlapping writes are idempotent);
 * rows narrower than eight in scalar (small planes go flat instead: dwc8_flat_in). */
EDGENN_AVX2
static void dwc8_pack_avx2(const float *xb, int c0, float *Q, const dwc8_geom *g)
{
    const long plane = (long)g->H * g->W;
    const float *src = xb + (long)c0 * plane;
    const int W = g->W;
    for (int iy = 0; iy < g->H; iy++) {
        float *dst = Q + ((long)(iy + g->ph) * g->Wp + g->pw) * 8;
        const float *s = src + (long)iy * W;
        __m256 r[8];
        if (W < 8) {                    /* (masked loads measured slower here) */
            for (int ix = 0; ix < W; ix++)
                for (int l = 0; l < 8; l++)
                    dst[ix * 8 + l] = s[l * plane + ix];
            continue;
        }
        for (int ix = 0; ix < W; ix += 8) {
            if (ix > W - 8)
                ix = W - 8;
            dwc8_gather8_avx2(s + ix, plane, r);
            for (int p = 0; p < 8; p++)
                _mm256_storeu_ps(dst + (ix + p) * 8, r[p]);
        }
    }
}

/* n >= 8 pixels of obuf (n, 8) to the eight planes d, d + plane, ...: eight pixels at a
 * time through a transpose, the tail block ending at the last pixel (overlapping). A row
 * (dwc8_unpack_row_avx2), or a whole small plane (dwc8_unpack_flat_avx2). */
EDGENN_AVX2
static inline void dwc8_unpack_run_avx2(const float *obuf, float *d, long n, long plane)
{
    __m256 r[8];
    for (long i = 0; i < n; i += 8) {
        if (i > n - 8)
            i = n - 8;
        for (int p = 0; p < 8; p++)
            r[p] = _mm256_loadu_ps(obuf + (i + p) * 8);
        simd_transpose8_ps(r);
        for (int l = 0; l < 8; l++)
            _mm256_storeu_ps(d + l * plane + i, r[l]);
    }
}

/* Whole small output planes (dwc8_flat_out): obuf (OH*OW, 8) to the planes c0.. . */
EDGENN_AVX2
static void dwc8_unpack_flat_avx2(const float *obuf, float *yb, int c0, const dwc8_geom *g)
{
    const long plane = (long)g->OH * g->OW;
    dwc8_unpack_run_avx2(obuf, yb + (long)c0 * plane, plane, plane);
}

/* Floats of obuf: OH*OW*8 where the output goes through it whole (dwc8_flat_out), else
 * one row's OW*8. */
static inline long dwc8_obuf_floats(int OH, int OW)
{
    return (dwc8_flat_dims(OH, OW) ? (long)OH : 1L) * OW * 8;
}

/* dwc8_unpack_row for a full group (nl == 8), eight pixels at a time; tails as in the
 * pack. */
EDGENN_AVX2
static void dwc8_unpack_row_avx2(const float *obuf, float *yb, int c0, int oy,
                                 const dwc8_geom *g)
{
    const long plane = (long)g->OH * g->OW;
    const int OW = g->OW;
    float *d = yb + (long)c0 * plane + (long)oy * OW;
    if (OW < 8) {                       /* (masked stores are slow on AMD) */
        for (int l = 0; l < 8; l++)
            for (int ox = 0; ox < OW; ox++)
                d[l * plane + ox] = obuf[ox * 8 + l];
        return;
    }
    dwc8_unpack_run_avx2(obuf, d, OW, plane);
}

static double dwc8_sigmoid(double v)
{
    double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Scalar activation of n floats in place: the fallback build, and the transcendental
 * activations of both builds. */
static void dwc8_act_scalar(float *a, int n, const dwc8_geom *g)
{
    const float p0 = g->p0, p1 = g->p1;
    for (int i = 0; i < n; i++) {
        float v = a[i], t;
        switch (g->mode) {
        case ACT_RELU: a[i] = v < 0.0f ? 0.0f : v; break;
        case ACT_CLIP: v = v < p0 ? p0 : v; a[i] = v > p1 ? p1 : v; break;
        case ACT_HARDSIGMOID:
            t = v * p0 + p1; t = t < 0.0f ? 0.0f : t; a[i] = t > 1.0f ? 1.0f : t; break;
        case ACT_HARDSWISH:
            t = v * (1.0f / 6.0f) + 0.5f; t = t < 0.0f ? 0.0f : t; t = t > 1.0f ? 1.0f : t;
            a[i] = v * t; break;
        case ACT_SIGMOID: a[i] = (float)dwc8_sigmoid(v); break;
        case ACT_SILU: a[i] = (float)(v * dwc8_sigmoid(v)); break;
        case ACT_LEAKYRELU: a[i] = v >= 0.0f ? v : v * p0; break;
        case ACT_GELU: a[i] = (float)(0.5 * v * (1.0 + erf(v * 0.7071067811865476))); break;
        default: break;
        }
    }
}

/* Scatter lanes l < nl of the row buffer (OW, 8) to row oy of planes c0+l of yb. */
static void dwc8_unpack_row(const float *obuf, float *yb, int c0, int nl, int oy,
                            const dwc8_geom *g)
{
    const long plane = (long)g->OH * g->OW;
    for (int l = 0; l < nl; l++) {
        float *d = yb + (long)(c0 + l) * plane + (long)oy * g->OW;
        for (int ox = 0; ox < g->OW; ox++)
            d[ox] = obuf[ox * 8 + l];
    }
}

/* The activation of one accumulator vector, in registers (the cheap activations). */
typedef struct { __m256 zero, one, lo, hi, sixth, half; } dwc8_actc;

EDGENN_AVX2 __attribute__((always_inline))
static inline __m256 dwc8_act8(__m256 v, int mode, const dwc8_actc *k)
{
    /* constant first: max/min return their second operand on NaN, so NaN propagates
     * as in the reference */
    switch (mode) {
    case ACT_RELU: return _mm256_max_ps(k->zero, v);
    case ACT_CLIP: return _mm256_min_ps(k->hi, _mm256_max_ps(k->lo, v));
    case ACT_HARDSIGMOID:
        return _mm256_min_ps(k->one, _mm256_max_ps(k->zero, _mm256_fmadd_ps(v, k->lo, k->hi)));
    case ACT_HARDSWISH:
        return _mm256_mul_ps(v, _mm256_min_ps(
            k->one, _mm256_max_ps(k->zero, _mm256_fmadd_ps(v, k->sixth, k->half))));
    case ACT_LEAKYRELU:                 /* v >= 0 ? v : v * alpha */
        return _mm256_blendv_ps(_mm256_mul_ps(v, k->lo), v,
                                _mm256_cmp_ps(v, k->zero, _CMP_GE_OQ));
    default: return v;
    }
}

/* Row oy of one group into obuf (OW, 8): taps (w: the nine 3x3 tap vectors when T == 9),
 * + bias, then the activation in registers (mode; ACT_NONE when the caller still has to
 * add a residual or apply a transcendental activation). */
EDGENN_AVX2 __attribute__((always_inline))
static inline void dwc8_row_avx2(const float *Q, const __m256 *w, const float *w8,
                                 __m256 bias, const long *off, float *obuf, int oy,
                                 int mode, const dwc8_actc *k, const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW;
    const long sx = (long)g->sw * 8;
    const float *q = Q + (long)oy * g->sh * g->Wp * 8;
    if (T == 9) {                       /* 3x3: the taps held in registers */
        const long o1 = off[1], o2 = off[2], o3 = off[3], o4 = off[4], o5 = off[5],
            o6 = off[6], o7 = off[7], o8 = off[8];
        for (int ox = 0; ox < OW; ox++, q += sx) {
            __m256 a = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(q), bias);
            __m256 b = _mm256_mul_ps(w[1], _mm256_loadu_ps(q + o1));
            a = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(q + o2), a);
            b = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(q + o3), b);
            a = _mm256_fmadd_ps(w[4], _mm256_loadu_ps(q + o4), a);
            b = _mm256_fmadd_ps(w[5], _mm256_loadu_ps(q + o5), b);
            a = _mm256_fmadd_ps(w[6], _mm256_loadu_ps(q + o6), a);
            b = _mm256_fmadd_ps(w[7], _mm256_loadu_ps(q + o7), b);
            a = _mm256_fmadd_ps(w[8], _mm256_loadu_ps(q + o8), a);
            _mm256_storeu_ps(obuf + ox * 8, dwc8_act8(_mm256_add_ps(a, b), mode, k));
        }
        return;
    }
    int ox = 0;                         /* any kernel: four pixels, four FMA chains */
    for (; ox + 4 <= OW; ox += 4, q += 4 * sx) {
        __m256 a0 = bias, a1 = bias, a2 = bias, a3 = bias;
        for (int t = 0; t < T; t++) {
            const __m256 wt = _mm256_loadu_ps(w8 + t * 8);
            const float *p = q + off[t];
            a0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(p), a0);
            a1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(p + sx), a1);
            a2 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(p + 2 * sx), a2);
            a3 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(p + 3 * sx), a3);
        }
        _mm256_storeu_ps(obuf + ox * 8, dwc8_act8(a0, mode, k));
        _mm256_storeu_ps(obuf + ox * 8 + 8, dwc8_act8(a1, mode, k));
        _mm256_storeu_ps(obuf + ox * 8 + 16, dwc8_act8(a2, mode, k));
        _mm256_storeu_ps(obuf + ox * 8 + 24, dwc8_act8(a3, mode, k));
    }
    for (; ox < OW; ox++, q += sx) {
        __m256 a = bias;
        for (int t = 0; t < T; t++)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(w8 + t * 8), _mm256_loadu_ps(q + off[t]), a);
        _mm256_storeu_ps(obuf + ox * 8, dwc8_act8(a, mode, k));
    }
}

/* All output rows of one group (channels c0 .. c0+nl-1) into yb: rows, residual (zc:
 * plane c0 of z, planes `plane` apart, or NULL), activation, scatter to the NCHW planes. */
EDGENN_AVX2 static inline __attribute__((always_inline)) void dwc8_group_avx2_t(
        const float *Q, const float *w8, const float *b8, const long *off, int nl,
        const float *zc, float *obuf, float *yb, int c0, const dwc8_geom *g, const int flat)
{
    const long plane = (long)g->OH * g->OW;
    const int OW = g->OW;
    dwc8_actc k = { _mm256_setzero_ps(), _mm256_set1_ps(1.0f), _mm256_set1_ps(g->p0),
                    _mm256_set1_ps(g->p1), _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f) };
    __m256 w[9];
    for (int t = 0; t < 9 && t < g->T; t++)
        w[t] = _mm256_loadu_ps(w8 + t * 8);
    const __m256 bias = _mm256_loadu_ps(b8);
    /* activation in registers unless a residual comes first or it needs libm */
    const int late = zc != NULL || g->mode == ACT_SIGMOID || g->mode == ACT_SILU
        || g->mode == ACT_GELU;
    const int mode = late ? ACT_NONE : g->mode;
    for (int oy = 0; oy < g->OH; oy++) {
        float *row = flat ? obuf + (long)oy * OW * 8 : obuf;
        dwc8_row_avx2(Q, w, w8, bias, off, row, oy, mode, &k, g);
        if (late) {
            if (zc)
                for (int l = 0; l < nl; l++)
                    for (int ox = 0; ox < OW; ox++)
                        row[ox * 8 + l] += zc[l * plane + (long)oy * OW + ox];
            dwc8_act_scalar(row, OW * 8, g);
        }
        if (flat)
            continue;
        if (nl == 8)
            dwc8_unpack_row_avx2(obuf, yb, c0, oy, g);
        else
            dwc8_unpack_row(obuf, yb, c0, nl, oy, g);
    }
    if (flat)
        dwc8_unpack_flat_avx2(obuf, yb, c0, g);
}

/* Two instances, so the row-wise one compiles as it did before the flat output existed:
 * flat, every row kept in obuf and unpacked whole at the end (a full group, small output
 * plane: dwc8_flat_out), else each row unpacked as it is done. */
EDGENN_AVX2 static void dwc8_group_avx2_flat(const float *Q, const float *w8, const float *b8,
        const long *off, const float *zc, float *obuf, float *yb, int c0, const dwc8_geom *g)
{
    dwc8_group_avx2_t(Q, w8, b8, off, 8, zc, obuf, yb, c0, g, 1);
}

EDGENN_AVX2 static void dwc8_group_avx2(const float *Q, const float *w8, const float *b8,
        const long *off, int nl, const float *zc, float *obuf, float *yb, int c0,
        const dwc8_geom *g)
{
    if (nl == 8 && dwc8_flat_out(g))
        dwc8_group_avx2_flat(Q, w8, b8, off, zc, obuf, yb, c0, g);
    else
        dwc8_group_avx2_t(Q, w8, b8, off, nl, zc, obuf, yb, c0, g, 0);
}

static void dwc8_row_generic(const float *Q, const float *w8, const float *b8, const long *off,
                             int nl, const float *zrow, long zplane, float *obuf, int oy,
                             const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW;
    const long sx = (long)g->sw * 8;
    const float *q = Q + (long)oy * g->sh * g->Wp * 8;
    for (int ox = 0; ox < OW; ox++, q += sx) {
        float a[8];
        for (int l = 0; l < 8; l++)
            a[l] = b8[l];
        for (int t = 0; t < T; t++)
            for (int l = 0; l < 8; l++)
                a[l] += w8[t * 8 + l] * q[off[t] + l];
        memcpy(obuf + ox * 8, a, sizeof a);
    }
    if (zrow) {
        for (int l = 0; l < nl; l++)
            for (int ox = 0; ox < OW; ox++)
                obuf[ox * 8 + l] += zrow[l * zplane + ox];
    }
    if (g->mode != ACT_NONE)
        dwc8_act_scalar(obuf, OW * 8, g);
}

/* Row oy of one group of MaxPool / AveragePool into obuf (OW, 8). */
EDGENN_AVX2
static void dwc8_pool_row_avx2(const float *Q, const long *off, float *obuf, int oy,
                               const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW;
    const long sx = (long)g->sw * 8;
    const float *q = Q + (long)oy * g->sh * g->Wp * 8;
    for (int ox = 0; ox < OW; ox++, q += sx) {
        __m256 a = _mm256_loadu_ps(q + off[0]);
        if (g->kind == KIND_MAX) {       /* max(v, a): v if v > a, as the reference */
            for (int t = 1; t < T; t++)
                a = _mm256_max_ps(_mm256_loadu_ps(q + off[t]), a);
        } else {
            for (int t = 1; t < T; t++)
                a = _mm256_add_ps(a, _mm256_loadu_ps(q + off[t]));
            a = _mm256_div_ps(a, _mm256_set1_ps(g->cnt[(long)oy * OW + ox]));
        }
        _mm256_storeu_ps(obuf + ox * 8, a);
    }
}

static void dwc8_pool_row_generic(const float *Q, const long *off, float *obuf, int oy,
                                  const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW;
    const long sx = (long)g->sw * 8;
    const float *q = Q + (long)oy * g->sh * g->Wp * 8;
    for (int ox = 0; ox < OW; ox++, q += sx) {
        for (int l = 0; l < 8; l++) {
            float a = q[off[0] + l];
            if (g->kind == KIND_MAX) {
                for (int t = 1; t < T; t++) {
                    float v = q[off[t] + l];
                    a = v > a ? v : a;
                }
            } else {
                for (int t = 1; t < T; t++)
                    a += q[off[t] + l];
                a /= g->cnt[(long)oy * OW + ox];
            }
            obuf[ox * 8 + l] = a;
        }
    }
}

/* The whole layer. w8 (G, T, 8) and b8 (G, 8): channel g*8+l in lane l (zero past C;
 * unused by pools); off (T,) tap offsets in Q, ((i*dh)*Wp + j*dw)*8; Q (Hp*Wp*8) filled
 * once with the pad value (0, or -inf for MaxPool), pads never written; obuf
 * (dwc8_obuf_floats(OH, OW));
 * z (N, C, OH, OW) or NULL. */
static int dwc8_run_groups(int avx2, const float *x, const float *w8, const float *b8,
                           const long *off, const float *z, float *y, float *Q, float *obuf,
                           const dwc8_geom *g, int g0, int g1)
{
    const long plane = (long)g->OH * g->OW;
    for (int b = 0; b < g->N; b++) {
        const float *xb = x + (long)b * g->C * g->H * g->W;
        float *yb = y + (long)b * g->C * plane;
        const float *zb = z ? z + (long)b * g->C * plane : NULL;
        for (int gi = g0; gi < g1; gi++) {
            const int c0 = gi * 8, nl = g->C - c0 < 8 ? g->C - c0 : 8;
            if (avx2 && nl == 8)
                (dwc8_flat_in(g) ? dwc8_pack_flat_avx2 : dwc8_pack_avx2)(xb, c0, Q, g);
            else
                dwc8_pack(xb, c0, nl, Q, g);
            if (g->kind == KIND_CONV && avx2) {
                dwc8_group_avx2(Q, w8 + (long)gi * g->T * 8, b8 + gi * 8, off, nl,
                                zb ? zb + (long)c0 * plane : NULL, obuf, yb, c0, g);
                continue;
            }
            for (int oy = 0; oy < g->OH; oy++) {
                const float *zrow = zb ? zb + (long)c0 * plane + (long)oy * g->OW : NULL;
                if (g->kind != KIND_CONV) {
                    if (avx2)
                        dwc8_pool_row_avx2(Q, off, obuf, oy, g);
                    else
                        dwc8_pool_row_generic(Q, off, obuf, oy, g);
                } else
                    dwc8_row_generic(Q, w8 + (long)gi * g->T * 8, b8 + gi * 8, off, nl, zrow,
                                     plane, obuf, oy, g);
                if (avx2 && nl == 8)
                    dwc8_unpack_row_avx2(obuf, yb, c0, oy, g);
                else
                    dwc8_unpack_row(obuf, yb, c0, nl, oy, g);
            }
        }
    }
    return 0;
}

/* The whole layer on the calling thread. Threads may instead each run a disjoint range
 * [g0, g1) of the ceil(C/8) channel groups with their own Q and obuf. */
static int dwc8_run(int avx2, const float *x, const float *w8, const float *b8,
                    const long *off, const float *z, float *y, float *Q, float *obuf,
                    const dwc8_geom *g)
{
    return dwc8_run_groups(avx2, x, w8, b8, off, z, y, Q, obuf, g, 0, (g->C + 7) / 8);
}

