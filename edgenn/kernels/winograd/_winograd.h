/* Winograd F(m x m, 3 x 3) transforms for NCHW float32, m in {2, 4, 6} (alpha = m + 2).
 * The math and the GEMM between the two transforms live in winograd.py.
 *
 * Tiles: output tile (ty, tx) of image n covers output rows ty*m .. ty*m+m-1 and columns
 * tx*m .. tx*m+m-1; its input patch starts at (ty*m - ph, tx*m - pw). th x tw tiles per
 * image; the "tile rows" of all images form one sequence g = n*th + ty. A block is the
 * tile rows [row0, row0 + nrows); its tiles are numbered t = (g - row0)*tw + tx, Tb in all.
 *
 *   V (alpha^2, C, Tb)  V[i*alpha + j, c, t] = (B^T d B)[i, j] for tile t of channel c
 *   M (alpha^2, K, Tb)  M[xi] = U[xi] (K x C) @ V[xi] (C x Tb), done by BLAS
 *   y (N, K, OH, OW)    y = act(A^T m A + bias + z), clipped to the output's edge
 *
 * Each 2-D transform is two 1-D passes. Input: the W pass (tiles overlap, stride m) runs
 * once per input row into P (rows, alpha, twp) laid out by tile, then the H pass is
 * unit-stride over tiles. Output: the H pass first (unit-stride over tiles in M), then the
 * W pass whose m results per tile are interleaved back into a row. All passes vectorize
 * over 8 tiles (AVX2+FMA, chosen at run time), 4 (ARM64 NEON) or 1 (portable scalar build
 * of the same template). The 1-D transforms are the closed forms of B^T and A^T below.
 */
#ifndef EDGENN_WINOGRAD_H
#define EDGENN_WINOGRAD_H
#include "_cpu.h"
#include "_epilogue.h"
#include <stddef.h>
#include <string.h>
#include "_simd.h"

/* ---- 1-D transforms o = B^T d (alpha -> alpha) and o = A^T s (alpha -> m) ----------------
 * Written over the op set of the including template: VADD, VSUB, VMULC(a, c) = a*c,
 * VFMAC(a, c, b) = a*c + b, with c a float constant. */

#define IN1D_2(d, o) do {                                                              \
    o[0] = VSUB(d[0], d[2]); o[1] = VADD(d[1], d[2]);                                   \
    o[2] = VSUB(d[2], d[1]); o[3] = VSUB(d[1], d[3]); } while (0)

#define IN1D_4(d, o) do {                                                              \
    VT a_ = VSUB(d[4], d[2]), b_ = VSUB(d[3], d[1]);                                    \
    o[0] = VFMAC(d[0], 4.f, VFMAC(d[2], -5.f, d[4]));                                   \
    o[1] = VFMAC(VADD(d[1], d[2]), -4.f, VADD(d[3], d[4]));                             \
    o[2] = VFMAC(VSUB(d[1], d[2]), 4.f, VSUB(d[4], d[3]));                              \
    o[3] = VFMAC(b_, 2.f, a_);                                                          \
    o[4] = VFMAC(b_, -2.f, a_);                                                         \
    o[5] = VFMAC(d[1], 4.f, VFMAC(d[3], -5.f, d[5])); } while (0)

#define IN1D_6(d, o) do {                                                              \
    VT t1_ = VFMAC(d[4], -4.25f, VADD(d[2], d[6]));                                     \
    VT t2_ = VFMAC(d[3], -4.25f, VADD(d[1], d[5]));                                     \
    VT t3_ = VFMAC(d[2], 0.25f, VFMAC(d[4], -1.25f, d[6]));                             \
    VT t4_ = VFMAC(d[1], 0.5f, VFMAC(d[3], -2.5f, VMULC(d[5], 2.f)));                   \
    VT t5_ = VFMAC(VFMAC(d[4], -1.25f, d[2]), 4.f, d[6]);                               \
    VT t6_ = VFMAC(d[1], 2.f, VFMAC(d[3], -2.5f, VMULC(d[5], 0.5f)));                   \
    o[0] = VFMAC(VSUB(d[4], d[2]), 5.25f, VSUB(d[0], d[6]));                            \
    o[1] = VADD(t1_, t2_); o[2] = VSUB(t1_, t2_);                                       \
    o[3] = VADD(t3_, t4_); o[4] = VSUB(t3_, t4_);                                       \
    o[5] = VADD(t5_, t6_); o[6] = VSUB(t5_, t6_);                                       \
    o[7] = VFMAC(VSUB(d[3], d[5]), 5.25f, VSUB(d[7], d[1])); } while (0)

