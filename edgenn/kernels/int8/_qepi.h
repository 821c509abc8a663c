/* Requantization epilogue of QConv / QGemm (the int8 spec), shared by _qgemm.h and _qdw.h.
 *
 * Input: exact int32 sums S = sum_k x_k w_k over the packed operands. The epilogue adds a
 * per-channel int32 constant (B - x_zp * sum_k w_k, or just B when the kernel subtracted
 * the zero point itself), then, in float32, one rounding per operation in the spec's order
 * (this file must be compiled with -ffp-contract=off: no FMA contraction):
 *
 *   integer path:  y = clamp(rint(float(acc) * M[c]) + y_zp, lo, hi)                  u8
 *   float path:    v = float(acc) * S[c]
 *                  v = v + D[c]                                      (float bias, if any)
 *                  v = v + float(z - z_zp) * z_scale                 (residual, if any)
 *                  v = act(v)
 *                  v = v * ps;  v = v + pb                          (post affine, if any)
 *                  y = clamp(rint(v * inv_y) + y_zp, 0, 255)  (u8)   or  y = v  (float32)
 *
 * "Channel" c is the output row (QConv: output channel m) or the output column (QGemm: n),
 * chosen by per_col. rint is round-half-even: cvtps2dq / lrintf in the default rounding
 * mode. Values are capped at 2^24 before the conversion to int (anything that large is far
 * outside [0, 255] either way, so the result is unchanged and cvtps2dq never overflows;
 * below -2^31 it returns INT_MIN, which still saturates to 0; the scalar build clamps
 * both sides).
 *
 * Two builds: qe_rows_avx2 / qe_tile8_avx2 (8 outputs per vector) and qe_span_c (scalar,
 * portable; also rows shorter than 8 in the AVX2 build). They agree bit for bit except
 * Sigmoid / SiLU / Gelu, whose exp / erf may differ in the last float bit (the spec allows
 * one output step).
 */
#ifndef EDGENN_QEPI_H
#define EDGENN_QEPI_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "_epilogue.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(EDGENN_SIMDE)
#include <immintrin.h>
#include "_simd_math.h"
#define QE_X86 1
#define QE_AVX2 __attribute__((target("avx2,fma")))
#else
#define QE_X86 0
#endif

#define QE_TILE_ROWS 6               /* rows of the GEMM register tile */

/* the activations of the float epilogue: every one of _epilogue.h but PRelu */
#define QE_ACTS (((1u << EDGENN_ACT_COUNT) - 1) & ~EDGENN_ACT_BIT(EDGENN_ACT_PRELU))

typedef struct {
    int float_path;          /* 0: integer requantization, 1: float epilogue */
    int per_col;             /* constants indexed by output column (QGemm), else by row */
    const int32_t *bias;     /* per channel, added to the raw sums */
    const float *mult;       /* per channel: M (integer path) or S = x_scale * w_scale */
    const float *fadd;       /* float path: per channel float bias D added after S, or NULL */
    int32_t yzp, lo, hi;     /* u8 output: zero point and clamp bounds */
    int out_f32;             /* float path: float32 output (no requantization) */
    float inv_y;             /* float path, u8 output: float32(1) / y_scale */
    int has_z;               /* residual input z (u8, laid out as y) */
    int32_t zzp;
    float zscale;
    int act;                 /* float path activation (QE_*) and its parameters */
    float p0, p1;
    int post;                /* float path: v * ps + pb after the activation (PP-OCR's
                                learnable affine blocks), two roundings */
    float ps, pb;
} qe_epi;

/* ---------------------------------------------------------------- scalar build */

