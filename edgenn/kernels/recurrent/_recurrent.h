/* The recurrence of LSTM / GRU / RNN, one direction, all time steps in one call.
 *
 * The input projections of every step (x_t W^T + biases) are computed before, as one GEMM
 * (recurrent.py); here each step adds h_{t-1} R^T (a GEMV per batch row, R^T packed as
 * rt (H, G*H): row k holds column k of R, so the G*H outputs are the vector axis and
 * h[k] is one broadcast; packed in panels streamed in order, rc_gemv_generic), then
 * applies the gate activations and updates the state.
 *
 * Shapes (floats; strides in floats):
 *   xp   gate inputs of step t, batch b at xp + t*xp_ts + b*xp_bs, G*H floats (x_t W^T),
 *        gate order i o f c (LSTM), z r h (GRU), one gate (RNN); bias (G*H) is added
 *   rt   R^T (H, G*H) in panels (rc_gemv_generic);  h, c (B, H) the state, read and
 *        updated in place
 *   y    step t, batch b at y + t*y_ts + b*y_bs (H floats) or NULL
 *   ws   workspace of B*(G*H + H) floats
 * sequence_lens: batch b takes part in step t only when t < lens[b] (NULL: all); its y
 * rows are zeros otherwise and its state is left as it is.
 *
 * Activations f, g, h: RA_SIGMOID, RA_TANH, RA_RELU. Rows (rc_rows, below): portable C,
 * AVX2+FMA, AVX-512F and ARM64 NEON; the vector GEMV and cell are one body for every
 * width (_recurrent_vec.h). The sums of a GEMV run k = 0..H-1 in one FMA chain per
 * output, on every row.
 */
#ifndef EDGENN_RECURRENT_H
#define EDGENN_RECURRENT_H

#include <math.h>
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_simd_math.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(EDGENN_SIMDE)
#define RC_X86 1
#elif defined(EDGENN_SIMDE)      /* tests: the AVX2 / AVX-512 bodies on SIMDe, any CPU */
#define RC_X86 1
#else
#define RC_X86 0
#endif

enum { RC_LSTM = 0, RC_GRU = 1, RC_RNN = 2 };
enum { RA_SIGMOID = 0, RA_TANH = 1, RA_RELU = 2 };

typedef struct {
    long T, B, H;
    int cell, reverse, input_forget, lbr;  /* lbr: GRU linear_before_reset */
    int f, g, h;                           /* activations (RA_*) */
    float clip;                            /* <= 0: none */
    const float *xp; long xp_ts, xp_bs;
    const float *rt;                       /* packed R^T (rc_gemv_generic): all G*H columns,
                                              GRU (lbr = 0) its z, r columns */
    const float *rt_h;                     /* GRU (lbr = 0): the h columns, packed */
    const float *bias;                     /* (G*H) added to xp, or NULL */
    const float *rbh;                      /* GRU lbr: Rbh (H), added to h Rh^T */
    const float *peep;                     /* LSTM (3H) i o f, or NULL */
    const int *lens;
    float *hs, *cs;
    float *y; long y_ts, y_bs;
    float *ws;
} rc_args;

/* -- scalar math (exp: _simd_math.h): the portable tier and the vector tails --------- */

static inline float rc_act1(int fn, float x)
{
    if (fn == RA_RELU)
        return x > 0.0f ? x : 0.0f;
    if (fn == RA_SIGMOID)
        return 1.0f / (1.0f + simd_exp1(-x));
    /* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|): no overflow, |error| ~2e-7 */
    float e = simd_exp1(-2.0f * fabsf(x));
    float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}

static inline float rc_clip1(float x, float clip)
{
    return clip > 0.0f ? (x < -clip ? -clip : (x > clip ? clip : x)) : x;
}

/* Packed R^T of one column segment (K rows, N columns), for GEMVs that stream it in
 * order: panels of widths W, W/2, ..., L taken greedily (W = 8 vectors, L = the row's
 * lanes: floats per vector), then a last panel of the remaining N % L columns zero-padded
 * to L; each panel K rows of its width, row-major, contiguous (so one panel's
 * accumulators stay in registers over the whole K loop). */

