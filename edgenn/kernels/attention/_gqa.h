/* GroupQueryAttention (onnxruntime's com.microsoft op, graph/shapes/decoder.py) over a
 * key / value cache in BNSH, float32: the decoders' variants, decode (S = 1) and causal
 * prefill (S > 1) in one driver.
 *
 * Layouts (strides in floats):
 *   q     token (b, s), query head n at q + b*q_bs + s*q_ss + n*H
 *   k, v  token (b, s), kv head j at k + b*kv_bs + s*kv_ss + j*H  (packed QKV: q, k, v are
 *         three offsets into one (B, S, (N + 2 KVN) H) array with q_ss = kv_ss)
 *   past_k / past_v  (B, KVN, P, H) or NULL (P = 0)
 *   cache_k / cache_v (B, KVN, L, H): the past arrays themselves (in_place, L = P) or the
 *         present outputs (L = max(total_sequence_length, P)); row t of entry b, kv head
 *         j at cache + ((b*KVN + j)*L + t)*H
 *   out   (B, S, N*H)
 * Per entry b: T = seqlens[b] + 1 keys after the step, Q = min(S, T) new tokens kept, at
 * positions P_b = T - Q .. T - 1. As the reference: the M = min(S, L - P_b) new rows (the
 * kept ones and the padding rows of a right-padded prompt where the cache has room) are
 * written at P_b .., present rows before P_b are the past's, rows after P_b + M zeros;
 * query row i (padding rows too) attends to keys first .. last, last = min(P_b + i, T - 1),
 * first = max(0, last - W + 1) with a local window W > 0, else 0.
 *
 * Per (b, kv head): rotate and write the new K rows, write the V rows; then per query row
 * and each of the G = N / KVN query heads of the group: the rotated query row, scores over
 * the row's keys (in blocks of keys that stay in L1 across the G heads), softcap, a
 * max-subtracted exp (the shared simd_exp), normalise, the weighted sum of V rows.
 *
 * Arithmetic, the reference's order class (its bound, not its bits): a score is a dot of
 * H products (partial sums in L lanes, then a tree), times scale: |error| <= (H + 2) eps
 * scale sum_d |q_d k_d|; the rotation is the reference's exactly (a cos - b sin, a sin +
 * b cos, each product rounded: the extension is built without FMA contraction), so the
 * written cache rows are bit-identical to the reference's; softcap's tanh through exp has
 * an absolute error of a few eps times softcap; the softmax's exp is within ~2 eps
 * relative, its sum T eps, the division one: relative error of a probability
 * ~ (T + c) eps plus twice the score error; the weighted sum adds ~ T eps sum_t |p_t v_t|.
 * A NaN or infinite score sends its row to an exact scalar softmax (libm expf / tanhf,
 * the reference's rules: a NaN score makes the row NaN, +inf makes it NaN, -inf weighs
 * 0). Keys outside a row's mask are never read (the reference's 0 * v of a masked key
 * makes a NaN there NaN; here it is not seen).
 */
#ifndef EDGENN_GQA_H
#define EDGENN_GQA_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_simd_math.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__) || defined(EDGENN_SIMDE)
#define GQ_X86 1
#else
#define GQ_X86 0
#endif

enum { GQ_OK = 0, GQ_ERR_SEQLEN = 1, GQ_ERR_PAST = 2, GQ_ERR_ROTARY = 3, GQ_ERR_MEM = 4 };

typedef struct {
    long B, S, N, KVN, H;
    const float *q; long q_bs, q_ss;
    const float *k, *v; long kv_bs, kv_ss;
    const float *past_k, *past_v; long P;
    float *cache_k, *cache_v; long L;
    int in_place;
    const int32_t *seqlens;
    long total_len;
    const float *cos, *sin; long rot_rows, half;   /* cos == NULL: no rotary */
    const int64_t *pos_ids;                        /* (B, S) or NULL */
    int interleaved;
    float scale, softcap;                          /* softcap <= 0: none */
    long window;                                   /* <= 0: none */
    int smooth;                                    /* smooth_softmax */
    float *out;
    /* the failure's entry and value (GQ_ERR_*) */
    long err_b; long err_val;
} gq_args;