static inline float qe_sigmoid1(float v) {
    float e = expf(-fabsf(v));
    return v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

static inline float qe_act1(float v, int act, float p0, float p1) {
    float t;
    switch (act) {
    case EDGENN_ACT_RELU: return v > 0.f ? v : 0.f;
    case EDGENN_ACT_CLIP: v = v < p0 ? p0 : v; return v > p1 ? p1 : v;
    case EDGENN_ACT_HARDSIGMOID:
        t = v * p0;
        t = t + p1;
        t = t < 0.f ? 0.f : t;
        return t > 1.f ? 1.f : t;
    case EDGENN_ACT_HARDSWISH:
        t = v * (float)(1.0 / 6.0);
        t = t + 0.5f;
        t = t < 0.f ? 0.f : t;
        t = t > 1.f ? 1.f : t;
        return v * t;
    case EDGENN_ACT_SIGMOID: return qe_sigmoid1(v);
    case EDGENN_ACT_SILU: return v * qe_sigmoid1(v);
    case EDGENN_ACT_LEAKYRELU: return v >= 0.f ? v : v * p0;
    case EDGENN_ACT_GELU:
        t = 0.5f * v;
        return t * (1.f + erff(v * (float)0.70710678118654752440));
    default: return v;
    }
}

static inline int32_t qe_round1(float v) {
    if (v > 16777216.f) v = 16777216.f;
    if (v < -16777216.f) v = -16777216.f;
    return (int32_t)lrintf(v);
}

static inline uint8_t qe_clamp1(int32_t q, int32_t lo, int32_t hi) {
    q = q < lo ? lo : q;
    q = q > hi ? hi : q;
    return (uint8_t)q;
}

/* n outputs of one row: acc[j] is the sum for (row, col0 + j); the row's outputs start
 * at y (uint8 or float), its residual at z. */
static void qe_span_c(const int32_t *acc, long n, const qe_epi *e, long row, long col0,
                      void *y, const uint8_t *z) {
    uint8_t *yu = (uint8_t *)y;
    float *yf = (float *)y;
    for (long j = 0; j < n; j++) {
        long c = e->per_col ? col0 + j : row;
        /* int32 wrap-around add, as the vector build does */
        int32_t a = (int32_t)((uint32_t)acc[j] + (uint32_t)e->bias[c]);
        float v = (float)a * e->mult[c];
        if (!e->float_path) {
            yu[j] = qe_clamp1(qe_round1(v) + e->yzp, e->lo, e->hi);
            continue;
        }
        if (e->fadd)
            v = v + e->fadd[c];
        if (e->has_z) {
            float r = (float)((int32_t)z[j] - e->zzp) * e->zscale;
            v = v + r;
        }
        v = qe_act1(v, e->act, e->p0, e->p1);
        if (e->post) {
            v = v * e->ps;
            v = v + e->pb;
        }
        if (e->out_f32)
            yf[j] = v;
        else
            yu[j] = qe_clamp1(qe_round1(v * e->inv_y) + e->yzp, 0, 255);
    }
}

/* ---------------------------------------------------------------- AVX2 build */
#if QE_X86

QE_AVX2 static inline __m256 qe_sigmoid8(__m256 v) {
    const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
    __m256 e = simd_exp8(_mm256_sub_ps(zero, _mm256_andnot_ps(_mm256_set1_ps(-0.f), v)));
    __m256 d = _mm256_add_ps(one, e);
    __m256 pos = _mm256_div_ps(one, d), neg = _mm256_div_ps(e, d);
    return _mm256_blendv_ps(neg, pos, _mm256_cmp_ps(v, zero, _CMP_GE_OQ));
}

/* The activations exactly as the NumPy reference orders them (mul, then add; no FMA). */
QE_AVX2 static inline __m256 qe_act8(__m256 v, int act, float p0, float p1) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f);
    __m256 t;
    switch (act) {
    case EDGENN_ACT_RELU: return _mm256_max_ps(v, zero);
    case EDGENN_ACT_CLIP: return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(p0)), _mm256_set1_ps(p1));
    case EDGENN_ACT_HARDSIGMOID:
        t = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(p0)), _mm256_set1_ps(p1));
        return _mm256_min_ps(_mm256_max_ps(t, zero), one);
    case EDGENN_ACT_HARDSWISH:
        t = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps((float)(1.0 / 6.0))),
                          _mm256_set1_ps(0.5f));
        return _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(t, zero), one));
    case EDGENN_ACT_SIGMOID: return qe_sigmoid8(v);
    case EDGENN_ACT_SILU: return _mm256_mul_ps(v, qe_sigmoid8(v));
    case EDGENN_ACT_LEAKYRELU:
        return _mm256_blendv_ps(_mm256_mul_ps(v, _mm256_set1_ps(p0)), v,
                                _mm256_cmp_ps(v, zero, _CMP_GE_OQ));
    case EDGENN_ACT_GELU: {
        __m256 er = simd_erf8(_mm256_mul_ps(v, _mm256_set1_ps((float)0.70710678118654752440)));
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), _mm256_add_ps(one, er));
    }
    default: return v;
    }
}

