/* ARM64 Advanced SIMD (NEON) for the families' NEON rows: arm_neon.h on aarch64, SIMDe's
 * NEON in the tests' emulated builds (EDGENN_SIMDE, any CPU, so an x86 machine runs those
 * bodies too); EDGENN_NEON says whether the rows are built.
 *
 * edgenn_vmaxq / edgenn_vminq are x86's maxps / minps: the second operand where the
 * comparison is false (a NaN in the first gives the second: a NaN sum clamps to the
 * bound), where NEON's fmax / fmin would return the NaN; so a NEON row computes the bits
 * an x86 row does.
 */
#ifndef EDGENN_NEON_H
#define EDGENN_NEON_H

#if defined(__aarch64__) && !defined(EDGENN_SIMDE)
#include <arm_neon.h>
#define EDGENN_NEON 1
#elif defined(EDGENN_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/arm/neon.h>
#define EDGENN_NEON 1
#else
#define EDGENN_NEON 0
#endif

#if EDGENN_NEON
static inline __attribute__((always_inline)) float32x4_t edgenn_vmaxq(float32x4_t a,
                                                                     float32x4_t b)
{
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}

static inline __attribute__((always_inline)) float32x4_t edgenn_vminq(float32x4_t a,
                                                                     float32x4_t b)
{
    return vbslq_f32(vcltq_f32(a, b), a, b);
}
#endif

#endif
