/* edgenn packed single-precision GEMM with a fused epilogue.
 *
 *   C (M, N) row-major = act(A (M, K) @ B (K, N) + bias_row[m] + bias_col[n] + Z (M, N))
 *
 * BLIS-style: A is packed into micro-panels of SG_MR rows (for each panel, K columns of
 * SG_MR values: Ap[(panel*K + k)*MR + r], zero-padded rows), B into micro-panels of SG_NR
 * columns (Bp[(panel*kc + k)*NR + c], zero-padded columns). The micro-kernel keeps an
 * MR x NR = 6 x 16 accumulator tile in 12 YMM registers (broadcast A, 2 loads of B, 12 FMA
 * per k) and applies the epilogue on the register tile before the store.
 *
 * Either operand may be "prepacked" (a constant packed once at plan time: conv weights are
 * A, a Gemm's constant B is B) or packed per call, block by block, from a strided matrix;
 * B may also be packed straight from an NCHW image (implicit im2col, see sg_pack_b_conv).
 *
 * The microkernels are rows of a table (sgemm_table.h: one per register tile and ISA,
 * each in its own header); the drivers here take a row and call its entry points, never
 * an ISA. The SIMD ones carry __attribute__((target)); the caller passes a row the CPU
 * runs (edgenn_row_usable: the one probe, _cpu.h).
 */
#ifndef EDGENN_SGEMM_H
#define EDGENN_SGEMM_H

#ifdef _OPENMP
#include <omp.h>
#endif
#include "_cpu.h"
#include "_epilogue.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include "_simd.h"        /* <immintrin.h>, or SIMDe in the emulated build */
#include "_simd_math.h"
#define SG_X86 1
#else
#define SG_X86 0
#endif

#define SG_MR 6
#define SG_NR 16

/* every activation of _epilogue.h; the rows mode's K split sums its parts with a clamp */
#define SG_ACTS ((1u << EDGENN_ACT_COUNT) - 1)
#define SG_KSPLIT_ACTS EDGENN_ACTS_CLAMP

typedef struct {
    const float *bias_row;   /* (M,) added to row m, or NULL */
    const float *bias_col;   /* (N,) added to column n, or NULL */
    const float *z;          /* (M, N) with row stride ldz, or NULL */
    long ldz;
    int act;
    float p0, p1;            /* Clip min/max, HardSigmoid alpha/beta, LeakyRelu alpha */
    const float *slope_row;  /* PRelu: (M,) slope of row m (a conv's output channel) */
} sg_epi;

/* The activation of row m: a per-row PRelu is LeakyRelu with that row's slope. */
static inline int sg_row_act(const sg_epi *e, long m, float *p0) {
    if (e->act == EDGENN_ACT_PRELU) {
        *p0 = e->slope_row[m];
        return EDGENN_ACT_LEAKYRELU;
    }
    *p0 = e->p0;
    return e->act;
}

/* One operand of the product: a prepacked buffer, or a strided matrix packed per block. */
typedef struct {
    const float *packed;     /* prepacked panels over the full K, or NULL */
    const float *src;        /* else element (i, k) of A / (k, j) of B at src[i*rs + k*cs] */
    long rs, cs;
} sg_operand;

/* 2-D conv geometry for packing B straight from one image x (C, H, W): row k of B is tap
 * (c, i, j) = (k / (KH*KW), k / KW % KH, k % KW), column n is output pixel (n / OW, n % OW). */
typedef struct {
    const float *x;
    int C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
} sg_conv;

/* ---------------------------------------------------------------- scalar epilogue */

static inline float sg_act1(float v, int act, float p0, float p1) {
    switch (act) {
    case EDGENN_ACT_RELU: return v > 0.f ? v : 0.f;
    case EDGENN_ACT_CLIP: return v < p0 ? p0 : (v > p1 ? p1 : v);
    case EDGENN_ACT_HARDSWISH: {
        float t = v * (1.f / 6.f) + 0.5f;
        t = t < 0.f ? 0.f : (t > 1.f ? 1.f : t);
        return v * t;
    }
    case EDGENN_ACT_HARDSIGMOID: {
        float t = v * p0 + p1;
        return t < 0.f ? 0.f : (t > 1.f ? 1.f : t);
    }
    case EDGENN_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case EDGENN_ACT_SILU: return v / (1.f + expf(-v));
    case EDGENN_ACT_LEAKYRELU: return v >= 0.f ? v : v * p0;
    case EDGENN_ACT_GELU: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    default: return v;
    }
}

