/* edgenn packed int8 GEMM (u8 x s8 -> s32) with the fused requantization epilogue
 * (_qepi.h), for QConv (group-1 and grouped 2-D conv, implicit im2col) and QGemm.
 *
 *   C (M, N) row-major, C[i, j] = epilogue(sum_k A[i, k] B[k, j])
 *
 * QConv: A = weights (M, K = C*KH*KW), s8, packed once; B = im2col of the u8 image
 *        (K, N = OH*OW), packed per block of pixels straight from the NCHW image.
 * QGemm: A = activations (rows, K), u8, packed per call; B = weights (K, N), s8, packed once.
 *
 * Packed layouts (BLIS-like micro-panels, K in groups of kg consecutive k):
 *   A panels of QG_MR = 6 rows:    [panel][group][6 rows][kg]     (24 bytes per group)
 *   B panels of QG_NR = 8 columns: [panel][group][8 cols][kg]     (32 bytes per group)
 * Rows / columns / k past the matrix are zero in the constant operand; the per-call
 * operand's padding holds anything finite (its products with zero weights vanish).
 *
 * Two arithmetics, chosen per layer at plan time:
 * - "u8" (kg = 4 bytes): vpmaddubsw multiplies u8 x s8 and adds adjacent pairs into s16,
 *   saturating. Exact when no weight pair (w_2j, w_2j+1) of the layer has the same sign
 *   and |w_2j + w_2j+1| > 128 (the 7-bit weights of our quantizer never do); checked at
 *   prepare. The s16 pair sums t are accumulated without vpmaddwd (which on some cores
 *   shares a single integer-multiply pipe with vpmaddubsw) by two wrapping s16 sums,
 *       W = sum t  (mod 2^16),   V = 128 + sum (t >> 8)
 *   over at most 255 groups, turned into the exact s32 sums once per tile (QG_FINISH).
 *   6 x 8 tile, inline asm (the compiler spilled the 12 accumulators). Where one pipe
 *   does the multiplies, this beats vpmaddubsw + vpmaddwd(ones) + vpaddd, the MLAS /
 *   XNNPACK AVX2 scheme (two multiply-pipe ops where this has one), and the fp32 FMA peak.
 *   Small K (QConv K <= 48): the finish and epilogue per tile dominate, so a 6 x 16 tile
 *   with the vpmaddwd(ones) widening and no finish is used instead.
 * - "u8 + excess": 8-bit weights (onnxruntime's quantizers without reduce_range) are split
 *   W = Wm + Wx, Wm with no saturating pair (the u8 path above), Wx the excess of the
 *   saturating pairs, rare in real models (one element per pair, |x| <= 127, so
 *   vpmaddubsw on it is exact too). Wx is kept per constant panel as a list of the K
 *   groups where it is non-zero (qg_excess: few groups) and added to each tile's
 *   sums before the epilogue (qg_excess_add): u8-path speed, exact.
 * - "wide" (kg = 2 int16): operands widened to s16, vpmaddwd into s32: exact for any
 *   8-bit weights, at best the fp32 kernels' rate; for layers whose excess is not sparse.
 *
 * The zero point of the activations is folded into the epilogue's per-channel constant:
 * sum_k (x_k - z) w_k = sum_k x_k w_k - z sum_k w_k; conv padding reads z (contributes 0).
 *
 * SIMD: the AVX2 micro-kernels carry __attribute__((target)); a plan runs one row of the
 * table (qgemm_table.h), which the Python side picks among the rows this CPU runs. The
 * portable row (plain C) computes the same sums from the same packed panels.
 */
#ifndef EDGENN_QGEMM_H
#define EDGENN_QGEMM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_bytes.h"
#include "_qepi.h"
#include "_qgemm_vnni.h"
#include "_qgemm_avxvnni.h"
#if QA_HAVE
#define QG_QA_CONV qa_ukr_conv_6x32
#define QG_QA_GEMM qa_ukr_gemm_6x32
#else      /* a compiler without AVX-VNNI: never chosen (_qgemm.pyx HAVE_AVXVNNI is 0) */
#define QG_QA_CONV qv_ukr_conv_6x32
#define QG_QA_GEMM qv_ukr_gemm_6x32
#endif

#if QE_X86
#include <emmintrin.h>
#endif

#define QG_MR 6
#define QG_NR 8
#define QG_CHUNK 255                   /* groups per s16 accumulation chunk (u8 path) */
#define QG_SMALL_K_GROUPS 12           /* QConv K <= 48: the 6 x 16 small-K kernel */
#define QG_ABYTES (QG_MR * 4)          /* bytes per group of an A panel (both paths) */
#define QG_BBYTES (QG_NR * 4)          /* bytes per group of a B panel (both paths) */

enum { QG_CONV = 0, QG_GEMM = 1 };     /* which operand is signed: A (conv) or B (gemm) */


/* ---------------------------------------------------------------- portable micro-kernels */

/* acc (6 x 8, row-major) = A panel (ng groups) x B panel (ng groups). */
static void qg_ukr_u8_c(long ng, const uint8_t *a, const uint8_t *b, int32_t *acc, int flavor) {
    memset(acc, 0, QG_MR * QG_NR * sizeof(int32_t));
    for (long g = 0; g < ng; g++, a += QG_ABYTES, b += QG_BBYTES) {
        for (int r = 0; r < QG_MR; r++) {
            for (int j = 0; j < QG_NR; j++) {
                int32_t s = 0;
                for (int q = 0; q < 4; q++) {
                    int32_t av = flavor == QG_CONV ? (int32_t)(int8_t)a[r * 4 + q] : a[r * 4 + q];
                    int32_t bv = flavor == QG_CONV ? b[j * 4 + q] : (int32_t)(int8_t)b[j * 4 + q];
                    s += av * bv;
                }
                acc[r * QG_NR + j] += s;
            }
        }
    }
}

static void qg_ukr_wide_c(long ng, const uint8_t *a8, const uint8_t *b8, int32_t *acc) {
    const int16_t *a = (const int16_t *)a8, *b = (const int16_t *)b8;
    memset(acc, 0, QG_MR * QG_NR * sizeof(int32_t));
    for (long g = 0; g < ng; g++, a += QG_MR * 2, b += QG_NR * 2)
        for (int r = 0; r < QG_MR; r++)
            for (int j = 0; j < QG_NR; j++)
                acc[r * QG_NR + j] += (int32_t)a[r * 2] * b[j * 2]
                                      + (int32_t)a[r * 2 + 1] * b[j * 2 + 1];
}

/* ---------------------------------------------------------------- AVX2 micro-kernels */
#if QE_X86

/* The u8-path kernels keep, per output vector, two wrapping s16 sums of the vpmaddubsw
 * pair sums t (ymm 2i, 2i+1): W = sum t (from 0) and V = 128 + sum (t >> 8). With
 * F = sum (t >> 8) and E = sum (t & 255) in [0, 255 n] (n <= 255 steps):
 *   W - 256 V = E - 32768 (mod 2^16), exactly E - 32768 as a signed s16,
 *   madd(V, 256) + madd(W - 256 V, 1) = 256 F + 65536 + E - 65536 = sum t
 * over the two s16 lanes of each output. QG_FINISH leaves that exact s32 sum in W.
 * Needs ymm13 = 256 and ymm14 = 1 in every s16; ymm12 is scratch. */
#define QG_FINISH(W, V)                                                                            \
    "vpsllw $8, %%ymm" #V ", %%ymm12\n\t"                                           \
    "vpsubw %%ymm12, %%ymm" #W ", %%ymm" #W "\n\t"                                  \
    "vpmaddwd %%ymm13, %%ymm" #V ", %%ymm" #V "\n\t"                                \
    "vpmaddwd %%ymm14, %%ymm" #W ", %%ymm" #W "\n\t"                                \
    "vpaddd %%ymm" #V ", %%ymm" #W ", %%ymm" #W "\n\t"
#define QG_FINISH_CONSTS                                                                           \
    "vpbroadcastd %[k256], %%ymm13\n\t vpbroadcastd %[k1], %%ymm14\n\t"
#define QG_V0 "vpbroadcastd %[k128], %%ymm12\n\t"      /* V's starting value */

/* One group step of one accumulator pair: t = maddubs(U, S); W += t; V += t >> 8.
 * ymm12 = B vector, ymm13 = broadcast A quad, ymm14 = t. */
#define QG_ZERO12                                                                                  \
    "vpxor %%xmm0, %%xmm0, %%xmm0\n\t vpxor %%xmm1, %%xmm1, %%xmm1\n\t"             \
    "vpxor %%xmm2, %%xmm2, %%xmm2\n\t vpxor %%xmm3, %%xmm3, %%xmm3\n\t"             \
    "vpxor %%xmm4, %%xmm4, %%xmm4\n\t vpxor %%xmm5, %%xmm5, %%xmm5\n\t"             \
    "vpxor %%xmm6, %%xmm6, %%xmm6\n\t vpxor %%xmm7, %%xmm7, %%xmm7\n\t"             \
    "vpxor %%xmm8, %%xmm8, %%xmm8\n\t vpxor %%xmm9, %%xmm9, %%xmm9\n\t"             \
    "vpxor %%xmm10, %%xmm10, %%xmm10\n\t vpxor %%xmm11, %%xmm11, %%xmm11\n\t"
/* W = 0 (even registers), V = 128 (odd registers) for 2 * nv accumulators */
#define QG_INIT12                                                                                  \
    QG_V0                                                                                          \
    "vpxor %%xmm0, %%xmm0, %%xmm0\n\t vmovdqa %%ymm12, %%ymm1\n\t"                   \
    "vpxor %%xmm2, %%xmm2, %%xmm2\n\t vmovdqa %%ymm12, %%ymm3\n\t"                   \
    "vpxor %%xmm4, %%xmm4, %%xmm4\n\t vmovdqa %%ymm12, %%ymm5\n\t"                   \
    "vpxor %%xmm6, %%xmm6, %%xmm6\n\t vmovdqa %%ymm12, %%ymm7\n\t"                   \
    "vpxor %%xmm8, %%xmm8, %%xmm8\n\t vmovdqa %%ymm12, %%ymm9\n\t"                   \
    "vpxor %%xmm10, %%xmm10, %%xmm10\n\t vmovdqa %%ymm12, %%ymm11\n\t"
#define QG_ACC(W, V)                                                                               \
    "vpaddw %%ymm14, %%ymm" #W ", %%ymm" #W "\n\t"                                  \
    "vpsraw $8, %%ymm14, %%ymm14\n\t"                                               \
    "vpaddw %%ymm14, %%ymm" #V ", %%ymm" #V "\n\t"
/* conv: A = s8 weights (broadcast, ymm13), B = u8 pixels (ymm12) */
#define QG_ROW_CONV(R, W, V)                                                                       \
    "vpbroadcastd " #R "*4(%[a]), %%ymm13\n\t"                                      \
    "vpmaddubsw %%ymm13, %%ymm12, %%ymm14\n\t" QG_ACC(W, V)
/* gemm: A = u8 activations (broadcast, ymm13), B = s8 weights (ymm12) */
#define QG_ROW_GEMM(R, W, V)                                                                       \
    "vpbroadcastd " #R "*4(%[a]), %%ymm13\n\t"                                      \
    "vpmaddubsw %%ymm12, %%ymm13, %%ymm14\n\t" QG_ACC(W, V)

static const int32_t qg_k256 = 0x01000100, qg_k1 = 0x00010001, qg_k128 = 0x00800080;

/* 6 x 8 tile: out (6 rows of 8 s32) = A panel x B panel over ng groups. The tile is
 * finished in registers and stored once; K past 255 groups (1020) goes in chunks, the
 * later ones added to the first. */