/* -- scalar pieces: the portable row, the vector rows' tails, the exact softmax ---------- */

static inline float gq_tanh1(float x)
{
    float e = simd_exp1(-2.0f * fabsf(x));
    float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}

/* s[t] = scale * dot(q, k + t*H), t < n */
static void gq_scores_scalar(const float *q, const float *k, long H, long n, float scale,
                             float *s)
{
    for (long t = 0; t < n; t++) {
        const float *kr = k + t * H;
        float a[8] = {0};
        long d = 0;
        for (; d + 8 <= H; d += 8)
            for (int u = 0; u < 8; u++)
                a[u] += q[d + u] * kr[d + u];
        for (; d < H; d++)
            a[0] += q[d] * kr[d];
        s[t] = (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))) * scale;
    }
}

/* acc[0:H] += sum_t p[t] v[t*H : t*H + H] */
static void gq_wsum_scalar(const float *p, const float *v, long H, long n, float *acc)
{
    for (long t = 0; t < n; t++) {
        const float pt = p[t], *vr = v + t * H;
        for (long d = 0; d < H; d++)
            acc[d] += pt * vr[d];
    }
}

/* The softmax of a row with a NaN or infinite score, as NumPy computes it. */
static void gq_softmax_exact(float *s, long n, float cap, int smooth)
{
    float m = -INFINITY;
    int nan = 0;
    for (long t = 0; t < n; t++) {
        if (cap > 0.0f)
            s[t] = cap * tanhf(s[t] / cap);
        if (isnan(s[t]))
            nan = 1;
        else if (s[t] > m)
            m = s[t];
    }
    if (nan) {
        for (long t = 0; t < n; t++)
            s[t] = NAN;
        return;
    }
    if (smooth && m < 0.0f)
        m = 0.0f;
    float sum = 0.0f;
    for (long t = 0; t < n; t++) {
        s[t] = expf(s[t] - m);
        sum += s[t];
    }
    if (smooth)
        sum += expf(-m);
    for (long t = 0; t < n; t++)
        s[t] = s[t] / sum;
}

/* s[0:n] (n >= 1) scores -> probabilities, in place */
static void gq_softmax_scalar(float *s, long n, float cap, int smooth)
{
    float m = -INFINITY, chk = 0.0f;
    for (long t = 0; t < n; t++) {
        m = s[t] > m ? s[t] : m;
        chk += s[t] - s[t];              /* NaN iff a score is NaN or infinite */
    }
    if (chk != 0.0f) {
        gq_softmax_exact(s, n, cap, smooth);
        return;
    }
    if (cap > 0.0f) {
        m = -INFINITY;
        for (long t = 0; t < n; t++) {
            s[t] = cap * gq_tanh1(s[t] / cap);
            m = s[t] > m ? s[t] : m;
        }
    }
    if (smooth && m < 0.0f)
        m = 0.0f;
    float sum = 0.0f;
    for (long t = 0; t < n; t++) {
        s[t] = simd_exp1(s[t] - m);
        sum += s[t];
    }
    if (smooth)
        sum += simd_exp1(-m);
    for (long t = 0; t < n; t++)
        s[t] = s[t] / sum;
}

#define GQ_CAT2(a, b) a##b
#define GQ_CAT(a, b) GQ_CAT2(a, b)

#if GQ_X86
/* -- the vector bodies, one template for every width (_gqa_vec.h) --------------------- */
/* AVX2: 8 floats. The 8 keys' partial-sum vectors to one vector of 8 sums: adjacent
 * pairs in 128-bit lanes, then quads, then the two halves. */
