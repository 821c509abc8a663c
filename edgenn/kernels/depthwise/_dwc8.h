/* Depthwise 2-D convolution and 2-D pooling, L channels per SIMD vector ("c8": L = 8 on
 * AVX2, "c16": L = 16 on AVX-512F, "c4": L = 4 on ARM64 NEON), for _dwc8.pyx.
 *
 * x (N, C, H, W) -> y (N, C, OH, OW), float32, NCHW. Per image and group of L channels
 * c0..c0+L-1: the planes are interleaved into a zero-padded Q (Hp, Wp, L); then every tap
 * of every output pixel is one L-lane multiply-add whatever the stride or dilation, with
 * no bounds checks and no short rows (7x7 and 14x14 planes are as efficient as 112x112).
 * The epilogue (bias, residual z, activation) is applied to the accumulator in registers,
 * then each output row of the group is scattered back to the L NCHW planes.
 * MaxPool (Q padded with -inf) and AveragePool (Q padded with 0, sum / count) are the same
 * loops with max or plain sums over the taps, in the reference's tap order.
 *
 * One vector body (_dwc_vec.h), three widths: dwc_*_avx2 (8 lanes), dwc_*_avx512 (16:
 * half the multiply-adds and, through 16 x 16 transposes, fewer shuffles per float packed)
 * and dwc_*_neon (4),
 * each a row of the family's table (dwc_rows, below; the caller checks the CPU runs it);
 * the portable rows run the C loops (dwc8_*_generic, any lane count). A last group of
 * fewer than L channels is packed and unpacked by the scalar loops and computed by the
 * vector body (its unused lanes hold an earlier group's data and zero weights; they are
 * not stored).
 * Per output: bias, then the taps in row-major order (3x3: two FMA chains, joined at the
 * end), then + z, then the activation: the same order on both widths, so the same bits.
 */
#include "_cpu.h"
#include "_epilogue.h"
#include <math.h>
#include <string.h>
#include "_simd.h"

/* every activation of _epilogue.h but PRelu (Sigmoid, SiLU and GELU after the sums, in
 * scalar code); the fused 1x1 expansion's only those computed in registers (dwc_act) */
#define DWC_ACTS (((1u << EDGENN_ACT_COUNT) - 1) & ~EDGENN_ACT_BIT(EDGENN_ACT_PRELU))
#define DWC_EXPAND_ACTS (EDGENN_ACTS_CLAMP | EDGENN_ACT_BIT(EDGENN_ACT_HARDSIGMOID) | \
                         EDGENN_ACT_BIT(EDGENN_ACT_HARDSWISH) | EDGENN_ACT_BIT(EDGENN_ACT_LEAKYRELU))

enum { KIND_CONV, KIND_MAX, KIND_AVG };

/* The 1x1 conv fused in front of a depthwise conv (MobileNet's expansion): the group's
 * padded plane Q is computed from x (N, K, H, W) instead of packed from its planes. */
typedef struct {
    int K;                          /* input channels of the 1x1 conv */
    const float *w;                 /* (G, K, L): channel g*L+l's weight of input k, lane l */
    const float *b;                 /* (G, L); both zero past C */
    int mode; float p0, p1;         /* its activation: one computed in registers */
} dwc8_expand;

typedef struct {
    int kind;                       /* depthwise conv, MaxPool or AveragePool */
    const float *cnt;               /* AveragePool: counted cells of each window (OH, OW) */
    int N, C, H, W, OH, OW, T;      /* T taps, row-major (i, j) */
    int sh, sw, ph, pw, Hp, Wp;     /* strides, pads begin, padded plane */
    int mode; float p0, p1;         /* activation code and params */
    int has_z;
    int L;                          /* lanes per group: 8 or 16 (the row's width) */
    const dwc8_expand *ex;          /* KIND_CONV: a fused 1x1 conv first, or NULL */
    int oy0, oy1;                   /* the output rows computed (dwc8_run_part sets them) */
} dwc8_geom;

/* The image rows [*iy0, *iy1) that output rows [g->oy0, g->oy1) read: the taps' rows
 * from their offsets (row-major, ((i*dh)*Wp + j*dw)*L: the last tap's row the lowest). */
