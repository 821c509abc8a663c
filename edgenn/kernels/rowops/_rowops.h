/* Row operations of transformer models, for _rowops.pyx: softmax over the last axis,
 * attention scale + mask + softmax, LayerNorm and RMS norm rows, exact GELU (and bias +
 * GELU rows), erf, sigmoid. float32, C-contiguous rows.
 *
 * The math is the same in both builds (and the same as the Numba helpers of
 * _transformer_jit.py), so either build matches the reference the same way:
 * - exp: Cephes expf (range reduction by ln 2, degree-6 polynomial, times 2^n); max rel.
 *   error ~1e-7 on [-87, 88] (inputs are clamped there).
 * - erf: Eigen's rational approximation on [-4, 4], |error| < 5e-7, no exp.
 * - sums: eight float lanes (AVX2) or double (generic); the terms of the softmax sum are
 *   positive, so any order keeps the same T*eps bound.
 *
 * Two builds: *_avx2 (AVX2+FMA; tails of rows in scalar) and *_generic (plain C), plus an
 * AVX-512 body of the attention softmax: the rows of rowops_rows (at the end), whose entry
 * points each rowops_* function calls.
 */
#include "_cpu.h"
#include <float.h>
#include <math.h>
#include "_simd.h"
#include "_simd_math.h"
#include "_transpose.h"
#include "_neon.h"
#include <string.h>

enum { ROW_MASK_NONE, ROW_MASK_ADD, ROW_MASK_BOOL };
enum { ROW_ERF, ROW_GELU, ROW_SIGMOID };   /* row_unary's functions */

/* A row of the table (rowops_rows, at the end): the build's entry points. softmax /
 * logsoftmax: one row in place; scale_mask_softmax: one attention row (ROW_MASK_*);
 * layernorm: one row and its statistics; rmsnorm: one row (y may be x); unary: ROW_ERF /
 * ROW_GELU / ROW_SIGMOID over n values; bias_gelu: (R, N) rows; quantize / dequantize /
 * minmax / qadd: n uint8 values (per tensor); transpose2d: _transpose.h's 2-D tile loop. */