EDGENN_AVX2 static inline __attribute__((always_inline)) __m256 gq_reduce8(__m256 *a)
{
    __m256 c[4], d[2];
    for (int i = 0; i < 4; i++)
        c[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 2; i++)
        d[i] = _mm256_add_ps(_mm256_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    return _mm256_add_ps(_mm256_permute2f128_ps(d[0], d[1], 0x20),
                         _mm256_permute2f128_ps(d[0], d[1], 0x31));
}
#define GQ_V __m256
#define GQ_L 8
#define GQ_SFX _avx2
#define GQ_ATTR EDGENN_AVX2
#define GQ_LOAD _mm256_loadu_ps
#define GQ_STORE _mm256_storeu_ps
#define GQ_SET1 _mm256_set1_ps
#define GQ_ADD _mm256_add_ps
#define GQ_SUB _mm256_sub_ps
#define GQ_MUL _mm256_mul_ps
#define GQ_DIV _mm256_div_ps
#define GQ_FMA _mm256_fmadd_ps
#define GQ_MAX _mm256_max_ps
#define GQ_EXP simd_exp8
#define GQ_ABS(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)
#define GQ_COPYSIGN(t, x) _mm256_or_ps(t, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)))
#define GQ_REDUCE gq_reduce8
#include "_gqa_vec.h"

/* AVX-512F: 16 floats; the 16 keys' vectors to one: pairs and quads in 128-bit lanes,
 * then the lanes in two steps (keys 0-3, 4-7, 8-11, 12-15 in lane order). */
EDGENN_AVX512 static inline __attribute__((always_inline)) __m512 gq_reduce16(__m512 *a)
{
    __m512 c[8], d[4], e[2];
    for (int i = 0; i < 8; i++)
        c[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    for (int i = 0; i < 2; i++)
        e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(d[2 * i], d[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(d[2 * i], d[2 * i + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(e[0], e[1], 0x88),
                         _mm512_shuffle_f32x4(e[0], e[1], 0xDD));
}
#define GQ_SIGN_I _mm512_set1_epi32((int)0x80000000u)
#define GQ_V __m512
#define GQ_L 16
#define GQ_SFX _avx512
#define GQ_ATTR EDGENN_AVX512
#define GQ_LOAD _mm512_loadu_ps
#define GQ_STORE _mm512_storeu_ps
#define GQ_SET1 _mm512_set1_ps
#define GQ_ADD _mm512_add_ps
#define GQ_SUB _mm512_sub_ps
#define GQ_MUL _mm512_mul_ps
#define GQ_DIV _mm512_div_ps
#define GQ_FMA _mm512_fmadd_ps
#define GQ_MAX _mm512_max_ps
#define GQ_EXP simd_exp16
#define GQ_ABS(x) _mm512_abs_ps(x)
#define GQ_COPYSIGN(t, x) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), \
    _mm512_and_si512(_mm512_castps_si512(x), GQ_SIGN_I)))
#define GQ_REDUCE gq_reduce16
#include "_gqa_vec.h"
#endif

#if EDGENN_NEON
/* ARM64 NEON: 4 floats; the 4 keys' vectors to one by pairwise adds */
static inline __attribute__((always_inline)) float32x4_t gq_reduce4(float32x4_t *a)
{
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}
#define GQ_V float32x4_t
#define GQ_L 4
#define GQ_SFX _neon
#define GQ_ATTR
#define GQ_LOAD vld1q_f32
#define GQ_STORE vst1q_f32
#define GQ_SET1 vdupq_n_f32
#define GQ_ADD vaddq_f32
#define GQ_SUB vsubq_f32
#define GQ_MUL vmulq_f32
#define GQ_DIV vdivq_f32
#define GQ_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define GQ_MAX edgenn_vmaxq
#define GQ_EXP simd_exp4
#define GQ_ABS vabsq_f32
#define GQ_COPYSIGN(t, x) vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(t), \
    vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u))))
#define GQ_REDUCE gq_reduce4
#include "_gqa_vec.h"
#endif

/* The family's table: one row per vector width (the keys whose scores one block reduces:
 * the lanes), best last. */
