/* ARM64 Advanced SIMD (NEON) row of edgenn's packed sgemm (sgemm.h): sgemm_6x16__neon.
 *
 * The 6 x 16 tile on the shared panels in 24 q-register accumulators: per k, 4 loads of
 * B (16 floats), A's 6 values as a 4-lane and a 2-lane load, 24 FMAs by lane (fmla
 * v.4s, v.s[i]); 30 of the 32 vector registers. The whole tile is computed (a panel's
 * padding rows are zeros) and its mr x nr corner stored. The sums are FMA chains over k
 * in the order of every other row. The epilogue: on a full tile, bias / residual /
 * clamp in registers, as the x86 rows do it (max, then min, a NaN sum clamped to the
 * bound like maxps); otherwise the tile is spilled to the shared scalar epilogue.
 *
 * Built natively on aarch64, and on SIMDe's NEON in the tests' emulated x86 build
 * (_sgemm_emu), so an x86 machine runs this body too.
 */
#ifndef EDGENN_SGEMM_NEON_H
#define EDGENN_SGEMM_NEON_H

#include "sgemm.h"

#include "_neon.h"
#define SG_NEON EDGENN_NEON

#if SG_NEON
static void sg_ukr_neon(long kc, const float *a, const float *b, long ldb, float *c, long ldc,
                        int mr, int nr, int accum, int last, const sg_epi *e, long m0,
                        long n0) {
    const float32x4_t z = vdupq_n_f32(0.f);
    float32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    float32x4_t c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    float32x4_t c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
#define SG_FMA4(A0, A1, A2, A3, FMA)                                              \
    A0 = FMA(A0, b0); A1 = FMA(A1, b1); A2 = FMA(A2, b2); A3 = FMA(A3, b3);
    for (long k = 0; k < kc; k++, a += SG_MR, b += ldb) {
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4);
        const float32x4_t b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
        const float32x4_t a03 = vld1q_f32(a);
        const float32x2_t a45 = vld1_f32(a + 4);
#define SG_L0(acc, bv) vfmaq_laneq_f32(acc, bv, a03, 0)
#define SG_L1(acc, bv) vfmaq_laneq_f32(acc, bv, a03, 1)
#define SG_L2(acc, bv) vfmaq_laneq_f32(acc, bv, a03, 2)
#define SG_L3(acc, bv) vfmaq_laneq_f32(acc, bv, a03, 3)
#define SG_L4(acc, bv) vfmaq_lane_f32(acc, bv, a45, 0)
#define SG_L5(acc, bv) vfmaq_lane_f32(acc, bv, a45, 1)
        SG_FMA4(c00, c01, c02, c03, SG_L0)
        SG_FMA4(c10, c11, c12, c13, SG_L1)
        SG_FMA4(c20, c21, c22, c23, SG_L2)
        SG_FMA4(c30, c31, c32, c33, SG_L3)
        SG_FMA4(c40, c41, c42, c43, SG_L4)
        SG_FMA4(c50, c51, c52, c53, SG_L5)
#undef SG_L0
#undef SG_L1
#undef SG_L2
#undef SG_L3
#undef SG_L4
#undef SG_L5
    }
#undef SG_FMA4
    if (mr == SG_MR && nr == SG_NR && last && !accum && e->act <= EDGENN_ACT_CLIP &&
        !e->bias_col) {
        /* the common 1x1-conv epilogue, all in registers: + bias_row (+ Z), clamp, store */
        const int clamp = e->act != EDGENN_ACT_NONE;
        const float32x4_t lo = vdupq_n_f32(e->act == EDGENN_ACT_CLIP ? e->p0 : 0.f);
        const float32x4_t hi = vdupq_n_f32(e->act == EDGENN_ACT_CLIP ? e->p1 : INFINITY);
#define SG_OUT(R, A0, A1, A2, A3)                                                       \
        {                                                                               \
            float32x4_t v[4] = {A0, A1, A2, A3};                                        \
            float *cr = c + R * ldc;                                                    \
            for (int j = 0; j < 4; j++) {                                               \
                if (e->bias_row) v[j] = vaddq_f32(v[j], vdupq_n_f32(e->bias_row[m0 + R])); \
                if (e->z) v[j] = vaddq_f32(v[j], vld1q_f32(e->z + (m0 + R) * e->ldz + n0 + 4 * j)); \
                if (clamp) v[j] = vminnmq_f32(vmaxnmq_f32(v[j], lo), hi);               \
                vst1q_f32(cr + 4 * j, v[j]);                                            \
            }                                                                           \
        }
        SG_OUT(0, c00, c01, c02, c03) SG_OUT(1, c10, c11, c12, c13)
        SG_OUT(2, c20, c21, c22, c23) SG_OUT(3, c30, c31, c32, c33)
        SG_OUT(4, c40, c41, c42, c43) SG_OUT(5, c50, c51, c52, c53)
#undef SG_OUT
        return;
    }
    float buf[SG_MR * SG_NR];   /* any other corner or epilogue: the shared scalar store */
#define SG_SPILL(R, A0, A1, A2, A3)                                                     \
    vst1q_f32(buf + R * SG_NR, A0); vst1q_f32(buf + R * SG_NR + 4, A1);                 \
    vst1q_f32(buf + R * SG_NR + 8, A2); vst1q_f32(buf + R * SG_NR + 12, A3);
    SG_SPILL(0, c00, c01, c02, c03) SG_SPILL(1, c10, c11, c12, c13)
    SG_SPILL(2, c20, c21, c22, c23) SG_SPILL(3, c30, c31, c32, c33)
    SG_SPILL(4, c40, c41, c42, c43) SG_SPILL(5, c50, c51, c52, c53)
#undef SG_SPILL
    sg_store_scalar(buf, c, ldc, mr, nr, accum, last, e, m0, n0);
}
#endif

#endif
