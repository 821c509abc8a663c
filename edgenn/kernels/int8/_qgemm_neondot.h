/* qgemm_u8s8_6x8__neondot: the 6 x 8 int8 tile on ARM64's dot product (SDOT, Armv8.2
 * DotProd: Cortex-A55 / A75 and later, Neoverse, Apple), on the panels every row packs
 * (_qgemm.h: A [group][6 rows][4 bytes], B [group][8 columns][4 bytes]).
 *
 * SDOT multiplies s8 by s8, and one operand is u8 (the conv's pixels, the gemm's
 * activations), so that operand goes in as u ^ 0x80 = u - 128 and the sums are corrected:
 *   sum_k u w = sum_k (u - 128) w + 128 sum_k w,
 * the weights' sums taken by SDOT with ones alongside (per A row for the conv, per B
 * column for the gemm). Every step is exact in s32 (no saturation, unlike vpmaddubsw), so
 * the row takes any 8-bit weights as they are and its sums are the other rows' integers.
 * Accumulators: 6 rows x 2 vectors of 4 columns, each row's 4 bytes taken by lane
 * (SDOT by element) from the A group's 16 + 8 bytes. */
#ifndef EDGENN_QGEMM_NEONDOT_H
#define EDGENN_QGEMM_NEONDOT_H

#include "_neon.h"

#if EDGENN_NEON && defined(__aarch64__) && !defined(EDGENN_SIMDE)
#define QND_HAVE 1
#define QND_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

/* out (6 x 8, row-major) = the A panel x the B panel over ng groups; conv: A signed (the
 * weights), B unsigned; else A unsigned, B signed */
QND_TARGET static inline void qnd_tile(long ng, const uint8_t *a, const uint8_t *b,
                                       int32_t *out, const int conv) {
    const uint8x16_t flip = vdupq_n_u8(0x80);
    const int8x16_t ones = vdupq_n_s8(1);
    int32x4_t c[6][2], sum03 = vdupq_n_s32(0), sum45 = vdupq_n_s32(0), col0 = sum03,
                       col1 = sum03;
    for (int r = 0; r < 6; r++) c[r][0] = c[r][1] = vdupq_n_s32(0);
    for (long g = 0; g < ng; g++, a += 24, b += 32) {
        int8x16_t a03 = vreinterpretq_s8_u8(vld1q_u8(a));
        int8x16_t a45 = vreinterpretq_s8_u8(vcombine_u8(vld1_u8(a + 16), vdup_n_u8(0)));
        int8x16_t b0 = vreinterpretq_s8_u8(vld1q_u8(b));
        int8x16_t b1 = vreinterpretq_s8_u8(vld1q_u8(b + 16));
        if (conv) {   /* the pixels shifted; the weights' row sums */
            b0 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_s8(b0), flip));
            b1 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_s8(b1), flip));
            sum03 = vdotq_s32(sum03, a03, ones);
            sum45 = vdotq_s32(sum45, a45, ones);
        } else {      /* the activations shifted; the weights' column sums */
            a03 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_s8(a03), flip));
            a45 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_s8(a45), flip));
            col0 = vdotq_s32(col0, b0, ones);
            col1 = vdotq_s32(col1, b1, ones);
        }
#define QND_ROW(r, A, l)                                                                          \
        c[r][0] = vdotq_laneq_s32(c[r][0], b0, A, l);                                             \
        c[r][1] = vdotq_laneq_s32(c[r][1], b1, A, l);
        QND_ROW(0, a03, 0) QND_ROW(1, a03, 1) QND_ROW(2, a03, 2) QND_ROW(3, a03, 3)
        QND_ROW(4, a45, 0) QND_ROW(5, a45, 1)
#undef QND_ROW
    }
    int32_t rows[8];
    vst1q_s32(rows, vshlq_n_s32(sum03, 7));
    vst1q_s32(rows + 4, vshlq_n_s32(sum45, 7));
    const int32x4_t k0 = vshlq_n_s32(col0, 7), k1 = vshlq_n_s32(col1, 7);
    for (int r = 0; r < 6; r++) {
        const int32x4_t add0 = conv ? vdupq_n_s32(rows[r]) : k0;
        const int32x4_t add1 = conv ? vdupq_n_s32(rows[r]) : k1;
        vst1q_s32(out + r * 8, vaddq_s32(c[r][0], add0));
        vst1q_s32(out + r * 8 + 4, vaddq_s32(c[r][1], add1));
    }
}

/* the row's conv_u8 / gemm_u8 entries (qg_ukr_t) */
QND_TARGET static void qnd_ukr_conv(long ng, const uint8_t *a, const uint8_t *b, int32_t *out) {
    qnd_tile(ng, a, b, out, 1);
}
QND_TARGET static void qnd_ukr_gemm(long ng, const uint8_t *a, const uint8_t *b, int32_t *out) {
    qnd_tile(ng, a, b, out, 0);
}
#else
#define QND_HAVE 0
#endif

#endif