typedef struct {
    const char *name;        /* rowops__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    void (*softmax)(float *y, long C);
    void (*logsoftmax)(float *y, long C);
    void (*scale_mask_softmax)(float *row, long T, float scale, const void *mrow, int kind);
    void (*layernorm)(const float *x, const float *scale, const float *bias, float eps,
                      float *y, long C, float *mean, float *inv);
    void (*rmsnorm)(const float *x, const float *scale, float eps, float *y, long C);
    void (*unary)(const float *x, float *y, long n, int fn);
    void (*bias_gelu)(float *y, const float *bias, long R, long N);
    void (*quantize)(const float *x, unsigned char *y, long n, float scale, int zp, int divide);
    void (*dequantize)(const unsigned char *x, float *y, long n, float scale, int zp);
    void (*minmax)(const float *x, long n, float *lo, float *hi);
    void (*qadd)(const unsigned char *a, const unsigned char *b, unsigned char *y, long n,
                 float sa, int za, float sb, int zb, float sy, int zy, int relu);
    void (*transpose2d)(const float *src, long lds, float *dst, long ldd, long n, long m);
} rowops_row;

/* -- scalar math (the generic build, and the row tails of the AVX2 build) ------------ */

#define row_exp1 simd_exp1   /* _simd_math.h */

static inline float row_erf1(float x)
{
    float v = x < -4.0f ? -4.0f : x;  /* NaN passes through */
    v = v > 4.0f ? 4.0f : v;
    float x2 = v * v;
    float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = x2 * p + -2.10102402082508e-06f;
    p = x2 * p + -5.69250639462346e-05f;
    p = x2 * p + -7.34990630326855e-04f;
    p = x2 * p + -2.95459980854025e-03f;
    p = x2 * p + -1.60960333262415e-02f;
    float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = x2 * q + -1.68282697438203e-03f;
    q = x2 * q + -7.37332916720468e-03f;
    q = x2 * q + -1.42647390514189e-02f;
    return v * p / q;
}

static inline float row_gelu1(float v)
{
    return 0.5f * v * (1.0f + row_erf1(v * 0.7071067811865476f));
}

/* 1 / (1 + exp(-x)) without overflow; NaN stays NaN. */
static inline float row_sigmoid1(float x)
{
    if (x != x)
        return x;
    float e = row_exp1(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

/* -- softmax of one row in place -------------------------------------------------------
 * y = exp(y - max) / sum. A row with NaN, +inf or only -inf gives NaN, as the reference.
 * Probabilities below FLT_MIN are flushed to 0: exp's clamp at -87 leaves masked entries
 * (-3.4e38) at 1.6e-38 / sum, a subnormal, and subnormal operands make the next GEMM many
 * times slower on x86 cores that take a microcode assist for them; the reference
 * gives those entries 0 (or less than FLT_MIN), so the flush only moves them closer. */
static inline float row_flush1(float p) { return p >= FLT_MIN ? p : 0.0f; }
/* exp(d) for the softmax's d = x - max <= 0: 0 below -87 (where expf itself is ~FLT_MIN),
 * not the clamped exp(-87) */
static inline float row_exp0(float d) { return d >= -87.0f ? row_exp1(d) : 0.0f; }
/* The row maximum, or 1 (the row is set to NaN) when a NaN or no finite maximum makes
 * every (log-)softmax value NaN, as the reference's arithmetic gives. row_max_end: the
 * scalar part of every build's, elements [j0, C) after m / nan of those before. */
static inline int row_max_end(float *y, long j0, long C, float m, int nan, float *out)
{
    for (long j = j0; j < C; j++) {
        nan |= y[j] != y[j];
        m = y[j] > m ? y[j] : m;
    }
    if (nan || !isfinite(m)) {
        for (long j = 0; j < C; j++)
            y[j] = NAN;
        return 1;
    }
    *out = m;
    return 0;
}

static inline int row_max_generic(float *y, long C, float *out)
{
    return row_max_end(y, 0, C, -INFINITY, 0, out);
}

static void row_softmax_generic(float *y, long C)
{
    float m;
    if (row_max_generic(y, C, &m))
        return;
    double s = 0.0;
    for (long j = 0; j < C; j++) {
        y[j] = row_exp0(y[j] - m);
        s += y[j];
    }
    float inv = (float)(1.0 / s);
    for (long j = 0; j < C; j++)
        y[j] = row_flush1(y[j] * inv);
}

/* log-softmax of one row in place: y = y - max - log(sum exp(y - max)); a row with a NaN
 * or no finite maximum becomes NaN (as the reference's arithmetic gives). */
static void row_logsoftmax_generic(float *y, long C)
{
    float m;
    if (row_max_generic(y, C, &m))
        return;
    double s = 0.0;
    for (long j = 0; j < C; j++)
        s += row_exp0(y[j] - m);
    const float off = m + (float)log(s);
    for (long j = 0; j < C; j++)
        y[j] -= off;
}

/* x, y (R, C); y may be x; log: log-softmax. */
static void rowops_softmax_rows(const rowops_row *rw, const float *x, float *y, long R, long C,
                                int log)
{
    for (long r = 0; r < R; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        if (xr != yr)
            for (long j = 0; j < C; j++)
                yr[j] = xr[j];
        (log ? rw->logsoftmax : rw->softmax)(yr, C);
    }
}

/* -- attention probabilities ------------------------------------------------------------
 * s (R, T) scores in place: s <- softmax(s * scale + mask) per row. mask (MS, T), row i
 * uses mask row i % MS; kind ROW_MASK_ADD: float32 added; ROW_MASK_BOOL: uint8, 0 = -inf. */

static void row_scale_mask_generic(float *row, long T, float scale, const void *mrow, int kind)
{
    if (kind == ROW_MASK_ADD) {
        const float *m = (const float *)mrow;
        for (long j = 0; j < T; j++)
            row[j] = row[j] * scale + m[j];
    } else if (kind == ROW_MASK_BOOL) {
        const unsigned char *m = (const unsigned char *)mrow;
        for (long j = 0; j < T; j++)
            row[j] = m[j] ? row[j] * scale : -INFINITY;
    } else {
        for (long j = 0; j < T; j++)
            row[j] *= scale;
    }
}

#if defined(EDGENN_HAS_AVX512_INTRINSICS) && !defined(EDGENN_SIMDE)
/* The attention row in three passes of 16 lanes (AVX2: scale / mask, max, exp, normalize,
 * four of 8): v = row * scale + mask (FMA, as row_scale_mask_avx2), or v * scale where
 * kept and -inf elsewhere, with the maximum and the NaN check in the same pass; then
 * row_softmax_avx2's steps (exp16 = exp8's steps, 0 below -87, the FLT_MIN flush); the
 * ragged end by masked loads and stores. The sum's order differs from the AVX2 build's. */
/* lane mask of the first n (>= 16: all) of 16 */
static inline __mmask16 row_lanes16(long n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
static void row_scale_mask_softmax_avx512(float *y, long T, float scale, const void *mrow,
                                          int kind)
{
    const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    __m512 mv = ninf;
    __mmask16 bad = 0;
    for (long j = 0; j < T; j += 16) {
        const __mmask16 k = row_lanes16(T - j);
        __m512 v = _mm512_maskz_loadu_ps(k, y + j);
        if (kind == ROW_MASK_ADD) {
            v = _mm512_fmadd_ps(v, sc, _mm512_maskz_loadu_ps(k, (const float *)mrow + j));
        } else if (kind == ROW_MASK_BOOL) {
            __m128i b = _mm_maskz_loadu_epi8(k, (const unsigned char *)mrow + j);
            __mmask16 keep = _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(b),
                                                    _mm512_cvtepu8_epi32(b));
            v = _mm512_mask_mul_ps(ninf, keep, v, sc);
        } else {
            v = _mm512_mul_ps(v, sc);
        }
        _mm512_mask_storeu_ps(y + j, k, v);
        bad |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
        mv = _mm512_mask_max_ps(mv, k, mv, v);
    }
    const float m = _mm512_reduce_max_ps(mv);
    if (bad || !isfinite(m)) {
        for (long j = 0; j < T; j++)
            y[j] = NAN;
        return;
    }
    const __m512 mb = _mm512_set1_ps(m), lim = _mm512_set1_ps(-87.0f);
    __m512 sv = _mm512_setzero_ps();
    for (long j = 0; j < T; j += 16) {
        const __mmask16 k = row_lanes16(T - j);
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + j), mb);
        __m512 e = _mm512_maskz_mov_ps(k & _mm512_cmp_ps_mask(d, lim, _CMP_GE_OQ), simd_exp16(d));
        _mm512_mask_storeu_ps(y + j, k, e);
        sv = _mm512_add_ps(sv, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sv));
    const __m512 tiny = _mm512_set1_ps(FLT_MIN);
    for (long j = 0; j < T; j += 16) {
        const __mmask16 k = row_lanes16(T - j);
        __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + j), inv);
        _mm512_mask_storeu_ps(y + j, k,
                              _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, tiny, _CMP_GE_OQ), p));
    }
}
#endif

