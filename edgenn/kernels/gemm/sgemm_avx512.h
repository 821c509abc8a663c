/* AVX-512F row of edgenn's packed sgemm (sgemm.h): sgemm_12x32__avx512f.
 *
 * The same packed panels as the AVX2 kernel (A: micro-panels of SG_MR = 6 rows, B: 16
 * columns, read in place for 1x1 convs), so packing is shared across the tiers: one call
 * covers two consecutive A panels (a0, a0 + a_ps) against two B panels, 12 x 32 in 24 zmm
 * accumulators: per k, 2 B loads and 12 broadcasts feed 24 FMAs, so the two FMA ports and
 * not the load ports bound it (a 12 x 16 tile needs 13 loads for 12 FMAs: load-bound),
 * and 24 independent chains hide the FMA latency.
 * The epilogue is the AVX2 kernel's (sg_row_out on the two halves of each row), so both
 * tiers give the same bits for the same sums; the sums themselves are FMA chains over k
 * in the same order on both tiers.
 */
#ifndef EDGENN_SGEMM_AVX512_H
#define EDGENN_SGEMM_AVX512_H

#include "sgemm_avx2.h"   /* the epilogue (sg_row_out), packing and GEMVs it shares */

#if SG_X86
#if EDGENN_EMULATED
#define SG_AVX512
#else
#define SG_AVX512 __attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl")))
#endif
#define SG_MR2 (2 * SG_MR)   /* rows per tile: two A panels */
#define SG_NR2 (2 * SG_NR)   /* columns per tile: two B panels */

/* Rows-mode epilogue: the tile holds mr pixels (rows, columns n0.. of C) x nr channels
 * (columns, rows m0.. of C); per 16 channels a transpose gives each channel's pixels as
 * one vector: + bias_row, + Z, clamp in registers, one masked store of mr floats per
 * channel; the other activations through a spill and the scalar epilogue. */
SG_AVX512 static inline __attribute__((always_inline)) void sg_rows_out_avx512(
        const __m512 acc[SG_MR2][2], float *c, long ldc, int mr, int nr, const sg_epi *e,
        long m0, long n0, const int NV) {
    const __mmask16 mask = (__mmask16)((1u << mr) - 1);
    const int fast = e->act <= EDGENN_ACT_CLIP && !e->bias_col;
    const __m512 lo = _mm512_set1_ps(e->act == EDGENN_ACT_CLIP ? e->p0 : 0.f);
    const __m512 hi = _mm512_set1_ps(e->act == EDGENN_ACT_CLIP ? e->p1 : INFINITY);
    float buf[SG_NR2 * SG_NR];
    for (int h = 0; h < NV; h++) {
        int nh = nr - SG_NR * h < SG_NR ? nr - SG_NR * h : SG_NR;
        if (nh <= 0) break;
        __m512 r[16];
        for (int i = 0; i < 16; i++) r[i] = i < SG_MR2 ? acc[i][h] : _mm512_setzero_ps();
        simd_transpose16_ps(r);   /* _simd.h */
        for (int j = 0; j < nh; j++) {
            const long m = m0 + SG_NR * h + j;
            __m512 v = r[j];
            if (!fast) {
                _mm512_storeu_ps(buf + (SG_NR * h + j) * SG_NR, v);
                continue;
            }
            if (e->bias_row) v = _mm512_add_ps(v, _mm512_set1_ps(e->bias_row[m]));
            if (e->z) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e->z + m * e->ldz + n0));
            if (e->act != EDGENN_ACT_NONE) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            _mm512_mask_storeu_ps(c + (SG_NR * h + j) * ldc, mask, v);
        }
    }
    if (!fast) sg_store_scalar(buf, c, ldc, nr, mr, 0, 1, e, m0, n0);
}

/* MRC x (16 * NV) tile, MRC <= 12, NV in {1, 2}: rows 0-5 from A panel a0, 6-11 from a1 =
 * a0 + a_ps, A's k-th values lda floats after the (k-1)-th (SG_MR in a packed panel);
 * columns 0-15 from B panel b0 (row stride ldb0), 16-31 from b1 (ldb1). Named
 * accumulators with constant guards, so each instance keeps them in registers.
 * ROWS (sg_gemm_rows_avx512): the tile is C transposed, its rows C's columns. */