#define QG_UKR6(NAME, ROW)                                                                         \
    QE_AVX2 static void NAME(long ng, const uint8_t *a, const uint8_t *b, int32_t *out) {          \
        __m256i part[QG_MR];                                                                       \
        int32_t *dst = out;                                                                        \
        if (ng <= 0) memset(out, 0, QG_MR * QG_NR * sizeof(int32_t));                              \
        while (ng > 0) {                                                                           \
            long n = ng < QG_CHUNK ? ng : QG_CHUNK;                                                \
            ng -= n;                                                                               \
            __asm__ volatile(                                                                      \
                QG_INIT12                                                                          \
                "1:\n\t"                                                                 \
                "vmovdqu (%[b]), %%ymm12\n\t"                                            \
                ROW(0, 0, 1) ROW(1, 2, 3) ROW(2, 4, 5) ROW(3, 6, 7) ROW(4, 8, 9)                   \
                ROW(5, 10, 11)                                                                     \
                "add $24, %[a]\n\t add $32, %[b]\n\t dec %[n]\n\t jnz 1b\n\t"            \
                QG_FINISH_CONSTS                                                                   \
                QG_FINISH(0, 1) QG_FINISH(2, 3) QG_FINISH(4, 5) QG_FINISH(6, 7)                    \
                QG_FINISH(8, 9) QG_FINISH(10, 11)                                                  \
                "vmovdqu %%ymm0, 0(%[r])\n\t vmovdqu %%ymm2, 32(%[r])\n\t"               \
                "vmovdqu %%ymm4, 64(%[r])\n\t vmovdqu %%ymm6, 96(%[r])\n\t"              \
                "vmovdqu %%ymm8, 128(%[r])\n\t vmovdqu %%ymm10, 160(%[r])\n\t"           \
                : [a] "+r"(a), [b] "+r"(b), [n] "+r"(n)                                            \
                : [r] "r"(dst), [k256] "m"(qg_k256), [k1] "m"(qg_k1), [k128] "m"(qg_k128)          \
                : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",                  \
                  "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",    \
                  "xmm14");                                                              \
            if (dst != out)                                                                        \
                for (int i = 0; i < QG_MR; i++) {                                                  \
                    __m256i *o = (__m256i *)(out + 8 * i);                                         \
                    _mm256_storeu_si256(o, _mm256_add_epi32(_mm256_loadu_si256(o), part[i]));      \
                }                                                                                  \
            dst = (int32_t *)part;                                                                 \
        }                                                                                          \
    }
QG_UKR6(qg_ukr_u8_conv_avx2, QG_ROW_CONV)
QG_UKR6(qg_ukr_u8_gemm_avx2, QG_ROW_GEMM)

/* QGemm, one row x 32 columns (four B panels at b + i * bps): the rows that do not fill
 * a 6-row panel (M = 1 is the common classifier case). a: that row in its A panel
 * (group stride 24 bytes). out: 32 sums. */
QE_AVX2 static void qg_ukr_u8_gemm_1x4_avx2(long ng, const uint8_t *a, const uint8_t *b,
                                            long bps, int32_t *out) {
    __m256i part[4];
    int32_t *dst = out;
    if (ng <= 0) memset(out, 0, 4 * QG_NR * sizeof(int32_t));
    const uint8_t *b2 = b + 2 * bps;
    while (ng > 0) {
        long n = ng < QG_CHUNK ? ng : QG_CHUNK;
        ng -= n;
        __asm__ volatile(
            QG_V0
            "vpxor %%xmm0, %%xmm0, %%xmm0\n\t vmovdqa %%ymm12, %%ymm1\n\t"
            "vpxor %%xmm2, %%xmm2, %%xmm2\n\t vmovdqa %%ymm12, %%ymm3\n\t"
            "vpxor %%xmm4, %%xmm4, %%xmm4\n\t vmovdqa %%ymm12, %%ymm5\n\t"
            "vpxor %%xmm6, %%xmm6, %%xmm6\n\t vmovdqa %%ymm12, %%ymm7\n\t"
            "1:\n\t"
            "vpbroadcastd (%[a]), %%ymm13\n\t"
            "vpmaddubsw (%[b]), %%ymm13, %%ymm14\n\t" QG_ACC(0, 1)
            "vpmaddubsw (%[b],%[ps]), %%ymm13, %%ymm14\n\t" QG_ACC(2, 3)
            "vpmaddubsw (%[b2]), %%ymm13, %%ymm14\n\t" QG_ACC(4, 5)
            "vpmaddubsw (%[b2],%[ps]), %%ymm13, %%ymm14\n\t" QG_ACC(6, 7)
            "add $24, %[a]\n\t add $32, %[b]\n\t add $32, %[b2]\n\t dec %[n]\n\t jnz 1b\n\t"
            QG_FINISH_CONSTS
            QG_FINISH(0, 1) QG_FINISH(2, 3) QG_FINISH(4, 5) QG_FINISH(6, 7)
            "vmovdqu %%ymm0, 0(%[r])\n\t vmovdqu %%ymm2, 32(%[r])\n\t"
            "vmovdqu %%ymm4, 64(%[r])\n\t vmovdqu %%ymm6, 96(%[r])\n\t"
            : [a] "+r"(a), [b] "+r"(b), [b2] "+r"(b2), [n] "+r"(n)
            : [r] "r"(dst), [ps] "r"(bps), [k256] "m"(qg_k256), [k1] "m"(qg_k1), [k128] "m"(qg_k128)
            : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
              "xmm7", "xmm12", "xmm13", "xmm14");
        if (dst != out)
            for (int i = 0; i < 4; i++) {
                __m256i *o = (__m256i *)(out + 8 * i);
                _mm256_storeu_si256(o, _mm256_add_epi32(_mm256_loadu_si256(o), part[i]));
            }
        dst = (int32_t *)part;
    }
}
/* QConv, small K (a few groups): 6 rows x 16 pixels (B panels at b and b + bps), the
 * pair sums widened at once (vpmaddwd with ones, from memory) into s32 accumulators. No
 * finish step and twice the outputs per call: for K <= ~48 the fixed cost per tile (the
 * finish, the call, the epilogue set-up) outweighs the cheaper s16 accumulation. out: 6
 * rows of 16 sums. */
static const int16_t qg_ones16[16] __attribute__((aligned(32))) =
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
#define QG_ROW16(R, C0, C1)                                                                        \
    "vpbroadcastd " #R "*4(%[a]), %%ymm14\n\t"                                      \
    "vpmaddubsw %%ymm14, %%ymm12, %%ymm15\n\t"                                      \
    "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                        \
    "vpaddd %%ymm15, %%ymm" #C0 ", %%ymm" #C0 "\n\t"                                \
    "vpmaddubsw %%ymm14, %%ymm13, %%ymm15\n\t"                                      \
    "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                        \
    "vpaddd %%ymm15, %%ymm" #C1 ", %%ymm" #C1 "\n\t"
QE_AVX2 static void qg_ukr_u8_conv16_avx2(long ng, const uint8_t *a, const uint8_t *b,
                                          long bps, int32_t *out) {
    if (ng <= 0) {
        memset(out, 0, 2 * QG_MR * QG_NR * sizeof(int32_t));
        return;
    }
    __asm__ volatile(
        QG_ZERO12
        "1:\n\t"
        "vmovdqu (%[b]), %%ymm12\n\t vmovdqu (%[b],%[ps]), %%ymm13\n\t"
        QG_ROW16(0, 0, 1) QG_ROW16(1, 2, 3) QG_ROW16(2, 4, 5) QG_ROW16(3, 6, 7)
        QG_ROW16(4, 8, 9) QG_ROW16(5, 10, 11)
        "add $24, %[a]\n\t add $32, %[b]\n\t dec %[n]\n\t jnz 1b\n\t"
        "vmovdqu %%ymm0, 0(%[r])\n\t vmovdqu %%ymm1, 32(%[r])\n\t"
        "vmovdqu %%ymm2, 64(%[r])\n\t vmovdqu %%ymm3, 96(%[r])\n\t"
        "vmovdqu %%ymm4, 128(%[r])\n\t vmovdqu %%ymm5, 160(%[r])\n\t"
        "vmovdqu %%ymm6, 192(%[r])\n\t vmovdqu %%ymm7, 224(%[r])\n\t"
        "vmovdqu %%ymm8, 256(%[r])\n\t vmovdqu %%ymm9, 288(%[r])\n\t"
        "vmovdqu %%ymm10, 320(%[r])\n\t vmovdqu %%ymm11, 352(%[r])\n\t"
        : [a] "+r"(a), [b] "+r"(b), [n] "+r"(ng)
        : [r] "r"(out), [ps] "r"(bps), [ones] "m"(qg_ones16)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
          "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}
#undef QG_ROW16

#undef QG_ZERO12
#undef QG_ACC
#undef QG_ROW_CONV
#undef QG_ROW_GEMM
#undef QG_UKR6
#undef QG_FINISH
#undef QG_FINISH_CONSTS
#undef QG_V0
#undef QG_INIT12

/* Wide path: s16 pairs, vpmaddwd straight into s32 (no saturation, no chunking). */
QE_AVX2 static void qg_ukr_wide_avx2(long ng, const uint8_t *a, const uint8_t *b,
                                     int32_t *acc) {
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    for (long g = 0; g < ng; g++, a += QG_ABYTES, b += QG_BBYTES) {
        __m256i bv = _mm256_loadu_si256((const __m256i *)b);
#define QG_W(R, C)                                                                     \
        C = _mm256_add_epi32(C, _mm256_madd_epi16(bv, _mm256_set1_epi32(*(const int32_t *)(a + 4 * R))));
        QG_W(0, c0) QG_W(1, c1) QG_W(2, c2) QG_W(3, c3) QG_W(4, c4) QG_W(5, c5)
#undef QG_W
    }
#define QG_ADD(R, C) _mm256_storeu_si256((__m256i *)(acc + R * QG_NR), C);
    QG_ADD(0, c0) QG_ADD(1, c1) QG_ADD(2, c2) QG_ADD(3, c3) QG_ADD(4, c4) QG_ADD(5, c5)
#undef QG_ADD
}
#endif

/* a 6 x 8 tile: (groups, A panel, B panel, 48 sums) */
typedef void (*qg_ukr_t)(long, const uint8_t *, const uint8_t *, int32_t *);

static void qg_ukr_u8_conv_c(long ng, const uint8_t *a, const uint8_t *b, int32_t *acc) {
    qg_ukr_u8_c(ng, a, b, acc, QG_CONV);
}
static void qg_ukr_u8_gemm_c(long ng, const uint8_t *a, const uint8_t *b, int32_t *acc) {
    qg_ukr_u8_c(ng, a, b, acc, QG_GEMM);
}

/* ---------------------------------------------------------------- packing */

#if QE_X86 && QV_HAVE
/* The pair layout 64 columns a step (AVX-512BW: pairs are the AVX-512 VNNI kernels'): per
 * 128-bit lane L the unpacks give columns 16L.. in four quarters, and a 4 x 4 transpose
 * of the lanes puts each 16-column group's 64 bytes together. -> columns done (a
 * multiple of 64). Four times the SSE2 loop's 16 columns a step: every conv's B block
 * is packed per run, so the packing is a visible share of an int8 model. */
QV_TARGET static long qg_interleave_pairs64(const uint8_t *const *r, long n8, uint8_t *dst,
                                            long pstride) {
    long j = 0;
    for (; j + 64 <= n8; j += 64, dst += 8 * pstride) {
        const __m512i r0 = _mm512_loadu_si512((const void *)(r[0] + j));
        const __m512i r1 = _mm512_loadu_si512((const void *)(r[1] + j));
        const __m512i r2 = _mm512_loadu_si512((const void *)(r[2] + j));
        const __m512i r3 = _mm512_loadu_si512((const void *)(r[3] + j));
        const __m512i lo01 = _mm512_unpacklo_epi8(r0, r1), hi01 = _mm512_unpackhi_epi8(r0, r1);
        const __m512i lo23 = _mm512_unpacklo_epi8(r2, r3), hi23 = _mm512_unpackhi_epi8(r2, r3);
        const __m512i a = _mm512_unpacklo_epi16(lo01, lo23);   /* lane L: columns 16L + 0..3 */
        const __m512i b = _mm512_unpackhi_epi16(lo01, lo23);   /* 4..7 */
        const __m512i c = _mm512_unpacklo_epi16(hi01, hi23);   /* 8..11 */
        const __m512i d = _mm512_unpackhi_epi16(hi01, hi23);   /* 12..15 */
        const __m512i ab0 = _mm512_shuffle_i64x2(a, b, 0x44), ab1 = _mm512_shuffle_i64x2(a, b, 0xEE);
        const __m512i cd0 = _mm512_shuffle_i64x2(c, d, 0x44), cd1 = _mm512_shuffle_i64x2(c, d, 0xEE);
        _mm512_storeu_si512((void *)dst, _mm512_shuffle_i64x2(ab0, cd0, 0x88));
        _mm512_storeu_si512((void *)(dst + 2 * pstride), _mm512_shuffle_i64x2(ab0, cd0, 0xDD));
        _mm512_storeu_si512((void *)(dst + 4 * pstride), _mm512_shuffle_i64x2(ab1, cd1, 0x88));
        _mm512_storeu_si512((void *)(dst + 6 * pstride), _mm512_shuffle_i64x2(ab1, cd1, 0xDD));
    }
    return j;
}
#endif

/* Interleave rows r[0..kg) (kg = 4 u8 rows, or 2 rows widened to s16) of n8 columns
 * (n8 a multiple of 8, every row readable for n8 bytes) into the group-`g` slots of
 * consecutive B panels: dst + p * pstride holds columns 8p..8p+7. pairs (u8 only, the
 * AVX-512 VNNI conv kernels): panels 2q and 2q + 1 share one slot of 64 bytes per group,
 * columns 16q..16q+7 then 16q+8..16q+15, at dst + 2q * pstride (the caller steps dst by
 * 64 bytes per group instead of 32). */
static void qg_interleave(const uint8_t *const *r, int wide, long n8, uint8_t *dst,
                          long pstride, int pairs) {
    long j = 0;
    const long second = pairs ? 32 : pstride;   /* where columns 8..15 of a 16-step go */
#if QE_X86
    const __m128i zero = _mm_setzero_si128();
#if QV_HAVE
    if (pairs && !wide) {
        j = qg_interleave_pairs64(r, n8, dst, pstride);
        dst += j / 16 * 2 * pstride;
    }
#endif
    if (!wide) {
        for (; j + 16 <= n8; j += 16, dst += 2 * pstride) {
            __m128i r0 = _mm_loadu_si128((const __m128i *)(r[0] + j));
            __m128i r1 = _mm_loadu_si128((const __m128i *)(r[1] + j));
            __m128i r2 = _mm_loadu_si128((const __m128i *)(r[2] + j));
            __m128i r3 = _mm_loadu_si128((const __m128i *)(r[3] + j));
            __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
            __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
            _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(lo01, lo23));
            _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(lo01, lo23));
            _mm_storeu_si128((__m128i *)(dst + second), _mm_unpacklo_epi16(hi01, hi23));
            _mm_storeu_si128((__m128i *)(dst + second + 16), _mm_unpackhi_epi16(hi01, hi23));
        }
        if (j < n8) {   /* one last panel of 8 */
            __m128i r0 = _mm_loadl_epi64((const __m128i *)(r[0] + j));
            __m128i r1 = _mm_loadl_epi64((const __m128i *)(r[1] + j));
            __m128i r2 = _mm_loadl_epi64((const __m128i *)(r[2] + j));
            __m128i r3 = _mm_loadl_epi64((const __m128i *)(r[3] + j));
            __m128i lo01 = _mm_unpacklo_epi8(r0, r1), lo23 = _mm_unpacklo_epi8(r2, r3);
            _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(lo01, lo23));
            _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(lo01, lo23));
        }
        return;
    }
    for (; j < n8; j += 8, dst += pstride) {   /* wide: 8 columns of 2 s16 = 32 bytes */
        __m128i r0 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(r[0] + j)), zero);
        __m128i r1 = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(r[1] + j)), zero);
        _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(r0, r1));
        _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(r0, r1));
    }
