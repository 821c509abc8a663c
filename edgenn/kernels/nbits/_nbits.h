/* Weight-only low-bit GEMM / GEMV: Y (M, N) = A (M, K) W^T (+ bias), W (N, K) stored as
 * block-quantized 2-, 4- or 8-bit codes (onnxruntime's com.microsoft.MatMulNBits):
 * W[n, k] = (q[n, k] - zp[n, b]) * scale[n, b], b = k / bs, bs (the block size) a power
 * of 2 in 16..256. The codes stay packed in memory (bits per weight as stored) and are
 * unpacked to float in registers, read once per row tile of A; decode (M = 1) reads every
 * weight byte once.
 *
 * Packed layout (_nbits.pyx's pack; K padded to Kp = kb * bs, kb = ceil(K / bs), with
 * zero codes; N padded to whole panels of NB_NR = 16 output columns, scale 0):
 *   codes   uint32 (np, kb, bs / P, 16): P = 32 / bits codes of one column per word, code
 *           j (k = b * bs + g * P + j) in bits [bits * j, bits * (j + 1)); a panel's blocks
 *           contiguous, so one 64-byte line feeds 16 columns x P values of k and a panel is
 *           one sequential stream
 *   scales  float (np, kb, 16)
 *   zero points: none (zp0 for every block: 2^(bits-1) by default), uint8 (np, kb, 16)
 *           (NB_ZP_U8: the stored integer codes), or float (np, kb, 16) (NB_ZP_F32)
 * The zero point is folded per block: sum_k a_k (q_k - zp) s = s (sum_k a_k q_k -
 * zp sum_k a_k), so the inner loop is decode + FMA only; sum_k a_k per block of every row
 * of A is computed once per call (nb_run), beside a zero-padded copy of A's rows.
 *
 * Rows (nb_rows, below): portable C, AVX2 + FMA, AVX-512F and ARM64 NEON, one body
 * (_nbits_vec.h) for every width (the portable row is that body on 1-float "vectors").
 * A row computes up to rmax rows of A per pass over a panel's codes. Sums: per block and
 * row, k in order with 1, 2 or 4 interleaved partial sums (by j mod NS), then the blocks
 * in order.
 */
#ifndef EDGENN_NBITS_H
#define EDGENN_NBITS_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_neon.h"

#if (defined(__x86_64__) || defined(__i386__)) || defined(EDGENN_SIMDE)
#define NB_X86 1
#else
#define NB_X86 0
#endif

#define NB_NR 16                   /* output columns per panel */
/* bytes ahead in the stream of codes that each 64-byte step prefetches: a layer's codes
 * are one sequential stream of a few hundred KB, read once per token from L3 or memory,
 * too short for the hardware prefetchers to reach full rate by themselves */
#define NB_PREFETCH 2048
#define NB_RMAX 8                  /* the most rows of A any row computes per pass */

enum { NB_ZP_NONE = 0, NB_ZP_U8 = 1, NB_ZP_F32 = 2 };

/* One pass of up to rmax rows of A over one panel (all its blocks). */
typedef struct {
    int bits, zp_mode;
    long bs, kb;                   /* block size, blocks */
    float zp0;                     /* NB_ZP_NONE: every block's zero point */
    const uint32_t *codes;         /* the panel's codes (kb * bs / P * 16 words) */
    const float *scales;           /* the panel's (kb, 16) */
    const uint8_t *zp8;            /* the panel's (kb, 16) or NULL */
    const float *zpf;              /* the panel's (kb, 16) or NULL */
    const float *bias;             /* 16 floats or NULL */
    const float *a;                /* R rows of padded A, interleaved: (Kp, R) */
    const float *asum; long ldas;  /* R rows of per-block sums of A (kb each) */
    float *y; long ldy;            /* R rows of 16 outputs */
} nb_tile;

typedef void (*nb_tile_fn)(int R, const nb_tile *t);

#define NB_UNROLL _Pragma("GCC unroll 16")