SG_AVX512 static inline __attribute__((always_inline)) void sg_ukr_avx512_t(
        long kc, const float *a0, long lda, long a_ps, const float *b0, long ldb0,
        const float *b1, long ldb1, float *c, long ldc, int mr, int nr, int accum, int last,
        const sg_epi *e, long m0, long n0, const int MRC, const int NV, const int ROWS,
        const int PFA, const float *pf0, const float *pf1) {   /* PFA: 1 A, 2 B prefetch */
    const float *a1 = a0 + a_ps;
    const __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    __m512 c40 = z, c41 = z, c50 = z, c51 = z, c60 = z, c61 = z, c70 = z, c71 = z;
    __m512 c80 = z, c81 = z, c90 = z, c91 = z, ca0 = z, ca1 = z, cb0 = z, cb1 = z;
#define SG_R(R, A, OFF, C0, C1)                                                  \
    if (MRC > R) {                                                              \
        const __m512 av = _mm512_set1_ps(A[OFF]);                               \
        C0 = _mm512_fmadd_ps(av, v0, C0);                                       \
        if (NV == 2) C1 = _mm512_fmadd_ps(av, v1, C1);                          \
    }
    for (long k = 0; k < kc; k++, a0 += lda, a1 += lda, b0 += ldb0, b1 += ldb1) {
        if (ROWS && pf0) {   /* the next panel pair into L2, one 64-byte row of each per k */
            _mm_prefetch((const char *)(pf0 + k * SG_NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf1 + k * SG_NR), _MM_HINT_T1);
        } else if (PFA == 1 && !(k & 1)) {   /* the next A panel pair: 48 bytes per 2 k */
            _mm_prefetch((const char *)(pf0 + k * SG_MR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf1 + k * SG_MR), _MM_HINT_T1);
        } else if (PFA == 2) {   /* the next B panel pair: one 64-byte row of each per k */
            _mm_prefetch((const char *)(pf0 + k * SG_NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf1 + k * SG_NR), _MM_HINT_T1);
        }
        const __m512 v0 = _mm512_loadu_ps(b0);
        const __m512 v1 = NV == 2 ? _mm512_loadu_ps(b1) : z;
        SG_R(0, a0, 0, c00, c01) SG_R(1, a0, 1, c10, c11) SG_R(2, a0, 2, c20, c21)
        SG_R(3, a0, 3, c30, c31) SG_R(4, a0, 4, c40, c41) SG_R(5, a0, 5, c50, c51)
        SG_R(6, a1, 0, c60, c61) SG_R(7, a1, 1, c70, c71) SG_R(8, a1, 2, c80, c81)
        SG_R(9, a1, 3, c90, c91) SG_R(10, a1, 4, ca0, ca1) SG_R(11, a1, 5, cb0, cb1)
    }
#undef SG_R
    const __m512 acc[SG_MR2][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                                   {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71},
                                   {c80, c81}, {c90, c91}, {ca0, ca1}, {cb0, cb1}};
    if (ROWS) {
        sg_rows_out_avx512(acc, c, ldc, mr, nr, e, m0, n0, NV);
        return;
    }
    if (mr == MRC && nr == SG_NR * NV && last && !accum && e->act <= EDGENN_ACT_CLIP && !e->bias_col) {
        /* the common 1x1-conv epilogue in registers: + bias_row (+ Z), clamp, store */
        const int clamp = e->act != EDGENN_ACT_NONE;
        const __m512 lo = _mm512_set1_ps(e->act == EDGENN_ACT_CLIP ? e->p0 : 0.f);
        const __m512 hi = _mm512_set1_ps(e->act == EDGENN_ACT_CLIP ? e->p1 : INFINITY);
        for (int r = 0; r < MRC; r++)
            for (int h = 0; h < NV; h++) {
                __m512 v = acc[r][h];
                if (e->bias_row) v = _mm512_add_ps(v, _mm512_set1_ps(e->bias_row[m0 + r]));
                if (e->z) v = _mm512_add_ps(v, _mm512_loadu_ps(e->z + (m0 + r) * e->ldz + n0 + 16 * h));
                if (clamp) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
                _mm512_storeu_ps(c + r * ldc + 16 * h, v);
            }
        return;
    }
    for (int h = 0; h < NV; h++) {   /* per 16-column half: the AVX2 tier's epilogue */
        int nh = nr - SG_NR * h < SG_NR ? nr - SG_NR * h : SG_NR;
        if (nh <= 0) break;
        if (nh == SG_NR) {
            for (int r = 0; r < mr; r++)
                sg_row_out(_mm512_castps512_ps256(acc[r][h]),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][h]), 1)),
                           c + r * ldc + SG_NR * h, accum, last, e, m0 + r, n0 + SG_NR * h);
        } else {   /* ragged corner: spill, then the scalar store writes the mr x nh part */
            float buf[SG_MR2 * SG_NR];
            for (int r = 0; r < MRC; r++) _mm512_storeu_ps(buf + r * SG_NR, acc[r][h]);
            sg_store_scalar(buf, c + SG_NR * h, ldc, mr, nh, accum, last, e, m0, n0 + SG_NR * h);
        }
    }
}