#else
    for (; j < n8; j += 8) {
        uint8_t *d8 = pairs ? dst + (j / 16) * 2 * pstride + (j % 16 ? 32 : 0)
                            : dst + (j / 8) * pstride;
        for (int c = 0; c < 8; c++) {
            if (!wide) {
                for (int q = 0; q < 4; q++) d8[c * 4 + q] = r[q][j + c];
            } else {
                int16_t *d = (int16_t *)d8;
                d[c * 2] = r[0][j + c];
                d[c * 2 + 1] = r[1][j + c];
            }
        }
    }
#endif
}

/* 2-D conv geometry of one image (or one group of its channels): row k of B is tap
 * (c, i, j) = (k / (KH*KW), k / KW % KH, k % KW), column n is output pixel (n / OW, n % OW).
 * pad: the x zero point, read outside the image. xp: scratch for the image padded with
 * it, (C, Hp, Wp) + 64 bytes of slack, borders filled once (qg_conv_padded_size). */
typedef struct {
    const uint8_t *x;                /* (C, H, W): first channel of the group */
    int C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    uint8_t pad;
    uint8_t *xp;
    int Hp, Wp;
    /* phased (flat plans of strided convs): xp holds, per channel, the sh * sw phase
     * planes (Hq, Wq) of the padded image, phase (p, q) row u column v = padded (u sh + p,
     * v sw + q), so every tap is a stride-1 run of one phase plane (qg_conv_phase_size) */
    int phased, Hq, Wq;
    /* nc4 (the implicit-GEMM plans: stride 1, C a multiple of 4): xp holds the padded
     * image with 4 channels interleaved per pixel, (C/4, Hp, Wp, 4), so the 4 channels of
     * one tap at 16 consecutive pixels are 64 consecutive bytes (qg_conv_fill_nc4) */
    int nc4;
    /* shifted (nc4 only): xp holds, per row phase pi < sh and kernel column tj, the
     * padded image's rows u sh + pi (u < Hq) at columns ox sw + tj dw (ox < ow),
     * (C/4, sh, kw, Hq, ow, 4): tap (ti, tj) of output pixel n = oy * ow + ox is pixel
     * n + (ti dh / sh) ow of copy (ti dh % sh, tj), so the columns are the output's own
     * pixels (pitch ow), none computed to be dropped, strided convs included
     * (qg_conv_shifted_size) */
    int shifted;
} qg_conv;

/* The row pitch of a flat plan's columns: strided convs, the phase planes' width Wq (the
 * output plus the farthest tap's phase offset); stride 1, the padded width Wp
 * (qg_conv_padded_size first). */
static inline long qg_conv_pitch(const qg_conv *g) {
    if (g->shifted) return g->ow;
    return g->sh > 1 || g->sw > 1 ? g->ow + (g->kw - 1) * g->dw / g->sw : g->Wp;
}

/* phased: Hq, Wq -> the phase planes' bytes + 64 of slack. */
static long qg_conv_phase_size(qg_conv *g) {
    g->Hq = g->oh + (g->kh - 1) * g->dh / g->sh;
    g->Wq = (int)qg_conv_pitch(g);
    return (long)g->C * g->sh * g->sw * g->Hq * g->Wq + 64;
}

/* Hp, Wp: every row / column a window reads, the bottom / right padding included.
 * Stride 1 with right <= pw columns read right of the image (a "same" conv) and ow <=
 * pw + W (a flat row of the output fits a row of the image): the rows share their
 * padding, Wp = pw + W, a row's right padding being the next row's left one (one more
 * row of padding at the bottom for the last row's), so a flat plan computes pw fewer
 * dropped columns per row: a 7x7 3x3 plane 55 columns instead of 61, three zmm and a
 * ymm tile instead of four zmm. */
static long qg_conv_padded_size(qg_conv *g) {
    int need_h = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    int need_w = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    int right = need_w - (g->pw + g->W);
    g->Hp = need_h > g->ph + g->H ? need_h : g->ph + g->H;
    if (g->sh == 1 && g->sw == 1 && right > 0 && right <= g->pw && g->pw + g->W >= g->ow) {
        g->Hp += 1;
        g->Wp = g->pw + g->W;
    } else {
        g->Wp = need_w > g->pw + g->W ? need_w : g->pw + g->W;
    }
    return (long)g->C * g->Hp * g->Wp + 64;
}

/* shifted: Hq -> the sh * kw copies' bytes + 64 of slack. */
static long qg_conv_shifted_size(qg_conv *g) {
    g->Hq = g->oh + (g->kh - 1) * g->dh / g->sh;
    return (long)g->C * g->sh * g->kw * g->Hq * g->ow + 64;
}

/* d[0 .. n) = s[0], s[step], ... reading only s[0 .. (n - 1) step] (step 2 vectorized:
 * 28 of ResNet's stride-2 rows were 12 scalar bytes each before, and the phase fill a
 * third of a layer). */
static inline void qg_strided_copy(uint8_t *d, const uint8_t *s, int n, int step) {
    if (step == 1) memcpy(d, s, (size_t)n);
    else if (step == 2) edgenn_even_bytes(d, s, n);
    else for (int t = 0; t < n; t++) d[t] = s[(long)t * step];
}

/* Whether some tap reads phase `p` of a stride-`s` axis (k taps, dilation d). */
static inline int qg_phase_used(int p, int s, int k, int d) {
    for (int t = 0; t < k; t++)
        if (t * d % s == p) return 1;
    return 0;
}

/* phased: the image into the interior of the phase planes its taps read (the borders hold
 * the zero point from the first fill on; a 1x1 stride-2 conv reads one phase of four).
 * Per column phase q, the columns ix with (ix + pw) % sw == q, from ix0 every sw-th, go to
 * v0.. of the phase row: computed once, not per row (integer divisions were most of the
 * fill's time). */
static void qg_conv_fill_phases(const qg_conv *g, long c0, long c1) {
    enum { QMAX = 16 };
    const long plane = (long)g->Hq * g->Wq;
    int ix0[QMAX], v0[QMAX], n[QMAX], nq = 0;
    long qoff[QMAX];
    for (int q = 0; q < g->sw && nq < QMAX; q++) {
        if (!qg_phase_used(q, g->sw, g->kw, g->dw)) continue;
        const int i0 = ((q - g->pw) % g->sw + g->sw) % g->sw, v = (i0 + g->pw) / g->sw;
        int cnt = i0 < g->W ? (g->W - i0 + g->sw - 1) / g->sw : 0;
        if (v + cnt > g->Wq) cnt = g->Wq - v;
        ix0[nq] = i0, v0[nq] = v, n[nq] = cnt, qoff[nq] = (long)q * plane;
        nq++;
    }
    int prow[64];   /* row phases the taps read (sh <= 64: the kernel checks) */
    for (int p = 0; p < g->sh && p < 64; p++) prow[p] = qg_phase_used(p, g->sh, g->kh, g->dh);
    for (long c = c0; c < c1; c++) {
        const uint8_t *src = g->x + c * g->H * g->W;
        uint8_t *base = g->xp + c * g->sh * g->sw * plane;
        int p = g->ph % g->sh, u = g->ph / g->sh;          /* of padded row iy + ph */
        for (int iy = 0; iy < g->H; iy++) {
            if (u < g->Hq && prow[p]) {
                const uint8_t *row = src + (long)iy * g->W;
                uint8_t *dst = base + (long)p * g->sw * plane + (long)u * g->Wq;
                for (int i = 0; i < nq; i++)
                    if (n[i] > 0) qg_strided_copy(dst + qoff[i] + v0[i], row + ix0[i], n[i], g->sw);
            }
            if (++p == g->sh) p = 0, u++;
        }
    }
}