/* -- the portable row: the vector body on 1-float "vectors" ------------------------- */
#define NB_V float
#define NB_VI uint32_t
#define NB_L 1
#define NB_ATTR
#define NB_LOADI(p) (*(const uint32_t *)(p))
#define NB_SRL(x, n) ((x) >> (n))
#define NB_ANDI(x, m) ((x) & (m))
#define NB_SET1I(m) ((uint32_t)(m))
#define NB_CVT(x) ((float)(x))
#define NB_SET1(f) (f)
#define NB_LOAD(p) (*(p))
#define NB_STORE(p, v) (*(p) = (v))
#define NB_ZERO() 0.0f
#define NB_ADD(a, b) ((a) + (b))
#define NB_FMA(a, b, c) ((a) * (b) + (c))
#define NB_ZP8(p) ((float)*(p))
#define NB_TILE_T nb_tile_t_scalar
#define NB_TILE nb_tile_scalar
#define NB_ROWS_MAX 2
#include "_nbits_vec.h"

#if NB_X86
/* AVX2 + FMA: 8 floats, a panel in 2 vectors */
#define NB_V __m256
#define NB_VI __m256i
#define NB_L 8
#define NB_ATTR EDGENN_AVX2
#define NB_LOADI(p) _mm256_loadu_si256((const __m256i *)(p))
#define NB_SRL(x, n) _mm256_srli_epi32(x, n)
#define NB_ANDI(x, m) _mm256_and_si256(x, m)
#define NB_SET1I(m) _mm256_set1_epi32((int)(m))
#define NB_CVT(x) _mm256_cvtepi32_ps(x)
#define NB_SET1 _mm256_set1_ps
#define NB_LOAD _mm256_loadu_ps
#define NB_STORE _mm256_storeu_ps
#define NB_ZERO _mm256_setzero_ps
#define NB_ADD _mm256_add_ps
#define NB_FMA _mm256_fmadd_ps
#define NB_ZP8(p) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define NB_TILE_T nb_tile_t_avx2
#define NB_TILE nb_tile_avx2
#define NB_ROWS_MAX 4               /* 8 accumulators of 16 ymm; the outputs spill per block */
#include "_nbits_vec.h"

/* AVX-512F: 16 floats, a panel in one vector; 4-bit codes through a 16-entry table
 * (vpermps reads an index's low 4 bits: no mask) */
#define NB_V __m512
#define NB_VI __m512i
#define NB_L 16
#define NB_ATTR EDGENN_AVX512
#define NB_LOADI(p) _mm512_loadu_si512((const void *)(p))
#define NB_SRL(x, n) _mm512_srli_epi32(x, n)
#define NB_ANDI(x, m) _mm512_and_si512(x, m)
#define NB_SET1I(m) _mm512_set1_epi32((int)(m))
#define NB_CVT(x) _mm512_cvtepi32_ps(x)
#define NB_SET1 _mm512_set1_ps
#define NB_LOAD _mm512_loadu_ps
#define NB_STORE _mm512_storeu_ps
#define NB_ZERO _mm512_setzero_ps
#define NB_ADD _mm512_add_ps
#define NB_FMA _mm512_fmadd_ps
/* u8 -> u16 -> u32 (SIMDe has no direct u8 -> u32 widening at 512 bits) */
#define NB_ZP8(p) _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_cvtepu8_epi16( \
    _mm_loadu_si128((const __m128i *)(p)))))
#define NB_DECODE4(x, n) _mm512_permutexvar_ps(NB_SRL(x, n), _mm512_set_ps(15.f, 14.f, 13.f, \
    12.f, 11.f, 10.f, 9.f, 8.f, 7.f, 6.f, 5.f, 4.f, 3.f, 2.f, 1.f, 0.f))
#define NB_TILE_T nb_tile_t_avx512
#define NB_TILE nb_tile_avx512
#define NB_ROWS_MAX 6
#include "_nbits_vec.h"
#endif

#if EDGENN_NEON
/* ARM64 NEON: 4 floats, a panel in 4 vectors; shifts by a register count (vshlq by -n),
 * so the body needs no immediates */