#define SG_UKR512(MRC, NV)                                                                  \
    SG_AVX512 static void sg_ukr_avx512_##MRC##x##NV(long kc, const float *a0, long a_ps,    \
            const float *b0, long ldb0, const float *b1, long ldb1, float *c, long ldc,      \
            int mr, int nr, int accum, int last, const sg_epi *e, long m0, long n0) {        \
        sg_ukr_avx512_t(kc, a0, SG_MR, a_ps, b0, ldb0, b1, ldb1, c, ldc, mr, nr, accum,      \
                        last, e, m0, n0, MRC, NV, 0, 0, NULL, NULL);                         \
    }                                                                                        \
    SG_AVX512 static void sg_ukr_avx512_pf_##MRC##x##NV(long kc, const float *a0, long a_ps, \
            const float *b0, long ldb0, const float *b1, long ldb1, float *c, long ldc,      \
            int mr, int nr, int accum, int last, const sg_epi *e, long m0, long n0,          \
            const float *pf) {                                                               \
        sg_ukr_avx512_t(kc, a0, SG_MR, a_ps, b0, ldb0, b1, ldb1, c, ldc, mr, nr, accum,      \
                        last, e, m0, n0, MRC, NV, 0, 1, pf, pf + a_ps);                      \
    }                                                                                        \
    SG_AVX512 static void sg_rows_avx512_##MRC##x##NV(long kc, const float *a0, long lda,    \
            const float *b0, const float *b1, float *c, long ldc, int mr, int nr,            \
            const sg_epi *e, long m0, long n0, const float *pf0, const float *pf1) {         \
        sg_ukr_avx512_t(kc, a0, lda, SG_MR, b0, SG_NR, b1, SG_NR, c, ldc, mr, nr, 0, 1, e,   \
                        m0, n0, MRC, NV, 1, 0, pf0, pf1);                                    \
    }
/* The full 12 x 32 tile prefetching the next B panel pair (pf0, pf1: its kc-row slices)
 * into L2: the first A tile of each 32-column step calls it (sg_gemm_cols). */
SG_AVX512 static void sg_ukr_avx512_pfb_12x2(long kc, const float *a0, long a_ps,
        const float *b0, long ldb0, const float *b1, long ldb1, float *c, long ldc, int mr,
        int nr, int accum, int last, const sg_epi *e, long m0, long n0, const float *pf0,
        const float *pf1) {
    sg_ukr_avx512_t(kc, a0, SG_MR, a_ps, b0, ldb0, b1, ldb1, c, ldc, mr, nr, accum, last, e,
                    m0, n0, SG_MR2, 2, 0, 2, pf0, pf1);
}
#define SG_UKR512_ROWS(NV) SG_UKR512(1, NV) SG_UKR512(2, NV) SG_UKR512(3, NV) SG_UKR512(4, NV) \
    SG_UKR512(5, NV) SG_UKR512(6, NV) SG_UKR512(7, NV) SG_UKR512(8, NV) SG_UKR512(9, NV)      \
    SG_UKR512(10, NV) SG_UKR512(11, NV) SG_UKR512(12, NV)
SG_UKR512_ROWS(1)
SG_UKR512_ROWS(2)
#undef SG_UKR512_ROWS
#undef SG_UKR512

typedef void (*sg_ukr512_t)(long, const float *, long, const float *, long, const float *,
                            long, float *, long, int, int, int, int, const sg_epi *, long, long);
typedef void (*sg_ukr512_pf_t)(long, const float *, long, const float *, long, const float *,
                               long, float *, long, int, int, int, int, const sg_epi *, long,
                               long, const float *);
typedef void (*sg_rows512_t)(long, const float *, long, const float *, const float *, float *,
                             long, int, int, const sg_epi *, long, long, const float *,
                             const float *);
#define SG_T(P, NV) {P##1x##NV, P##2x##NV, P##3x##NV, P##4x##NV, P##5x##NV, P##6x##NV,         \
    P##7x##NV, P##8x##NV, P##9x##NV, P##10x##NV, P##11x##NV, P##12x##NV}
static const sg_ukr512_t sg_ukr_avx512[2][SG_MR2] = {SG_T(sg_ukr_avx512_, 1),
                                                     SG_T(sg_ukr_avx512_, 2)};
/* the same kernels prefetching the next A panel pair (separate instances, so the others'
 * K loops carry no test) */
static const sg_ukr512_pf_t sg_ukr_avx512_pf[2][SG_MR2] = {SG_T(sg_ukr_avx512_pf_, 1),
                                                           SG_T(sg_ukr_avx512_pf_, 2)};
static const sg_rows512_t sg_rows_avx512[2][SG_MR2] = {SG_T(sg_rows_avx512_, 1),
                                                       SG_T(sg_rows_avx512_, 2)};
#undef SG_T

/* One 12 x 32 tile (or its corner: mr rows, nr columns) through the table; pf: the next
 * A panel pair (a_ps apart) prefetched into L2 during its K loop, or NULL. */
