/* Vector math shared by the C kernels (sgemm epilogues, row ops, recurrent cells): AVX2+FMA
 * 8 floats, AVX-512F 16, ARM64 NEON 4; the same steps and constants on every width. Each
 * user compiles these only inside its own tier-gated code (runtime CPU check). */
#ifndef EDGENN_SIMD_MATH_H
#define EDGENN_SIMD_MATH_H
#include <math.h>
#include "_simd.h"
#include "_neon.h"

/* Cephes' exp: n = round(x log2 e), r = x - n ln 2 (ln 2 split in two), exp(x) = 2^n p(r)
 * with p(r) = 1 + r + r^2 (P0 r^5 + P1 r^4 + ... + P5); one set of constants for every
 * width below. */
#define SIMD_LOG2E 1.44269504088896341f
#define SIMD_LN2_HI 0.693359375f
#define SIMD_LN2_LO (-2.12194440e-4f)
#define SIMD_EXP_P0 1.9875691500e-4f
#define SIMD_EXP_P1 1.3981999507e-3f
#define SIMD_EXP_P2 8.3334519073e-3f
#define SIMD_EXP_P3 4.1665795894e-2f
#define SIMD_EXP_P4 1.6666665459e-1f
#define SIMD_EXP_P5 5.0000001201e-1f

/* exp(v), scalar, the same Cephes steps as simd_exp8 (inputs clamped to [-87, 88]): the
 * portable builds and the row tails of the vector ones. */
static inline float simd_exp1(float v)
{
    v = v < -87.0f ? -87.0f : v;
    v = v > 88.0f ? 88.0f : v;
    float fn = floorf(v * SIMD_LOG2E + 0.5f);
    float r = v - fn * SIMD_LN2_HI - fn * SIMD_LN2_LO;
    float q = SIMD_EXP_P0;
    q = q * r + SIMD_EXP_P1;
    q = q * r + SIMD_EXP_P2;
    q = q * r + SIMD_EXP_P3;
    q = q * r + SIMD_EXP_P4;
    q = q * r + SIMD_EXP_P5;
    q = q * r * r + r + 1.0f;
    return ldexpf(q, (int)fn);
}

#if 1   /* every architecture: SIMDe supplies the intrinsics off x86 (_simd.h) */

/* exp(x) for x in about [-87, 88] (clamped), Cephes-style: 2^n * p(r), rel err ~2e-7. */
EDGENN_AVX2 static inline __m256 simd_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(SIMD_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(SIMD_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(SIMD_LN2_LO), r);
    __m256 p = _mm256_set1_ps(SIMD_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SIMD_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SIMD_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SIMD_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SIMD_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(SIMD_EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                   _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* erf(x), rational approximation on [-4, 4] (clamped; |error| ~1e-7). */
EDGENN_AVX2 __attribute__((always_inline))
static inline __m256 simd_erf8(__m256 x)
{
    /* the constant first: max/min return their second operand on NaN */
    __m256 v = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_max_ps(_mm256_set1_ps(-4.0f), x));
    __m256 x2 = _mm256_mul_ps(v, v);
    __m256 p = _mm256_fmadd_ps(x2, _mm256_set1_ps(-2.72614225801306e-10f),
                               _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-1.60960333262415e-02f));
    __m256 q = _mm256_fmadd_ps(x2, _mm256_set1_ps(-1.45660718464996e-05f),
                               _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.42647390514189e-02f));
    return _mm256_div_ps(_mm256_mul_ps(v, p), q);
}

#ifdef EDGENN_HAS_AVX512_INTRINSICS
/* exp(x) on 16 floats: simd_exp8's steps, AVX-512F (x86 and the SIMDe builds) */
EDGENN_AVX512 __attribute__((always_inline))
static inline __m512 simd_exp16(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(SIMD_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(SIMD_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(SIMD_LN2_LO), r);
    __m512 p = _mm512_set1_ps(SIMD_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SIMD_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SIMD_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SIMD_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SIMD_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SIMD_EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n),
                                                   _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
#endif
#endif

#if EDGENN_NEON
/* exp(x) on 4 floats: simd_exp8's steps (clamp with x86's max / min, so NaN clamps as
 * there; round to nearest even; each fnmadd / fmadd one rounding) */
static inline __attribute__((always_inline)) float32x4_t simd_exp4(float32x4_t x)
{
    x = edgenn_vminq(edgenn_vmaxq(x, vdupq_n_f32(-87.3f)), vdupq_n_f32(88.3f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, SIMD_LOG2E));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(SIMD_LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(SIMD_LN2_LO));
    float32x4_t p = vdupq_n_f32(SIMD_EXP_P0);
    p = vfmaq_f32(vdupq_n_f32(SIMD_EXP_P1), p, r);
    p = vfmaq_f32(vdupq_n_f32(SIMD_EXP_P2), p, r);
    p = vfmaq_f32(vdupq_n_f32(SIMD_EXP_P3), p, r);
    p = vfmaq_f32(vdupq_n_f32(SIMD_EXP_P4), p, r);
    p = vfmaq_f32(vdupq_n_f32(SIMD_EXP_P5), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* erf(x) on 4 floats: simd_erf8's clamp (the constant first, so NaN passes through),
 * polynomials and division, each fmadd one rounding */
static inline __attribute__((always_inline)) float32x4_t simd_erf4(float32x4_t x)
{
    const float32x4_t v = edgenn_vminq(vdupq_n_f32(4.0f), edgenn_vmaxq(vdupq_n_f32(-4.0f), x));
    const float32x4_t x2 = vmulq_f32(v, v);
    float32x4_t p = vfmaq_f32(vdupq_n_f32(2.77068142495902e-08f), x2,
                              vdupq_n_f32(-2.72614225801306e-10f));
    p = vfmaq_f32(vdupq_n_f32(-2.10102402082508e-06f), x2, p);
    p = vfmaq_f32(vdupq_n_f32(-5.69250639462346e-05f), x2, p);
    p = vfmaq_f32(vdupq_n_f32(-7.34990630326855e-04f), x2, p);
    p = vfmaq_f32(vdupq_n_f32(-2.95459980854025e-03f), x2, p);
    p = vfmaq_f32(vdupq_n_f32(-1.60960333262415e-02f), x2, p);
    float32x4_t q = vfmaq_f32(vdupq_n_f32(-2.13374055278905e-04f), x2,
                              vdupq_n_f32(-1.45660718464996e-05f));
    q = vfmaq_f32(vdupq_n_f32(-1.68282697438203e-03f), x2, q);
    q = vfmaq_f32(vdupq_n_f32(-7.37332916720468e-03f), x2, q);
    q = vfmaq_f32(vdupq_n_f32(-1.42647390514189e-02f), x2, q);
    return vdivq_f32(vmulq_f32(v, p), q);
}
#endif
#endif
