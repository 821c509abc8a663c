/* AVX2 + FMA rows of edgenn's packed sgemm (sgemm.h): sgemm_6x16__avx2.
 *
 * The tile: 6 x 16 in 12 YMM accumulators (broadcast A, 2 loads of B, 12 FMA per k) on
 * sgemm.h's 6-row A and 16-column B panels, with the epilogue applied on the register
 * tile before the store; every smaller corner (mr 1..6, 8 or 16 columns) is its own
 * instance so each keeps its accumulators in registers. Also here, the row's other entry
 * points: full-panel sweeps for the direct 1x1 path, row-major A packing, and the GEMVs
 * of a few-row product with a constant B. The AVX-512 row reuses the epilogue, the
 * packing and the GEMVs (sgemm_avx512.h).
 */
#ifndef EDGENN_SGEMM_AVX2_H
#define EDGENN_SGEMM_AVX2_H

#include "sgemm.h"

#if SG_X86
#define SG_AVX2 EDGENN_AVX2

#define sg_exp8 simd_exp8  /* _simd_math.h */

#define sg_erf8 simd_erf8  /* _simd_math.h */

SG_AVX2 static inline __m256 sg_act8(__m256 v, int act, float p0, float p1) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f);
    switch (act) {
    case EDGENN_ACT_RELU: return _mm256_max_ps(v, zero);
    case EDGENN_ACT_CLIP: return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(p0)), _mm256_set1_ps(p1));
    case EDGENN_ACT_HARDSWISH: {
        __m256 t = _mm256_fmadd_ps(v, _mm256_set1_ps(1.f / 6.f), _mm256_set1_ps(0.5f));
        return _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(t, zero), one));
    }
    case EDGENN_ACT_HARDSIGMOID: {
        __m256 t = _mm256_fmadd_ps(v, _mm256_set1_ps(p0), _mm256_set1_ps(p1));
        return _mm256_min_ps(_mm256_max_ps(t, zero), one);
    }
    case EDGENN_ACT_SIGMOID:
        return _mm256_div_ps(one, _mm256_add_ps(one, sg_exp8(_mm256_sub_ps(zero, v))));
    case EDGENN_ACT_SILU:
        return _mm256_div_ps(v, _mm256_add_ps(one, sg_exp8(_mm256_sub_ps(zero, v))));
    case EDGENN_ACT_LEAKYRELU: {
        __m256 neg = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(p0)), neg);
    }
    case EDGENN_ACT_GELU: {
        __m256 er = sg_erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
        return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(one, er));
    }
    default: return v;
    }
}

/* Finish one 8-column row of the tile and store it. */
SG_AVX2 static inline void sg_row_out8(__m256 v, float *cr, int accum, int last,
                                       const sg_epi *e, long m, long n0) {
    if (accum) v = _mm256_add_ps(v, _mm256_loadu_ps(cr));
    if (last) {
        if (e->bias_row) v = _mm256_add_ps(v, _mm256_broadcast_ss(e->bias_row + m));
        if (e->bias_col) v = _mm256_add_ps(v, _mm256_loadu_ps(e->bias_col + n0));
        if (e->z) v = _mm256_add_ps(v, _mm256_loadu_ps(e->z + m * e->ldz + n0));
        float p0;
        int act = sg_row_act(e, m, &p0);
        if (act) v = sg_act8(v, act, p0, e->p1);
    }
    _mm256_storeu_ps(cr, v);
}

/* Finish one row of the tile (two vectors, columns n0..n0+15) and store it. */
SG_AVX2 static inline void sg_row_out(__m256 lo, __m256 hi, float *cr, int accum, int last,
                                      const sg_epi *e, long m, long n0) {
    if (accum) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(cr));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(cr + 8));
    }
    if (last) {
        if (e->bias_row) {
            __m256 bv = _mm256_broadcast_ss(e->bias_row + m);
            lo = _mm256_add_ps(lo, bv);
            hi = _mm256_add_ps(hi, bv);
        }
        if (e->bias_col) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(e->bias_col + n0));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(e->bias_col + n0 + 8));
        }
        if (e->z) {
            const float *zr = e->z + m * e->ldz + n0;
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(zr));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(zr + 8));
        }
        float p0;
        int act = sg_row_act(e, m, &p0);
        if (act) {
            lo = sg_act8(lo, act, p0, e->p1);
            hi = sg_act8(hi, act, p0, e->p1);
        }
    }
    _mm256_storeu_ps(cr, lo);
    _mm256_storeu_ps(cr + 8, hi);
}