#define NB_V float32x4_t
#define NB_VI uint32x4_t
#define NB_L 4
#define NB_ATTR
#define NB_LOADI(p) vld1q_u32((const uint32_t *)(p))
#define NB_SRL(x, n) vshlq_u32(x, vdupq_n_s32(-(int)(n)))
#define NB_ANDI(x, m) vandq_u32(x, m)
#define NB_SET1I(m) vdupq_n_u32((uint32_t)(m))
#define NB_CVT(x) vcvtq_f32_u32(x)
#define NB_SET1 vdupq_n_f32
#define NB_LOAD vld1q_f32
#define NB_STORE vst1q_f32
#define NB_ZERO() vdupq_n_f32(0.0f)
#define NB_ADD vaddq_f32
#define NB_FMA(a, b, c) vfmaq_f32(c, a, b)             /* a * b + c, one rounding */
#define NB_ZP8(p) vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(p)))))
#define NB_TILE_T nb_tile_t_neon
#define NB_TILE nb_tile_neon
#define NB_ROWS_MAX 4
#include "_nbits_vec.h"
#endif

/* The family's table, best last. */
typedef struct {
    const char *name;        /* nbits_f32_<rmax>x16__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    int rmax;                /* rows of A per pass over the codes */
    nb_tile_fn tile;
} nb_row;

static const nb_row nb_rows[] = {
    {"nbits_f32_2x16__scalar", EDGENN_ISA_SCALAR, 2, nb_tile_scalar},
#if NB_X86
    {"nbits_f32_4x16__avx2", EDGENN_ISA_AVX2, 4, nb_tile_avx2},
    {"nbits_f32_6x16__avx512f", EDGENN_ISA_AVX512, 6, nb_tile_avx512},
#endif
#if EDGENN_NEON
    {"nbits_f32_4x16__neon", EDGENN_ISA_NEON, 4, nb_tile_neon},
#endif
};
#define NB_ROW_COUNT ((int)(sizeof nb_rows / sizeof nb_rows[0]))

/* One call: everything the driver needs. */
typedef struct {
    long M, N, K, kb, bs;
    int bits, zp_mode;
    float zp0;
    const uint32_t *codes;   /* (np, kb, bs / P, 16) */
    const float *scales;     /* (np, kb, 16) */
    const uint8_t *zp8;      /* (np, kb, 16) or NULL */
    const float *zpf;        /* (np, kb, 16) or NULL */
    const float *bias;       /* (np * 16) or NULL */
    const float *a; long lda;   /* (M, K) */
    float *y; long ldy;         /* (M, N) */
    float *ws;               /* nb_ws_floats(M, ...) */
} nb_args;

/* rows of A per chunk: the chunk's padded rows stay in L2 while every panel runs over them */
static inline long nb_chunk_rows(long Kp)
{
    long c = (256L * 1024 / 4) / (Kp + 1);
    c -= c % 24;                       /* whole row tiles of every rmax (2, 4, 6, 8) */
    return c < 24 ? 24 : c;
}

/* workspace floats of a call with M rows: the chunk's padded rows of A and their block sums */
static inline long nb_ws_floats(long M, long kb, long bs)
{
    const long Kp = kb * bs, c = nb_chunk_rows(Kp);
    const long r = M < c ? M : c;
    return r * (Kp + kb) + 16;
}

/* rows [m0, m0 + R) of A, zero-padded to Kp floats, in the row tiles nb_panels runs
 * (near-equal, at most rmax rows: tile i of rt rows starts at row r0): a tile's rows
 * interleaved, element (k, r) at ap + r0 * Kp + k * rt + r, so the tile body broadcasts
 * a[r][k] at constant offsets from one pointer; and the sum of each block of each row
 * (as + row * kb). */
static void nb_prep_rows(const nb_row *row, const nb_args *x, long m0, long R, float *ap,
                         float *as)
{
    const long K = x->K, bs = x->bs, kb = x->kb, Kp = kb * bs;
    const long tiles = (R + row->rmax - 1) / row->rmax;
    long r0 = 0;
    for (long i = 0; i < tiles; i++) {
        const long rt = (R - r0) / (tiles - i);
        float *dst = ap + r0 * Kp;
        for (long r = 0; r < rt; r++) {
            const float *src = x->a + (m0 + r0 + r) * x->lda;
            for (long k = 0; k < K; k++)
                dst[k * rt + r] = src[k];
            for (long k = K; k < Kp; k++)
                dst[k * rt + r] = 0.0f;
            for (long b = 0; b < kb; b++) {
                float s = 0.0f;
                for (long k = 0; k < bs; k++)
                    s += dst[(b * bs + k) * rt + r];
                as[(r0 + r) * kb + b] = s;
            }
        }
        r0 += rt;
    }
}


