/* One whole Winograd F(m x m, 3 x 3) conv in C: per block of tile rows, the input
 * transform (_winograd.h), the alpha^2 GEMMs M[xi] = U[xi] @ V[xi] on edgenn's packed
 * sgemm (sgemm.h, on a row of sgemm_table.h: U prepacked, V read in place), the output transform + epilogue.
 *
 * Threads (OpenMP): with at least as many blocks as threads, blocks run in parallel, each
 * thread on its own scratch (its tile rows write disjoint output rows); with fewer blocks
 * (a 7x7 layer is one block of 16 tiles), the blocks run in turn and each block's alpha^2
 * products are shared out. Either way every output element is the same sums in the same
 * order as one thread's: the result does not depend on the thread count.
 */
#ifndef EDGENN_WINOGRAD_RUN_H
#define EDGENN_WINOGRAD_RUN_H

#include "_winograd.h"
#include "sgemm_table.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    int m, C, H, W, K, OH, OW, ph, pw;     /* x (N, C, H, W) -> y (N, K, OH, OW) */
    int th, tw, twp, rows_total, nrows;    /* tiles per image; tile rows of all images, block */
    const float *u;                        /* alpha^2 packed U[xi], usize floats apart */
    long usize;
    const float *bias;                     /* (K) or NULL */
    int act;                               /* _winograd.h's codes */
    float p0, p1;
    int gemm_row;                          /* the GEMMs' row: an index into sg_rows */
    int transform_row;                     /* the transforms' row: into wino_rows */
    const float *zeros;                    /* alpha * twp zeros, read only */
} wino_plan;

#define WINO_MAX_THREADS 64

/* One thread's scratch. */
typedef struct { float *V, *M, *P, *xp, *Q, *rowbuf, *gws; } wino_scratch;

/* Where each thread's scratch lies in the two buffers of a call: `kept` holds M and xp,
 * whose zeros are read (M's read-ahead tail, xp's pads) and so are filled once by the
 * caller; `work` holds V, P, Q, rowbuf and the GEMM workspace, rewritten every call.
 * Offsets in floats within one thread's slice; slices `kept` / `work` floats apart. */
typedef struct { long M, xp, kept, V, P, Q, rowbuf, gws, work; } wino_layout;

static void wino_scratch_of(const wino_layout *l, float *kept, float *work, int t,
                            wino_scratch *s) {
    float *k = kept + t * l->kept, *w = work + t * l->work;
    s->M = k + l->M;
    s->xp = k + l->xp;
    s->V = w + l->V;
    s->P = w + l->P;
    s->Q = w + l->Q;
    s->rowbuf = w + l->rowbuf;
    s->gws = w + l->gws;
}

static void wino_gemms(const wino_plan *p, const wino_scratch *s, long tb, int x0, int x1) {
    sg_epi e;
    memset(&e, 0, sizeof e);
    sg_operand a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    b.rs = tb;
    b.cs = 1;
    for (int xi = x0; xi < x1; xi++) {
        a.packed = p->u + xi * p->usize;
        b.src = s->V + (long)xi * p->C * tb;
        sg_gemm(p->K, tb, p->C, &a, &b, NULL, s->M + (long)xi * p->K * tb, tb, &e, s->gws,
                &sg_rows[p->gemm_row], 1);
    }
}

/* Tile rows [r0, r0 + nr) of x into y, on scratch s[0]. gemm_threads > 1: the products
 * shared out over that many threads, thread t with s[t]'s GEMM workspace. */
static void wino_block(const wino_plan *p, const float *x, const float *z, float *y, int r0,
                       int nr, const wino_scratch *s, int gemm_threads) {
    const int a2 = (p->m + 2) * (p->m + 2);
    const long tb = (long)nr * p->tw;
    wino_input(&wino_rows[p->transform_row], p->m, x, p->C, p->H, p->W, p->ph, p->pw, p->th,
               p->tw, p->twp, r0, nr, s->V, s->P, s->xp, p->zeros);
    if (gemm_threads > 1) {
        wino_scratch shared[WINO_MAX_THREADS];
#pragma omp parallel for num_threads(gemm_threads) schedule(static)
        for (int t = 0; t < gemm_threads; t++) {
            shared[t] = s[0];
            shared[t].gws = s[t].gws;
            wino_gemms(p, &shared[t], tb, t * a2 / gemm_threads, (t + 1) * a2 / gemm_threads);
        }
    } else {
        wino_gemms(p, s, tb, 0, a2);
    }
    wino_output(&wino_rows[p->transform_row], p->m, s->M, y, p->K, p->OH, p->OW, p->th, p->tw,
                p->twp, r0, nr, p->bias, z, p->act, p->p0, p->p1, s->Q, s->rowbuf);
}

/* The whole conv: x (N, C, H, W), z like y or NULL, y (N, K, OH, OW); kept / work: the
 * threads' scratch as l lays it out. */
static void wino_run(const wino_plan *p, const wino_layout *l, const float *x, const float *z,
                     float *y, float *kept, float *work, int threads) {
    const int nblocks = (p->rows_total + p->nrows - 1) / p->nrows;
    if (threads > WINO_MAX_THREADS) threads = WINO_MAX_THREADS;
    wino_scratch s[WINO_MAX_THREADS];
    for (int t = 0; t < threads; t++) wino_scratch_of(l, kept, work, t, &s[t]);
    if (threads > 1 && nblocks >= threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int b = 0; b < nblocks; b++) {
#ifdef _OPENMP
            const int t = omp_get_thread_num();
#else
            const int t = 0;
#endif
            const int r0 = b * p->nrows;
            const int nr = p->rows_total - r0 < p->nrows ? p->rows_total - r0 : p->nrows;
            wino_block(p, x, z, y, r0, nr, &s[t], 1);
        }
        return;
    }
    for (int r0 = 0; r0 < p->rows_total; r0 += p->nrows) {
        const int nr = p->rows_total - r0 < p->nrows ? p->rows_total - r0 : p->nrows;
        wino_block(p, x, z, y, r0, nr, s, threads);
    }
}

#endif