static inline void sg_tile_avx512(long kc, const float *a0, long a_ps, const float *b0,
                                  long ldb0, const float *b1, long ldb1, float *c, long ldc,
                                  int mr, int nr, int accum, int last, const sg_epi *e,
                                  long m0, long n0, const float *pf) {
    if (pf)
        sg_ukr_avx512_pf[nr > SG_NR][mr - 1](kc, a0, a_ps, b0, ldb0, b1, ldb1, c, ldc, mr, nr,
                                             accum, last, e, m0, n0, pf);
    else
        sg_ukr_avx512[nr > SG_NR][mr - 1](kc, a0, a_ps, b0, ldb0, b1, ldb1, c, ldc, mr, nr,
                                          accum, last, e, m0, n0);
}
/* Rows mode, for small outputs (the 7x7 and 14x14 1x1 convs): C (M, N) = act(W (M, K) @
 * B (K, N) + epilogue) computed as C^T = B^T W^T, so that N, which is small and rarely a
 * multiple of 32 (49 pixels fill 49 / 64 of 16-wide column vectors), is the broadcast
 * side, and M (channels, a multiple of 16 in most nets) the vector side. B is read in
 * place: pixel n of row k at B[k * ldb + n] (12 pixels of one row per k: A panels with k
 * stride ldb); wt = W^T packed as 16-column B panels (sg_pack_b of W^T, K x M). Channels
 * [m_lo, m_hi) (m_lo a multiple of 16: threads split the channels); per 32 channels, the
 * pixels in ceil(N / 12) balanced tiles of <= 12, so no tile is a short one. Full K per
 * tile (no K blocks: the 32-channel panel pair, K * 128 B, is reused from L1 / L2).
 * AVX2 has no rows mode: a 6 x 16 one (6 pixels broadcast, 16 channels), with or without
 * K blocks, is no faster than the column mode on 7x7 / 14x14 convs: half the AVX-512
 * tile reads each weight panel twice as often. */
static inline void sg_gemm_rows_krange_avx512(long N, long K, long k0, long k1,
                                              const float *wt, const float *B, long ldb,
                                              float *C, long ldc, const sg_epi *e, long m_lo,
                                              long m_hi) {
    const long tiles = (N + SG_MR2 - 1) / SG_MR2, kc = k1 - k0, ps = K * SG_NR;
    wt += k0 * SG_NR;                   /* rows k0.. of every panel, panels ps apart */
    B += k0 * ldb;
    for (long m = m_lo; m < m_hi; m += SG_NR2) {
        const int nr = m_hi - m < SG_NR2 ? (int)(m_hi - m) : SG_NR2;
        const float *b0 = wt + (m / SG_NR) * ps;
        const float *b1 = nr > SG_NR ? b0 + ps : b0;
        /* the first pixel tile prefetches the next 32 channels' panels (weights come from
         * memory in a whole model's run, not from the caches as in a layer run alone) */
        const long mn = m + SG_NR2 < m_hi ? m + SG_NR2 : -1;
        const float *pf0 = mn < 0 ? NULL : wt + (mn / SG_NR) * ps;
        const float *pf1 = mn < 0 ? NULL : mn + SG_NR < m_hi ? pf0 + ps : pf0;
        for (long t = 0; t < tiles; t++) {
            const long n0 = t * N / tiles, n1 = (t + 1) * N / tiles;
            const int mr = (int)(n1 - n0);
            sg_rows_avx512[nr > SG_NR][mr - 1](kc, B + n0, ldb, b0, b1, C + m * ldc + n0, ldc,
                                                mr, nr, e, m, n0, t ? NULL : pf0,
                                                t ? NULL : pf1);
        }
    }
}

/* out[i] = act(P[i] + P[ps + i] + ... + P[(parts-1) * ps + i]), i < n: the partial
 * products of threads that split K, summed in part order; act EDGENN_ACT_NONE, EDGENN_ACT_RELU or EDGENN_ACT_CLIP
 * (p0, p1), the constant first as in the epilogue (a NaN sum stays NaN). */
SG_AVX512 static void sg_sum_parts_avx512(const float *P, long ps, int parts, float *out,
                                          long n, int act, float p0, float p1) {
    const __m512 lo = _mm512_set1_ps(act == EDGENN_ACT_CLIP ? p0 : 0.0f), hi = _mm512_set1_ps(p1);
    for (long i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 s = _mm512_maskz_loadu_ps(k, P + i);
        for (int t = 1; t < parts; t++)
            s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(k, P + t * ps + i));
        if (act == EDGENN_ACT_RELU || act == EDGENN_ACT_CLIP)
            s = _mm512_max_ps(lo, s);
        if (act == EDGENN_ACT_CLIP)
            s = _mm512_min_ps(hi, s);
        _mm512_mask_storeu_ps(out + i, k, s);
    }
}
#endif

#endif