/* MRC x (8*NV) tile (MRC <= 6, NV in {1, 2}): a = packed A micro-panel (kc x MR),
 * b = packed B micro-panel (kc x NR); only the first 8*NV columns are read. Named
 * accumulators with constant guards, so each inlined instance keeps them in registers. */
SG_AVX2 static inline __attribute__((always_inline)) void sg_ukr_avx2_t(
        long kc, const float *a, const float *b, long ldb, float *c, long ldc, int mr, int nr,
        int accum, int last, const sg_epi *e, long m0, long n0, const int MRC, const int NV) {
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z;
    __m256 c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
#define SG_ROW(R, A0, A1)                                                   \
    if (MRC > R) {                                                          \
        __m256 av = _mm256_broadcast_ss(a + R);                             \
        A0 = _mm256_fmadd_ps(av, b0, A0);                                   \
        if (NV == 2) A1 = _mm256_fmadd_ps(av, b1, A1);                      \
    }
#define SG_STEP                                                             \
    {                                                                       \
        __m256 b0 = _mm256_loadu_ps(b), b1 = z;                             \
        if (NV == 2) b1 = _mm256_loadu_ps(b + 8);                           \
        SG_ROW(0, c00, c01) SG_ROW(1, c10, c11) SG_ROW(2, c20, c21)         \
        SG_ROW(3, c30, c31) SG_ROW(4, c40, c41) SG_ROW(5, c50, c51)         \
        a += SG_MR;                                                         \
        b += ldb;                                                           \
    }
    for (long k = 0; k < kc; k++) SG_STEP
#undef SG_STEP
#undef SG_ROW
    if (mr == MRC && nr == 8 * NV && last && !accum && e->act <= EDGENN_ACT_CLIP && !e->bias_col) {
        /* common 1x1-conv epilogue, all in registers: + bias_row (+ Z), clamp, store */
        const int clamp = e->act != EDGENN_ACT_NONE;
        const __m256 lo = _mm256_set1_ps(e->act == EDGENN_ACT_CLIP ? e->p0 : 0.f);
        const __m256 hi = _mm256_set1_ps(e->act == EDGENN_ACT_CLIP ? e->p1 : INFINITY);
        const float *br = e->bias_row ? e->bias_row + m0 : NULL;
        const float *zr = e->z ? e->z + m0 * e->ldz + n0 : NULL;
#define SG_FAST(R, A0, A1)                                                               \
        if (MRC > R) {                                                                   \
            float *cr = c + R * ldc;                                                     \
            if (br) {                                                                    \
                __m256 bv = _mm256_broadcast_ss(br + R);                                 \
                A0 = _mm256_add_ps(A0, bv);                                              \
                if (NV == 2) A1 = _mm256_add_ps(A1, bv);                                 \
            }                                                                            \
            if (zr) {                                                                    \
                A0 = _mm256_add_ps(A0, _mm256_loadu_ps(zr + R * e->ldz));                \
                if (NV == 2) A1 = _mm256_add_ps(A1, _mm256_loadu_ps(zr + R * e->ldz + 8)); \
            }                                                                            \
            if (clamp) {                                                                 \
                A0 = _mm256_min_ps(_mm256_max_ps(A0, lo), hi);                           \
                if (NV == 2) A1 = _mm256_min_ps(_mm256_max_ps(A1, lo), hi);              \
            }                                                                            \
            _mm256_storeu_ps(cr, A0);                                                    \
            if (NV == 2) _mm256_storeu_ps(cr + 8, A1);                                   \
        }
        SG_FAST(0, c00, c01) SG_FAST(1, c10, c11) SG_FAST(2, c20, c21)
        SG_FAST(3, c30, c31) SG_FAST(4, c40, c41) SG_FAST(5, c50, c51)
#undef SG_FAST
    } else if (mr == MRC && nr == 8 * NV) {
#define SG_OUT(R, A0, A1)                                                                \
        if (MRC > R) {                                                                   \
            if (NV == 2) sg_row_out(A0, A1, c + R * ldc, accum, last, e, m0 + R, n0);    \
            else sg_row_out8(A0, c + R * ldc, accum, last, e, m0 + R, n0);               \
        }
        SG_OUT(0, c00, c01) SG_OUT(1, c10, c11) SG_OUT(2, c20, c21)
        SG_OUT(3, c30, c31) SG_OUT(4, c40, c41) SG_OUT(5, c50, c51)
#undef SG_OUT
    } else {  /* ragged corner: spill, then the scalar store writes the mr x nr part */
        float buf[SG_MR * SG_NR];
#define SG_SPILL(R, A0, A1)                                                      \
        _mm256_storeu_ps(buf + R * SG_NR, A0);                                   \
        _mm256_storeu_ps(buf + R * SG_NR + 8, A1);
        SG_SPILL(0, c00, c01) SG_SPILL(1, c10, c11) SG_SPILL(2, c20, c21)
        SG_SPILL(3, c30, c31) SG_SPILL(4, c40, c41) SG_SPILL(5, c50, c51)
#undef SG_SPILL
        sg_store_scalar(buf, c, ldc, mr, nr, accum, last, e, m0, n0);
    }
}