/* Store an mr x nr corner of the full MR x NR tile `acc` into C at (m0, n0):
 * C = acc (+ C if accumulating), then the epilogue if this is the last K block. */
static void sg_store_scalar(const float *acc, float *c, long ldc, int mr, int nr, int accum,
                            int last, const sg_epi *e, long m0, long n0) {
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const float *ar = acc + r * SG_NR;
        for (int j = 0; j < nr; j++) {
            float v = ar[j] + (accum ? cr[j] : 0.f);
            if (last) {
                if (e->bias_row) v += e->bias_row[m0 + r];
                if (e->bias_col) v += e->bias_col[n0 + j];
                if (e->z) v += e->z[(m0 + r) * e->ldz + n0 + j];
                float p0;
                int act = sg_row_act(e, m0 + r, &p0);
                v = sg_act1(v, act, p0, e->p1);
            }
            cr[j] = v;
        }
    }
}

/* ---------------------------------------------------------------- portable micro-kernel */

static void sg_ukr_c(long kc, const float *a, const float *b, long ldb, float *c, long ldc,
                     int mr, int nr, int accum, int last, const sg_epi *e, long m0, long n0) {
    float acc[SG_MR * SG_NR];
    memset(acc, 0, sizeof(acc));
    for (long k = 0; k < kc; k++) {
        for (int r = 0; r < SG_MR; r++) {
            float av = a[k * SG_MR + r];
            for (int j = 0; j < SG_NR; j++) acc[r * SG_NR + j] += av * b[k * ldb + j];
        }
    }
    sg_store_scalar(acc, c, ldc, mr, nr, accum, last, e, m0, n0);
}

/* ---------------------------------------------------------------- a row of the table */

/* The entry points a row of the table (sgemm_table.h) offers the drivers. Each one's
 * arguments are the driver's: kc / K the depth, a / b packed panels (or B in place with
 * row stride ldb), c the output with row stride ldc, (m0, n0) the tile's place in C for
 * the epilogue's per-row / per-column terms, accum (add to C: a later K block) and last
 * (the final K block: apply the epilogue). */
typedef void (*sg_ukr_t)(long kc, const float *a, const float *b, long ldb, float *c,
                         long ldc, int mr, int nr, int accum, int last, const sg_epi *e,
                         long m0, long n0);
typedef void (*sg_sweep_t)(long kc, const float *a, const float *b, long ldb, float *c,
                           long ldc, long np, int accum, int last, const sg_epi *e, long m0,
                           long n0);
typedef void (*sg_tile_t)(long kc, const float *a0, long a_ps, const float *b0, long ldb0,
                          const float *b1, long ldb1, float *c, long ldc, int mr, int nr,
                          int accum, int last, const sg_epi *e, long m0, long n0,
                          const float *pf);
typedef void (*sg_tile_pfb_t)(long kc, const float *a0, long a_ps, const float *b0,
                              long ldb0, const float *b1, long ldb1, float *c, long ldc,
                              int mr, int nr, int accum, int last, const sg_epi *e, long m0,
                              long n0, const float *pf0, const float *pf1);
typedef void (*sg_pack_rows_t)(const float *src, long rs, long i0, long mc, long k0, long kc,
                               float *dst);
typedef void (*sg_gemv_t)(long K, const float *a, long acs, const float *bp, long b_ps,
                          float *c, const sg_epi *e, long m, long n0, long left);
typedef void (*sg_rows_krange_t)(long N, long K, long k0, long k1, const float *wt,
                                 const float *B, long ldb, float *C, long ldc,
                                 const sg_epi *e, long m_lo, long m_hi);