#if QE_X86
/* 16 pixels of 4 channels (one vector each) -> d, 4 bytes per pixel */
static inline void qg_nc4_store16(__m128i r0, __m128i r1, __m128i r2, __m128i r3, uint8_t *d) {
    const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
    const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
    _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi16(lo01, lo23));
    _mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi16(lo01, lo23));
    _mm_storeu_si128((__m128i *)(d + 32), _mm_unpacklo_epi16(hi01, hi23));
    _mm_storeu_si128((__m128i *)(d + 48), _mm_unpackhi_epi16(hi01, hi23));
}

/* the even bytes of s[0 .. 32) */
static inline __m128i qg_even16(const uint8_t *s) {
    const __m128i lo = _mm_set1_epi16(0xff);
    return _mm_packus_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i *)s), lo),
                            _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + 16)), lo));
}

/* 16 bytes s -> d */
static inline void qg_move16(uint8_t *d, const uint8_t *s) {
    _mm_storeu_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
}

/* n bytes (a multiple of 4, < 64) s -> d in 16 / 8 / 4-byte moves. Unrolled: as a loop of
 * 16-byte memcpys GCC makes it one memcpy call of the whole length, which on runs this
 * short costs more than the copy (the image fill's rows of 7-14 pixels end here). */
static inline void qg_store_words(uint8_t *d, const uint8_t *s, int n) {
    int o = 0;
    if (n >= 16) qg_move16(d, s), o = 16;
    if (n >= 32) qg_move16(d + 16, s + 16), o = 32;
    if (n >= 48) qg_move16(d + 32, s + 32), o = 48;
    if (n - o >= 8) memcpy(d + o, s + o, 8), o += 8;
    if (n - o >= 4) memcpy(d + o, s + o, 4);
}
#endif

/* n pixels of 4 channel rows r (ascending in memory) from column ix, every step-th,
 * interleaved into d (4 bytes per pixel); the rows are read only below end (the image's
 * end: a chunk may read past its row into the next). Steps 1 and 2 16 pixels at a time
 * through byte / word unpacks (qg_interleave's steps), a last chunk of < 16 written
 * through a buffer: ResNet's rows are 7-56 pixels, and byte by byte their rest was a
 * third of the fill. */
static inline void qg_nc4_gather(const uint8_t *const r[4], int ix, int step, int n,
                                 const uint8_t *end, uint8_t *d) {
    int t = 0;
#if QE_X86
    /* a chunk from pixel t reads r[3] + ix + t step .. + 16 step - 1 (step 2: 32 bytes) */
    if (step <= 2)
        for (; t < n && r[3] + ix + (long)(t + 16) * step <= end; t += 16, d += 64) {
            __m128i v[4];
            for (int c = 0; c < 4; c++)
                v[c] = step == 1 ? _mm_loadu_si128((const __m128i *)(r[c] + ix + t))
                                 : qg_even16(r[c] + ix + 2 * t);
            if (n - t >= 16) {
                qg_nc4_store16(v[0], v[1], v[2], v[3], d);
            } else {
                uint8_t out[64];
                qg_nc4_store16(v[0], v[1], v[2], v[3], out);
                qg_store_words(d, out, (n - t) * 4);
            }
        }
#endif
    (void)end;
    for (; t < n; t++, d += 4) {
        const long i = ix + (long)t * step;
        d[0] = r[0][i];
        d[1] = r[1][i];
        d[2] = r[2][i];
        d[3] = r[3][i];
    }
}

/* r: row iy of the 4 channels of quad q of the image */
static inline void qg_quad_rows(const qg_conv *g, int q, int iy, const uint8_t *r[4]) {
    const long plane = (long)g->H * g->W;
    for (int c = 0; c < 4; c++) r[c] = g->x + (4L * q + c) * plane + (long)iy * g->W;
}

/* nc4: the image into the interior of the 4-channel-interleaved padded scratch. */
static void qg_conv_fill_nc4(const qg_conv *g, long q0, long q1) {
    const uint8_t *end = g->x + (long)g->C * g->H * g->W;
    for (int q = (int)q0; q < q1; q++) {
        for (int iy = 0; iy < g->H; iy++) {
            const uint8_t *r[4];
            qg_quad_rows(g, q, iy, r);
            qg_nc4_gather(r, 0, 1, g->W, end,
                          g->xp + (((long)q * g->Hp + iy + g->ph) * g->Wp + g->pw) * 4);
        }
    }
}

/* shifted: the image into its copies, each the pixels its (row phase, kernel column)
 * reads (the borders hold the zero point from the first fill on). */
static void qg_conv_fill_shifted(const qg_conv *g, long q0, long q1) {
    const long copy = (long)g->Hq * g->ow * 4;
    const uint8_t *end = g->x + (long)g->C * g->H * g->W;
    for (int q = (int)q0; q < q1; q++) {
        for (int iy = 0; iy < g->H; iy++) {
            const int py = iy + g->ph, pi = py % g->sh, u = py / g->sh;
            if (u >= g->Hq) break;
            const uint8_t *r[4];
            qg_quad_rows(g, q, iy, r);
            for (int tj = 0; tj < g->kw; tj++) {
                /* output column ox reads image column ox sw + tj dw - pw */
                const int off = tj * g->dw - g->pw;
                int ox0 = off < 0 ? (-off + g->sw - 1) / g->sw : 0;
                int ox1 = g->W - 1 - off < 0 ? 0 : (g->W - 1 - off) / g->sw + 1;
                if (ox1 > g->ow) ox1 = g->ow;
                if (ox0 >= ox1) continue;
                uint8_t *d = g->xp + (((long)q * g->sh + pi) * g->kw + tj) * copy
                             + ((long)u * g->ow + ox0) * 4;
                qg_nc4_gather(r, ox0 * g->sw + off, g->sw, ox1 - ox0, end, d);
            }
        }
    }
}

/* Thread t of nt: its share [*a, *b) of n units (channels, quads or planes), as even as
 * whole units allow. */
static inline void qg_share(long n, int t, int nt, long *a, long *b) {
    *a = n * t / nt;
    *b = n * (t + 1) / nt;
}

/* n bytes src -> dst (n small: inline, 16 bytes per step, the last step overlapping).
 * slack: dst and src may be read / written up to 16 bytes past n (a short run is then
 * one 16-byte copy; the caller overwrites or ignores the excess). */
static inline void qg_copy_run(uint8_t *dst, const uint8_t *src, int n, int slack) {
#if QE_X86
    if (n < 16 && slack) {
        _mm_storeu_si128((__m128i *)dst, _mm_loadu_si128((const __m128i *)src));
        return;
    }
    if (n >= 16) {
        int t = 0;
        for (; t + 16 <= n; t += 16)
            _mm_storeu_si128((__m128i *)(dst + t), _mm_loadu_si128((const __m128i *)(src + t)));
        if (t < n)
            _mm_storeu_si128((__m128i *)(dst + n - 16),
                             _mm_loadu_si128((const __m128i *)(src + n - 16)));
        return;
    }
#endif
    if (n >= 8) {   /* 8 bytes a step (fixed-size memcpy: a move), the last overlapping */
        int t = 0;
        for (; t + 8 <= n; t += 8) memcpy(dst + t, src + t, 8);
        if (t < n) memcpy(dst + n - 8, src + n - 8, 8);
        return;
    }
    if (n >= 4) {
        memcpy(dst, src, 4);
        memcpy(dst + n - 4, src + n - 4, 4);
        return;
    }
    for (int t = 0; t < n; t++) dst[t] = src[t];
}

/* Copy thread t's share of the image's channels (of 4-channel quads in the interleaved
 * layouts) into the interior of the padded scratch (or its phase planes, or the
 * 4-channel-interleaved layout); the shares of nt threads fill it all. On one thread, the
 * copy would leave the other threads idle and undo much of a conv's multi-thread split. */
static void qg_conv_fill_padded_part(const qg_conv *g, int t, int nt) {
    long a, b;
    qg_share(g->phased || !(g->shifted || g->nc4) ? g->C : g->C / 4, t, nt, &a, &b);
    if (g->phased) {
        qg_conv_fill_phases(g, a, b);
        return;
    }
    if (g->shifted) {
        qg_conv_fill_shifted(g, a, b);
        return;
    }
    if (g->nc4) {
        qg_conv_fill_nc4(g, a, b);
        return;
    }
    for (long c = a; c < b; c++) {
        const uint8_t *src = g->x + c * g->H * g->W;
        uint8_t *dst = g->xp + (c * g->Hp + g->ph) * g->Wp + g->pw;
        if (g->W == g->Wp) {
            memcpy(dst, src, (size_t)g->H * g->W);
        } else {   /* inline: a library call per short row costs more than the copy */
            for (int iy = 0; iy < g->H; iy++)
                qg_copy_run(dst + (long)iy * g->Wp, src + (long)iy * g->W, g->W, 0);
        }
    }
}

/* The whole image, on the calling thread. */
static void qg_conv_fill_padded(const qg_conv *g) { qg_conv_fill_padded_part(g, 0, 1); }

/* Row k of the im2col matrix for output pixels [j0, j0 + n) -> dst[0..n), read from the
 * padded image (no bounds checks). Stride 2 gathers 16 pixels per step (reads up to 32
 * bytes past the run: the scratch's slack). */
static void qg_im2col_row(const qg_conv *g, long k, long j0, long n, uint8_t *dst) {
    const long khw = (long)g->kh * g->kw;
    const int c = (int)(k / khw), rem = (int)(k % khw), ti = rem / g->kw, tj = rem % g->kw;
    const uint8_t *base = g->xp + ((long)c * g->Hp + (long)ti * g->dh) * g->Wp + (long)tj * g->dw;
    const int sw = g->sw;
    int oy = (int)(j0 / g->ow), ox = (int)(j0 % g->ow);
    long done = 0;
    while (done < n) {
        int len = g->ow - ox;
        if (len > n - done) len = (int)(n - done);
        uint8_t *d = dst + done;
        const uint8_t *src = base + (long)oy * g->sh * g->Wp + (long)ox * sw;
        if (sw == 1) {
            qg_copy_run(d, src, len, 1);   /* dst: rowbuf's 16 bytes of slack; src: xp's 64 */
        } else {
            int t = 0;
#if QE_X86
            if (sw == 2) {
                const __m128i lo = _mm_set1_epi16(0xff);
                for (; t + 16 <= len; t += 16) {
                    __m128i a = _mm_and_si128(_mm_loadu_si128((const __m128i *)(src + 2 * t)), lo);
                    __m128i b = _mm_and_si128(_mm_loadu_si128((const __m128i *)(src + 2 * t + 16)), lo);
                    _mm_storeu_si128((__m128i *)(d + t), _mm_packus_epi16(a, b));
                }
            }
#endif
            for (; t < len; t++) d[t] = src[(long)t * sw];
        }
        done += len;
        ox = 0;
        oy++;
    }
}