#define SG_UKR(MRC, NV)                                                                   \
    SG_AVX2 static void sg_ukr_avx2_##MRC##x##NV(long kc, const float *a, const float *b,  \
            long ldb, float *c, long ldc, int mr, int nr, int accum, int last,             \
            const sg_epi *e, long m0, long n0) {                                          \
        sg_ukr_avx2_t(kc, a, b, ldb, c, ldc, mr, nr, accum, last, e, m0, n0, MRC, NV);     \
    }
/* Sweep: `np` consecutive full MRC x 16 tiles along N (B panels at b + j*16, C at c + j*16),
 * one call per A panel and B chunk instead of one per tile (direct 1x1 path). */
#define SG_SWEEP(MRC)                                                                     \
    SG_AVX2 static void sg_sweep_avx2_##MRC(long kc, const float *a, const float *b,      \
            long ldb, float *c, long ldc, long np, int accum, int last, const sg_epi *e,  \
            long m0, long n0) {                                                           \
        for (long j = 0; j < np; j++)                                                     \
            sg_ukr_avx2_t(kc, a, b + j * SG_NR, ldb, c + j * SG_NR, ldc, MRC, SG_NR,      \
                          accum, last, e, m0, n0 + j * SG_NR, MRC, 2);                    \
    }
SG_SWEEP(1) SG_SWEEP(2) SG_SWEEP(3) SG_SWEEP(4) SG_SWEEP(5) SG_SWEEP(6)
#undef SG_SWEEP
static const sg_sweep_t sg_sweep_avx2[SG_MR] = {sg_sweep_avx2_1, sg_sweep_avx2_2,
    sg_sweep_avx2_3, sg_sweep_avx2_4, sg_sweep_avx2_5, sg_sweep_avx2_6};

SG_UKR(1, 1) SG_UKR(2, 1) SG_UKR(3, 1) SG_UKR(4, 1) SG_UKR(5, 1) SG_UKR(6, 1)
SG_UKR(1, 2) SG_UKR(2, 2) SG_UKR(3, 2) SG_UKR(4, 2) SG_UKR(5, 2) SG_UKR(6, 2)
#undef SG_UKR

/* Dispatch on the tile actually needed: rows mr (1..6), 8 or 16 columns. */
static void sg_ukr_avx2(long kc, const float *a, const float *b, long ldb, float *c, long ldc,
                        int mr, int nr, int accum, int last, const sg_epi *e, long m0,
                        long n0) {
    typedef void (*fn_t)(long, const float *, const float *, long, float *, long, int, int,
                         int, int, const sg_epi *, long, long);
    static const fn_t table[2][SG_MR] = {
        {sg_ukr_avx2_1x1, sg_ukr_avx2_2x1, sg_ukr_avx2_3x1, sg_ukr_avx2_4x1, sg_ukr_avx2_5x1,
         sg_ukr_avx2_6x1},
        {sg_ukr_avx2_1x2, sg_ukr_avx2_2x2, sg_ukr_avx2_3x2, sg_ukr_avx2_4x2, sg_ukr_avx2_5x2,
         sg_ukr_avx2_6x2}};
    table[nr > 8][mr - 1](kc, a, b, ldb, c, ldc, mr, nr, accum, last, e, m0, n0);
}


/* sg_pack_a for a row-major A (cs == 1): per full 6-row panel, 8 columns at a time as
 * one 8 x 8 transpose (rows 6-7 zero) whose first 6 lanes of each row are the panel's 8
 * k-steps (a scalar loop reads a row-major A far below memory speed, a visible share of
 * a transformer's GEMMs). Each k-step's 8-float store runs 2 floats into the next
 * step, which overwrites them; a panel's last step is stored by 6 floats. */