typedef void (*sg_sum_parts_t)(const float *P, long ps, int parts, float *out, long n,
                               int act, float p0, float p1);

/* One microkernel of the fp32 GEMM family and the ways the drivers may use it. Every row
 * works on the same packed panels (SG_MR-row A panels, SG_NR-column B panels); its
 * register tile (mr x nr) is a whole number of them. A NULL entry is a path the row does
 * not take: the drivers fall back to the one every row has. */
typedef struct {
    const char *name;        /* sgemm_<mr>x<nr>__<isa>: the register tile and its ISA */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    int mr, nr;              /* register tile: SG_MR x SG_NR, or 2 SG_MR x 2 SG_NR */
    sg_ukr_t ukr;            /* one panel pair, any corner mr <= SG_MR, nr <= SG_NR */
    const sg_sweep_t *sweep; /* [SG_MR]: a full-height-mr A panel over np in-place B panels */
    sg_tile_t tile;          /* the 2 x 2-panel tile (mr, nr > one panel), pf: next A pair */
    sg_tile_pfb_t tile_pfb;  /* the full 2 x 2-panel tile prefetching the next B pair */
    sg_pack_rows_t pack_a_rows;  /* packs a row-major A (else the strided sg_pack_a) */
    const sg_gemv_t *gemv;   /* [4]: one row of A times 1..4 packed B panels (few rows) */
    sg_rows_krange_t rows;   /* rows mode (C^T = B^T W^T): channels x pixels, a K range */
    sg_sum_parts_t sum_parts;    /* rows mode, K split: the partial products summed */
} sg_row;

/* ---------------------------------------------------------------- packing */

/* ---------------------------------------------------------------- packing */

/* A rows [i0, i0+mc), columns [k0, k0+kc) of a strided matrix -> MR panels (kc x MR). */
static void sg_pack_a(const float *src, long rs, long cs, long i0, long mc, long k0, long kc,
                      float *dst) {
    for (long p = 0; p < mc; p += SG_MR) {
        int mr = mc - p < SG_MR ? (int)(mc - p) : SG_MR;
        const float *s = src + (i0 + p) * rs + k0 * cs;
        for (long k = 0; k < kc; k++) {
            int r = 0;
            for (; r < mr; r++) dst[r] = s[r * rs + k * cs];
            for (; r < SG_MR; r++) dst[r] = 0.f;
            dst += SG_MR;
        }
    }
}

/* B rows [k0, k0+kc), columns [j0, j0+nc) of a strided matrix -> NR panels (kc x NR). */
static void sg_pack_b(const float *src, long rs, long cs, long k0, long kc, long j0, long nc,
                      float *dst) {
    for (long p = 0; p < nc; p += SG_NR) {
        int nr = nc - p < SG_NR ? (int)(nc - p) : SG_NR;
        const float *s = src + k0 * rs + (j0 + p) * cs;
        if (cs == 1 && nr == SG_NR) {
            for (long k = 0; k < kc; k++, dst += SG_NR) memcpy(dst, s + k * rs, SG_NR * 4);
        } else {
            for (long k = 0; k < kc; k++, dst += SG_NR) {
                int j = 0;
                for (; j < nr; j++) dst[j] = s[k * rs + j * cs];
                for (; j < SG_NR; j++) dst[j] = 0.f;
            }
        }
    }
}

/* Implicit im2col: B rows [k0, k0+kc), output pixels [j0, j0+nc) of a conv -> NR panels.
 * Each panel's pixels are split into runs within one output row; a run whose input span
 * lies inside the image (stride 1) is a plain copy, other runs check each pixel. */