#define OUT1D_2(s, o) do {                                                             \
    o[0] = VADD(VADD(s[0], s[1]), s[2]); o[1] = VSUB(VSUB(s[1], s[2]), s[3]); } while (0)

#define OUT1D_4(s, o) do {                                                             \
    VT a_ = VADD(s[1], s[2]), b_ = VSUB(s[1], s[2]);                                    \
    VT c_ = VADD(s[3], s[4]), d_ = VSUB(s[3], s[4]);                                    \
    o[0] = VADD(VADD(s[0], a_), c_);                                                    \
    o[1] = VFMAC(d_, 2.f, b_);                                                          \
    o[2] = VFMAC(c_, 4.f, a_);                                                          \
    o[3] = VADD(VFMAC(d_, 8.f, b_), s[5]); } while (0)

#define OUT1D_6(s, o) do {                                                             \
    VT a1_ = VADD(s[1], s[2]), b1_ = VSUB(s[1], s[2]);                                  \
    VT a2_ = VADD(s[3], s[4]), b2_ = VSUB(s[3], s[4]);                                  \
    VT a3_ = VADD(s[5], s[6]), b3_ = VSUB(s[5], s[6]);                                  \
    o[0] = VADD(VADD(s[0], a1_), VADD(a2_, a3_));                                       \
    o[1] = VFMAC(b3_, 0.5f, VFMAC(b2_, 2.f, b1_));                                      \
    o[2] = VFMAC(a3_, 0.25f, VFMAC(a2_, 4.f, a1_));                                     \
    o[3] = VFMAC(b3_, 0.125f, VFMAC(b2_, 8.f, b1_));                                    \
    o[4] = VFMAC(a3_, 0.0625f, VFMAC(a2_, 16.f, a1_));                                  \
    o[5] = VADD(VFMAC(b3_, 0.03125f, VFMAC(b2_, 32.f, b1_)), s[7]); } while (0)

/* fused activations; others are applied afterwards in NumPy (winograd.py) */
#define WINO_ACTS (EDGENN_ACTS_CLAMP | EDGENN_ACT_BIT(EDGENN_ACT_LEAKYRELU) | \
                   EDGENN_ACT_BIT(EDGENN_ACT_HARDSIGMOID) | EDGENN_ACT_BIT(EDGENN_ACT_HARDSWISH))

static inline float act1(float v, int act, float p0, float p1) {
    switch (act) {
    case EDGENN_ACT_RELU: return v > 0.f ? v : 0.f;
    case EDGENN_ACT_CLIP: return v < p0 ? p0 : (v > p1 ? p1 : v);
    case EDGENN_ACT_LEAKYRELU: return v >= 0.f ? v : v * p0;
    case EDGENN_ACT_HARDSIGMOID: { float h = v * p0 + p1; return h < 0.f ? 0.f : (h > 1.f ? 1.f : h); }
    case EDGENN_ACT_HARDSWISH: { float h = v * (1.f / 6.f) + 0.5f;
                       return v * (h < 0.f ? 0.f : (h > 1.f ? 1.f : h)); }
    default: return v;
    }
}