/* B block for pixels [j0, j0 + nv) of a conv -> panels (ceil(nv/8) of them, stride
 * G * 32 bytes). direct: 1x1, stride 1, no padding: row k is x's plane k, read in place
 * (when the block's full 8-aligned width lies inside the image); flat (qg_conv_plan.
 * row_off, or NULL): pixels numbered over the pitch, row k read in place at xp + flat[k]
 * (the padded image, or a phase plane); otherwise rows are gathered from the padded image
 * (qg_conv_fill_padded first, in every case but direct). rowbuf: kg rows of n8 + 16 bytes. zrow:
 * n8 + 16 zero bytes (rows past K). pairs: qg_interleave's pair layout (the AVX-512 VNNI
 * kernels; a last unpaired panel leaves its partner's bytes unwritten: their sums are
 * dropped). */
static void qg_pack_b_conv(const qg_conv *g, long K, long G, int wide, int direct,
                           const long *flat, long j0, long nv, uint8_t *dst, uint8_t *rowbuf,
                           const uint8_t *zrow, int pairs) {
    const int kg = wide ? 2 : 4;
    const long n8 = (nv + 7) / 8 * 8, plane = (long)g->H * g->W;
    const int in_place = direct && j0 + n8 <= plane;
    const uint8_t *rows[4];
    for (long grp = 0; grp < G; grp++) {
        for (int q = 0; q < kg; q++) {
            long k = grp * kg + q;
            uint8_t *rb = rowbuf + q * (n8 + 16);
            if (k >= K) {
                rows[q] = zrow;
            } else if (flat) {   /* one run of the padded image (or of a phase plane) */
                rows[q] = g->xp + flat[k] + j0;
            } else if (in_place) {
                rows[q] = g->x + k * plane + j0;
            } else if (direct) {
                memcpy(rb, g->x + k * plane + j0, nv);
                memset(rb + nv, g->pad, n8 - nv);
                rows[q] = rb;
            } else {
                qg_im2col_row(g, k, j0, nv, rb);
                if (nv < n8) memset(rb + nv, g->pad, n8 - nv);
                rows[q] = rb;
            }
        }
        qg_interleave(rows, wide, n8, dst + grp * QG_BBYTES * (pairs ? 2 : 1), G * QG_BBYTES,
                      pairs);
    }
}

/* ---------------------------------------------------------------- excess weights */

/* The excess weights Wx of one constant panel (QGemm: a B panel of 8 columns; QConv: an
 * A panel of 6 rows): n groups, group[i] its K group index, data + i * bytes its values in
 * the panel's group layout (QG_BBYTES or QG_ABYTES), int8. */
typedef struct {
    long n;
    const int32_t *group;
    const uint8_t *data;
} qg_excess;

/* Per plan: panel p's groups are [start[p], start[p + 1]) of group / data (NULL: none). */
typedef struct {
    const int32_t *start, *group;
    const uint8_t *data;
} qg_excess_table;

static qg_excess qg_excess_of(const qg_excess_table *t, long panel, long bytes) {
    qg_excess x = {0, NULL, NULL};
    if (t && t->start) {
        long s = t->start[panel];
        x.n = t->start[panel + 1] - s;
        x.group = t->group + s;
        x.data = t->data + s * bytes;
    }
    return x;
}

/* acc (6 x 8 sums of one tile) += the excess products. QG_GEMM: a = the A panel (u8,
 * per call), the excess is B's; QG_CONV: b = the B panel (u8 pixels), the excess is A's. */
static void qg_excess_add_c(const qg_excess *x, int flavor, const uint8_t *a,
                            const uint8_t *b, int32_t *acc) {
    for (long i = 0; i < x->n; i++) {
        long g = x->group[i];
        const uint8_t *u = flavor == QG_GEMM ? a + g * QG_ABYTES : b + g * QG_BBYTES;
        const int8_t *w = (const int8_t *)(x->data + i * (flavor == QG_GEMM ? QG_BBYTES : QG_ABYTES));
        for (int r = 0; r < QG_MR; r++)
            for (int j = 0; j < QG_NR; j++) {
                int32_t s = 0;
                for (int q = 0; q < 4; q++)
                    s += flavor == QG_GEMM ? (int32_t)u[r * 4 + q] * w[j * 4 + q]
                                           : (int32_t)u[j * 4 + q] * w[r * 4 + q];
                acc[r * QG_NR + j] += s;
            }
    }
}

#if QE_X86
QE_AVX2 static void qg_excess_add_avx2(const qg_excess *x, int flavor, const uint8_t *a,
                                       const uint8_t *b, int32_t *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c[QG_MR];
    for (int r = 0; r < QG_MR; r++) c[r] = _mm256_loadu_si256((const __m256i *)(acc + 8 * r));
    for (long i = 0; i < x->n; i++) {
        long g = x->group[i];
        if (flavor == QG_GEMM) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(x->data + i * QG_BBYTES));
            const uint8_t *u = a + g * QG_ABYTES;
            for (int r = 0; r < QG_MR; r++)
                c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(_mm256_maddubs_epi16(
                    _mm256_set1_epi32(*(const int32_t *)(u + 4 * r)), w), ones));
        } else {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(b + g * QG_BBYTES));
            const uint8_t *w = x->data + i * QG_ABYTES;
            for (int r = 0; r < QG_MR; r++)
                c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(_mm256_maddubs_epi16(
                    u, _mm256_set1_epi32(*(const int32_t *)(w + 4 * r))), ones));
        }
    }
    for (int r = 0; r < QG_MR; r++) _mm256_storeu_si256((__m256i *)(acc + 8 * r), c[r]);
}
#endif

/* ---------------------------------------------------------------- drivers */

/* The portable epilogue of an mr x nr corner of a 6 x 8 tile of sums (row stride 8) whose
 * first output is y (row stride ld elements; residual z, same layout). */
static void qg_tile_out(const int32_t *acc, int mr, long nr, const qe_epi *e, long m0, long n0,
                        char *y, long ld, const uint8_t *z) {
    const long es = e->out_f32 ? 4 : 1;
    for (int r = 0; r < mr; r++)
        qe_span(acc + r * QG_NR, nr, e, m0 + r, n0, y + r * ld * es, z ? z + r * ld : NULL, 0);
}

/* Tiles i = 0..nt-1: rows m0 + i*dm (mr_last rows in the last tile, QG_MR before), columns
 * n0 + i*dn (nr_last in the last, 8 before); A panel at a + i*da, B panel at b + i*db (ng
 * groups each); outputs y (element offset of the first tile's first output) with row
 * stride ld. QConv sweeps along N (dm = 0), QGemm along M (dn = 0). */
static void qg_sweep_c(qg_ukr_t ukr, long ng, const uint8_t *a, long da, const uint8_t *b,
                       long db, long nt, long m0, long dm, int mr_last, long n0, long dn,
                       long nr_last, const qe_epi *e, char *y, long ld, const uint8_t *z,
                       const qg_excess *x, int flavor) {
    int32_t acc[QG_MR * QG_NR];
    const long es = e->out_f32 ? 4 : 1;
    for (long i = 0; i < nt; i++) {
        int last = i == nt - 1;
        long mi = m0 + i * dm, ni = n0 + i * dn, off = (i * dm) * ld + i * dn;
        ukr(ng, a + i * da, b + i * db, acc);
        if (x->n) qg_excess_add_c(x, flavor, a + i * da, b + i * db, acc);
        qg_tile_out(acc, last ? mr_last : (dm ? QG_MR : mr_last),
                    last ? nr_last : (dn ? QG_NR : nr_last),
                    e, mi, ni, y + off * es, ld, z ? z + off : NULL);
    }
}

#if QE_X86
QE_AVX2 static void qg_sweep_avx2(qg_ukr_t ukr, long ng, const uint8_t *a, long da,
                                  const uint8_t *b, long db, long nt, long m0, long dm,
                                  int mr_last, long n0, long dn, long nr_last, const qe_epi *e,
                                  char *y, long ld, const uint8_t *z, const qg_excess *x,
                                  int flavor) {
    int32_t acc[QG_MR * QG_NR];
    const long es = e->out_f32 ? 4 : 1;
    for (long i = 0; i < nt; i++) {
        int last = i == nt - 1;
        int mr = last ? mr_last : (dm ? QG_MR : mr_last);
        long nr = last ? nr_last : (dn ? QG_NR : nr_last);
        long mi = m0 + i * dm, ni = n0 + i * dn, off = (i * dm) * ld + i * dn;
        ukr(ng, a + i * da, b + i * db, acc);
        if (x->n) qg_excess_add_avx2(x, flavor, a + i * da, b + i * db, acc);
        if (nr == QG_NR)
            qe_tile8_avx2(acc, mr, e, mi, ni, y + off * es, ld, z ? z + off : NULL, ld);
        else
            for (int r = 0; r < mr; r++)
                qe_span_c(acc + r * QG_NR, nr, e, mi + r, ni, y + (off + r * ld) * es,
                          z ? z + off + r * ld : NULL);
    }
}
#endif

#if QE_X86
/* QConv, small K, AVX2 u8 path: the tiles of one A panel (rows m0.., mr of them) against
 * np B panels (stride bps) two at a time (6 x 16, qg_ukr_u8_conv16_avx2); an odd last
 * panel and the ragged end go through qg_sweep_avx2. */
QE_AVX2 static void qg_sweep16_avx2(long ng, const uint8_t *a, const uint8_t *b, long bps,
                                    long np, long m0, int mr, long n0, long nr_last,
                                    const qe_epi *e, char *y, long ld, const uint8_t *z) {
    int32_t acc[2 * QG_MR * QG_NR];
    const long es = e->out_f32 ? 4 : 1;
    long full = nr_last == QG_NR ? np : np - 1;   /* panels with 8 valid columns */
    long i = 0;
    for (; i + 2 <= full; i += 2) {
        qg_ukr_u8_conv16_avx2(ng, a, b + i * bps, bps, acc);
        long off = i * QG_NR;
        qe_tile16_avx2(acc, mr, e, m0, n0 + off, y + off * es, ld, z ? z + off : NULL, ld);
    }
    if (i < np)
    {
        const qg_excess none = {0, NULL, NULL};   /* small K: layers with excess go wide */
        qg_sweep_avx2(qg_ukr_u8_conv_avx2, ng, a, 0, b + i * bps, bps, np - i, m0, 0, mr,
                      n0 + i * QG_NR, QG_NR, nr_last, e, y + i * QG_NR * es, ld,
                      z ? z + i * QG_NR : NULL, &none, QG_CONV);
    }
}
#endif

/* ---------------------------------------------------------------- rows
 *
 * A row of the family's table (qgemm_table.h) is a set of entry points; the drivers below
 * call a row's entries and never test an instruction set. An entry left NULL is a path the
 * row does not have: the driver takes the next one (the 6 x 8 sweep always exists). */
typedef struct qg_row qg_row;

typedef struct {
    long M, K, N;            /* one group: out channels, C/group*KH*KW, OH*OW */
    long G;                  /* groups of kg: ceil(K / 4) (u8) or ceil(K / 2) (wide) */
    const qg_row *row;       /* the table row whose entry points run it */
    int wide, direct;
    long nc;                 /* pixels per B block (multiple of 8) */
    qg_excess_table excess;  /* per A panel (u8 path with 8-bit weights), or all NULL */
    int flat;                /* output pixel (oy, ox) computed as column oy * pitch + ox of
                                Nf = (oh - 1) * pitch + ow (pitch: Wp, or Wq for strided
                                convs, read through phase planes), so every im2col row is
                                one run of the padded image (no gather); the pitch - ow
                                columns between rows are computed and dropped
                                (qg_conv_compact) */
    const long *row_off;     /* flat: row k's offset in the padded image (qg_conv_row_offsets) */
    long Nf;                 /* the columns computed: N, or the flat count */
    const long *goff;        /* implicit GEMM (flat, the image nc4; the row's
                                conv_implicit): group g's bytes at xp + goff[g] + 4 * column,
                                no B block packed; or NULL */
} qg_conv_plan;