#if defined(EDGENN_HAS_AVX512_INTRINSICS) && !defined(EDGENN_SIMDE)
/* RMS norm of one row in 16 lanes (the contract and error bound of row_rmsnorm_generic's
 * comment, RV_L = 16): four accumulators, the ragged end by masked loads (zeros add
 * nothing) and stores, so no scalar tail. */
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
static void row_rmsnorm_avx512(const float *x, const float *scale, float eps, float *y,
                               long C)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    long j = 0;
    for (; j + 64 <= C; j += 64) {
        const __m512 v0 = _mm512_loadu_ps(x + j), v1 = _mm512_loadu_ps(x + j + 16);
        const __m512 v2 = _mm512_loadu_ps(x + j + 32), v3 = _mm512_loadu_ps(x + j + 48);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
        a2 = _mm512_fmadd_ps(v2, v2, a2);
        a3 = _mm512_fmadd_ps(v3, v3, a3);
    }
    for (; j < C; j += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(row_lanes16(C - j), x + j);
        a0 = _mm512_fmadd_ps(v, v, a0);
    }
    const float ss = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1),
                                                        _mm512_add_ps(a2, a3)));
    const __m512 ib = _mm512_set1_ps(1.0f / sqrtf(ss / (float)C + eps));
    for (j = 0; j < C; j += 16) {
        const __mmask16 k = row_lanes16(C - j);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), ib);
        _mm512_mask_storeu_ps(y + j, k, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, scale + j)));
    }
}
#endif

/* One attention row, the scale and mask then the softmax, by each build */
static void row_scale_mask_softmax_generic(float *row, long T, float scale, const void *mrow,
                                           int kind)
{
    row_scale_mask_generic(row, T, scale, mrow, kind);
    row_softmax_generic(row, T);
}

static void rowops_scale_mask_softmax(const rowops_row *rw, float *s, long R, long T,
                                      float scale, const void *mask, long MS, int kind)
{
    const long esize = kind == ROW_MASK_BOOL ? 1 : 4;
    for (long i = 0; i < R; i++) {
        const void *mrow = mask ? (const char *)mask + (i % MS) * T * esize : 0;
        rw->scale_mask_softmax(s + i * T, T, scale, mrow, mask ? kind : ROW_MASK_NONE);
    }
}

/* -- LayerNorm rows ---------------------------------------------------------------------
 * x, y (R, C); scale, bias (C,) (bias may be NULL); mean, inv (R,) the statistics (may be
 * NULL). y = (x - mean) * inv * scale + bias, inv = 1 / sqrt(var + eps), var by two passes. */

static void row_layernorm_generic(const float *x, const float *scale, const float *bias,
                                  float eps, float *y, long C, float *mean, float *inv)
{
    double s = 0.0;
    for (long j = 0; j < C; j++)
        s += x[j];
    float mu = (float)(s / C);
    double v = 0.0;
    for (long j = 0; j < C; j++) {
        float d = x[j] - mu;
        v += d * d;
    }
    float iv = 1.0f / sqrtf((float)(v / C) + eps);
    for (long j = 0; j < C; j++)
        y[j] = (x[j] - mu) * iv * scale[j] + (bias ? bias[j] : 0.0f);
    *mean = mu;
    *inv = iv;
}