/* ---- portable build: one tile per "vector" -------------------------------------------- */
#define ISA scalar
#define ATTR
#define NL 1
#define VT float
#define VLOAD(p) (*(p))
#define VSTORE(p, v) (*(p) = (v))
#define VSTORE_N(p, v, n) ((void)(n), *(p) = (v))
#define LOAD_TILES(m, src, d) do { for (int k_ = 0; k_ < (m) + 2; k_++) d[k_] = (src)[k_]; } while (0)
#define GATHER_SETUP(m) (void)0
#define VSET1(x) (x)
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMULC(a, c) ((a) * (c))
#define VFMAC(a, c, b) ((a) * (c) + (b))
#define VACT(v, act, p0, p1) act1(v, act, p0, p1)
#define ILV_STORE(m, dst, o) do { for (int s_ = 0; s_ < (m); s_++) (dst)[s_] = o[s_]; } while (0)
#include "_winograd_tmpl.h"

/* ---- AVX2 + FMA build: 8 tiles per vector ----------------------------------------------- */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define WINO_HAVE_AVX2 1
#define ISA avx2
#define ATTR __attribute__((target("avx2,fma")))
#define NL 8
#define VT __m256
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSTORE_N(p, v, n) ((n) >= 8 ? _mm256_storeu_ps(p, v) : store_n(p, v, n))
#define GATHER_SETUP(m) const __m256i gidx_ = _mm256_setr_epi32(                          \
        0, (m), 2 * (m), 3 * (m), 4 * (m), 5 * (m), 6 * (m), 7 * (m))
#define LOAD_TILES(m, src, d) LOAD_TILES_X(m, src, d)   /* expands m first */
#define LOAD_TILES_X(m, src, d) load_tiles_##m(src, d, gidx_)
#define VSET1(x) _mm256_set1_ps(x)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMULC(a, c) _mm256_mul_ps(a, _mm256_set1_ps(c))
#define VFMAC(a, c, b) _mm256_fmadd_ps(a, _mm256_set1_ps(c), b)
#define VACT(v, act, p0, p1) act8(v, act, p0, p1)
#define ILV_STORE(m, dst, o) ILV_STORE_X(m, dst, o)   /* expands m first */
#define ILV_STORE_X(m, dst, o) ilv_store_##m(dst, o)

/* the first n < 8 lanes of v to p (vmaskmovps is slow on AMD) */
ATTR static inline void store_n(float *p, __m256 v, int n) {
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int i = 0; i < n; i++) p[i] = tmp[i];
}

/* d[k][t] = src[t*m + k] for 8 tiles t and k < m + 2 (the overlapping input patches of
 * 8 consecutive tiles): in-register de-interleave for m = 2, 4, gathers for m = 6. */
ATTR static inline void load_tiles_2(const float *src, __m256 *d, __m256i gidx) {
    (void)gidx;
    for (int h = 0; h < 2; h++) {   /* d[0], d[1] from src; d[2], d[3] from src + 2 */
        __m256 lo = _mm256_loadu_ps(src + 2 * h), hi = _mm256_loadu_ps(src + 2 * h + 8);
        /* shuffle gives tiles 0 1 4 5 | 2 3 6 7; permute4x64 (0, 2, 1, 3) restores order */
        d[2 * h] = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
        d[2 * h + 1] = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
    }
}

#define WINO_LOAD2X128(p, q) _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), \
                                                  _mm_loadu_ps(q), 1)

