/* int8 GEMM micro-kernels for AVX-VNNI (the VEX-encoded vpdpbusd of recent client CPUs
 * without AVX-512; some AVX-512 CPUs have it too): qgemm_u8s8_6x16__avxvnni.
 *
 * The 256-bit counterpart of _qgemm_vnni.h: vpdpbusd adds 4 adjacent u8 x s8 products into
 * an s32 lane with no s16 step, so any 8-bit weights are exact (no 7-bit restriction, no
 * excess split, no K chunks). Same packed panels as every int8 tier (_qgemm.h: A panels of
 * 6 rows, B panels of 8 columns, K in groups of 4 bytes), and the same call and output as
 * qv_ukr_*_6x32, so the drivers treat the two VNNI tiers alike: one call is 6 rows x up to
 * 4 B panels, run as two 6 x 16 register tiles (12 ymm accumulators, 2 B vectors, the
 * broadcast A quad: 15 of the 16 ymm registers), panels (0, 1) then (2, 3).
 *   out: 4 blocks [q][6 rows][8 columns] of s32 sums (missing panels left unwritten).
 *   conv flavor: A = s8 weights (broadcast), B = u8 pixels     acc += B(u8) . A(s8)
 *   gemm flavor: A = u8 activations (broadcast), B = s8 weights acc += A(u8) . B(s8)
 *
 * QA_DPWSSD (s16 pairs into s32) serves the int8 depthwise sums (_qdw_sums.h).
 *
 * Intrinsics, so the body also compiles against SIMDe (EDGENN_SIMDE: the tests' emulated
 * build), where the VEX form is spelled as the AVX-512 VL one (the same operation).
 */
#ifndef EDGENN_QGEMM_AVXVNNI_H
#define EDGENN_QGEMM_AVXVNNI_H

#include <stdint.h>

#if defined(EDGENN_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define QA_TARGET
#define QA_DPBUSD(c, u, s) _mm256_dpbusd_epi32(c, u, s)
#define QA_DPWSSD(c, a, b) _mm256_dpwssd_epi32(c, a, b)
#define QA_HAVE 1
#elif defined(__x86_64__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>
#define QA_TARGET __attribute__((target("avx2,fma,avxvnni")))
#define QA_DPBUSD(c, u, s) _mm256_dpbusd_avx_epi32(c, u, s)
#define QA_DPWSSD(c, a, b) _mm256_dpwssd_avx_epi32(c, a, b)
#define QA_HAVE 1
#else
#define QA_HAVE 0
#endif

#if QA_HAVE
/* One 6 x 16 tile: panels p0, p1 (32 bytes a group each) against the A panel, ng groups,
 * into out's blocks q0 and q0 + 1. DP(c, v, s): c += v . s in the flavor's operand order. */
#define QA_TILE(DP)                                                                               \
    {                                                                                             \
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,         \
                c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;      \
        const uint8_t *ap = a;                                                                    \
        for (long g = 0; g < ng; g++, ap += 24) {                                                 \
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(p0 + g * 32));                \
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(p1 + g * 32));                \
            __m256i s;                                                                            \
            s = _mm256_set1_epi32(*(const int32_t *)(ap + 0));                                    \
            c00 = DP(c00, v0, s); c01 = DP(c01, v1, s);                                           \
            s = _mm256_set1_epi32(*(const int32_t *)(ap + 4));                                    \
            c10 = DP(c10, v0, s); c11 = DP(c11, v1, s);                                           \
            s = _mm256_set1_epi32(*(const int32_t *)(ap + 8));                                    \
            c20 = DP(c20, v0, s); c21 = DP(c21, v1, s);                                           \
            s = _mm256_set1_epi32(*(const int32_t *)(ap + 12));                                   \
            c30 = DP(c30, v0, s); c31 = DP(c31, v1, s);                                           \
            s = _mm256_set1_epi32(*(const int32_t *)(ap + 16));                                   \
            c40 = DP(c40, v0, s); c41 = DP(c41, v1, s);                                           \
            s = _mm256_set1_epi32(*(const int32_t *)(ap + 20));                                   \
            c50 = DP(c50, v0, s); c51 = DP(c51, v1, s);                                           \
        }                                                                                         \
        const __m256i c[6][2] = {{c00, c01}, {c10, c11}, {c20, c21},                              \
                                 {c30, c31}, {c40, c41}, {c50, c51}};                             \
        for (int r = 0; r < 6; r++) {                                                             \
            _mm256_storeu_si256((__m256i *)(out + (q0 * 6 + r) * 8), c[r][0]);                    \
            if (q0 + 1 < npan)                                                                    \
                _mm256_storeu_si256((__m256i *)(out + ((q0 + 1) * 6 + r) * 8), c[r][1]);          \
        }                                                                                         \
    }

/* 6 rows x npan (1-4) panels: the A panel `a` against B panels b + q * bps. */
#define QA_UKR(NAME, DP)                                                                          \
    QA_TARGET static void NAME(long ng, const uint8_t *a, const uint8_t *b, long bps, int npan,  \
                               int32_t *out) {                                                    \
        for (int q0 = 0; q0 < npan; q0 += 2) {                                                    \
            const uint8_t *p0 = b + q0 * bps, *p1 = q0 + 1 < npan ? p0 + bps : p0;                \
            QA_TILE(DP)                                                                           \
        }                                                                                         \
    }

/* conv: u8 pixels (v) x s8 weights (s); gemm: u8 activations (s) x s8 weights (v) */
#define QA_DP_CONV(c, v, s) QA_DPBUSD(c, v, s)
#define QA_DP_GEMM(c, v, s) QA_DPBUSD(c, s, v)
QA_UKR(qa_ukr_conv_6x32, QA_DP_CONV)
QA_UKR(qa_ukr_gemm_6x32, QA_DP_GEMM)
#ifndef QV_KEEP_MACROS   /* the emulated test build defines a deliberately broken twin */
#undef QA_UKR
#undef QA_TILE
#endif
#endif

#endif