typedef struct {
    const char *name;        /* gqa_k<L>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    long lanes;
    void (*scores)(const float *q, const float *k, long H, long n, float scale, float *s);
    void (*softmax)(float *s, long n, float cap, int smooth);
    void (*wsum)(const float *p, const float *v, long H, long n, float *acc);
} gq_row;

static const gq_row gq_rows[] = {
    {"gqa_k8__scalar", EDGENN_ISA_SCALAR, 8, gq_scores_scalar, gq_softmax_scalar,
     gq_wsum_scalar},
#if GQ_X86
    {"gqa_k8__avx2", EDGENN_ISA_AVX2, 8, gq_scores_avx2, gq_softmax_avx2, gq_wsum_avx2},
    {"gqa_k16__avx512f", EDGENN_ISA_AVX512, 16, gq_scores_avx512, gq_softmax_avx512,
     gq_wsum_avx512},
#endif
#if EDGENN_NEON
    {"gqa_k4__neon", EDGENN_ISA_NEON, 4, gq_scores_neon, gq_softmax_neon, gq_wsum_neon},
#endif
};
#define GQ_ROW_COUNT ((int)(sizeof gq_rows / sizeof gq_rows[0]))

/* y = x (H channels) with its first 2 * half rotated (pairs (i, i + half), interleaved
 * (2i, 2i + 1)), each pair (a, b) -> (a cos - b sin, a sin + b cos), the rest copied; the
 * reference's operations and roundings (no contraction: setup.py). y != x. */
static void gq_rotate(const float *x, float *y, long H, long half, const float *c,
                      const float *s, int inter)
{
    memcpy(y + 2 * half, x + 2 * half, sizeof(float) * (H - 2 * half));
    for (long i = 0; i < half; i++) {
        const long ia = inter ? 2 * i : i, ib = inter ? 2 * i + 1 : i + half;
        const float a = x[ia], b = x[ib];
        const float ac = a * c[i], bs = b * s[i], as = a * s[i], bc = b * c[i];
        y[ia] = ac - bs;
        y[ib] = as + bc;
    }
}

/* the rotary position of query row i of entry b (kept rows and padding rows alike) */
static inline long gq_rot_pos(const gq_args *a, long b, long i, long past)
{
    if (!a->pos_ids)
        return past + i;
    if (a->S == a->total_len)        /* a first prompt: onnxruntime reads the first id */
        return (long)a->pos_ids[0] + i;
    return (long)a->pos_ids[b * a->S + i];
}

/* seqlens and rotary positions checked before anything is written (an in-place cache is
 * left as it was on a refusal) */
static int gq_check(gq_args *a)
{
    const long limit = a->in_place ? a->P : a->L;
    for (long b = 0; b < a->B; b++) {
        const long T = (long)a->seqlens[b] + 1;
        if (T < 1 || T > limit) {
            a->err_b = b; a->err_val = T;
            return GQ_ERR_SEQLEN;
        }
        const long past = T - (a->S < T ? a->S : T);
        if (past > a->P) {
            a->err_b = b; a->err_val = past;
            return GQ_ERR_PAST;
        }
        if (a->cos)
            for (long i = 0; i < a->S; i++) {
                const long p = gq_rot_pos(a, b, i, past);
                if (p < 0 || p >= a->rot_rows) {
                    a->err_b = b; a->err_val = p;
                    return GQ_ERR_ROTARY;
                }
            }
    }
    return GQ_OK;
}

/* keys per block: the block's K (or V) rows stay in L1 across the group's heads */
static inline long gq_block(long H)
{
    long kb = 16384 / (long)(sizeof(float) * (H > 0 ? H : 1));
    kb -= kb % 16;
    return kb < 16 ? 16 : kb;
}

/* Entry b, kv head j: the cache rows, then the attention of its G query heads. ws: 2 G H
 * + G n_max floats. */
static void gq_head(const gq_args *a, const gq_row *row, long b, long j, float *ws)
{
    const long H = a->H, S = a->S, L = a->L, G = a->N / a->KVN;
    const long T = (long)a->seqlens[b] + 1, Q = S < T ? S : T, past = T - Q;
    const long M = S < L - past ? S : L - past;
    const long cb = (b * a->KVN + j) * L * H;
    float *ck = a->cache_k + cb, *cv = a->cache_v + cb;
    if (!a->in_place) {
        if (past) {
            const long pb = (b * a->KVN + j) * a->P * H;
            memcpy(ck, a->past_k + pb, sizeof(float) * past * H);
            memcpy(cv, a->past_v + pb, sizeof(float) * past * H);
        }
        memset(ck + (past + M) * H, 0, sizeof(float) * (L - past - M) * H);
        memset(cv + (past + M) * H, 0, sizeof(float) * (L - past - M) * H);
    }
    for (long i = 0; i < M; i++) {
        const float *kr = a->k + b * a->kv_bs + i * a->kv_ss + j * H;
        const float *vr = a->v + b * a->kv_bs + i * a->kv_ss + j * H;
        if (a->cos) {
            const long p = gq_rot_pos(a, b, i, past);
            gq_rotate(kr, ck + (past + i) * H, H, a->half, a->cos + p * a->half,
                      a->sin + p * a->half, a->interleaved);
        } else {
            memcpy(ck + (past + i) * H, kr, sizeof(float) * H);
        }
        memcpy(cv + (past + i) * H, vr, sizeof(float) * H);
    }
    float *qr = ws, *acc = ws + G * H, *sc = ws + 2 * G * H;
    const long KB = gq_block(H);
    for (long i = 0; i < S; i++) {
        const long last = past + i < T - 1 ? past + i : T - 1;
        long first = a->window > 0 ? last - a->window + 1 : 0;
        first = first < 0 ? 0 : first;
        const long n = last - first + 1;
        const float *kb = ck + first * H, *vb = cv + first * H;
        for (long g = 0; g < G; g++) {
            const float *x = a->q + b * a->q_bs + i * a->q_ss + (j * G + g) * H;
            if (a->cos) {
                const long p = gq_rot_pos(a, b, i, past);
                gq_rotate(x, qr + g * H, H, a->half, a->cos + p * a->half,
                          a->sin + p * a->half, a->interleaved);
            } else {
                memcpy(qr + g * H, x, sizeof(float) * H);
            }
        }
        for (long t0 = 0; t0 < n; t0 += KB) {
            const long nb = n - t0 < KB ? n - t0 : KB;
            for (long g = 0; g < G; g++)
                row->scores(qr + g * H, kb + t0 * H, H, nb, a->scale, sc + g * n + t0);
        }
        for (long g = 0; g < G; g++)
            row->softmax(sc + g * n, n, a->softcap, a->smooth);
        memset(acc, 0, sizeof(float) * G * H);
        for (long t0 = 0; t0 < n; t0 += KB) {
            const long nb = n - t0 < KB ? n - t0 : KB;
            for (long g = 0; g < G; g++)
                row->wsum(sc + g * n + t0, vb + t0 * H, H, nb, acc + g * H);
        }
        float *o = a->out + (b * S + i) * a->N * H + j * G * H;
        memcpy(o, acc, sizeof(float) * G * H);
    }
}

/* Float workspace of one (b, kv head) pass. */
static inline long gq_ws_floats(const gq_args *a)
{
    const long G = a->N / a->KVN;
    return 2 * G * a->H + G * (a->L > 0 ? a->L : 1) + 16;
}

/* The whole op: GQ_OK, or GQ_ERR_* (a->err_b, a->err_val) with nothing written. threads
 * > 1: the (b, kv head) passes split over OpenMP threads, each its own workspace. */
static int gq_run(gq_args *a, const gq_row *row, int threads)
{
    int rc = gq_check(a);
    if (rc != GQ_OK)
        return rc;
    const long W = gq_ws_floats(a), BJ = a->B * a->KVN;
    if (threads < 1)
        threads = 1;
    if (threads > BJ)
        threads = (int)BJ;
    float *ws = malloc(sizeof(float) * W * threads);
    if (!ws)
        return GQ_ERR_MEM;
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long bj = 0; bj < BJ; bj++)
            gq_head(a, row, bj / a->KVN, bj % a->KVN, ws + W * omp_get_thread_num());
    } else
#endif
    for (long bj = 0; bj < BJ; bj++)
        gq_head(a, row, bj / a->KVN, bj % a->KVN, ws);
    free(ws);
    return GQ_OK;
}

#endif