ATTR static inline void load_tiles_4(const float *src, __m256 *d, __m256i gidx) {
    (void)gidx;
    /* v[u] = [tile u | tile u + 4] for u = 0..4 (tile 8 = the patch tail of tile 7) */
    __m256 v0 = WINO_LOAD2X128(src, src + 16), v1 = WINO_LOAD2X128(src + 4, src + 20);
    __m256 v2 = WINO_LOAD2X128(src + 8, src + 24), v3 = WINO_LOAD2X128(src + 12, src + 28);
    __m256 v4 = WINO_LOAD2X128(src + 16, src + 32);
    __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
    __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
    d[0] = _mm256_shuffle_ps(t0, t2, 0x44);
    d[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
    d[2] = _mm256_shuffle_ps(t1, t3, 0x44);
    d[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
    /* d[4], d[5]: phases 0, 1 of the patches shifted by one tile (v1, v2, v3, v4) */
    __m256 s0 = _mm256_unpacklo_ps(v1, v2), s2 = _mm256_unpacklo_ps(v3, v4);
    d[4] = _mm256_shuffle_ps(s0, s2, 0x44);
    d[5] = _mm256_shuffle_ps(s0, s2, 0xEE);
}

ATTR static inline void load_tiles_6(const float *src, __m256 *d, __m256i gidx) {
    for (int k = 0; k < 8; k++) d[k] = _mm256_i32gather_ps(src + k, gidx, 4);
}

ATTR static inline __m256 act8(__m256 v, int act, float p0, float p1) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f);
    switch (act) {
    case EDGENN_ACT_RELU: return _mm256_max_ps(v, zero);
    case EDGENN_ACT_CLIP: return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(p0)), _mm256_set1_ps(p1));
    case EDGENN_ACT_LEAKYRELU: return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(p0)),
                                            _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case EDGENN_ACT_HARDSIGMOID: return _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(
                           v, _mm256_set1_ps(p0), _mm256_set1_ps(p1)), zero), one);
    case EDGENN_ACT_HARDSWISH: return _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(
                           v, _mm256_set1_ps(1.f / 6.f), _mm256_set1_ps(0.5f)), zero), one));
    default: return v;
    }
}

/* dst[t*m + s] = o[s][t] for 8 tiles t: interleave m vectors back into an output row */
ATTR static inline void ilv_store_2(float *dst, const __m256 *o) {
    __m256 lo = _mm256_unpacklo_ps(o[0], o[1]), hi = _mm256_unpackhi_ps(o[0], o[1]);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

ATTR static inline void ilv_store_4(float *dst, const __m256 *o) {
    __m256 t0 = _mm256_unpacklo_ps(o[0], o[1]), t1 = _mm256_unpackhi_ps(o[0], o[1]);
    __m256 t2 = _mm256_unpacklo_ps(o[2], o[3]), t3 = _mm256_unpackhi_ps(o[2], o[3]);
    __m256 r0 = _mm256_shuffle_ps(t0, t2, 0x44), r1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 r2 = _mm256_shuffle_ps(t1, t3, 0x44), r3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(r0, r1, 0x20));       /* tiles 0, 1 */
    _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(r2, r3, 0x20));   /* tiles 2, 3 */
    _mm256_storeu_ps(dst + 16, _mm256_permute2f128_ps(r0, r1, 0x31));  /* tiles 4, 5 */
    _mm256_storeu_ps(dst + 24, _mm256_permute2f128_ps(r2, r3, 0x31));  /* tiles 6, 7 */
}

ATTR static inline void ilv_store_6(float *dst, const __m256 *o) {
    float tmp[6][8];
    for (int s = 0; s < 6; s++) _mm256_storeu_ps(tmp[s], o[s]);
    for (int t = 0; t < 8; t++)
        for (int s = 0; s < 6; s++) dst[t * 6 + s] = tmp[s][t];
}

#include "_winograd_tmpl.h"
#endif

/* ---- ARM64 NEON build: 4 tiles per vector ------------------------------------------------
 * The AVX2 build's operations, one rounding per VFMAC as there, max / min as x86's
 * (_neon.h). Tiles are (de)interleaved by the structure loads and stores: LD2 / LD4 and
 * ST2 / ST4 for m = 2, 4; for m = 6 (no LD6) a tile's 8 floats as pairs, LD3 / ST3 of
 * 64-bit lanes and one unzip / zip. */