typedef struct {
    long M, K, N;            /* rows of A, K, columns of B */
    long G;                  /* groups of kg */
    long NP;                 /* B panels (N rounded up to a multiple of 32, / 8) */
    const qg_row *row;       /* the table row whose entry points run it */
    int wide;
    long mc;                 /* rows per packed A block (multiple of 6) */
    qg_excess_table excess;  /* per B panel (u8 path with 8-bit weights), or all NULL */
    long pb, pe;             /* the B panels computed: [pb, pe), pb a multiple of 4 (all:
                              * 0, NP; a thread's share where the threads split columns) */
} qg_gemm_plan;

/* The entry points' types. Shapes as the drivers call them: a sweep is nt 6 x 8 tiles
 * (qg_sweep_c's comment), small_k two B panels a step, a block's tiles one A panel across
 * nv pixels, an implicit range pixels [jb, je) x channels [mb, me). */
typedef void (*qg_sweep_t)(qg_ukr_t ukr, long ng, const uint8_t *a, long da, const uint8_t *b,
                           long db, long nt, long m0, long dm, int mr_last, long n0, long dn,
                           long nr_last, const qe_epi *e, char *y, long ld, const uint8_t *z,
                           const qg_excess *x, int flavor);
typedef void (*qg_small_k_t)(long ng, const uint8_t *a, const uint8_t *b, long bps, long np,
                             long m0, int mr, long n0, long nr_last, const qe_epi *e, char *y,
                             long ld, const uint8_t *z);
typedef void (*qg_gemm_rows_t)(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *ws,
                               long i0, long m_first, long m_end, const qe_epi *e, void *y,
                               const uint8_t *z);
typedef void (*qg_block_tiles_t)(const qg_conv_plan *p, const qg_conv *g, const uint8_t *ap,
                                 const uint8_t *bblk, int mr, long m0, long j0, long nv,
                                 const qe_epi *e, void *y, const uint8_t *z,
                                 const int32_t *pat);
typedef void (*qg_gemm_tiles_t)(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *ws,
                                long i0, long mc, const qe_epi *e, void *y, const uint8_t *z);
typedef void (*qg_range_t)(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                           const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, long jb,
                           long je, long mb, long me);
typedef void (*qg_patterns_t)(long G, const uint8_t *bblk, long bs, long t0, int r,
                              int32_t *pat);

struct qg_row {
    const char *name;            /* q<gemm|conv>_u8s8_<mr>x<nr>__<isa> */
    int isa;                     /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    int mr, nr;                  /* its register tile */
    int exact;                   /* its tiles take any 8-bit weights as they are (no wide /
                                    excess split of the weights) */
    int ch_block;                /* QConv weights packed in blocks of this many channels:
                                    QG_MR (6-row panels) or QVP_CH */
    int pairs;                   /* QConv B blocks in panel pairs (qg_interleave) */
    qg_ukr_t conv_u8, gemm_u8, wide;     /* the 6 x 8 tile of each arithmetic */
    qg_sweep_t sweep;                    /* a run of 6 x 8 tiles, excess and epilogue */
    qg_small_k_t conv_small_k;           /* QConv, u8 path, K <= 48 */
    qg_gemm_rows_t gemm_rows;            /* QGemm, u8 path: the rows past the whole 6-row
                                            panels (else the sweep's ragged last tile) */
    qg_block_tiles_t conv_tiles;         /* QConv: one A panel across a packed block */
    qg_patterns_t tail_patterns;         /* with conv_tiles: a block's last <= QVT_MAX
                                            columns laid out for the rows-in-lanes tile */
    qg_gemm_tiles_t gemm_tiles;          /* QGemm: a packed A block across the B panels */
    qg_range_t conv_implicit;            /* QConv plans with goff: no B block at all */
};

#if QE_X86 && QV_HAVE
/* The integer epilogue (u8 out, per-row constants: QConv's common case) of a 6 x 32 tile,
 * 16 outputs per zmm: the same operations as qe_tile8_avx2 (sum + bias, to float, times
 * mult, min with 2^24, round to nearest even, + zero point, clamp to [lo, hi] and u8),
 * the s16 packing steps replaced by one clamp of the s32 values (equal: the result is
 * clamped to [0, 255] either way), the ragged end by a masked store. */
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
static void qv_tile_out_int(const int32_t *acc, int mr, long nvalid, const qe_epi *e, long m0,
                            uint8_t *y, long ld) {
    const __m512 big = _mm512_set1_ps(16777216.f);
    const __m512i zp = _mm512_set1_epi32(e->yzp);
    const __m512i lo = _mm512_set1_epi32(qe_u8(e->lo)), hi = _mm512_set1_epi32(qe_u8(e->hi));
    for (int h = 0; h < 2 && 16 * h < nvalid; h++) {
        const __mmask16 m = qv_lanes16(nvalid - 16 * h);
        const int32_t *b0 = acc + (2 * h) * QV_MR * QG_NR, *b1 = b0 + QV_MR * QG_NR;
        for (int r = 0; r < mr; r++) {
            __m512i a = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + r * QG_NR))),
                _mm256_loadu_si256((const __m256i *)(b1 + r * QG_NR)), 1);
            a = _mm512_add_epi32(a, _mm512_set1_epi32(e->bias[m0 + r]));
            __m512 f = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a),
                                                   _mm512_set1_ps(e->mult[m0 + r])), big);
            __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
            q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
            _mm512_mask_cvtepi32_storeu_epi8(y + r * ld + 16 * h, m, q);
        }
    }
}

/* Epilogue of the 4 blocks of 6 x 8 sums that qv_ukr_*_6x32 leaves in acc: block q is
 * columns n0 + 8q.., nvalid columns in all (from n0), mr rows from m0; y at the first
 * output (row stride ld elements), z the residual in the same layout or NULL. */
/* The plain integer epilogue (requantize to u8, no float path, residual, per-column
 * constants or float output): the one qv_tile_out_int and qvc_*_u8 (_qgemm_vnni_conv.h)
 * compute. */
static inline int qv_int_out(const qe_epi *e, const uint8_t *z) {
    return !e->float_path && !e->per_col && !e->out_f32 && !z;
}

/* The float epilogues qvc_*_fz (_qgemm_vnni_conv.h) compute in registers (u8 out, per-row
 * constants, residual / float bias optional, Relu / Clip or none, no post affine). */
static inline int qv_float_out(const qe_epi *e) {
    return e->float_path && !e->per_col && !e->out_f32 && !e->post
           && (e->act == EDGENN_ACT_NONE || e->act == EDGENN_ACT_RELU || e->act == EDGENN_ACT_CLIP);
}

QE_AVX2 static void qv_tile_out(const int32_t *acc, int mr, long nvalid, const qe_epi *e,
                                long m0, long n0, char *y, long ld, const uint8_t *z,
                                int avx512) {
    if (avx512 && qv_int_out(e, z)) {
        qv_tile_out_int(acc, mr, nvalid, e, m0, (uint8_t *)y, ld);
        return;
    }
    const long es = e->out_f32 ? 4 : 1;
    for (int q = 0; q < QV_PANELS && q * QG_NR < nvalid; q++) {
        const int32_t *t = acc + q * QV_MR * QG_NR;
        long nr = nvalid - q * QG_NR < QG_NR ? nvalid - q * QG_NR : QG_NR, c = q * QG_NR;
        if (nr == QG_NR)
            qe_tile8_avx2(t, mr, e, m0, n0 + c, y + c * es, ld, z ? z + c : NULL, ld);
        else
            for (int r = 0; r < mr; r++)
                qe_span_c(t + r * QG_NR, nr, e, m0 + r, n0 + c, y + (c + r * ld) * es,
                          z ? z + c + r * ld : NULL);
    }
}
#endif

/* Pixels per block: the packed block (nc x K bytes) in about 192 KiB of L2, a multiple
 * of 32 (the VNNI kernel's 4-panel tile: a block of 9 panels would run 4 + 4 + 1, the
 * last tile a quarter used). */
static long qg_conv_block(long N, long G) {
    const long step = 4 * QG_NR;
    long bytes_per_px = G * 4;
    long nc = 192 * 1024 / bytes_per_px / step * step;
    if (nc < step) nc = step;
    long n8 = (N + QG_NR - 1) / QG_NR * QG_NR;
    if (nc >= n8) return n8;
    long nb = (n8 + nc - 1) / nc;                       /* balanced blocks */
    return ((n8 + nb - 1) / nb + step - 1) / step * step;
}

/* Bytes of the packed B block: whole panel pairs (the pair layout's last pair is read
 * whole even where its second panel is past the block). */
static long qg_conv_bblk_bytes(const qg_conv_plan *p) {
    return (p->nc + 2 * QG_NR - 1) / (2 * QG_NR) * (2 * QG_NR) * p->G * 4;
}

/* Workspace bytes: packed B block + kg row buffers + a zero row. */
static long qg_conv_workspace(const qg_conv_plan *p) {
    /* a block's last columns' patterns (_qgemm_vnni_tail.h) */
    const long tail = p->row->tail_patterns ? QVT_MAX * qvt_column_bytes(p->G) : 0;
    if (p->goff) return 64 + tail;   /* implicit GEMM: no B block, no row buffers */
    return qg_conv_bblk_bytes(p) + 5 * (p->nc + 16) + 64 + tail;
}

/* Whether a block of nv columns ends in a one-panel tile (qv_conv_tiles: 4-panel tiles,
 * 3 as 2 + 1) of <= QVT_MAX columns, run with the rows in the lanes -> its first column
 * (from the block's), or -1. */
static inline long qvt_tail_start(long nv) {
    const long np = (nv + QG_NR - 1) / QG_NR;
    return (np % 4 == 1 || np % 4 == 3) && nv - (np - 1) * QG_NR <= QVT_MAX
        ? (np - 1) * QG_NR : -1;
}

#if QE_X86 && QV_HAVE
/* One A panel's 6 x 32 VNNI tiles (mr rows from m0, ap) over the pixels [j0, j0 + nv) of a
 * block: B packed in bblk, or (implicit-GEMM plans, qg_conv_plan.goff) read in place from
 * the nc4 image (xp + 4 * column, group g at + goff[g]). AVX-512: a last tile of 3 panels
 * runs as 16 + 8 pixels (qvc_index); integer and float epilogues in registers. */
