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

#endif