/* Where a row tile of the panel at column n0 (nc of its NB_NR columns in Y) writes, from
 * row m: in Y itself when the panel is whole, else in tmp (NB_RMAX x NB_NR), which
 * nb_tile_flush then copies into Y's nc columns. *ldy: the tile's row stride. */
static inline float *nb_tile_out(const nb_args *x, long m, long n0, long nc, float *tmp,
                                 long *ldy)
{
    if (nc == NB_NR) {
        *ldy = x->ldy;
        return x->y + m * x->ldy + n0;
    }
    *ldy = NB_NR;
    return tmp;
}

static inline void nb_tile_flush(const nb_args *x, long m, long n0, long nc, long rows,
                                 const float *tmp)
{
    if (nc < NB_NR)
        for (long r = 0; r < rows; r++)
            memcpy(x->y + (m + r) * x->ldy + n0, tmp + r * NB_NR, nc * sizeof(float));
}

/* panels [p0, p1) for the chunk's rows (ap, as: R rows), in row tiles of near-equal size
 * of at most rmax rows */
static void nb_panels(const nb_row *row, const nb_args *x, long m0, long R, const float *ap,
                      const float *as, long p0, long p1)
{
    const long kb = x->kb, bs = x->bs, Kp = kb * bs, P = 32 / x->bits;
    const long words = kb * (bs / P) * NB_NR;
    const long tiles = (R + row->rmax - 1) / row->rmax;
    for (long p = p0; p < p1; p++) {
        nb_tile t;
        t.bits = x->bits; t.zp_mode = x->zp_mode; t.bs = bs; t.kb = kb; t.zp0 = x->zp0;
        t.codes = x->codes + p * words;
        t.scales = x->scales + p * kb * NB_NR;
        t.zp8 = x->zp8 ? x->zp8 + p * kb * NB_NR : 0;
        t.zpf = x->zpf ? x->zpf + p * kb * NB_NR : 0;
        t.bias = x->bias ? x->bias + p * NB_NR : 0;
        t.ldas = kb;
        const long n0 = p * NB_NR, nc = x->N - n0 < NB_NR ? x->N - n0 : NB_NR;
        long r0 = 0;
        for (long i = 0; i < tiles; i++) {
            const long rt = (R - r0) / (tiles - i);    /* near-equal tiles */
            float tmp[NB_RMAX * NB_NR];
            t.a = ap + r0 * Kp;
            t.asum = as + r0 * kb;
            t.y = nb_tile_out(x, m0 + r0, n0, nc, tmp, &t.ldy);
            row->tile((int)rt, &t);
            nb_tile_flush(x, m0 + r0, n0, nc, rt, tmp);
            r0 += rt;
        }
    }
}

/* Y = A W^T (+ bias) on row `row`; nthreads > 1 splits the panels (OpenMP where built). */
static void nb_run(const nb_row *row, const nb_args *x, int nthreads)
{
    const long Kp = x->kb * x->bs, np = (x->N + NB_NR - 1) / NB_NR;
    const long chunk = nb_chunk_rows(Kp);
    float *ap = x->ws, *as = x->ws + (x->M < chunk ? x->M : chunk) * Kp;
    (void)nthreads;
    for (long m0 = 0; m0 < x->M; m0 += chunk) {
        const long R = x->M - m0 < chunk ? x->M - m0 : chunk;
        nb_prep_rows(row, x, m0, R, ap, as);
#ifdef _OPENMP
        if (nthreads > 1 && np > 1) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
            for (long p = 0; p < np; p++)
                nb_panels(row, x, m0, R, ap, as, p, p + 1);
            continue;
        }
#endif
        nb_panels(row, x, m0, R, ap, as, 0, np);
    }
}

#endif