static inline void qv_conv_tiles_of(const qg_conv_plan *p, const qg_conv *g, const uint8_t *ap,
                                    const uint8_t *bblk, int mr, long m0, long j0, long nv,
                                    const qe_epi *e, void *y, const uint8_t *z,
                                    const int32_t *pat, const int avx512) {
    const long N = p->Nf, G = p->G, es = e->out_f32 ? 4 : 1, bs = G * QG_BBYTES;
    const long np = (nv + QG_NR - 1) / QG_NR;
    const int int_out = avx512 && qv_int_out(e, z), float_out = avx512 && qv_float_out(e);
    int32_t acc[QV_PANELS * QV_MR * QG_NR];
    for (long pj = 0; pj < np;) {
        int npan = np - pj < QV_PANELS ? (int)(np - pj) : QV_PANELS;
        if (avx512 && npan == 3) npan = 2;
        long n0 = j0 + pj * QG_NR, nvalid = nv - pj * QG_NR;
        if (nvalid > npan * QG_NR) nvalid = npan * QG_NR;
        const int shape = qvc_index(mr, npan);
        const uint8_t *bp = p->goff ? g->xp + 4 * n0 : bblk + pj * bs;
        uint8_t *yo = (uint8_t *)y + m0 * N + n0;
        const uint8_t *zo = z ? z + m0 * N + n0 : NULL;
        pj += npan;
        if (pat && npan == 1) {   /* the last <= QVT_MAX columns, rows in the lanes */
            int32_t tail[QV_PANELS * QV_MR * QG_NR] = {0};
            qvt_sums(G, ap, pat, (int)nvalid, tail);
            qv_tile_out(tail, mr, nvalid, e, m0, n0, (char *)y + (m0 * N + n0) * es, N, zo, 1);
            continue;
        }
        if (int_out) {   /* requantized in registers, straight into y */
            if (p->goff) qvci_u8[shape](G, ap, bp, p->goff, npan, mr, nvalid, e, m0, yo, N);
            else qvc_u8[shape](G, ap, bp, bs, npan, mr, nvalid, e, m0, yo, N);
            continue;
        }
        if (float_out) {   /* the float epilogue (residual) in registers */
            if (p->goff) qvci_fz[shape](G, ap, bp, p->goff, npan, mr, nvalid, e, m0, yo, zo, N);
            else qvc_fz[shape](G, ap, bp, bs, npan, mr, nvalid, e, m0, yo, zo, N);
            continue;
        }
        if (p->goff) qvci_acc[shape](G, ap, bp, p->goff, npan, acc);
        else (avx512 ? qvc_acc[shape] : QG_QA_CONV)(G, ap, bp, bs, npan, acc);
        qv_tile_out(acc, mr, nvalid, e, m0, n0, (char *)y + (m0 * N + n0) * es, N, zo, avx512);
    }
}

/* The rows' conv_tiles: the AVX-512 VNNI tiles, and AVX-VNNI's 6 x 32 on ymm */
static void qv_conv_tiles(const qg_conv_plan *p, const qg_conv *g, const uint8_t *ap,
                          const uint8_t *bblk, int mr, long m0, long j0, long nv,
                          const qe_epi *e, void *y, const uint8_t *z, const int32_t *pat) {
    qv_conv_tiles_of(p, g, ap, bblk, mr, m0, j0, nv, e, y, z, pat, 1);
}
static void qa_conv_tiles(const qg_conv_plan *p, const qg_conv *g, const uint8_t *ap,
                          const uint8_t *bblk, int mr, long m0, long j0, long nv,
                          const qe_epi *e, void *y, const uint8_t *z, const int32_t *pat) {
    qv_conv_tiles_of(p, g, ap, bblk, mr, m0, j0, nv, e, y, z, pat, 0);
}

/* The AVX-512 VNNI row's conv_implicit: the 6 x 32 tiles read the nc4 image where it
 * lies (goff), a block's last columns' patterns in ws + 64. */
static void qv_conv_implicit(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                             const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, long jb,
                             long je, long mb, long me) {
    const long M = p->M, G = p->G;
    int32_t *pat = (int32_t *)(ws + 64);
    for (long j0 = jb; j0 < je; j0 += p->nc) {
        const long nv = je - j0 < p->nc ? je - j0 : p->nc, t0 = qvt_tail_start(nv);
        if (t0 >= 0)   /* the last columns' patterns, once for every 6-row panel */
            qvt_patterns(G, g->xp, p->goff, j0 + t0, (int)(nv - t0), pat);
        for (long m0 = mb; m0 < me; m0 += QG_MR)
            qv_conv_tiles(p, g, wp + (m0 / QG_MR) * G * QG_ABYTES, NULL,
                          M - m0 < QG_MR ? (int)(M - m0) : QG_MR, m0, j0, nv, e, y, z,
                          t0 >= 0 ? pat : NULL);
    }
}
#endif

#if QE_X86 && QV_HAVE
/* The pixel-tile row's conv_implicit: output pixels [jb, je) x channels [mb, me) (mb a
 * multiple of 32) in 7 x 32 tiles over the shifted nc4 image, wp the 32-channel blocks'
 * weights. The
 * integer and float epilogues and the float output (activation none / Relu / Clip) in
 * registers; any other (per-column constants, a u8 output's post affine, other
 * activations) per channel row through qe_span_c. */
static void qvp_conv_range(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                           const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, long jb,
                           long je, long mb, long me) {
    (void)ws;
    const long N = p->N, G = p->G, es = e->out_f32 ? 4 : 1;
    const int int_out = qv_int_out(e, z), float_out = qv_float_out(e);
    const int f32_out = e->out_f32 && !e->per_col
                        && (e->act == EDGENN_ACT_NONE || e->act == EDGENN_ACT_RELU || e->act == EDGENN_ACT_CLIP);
    const long block = G * 4 * QVP_CH;   /* a block's weight bytes */
    for (long m0 = mb; m0 < me; m0 += QVP_CH) {
        const int mc = me - m0 < QVP_CH ? (int)(me - m0) : QVP_CH;
        const uint8_t *w = wp + (m0 / QVP_CH) * block;
        const int next = m0 + QVP_CH < me;
        for (long n0 = jb, t = 0; n0 < je; n0 += QVP_PX, t++) {
            const int r = je - n0 < QVP_PX ? (int)(je - n0) : QVP_PX;
            const uint8_t *b = g->xp + 4 * n0;
            /* tiles 0-3 prefetch the next block's quarters */
            const uint8_t *pf = next && t < 4 ? w + block + t * G * 32 : NULL;
            const uint8_t *zo = z ? z + m0 * N + n0 : NULL;
            if (int_out) {
                qvp_u8(G, w, b, p->goff, pf, r, mc, e, m0, (uint8_t *)y + m0 * N + n0, N);
                continue;
            }
            if (float_out) {
                qvp_fz(G, w, b, p->goff, pf, r, mc, e, m0, (uint8_t *)y + m0 * N + n0, zo, N);
                continue;
            }
            if (f32_out) {
                qvp_f32(G, w, b, p->goff, pf, r, mc, e, m0, (float *)y + m0 * N + n0, zo, N);
                continue;
            }
            int32_t acc[QVP_PX * QVP_CH], row[QVP_PX];
            qvp_acc(G, w, b, p->goff, pf, acc);
            for (int l = 0; l < mc; l++) {
                for (int i = 0; i < r; i++) row[i] = acc[i * QVP_CH + l];
                qe_span_c(row, r, e, m0 + l, n0, (char *)y + ((m0 + l) * N + n0) * es,
                          z ? zo + l * N : NULL);
            }
        }
    }
}
#endif

/* Output pixels [jb, je) and output channels [mb, me) of one image, one group: y (M, N)
 * (u8 or float, row stride N elements) = epilogue(W x im2col) with W packed at wp
 * ([ceil(M/6)][G][24 bytes]); z (M, N) residual or NULL. The padded image must be filled
 * (qg_conv_fill_padded) before; threads run disjoint pixel ranges (jb a multiple of QG_NR)
 * or disjoint channel ranges (mb a multiple of QG_MR), each with its own ws. */
static void qg_conv_tile_range(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                               const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws,
                               long jb, long je, long mb, long me) {
    const qg_row *row = p->row;
    if (p->goff) {   /* implicit GEMM: the tiles read the nc4 image where it lies */
        row->conv_implicit(p, wp, g, e, y, z, ws, jb, je, mb, me);
        return;
    }
    const long M = p->M, N = p->Nf, G = p->G, es = e->out_f32 ? 4 : 1;
    const qg_ukr_t ukr = p->wide ? row->wide : row->conv_u8;
    uint8_t *bblk = ws, *rowbuf = ws + qg_conv_bblk_bytes(p);
    uint8_t *zrow = rowbuf + 4 * (p->nc + 16);
    memset(zrow, 0, p->nc + 16);
    int32_t *pat = (int32_t *)(zrow + p->nc + 16 + 64);   /* after the 64 spare bytes */
    for (long j0 = jb; j0 < je; j0 += p->nc) {
        long nv = je - j0 < p->nc ? je - j0 : p->nc;
        long np = (nv + QG_NR - 1) / QG_NR;
        qg_pack_b_conv(g, p->K, G, p->wide, p->direct, p->flat ? p->row_off : NULL, j0, nv, bblk,
                       rowbuf, zrow, row->pairs);
        /* the last columns' patterns, once for every 6-row panel */
        const long t0 = row->tail_patterns ? qvt_tail_start(nv) : -1;
        if (t0 >= 0) row->tail_patterns(G, bblk, G * QG_BBYTES, t0, (int)(nv - t0), pat);
        for (long m0 = mb; m0 < me; m0 += QG_MR) {   /* the A panel stays in L1 */
            int mr = M - m0 < QG_MR ? (int)(M - m0) : QG_MR;
            const uint8_t *ap = wp + (m0 / QG_MR) * G * QG_ABYTES;
            if (row->conv_tiles) {   /* exact tiles along the block's pixels */
                row->conv_tiles(p, g, ap, bblk, mr, m0, j0, nv, e, y, z, t0 >= 0 ? pat : NULL);
                continue;
            }
            if (row->conv_small_k && !p->wide && G <= QG_SMALL_K_GROUPS && !p->excess.start) {
                row->conv_small_k(G, ap, bblk, G * QG_BBYTES, np, m0, mr, j0,
                                  nv - (np - 1) * QG_NR, e, (char *)y + (m0 * N + j0) * es, N,
                                  z ? z + m0 * N + j0 : NULL);
                continue;
            }
            qg_excess x = qg_excess_of(&p->excess, m0 / QG_MR, QG_ABYTES);
            row->sweep(ukr, G, ap, 0, bblk, G * QG_BBYTES, np, m0, 0, mr, j0, QG_NR,
                       nv - (np - 1) * QG_NR, e, (char *)y + (m0 * N + j0) * es, N,
                       z ? z + m0 * N + j0 : NULL, &x, QG_CONV);
        }
    }
}

/* Output pixels [jb, je), every output channel (the threads' column split). */
static void qg_conv_cols(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                         const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, long jb,
                         long je) {
    qg_conv_tile_range(p, wp, g, e, y, z, ws, jb, je, 0, p->M);
}

/* Thread t of nt: its share of the output channels, whole 6-row panels, every pixel (the
 * threads' channel split: each reads only its panels of the weights, where split by
 * pixels each read all of them: ResNet-18 int8's 512 x 4608 weights of a 7x7 conv, 2.4
 * MB, streamed by both cores). */
static void qg_conv_rows_part(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                              const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, int t,
                              int nt) {
    long a, b;
    const long unit = p->row->ch_block;   /* the weights' blocks of channels */
    qg_share((p->M + unit - 1) / unit, t, nt, &a, &b);
    if (a < b)
        qg_conv_tile_range(p, wp, g, e, y, z, ws, 0, p->Nf, a * unit,
                           b * unit < p->M ? b * unit : p->M);
}

/* flat plans: off[k] = where im2col row k starts in the padded image, or (phased) in its
 * tap's phase plane, at the tap's phase offset (K values). */
static void qg_conv_row_offsets(const qg_conv *g, long K, long *off) {
    const long khw = (long)g->kh * g->kw, plane = (long)g->Hq * g->Wq;
    for (long k = 0; k < K; k++) {
        const long c = k / khw, ti = (k % khw) / g->kw, tj = k % g->kw;
        if (g->phased) {
            const long ri = ti * g->dh, rj = tj * g->dw;
            off[k] = ((c * g->sh + ri % g->sh) * g->sw + rj % g->sw) * plane
                     + (ri / g->sh) * g->Wq + rj / g->sw;
        } else {
            off[k] = (c * g->Hp + ti * g->dh) * g->Wp + tj * g->dw;
        }
    }
}