static void sg_pack_b_conv(const sg_conv *g, long k0, long kc, long j0, long nc, float *dst) {
    const long khw = (long)g->kh * g->kw;
    for (long p = 0; p < nc; p += SG_NR) {
        int nr = nc - p < SG_NR ? (int)(nc - p) : SG_NR;
        /* runs: (first column in panel, length, output row, first output column) */
        int run_col[SG_NR + 1], run_len[SG_NR + 1], run_oy[SG_NR + 1], run_ox[SG_NR + 1];
        int nrun = 0;
        for (int j = 0; j < nr;) {
            long pix = j0 + p + j;
            int oy = (int)(pix / g->ow), ox = (int)(pix % g->ow);
            int len = g->ow - ox < nr - j ? g->ow - ox : nr - j;
            run_col[nrun] = j; run_len[nrun] = len; run_oy[nrun] = oy; run_ox[nrun] = ox;
            nrun++;
            j += len;
        }
        long c = k0 / khw, rem = k0 % khw;
        int ti = (int)(rem / g->kw), tj = (int)(rem % g->kw);
        for (long k = 0; k < kc; k++, dst += SG_NR) {
            const float *plane = g->x + c * (long)g->H * g->W;
            for (int r = 0; r < nrun; r++) {
                float *d = dst + run_col[r];
                int len = run_len[r];
                int iy = run_oy[r] * g->sh - g->ph + ti * g->dh;
                if (iy < 0 || iy >= g->H) {
                    memset(d, 0, len * 4);
                    continue;
                }
                const float *row = plane + (long)iy * g->W;
                int ix = run_ox[r] * g->sw - g->pw + tj * g->dw;
                if (g->sw == 1 && ix >= 0 && ix + len <= g->W) {
                    if (len == SG_NR) memcpy(d, row + ix, SG_NR * 4);   /* inlined: 64 B */
                    else memcpy(d, row + ix, len * 4);
                } else {
                    for (int t = 0; t < len; t++, ix += g->sw)
                        d[t] = (ix >= 0 && ix < g->W) ? row[ix] : 0.f;
                }
            }
            for (int j = nr; j < SG_NR; j++) dst[j] = 0.f;
            if (++tj == g->kw) {
                tj = 0;
                if (++ti == g->kh) { ti = 0; c++; }
            }
        }
    }
}

/* Pack a whole constant operand once (full K): A -> MR panels, B -> NR panels. Sizes:
 * sg_packed_a_size(M, K) = ceil(M/MR)*MR*K floats, sg_packed_b_size(K, N) = ceil(N/NR)*NR*K. */
static inline long sg_packed_a_size(long M, long K) { return (M + SG_MR - 1) / SG_MR * SG_MR * K; }
static inline long sg_packed_b_size(long K, long N) { return (N + SG_NR - 1) / SG_NR * SG_NR * K; }

/* ---------------------------------------------------------------- blocking + driver */

typedef struct { long kc, mc, nc; } sg_blocks;

/* KC: K in balanced blocks of <= 384 (a 16-column B micro-panel of kc rows stays in L1);
 * MC: the A block (mc x kc) in about 192 KiB of L2 (up to a quarter more where that keeps
 * M in one block), M in balanced blocks of whole 12-row tiles: a cut such as 128 rows
 * into 126 + 2 would end each 32-column tile in a 6-row and a 2-row call (the 2 x 32 one
 * has 4 accumulators: latency-bound); NC: the packed B block in
 * ~1 MiB. */
static sg_blocks sg_choose_blocks(long M, long N, long K) {
    sg_blocks b;
    long nk = (K + 383) / 384;
    b.kc = (K + nk - 1) / nk;
    long mc = (192 * 1024 / 4 / b.kc) / SG_MR * SG_MR;
    if (mc < SG_MR) mc = SG_MR;
    long nm = M <= mc + mc / 4 ? 1 : (M + mc - 1) / mc;       /* blocks of M */
    b.mc = ((M + nm - 1) / nm + 2 * SG_MR - 1) / (2 * SG_MR) * (2 * SG_MR);
    b.nc = (1024 * 1024 / 4 / b.kc) / SG_NR * SG_NR;
    if (b.nc < SG_NR) b.nc = SG_NR;
    if (b.nc > N) b.nc = (N + SG_NR - 1) / SG_NR * SG_NR;
    return b;
}

/* Workspace floats a call needs for the operands it packs itself. */
static inline long sg_workspace_size(long M, long N, long K, int pack_a, int pack_b) {
    sg_blocks b = sg_choose_blocks(M, N, K);
    return (pack_a ? b.mc * b.kc : 0) + (pack_b ? b.nc * b.kc : 0) + b.kc * SG_NR + 64;
}

