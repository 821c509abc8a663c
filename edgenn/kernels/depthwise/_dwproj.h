/* DepthwiseProject: a 3x3 depthwise conv (stride 1, pad 1, dilation 1) and the 1x1 conv
 * that alone reads its output, in bands of output rows, for _dwproj.pyx.
 *
 * MobileNetV2's first block (32 @ 112x112 depthwise, then 32 -> 16) ran as two layers: the
 * depthwise output (1.6 MB) went out to L2 / L3 and came back for the 1x1 conv. Here, per
 * band of `rows` output rows, the depthwise conv of every channel goes into T (C rows of
 * the band's pixels, the band small enough to stay in L1 / L2), and the 1x1 conv of T
 * goes straight into y's rows of that band: the intermediate never leaves the core.
 *
 * Depthwise, per channel and row of outputs, 8 / 16 pixels per vector read straight from
 * x (no padded copy): the taps left and right of a row's first and last vector are masked
 * loads one float before / after (a masked-off lane is neither read nor faulted), rows
 * above / below the image are skipped. Per output: bias, then the nine taps in row-major
 * order, one FMA each (as _dwrows.h), then the activation.
 * 1x1, per band: T's pixels in balanced tiles of <= 3 vectors x MB output channels
 * (AVX-512F 8 x 48 pixels, 24 accumulators; AVX2 4 x 24, 12 of its 16 registers; NEON
 * 8 x 12, 24 of its 32; per input channel 3 loads and MB broadcasts feed 3 MB FMAs),
 * every channel block of a tile while its C x 3 vectors of T are in L1; per output:
 * bias, then the C products in channel order, one FMA each, then the activation. The
 * same sums on every width.
 *
 * x (C, H, W), wd (C, 9), bd (C,), wp [ceil(M / MB)][C][MB] (zero past M), bp
 * (ceil(M / MB) * MB,), y (M, H, W). AVX2+FMA, AVX-512F and ARM64 NEON natively (the
 * one body, _dwproj_vec.h), and on SIMDe in the tests' build.
 */
#ifndef EDGENN_DWPROJ_H
#define EDGENN_DWPROJ_H
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_epilogue.h"

#define DWP_ACTS EDGENN_ACTS_CLAMP     /* a clamp or nothing */
#define DWP_NV 3     /* vectors per 1x1 tile */

typedef struct {
    const float *x, *wd, *bd, *wp, *bp;
    float *y;
    long C, H, W, M;
    long rows;       /* output rows per band */
    long tpitch;     /* floats per channel of T: rows * W rounded up to 16 */
    int dact, pact;  /* DWP_*: the depthwise and the 1x1 conv's activations */
    float dlo, dhi, plo, phi;
} dwp_args;

/* T's floats per thread */
static inline long dwp_scratch(const dwp_args *a) { return a->C * a->tpitch + 64; }

/* A row of the family's table: one vector width, its 1x1 tile of mb output channels (the
 * weight packing's block) x DWP_NV vectors of pixels, and its run over output rows
 * [r0, r1) (a thread's share). */
