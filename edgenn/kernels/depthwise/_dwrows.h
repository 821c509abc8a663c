/* Depthwise 2-D convolution straight on NCHW planes, the output pixels of a row in the
 * vector lanes ("rows"), for _dwrows.pyx.
 *
 * x (N, C, H, W), w (C, KH * KW) -> y (N, C, OH, OW) = act(conv + bias (+ z)), act none /
 * Relu / Clip. Per plane (n, c): the zero-padded plane split into its SW column phases
 * (_phases.h; the borders filled once, only the interior copied) so that tap (i, j) of a
 * row of outputs is one unit-stride vector load at row oy * SH + i * DH, phase
 * (j * DW) % SW, offset ox + (j * DW) / SW; then per output row, its ceil(OW / L) vectors
 * in balanced tiles of <= 4, each tap one broadcast weight (3x3: nine weight vectors held
 * in registers per plane) times NV loads. No interleaving of channels and no transposes
 * (the c8 kernel, _dwc8.h, spends them on every plane); tails by masked / spilled stores.
 * Per output: bias, then the taps in row-major order, one FMA each, then + z, then the
 * activation, on every row of the table.
 *
 * Three widths, one body (_dwrows_vec.h), the rows of dwr_rows (below): AVX2 8 lanes (a 7x7
 * plane's rows fill 7 of 8), AVX-512F 16 lanes (14x14: 14 of 16) and ARM64 NEON 4 lanes
 * (max / min as x86's, _neon.h, so every width computes the same bits); the tuner keeps
 * the better one per layer.
 */
#ifndef EDGENN_DWROWS_H
#define EDGENN_DWROWS_H
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_epilogue.h"
#include "_phases.h"

#define DWR_ACTS EDGENN_ACTS_CLAMP     /* a clamp or nothing */
#define DWR_MAX_TAPS 256

typedef struct {
    const float *x, *w, *bias, *z;  /* bias (C,) or NULL; z like y or NULL */
    float *y;
    long N, C, H, W, KH, KW, SH, SW, DH, DW, PT, PL, OH, OW;
    long Hp, Wq;                    /* the phase plane (Hp, SW, Wq) of one thread */
    int act;
    float lo, hi;
} dwr_args;

/* Floats of one phase plane for vectors of L lanes: rows (Hp), phase width Wq. */
static inline void dwr_plane(const dwr_args *a, long L, long *hp, long *wq)
{
    long rows = (a->OH - 1) * a->SH + (a->KH - 1) * a->DH + 1;
    long span = (a->OW + L - 1) / L * L + (a->KW - 1) * a->DW / a->SW;
    long fill = (a->PL + a->W + a->SW - 1) / a->SW;
    *hp = rows > a->PT + a->H ? rows : a->PT + a->H;
    *wq = span > fill ? span : fill;
}

#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
/* AVX2: 8 floats */
#define DWR_V __m256
#define DWR_L 8
#define DWR_ATTR EDGENN_AVX2
#define DWR_LOAD _mm256_loadu_ps
#define DWR_STOREU _mm256_storeu_ps
#define DWR_SET1 _mm256_set1_ps
#define DWR_FMA _mm256_fmadd_ps
#define DWR_ADD _mm256_add_ps
#define DWR_MAX _mm256_max_ps
#define DWR_MIN _mm256_min_ps
#define DWR_MASKED 0
/* (a, b) = 16 consecutive floats -> ev = the 8 even ones, od = the 8 odd ones */
#define DWR_DEINTERLEAVE(A, B, EV, OD) do {                                            \
        const __m256 a_ = (A), b_ = (B);                                               \
        EV = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(                  \
            _mm256_shuffle_ps(a_, b_, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));              \
        OD = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(                  \
            _mm256_shuffle_ps(a_, b_, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));              \
    } while (0)
#define DWR_TILE dwr_tile8
#define DWR_PLANES dwr_planes8
#define DWR_FILL dwr_fill8
#define DWR_OUT dwr_out8
#define DWR_TILE3 dwr_tile3_8
#include "_dwrows_vec.h"
/* AVX-512F: 16 floats, masked tails */
#define DWR_V __m512
#define DWR_L 16
#define DWR_ATTR EDGENN_AVX512
#define DWR_LOAD _mm512_loadu_ps
#define DWR_STOREU _mm512_storeu_ps
#define DWR_SET1 _mm512_set1_ps
#define DWR_FMA _mm512_fmadd_ps
#define DWR_ADD _mm512_add_ps
#define DWR_MAX _mm512_max_ps
#define DWR_MIN _mm512_min_ps
#define DWR_MASKED 1
#define DWR_DEINTERLEAVE(A, B, EV, OD) do {                                            \
        const __m512i ie_ = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, \
                                              24, 26, 28, 30);                          \
        const __m512i io_ = _mm512_add_epi32(ie_, _mm512_set1_epi32(1));               \
        const __m512 a_ = (A), b_ = (B);                                               \
        EV = _mm512_permutex2var_ps(a_, ie_, b_);                                      \
        OD = _mm512_permutex2var_ps(a_, io_, b_);                                      \
    } while (0)
#define DWR_TILE dwr_tile16
#define DWR_PLANES dwr_planes16
#define DWR_FILL dwr_fill16
#define DWR_OUT dwr_out16
#define DWR_TILE3 dwr_tile3_16
#include "_dwrows_vec.h"
#endif

/* ARM64 NEON: 4 floats, tails through the spill; 4-vector tiles of 3x3 keep the nine
 * weights, four accumulators and the bounds in 16 of the 32 registers */
#include "_neon.h"
#if EDGENN_NEON
#define DWR_V float32x4_t
#define DWR_L 4
#define DWR_ATTR
#define DWR_LOAD vld1q_f32
#define DWR_STOREU vst1q_f32
#define DWR_SET1 vdupq_n_f32
#define DWR_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define DWR_ADD vaddq_f32
#define DWR_MAX edgenn_vmaxq
#define DWR_MIN edgenn_vminq
#define DWR_MASKED 0
#define DWR_DEINTERLEAVE(A, B, EV, OD) do {                                            \
        const float32x4_t a_ = (A), b_ = (B);                                          \
        EV = vuzp1q_f32(a_, b_);                                                       \
        OD = vuzp2q_f32(a_, b_);                                                       \
    } while (0)
#define DWR_TILE dwr_tile4
#define DWR_PLANES dwr_planes4
#define DWR_FILL dwr_fill4
#define DWR_OUT dwr_out4
#define DWR_TILE3 dwr_tile3_4
#include "_dwrows_vec.h"
#endif

/* The family's table: one row per width (the body's planes loop: planes [p0, p1) of the
 * N * C, with the phase plane P of this thread), best last. No portable row: the specs
 * need the row's tier. */
typedef struct {
    const char *name;        /* depthwise_rows<lanes>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    long lanes;
    void (*planes)(const dwr_args *a, float *P, long p0, long p1);
} dwr_row;

static const dwr_row dwr_rows[] = {
#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
    {"depthwise_rows8__avx2", EDGENN_ISA_AVX2, 8, dwr_planes8},
    {"depthwise_rows16__avx512f", EDGENN_ISA_AVX512, 16, dwr_planes16},
#endif
#if EDGENN_NEON
    {"depthwise_rows4__neon", EDGENN_ISA_NEON, 4, dwr_planes4},
#endif
};
#define DWR_ROW_COUNT ((int)(sizeof dwr_rows / sizeof dwr_rows[0]))
#endif