static void rowops_layernorm_rows(const rowops_row *rw, const float *x, const float *scale,
                                  const float *bias, float eps, float *y, float *mean,
                                  float *inv, long R, long C)
{
    for (long r = 0; r < R; r++) {
        float mu, iv;
        rw->layernorm(x + r * C, scale, bias, eps, y + r * C, C, &mu, &iv);
        if (mean)
            mean[r] = mu;
        if (inv)
            inv[r] = iv;
    }
}

/* -- RMS norm rows (ONNX RMSNormalization over the last axis, stash_type 1) -------------
 * x, y (R, C), y may be x; scale (C,). y = x * inv * scale, inv = 1 / sqrt(ss / C + eps),
 * ss = sum of x^2 over the row. The vector rows accumulate ss in float32 lanes (four
 * accumulators of RV_L lanes, x * x + acc in one FMA rounding), then add the four, the
 * lanes and the scalar tail: every term is >= 0, so the float32 sum's relative error is
 * at most (C / (4 RV_L) + 2 RV_L + 6) u (u = 2^-24; the roundings along the longest
 * chain: one accumulator's adds, the four's and the lanes' sums, the tail's adds and its
 * product), and y's at most half that plus 6 u (the mean, + eps, sqrt, the reciprocal,
 * two products).
 * A NaN anywhere in a row makes the row NaN; an inf makes ss inf, inv 0 and the row 0
 * (NaN where x is inf), as the float32 formula does. The portable row sums in double. */

static void row_rmsnorm_generic(const float *x, const float *scale, float eps, float *y,
                                long C)
{
    double s = 0.0;
    for (long j = 0; j < C; j++)
        s += (double)x[j] * x[j];
    const float iv = 1.0f / sqrtf((float)s / (float)C + eps);
    for (long j = 0; j < C; j++)
        y[j] = x[j] * iv * scale[j];
}

static void rowops_rmsnorm_rows(const rowops_row *rw, const float *x, const float *scale,
                                float eps, float *y, long R, long C)
{
    for (long r = 0; r < R; r++)
        rw->rmsnorm(x + r * C, scale, eps, y + r * C, C);
}

/* -- elementwise: erf, GELU, bias + GELU rows, sigmoid; y may be x ----------------------- */

static void row_unary_generic(const float *x, float *y, long n, int fn)
{
    for (long j = 0; j < n; j++)
        y[j] = fn == ROW_ERF ? row_erf1(x[j]) : fn == ROW_GELU ? row_gelu1(x[j])
                                                              : row_sigmoid1(x[j]);
}

static void rowops_unary(const rowops_row *rw, const float *x, float *y, long n, int fn)
{
    rw->unary(x, y, n, fn);
}

static void row_bias_gelu_generic(float *y, const float *bias, long R, long N)
{
    for (long r = 0; r < R; r++)
        for (long j = 0; j < N; j++)
            y[r * N + j] = row_gelu1(y[r * N + j] + bias[j]);
}

static void rowops_bias_gelu_rows(const rowops_row *rw, float *y, const float *bias, long R,
                                  long N)
{
    rw->bias_gelu(y, bias, R, N);
}

/* -- the vector rows' float bodies: _rowops_vec.h per ISA ----------------------------- */

#if defined(__x86_64__) || defined(EDGENN_SIMDE)
EDGENN_AVX2 __attribute__((always_inline))
static inline float row_hsum8(__m256 a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

EDGENN_AVX2 __attribute__((always_inline))
static inline float row_hmax8(__m256 a)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the lanes whose mask byte is 0 */
EDGENN_AVX2 __attribute__((always_inline))
static inline __m256 row_bytes_zero8(const unsigned char *m)
{
    __m128i b = _mm_loadl_epi64((const __m128i *)m);
    return _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(b), _mm256_setzero_si256()));
}

#define RV __m256
#define RV_M __m256
#define RV_L 8
#define RV_FN(name) name##_avx2
#define RV_ATTR EDGENN_AVX2
#define RV_LOAD _mm256_loadu_ps
#define RV_STORE _mm256_storeu_ps
#define RV_SET1 _mm256_set1_ps
#define RV_ZERO _mm256_setzero_ps
#define RV_ADD _mm256_add_ps
#define RV_SUB _mm256_sub_ps
#define RV_MUL _mm256_mul_ps
#define RV_DIV _mm256_div_ps
#define RV_FMA _mm256_fmadd_ps
#define RV_MAX _mm256_max_ps
#define RV_HSUM row_hsum8
#define RV_HMAX row_hmax8
#define RV_EXP simd_exp8
#define RV_ERF simd_erf8
#define RV_GE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define RV_UNORD(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define RV_MOR _mm256_or_ps
#define RV_MNONE _mm256_setzero_ps
#define RV_MANY(m) (_mm256_movemask_ps(m) != 0)
#define RV_AND _mm256_and_ps
#define RV_SELECT(m, a, b) _mm256_blendv_ps(b, a, m)
#define RV_NEG_ABS(v) _mm256_or_ps(v, _mm256_set1_ps(-0.0f))
#define RV_BYTES_ZERO row_bytes_zero8
#include "_rowops_vec.h"
#endif