typedef struct {
    const char *name;        /* depthwise_project_<mb>x<pixels>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    long lanes, mb;
    void (*run)(const dwp_args *a, float *T, long r0, long r1);
} dwp_row;

#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
/* AVX2: 8 floats; masks as lane vectors (vmaskmovps loads; edge stores by a spill) */
EDGENN_AVX2 static inline __m256i dwp_lmask8(long n) {
    const long k = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
EDGENN_AVX2 static inline void dwp_storen8(float *p, __m256 v, long n) {
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, (size_t)(n < 0 ? 0 : n > 8 ? 8 : n) * sizeof(float));
}
#define DWP_V __m256
#define DWP_L 8
#define DWP_ATTR EDGENN_AVX2
#define DWP_LOAD _mm256_loadu_ps
#define DWP_STORE _mm256_storeu_ps
#define DWP_SET1 _mm256_set1_ps
#define DWP_FMA _mm256_fmadd_ps
#define DWP_MAX _mm256_max_ps
#define DWP_MIN _mm256_min_ps
#define DWP_MASK_T __m256i
#define DWP_LMASK(n) dwp_lmask8(n)
#define DWP_NOLANE0(m) _mm256_blend_epi32(m, _mm256_setzero_si256(), 1)
#define DWP_MLOAD(m, p) _mm256_maskload_ps(p, m)
#define DWP_STOREN(p, v, n) dwp_storen8(p, v, n)
#define DWP_MBW 4
#define DWP_DWNV 2
#define DWP_FN(name) dwp8_##name
#include "_dwproj_vec.h"
/* AVX-512F: 16 floats, k-masks */
EDGENN_AVX512 static inline __mmask16 dwp_lmask16(long n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
#define DWP_V __m512
#define DWP_L 16
#define DWP_ATTR EDGENN_AVX512
#define DWP_LOAD _mm512_loadu_ps
#define DWP_STORE _mm512_storeu_ps
#define DWP_SET1 _mm512_set1_ps
#define DWP_FMA _mm512_fmadd_ps
#define DWP_MAX _mm512_max_ps
#define DWP_MIN _mm512_min_ps
#define DWP_MASK_T __mmask16
#define DWP_LMASK(n) dwp_lmask16(n)
#define DWP_NOLANE0(m) ((__mmask16)((m) & ~1u))
#define DWP_MLOAD(m, p) _mm512_maskz_loadu_ps(m, p)
#define DWP_STOREN(p, v, n) _mm512_mask_storeu_ps(p, dwp_lmask16(n), v)
#define DWP_MBW 8
#define DWP_DWNV 4
/* (hi:lo) >> n floats (n 1 or 15): an inner tile's left / right taps from its aligned
 * loads, by one vpermt2ps (SIMDe 0.8 has no valignd) */
EDGENN_AVX512 static inline __m512 dwp_alignr16(__m512 hi, __m512 lo, int n) {
    const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                           11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(n));
    return _mm512_permutex2var_ps(lo, idx, hi);
}
#define DWP_ALIGNR(hi, lo, n) dwp_alignr16(hi, lo, n)
#define DWP_FN(name) dwp16_##name
#include "_dwproj_vec.h"
#endif

/* ARM64 NEON: 4 floats, max / min as x86's (_neon.h: the same bits as the x86 rows). No
 * masked loads: a row's edge vectors read their lanes one by one through a spill. */
#include "_neon.h"
#if EDGENN_NEON
static inline uint32x4_t dwp_lmask4(long n) {
    static const uint32_t lane[4] = {0, 1, 2, 3};
    const long k = n < 0 ? 0 : n > 4 ? 4 : n;
    return vcltq_u32(vld1q_u32(lane), vdupq_n_u32((uint32_t)k));
}
static inline float32x4_t dwp_mload4(uint32x4_t m, const float *p) {
    uint32_t on[4];
    float t[4];
    vst1q_u32(on, m);
    for (int i = 0; i < 4; i++) t[i] = on[i] ? p[i] : 0.f;
    return vld1q_f32(t);
}
static inline void dwp_storen4(float *p, float32x4_t v, long n) {
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, (size_t)(n < 0 ? 0 : n > 4 ? 4 : n) * sizeof(float));
}
#define DWP_V float32x4_t
#define DWP_L 4
#define DWP_ATTR
#define DWP_LOAD vld1q_f32
#define DWP_STORE vst1q_f32
#define DWP_SET1 vdupq_n_f32
#define DWP_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define DWP_MAX edgenn_vmaxq
#define DWP_MIN edgenn_vminq
#define DWP_MASK_T uint32x4_t
#define DWP_LMASK(n) dwp_lmask4(n)
#define DWP_NOLANE0(m) vsetq_lane_u32(0, m, 0)
#define DWP_MLOAD(m, p) dwp_mload4(m, p)
#define DWP_STOREN(p, v, n) dwp_storen4(p, v, n)
#define DWP_MBW 8
#define DWP_DWNV 4
/* (hi:lo) >> n floats, n a constant: one EXT */
#define DWP_ALIGNR(hi, lo, n) vextq_f32(lo, hi, n)
#define DWP_FN(name) dwp4_##name
#include "_dwproj_vec.h"
#endif

/* The table, best last; no portable row (the specs need the row's tier). */
static const dwp_row dwp_rows[] = {
#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
    {"depthwise_project_4x24__avx2", EDGENN_ISA_AVX2, 8, 4, dwp8_run},
    {"depthwise_project_8x48__avx512f", EDGENN_ISA_AVX512, 16, 8, dwp16_run},
#endif
#if EDGENN_NEON
    {"depthwise_project_8x12__neon", EDGENN_ISA_NEON, 4, 8, dwp4_run},
#endif
};
#define DWP_ROW_COUNT ((int)(sizeof dwp_rows / sizeof dwp_rows[0]))
#endif