#include "_neon.h"
#if EDGENN_NEON
#define WINO_HAVE_NEON 1
#define ISA neon
#define ATTR
#define NL 4
#define VT float32x4_t
#define VLOAD(p) vld1q_f32(p)
#define VSTORE(p, v) vst1q_f32(p, v)
#define VSTORE_N(p, v, n) ((n) >= 4 ? vst1q_f32(p, v) : store_n4(p, v, n))
#define GATHER_SETUP(m) (void)0
#define LOAD_TILES(m, src, d) LOAD_TILES_X(m, src, d)   /* expands m first */
#define LOAD_TILES_X(m, src, d) load_tiles4_##m(src, d)
#define VSET1(x) vdupq_n_f32(x)
#define VADD(a, b) vaddq_f32(a, b)
#define VSUB(a, b) vsubq_f32(a, b)
#define VMULC(a, c) vmulq_n_f32(a, c)
#define VFMAC(a, c, b) vfmaq_n_f32(b, a, c)
#define VACT(v, act, p0, p1) act4(v, act, p0, p1)
#define ILV_STORE(m, dst, o) ILV_STORE_X(m, dst, o)   /* expands m first */
#define ILV_STORE_X(m, dst, o) ilv_store4_##m(dst, o)

static inline void store_n4(float *p, float32x4_t v, int n) {
    float tmp[4];
    vst1q_f32(tmp, v);
    for (int i = 0; i < n; i++) p[i] = tmp[i];
}

static inline float32x4_t act4(float32x4_t v, int act, float p0, float p1) {
    const float32x4_t zero = vdupq_n_f32(0.f), one = vdupq_n_f32(1.f);
    switch (act) {
    case EDGENN_ACT_RELU: return edgenn_vmaxq(v, zero);
    case EDGENN_ACT_CLIP: return edgenn_vminq(edgenn_vmaxq(v, vdupq_n_f32(p0)), vdupq_n_f32(p1));
    case EDGENN_ACT_LEAKYRELU: return vbslq_f32(vcltq_f32(v, zero), vmulq_n_f32(v, p0), v);
    case EDGENN_ACT_HARDSIGMOID: return edgenn_vminq(edgenn_vmaxq(
                           vfmaq_n_f32(vdupq_n_f32(p1), v, p0), zero), one);
    case EDGENN_ACT_HARDSWISH: return vmulq_f32(v, edgenn_vminq(edgenn_vmaxq(
                           vfmaq_n_f32(vdupq_n_f32(0.5f), v, 1.f / 6.f), zero), one));
    default: return v;
    }
}

/* d[k][t] = src[t*m + k] for 4 tiles t and k < m + 2 (the overlapping input patches) */
static inline void load_tiles4_2(const float *src, float32x4_t *d) {
    const float32x4x2_t a = vld2q_f32(src), b = vld2q_f32(src + 2);
    d[0] = a.val[0]; d[1] = a.val[1]; d[2] = b.val[0]; d[3] = b.val[1];
}

static inline void load_tiles4_4(const float *src, float32x4_t *d) {
    const float32x4x4_t a = vld4q_f32(src), b = vld4q_f32(src + 4);
    d[0] = a.val[0]; d[1] = a.val[1]; d[2] = a.val[2]; d[3] = a.val[3];
    d[4] = b.val[0]; d[5] = b.val[1];
}

/* pair j of tile t is src[6t + 2j], src[6t + 2j + 1]: LD3 of 64-bit lanes gives pairs
 * j = 0, 1, 2 of tiles (0, 1) and (2, 3); pair 3 is pair 0 of the next tile */
static inline void load_tiles4_6(const float *src, float32x4_t *d) {
    const uint64x2x3_t a = vld3q_u64((const uint64_t *)src);
    const uint64x2x3_t b = vld3q_u64((const uint64_t *)(src + 12));
    const uint64x2x3_t c = vld3q_u64((const uint64_t *)(src + 6));
    const uint64x2x3_t e = vld3q_u64((const uint64_t *)(src + 18));
    for (int j = 0; j < 3; j++) {
        const float32x4_t lo = vreinterpretq_f32_u64(a.val[j]);
        const float32x4_t hi = vreinterpretq_f32_u64(b.val[j]);
        d[2 * j] = vuzp1q_f32(lo, hi);
        d[2 * j + 1] = vuzp2q_f32(lo, hi);
    }
    const float32x4_t lo = vreinterpretq_f32_u64(c.val[0]);
    const float32x4_t hi = vreinterpretq_f32_u64(e.val[0]);
    d[6] = vuzp1q_f32(lo, hi);
    d[7] = vuzp2q_f32(lo, hi);
}

