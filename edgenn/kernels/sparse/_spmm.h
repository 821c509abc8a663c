/* Sparse 1x1 convolution (SpMM): y (M, S) = act(W x + bias + z), W (M, K) sparse in CSR,
 * x (K, S) and z, y (M, S) dense, float32, for one image (S = H * W pixels). The
 * "Fast Sparse ConvNets" / XNNPACK kind: the spatial axis is the vector axis, so a
 * nonzero w[m, k] is one broadcast and T / L fused multiply-adds over a tile of T pixels
 * of row k of x; the T-pixel accumulators of one output channel stay in registers over
 * all its nonzeros, then get the epilogue and are stored once.
 *
 * Loop order: tiles of pixels outside, output channels inside, so the K x T slab of x a
 * tile reads stays in cache for all M channels. Sums run over the nonzeros of a row in
 * increasing k, one FMA chain per pixel (the dense kernels' order, zeros skipped).
 *
 * CSR: row_ptr (M + 1), off (nnz) where the x row of each nonzero starts, val (nnz) its
 * weight.
 * The register tiles (T pixels: AVX2 8 / 16 / 32 on 1-4 ymm, AVX-512F 16 / 32 / 64 on 1-4
 * zmm) are the rows of the family's table (spmm_table.h: sp_row); a row without a tile
 * runs the portable loops. Activation: EDGENN_ACT_NONE, _RELU or _CLIP (clamp lo, hi).
 */
#ifndef EDGENN_SPMM_H
#define EDGENN_SPMM_H

#include <stdint.h>
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_epilogue.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(EDGENN_SIMDE)
#define SP_AVX512 __attribute__((target("avx2,fma,avx512f")))
#define SP_X86 1
#elif defined(EDGENN_SIMDE)      /* tests: the AVX2 / AVX-512 bodies on SIMDe, any CPU */
#define SP_AVX512
#define SP_X86 1
#else
#define SP_X86 0
#endif

#define SP_ACTS EDGENN_ACTS_CLAMP     /* a clamp or nothing */

typedef struct {
    const int *row_ptr;
    const long *off;          /* (nnz,) where the x row of each nonzero starts: k * S for
                                 a 1x1 conv, or a tap-shifted row of a padded image */
    const float *val;
    const float *bias;        /* (M,) or NULL */
    const float *z;           /* (M, S) residual or NULL */
    int act;
    float lo, hi;             /* the clamp of RELU (0, +inf) and CLIP (p0, p1) */
    int paired;               /* rows 2i, 2i + 1 share their nonzero positions (the tiles
                                 then load each x vector once for both; _spmm_tile.h) */
} sp_epi;

static inline float sp_clamp(float v, const sp_epi *e)
{
    if (e->act == EDGENN_ACT_NONE) return v;
    v = v < e->lo ? e->lo : v;
    return v > e->hi ? e->hi : v;
}

/* Portable: tiles of up to 32 pixels, plain C the compiler may vectorize. */
static void spmm_generic(const float *x, float *y, long M, long S, const sp_epi *e)
{
    enum { T = 32 };
    float acc[T];
    for (long s0 = 0; s0 < S; s0 += T) {
        const long n = S - s0 < T ? S - s0 : T;
        for (long m = 0; m < M; m++) {
            const float b = e->bias ? e->bias[m] : 0.0f;
            for (long t = 0; t < n; t++) acc[t] = b;
            for (int j = e->row_ptr[m]; j < e->row_ptr[m + 1]; j++) {
                const float w = e->val[j];
                const float *xr = x + e->off[j] + s0;
                for (long t = 0; t < n; t++) acc[t] += w * xr[t];
            }
            float *yr = y + m * S + s0;
            const float *zr = e->z ? e->z + m * S + s0 : 0;
            for (long t = 0; t < n; t++)
                yr[t] = sp_clamp(zr ? acc[t] + zr[t] : acc[t], e);
        }
    }
}

#if SP_X86
#define SP_CAT_(a, b) a##b
#define SP_CAT(a, b) SP_CAT_(a, b)
/* AVX2 (ymm): 4 vectors = 32 pixels, or 1 / 2 vectors = 8 / 16 */
#define SP_V __m256
#define SP_L 8
#define SP_ATTR EDGENN_AVX2
#define SP_SET1 _mm256_set1_ps
#define SP_LOAD _mm256_loadu_ps
#define SP_STORE _mm256_storeu_ps
#define SP_FMA _mm256_fmadd_ps
#define SP_ADD _mm256_add_ps
#define SP_MIN _mm256_min_ps
#define SP_MAX _mm256_max_ps
#define SP_NV 4
#define SP_NAME sp_tile_avx2
#include "_spmm_tile.h"
#define SP_NV 1
#define SP_NAME sp_tile_avx2_8
#include "_spmm_tile.h"
#define SP_NV 2
#define SP_NAME sp_tile_avx2_16
#include "_spmm_tile.h"
#include "_spmm_isa_end.h"
/* AVX-512F (zmm): 4 vectors = 64 pixels, or 2 vectors = 32 pixels (half the x slab per
 * tile in cache: wins on wide layers), or 1 vector = 16 */
#define SP_V __m512
#define SP_L 16
#define SP_ATTR SP_AVX512
#define SP_SET1 _mm512_set1_ps
#define SP_LOAD _mm512_loadu_ps
#define SP_STORE _mm512_storeu_ps
#define SP_FMA _mm512_fmadd_ps
#define SP_ADD _mm512_add_ps
#define SP_MIN _mm512_min_ps
#define SP_MAX _mm512_max_ps
#define SP_NV 4
#define SP_NAME sp_tile_avx512
#include "_spmm_tile.h"
#define SP_NV 2
#define SP_NAME sp_tile_avx512_32
#include "_spmm_tile.h"
#define SP_NV 1
#define SP_NAME sp_tile_avx512_16
#include "_spmm_tile.h"
#include "_spmm_isa_end.h"
#endif