/* acc[0:N] += sum_k v[k] * R^T[k, 0:N] over the packed panels (L = 8), one batch row:
 * portable */
static void rc_gemv_generic(const float *v, const float *pk, long K, float *acc, long N)
{
    const long L = 8;
    long n = 0;
    for (long w = 8 * L; w >= L; w /= 2)
        for (; N - n >= w; n += w, pk += K * w)
            for (long k = 0; k < K; k++)
                for (long j = 0; j < w; j++)
                    acc[n + j] += v[k] * pk[k * w + j];
    for (long k = 0; k < K && n < N; k++)
        for (long j = 0; j < N - n; j++)
            acc[n + j] += v[k] * pk[k * L + j];
}

/* One batch row's gates after the GEMV: the state update of step t (cell by cell). */
static void rc_cell_generic(const rc_args *a, float *g, float *h, float *c, float *yrow,
                            long j0)
{
    const long H = a->H;
    const float cl = a->clip;
    for (long j = j0; j < H; j++) {
        float hn;
        if (a->cell == RC_LSTM) {
            float gi = g[j], go = g[H + j], gf = g[2 * H + j], gc = g[3 * H + j];
            if (a->peep) {
                gi += a->peep[j] * c[j];
                gf += a->peep[2 * H + j] * c[j];
            }
            float i = rc_act1(a->f, rc_clip1(gi, cl));
            float f = a->input_forget ? 1.0f - i : rc_act1(a->f, rc_clip1(gf, cl));
            float cn = f * c[j] + i * rc_act1(a->g, rc_clip1(gc, cl));
            if (a->peep)
                go += a->peep[H + j] * cn;
            hn = rc_act1(a->f, rc_clip1(go, cl)) * rc_act1(a->h, cn);
            c[j] = cn;
        } else if (a->cell == RC_GRU) {
            float z = g[j], hh = g[2 * H + j];   /* r was applied by rc_step (lbr = 0) */
            if (a->lbr)
                hh = g[3 * H + j] + g[H + j] * hh;   /* xp_h + r (h Rh^T + Rbh) */
            hh = rc_act1(a->g, rc_clip1(hh, cl));
            hn = (1.0f - z) * hh + z * h[j];
        } else {
            hn = rc_act1(a->f, rc_clip1(g[j], cl));
        }
        h[j] = hn;
        if (yrow)
            yrow[j] = hn;
    }
}

#define RC_ROWS 4                  /* batch rows per pass over R^T */

#if RC_X86
/* -- the vector GEMV and cell, one body for both widths (_recurrent_vec.h) ---------- */
/* AVX2: 8 floats */
#define RC_V __m256
#define RC_L 8
#define RC_ATTR EDGENN_AVX2
#define RC_LOAD _mm256_loadu_ps
#define RC_STORE _mm256_storeu_ps
#define RC_SET1 _mm256_set1_ps
#define RC_ADD _mm256_add_ps
#define RC_SUB _mm256_sub_ps
#define RC_MUL _mm256_mul_ps
#define RC_DIV _mm256_div_ps
#define RC_FMA _mm256_fmadd_ps
#define RC_MIN _mm256_min_ps
#define RC_MAX _mm256_max_ps
#define RC_EXP simd_exp8
#define RC_ABS(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)
#define RC_COPYSIGN(t, x) _mm256_or_ps(t, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)))
#define RC_ACT rc_act8
#define RC_CLIP rc_clip8
#define RC_CELL rc_cell_avx2
#define RC_PANEL rc_panel_avx2
#define RC_MAXACC 12               /* 16 ymm: 12 accumulators, R broadcasts, one load */
#define RC_PANEL_ROWS rc_panel_rows_avx2
#define RC_PANEL_R rc_panel_r_avx2
#define RC_GEMM_T rc_gemm_t_avx2
#define RC_GEMM rc_gemm_avx2
#include "_recurrent_vec.h"