/* Direct 1x1-conv path: A prepacked (full K), B (K, N) read in place (unit column
 * stride, row stride ldb), no packing except the ragged last NR panel. N is cut into
 * chunks of nb columns whose kc x nb B block stays in L2 (sg_direct_chunk_bytes, 64 KiB:
 * the best of the sizes tried on 1x1 conv shapes); within a chunk, each MR-row A panel
 * sweeps the chunk's NR panels in one call (the row's sweep), so C is written as MR
 * contiguous row runs of nb floats and the B block is reused by every A panel. */
static long sg_direct_chunk_bytes = 64 * 1024;

static void sg_gemm_direct(long M, long N, long K, const float *ap, const float *B, long ldb,
                           float *C, long ldc, const sg_epi *e, float *ws, const sg_row *row,
                           long kcmax, long j0, long j1) {
    const int MR2 = row->mr, NR2 = row->nr;   /* the 2 x 2-panel tile, where the row has it */
    long nb = sg_direct_chunk_bytes / 4 / kcmax / SG_NR * SG_NR;
    if (nb < SG_NR) nb = SG_NR;
    /* 2 x 2-panel tiles: chunks of whole tiles (a 48-column chunk would run one 16-column
     * tile in three, the load-bound kind) */
    if (row->tile) nb = (nb + NR2 - 1) / NR2 * NR2;
    long nfull = N / SG_NR * SG_NR;
    for (long jc = j0; jc < j1; jc += nb) {
        long nc = j1 - jc < nb ? j1 - jc : nb;
        for (long pc = 0; pc < K; pc += kcmax) {
            long kc = K - pc < kcmax ? K - pc : kcmax;
            int accum = pc > 0, last = pc + kc == K;
            if (jc + nc > nfull)   /* ragged last panel: packed (zero-padded) into ws */
                sg_pack_b(B, ldb, 1, pc, kc, nfull, N - nfull, ws);
            if (row->tile) {   /* 2 x 2-panel tiles, each A panel pair sweeps the chunk */
                for (long ir = 0; ir < M; ir += MR2) {
                    int mr = M - ir < MR2 ? (int)(M - ir) : MR2;
                    const float *a = ap + (ir / SG_MR) * K * SG_MR + pc * SG_MR;
                    for (long jr = jc; jr < jc + nc; jr += NR2) {
                        int nr = jc + nc - jr < NR2 ? (int)(jc + nc - jr) : NR2;
                        long j1 = jr + SG_NR;   /* the second panel (or none: nr <= 16) */
                        const float *b0 = jr < nfull ? B + pc * ldb + jr : ws;
                        const float *b1 = j1 < nfull ? B + pc * ldb + j1 : ws;
                        /* a chunk of <= 16 columns prefetches the next panel pair: with so
                         * few (Winograd's 7x7 and 14x14 GEMMs: 16) each A panel is read once,
                         * from memory, 12 products per 13 loads; wider chunks reuse each
                         * A panel over their tiles) */
                        const float *pf = nc <= SG_NR && ir + MR2 < M ? a + 2 * K * SG_MR
                                                                     : NULL;
                        row->tile(kc, a, K * SG_MR, b0, jr < nfull ? ldb : SG_NR, b1,
                                  j1 < nfull ? ldb : SG_NR, C + ir * ldc + jr, ldc, mr, nr,
                                  accum, last, e, ir, jr, pf);
                    }
                }
                continue;
            }
            for (long ir = 0; ir < M; ir += SG_MR) {
                int mr = M - ir < SG_MR ? (int)(M - ir) : SG_MR;
                const float *a = ap + (ir / SG_MR) * K * SG_MR + pc * SG_MR;
                long jr = jc;
                if (row->sweep) {   /* the chunk's full in-place panels in one call */
                    long jend = jc + nc < nfull ? jc + nc : nfull;
                    if (jend > jc) {
                        row->sweep[mr - 1](kc, a, B + pc * ldb + jc, ldb, C + ir * ldc + jc,
                                           ldc, (jend - jc) / SG_NR, accum, last, e, ir, jc);
                        jr = jend;
                    }
                }
                for (; jr < jc + nc; jr += SG_NR) {
                    int nr = jc + nc - jr < SG_NR ? (int)(jc + nc - jr) : SG_NR;
                    int inplace = jr < nfull;
                    row->ukr(kc, a, inplace ? B + pc * ldb + jr : ws, inplace ? ldb : SG_NR,
                        C + ir * ldc + jr, ldc, mr, nr, accum, last, e, ir, jr);
                }
            }
        }
    }
}