#if EDGENN_NEON
/* the lanes whose mask byte is 0 */
static inline __attribute__((always_inline)) uint32x4_t row_bytes_zero4(const unsigned char *m)
{
    uint32_t w;
    memcpy(&w, m, 4);
    const uint16x8_t h = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(w)));
    return vceqq_u32(vmovl_u16(vget_low_u16(h)), vdupq_n_u32(0));
}

#define RV float32x4_t
#define RV_M uint32x4_t
#define RV_L 4
#define RV_FN(name) name##_neon
#define RV_ATTR
#define RV_LOAD vld1q_f32
#define RV_STORE vst1q_f32
#define RV_SET1 vdupq_n_f32
#define RV_ZERO() vdupq_n_f32(0.0f)
#define RV_ADD vaddq_f32
#define RV_SUB vsubq_f32
#define RV_MUL vmulq_f32
#define RV_DIV vdivq_f32
#define RV_FMA(a, b, c) vfmaq_f32(c, a, b)
#define RV_MAX edgenn_vmaxq
#define RV_HSUM vaddvq_f32
#define RV_HMAX vmaxvq_f32
#define RV_EXP simd_exp4
#define RV_ERF simd_erf4
#define RV_GE vcgeq_f32
#define RV_UNORD(a) vmvnq_u32(vceqq_f32(a, a))
#define RV_MOR vorrq_u32
#define RV_MNONE() vdupq_n_u32(0)
#define RV_MANY(m) (vmaxvq_u32(m) != 0)
#define RV_AND(v, m) vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), m))
#define RV_SELECT(m, a, b) vbslq_f32(m, a, b)
#define RV_NEG_ABS(v) vnegq_f32(vabsq_f32(v))
#define RV_BYTES_ZERO row_bytes_zero4
#include "_rowops_vec.h"
#endif

/* ---- uint8 quantize / dequantize (per tensor) ------------------------------------------
 * quantize:   y = clamp(rint(x / scale) + zp, 0, 255)  (divide != 0: ONNX QuantizeLinear)
 *             y = clamp(rint(x * scale) + zp, 0, 255)  (divide == 0: scale is 1/s, QConv's
 *             requantization); one float32 op then round-half-even, as numpy's rint.
 * dequantize: y = (float)(x - zp) * scale                (ONNX DequantizeLinear)           */

static inline unsigned char row_quant1(float v, float scale, int zp, int divide)
{
    float t = divide ? v / scale : v * scale;
    if (!(t > -1024.0f)) t = -1024.0f;      /* also NaN -> 0 after the clamp below */
    if (t > 1024.0f) t = 1024.0f;
    int q = (int)rintf(t) + zp;
    return (unsigned char)(q < 0 ? 0 : q > 255 ? 255 : q);
}

/* 32 float32 values t (4 vectors, already divided/multiplied by the scale) -> uint8:
 * clamp to +-1024 (NaN -> low end), round half even, + zp, saturate to [0, 255], store. */
EDGENN_AVX2 __attribute__((always_inline))
static inline void row_store32_u8(const __m256 t[4], int zp, unsigned char *y)
{
    const __m256 lo = _mm256_set1_ps(-1024.0f), hi = _mm256_set1_ps(1024.0f);
    const __m256i z = _mm256_set1_epi32(zp), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i q[4];
    for (int j = 0; j < 4; j++) {
        __m256 v = _mm256_min_ps(_mm256_max_ps(t[j], lo), hi);   /* max(NaN, lo) = lo */
        q[j] = _mm256_add_epi32(_mm256_cvtps_epi32(v), z);       /* round half even */
    }
    __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i b = _mm256_packus_epi16(w01, w23);                   /* saturates to [0, 255] */
    _mm256_storeu_si256((__m256i *)y, _mm256_permutevar8x32_epi32(b, order));
}

EDGENN_AVX2
static void row_quantize_avx2(const float *x, unsigned char *y, long n, float scale, int zp,
                              int divide)
{
    const __m256 s = _mm256_set1_ps(scale);
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 t[4];
        for (int j = 0; j < 4; j++) {
            __m256 v = _mm256_loadu_ps(x + i + 8 * j);
            t[j] = divide ? _mm256_div_ps(v, s) : _mm256_mul_ps(v, s);
        }
        row_store32_u8(t, zp, y + i);
    }
    for (; i < n; i++)
        y[i] = row_quant1(x[i], scale, zp, divide);
}