SG_AVX2 static void sg_pack_a_rows_avx2(const float *src, long rs, long i0, long mc, long k0,
                                   long kc, float *dst) {
    for (long p = 0; p < mc; p += SG_MR) {
        const float *s = src + (i0 + p) * rs + k0;
        if (mc - p < SG_MR) {        /* ragged last panel */
            sg_pack_a(src, rs, 1, i0 + p, mc - p, k0, kc, dst);
            return;
        }
        long k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int i = 0; i < SG_MR; i++) r[i] = _mm256_loadu_ps(s + i * rs + k);
            r[6] = r[7] = _mm256_setzero_ps();
            simd_transpose8_ps(r);
            for (int j = 0; j < 7; j++) _mm256_storeu_ps(dst + j * SG_MR, r[j]);
            float last[8];
            _mm256_storeu_ps(last, r[7]);
            memcpy(dst + 7 * SG_MR, last, SG_MR * sizeof(float));
            dst += 8 * SG_MR;
        }
        for (; k < kc; k++, dst += SG_MR)
            for (int i = 0; i < SG_MR; i++) dst[i] = s[i * rs + k];
    }
}

#define SG_GEMV_KB 64    /* k per partial sum (sg_gemv_avx2_t) */
/* One row a (k-th value at a[k * acs]) times NP consecutive packed B panels (panel p at
 * bp + p * b_ps, full K) into C's columns n0 .. n0 + 16 NP (fewer at N's end: `left`):
 * 2 NP accumulators, so up to 8 independent FMA chains where the 6 x 16 tile with one
 * row has 2. K in blocks of SG_GEMV_KB, each block's sums added to a running total: a
 * float32 error bound of (KB + K / KB) eps instead of the tile's (384 + K / 384) eps;
 * one chain over all of K (or the tile's 384-blocks) leaves an ill-conditioned output (a
 * TFLite pose model's) farther from float64 than LiteRT does. For the one- or two-row
 * products of a batch-1 classifier. Epilogue as the tile's (sg_row_out). */
SG_AVX2 static inline __attribute__((always_inline)) void sg_gemv_avx2_t(
        long K, const float *a, long acs, const float *bp, long b_ps, float *c,
        const sg_epi *e, long m, long n0, long left, const int NP) {
    __m256 acc[8];
    float tot[8 * 8];
    const long kb = SG_GEMV_KB;
    for (long k0 = 0; k0 < K; k0 += kb) {   /* blocks of kb sums, then added to the total */
        const long k1 = K - k0 < kb ? K : k0 + kb;
        for (int i = 0; i < 2 * NP; i++) acc[i] = _mm256_setzero_ps();
        for (long k = k0; k < k1; k++) {
            const __m256 av = _mm256_broadcast_ss(a + k * acs);
            for (int p = 0; p < NP; p++) {
                const float *b = bp + p * b_ps + k * SG_NR;
                acc[2 * p] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b), acc[2 * p]);
                acc[2 * p + 1] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + 8), acc[2 * p + 1]);
            }
        }
        for (int i = 0; i < 2 * NP; i++)
            _mm256_storeu_ps(tot + 8 * i, k0 ? _mm256_add_ps(acc[i], _mm256_loadu_ps(tot + 8 * i))
                                             : acc[i]);
    }
    for (int i = 0; i < 2 * NP; i++) acc[i] = _mm256_loadu_ps(tot + 8 * i);
    for (int p = 0; p < NP; p++) {
        const long n = left - p * SG_NR;
        if (n >= SG_NR) {
            sg_row_out(acc[2 * p], acc[2 * p + 1], c + p * SG_NR, 0, 1, e, m, n0 + p * SG_NR);
        } else if (n > 0) {   /* N's ragged end: the panel's zero padding is not stored */
            float buf[SG_NR];
            _mm256_storeu_ps(buf, acc[2 * p]);
            _mm256_storeu_ps(buf + 8, acc[2 * p + 1]);
            sg_store_scalar(buf, c + p * SG_NR, 0, 1, (int)n, 0, 1, e, m, n0 + p * SG_NR);
        }
    }
}

#define SG_GEMV(NP)                                                                         \
    SG_AVX2 static void sg_gemv_avx2_##NP(long K, const float *a, long acs, const float *bp, \
            long b_ps, float *c, const sg_epi *e, long m, long n0, long left) {            \
        sg_gemv_avx2_t(K, a, acs, bp, b_ps, c, e, m, n0, left, NP);                         \
    }
SG_GEMV(1) SG_GEMV(2) SG_GEMV(3) SG_GEMV(4)
#undef SG_GEMV
static const sg_gemv_t sg_gemv_avx2[4] = {sg_gemv_avx2_1, sg_gemv_avx2_2, sg_gemv_avx2_3,
                                          sg_gemv_avx2_4};
#endif

#endif