/* M planes of oh rows of ow elements (es bytes each), moved between the output's layout
 * (rows ow apart, planes oh * ow) and the flat plan's computed columns (rows the pitch
 * apart, planes Nf): to_flat 0 y <- yf (qg_conv_compact), 1 zf <- z (qg_conv_expand; the
 * pitch - ow columns between rows are left as they are: their outputs are dropped). Rows
 * by inline 16 / 8 / 4-byte steps, the last one overlapping (qg_copy_run): rows are short,
 * 7-56 bytes in ResNet-18, so a memcpy call per row is mostly call overhead. */
static void qg_conv_repitch(const qg_conv_plan *p, const qg_conv *g, const char *src, char *dst,
                            long es, int to_flat, long m0, long m1) {
    const long row = g->ow * es, pitch = qg_conv_pitch(g) * es;
    const long sstep = to_flat ? row : pitch, dstep = to_flat ? pitch : row;
    const long splane = (to_flat ? g->oh * g->ow : p->Nf) * es;
    const long dplane = (to_flat ? p->Nf : g->oh * g->ow) * es;
    for (long m = m0; m < m1; m++) {
        const char *s = src + m * splane;
        char *d = dst + m * dplane;
        for (long oy = 0; oy < g->oh; oy++, s += sstep, d += dstep)
            qg_copy_run((uint8_t *)d, (const uint8_t *)s, (int)row, 0);
    }
}

/* flat plans: y (M, oh, ow) <- the computed columns yf (M, Nf), es bytes per element;
 * thread t of nt moves its share of the M planes */
static void qg_conv_compact_part(const qg_conv_plan *p, const qg_conv *g, const char *yf,
                                 char *y, long es, int t, int nt) {
    long a, b;
    qg_share(p->M, t, nt, &a, &b);
    qg_conv_repitch(p, g, yf, y, es, 0, a, b);
}

static void qg_conv_compact(const qg_conv_plan *p, const qg_conv *g, const char *yf, char *y,
                            long es) {
    qg_conv_compact_part(p, g, yf, y, es, 0, 1);
}

/* flat plans with a residual: z (M, oh, ow) u8 -> zf (M, Nf) in the computed columns'
 * layout (the inverse of qg_conv_compact); thread t of nt moves its share of the planes */
static void qg_conv_expand_part(const qg_conv_plan *p, const qg_conv *g, const uint8_t *z,
                                uint8_t *zf, int t, int nt) {
    long a, b;
    qg_share(p->M, t, nt, &a, &b);
    qg_conv_repitch(p, g, (const char *)z, (char *)zf, 1, 1, a, b);
}

static void qg_conv_expand(const qg_conv_plan *p, const qg_conv *g, const uint8_t *z,
                           uint8_t *zf) {
    qg_conv_expand_part(p, g, z, zf, 0, 1);
}

/* The whole image on the calling thread; yf: the flat plan's computed columns (M x Nf
 * elements), NULL otherwise (and for flat plans whose pitch is ow: written into y); zf:
 * with a residual z, its copy in that layout (M x Nf bytes). */
static void qg_conv_run(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                        const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, void *yf,
                        uint8_t *zf) {
    if (!p->direct) qg_conv_fill_padded(g);
    if (p->flat && yf) {   /* (yf NULL: the columns are y's own layout, pitch == ow) */
        if (z) qg_conv_expand(p, g, z, zf);
        qg_conv_cols(p, wp, g, e, yf, z ? zf : NULL, ws, 0, p->Nf);
        qg_conv_compact(p, g, (const char *)yf, (char *)y, e->out_f32 ? 4 : 1);
        return;
    }
    qg_conv_cols(p, wp, g, e, y, z, ws, 0, p->N);
}

/* ---------------------------------------------------------------- QGemm driver */

static long qg_gemm_block(long M, long G) {
    long mc = 128 * 1024 / (G * 4) / QG_MR * QG_MR;
    if (mc < QG_MR) mc = QG_MR;
    long m6 = (M + QG_MR - 1) / QG_MR * QG_MR;
    return mc < m6 ? mc : m6;
}

static long qg_gemm_workspace(const qg_gemm_plan *p) { return p->mc * p->G * 4 + 64; }

/* Rows [i0, i0 + mr) of A (u8, row stride lda) -> A panels over the full K (zero rows and
 * k past the matrix). wide: widened to s16 pairs. */
static void qg_pack_a_gemm(const uint8_t *a, long lda, long K, long G, int wide, long i0,
                           long mr, uint8_t *dst) {
    const int kg = wide ? 2 : 4;
    for (long p = 0; p < mr; p += QG_MR) {
        uint8_t *d = dst + (p / QG_MR) * G * QG_ABYTES;
        for (int r = 0; r < QG_MR; r++) {
            const uint8_t *src = p + r < mr ? a + (i0 + p + r) * lda : NULL;
            for (long grp = 0; grp < G; grp++) {
                uint8_t *slot = d + grp * QG_ABYTES + r * 4;
                if (!wide) {
                    if (src && grp * 4 + 4 <= K) {
                        memcpy(slot, src + grp * 4, 4);
                    } else {
                        for (int q = 0; q < 4; q++) {
                            long k = grp * 4 + q;
                            slot[q] = src && k < K ? src[k] : 0;
                        }
                    }
                } else {
                    int16_t *s16 = (int16_t *)slot;
                    for (int q = 0; q < kg; q++) {
                        long k = grp * kg + q;
                        s16[q] = src && k < K ? src[k] : 0;
                    }
                }
            }
        }
    }
}

/* One row's 8 sums of B panel `panel` += its excess; ar: the row in its A panel. */
static void qg_excess_add_row(const qg_excess_table *t, long panel, const uint8_t *ar,
                              int32_t *acc8) {
    qg_excess x = qg_excess_of(t, panel, QG_BBYTES);
    for (long i = 0; i < x.n; i++) {
        const uint8_t *u = ar + (long)x.group[i] * QG_ABYTES;
        const int8_t *w = (const int8_t *)(x.data + i * QG_BBYTES);
        for (int j = 0; j < QG_NR; j++)
            acc8[j] += (int32_t)u[0] * w[j * 4] + (int32_t)u[1] * w[j * 4 + 1]
                       + (int32_t)u[2] * w[j * 4 + 2] + (int32_t)u[3] * w[j * 4 + 3];
    }
}

/* The AVX2 rows' gemm_rows: rows [m_first, m_end) of the packed A block (u8 path, past
 * its whole 6-row panels), one row x 32 columns at a time. */
#if QE_X86
static void qg_gemm_rows_avx2(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *ws,
                              long i0, long m_first, long m_end, const qe_epi *e, void *y,
                              const uint8_t *z) {
    const long N = p->N, G = p->G, es = e->out_f32 ? 4 : 1, bps = G * QG_BBYTES;
    int32_t acc4[4 * QG_NR];
    for (long m0 = m_first; m0 < m_end; m0++) {
        const uint8_t *ar = ws + (m0 / QG_MR) * G * QG_ABYTES + (m0 % QG_MR) * 4;
        long m = i0 + m0;
        for (long pj = p->pb; pj < p->pe; pj += 4) {
            long n0 = pj * QG_NR;
            if (n0 >= N) break;
            long nr = N - n0 < 4 * QG_NR ? N - n0 : 4 * QG_NR;
            qg_ukr_u8_gemm_1x4_avx2(G, ar, bp + pj * bps, bps, acc4);
            for (long q = 0; q < 4 && pj + q < p->NP; q++)
                qg_excess_add_row(&p->excess, pj + q, ar, acc4 + q * QG_NR);
            qe_span(acc4, nr, e, m, n0, (char *)y + (m * N + n0) * es,
                    z ? z + m * N + n0 : NULL, 1);
        }
    }
}
#endif

#if QE_X86 && QV_HAVE
/* The VNNI rows' gemm_tiles: 6 x 32 tiles of the packed A block (mc rows from i0) across
 * the B panels [pb, pe) (NP, a multiple of 4, covers N). */
static inline void qv_gemm_tiles_of(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *ws,
                                    long i0, long mc, const qe_epi *e, void *y,
                                    const uint8_t *z, const int avx512) {
    const long N = p->N, G = p->G, es = e->out_f32 ? 4 : 1, bps = G * QG_BBYTES;
    int32_t acc[QV_PANELS * QV_MR * QG_NR];
    for (long pj = p->pb; pj < p->pe && pj * QG_NR < N; pj += QV_PANELS) {
        long n0 = pj * QG_NR, nvalid = N - n0 < QV_PANELS * QG_NR ? N - n0 : QV_PANELS * QG_NR;
        for (long ap = 0; ap * QG_MR < mc; ap++) {
            int mr = mc - ap * QG_MR < QG_MR ? (int)(mc - ap * QG_MR) : QG_MR;
            long m = i0 + ap * QG_MR;
            (avx512 ? qv_ukr_gemm_6x32 : QG_QA_GEMM)(G, ws + ap * G * QG_ABYTES, bp + pj * bps,
                                                    bps, QV_PANELS, acc);
            qv_tile_out(acc, mr, nvalid, e, m, n0, (char *)y + (m * N + n0) * es, N,
                        z ? z + m * N + n0 : NULL, avx512);
        }
    }
}
static void qv_gemm_tiles(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *ws, long i0,
                          long mc, const qe_epi *e, void *y, const uint8_t *z) {
    qv_gemm_tiles_of(p, bp, ws, i0, mc, e, y, z, 1);
}
static void qa_gemm_tiles(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *ws, long i0,
                          long mc, const qe_epi *e, void *y, const uint8_t *z) {
    qv_gemm_tiles_of(p, bp, ws, i0, mc, e, y, z, 0);
}
#endif

/* y (M, N) (row stride N elements) = epilogue(A (M, K) u8, row stride lda, x B packed at
 * bp ([NP][G][32 bytes])); z (M, N) or NULL. */
static void qg_gemm_run(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *a, long lda,
                        const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws) {
    const qg_row *row = p->row;
    const long M = p->M, N = p->N, G = p->G, es = e->out_f32 ? 4 : 1;
    const qg_ukr_t ukr = p->wide ? row->wide : row->gemm_u8;
    const long bps = G * QG_BBYTES;
    for (long i0 = 0; i0 < M; i0 += p->mc) {
        long mc = M - i0 < p->mc ? M - i0 : p->mc;
        qg_pack_a_gemm(a, lda, p->K, G, p->wide, i0, mc, ws);
        if (row->gemm_tiles) {
            row->gemm_tiles(p, bp, ws, i0, mc, e, y, z);
            continue;
        }
        long mfull = row->gemm_rows && !p->wide ? mc / QG_MR * QG_MR : mc;
        /* full 6-row panels: 6 x 8 tiles, each B panel reused across the A panels */
        long npan = (mfull + QG_MR - 1) / QG_MR;
        for (long pj = p->pb; npan && pj < p->pe && pj * QG_NR < N; pj++) {
            long n0 = pj * QG_NR, nr = N - n0 < QG_NR ? N - n0 : QG_NR;
            qg_excess x = qg_excess_of(&p->excess, pj, QG_BBYTES);
            row->sweep(ukr, G, ws, G * QG_ABYTES, bp + pj * bps, 0, npan, i0, QG_MR,
                       (int)(mfull - (npan - 1) * QG_MR), n0, 0, nr, e,
                       (char *)y + (i0 * N + n0) * es, N, z ? z + i0 * N + n0 : NULL, &x,
                       QG_GEMM);
        }
        if (mfull < mc) row->gemm_rows(p, bp, ws, i0, mfull, mc, e, y, z);
    }
}

#endif
