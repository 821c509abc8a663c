/* The one CPU-feature probe of edgenn's C kernels, and the ISA tiers it yields.
 *
 * x86-64: CPUID leaf 1 / leaf 7 (subleaf 0 and 1) for the instruction sets, XGETBV for
 * the register state the OS saves (XCR0 bits 1-2: xmm/ymm; 5-7: opmask and zmm), as
 * onnxruntime's MLAS does: a CPU that has AVX-512 under an OS that does not save zmm
 * state must not run it. aarch64: NEON is architectural; the dot-product instructions
 * (sdot / udot) from the kernel's HWCAP_ASIMDDP.
 *
 * Tiers, in the order of EDGENN_MAX_ISA's cap:
 *   x86:   scalar < avx2 (AVX2 + FMA) < avxvnni (+ AVX-VNNI, VEX vpdpbusd: recent client
 *          CPUs, some AVX-512 ones) < avx512 (F, BW, VL, DQ) < avx512vnni
 *   arm64: scalar < neon < neondot
 * Each contains the ones before it except avxvnni, which is a feature of its own: an
 * AVX-512 CPU may lack it (many do, AVX-512 VNNI or not), so a kernel of that tier asks
 * edgenn_isa_x86(EDGENN_ISA_AVXVNNI), which checks the feature too.
 * EDGENN_MAX_ISA=<tier> caps the tier every kernel sees (oneDNN's ONEDNN_MAX_CPU_ISA
 * idea): read once, at the first probe; an unknown name caps nothing (isa.py rejects it
 * with a clear error before any kernel runs).
 */
#ifndef EDGENN_CPU_H
#define EDGENN_CPU_H

#include <stdlib.h>
#include <string.h>

enum {
    EDGENN_ISA_SCALAR = 0,
    EDGENN_ISA_AVX2 = 1,
    EDGENN_ISA_AVXVNNI = 2,
    EDGENN_ISA_AVX512 = 3,
    EDGENN_ISA_AVX512VNNI = 4,
    EDGENN_ISA_NEON = 11,
    EDGENN_ISA_NEONDOT = 12,
};

/* feature bits (edgenn_cpu_features) */
enum {
    EDGENN_F_AVX2 = 1 << 0, EDGENN_F_FMA = 1 << 1, EDGENN_F_AVX512F = 1 << 2,
    EDGENN_F_AVX512BW = 1 << 3, EDGENN_F_AVX512VL = 1 << 4, EDGENN_F_AVX512DQ = 1 << 5,
    EDGENN_F_AVX512VNNI = 1 << 6, EDGENN_F_AVXVNNI = 1 << 7, EDGENN_F_NEON = 1 << 8,
    EDGENN_F_DOTPROD = 1 << 9, EDGENN_F_OS_YMM = 1 << 10, EDGENN_F_OS_ZMM = 1 << 11,
};

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
static unsigned long long edgenn_xgetbv0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
static int edgenn_cpu_probe(void) {
    unsigned int a, b, c, d;
    int f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
    if (!osxsave) return 0;
    unsigned long long xcr0 = edgenn_xgetbv0();
    if ((xcr0 & 0x6) == 0x6) f |= EDGENN_F_OS_YMM;
    if ((xcr0 & 0xe6) == 0xe6) f |= EDGENN_F_OS_ZMM;
    if (fma) f |= EDGENN_F_FMA;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1) f |= EDGENN_F_AVX2;
    if ((b >> 16) & 1) f |= EDGENN_F_AVX512F;
    if ((b >> 17) & 1) f |= EDGENN_F_AVX512DQ;
    if ((b >> 30) & 1) f |= EDGENN_F_AVX512BW;
    if ((b >> 31) & 1) f |= EDGENN_F_AVX512VL;
    if ((c >> 11) & 1) f |= EDGENN_F_AVX512VNNI;
    __cpuid_count(7, 1, a, b, c, d);
    if ((a >> 4) & 1) f |= EDGENN_F_AVXVNNI;
    return f;
}
static int edgenn_tier_of(int f) {
    if (!(f & EDGENN_F_OS_YMM) || (f & (EDGENN_F_AVX2 | EDGENN_F_FMA)) != (EDGENN_F_AVX2 | EDGENN_F_FMA))
        return EDGENN_ISA_SCALAR;
    const int avx512 = EDGENN_F_AVX512F | EDGENN_F_AVX512BW | EDGENN_F_AVX512VL | EDGENN_F_AVX512DQ;
    if (!(f & EDGENN_F_OS_ZMM) || (f & avx512) != avx512)
        return f & EDGENN_F_AVXVNNI ? EDGENN_ISA_AVXVNNI : EDGENN_ISA_AVX2;
    return f & EDGENN_F_AVX512VNNI ? EDGENN_ISA_AVX512VNNI : EDGENN_ISA_AVX512;
}
#elif defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
static int edgenn_cpu_probe(void) {
    int f = EDGENN_F_NEON;
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) f |= EDGENN_F_DOTPROD;
    return f;
}
static int edgenn_tier_of(int f) {
    return f & EDGENN_F_DOTPROD ? EDGENN_ISA_NEONDOT : EDGENN_ISA_NEON;
}
#else
static int edgenn_cpu_probe(void) { return 0; }
static int edgenn_tier_of(int f) { (void)f; return EDGENN_ISA_SCALAR; }
#endif