#define RC_SIGN_I _mm512_set1_epi32((int)0x80000000u)
/* AVX-512F: 16 floats */
#define RC_V __m512
#define RC_L 16
#define RC_ATTR EDGENN_AVX512
#define RC_LOAD _mm512_loadu_ps
#define RC_STORE _mm512_storeu_ps
#define RC_SET1 _mm512_set1_ps
#define RC_ADD _mm512_add_ps
#define RC_SUB _mm512_sub_ps
#define RC_MUL _mm512_mul_ps
#define RC_DIV _mm512_div_ps
#define RC_FMA _mm512_fmadd_ps
#define RC_MIN _mm512_min_ps
#define RC_MAX _mm512_max_ps
#define RC_EXP simd_exp16
#define RC_ABS(x) _mm512_abs_ps(x)
#define RC_COPYSIGN(t, x) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), \
    _mm512_and_si512(_mm512_castps_si512(x), RC_SIGN_I)))
#define RC_ACT rc_act16
#define RC_CLIP rc_clip16
#define RC_CELL rc_cell_avx512
#define RC_PANEL rc_panel_avx512
#define RC_MAXACC 24               /* 32 zmm */
#define RC_PANEL_ROWS rc_panel_rows_avx512
#define RC_PANEL_R rc_panel_r_avx512
#define RC_GEMM_T rc_gemm_t_avx512
#define RC_GEMM rc_gemm_avx512
#include "_recurrent_vec.h"
#endif

/* ARM64 NEON: 4 floats (exp: _simd_math.h's simd_exp4; max / min as x86's, _neon.h) */
#if EDGENN_NEON
#define RC_V float32x4_t
#define RC_L 4
#define RC_ATTR
#define RC_LOAD vld1q_f32
#define RC_STORE vst1q_f32
#define RC_SET1 vdupq_n_f32
#define RC_ADD vaddq_f32
#define RC_SUB vsubq_f32
#define RC_MUL vmulq_f32
#define RC_DIV vdivq_f32
#define RC_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define RC_MIN edgenn_vminq
#define RC_MAX edgenn_vmaxq
#define RC_EXP simd_exp4
#define RC_ABS vabsq_f32
#define RC_COPYSIGN(t, x) vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(t), \
    vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u))))
#define RC_ACT rc_act4
#define RC_CLIP rc_clip4
#define RC_CELL rc_cell_neon
#define RC_PANEL rc_panel_neon
#define RC_MAXACC 24               /* 32 q registers: 24 accumulators, the broadcasts, a load */
#define RC_PANEL_ROWS rc_panel_rows_neon
#define RC_PANEL_R rc_panel_r_neon
#define RC_GEMM_T rc_gemm_t_neon
#define RC_GEMM rc_gemm_neon
#include "_recurrent_vec.h"
#endif

/* dst[0:n] = x[0:n] + (bias ? bias[0:n] : 0) */
static inline void rc_add_row(float *dst, const float *x, const float *bias, long n)
{
    if (!bias) {
        memcpy(dst, x, n * sizeof(float));
        return;
    }
    for (long j = 0; j < n; j++)
        dst[j] = x[j] + bias[j];
}

typedef void (*rc_gemm_fn)(int, const float *const *, const float *, long, float *const *,
                           long);

static void rc_gemm_generic(int R, const float *const *v, const float *pk, long K,
                            float *const *acc, long N)
{
    for (int r = 0; r < R; r++)
        rc_gemv_generic(v[r], pk, K, acc[r], N);
}

static void rc_cell_portable(const rc_args *a, float *g, float *h, float *c, float *yrow)
{
    rc_cell_generic(a, g, h, c, yrow, 0);
}

/* The family's table: one row per vector width (the packing's lanes L; GEMVs of up to
 * RC_ROWS batch rows over panels of up to 8L columns), best last. */
