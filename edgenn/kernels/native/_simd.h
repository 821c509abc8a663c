/* The x86 SIMD intrinsics the AVX2 kernel bodies are written in, on every architecture.
 *
 * x86-64: the compiler's own <immintrin.h>; the AVX2+FMA functions carry EDGENN_AVX2 (a
 * target attribute) and run only where the one probe (_cpu.h) says the CPU has them.
 * Elsewhere (aarch64, ...), and in the tests' emulated builds (EDGENN_SIMDE, any CPU, the
 * AVX-512 intrinsics too): the same intrinsics from SIMDe, mapped onto the target's own
 * vectors (NEON on ARM64), EDGENN_AVX2 empty; so the sources build on any architecture.
 * The probe reports no x86 tier there, so those bodies are not dispatched to: the
 * portable C runs (a NEON tier built from these bodies is the next step).
 */
#ifndef EDGENN_SIMD_H
#define EDGENN_SIMD_H

#if (defined(__x86_64__) || defined(__i386__)) && !defined(EDGENN_SIMDE)
#include <immintrin.h>
#define EDGENN_AVX2 __attribute__((target("avx2,fma")))
#define EDGENN_AVX512 __attribute__((target("avx2,fma,avx512f")))
#define EDGENN_HAS_AVX512_INTRINSICS 1
#else
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx2.h>
#include <simde/x86/fma.h>
#ifdef EDGENN_SIMDE   /* the tests' emulated builds: AVX-512 too, on any CPU */
#include <simde/x86/avx512.h>
#define EDGENN_HAS_AVX512_INTRINSICS 1
/* SIMDe's portable masked float loads and stores touch all 16 lanes (a store writes the
 * masked-off ones as zeros): past the end of a short row. These touch only k's lanes. */
static inline void edgenn_mask_storeu_ps(void *mem, simde__mmask16 k, simde__m512 a) {
    float lanes[16];
    simde_mm512_storeu_ps(lanes, a);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) ((float *)mem)[i] = lanes[i];
}
static inline simde__m512 edgenn_maskz_loadu_ps(simde__mmask16 k, const void *mem) {
    float lanes[16];
    for (int i = 0; i < 16; i++) lanes[i] = k >> i & 1 ? ((const float *)mem)[i] : 0.f;
    return simde_mm512_loadu_ps(lanes);
}
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(mem, k, a) edgenn_mask_storeu_ps(mem, k, a)
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, mem) edgenn_maskz_loadu_ps(k, mem)
#endif
#define EDGENN_AVX2
#define EDGENN_AVX512
/* the rounding-mode constants, which SIMDe's native aliases leave out */
#define _MM_FROUND_TO_NEAREST_INT SIMDE_MM_FROUND_TO_NEAREST_INT
#define _MM_FROUND_TO_NEG_INF SIMDE_MM_FROUND_TO_NEG_INF
#define _MM_FROUND_TO_POS_INF SIMDE_MM_FROUND_TO_POS_INF
#define _MM_FROUND_TO_ZERO SIMDE_MM_FROUND_TO_ZERO
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif

/* r[i] lane j <-> r[j] lane i (8 x 8 floats): pairs, quads, then 128-bit halves. */
EDGENN_AVX2 static inline __attribute__((always_inline)) void simd_transpose8_ps(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
        r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
}

#ifdef EDGENN_HAS_AVX512_INTRINSICS
/* r[i] lane j <-> r[j] lane i (16 x 16 floats): pairs, quads, then 128-bit lanes. */
EDGENN_AVX512 static inline __attribute__((always_inline)) void simd_transpose16_ps(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {   /* u[i + j]: column j (+4, +8, +12) of rows i..i+3 */
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {       /* 128-bit lane L of the four row groups */
        __m512 e0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        __m512 e1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        __m512 o0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
        __m512 o1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
        t[j] = _mm512_shuffle_f32x4(e0, e1, 0x88);
        t[j + 8] = _mm512_shuffle_f32x4(e0, e1, 0xDD);
        t[j + 4] = _mm512_shuffle_f32x4(o0, o1, 0x88);
        t[j + 12] = _mm512_shuffle_f32x4(o0, o1, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}
#endif

#endif