static void row_quantize_generic(const float *x, unsigned char *y, long n, float scale, int zp,
                                 int divide)
{
    for (long i = 0; i < n; i++)
        y[i] = row_quant1(x[i], scale, zp, divide);
}

static void rowops_quantize_u8(const rowops_row *rw, const float *x, unsigned char *y, long n,
                               float scale, int zp, int divide)
{
    rw->quantize(x, y, n, scale, zp, divide);
}

EDGENN_AVX2
static void row_dequantize_avx2(const unsigned char *x, float *y, long n, float scale, int zp)
{
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i z = _mm256_set1_epi32(zp);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x + i)));
        v = _mm256_sub_epi32(v, z);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(v), s));
    }
    for (; i < n; i++)
        y[i] = (float)((int)x[i] - zp) * scale;
}

/* ---- DynamicQuantizeLinear: the uint8 range [min(x, 0), max(x, 0)] ---------------------
 * scale = (hi == lo ? 1 : hi - lo) / 255, zero point = rint(clip(0 - lo / scale, 0, 255)),
 * float32, one rounding per operation (the reference's arithmetic); then quantize (divide).
 * NaN elements are skipped by the range (the reference's NumPy max would return NaN). */
EDGENN_AVX2
static void row_minmax_avx2(const float *x, long n, float *lo, float *hi)
{
    __m256 mn = _mm256_setzero_ps(), mx = mn, mn2 = mn, mx2 = mn;
    long i = 0;
    for (; i + 16 <= n; i += 16) {   /* min(v, acc): acc when v is NaN */
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        mn = _mm256_min_ps(a, mn); mx = _mm256_max_ps(a, mx);
        mn2 = _mm256_min_ps(b, mn2); mx2 = _mm256_max_ps(b, mx2);
    }
    float m[8], M[8];
    _mm256_storeu_ps(m, _mm256_min_ps(mn, mn2));
    _mm256_storeu_ps(M, _mm256_max_ps(mx, mx2));
    float l = 0.0f, h = 0.0f;
    for (int j = 0; j < 8; j++) { l = m[j] < l ? m[j] : l; h = M[j] > h ? M[j] : h; }
    for (; i < n; i++) { l = x[i] < l ? x[i] : l; h = x[i] > h ? x[i] : h; }
    *lo = l; *hi = h;
}

static void row_minmax_generic(const float *x, long n, float *lo, float *hi)
{
    float l = 0.0f, h = 0.0f;
    for (long i = 0; i < n; i++) { l = x[i] < l ? x[i] : l; h = x[i] > h ? x[i] : h; }
    *lo = l; *hi = h;
}

static void rowops_dynamic_quantize_u8(const rowops_row *rw, const float *x, unsigned char *y,
                                       long n, float *scale, int *zp)
{
    float lo = 0.0f, hi = 0.0f;
    rw->minmax(x, n, &lo, &hi);
    float s = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    float z = 0.0f - lo / s;
    z = z < 0.0f ? 0.0f : (z > 255.0f ? 255.0f : z);
    *scale = s;
    *zp = (int)rintf(z);
    rw->quantize(x, y, n, s, *zp, 1);
}

static void row_dequantize_generic(const unsigned char *x, float *y, long n, float scale, int zp)
{
    for (long i = 0; i < n; i++)
        y[i] = (float)((int)x[i] - zp) * scale;
}

static void rowops_dequantize_u8(const rowops_row *rw, const unsigned char *x, float *y, long n,
                                 float scale, int zp)
{
    rw->dequantize(x, y, n, scale, zp);
}

/* ---- QAdd: y = quantize([relu]((a - za) * sa + (b - zb) * sb)), uint8 per tensor ----------
 * each step one float32 operation as the QDQ graph does it (DequantizeLinear x2, Add,
 * Relu, QuantizeLinear with its division), so the result is bit-exact with it.            */

static inline unsigned char row_qadd1(unsigned char a, unsigned char b, float sa, int za,
                                      float sb, int zb, float sy, int zy, int relu)
{
    float v = (float)((int)a - za) * sa + (float)((int)b - zb) * sb;
    if (relu && v < 0.0f) v = 0.0f;
    return row_quant1(v, sy, zy, 1);
}