typedef struct {
    const char *name;        /* recurrent_<RC_ROWS>x<8 L>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    long lanes;
    rc_gemm_fn gemm;
    void (*cell)(const rc_args *a, float *g, float *h, float *c, float *yrow);
} rc_row;

static const rc_row rc_rows[] = {
    {"recurrent_4x64__scalar", EDGENN_ISA_SCALAR, 8, rc_gemm_generic, rc_cell_portable},
#if RC_X86
    {"recurrent_4x64__avx2", EDGENN_ISA_AVX2, 8, rc_gemm_avx2, rc_cell_avx2},
    {"recurrent_4x128__avx512f", EDGENN_ISA_AVX512, 16, rc_gemm_avx512, rc_cell_avx512},
#endif
#if EDGENN_NEON
    {"recurrent_4x32__neon", EDGENN_ISA_NEON, 4, rc_gemm_neon, rc_cell_neon},
#endif
};
#define RC_ROW_COUNT ((int)(sizeof rc_rows / sizeof rc_rows[0]))

/* One step for batch rows rows[0..n) (n <= RC_ROWS): the gates' inputs, then each GEMV
 * for all n rows in one pass over the packed R^T. */
static void rc_rows_step(const rc_args *a, rc_gemm_fn gemm, const long *rows, int n, long t,
                         long W, long GH)
{
    const long H = a->H;
    const float *hv[RC_ROWS];
    float *gv[RC_ROWS], *g2[RC_ROWS];
    for (int i = 0; i < n; i++) {
        const long b = rows[i];
        float *g = a->ws + b * W;
        const float *x = a->xp + t * a->xp_ts + b * a->xp_bs;
        const float *bs = a->bias;
        hv[i] = a->hs + b * H;
        gv[i] = g;
        g2[i] = g + 2 * H;
        if (a->cell != RC_GRU) {
            rc_add_row(g, x, bs, GH);
        } else if (a->lbr) {
            /* g = [xp_z, xp_r, Rbh] + h R^T (all 3H); g[3H:4H) = xp_h; r in place */
            rc_add_row(g, x, bs, 2 * H);
            memcpy(g + 2 * H, a->rbh, H * sizeof(float));
            rc_add_row(g + 3 * H, x + 2 * H, bs ? bs + 2 * H : 0, H);
        } else {
            rc_add_row(g, x, bs, GH);
        }
    }
    if (a->cell != RC_GRU || a->lbr) {
        gemm(n, hv, a->rt, H, gv, GH);
        if (a->cell == RC_GRU)
            for (int i = 0; i < n; i++)
                for (long j = 0; j < 2 * H; j++)
                    gv[i][j] = rc_act1(a->f, rc_clip1(gv[i][j], a->clip));
        return;
    }
    /* GRU: z, r from h [Rz Rr]^T; then the h gate from (r * h) Rh^T */
    gemm(n, hv, a->rt, H, gv, 2 * H);
    const float *rhv[RC_ROWS];
    for (int i = 0; i < n; i++) {
        float *g = gv[i], *rh = g + GH;
        for (long j = 0; j < 2 * H; j++)
            g[j] = rc_act1(a->f, rc_clip1(g[j], a->clip));
        for (long j = 0; j < H; j++)
            rh[j] = g[H + j] * hv[i][j];
        rhv[i] = rh;
    }
    gemm(n, rhv, a->rt_h, H, g2, H);
}

/* Every step of one direction (see the top of the file). */
static void rc_run(const rc_args *a, const rc_row *row)
{
    const long T = a->T, B = a->B, H = a->H;
    const int G = a->cell == RC_LSTM ? 4 : a->cell == RC_GRU ? 3 : 1;
    const long GH = G * H;
    const long W = GH + H;                 /* per batch row: the gates, then GRU's r*h or
                                              (lbr) the xp_h it keeps aside */
    const rc_gemm_fn gemm = row->gemm;
    for (long s = 0; s < T; s++) {
        const long t = a->reverse ? T - 1 - s : s;
        long rows[RC_ROWS];
        int n = 0;
        for (long b = 0; b < B; b++) {       /* the rows still running, RC_ROWS at a time */
            if (a->lens && t >= a->lens[b]) {
                if (a->y)
                    memset(a->y + t * a->y_ts + b * a->y_bs, 0, H * sizeof(float));
                continue;
            }
            rows[n++] = b;
            if (n == RC_ROWS) {
                rc_rows_step(a, gemm, rows, n, t, W, GH);
                n = 0;
            }
        }
        if (n)
            rc_rows_step(a, gemm, rows, n, t, W, GH);
        /* every GEMV of the step has read h: now the state may change */
        for (long b = 0; b < B; b++) {
            if (a->lens && t >= a->lens[b])
                continue;
            float *yrow = a->y ? a->y + t * a->y_ts + b * a->y_bs : 0;
            row->cell(a, a->ws + b * W, a->hs + b * H, a->cs ? a->cs + b * H : 0, yrow);
        }
    }
}

#endif