/* rint(v) + zp clamped to [lo, hi] (lo8 / hi8: the bounds as u8 in every byte), stored
 * as 8 bytes. The [0, 255] clamp is the saturation of the two packs; v is capped at 2^24
 * first so cvtps2dq cannot overflow (a large negative v converts to INT_MIN: still 0). */
QE_AVX2 static inline void qe_store_u8x8(__m256 v, __m256i zp, __m128i lo8, __m128i hi8,
                                         uint8_t *y) {
    v = _mm256_min_ps(v, _mm256_set1_ps(16777216.f));
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), zp);
    __m128i s16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    __m128i u8 = _mm_min_epu8(_mm_max_epu8(_mm_packus_epi16(s16, s16), lo8), hi8);
    _mm_storel_epi64((__m128i *)y, u8);
}

static inline int qe_u8(int32_t v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

/* Eight outputs (row, col0..col0+7) from the raw sums `acc`. */
QE_AVX2 static inline void qe_vec8(__m256i acc, const qe_epi *e, long row, long col0,
                                   void *y, const uint8_t *z) {
    __m256i b;
    __m256 m;
    if (e->per_col) {
        b = _mm256_loadu_si256((const __m256i *)(e->bias + col0));
        m = _mm256_loadu_ps(e->mult + col0);
    } else {
        b = _mm256_set1_epi32(e->bias[row]);
        m = _mm256_set1_ps(e->mult[row]);
    }
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, b)), m);
    if (!e->float_path) {
        qe_store_u8x8(v, _mm256_set1_epi32(e->yzp), _mm_set1_epi8((char)qe_u8(e->lo)),
                      _mm_set1_epi8((char)qe_u8(e->hi)), (uint8_t *)y);
        return;
    }
    if (e->fadd)
        v = _mm256_add_ps(v, e->per_col ? _mm256_loadu_ps(e->fadd + col0)
                                        : _mm256_set1_ps(e->fadd[row]));
    if (e->has_z) {
        __m256i zi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)z));
        __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(zi, _mm256_set1_epi32(e->zzp))),
                                 _mm256_set1_ps(e->zscale));
        v = _mm256_add_ps(v, r);
    }
    if (e->act) v = qe_act8(v, e->act, e->p0, e->p1);
    if (e->post)
        v = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(e->ps)), _mm256_set1_ps(e->pb));
    if (e->out_f32)
        _mm256_storeu_ps((float *)y, v);
    else
        qe_store_u8x8(_mm256_mul_ps(v, _mm256_set1_ps(e->inv_y)), _mm256_set1_epi32(e->yzp),
                      _mm_setzero_si128(), _mm_set1_epi8((char)255), (uint8_t *)y);
}

/* A block of rows x n outputs; row r uses the constants of channel row0 + r * row_step
 * (row_step 0: one channel, e.g. the rows of a depthwise plane) unless per_col:
 * sums at acc + r * acc_pitch, outputs at y + r * y_pitch elements, residual at
 * z + r * y_pitch. Eight outputs per step; a ragged end is one more step ending at n
 * (rewriting a few outputs with the same values); rows shorter than 8 in scalar. The
 * epilogue is copied to a local first: stores through uint8_t* may alias anything, and
 * would otherwise force every field to be reloaded after each store. */
QE_AVX2 static void qe_rows_avx2(const int32_t *acc, long acc_pitch, long rows, long n,
                                 const qe_epi *ep, long row0, long row_step, long col0,
                                 void *y, long y_pitch, const uint8_t *z) {
    const qe_epi e = *ep;
    const long es = e.out_f32 ? 4 : 1;
    if (n < 8) {
        for (long r = 0; r < rows; r++)
            qe_span_c(acc + r * acc_pitch, n, &e, row0 + r * row_step, col0,
                      (char *)y + r * y_pitch * es,
                      e.has_z ? z + r * y_pitch : NULL);
        return;
    }
    if (!e.float_path && !e.per_col) {   /* the common QConv case: per-row constants */
        const __m256i zp = _mm256_set1_epi32(e.yzp);
        const __m128i lo = _mm_set1_epi8((char)qe_u8(e.lo)), hi = _mm_set1_epi8((char)qe_u8(e.hi));
        for (long r = 0; r < rows; r++) {
            const __m256i b = _mm256_set1_epi32(e.bias[row0 + r * row_step]);
            const __m256 m = _mm256_set1_ps(e.mult[row0 + r * row_step]);
            const int32_t *ar = acc + r * acc_pitch;
            uint8_t *yu = (uint8_t *)y + r * y_pitch;
            for (long j = 0; j < n; j += 8) {
                if (j > n - 8) j = n - 8;
                __m256i a = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(ar + j)), b);
                qe_store_u8x8(_mm256_mul_ps(_mm256_cvtepi32_ps(a), m), zp, lo, hi, yu + j);
            }
        }
        return;
    }
    for (long r = 0; r < rows; r++) {
        const int32_t *ar = acc + r * acc_pitch;
        char *yr = (char *)y + r * y_pitch * es;
        const uint8_t *zr = e.has_z ? z + r * y_pitch : NULL;
        for (long j = 0; j < n; j += 8) {
            if (j > n - 8) j = n - 8;
            qe_vec8(_mm256_loadu_si256((const __m256i *)(ar + j)), &e, row0 + r * row_step, col0 + j,
                    yr + j * es, zr ? zr + j : NULL);
        }
    }
}

