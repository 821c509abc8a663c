/* int8 GEMM micro-kernels for AVX-512 VNNI: qgemm_u8s8_6x32__avx512vnni.
 *
 * vpdpbusd multiplies 4 adjacent u8 x s8 pairs and adds them into an s32 lane, with no
 * s16 intermediate: exact for any 8-bit weights (no 7-bit restriction, no excess split,
 * no chunking of K). It reads the same packed panels as the AVX2 kernels (_qgemm.h: A
 * panels of 6 rows, B panels of 8 columns, K in groups of 4 bytes), so packing is shared
 * across the tiers and only the inner kernel changes (as in onnxruntime's MLAS).
 *
 * One call: 6 rows x 32 columns = the A panel `a` against 4 B panels (b + q * bps,
 * q < npan; missing panels re-read panel 0 and their sums are dropped). 12 zmm
 * accumulators, each (row r, panel pair): lanes 0-7 panel 2p, lanes 8-15 panel 2p + 1.
 * The conv kernels read their B block with each pair of panels interleaved per group
 * (64 bytes: one zmm load, qg_interleave's pairs layout; the panel-after-panel layout
 * would take two ymm loads and a vinserti64x4 per zmm); the gemm kernel reads the
 * constant weights' panels as packed.
 * out: 4 blocks [q][6 rows][8 columns] of s32 sums, the layout the 6 x 8 epilogue reads.
 *   conv flavor: A = s8 weights (broadcast), B = u8 pixels     acc += B(u8) . A(s8)
 *   gemm flavor: A = u8 activations (broadcast), B = s8 weights acc += A(u8) . B(s8)
 *
 * Written with intrinsics so that the same body compiles against SIMDe (EDGENN_SIMDE:
 * the tests' emulated build, on CPUs without VNNI) as well as natively.
 */
#ifndef EDGENN_QGEMM_VNNI_H
#define EDGENN_QGEMM_VNNI_H

#include <stdint.h>
#include "_epilogue.h"

#if defined(EDGENN_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define QV_TARGET
#define QV_HAVE 1
/* What SIMDe 0.8 leaves out and the int8 depthwise kernels use (_qdw_u8.h, the narrow
 * rows of _qdw_sums.h): byte-masked loads and stores that touch only k's bytes, as the
 * native ones do, and the truncating 32 -> 8-bit narrowing. */
#ifndef _mm_mask_storeu_epi8
static inline void edgenn_mask_storeu_epi8(void *mem, simde__mmask16 k, simde__m128i a) {
    uint8_t lanes[16];
    simde_mm_storeu_si128((simde__m128i *)lanes, a);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) ((uint8_t *)mem)[i] = lanes[i];
}
#define _mm_mask_storeu_epi8(mem, k, a) edgenn_mask_storeu_epi8(mem, k, a)
#endif
#ifndef _mm_maskz_loadu_epi8
static inline simde__m128i edgenn_maskz_loadu_epi8(simde__mmask16 k, const void *mem) {
    uint8_t lanes[16];
    for (int i = 0; i < 16; i++) lanes[i] = k >> i & 1 ? ((const uint8_t *)mem)[i] : 0;
    return simde_mm_loadu_si128((const simde__m128i *)lanes);
}
#define _mm_maskz_loadu_epi8(k, mem) edgenn_maskz_loadu_epi8(k, mem)
#endif
#ifndef _mm512_cvtepi32_epi8
static inline simde__m128i edgenn_cvtepi32_epi8(simde__m512i a) {
    int32_t v[16];
    uint8_t b[16];
    simde_mm512_storeu_si512(v, a);
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)v[i];
    return simde_mm_loadu_si128((const simde__m128i *)b);
}
#define _mm512_cvtepi32_epi8(a) edgenn_cvtepi32_epi8(a)
#endif
#elif defined(__x86_64__)
#include <immintrin.h>
#define QV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define QV_HAVE 1
#else
#define QV_HAVE 0
#endif