static inline void dwc8_in_rows(const dwc8_geom *g, const long *off, int *iy0, int *iy1)
{
    const int span = (int)(off[g->T - 1] / ((long)g->Wp * g->L));      /* (KH-1) * dh */
    const int a = g->oy0 * g->sh - g->ph, b = (g->oy1 - 1) * g->sh - g->ph + span + 1;
    *iy0 = a < 0 ? 0 : a > g->H ? g->H : a;
    *iy1 = b > g->H ? g->H : b < *iy0 ? *iy0 : b;
}

/* Interleave rows [iy0, iy1) of channels c0..c0+nl-1 of image xb (C, H, W) into Q
 * (Hp, Wp, L). */
static void dwc8_pack(const float *xb, int c0, int nl, float *Q, const dwc8_geom *g, int iy0,
                      int iy1)
{
    const long plane = (long)g->H * g->W;
    const int L = g->L;
    for (int l = 0; l < nl; l++) {
        const float *src = xb + (long)(c0 + l) * plane;
        for (int iy = iy0; iy < iy1; iy++) {
            float *dst = Q + (((long)(iy + g->ph) * g->Wp + g->pw) * L + l);
            const float *s = src + (long)iy * g->W;
            for (int ix = 0; ix < g->W; ix++)
                dst[ix * L] = s[ix];
        }
    }
}

/* Planes narrower than one vector (W < L) are packed, and output planes with OW < L
 * unpacked, as one flat run of H*W pixels, L at a time through a transpose (row by row, a
 * 7-wide row of 8 lanes is 56 scalar moves). Not for W >= L: at 8 lanes, rows of 14 are
 * one vector and a 6-pixel tail already, and the flat run's per-pixel cell stores cost
 * more; at 16 lanes a row of 14 is no whole vector, so those planes go flat. */
static inline int dwc8_flat_dims(int H, int W, int L)
{
    return W < L && (long)H * W >= L;
}
static inline int dwc8_flat_in(const dwc8_geom *g) { return dwc8_flat_dims(g->H, g->W, g->L); }
static inline int dwc8_flat_out(const dwc8_geom *g)
{
    return dwc8_flat_dims(g->OH, g->OW, g->L);
}

/* Floats of obuf: OH*OW*L where the output goes through it whole (dwc8_flat_out), else
 * one row's OW*L. */
static inline long dwc8_obuf_floats(int OH, int OW, int L)
{
    return (dwc8_flat_dims(OH, OW, L) ? (long)OH : 1L) * OW * L;
}