/* Columns [j0, j1) of C (M, N), row stride ldc = act(A @ B + epilogue); j0 a multiple of
 * SG_NR (threads own disjoint column ranges, each with its own ws). A/B: prepacked or
 * strided (`a`, `b`), or B from a conv image (`conv` != NULL). direct_b (B strided with
 * unit column stride): the micro-kernel reads full 16-column panels of B in place, only
 * the ragged last panel is packed. ws: sg_workspace_size floats. */
static void sg_gemm_cols(long M, long N, long K, const sg_operand *a, const sg_operand *b,
                         const sg_conv *conv, float *C, long ldc, const sg_epi *e, float *ws,
                         const sg_row *row, int direct_b, long j0, long j1) {
    const sg_ukr_t ukr = row->ukr;
    const int MR2 = row->mr, NR2 = row->nr;   /* the 2 x 2-panel tile, where the row has it */
    sg_blocks bl = sg_choose_blocks(M, N, K);
    int pack_a = a->packed == NULL, pack_b = b->packed == NULL;
    direct_b = direct_b && pack_b && !conv && b->cs == 1;
    if (direct_b && !pack_a && sg_direct_chunk_bytes > 0) {
        sg_gemm_direct(M, N, K, a->packed, b->src, b->rs, C, ldc, e, ws, row, bl.kc, j0, j1);
        return;
    }
    float *wa = ws, *wb = ws + (pack_a ? bl.mc * bl.kc : 0);
    for (long jc = j0; jc < j1; jc += bl.nc) {
        long nc = j1 - jc < bl.nc ? j1 - jc : bl.nc;
        long nfull = direct_b ? nc / SG_NR * SG_NR : 0;   /* columns read in place */
        for (long pc = 0; pc < K; pc += bl.kc) {
            long kc = K - pc < bl.kc ? K - pc : bl.kc;
            int accum = pc > 0, last = pc + kc == K;
            /* B block (kc x nc): NR panels, panel stride b_ps floats, starting at bblk */
            const float *bblk;
            long b_ps;
            if (pack_b) {
                if (conv) sg_pack_b_conv(conv, pc, kc, jc, nc, wb);
                else if (nfull < nc)
                    sg_pack_b(b->src, b->rs, b->cs, pc, kc, jc + nfull, nc - nfull, wb);
                bblk = wb;
                b_ps = kc * SG_NR;
            } else {
                bblk = b->packed + (jc / SG_NR) * K * SG_NR + pc * SG_NR;
                b_ps = K * SG_NR;
            }
            for (long ic = 0; ic < M; ic += bl.mc) {
                long mc = M - ic < bl.mc ? M - ic : bl.mc;
                const float *ablk;
                long a_ps;
                if (pack_a) {
                    if (row->pack_a_rows && a->cs == 1)
                        row->pack_a_rows(a->src, a->rs, ic, mc, pc, kc, wa);
                    else
                        sg_pack_a(a->src, a->rs, a->cs, ic, mc, pc, kc, wa);
                    ablk = wa;
                    a_ps = kc * SG_MR;
                } else {
                    ablk = a->packed + (ic / SG_MR) * K * SG_MR + pc * SG_MR;
                    a_ps = K * SG_MR;
                }
                if (row->tile) {   /* 2 x 2-panel tiles (two B panels, two A panels) */
                    for (long jr = 0; jr < nc; jr += NR2) {
                        int nr = nc - jr < NR2 ? (int)(nc - jr) : NR2;
                        const float *bp[2];
                        long ldbs[2];
                        for (int h = 0; h < 2; h++) {
                            long j = jr + h * SG_NR < nc ? jr + h * SG_NR : jr;
                            if (j < nfull) {
                                bp[h] = b->src + pc * b->rs + jc + j;
                                ldbs[h] = b->rs;
                            } else {
                                bp[h] = bblk + ((j - nfull) / SG_NR) * b_ps;
                                ldbs[h] = SG_NR;
                            }
                        }
                        /* the next full packed pair, prefetched by this step's first tile:
                         * constant weights come from memory in a model's run (MiniLM's
                         * 384 x 1536 GEMMs: 2.4 MB each, read once per inference) */
                        const long jn = jr + NR2;
                        const int pfb = jn + NR2 <= nc && jn >= nfull && mc >= MR2 && nr == NR2;
                        const float *pb = pfb ? bblk + ((jn - nfull) / SG_NR) * b_ps : NULL;
                        for (long ir = 0; ir < mc; ir += MR2) {
                            int mr = mc - ir < MR2 ? (int)(mc - ir) : MR2;
                            long m0 = ic + ir, n0 = jc + jr;
                            if (ir == 0 && pb)
                                row->tile_pfb(kc, ablk, a_ps, bp[0], ldbs[0], bp[1], ldbs[1],
                                              C + m0 * ldc + n0, ldc, mr, nr, accum, last, e,
                                              m0, n0, pb, pb + b_ps);
                            else
                                row->tile(kc, ablk + (ir / SG_MR) * a_ps, a_ps, bp[0], ldbs[0],
                                          bp[1], ldbs[1], C + m0 * ldc + n0, ldc, mr, nr,
                                          accum, last, e, m0, n0, NULL);
                        }
                    }
                    continue;
                }
                /* macro-kernel: the B micro-panel stays in L1 across the A panels */
                for (long jr = 0; jr < nc; jr += SG_NR) {
                    int nr = nc - jr < SG_NR ? (int)(nc - jr) : SG_NR;
                    const float *bp;
                    long ldb;
                    if (jr < nfull) {
                        bp = b->src + pc * b->rs + jc + jr;
                        ldb = b->rs;
                    } else {
                        bp = bblk + ((jr - nfull) / SG_NR) * b_ps;
                        ldb = SG_NR;
                    }
                    for (long ir = 0; ir < mc; ir += SG_MR) {
                        int mr = mc - ir < SG_MR ? (int)(mc - ir) : SG_MR;
                        long m0 = ic + ir, n0 = jc + jr;
                        ukr(kc, ablk + (ir / SG_MR) * a_ps, bp, ldb, C + m0 * ldc + n0, ldc,
                            mr, nr, accum, last, e, m0, n0);
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- few rows, B constant */
#define SG_GEMV_ROWS 2   /* rows of A up to which a constant-B product runs as GEMVs */

/* Columns [j0, j1) of C (M, N) = act(A @ B + epilogue), B prepacked (full K), A strided:
 * rows of A one at a time against 64 columns of B (the row's GEMVs) where M <=
 * SG_GEMV_ROWS and the row has them, else the tiled product; ws as sg_gemm_cols'. */
static void sg_gemm_bconst_cols(long M, long N, long K, const sg_operand *a,
                                const sg_operand *b, float *C, long ldc, const sg_epi *e,
                                float *ws, const sg_row *row, long j0, long j1) {
    if (row->gemv && M <= SG_GEMV_ROWS) {
        for (long i = 0; i < M; i++)
            for (long j = j0; j < j1; j += 4 * SG_NR) {
                const long np = (j1 - j + SG_NR - 1) / SG_NR;
                row->gemv[(np < 4 ? np : 4) - 1](K, a->src + i * a->rs, a->cs,
                                                 b->packed + (j / SG_NR) * K * SG_NR,
                                                 K * SG_NR, C + i * ldc + j, e, i, j, N - j);
            }
        return;
    }
    sg_gemm_cols(M, N, K, a, b, NULL, C, ldc, e, ws, row, 0, j0, j1);
}

/* The whole product (every column) on the calling thread. */
static void sg_gemm(long M, long N, long K, const sg_operand *a, const sg_operand *b,
                    const sg_conv *conv, float *C, long ldc, const sg_epi *e, float *ws,
                    const sg_row *row, int direct_b) {
    sg_gemm_cols(M, N, K, a, b, conv, C, ldc, e, ws, row, direct_b, 0, N);
}

/* The rows mode's B for a conv: the im2col made explicit, cols (K, N) row-major, row k
 * tap (c, i, j) as in sg_conv, column n output pixel (n / OW, n % OW), zero where the tap
 * falls in the padding. Rows [k0, k1) (threads split K); each output row of a tap is one
 * zero run, one copy (unit stride: a plain loop the compiler vectorizes) and one zero run. */
static void sg_im2col(const sg_conv *g, float *cols, long k0, long k1) {
    const long N = (long)g->oh * g->ow, taps = (long)g->kh * g->kw;
    for (long k = k0; k < k1; k++) {
        const long c = k / taps, i = k / g->kw % g->kh, j = k % g->kw;
        const long off = j * g->dw - g->pw;     /* input column of output column 0 */
        /* output columns whose input column ox * sw + off is inside [0, W) */
        long lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
        long hi = g->W - 1 - off < 0 ? 0 : (g->W - 1 - off) / g->sw + 1;
        if (hi > g->ow) hi = g->ow;
        if (lo > hi) lo = hi;
        float *dst = cols + k * N;
        for (long oy = 0; oy < g->oh; oy++, dst += g->ow) {
            const long iy = oy * g->sh - g->ph + i * g->dh;
            if (iy < 0 || iy >= g->H) {
                memset(dst, 0, (size_t)g->ow * 4);
                continue;
            }
            const float *restrict src = g->x + (c * g->H + iy) * g->W + off;
            long ox = 0;
            for (; ox < lo; ox++) dst[ox] = 0.f;
            if (g->sw == 1)
                for (; ox < hi; ox++) dst[ox] = src[ox];
            else
                for (; ox < hi; ox++) dst[ox] = src[ox * g->sw];
            for (; ox < g->ow; ox++) dst[ox] = 0.f;
        }
    }
}

/* Rows mode (rows with a `rows` entry only; SGemm refuses it on the others): channels
 * [m_lo, m_hi) of C (M, N) = act(W @ B + epilogue), wt = W^T packed as B panels. */
static inline void sg_gemm_rows(const sg_row *row, long N, long K, const float *wt,
                                const float *B, long ldb, float *C, long ldc, const sg_epi *e,
                                long m_lo, long m_hi) {
    row->rows(N, K, 0, K, wt, B, ldb, C, ldc, e, m_lo, m_hi);
}

/* Rows mode, threads splitting K, in one OpenMP region: part p (input channels [p * kper,
 * min(K, (p + 1) * kper))) into its partial product P + p * M * N with epilogue epis[p]
 * (the bias in the first, z in the last, no activation), a barrier, then each thread
 * sums a 16-float aligned share of the M * N outputs into C (ldc N) with activation act. */
static inline void sg_gemm_rows_ksplit(const sg_row *row, long M, long N, long K, long kper,
                                       int parts, const float *wt, const float *B, float *C, float *P,
                                       const sg_epi *epis, int act, float p0, float p1) {
    const long mn = M * N;
#ifdef _OPENMP
#pragma omp parallel num_threads(parts)
#endif
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int t = 0, nt = 1;
#endif
        for (int p = t; p < parts; p += nt)
            row->rows(N, K, p * kper, (p + 1) * kper < K ? (p + 1) * kper : K, wt, B, N,
                      P + p * mn, N, &epis[p], 0, M);
#ifdef _OPENMP
#pragma omp barrier
#endif
        const long i0 = mn * t / nt / 16 * 16;
        const long i1 = t == nt - 1 ? mn : mn * (t + 1) / nt / 16 * 16;
        row->sum_parts(P + i0, mn, parts, C + i0, i1 - i0, act, p0, p1);
    }
}

#endif