EDGENN_AVX2
static void row_qadd_avx2(const unsigned char *a, const unsigned char *b, unsigned char *y,
                          long n, float sa, int za, float sb, int zb, float sy, int zy,
                          int relu)
{
    const __m256 vsa = _mm256_set1_ps(sa), vsb = _mm256_set1_ps(sb), vsy = _mm256_set1_ps(sy),
                 zero = _mm256_setzero_ps();
    const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb);
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 t[4];
        for (int j = 0; j < 4; j++) {
            __m256i ia = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(a + i + 8 * j)));
            __m256i ib = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + i + 8 * j)));
            __m256 va = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ia, vza)), vsa);
            __m256 vb = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ib, vzb)), vsb);
            __m256 v = _mm256_add_ps(va, vb);          /* no FMA: two roundings, as NumPy */
            if (relu) v = _mm256_max_ps(v, zero);
            t[j] = _mm256_div_ps(v, vsy);
        }
        row_store32_u8(t, zy, y + i);
    }
    for (; i < n; i++)
        y[i] = row_qadd1(a[i], b[i], sa, za, sb, zb, sy, zy, relu);
}

static void row_qadd_generic(const unsigned char *a, const unsigned char *b, unsigned char *y,
                             long n, float sa, int za, float sb, int zb, float sy, int zy,
                             int relu)
{
    for (long i = 0; i < n; i++)
        y[i] = row_qadd1(a[i], b[i], sa, za, sb, zb, sy, zy, relu);
}

static void rowops_qadd_u8(const rowops_row *rw, const unsigned char *a, const unsigned char *b,
                           unsigned char *y, long n, float sa, int za, float sb, int zb,
                           float sy, int zy, int relu)
{
    rw->qadd(a, b, y, n, sa, za, sb, zb, sy, zy, relu);
}

#if EDGENN_NEON
/* The uint8 ops on NEON, 8 values a step, the scalar ones' arithmetic: */

/* 8 float32 values t (already divided / multiplied by the scale) -> uint8 as row_quant1:
 * clamp to +-1024 (NaN -> the low end: x86's max), round half even, + zp, saturate */
static inline __attribute__((always_inline)) uint8x8_t row_quant8_neon(float32x4_t t0,
                                                                        float32x4_t t1, int zp)
{
    const float32x4_t lo = vdupq_n_f32(-1024.0f), hi = vdupq_n_f32(1024.0f);
    const int32x4_t z = vdupq_n_s32(zp);
    const int32x4_t q0 = vaddq_s32(vcvtnq_s32_f32(edgenn_vminq(edgenn_vmaxq(t0, lo), hi)), z);
    const int32x4_t q1 = vaddq_s32(vcvtnq_s32_f32(edgenn_vminq(edgenn_vmaxq(t1, lo), hi)), z);
    return vqmovn_u16(vcombine_u16(vqmovun_s32(q0), vqmovun_s32(q1)));
}

/* 8 uint8 at x -> (x - zp) as two int32x4 */
static inline __attribute__((always_inline)) void row_widen8_neon(const unsigned char *x, int zp,
                                                                  int32x4_t *lo, int32x4_t *hi)
{
    const int16x8_t w = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(x)));
    *lo = vsubq_s32(vmovl_s16(vget_low_s16(w)), vdupq_n_s32(zp));
    *hi = vsubq_s32(vmovl_s16(vget_high_s16(w)), vdupq_n_s32(zp));
}

static void row_quantize_neon(const float *x, unsigned char *y, long n, float scale, int zp,
                              int divide)
{
    const float32x4_t s = vdupq_n_f32(scale);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        vst1_u8(y + i, divide ? row_quant8_neon(vdivq_f32(v0, s), vdivq_f32(v1, s), zp)
                              : row_quant8_neon(vmulq_f32(v0, s), vmulq_f32(v1, s), zp));
    }
    for (; i < n; i++)
        y[i] = row_quant1(x[i], scale, zp, divide);
}

static void row_dequantize_neon(const unsigned char *x, float *y, long n, float scale, int zp)
{
    const float32x4_t s = vdupq_n_f32(scale);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        int32x4_t lo, hi;
        row_widen8_neon(x + i, zp, &lo, &hi);
        vst1q_f32(y + i, vmulq_f32(vcvtq_f32_s32(lo), s));
        vst1q_f32(y + i + 4, vmulq_f32(vcvtq_f32_s32(hi), s));
    }
    for (; i < n; i++)
        y[i] = (float)((int)x[i] - zp) * scale;
}

/* min / max with 0, NaN skipped: x86's min / max keep the accumulator on a NaN */
static void row_minmax_neon(const float *x, long n, float *lo, float *hi)
{
    float32x4_t mn = vdupq_n_f32(0.0f), mx = mn;
    long i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t a = vld1q_f32(x + i);
        mn = edgenn_vminq(a, mn);
        mx = edgenn_vmaxq(a, mx);
    }
    float m[4], M[4];
    vst1q_f32(m, mn);
    vst1q_f32(M, mx);
    float l = 0.0f, h = 0.0f;
    for (int j = 0; j < 4; j++) { l = m[j] < l ? m[j] : l; h = M[j] > h ? M[j] : h; }
    for (; i < n; i++) { l = x[i] < l ? x[i] : l; h = x[i] > h ? x[i] : h; }
    *lo = l; *hi = h;
}