static double dwc8_sigmoid(double v)
{
    double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Scalar activation of n floats in place: the fallback build, and the transcendental
 * activations of both builds. */
static inline float dwc8_act1(float v, int mode, float p0, float p1)
{
    float t;
    switch (mode) {
    case EDGENN_ACT_RELU: return v < 0.0f ? 0.0f : v;
    case EDGENN_ACT_CLIP: v = v < p0 ? p0 : v; return v > p1 ? p1 : v;
    case EDGENN_ACT_HARDSIGMOID:
        t = v * p0 + p1; t = t < 0.0f ? 0.0f : t; return t > 1.0f ? 1.0f : t;
    case EDGENN_ACT_HARDSWISH:
        t = v * (1.0f / 6.0f) + 0.5f; t = t < 0.0f ? 0.0f : t; t = t > 1.0f ? 1.0f : t;
        return v * t;
    case EDGENN_ACT_SIGMOID: return (float)dwc8_sigmoid(v);
    case EDGENN_ACT_SILU: return (float)(v * dwc8_sigmoid(v));
    case EDGENN_ACT_LEAKYRELU: return v >= 0.0f ? v : v * p0;
    case EDGENN_ACT_GELU: return (float)(0.5 * v * (1.0 + erf(v * 0.7071067811865476)));
    default: return v;
    }
}

static void dwc8_act_scalar(float *a, int n, const dwc8_geom *g)
{
    for (int i = 0; i < n; i++)
        a[i] = dwc8_act1(a[i], g->mode, g->p0, g->p1);
}

/* Rows [iy0, iy1) of Q's interior for group gi <- the fused 1x1 conv of image xb (K, H,
 * W), portable C: per pixel and lane, bias + the K products in order, the activation. */
static void dwc8_expand_generic(const float *xb, int gi, float *Q, const dwc8_geom *g,
                                int iy0, int iy1)
{
    const dwc8_expand *ex = g->ex;
    const long plane = (long)g->H * g->W;
    const int L = g->L;
    const float *w = ex->w + (long)gi * ex->K * L, *b = ex->b + (long)gi * L;
    for (int iy = iy0; iy < iy1; iy++)
        for (int ix = 0; ix < g->W; ix++) {
            float *dst = Q + ((long)(iy + g->ph) * g->Wp + ix + g->pw) * L;
            const float *xp = xb + (long)iy * g->W + ix;
            for (int l = 0; l < L; l++) {
                float a = b[l];
                for (int k = 0; k < ex->K; k++)
                    a += w[k * L + l] * xp[k * plane];
                dst[l] = dwc8_act1(a, ex->mode, ex->p0, ex->p1);
            }
        }
}

/* Scatter lanes l < nl of the row buffer (OW, L) to row oy of planes c0+l of yb. */
static void dwc8_unpack_row(const float *obuf, float *yb, int c0, int nl, int oy,
                            const dwc8_geom *g)
{
    const long plane = (long)g->OH * g->OW;
    const int L = g->L;
    for (int l = 0; l < nl; l++) {
        float *d = yb + (long)(c0 + l) * plane + (long)oy * g->OW;
        for (int ox = 0; ox < g->OW; ox++)
            d[ox] = obuf[ox * L + l];
    }
}

/* the fused 1x1 conv's weights prefetched this many vectors ahead (a group's come from
 * L3 in a model; in one layer timed alone they sit in L2) */
#define DWC_EXPAND_PF 48
#define DWC_CAT_(n, w) n##_##w
#define DWC_CAT(n, w) DWC_CAT_(n, w)
#define DWC_FN(n) DWC_CAT(n, DWC_WIDTH)
/* AVX2 + FMA: 8 floats */
#define DWC_WIDTH avx2
#define DWC_L 8
#define DWC_V __m256
#define DWC_ATTR EDGENN_AVX2
#define DWC_LOADU _mm256_loadu_ps
#define DWC_STOREU _mm256_storeu_ps
#define DWC_SET1 _mm256_set1_ps
#define DWC_FMA _mm256_fmadd_ps
#define DWC_MUL _mm256_mul_ps
#define DWC_ADD _mm256_add_ps
#define DWC_DIV _mm256_div_ps
#define DWC_MAX _mm256_max_ps
#define DWC_MIN _mm256_min_ps
#define DWC_TRANSPOSE simd_transpose8_ps
/* pixels per register tile of the fused 1x1 conv (dwc_expand): 12 accumulators, a weight
 * and a broadcast in AVX2's 16 registers; tiles of any size 1 .. 12 */
#define DWC_EXPAND_PX 12
#define DWC_EXPAND_TAILS DWC_TAIL(1) DWC_TAIL(2) DWC_TAIL(3) DWC_TAIL(4) DWC_TAIL(5) \
    DWC_TAIL(6) DWC_TAIL(7) DWC_TAIL(8) DWC_TAIL(9) DWC_TAIL(10) DWC_TAIL(11) DWC_TAIL(12)
/* v >= 0 ? v : neg (NaN: neg) */
#define DWC_SELECT_GE0(v, neg, zero) _mm256_blendv_ps(neg, v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ))
#include "_dwc_vec.h"
#ifdef EDGENN_HAS_AVX512_INTRINSICS
/* AVX-512F: 16 floats */
#define DWC_HAVE_16 1
#define DWC_WIDTH avx512
#define DWC_L 16
#define DWC_V __m512
#define DWC_ATTR EDGENN_AVX512
#define DWC_LOADU _mm512_loadu_ps
#define DWC_STOREU _mm512_storeu_ps
#define DWC_SET1 _mm512_set1_ps
#define DWC_FMA _mm512_fmadd_ps
#define DWC_MUL _mm512_mul_ps
#define DWC_ADD _mm512_add_ps
#define DWC_DIV _mm512_div_ps
#define DWC_MAX _mm512_max_ps
#define DWC_MIN _mm512_min_ps
#define DWC_TRANSPOSE simd_transpose16_ps
#define DWC_EXPAND_PX 12
#define DWC_EXPAND_TAILS DWC_TAIL(1) DWC_TAIL(2) DWC_TAIL(3) DWC_TAIL(4) DWC_TAIL(5) \
    DWC_TAIL(6) DWC_TAIL(7) DWC_TAIL(8) DWC_TAIL(9) DWC_TAIL(10) DWC_TAIL(11) DWC_TAIL(12)
#define DWC_SELECT_GE0(v, neg, zero) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ), neg, v)
#include "_dwc_vec.h"
#else
#define DWC_HAVE_16 0
#endif

/* ARM64 NEON (_neon.h): 4 floats; max / min as x86's, so every width computes the same
 * bits */
#include "_neon.h"
#define DWC_HAVE_4 EDGENN_NEON
#if DWC_HAVE_4
static inline __attribute__((always_inline)) void dwc_transpose4(float32x4_t r[4])
{
    const float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}
#define DWC_WIDTH neon
#define DWC_L 4
#define DWC_V float32x4_t
#define DWC_ATTR
#define DWC_LOADU vld1q_f32
#define DWC_STOREU vst1q_f32
#define DWC_SET1 vdupq_n_f32
#define DWC_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define DWC_MUL vmulq_f32
#define DWC_ADD vaddq_f32
#define DWC_DIV vdivq_f32
#define DWC_MAX edgenn_vmaxq
#define DWC_MIN edgenn_vminq
#define DWC_TRANSPOSE dwc_transpose4
/* 12 accumulators of 4 channels, as the x86 widths (32 registers would hold more) */
#define DWC_EXPAND_PX 12
#define DWC_EXPAND_TAILS DWC_TAIL(1) DWC_TAIL(2) DWC_TAIL(3) DWC_TAIL(4) DWC_TAIL(5) \
    DWC_TAIL(6) DWC_TAIL(7) DWC_TAIL(8) DWC_TAIL(9) DWC_TAIL(10) DWC_TAIL(11) DWC_TAIL(12)
#define DWC_SELECT_GE0(v, neg, zero) vbslq_f32(vcgeq_f32(v, zero), v, neg)
/* 3x3 rows 4 pixels at a time: 8 chains in 32 registers (in-order cores: Cortex-A53/A55) */
#define DWC_ROW9_PX 4
#include "_dwc_vec.h"
#endif

static void dwc8_row_generic(const float *Q, const float *wl, const float *bl, const long *off,
                             int nl, const float *zrow, long zplane, float *obuf, int oy,
                             const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW, L = g->L;
    const long sx = (long)g->sw * L;
    const float *q = Q + (long)oy * g->sh * g->Wp * L;
    for (int ox = 0; ox < OW; ox++, q += sx) {
        float a[16];
        for (int l = 0; l < L; l++)
            a[l] = bl[l];
        for (int t = 0; t < T; t++)
            for (int l = 0; l < L; l++)
                a[l] += wl[t * L + l] * q[off[t] + l];
        memcpy(obuf + ox * L, a, sizeof(float) * L);
    }
    if (zrow) {
        for (int l = 0; l < nl; l++)
            for (int ox = 0; ox < OW; ox++)
                obuf[ox * L + l] += zrow[l * zplane + ox];
    }
    if (g->mode != EDGENN_ACT_NONE)
        dwc8_act_scalar(obuf, OW * L, g);
}

static void dwc8_pool_row_generic(const float *Q, const long *off, float *obuf, int oy,
                                  const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW, L = g->L;
    const long sx = (long)g->sw * L;
    const float *q = Q + (long)oy * g->sh * g->Wp * L;
    for (int ox = 0; ox < OW; ox++, q += sx) {
        for (int l = 0; l < L; l++) {
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
            obuf[ox * L + l] = a;
        }
    }
}

/* A row of the family's table: a vector body of `lanes` lanes, or (NULL entry points) the
 * portable loops on groups of `lanes` channels. Each entry point handles a full group
 * (nl == lanes) but group and expand, which take any. */
typedef void (*dwc_pack_fn)(const float *xb, int c0, float *Q, const dwc8_geom *g, int iy0,
                            int iy1);
typedef struct {
    const char *name;               /* depthwise_c<lanes>__<isa> */
    int isa;                        /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    int lanes;
    dwc_pack_fn pack, pack_flat;    /* the group's planes into Q (flat: rows run together) */
    void (*expand)(const float *xb, int gi, float *Q, const dwc8_geom *g, int iy0, int iy1);
    void (*group)(const float *Q, const float *wl, const float *bl, const long *off, int nl,
                  const float *zc, float *obuf, float *yb, int c0, const dwc8_geom *g);
    void (*pool_row)(const float *Q, const long *off, float *obuf, int oy,
                     const dwc8_geom *g);
    void (*unpack_row)(const float *obuf, float *yb, int c0, int oy, const dwc8_geom *g);
} dwc_row;

static const dwc_row dwc_rows[] = {
    {"depthwise_c8__scalar", EDGENN_ISA_SCALAR, 8, NULL, NULL, NULL, NULL, NULL, NULL},
    {"depthwise_c16__scalar", EDGENN_ISA_SCALAR, 16, NULL, NULL, NULL, NULL, NULL, NULL},
    {"depthwise_c8__avx2", EDGENN_ISA_AVX2, 8, dwc_pack_avx2, dwc_pack_flat_avx2,
     dwc_expand_avx2, dwc_group_avx2, dwc_pool_row_avx2, dwc_unpack_row_avx2},
#if DWC_HAVE_16
    {"depthwise_c16__avx512f", EDGENN_ISA_AVX512, 16, dwc_pack_avx512, dwc_pack_flat_avx512,
     dwc_expand_avx512, dwc_group_avx512, dwc_pool_row_avx512, dwc_unpack_row_avx512},
#endif
#if DWC_HAVE_4
    {"depthwise_c4__neon", EDGENN_ISA_NEON, 4, dwc_pack_neon, dwc_pack_flat_neon,
     dwc_expand_neon, dwc_group_neon, dwc_pool_row_neon, dwc_unpack_row_neon},
#endif
};
#define DWC_ROW_COUNT ((int)(sizeof dwc_rows / sizeof dwc_rows[0]))

/* Channel groups [g0, g1), output rows [oy0, oy1) of every image: the whole layer, or
 * a thread's part of it (the groups, or the rows, split). wl (G, T, L) and bl (G, L):
 * channel g*L+l in lane l (zero past C; unused by pools); off (T,) tap offsets in Q,
 * ((i*dh)*Wp + j*dw)*L; Q (Hp*Wp*L) filled once with the pad value (0, or -inf for
 * MaxPool), pads never written (the rows a part reads are the only ones it fills); obuf
 * (dwc8_obuf_floats(OH, OW, L)); z (N, C, OH, OW) or NULL. row: a row of L lanes
 * (else -1). */
static int dwc8_run_part(const dwc_row *row, const float *x, const float *wl, const float *bl,
                         const long *off, const float *z, float *y, float *Q, float *obuf,
                         const dwc8_geom *geom, int g0, int g1, int oy0, int oy1)
{
    dwc8_geom part = *geom;
    const dwc8_geom *g = &part;
    part.oy0 = oy0;
    part.oy1 = oy1;
    const long plane = (long)g->OH * g->OW;
    const int L = g->L;
    int iy0, iy1;
    if (oy0 < 0 || oy1 > g->OH)
        return -1;
    if (oy0 >= oy1)
        return 0;
    dwc8_in_rows(g, off, &iy0, &iy1);
    const int vec = row->group != NULL;
    if (row->lanes != L || L < 1 || L > 16)
        return -1;
    /* the input rows run together in Q's rows (flat planes), enough of them for a vector */
    const int flat = dwc8_flat_in(g) && (long)(iy1 - iy0) * g->W >= L;
    for (int b = 0; b < g->N; b++) {
        const float *xb = x + (long)b * (g->ex ? g->ex->K : g->C) * g->H * g->W;
        float *yb = y + (long)b * g->C * plane;
        const float *zb = z ? z + (long)b * g->C * plane : NULL;
        for (int gi = g0; gi < g1; gi++) {
            const int c0 = gi * L, nl = g->C - c0 < L ? g->C - c0 : L;
            const int full = vec && nl == L;
            if (g->ex)                  /* a fused 1x1 conv computes the group's plane */
                (vec ? row->expand : dwc8_expand_generic)(xb, gi, Q, g, iy0, iy1);
            else if (full)
                (flat ? row->pack_flat : row->pack)(xb, c0, Q, g, iy0, iy1);
            else
                dwc8_pack(xb, c0, nl, Q, g, iy0, iy1);
            if (g->kind == KIND_CONV && vec) {
                const float *zc = zb ? zb + (long)c0 * plane : NULL;
                row->group(Q, wl + (long)gi * g->T * L, bl + (long)gi * L, off, nl, zc, obuf,
                           yb, c0, g);
                continue;
            }
            for (int oy = oy0; oy < oy1; oy++) {
                const float *zrow = zb ? zb + (long)c0 * plane + (long)oy * g->OW : NULL;
                if (g->kind != KIND_CONV)
                    (vec ? row->pool_row : dwc8_pool_row_generic)(Q, off, obuf, oy, g);
                else
                    dwc8_row_generic(Q, wl + (long)gi * g->T * L, bl + (long)gi * L, off, nl,
                                     zrow, plane, obuf, oy, g);
                if (full)
                    row->unpack_row(obuf, yb, c0, oy, g);
                else
                    dwc8_unpack_row(obuf, yb, c0, nl, oy, g);
            }
        }
    }
    return 0;
}

/* Thread t of nt's share when the channel groups split: an even share of the (group,
 * output row) pairs in group-major order, i.e. whole groups and at most two partial ones
 * (their rows split where a share ends). Whole groups per thread had left 9 groups (144
 * channels, MobileNetV2's 56x56 blocks) as 5 + 4 on two threads. */
static int dwc8_run_share(const dwc_row *row, const float *x, const float *wl, const float *bl,
                          const long *off, const float *z, float *y, float *Q, float *obuf,
                          const dwc8_geom *g, int t, int nt)
{
    const long OH = g->OH, units = (long)((g->C + g->L - 1) / g->L) * OH;
    const long u1 = units * (t + 1) / nt;
    long u = units * t / nt;
    int rc = 0;
    while (u < u1 && !rc) {
        const int gi = (int)(u / OH), r0 = (int)(u % OH);
        const long end = (gi + 1) * OH;             /* group gi's last pair + 1 */
        if (r0 == 0 && u1 >= end) {                 /* whole groups [gi, u1 / OH) */
            const int gend = (int)(u1 / OH);
            rc = dwc8_run_part(row, x, wl, bl, off, z, y, Q, obuf, g, gi, gend, 0, g->OH);
            u = gend * OH;
        } else {                                    /* rows [r0, ..) of group gi */
            const long stop = u1 < end ? u1 : end;
            rc = dwc8_run_part(row, x, wl, bl, off, z, y, Q, obuf, g, gi, gi + 1, r0,
                               (int)(stop - gi * OH));
            u = stop;
        }
    }
    return rc;
}

/* Thread t of nt's share when the rows split: every channel group, output rows
 * [t OH / nt, (t + 1) OH / nt). */
static int dwc8_run_rows(const dwc_row *row, const float *x, const float *wl, const float *bl,
                         const long *off, const float *z, float *y, float *Q, float *obuf,
                         const dwc8_geom *g, int t, int nt)
{
    return dwc8_run_part(row, x, wl, bl, off, z, y, Q, obuf, g, 0, (g->C + g->L - 1) / g->L,
                         (int)((long)t * g->OH / nt), (int)((long)(t + 1) * g->OH / nt));
}

/* The whole layer on the calling thread. Threads may instead each run their share of
 * the rows (dwc8_run_rows) or of the (group, row) pairs (dwc8_run_share), with their own
 * Q and obuf. */
static int dwc8_run(const dwc_row *row, const float *x, const float *wl, const float *bl,
                    const long *off, const float *z, float *y, float *Q, float *obuf,
                    const dwc8_geom *g)
{
    return dwc8_run_rows(row, x, wl, bl, off, z, y, Q, obuf, g, 0, 1);
}