#define QV_MR 6
#define QV_PANELS 4
#define QVP_PX 7    /* the pixel tiles' (_qgemm_vnni_pix.h) pixels per tile */
/* the float path's activations the pixel tiles apply in registers (others per row) */
#define QVP_ACTS EDGENN_ACTS_CLAMP
#define QVP_CH 32   /* and channels per tile (two zmm): a block of the weights */
#include "_qgemm_vnni_tail.h"   /* (its constants and pattern builder on every target) */

#if QV_HAVE
/* two 8-column panels' group (32 bytes each) as one zmm */
#define QV_PAIR(p0, p1) \
    _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0))), \
                       _mm256_loadu_si256((const __m256i *)(p1)), 1)

/* The K loop of a 6 x 32 tile: declares the 12 accumulators c00 .. c51 (row r, panel
 * pair h: c<r><h>, lanes 0-7 panel 2h, 8-15 panel 2h + 1, i.e. columns 16h .. 16h + 15 in
 * order) and sums the ng groups of a against b's npan panels into them (panels bps bytes
 * apart, [ng][32 bytes] each: the gemm kernel's packed weights). */
#define QV_ACCUMULATE(DP)                                                                         \
        const uint8_t *b0 = b, *b1 = npan > 1 ? b + bps : b;                                      \
        const uint8_t *b2 = npan > 2 ? b + 2 * bps : b, *b3 = npan > 3 ? b + 3 * bps : b;         \
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,         \
                c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;      \
        for (long g = 0; g < ng; g++, a += 24) {                                                  \
            const long o = g * 32;                                                                \
            const __m512i v0 = QV_PAIR(b0 + o, b1 + o), v1 = QV_PAIR(b2 + o, b3 + o);             \
            __m512i s;                                                                            \
            s = _mm512_set1_epi32(*(const int32_t *)(a + 0));                                     \
            c00 = DP(c00, v0, s); c01 = DP(c01, v1, s);                                           \
            s = _mm512_set1_epi32(*(const int32_t *)(a + 4));                                     \
            c10 = DP(c10, v0, s); c11 = DP(c11, v1, s);                                           \
            s = _mm512_set1_epi32(*(const int32_t *)(a + 8));                                     \
            c20 = DP(c20, v0, s); c21 = DP(c21, v1, s);                                           \
            s = _mm512_set1_epi32(*(const int32_t *)(a + 12));                                    \
            c30 = DP(c30, v0, s); c31 = DP(c31, v1, s);                                           \
            s = _mm512_set1_epi32(*(const int32_t *)(a + 16));                                    \
            c40 = DP(c40, v0, s); c41 = DP(c41, v1, s);                                           \
            s = _mm512_set1_epi32(*(const int32_t *)(a + 20));                                    \
            c50 = DP(c50, v0, s); c51 = DP(c51, v1, s);                                           \
        }                                                                                         \
        const __m512i c[QV_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},                          \
                                     {c30, c31}, {c40, c41}, {c50, c51}};

#define QV_UKR(NAME, DP)                                                                          \
    QV_TARGET static void NAME(long ng, const uint8_t *a, const uint8_t *b, long bps, int npan,  \
                               int32_t *out) {                                                    \
        QV_ACCUMULATE(DP)                                                                         \
        for (int r = 0; r < QV_MR; r++)                                                           \
            for (int h = 0; h < 2; h++) {                                                         \
                _mm256_storeu_si256((__m256i *)(out + ((2 * h) * QV_MR + r) * 8),                 \
                                    _mm512_castsi512_si256(c[r][h]));                             \
                _mm256_storeu_si256((__m256i *)(out + ((2 * h + 1) * QV_MR + r) * 8),             \
                                    _mm512_extracti64x4_epi64(c[r][h], 1));                       \
            }                                                                                     \
    }

/* conv: u8 pixels (v) x s8 weights (s); gemm: u8 activations (s) x s8 weights (v) */
#define QV_DP_CONV(c, v, s) _mm512_dpbusd_epi32(c, v, s)
#define QV_DP_GEMM(c, v, s) _mm512_dpbusd_epi32(c, s, v)
QV_UKR(qv_ukr_gemm_6x32, QV_DP_GEMM)   /* B: the packed constant weights' panels */