/* row_qadd1's steps: two products, their sum (no FMA), Relu, the division, the rounding */
static void row_qadd_neon(const unsigned char *a, const unsigned char *b, unsigned char *y,
                          long n, float sa, int za, float sb, int zb, float sy, int zy, int relu)
{
    const float32x4_t vsa = vdupq_n_f32(sa), vsb = vdupq_n_f32(sb), vsy = vdupq_n_f32(sy);
    const float32x4_t zero = vdupq_n_f32(0.0f);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        int32x4_t a0, a1, b0, b1;
        row_widen8_neon(a + i, za, &a0, &a1);
        row_widen8_neon(b + i, zb, &b0, &b1);
        float32x4_t v0 = vaddq_f32(vmulq_f32(vcvtq_f32_s32(a0), vsa),
                                   vmulq_f32(vcvtq_f32_s32(b0), vsb));
        float32x4_t v1 = vaddq_f32(vmulq_f32(vcvtq_f32_s32(a1), vsa),
                                   vmulq_f32(vcvtq_f32_s32(b1), vsb));
        if (relu) {
            v0 = edgenn_vmaxq(v0, zero);
            v1 = edgenn_vmaxq(v1, zero);
        }
        vst1_u8(y + i, row_quant8_neon(vdivq_f32(v0, vsy), vdivq_f32(v1, vsy), zy));
    }
    for (; i < n; i++)
        y[i] = row_qadd1(a[i], b[i], sa, za, sb, zb, sy, zy, relu);
}
#endif

/* The row ops' table, best last (each row's tier is checked by the caller: _cpu.h). */
#define ROWOPS_GENERIC_BODIES                                                                      \
    .softmax = row_softmax_generic, .logsoftmax = row_logsoftmax_generic,                          \
    .scale_mask_softmax = row_scale_mask_softmax_generic, .layernorm = row_layernorm_generic,      \
    .rmsnorm = row_rmsnorm_generic,                                                                \
    .unary = row_unary_generic, .bias_gelu = row_bias_gelu_generic,                                \
    .quantize = row_quantize_generic, .dequantize = row_dequantize_generic,                        \
    .minmax = row_minmax_generic, .qadd = row_qadd_generic, .transpose2d = tr2d_scalar
#define ROWOPS_AVX2_BODIES                                                                         \
    .softmax = row_softmax_avx2, .logsoftmax = row_logsoftmax_avx2,                                \
    .scale_mask_softmax = row_scale_mask_softmax_avx2, .layernorm = row_layernorm_avx2,            \
    .rmsnorm = row_rmsnorm_avx2,                                                                   \
    .unary = row_unary_avx2, .bias_gelu = row_bias_gelu_avx2, .quantize = row_quantize_avx2,       \
    .dequantize = row_dequantize_avx2, .minmax = row_minmax_avx2, .qadd = row_qadd_avx2,           \
    .transpose2d = tr2d_avx2

static const rowops_row rowops_rows[] = {
    {.name = "rowops__scalar", .isa = EDGENN_ISA_SCALAR, ROWOPS_GENERIC_BODIES},
#if defined(__x86_64__) && !defined(EDGENN_SIMDE)
    {.name = "rowops__avx2", .isa = EDGENN_ISA_AVX2, ROWOPS_AVX2_BODIES},
#ifdef EDGENN_HAS_AVX512_INTRINSICS
    {.name = "rowops__avx512f", .isa = EDGENN_ISA_AVX512, ROWOPS_AVX2_BODIES,
     .scale_mask_softmax = row_scale_mask_softmax_avx512, .rmsnorm = row_rmsnorm_avx512},
#endif
#endif
#if EDGENN_NEON
    {.name = "rowops__neon", .isa = EDGENN_ISA_NEON, ROWOPS_GENERIC_BODIES,
     .softmax = row_softmax_neon, .logsoftmax = row_logsoftmax_neon,
     .scale_mask_softmax = row_scale_mask_softmax_neon, .layernorm = row_layernorm_neon,
     .rmsnorm = row_rmsnorm_neon,
     .unary = row_unary_neon, .bias_gelu = row_bias_gelu_neon, .quantize = row_quantize_neon,
     .dequantize = row_dequantize_neon, .minmax = row_minmax_neon, .qadd = row_qadd_neon,
     .transpose2d = tr2d_neon},
#endif
};
#define ROWOPS_ROW_COUNT ((int)(sizeof rowops_rows / sizeof rowops_rows[0]))