/* dst[t*m + s] = o[s][t] for 4 tiles t: interleave m vectors back into an output row */
static inline void ilv_store4_2(float *dst, const float32x4_t *o) {
    float32x4x2_t v = {{o[0], o[1]}};
    vst2q_f32(dst, v);
}

static inline void ilv_store4_4(float *dst, const float32x4_t *o) {
    float32x4x4_t v = {{o[0], o[1], o[2], o[3]}};
    vst4q_f32(dst, v);
}

static inline void ilv_store4_6(float *dst, const float32x4_t *o) {
    uint64x2x3_t lo, hi;   /* pairs (o[2j][t], o[2j + 1][t]) of tiles 0, 1 and 2, 3 */
    for (int j = 0; j < 3; j++) {
        lo.val[j] = vreinterpretq_u64_f32(vzip1q_f32(o[2 * j], o[2 * j + 1]));
        hi.val[j] = vreinterpretq_u64_f32(vzip2q_f32(o[2 * j], o[2 * j + 1]));
    }
    vst3q_u64((uint64_t *)dst, lo);
    vst3q_u64((uint64_t *)(dst + 12), hi);
}

#include "_winograd_tmpl.h"
#endif

/* ---- the transforms' table ------------------------------------------------------------ */
typedef void (*wino_in_fn)(const float *, int, int, int, int, int, int, int, int, int, int,
                           float *, float *, float *, const float *);
typedef void (*wino_out_fn)(const float *, float *, int, int, int, int, int, int, int, int,
                            const float *, const float *, int, float, float, float *, float *);

/* One row per instruction set of the transform loops (_winograd_tmpl.h's instances):
 * in[i] / out[i] of F(m x m, 3 x 3) for m = 2, 4, 6 (i = m / 2 - 1). */
typedef struct {
    const char *name;        /* winograd_transforms__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    wino_in_fn in[3];
    wino_out_fn out[3];
} wino_row;

static const wino_row wino_rows[] = {
    {"winograd_transforms__scalar", EDGENN_ISA_SCALAR,
     {win_in_2_scalar, win_in_4_scalar, win_in_6_scalar},
     {win_out_2_scalar, win_out_4_scalar, win_out_6_scalar}},
#ifdef WINO_HAVE_AVX2
    {"winograd_transforms__avx2", EDGENN_ISA_AVX2,
     {win_in_2_avx2, win_in_4_avx2, win_in_6_avx2},
     {win_out_2_avx2, win_out_4_avx2, win_out_6_avx2}},
#endif
#ifdef WINO_HAVE_NEON
    {"winograd_transforms__neon", EDGENN_ISA_NEON,
     {win_in_2_neon, win_in_4_neon, win_in_6_neon},
     {win_out_2_neon, win_out_4_neon, win_out_6_neon}},
#endif
};
#define WINO_ROW_COUNT ((int)(sizeof wino_rows / sizeof wino_rows[0]))

static void wino_input(const wino_row *row, int m, const float *x, int C, int H, int W, int ph,
                       int pw, int th, int tw, int twp, int row0, int nrows,
                       float *V, float *P, float *xp, const float *zeros) {
    row->in[m / 2 - 1](x, C, H, W, ph, pw, th, tw, twp, row0, nrows, V, P, xp, zeros);
}

static void wino_output(const wino_row *row, int m, const float *M, float *y, int K, int OH,
                        int OW, int th, int tw, int twp, int row0, int nrows,
                        const float *bias, const float *z, int act, float p0, float p1,
                        float *Q, float *rowbuf) {
    row->out[m / 2 - 1](M, y, K, OH, OW, th, tw, twp, row0, nrows, bias, z, act, p0, p1, Q,
                        rowbuf);
}

#endif