/* The conv kernels, one set per tile shape: rows 6 / 4 / 2 x 32 / 16 pixels
 * (_qgemm_vnni_conv.h), picked per tile by qvc_index (a 2-row tail of 128 channels took
 * a full 6-row tile's products, a last tile of <= 16 pixels a 32-pixel one's). */
/* lane mask of the first n (<= 0: none, >= 16: all) of 16 */
static inline __mmask16 qv_lanes16(long n) {
    return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
}
#if defined(EDGENN_QEPI_H) && QE_X86
#include "_qgemm_vnni_epi.h"   /* the tiles' epilogues on one zmm */
#endif
#include "_qgemm_vnni_conv_shapes.h"

/* The nine shapes' functions of one family and kind, in qvc_index's order */
#define QVC_SHAPES(P, K) P##_6x2_##K, P##_6x1_##K, P##_4x2_##K, P##_4x1_##K, P##_2x2_##K, \
    P##_2x1_##K, P##_6x0_##K, P##_4x0_##K, P##_2x0_##K
/* the tile shape for mr rows and npan (1 .. 4) panels of 8 pixels: rows 6 / 4 / 2, then
 * 32 / 16 / 8 pixels (qvc_split: 3 panels run as 16 + 8) */
static inline int qvc_index(int mr, int npan) {
    const int rows = mr <= 2 ? 2 : mr <= 4 ? 1 : 0;
    return npan == 1 ? 6 + rows : 2 * rows + (npan <= 2 ? 1 : 0);
}
typedef void (*qvc_acc_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *);
static const qvc_acc_t qvc_acc[9] = {QVC_SHAPES(qvc, acc)};
#define qv_ukr_conv_6x32 qvc_6x2_acc   /* the full tile */

/* The implicit-GEMM twins (QVC_IMPLICIT, _qgemm_vnni_conv.h): B read from the image laid
 * out 4 channels per pixel, group offsets goff, no packed block. */
#define QVC_IMPLICIT 1
#define QVC_PREFIX qvci
#include "_qgemm_vnni_conv_shapes.h"
#undef QVC_PREFIX
#undef QVC_IMPLICIT
typedef void (*qvci_acc_t)(long, const uint8_t *, const uint8_t *, const long *, int, int32_t *);
static const qvci_acc_t qvci_acc[9] = {QVC_SHAPES(qvci, acc)};
#if defined(EDGENN_QEPI_H) && QE_X86   /* the native build (SIMDe lacks masked byte loads) */
typedef void (*qvc_u8_t)(long, const uint8_t *, const uint8_t *, long, int, int, long,
                         const qe_epi *, long, uint8_t *, long);
typedef void (*qvc_fz_t)(long, const uint8_t *, const uint8_t *, long, int, int, long,
                         const qe_epi *, long, uint8_t *, const uint8_t *, long);
static const qvc_u8_t qvc_u8[9] = {QVC_SHAPES(qvc, u8)};
static const qvc_fz_t qvc_fz[9] = {QVC_SHAPES(qvc, fz)};
typedef void (*qvci_u8_t)(long, const uint8_t *, const uint8_t *, const long *, int, int, long,
                          const qe_epi *, long, uint8_t *, long);
typedef void (*qvci_fz_t)(long, const uint8_t *, const uint8_t *, const long *, int, int, long,
                          const qe_epi *, long, uint8_t *, const uint8_t *, long);
static const qvci_u8_t qvci_u8[9] = {QVC_SHAPES(qvci, u8)};
static const qvci_fz_t qvci_fz[9] = {QVC_SHAPES(qvci, fz)};
#endif
#include "_qgemm_vnni_pix.h"   /* the 7-pixel x 32-channel tiles (qconv_u8s8_7x32) */
#undef QVC_SHAPES
#undef QV_UKR
#undef QV_ACCUMULATE
#undef QV_PAIR
#endif

#endif