/* The tiers' names (EDGENN_MAX_ISA, kernel tables, edgenn.kernels.isa) */
static const struct { const char *name; int tier; } edgenn_isa_names[] = {
    {"scalar", EDGENN_ISA_SCALAR}, {"avx2", EDGENN_ISA_AVX2},
    {"avxvnni", EDGENN_ISA_AVXVNNI}, {"avx512", EDGENN_ISA_AVX512},
    {"avx512vnni", EDGENN_ISA_AVX512VNNI}, {"neon", EDGENN_ISA_NEON},
    {"neondot", EDGENN_ISA_NEONDOT}};
#define EDGENN_ISA_COUNT ((int)(sizeof edgenn_isa_names / sizeof edgenn_isa_names[0]))

/* A tier's name ("" for no tier) */
static inline const char *edgenn_isa_name(int t) {
    for (int i = 0; i < EDGENN_ISA_COUNT; i++)
        if (edgenn_isa_names[i].tier == t) return edgenn_isa_names[i].name;
    return "";
}

/* EDGENN_MAX_ISA as a tier (-1: not set or unknown) */
static int edgenn_isa_from_name(const char *s) {
    if (!s || !*s) return -1;
    for (int i = 0; i < EDGENN_ISA_COUNT; i++)
        if (!strcmp(s, edgenn_isa_names[i].name)) return edgenn_isa_names[i].tier;
    return -1;
}

/* The tier kernels may use: the host's, capped by EDGENN_MAX_ISA (a cap from the other
 * architecture, or "scalar", leaves only the portable code). Cached after the first call. */
static int edgenn_isa(void) {
    static int tier = -1;
    if (tier < 0) {
        int host = edgenn_tier_of(edgenn_cpu_probe());
        int cap = edgenn_isa_from_name(getenv("EDGENN_MAX_ISA"));
        int t = host;
        if (cap >= 0) {
            int same_arch = (cap >= EDGENN_ISA_NEON) == (host >= EDGENN_ISA_NEON);
            if (cap == EDGENN_ISA_SCALAR || !same_arch) t = EDGENN_ISA_SCALAR;
            else if (cap < host) t = cap;
            /* a cap of avxvnni on a CPU without AVX-VNNI: AVX2 */
            if (t == EDGENN_ISA_AVXVNNI && !(edgenn_cpu_probe() & EDGENN_F_AVXVNNI))
                t = EDGENN_ISA_AVX2;
        }
        tier = t;
    }
    return tier;
}

/* True when the kernels may use x86 tier `t` (AVX2 and up): within the cap, and for
 * avxvnni only where the CPU has AVX-VNNI (an AVX-512 CPU may not). */
static inline int edgenn_isa_x86(int t) {
    static int avxvnni = -1;
    int cur = edgenn_isa();
    if (cur >= EDGENN_ISA_NEON || cur < t) return 0;
    if (t != EDGENN_ISA_AVXVNNI) return 1;
    if (avxvnni < 0) avxvnni = (edgenn_cpu_probe() & EDGENN_F_AVXVNNI) != 0;
    return avxvnni;
}

/* True when kernels of tier `t` may run here, on either architecture: scalar always; an
 * x86 tier as edgenn_isa_x86; an arm64 tier within the cap on an arm64 CPU. A table row
 * asks this for its tier (sgemm_table.h). */
static inline int edgenn_isa_usable(int t) {
    if (t == EDGENN_ISA_SCALAR) return 1;
    if (t >= EDGENN_ISA_NEON) return edgenn_isa() >= t;
    return edgenn_isa_x86(t);
}

/* 1 in the tests' emulated builds (EDGENN_SIMDE: the SIMD bodies compiled on SIMDe for the
 * baseline target, so any CPU runs every row), else 0. */
#ifdef EDGENN_SIMDE
#define EDGENN_EMULATED 1
#else
#define EDGENN_EMULATED 0
#endif

/* Whether a family table's row of tier `t` runs in this build: every row in an emulated
 * build, else where the probe allows its tier (edgenn_isa_usable, EDGENN_MAX_ISA applied).
 * Every family asks this for its rows. */
static inline int edgenn_row_usable(int t) { return EDGENN_EMULATED || edgenn_isa_usable(t); }

#endif