QE_AVX2 static void qe_span_avx2(const int32_t *acc, long n, const qe_epi *ep, long row,
                                 long col0, void *y, const uint8_t *z) {
    qe_rows_avx2(acc, 0, 1, n, ep, row, 0, col0, y, 0, z);
}

/* Integer path, rows x 8 outputs (rows <= 6) with per-row constants (bias[r], mult[r]) or
 * per-column ones (bc, mc). Four rows share one pack: packs_epi32 twice and packus give
 * [r0 0-3, r1 0-3, r2 0-3, r3 0-3 | r0 4-7, ...] (4-byte runs), re-paired by two unpacks. */
#define QE_Q(R, PC)                                                                                \
    _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(            \
        _mm256_loadu_si256((const __m256i *)(t + 8 * (R))),                                        \
        PC ? bc : _mm256_set1_epi32(bias[R]))), PC ? mc : _mm256_set1_ps(mult[R])), big))
#define QE_INT_TILE(PC)                                                                            \
    {                                                                                              \
        int r = 0;                                                                                 \
        for (; r + 4 <= rows; r += 4) {                                                            \
            __m256i s01 = _mm256_packs_epi32(QE_Q(r, PC), QE_Q(r + 1, PC));                        \
            __m256i s23 = _mm256_packs_epi32(QE_Q(r + 2, PC), QE_Q(r + 3, PC));                    \
            __m256i u = _mm256_packus_epi16(_mm256_adds_epi16(s01, zp16), _mm256_adds_epi16(s23, zp16)); \
            u = _mm256_min_epu8(_mm256_max_epu8(u, lo), hi);                                       \
            __m128i a = _mm256_castsi256_si128(u), b = _mm256_extracti128_si256(u, 1);             \
            __m128i r01 = _mm_unpacklo_epi32(a, b), r23 = _mm_unpackhi_epi32(a, b);                \
            _mm_storel_epi64((__m128i *)(yu + r * ldy), r01);                                      \
            _mm_storeh_pd((double *)(yu + (r + 1) * ldy), _mm_castsi128_pd(r01));                  \
            _mm_storel_epi64((__m128i *)(yu + (r + 2) * ldy), r23);                                \
            _mm_storeh_pd((double *)(yu + (r + 3) * ldy), _mm_castsi128_pd(r23));                  \
        }                                                                                          \
        for (; r < rows; r += 2) {   /* 2 rows (or the last one, paired with itself) */            \
            int r1 = r + 1 < rows ? r + 1 : r;                                                     \
            __m256i s = _mm256_adds_epi16(_mm256_packs_epi32(QE_Q(r, PC), QE_Q(r1, PC)), zp16);    \
            __m256i u = _mm256_min_epu8(_mm256_max_epu8(_mm256_packus_epi16(s, s), lo), hi);       \
            __m128i r01 = _mm_unpacklo_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)); \
            _mm_storel_epi64((__m128i *)(yu + r * ldy), r01);                                      \
            _mm_storeh_pd((double *)(yu + r1 * ldy), _mm_castsi128_pd(r01));                       \
        }                                                                                          \
    }

/* A tile of rows x 8 outputs: t[r * 8 + j] is the sum for (row0 + r, col0 + j); row r's
 * outputs start at y + r * ldy elements, its residual at z + r * ldz. */