/* ARM64 NEON (q registers): 8 vectors = 32 pixels (two channels' 16 accumulators of 32
 * registers), 4 = 16, 2 = 8; max / min as x86's (_neon.h), so the same bits */
#include "_neon.h"
#if EDGENN_NEON
#ifndef SP_CAT
#define SP_CAT_(a, b) a##b
#define SP_CAT(a, b) SP_CAT_(a, b)
#endif
#define SP_V float32x4_t
#define SP_L 4
#define SP_ATTR
#define SP_SET1 vdupq_n_f32
#define SP_LOAD vld1q_f32
#define SP_STORE vst1q_f32
#define SP_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define SP_ADD vaddq_f32
#define SP_MIN edgenn_vminq
#define SP_MAX edgenn_vmaxq
#define SP_NV 8
#define SP_NAME sp_tile_neon_32
#include "_spmm_tile.h"
#define SP_NV 4
#define SP_NAME sp_tile_neon_16
#include "_spmm_tile.h"
#define SP_NV 2
#define SP_NAME sp_tile_neon_8
#include "_spmm_tile.h"
#include "_spmm_isa_end.h"
#endif

enum { SP_ALIGN = 16 };

/* A workspace's first 64-byte boundary (SP_ALIGN floats in): the packed rows of a tile
 * then start on cache lines, so no vector load of them is split across two (a zmm load
 * not aligned to 64 bytes always is, and split loads cost extra). */
static inline float *sp_align(float *ws)
{
    return (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
}

typedef void (*sp_tile_fn)(const float *, const float *, float *, long, long, const sp_epi *);

/* A row of the table (spmm_table.h): a register tile of `pixels` pixels (the vector axis:
 * an image's pixels, or the rows of x for spgemm), or tile NULL: the portable loops
 * (spmm_generic; spgemm in blocks of `pixels` rows). */
typedef struct {
    const char *name;        /* spmm_<pixels>x1__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    long pixels;
    sp_tile_fn tile;
} sp_row;

/* Pixels the vector tile of a row needs (0: the portable loops take any count); the
 * workspace of spmm_run is (K + 2 M) * that + SP_ALIGN floats. */
static inline long sp_tile(const sp_row *row) { return row->tile ? row->pixels : 0; }

/* One image of a 1x1 conv, on a row of the table (the caller checks the CPU runs it). e->off
 * holds col * S. Whole tiles are read and written in place; the last
 * partial tile (S % tile pixels) is copied, zero-padded, into the workspace ws, computed
 * there by the same tile code with off_tail (col * tile) and its n columns copied out: no
 * masked or partial vector access, on any build. */
static void spmm_run(const float *x, float *y, long M, long K, long S, const sp_epi *e,
                     const long *off_tail, const sp_row *row, float *ws)
{
    const long T = sp_tile(row);
    if (T) {
        const sp_tile_fn tile = row->tile;
        const long full = S - S % T;
        ws = sp_align(ws);
        sp_epi ep = *e;
        ep.off = off_tail;
        for (long s0 = 0; s0 < full; s0 += T) {
            /* the tile's K x T slab of x, packed: rows T floats apart, in cache order */
            for (long k = 0; k < K; k++)
                memcpy(ws + k * T, x + k * S + s0, T * sizeof(float));
            tile(ws, e->z ? e->z + s0 : 0, y + s0, S, M, &ep);
        }
        const long n = S - full;
        if (n) {
            float *xt = ws, *zt = ws + K * T, *yt = zt + M * T;
            for (long k = 0; k < K; k++) {
                memcpy(xt + k * T, x + k * S + full, n * sizeof(float));
                memset(xt + k * T + n, 0, (T - n) * sizeof(float));
            }
            if (e->z)
                for (long m = 0; m < M; m++) {
                    memcpy(zt + m * T, e->z + m * S + full, n * sizeof(float));
                    memset(zt + m * T + n, 0, (T - n) * sizeof(float));
                }
            tile(xt, e->z ? zt : 0, yt, T, M, &ep);
            for (long m = 0; m < M; m++)
                memcpy(y + m * S + full, yt + m * T, n * sizeof(float));
        }
        return;
    }
    spmm_generic(x, y, M, S, e);
}

/* Tap-shifted SpMM over a padded image (the pattern / sparse 3x3 conv, stride 1): xp the
 * image padded to (C, Hp, Wp) and flattened, every nonzero's x row at xp + off[j] (c Hp Wp
 * + dy Wp + dx), yp (M, ldy) the output with Wp columns per row (the last Wp - OW of each
 * junk), P = ldy pixels, a whole number of tiles; xp must be readable up to the largest
 * offset + P, zp (M, ldy) the residual in the same layout or NULL. Portable tier: plain C
 * over the same offsets. */
static void spmm_shifted(const float *xp, float *yp, long M, long P, const sp_epi *e,
                         const sp_row *row)
{
    const long T = sp_tile(row);
    if (T) {
        for (long s0 = 0; s0 < P; s0 += T)
            row->tile(xp + s0, e->z ? e->z + s0 : 0, yp + s0, P, M, e);
        return;
    }
    spmm_generic(xp, yp, M, P, e);     /* the portable loops read x + off[j] alike */
}


#endif