QE_AVX2 static inline __attribute__((always_inline)) void qe_tile8_avx2(
        const int32_t *t, int rows, const qe_epi *ep, long row0, long col0, void *y, long ldy,
        const uint8_t *z, long ldz) {
    if (!ep->float_path) {   /* fields read once into locals (u8 stores alias everything) */
        const int per_col = ep->per_col;
        const int32_t *bias = ep->bias + (per_col ? col0 : row0);
        const float *mult = ep->mult + (per_col ? col0 : row0);
        const __m256i zp16 = _mm256_set1_epi16((short)ep->yzp);
        const __m256i lo = _mm256_set1_epi8((char)qe_u8(ep->lo));
        const __m256i hi = _mm256_set1_epi8((char)qe_u8(ep->hi));
        const __m256 big = _mm256_set1_ps(16777216.f);
        uint8_t *yu = (uint8_t *)y;
        if (per_col) {
            const __m256i bc = _mm256_loadu_si256((const __m256i *)bias);
            const __m256 mc = _mm256_loadu_ps(mult);
            QE_INT_TILE(1)
        } else {
            const __m256i bc = _mm256_setzero_si256();
            const __m256 mc = big;
            QE_INT_TILE(0)
        }
        return;
    }
    const qe_epi e = *ep;
    const long es = e.out_f32 ? 4 : 1;
    for (int r = 0; r < rows; r++)
        qe_vec8(_mm256_loadu_si256((const __m256i *)(t + 8 * r)), &e, row0 + r, col0,
                (char *)y + r * ldy * es, e.has_z ? z + r * ldz : NULL);
}
#undef QE_INT_TILE
#undef QE_Q

/* As qe_tile8_avx2 for rows x 16 outputs (t: rows of 16 sums), per-row constants. */
QE_AVX2 static inline __attribute__((always_inline)) void qe_tile16_avx2(
        const int32_t *t, int rows, const qe_epi *ep, long row0, long col0, void *y, long ldy,
        const uint8_t *z, long ldz) {
    if (!ep->float_path && !ep->per_col) {
        const int32_t *bias = ep->bias + row0;
        const float *mult = ep->mult + row0;
        const __m256i zp16 = _mm256_set1_epi16((short)ep->yzp);
        const __m128i lo = _mm_set1_epi8((char)qe_u8(ep->lo)), hi = _mm_set1_epi8((char)qe_u8(ep->hi));
        const __m256 big = _mm256_set1_ps(16777216.f);
        uint8_t *yu = (uint8_t *)y;
        for (int r = 0; r < rows; r++) {
            const __m256i b = _mm256_set1_epi32(bias[r]);
            const __m256 m = _mm256_set1_ps(mult[r]);
            __m256i q0 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(
                _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(t + 16 * r)), b)), m), big));
            __m256i q1 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(
                _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(t + 16 * r + 8)), b)), m), big));
            /* packs: [0-3, 8-11 | 4-7, 12-15] (s16) -> packus: 4-byte runs, re-paired */
            __m256i s16 = _mm256_adds_epi16(_mm256_packs_epi32(q0, q1), zp16);
            __m256i u = _mm256_packus_epi16(s16, s16);
            __m128i v = _mm_unpacklo_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
            _mm_storeu_si128((__m128i *)(yu + r * ldy), _mm_min_epu8(_mm_max_epu8(v, lo), hi));
        }
        return;
    }
    const long es = ep->out_f32 ? 4 : 1;
    int32_t t8[2][QE_TILE_ROWS * 8];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < 8; j++) {
            t8[0][r * 8 + j] = t[16 * r + j];
            t8[1][r * 8 + j] = t[16 * r + 8 + j];
        }
    qe_tile8_avx2(t8[0], rows, ep, row0, col0, y, ldy, z, ldz);
    qe_tile8_avx2(t8[1], rows, ep, row0, col0 + 8, (char *)y + 8 * es, ldy, z ? z + 8 : NULL, ldz);
}
#endif

static void qe_span(const int32_t *acc, long n, const qe_epi *e, long row, long col0, void *y,
                    const uint8_t *z, int use_avx2) {
#if QE_X86
    if (use_avx2) {
        qe_span_avx2(acc, n, e, row, col0, y, z);
        return;
    }
#endif
    (void)use_avx2;
    qe_span_c(acc, n, e, row, col0, y, z);
}

#endif
