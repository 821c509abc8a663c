/* DepthwiseProject: a 3x3 depthwise conv (stride 1, pad 1, dilation 1) and the 1x1 conv
 * that alone reads its output, in bands of output rows, for _dwproj.pyx.
 *
 * MobileNetV2's first block (32 @ 112x112 depthwise, then 32 -> 16) ran as two layers: the
 * depthwise output (1.6 MB) went out to L2 / L3 and came back for the 1x1 conv. Here, per
 * band of `rows` output rows, the depthwise conv of every channel goes into T (C rows of
 * the band's pixels, the band small enough to stay in L1 / L2), and the 1x1 conv of T
 * goes straight into y's rows of that band: the intermediate never leaves the core.
 *
 * Depthwise, per channel and row of outputs, 16 pixels per vector read straight from x
 * (no padded copy): the taps left and right of a vector are masked loads one float
 * before / after (AVX-512 masks: a masked-off lane is neither read nor faulted), rows
 * above / below the image are skipped. Per output: bias, then the nine taps in row-major
 * order, one FMA each (as _dwrows.h), then the activation.
 * 1x1, per band: T's pixels in balanced tiles of <= 3 vectors x 8 output channels (24
 * accumulators; per input channel 3 loads and 8 broadcasts feed 24 FMAs), every channel
 * block of a tile while its C x 48 floats of T are in L1; per output: bias, then the C
 * products in channel order, one FMA each, then the activation.
 *
 * x (C, H, W), wd (C, 9), bd (C,), wp [ceil(M / 8)][C][8] (zero past M), bp (ceil8(M),),
 * y (M, H, W). AVX-512F natively (EDGENN_AVX512), and on SIMDe in the tests' build.
 */
#ifndef EDGENN_DWPROJ_H
#define EDGENN_DWPROJ_H
#include <string.h>
#include "_simd.h"

#ifdef EDGENN_SIMDE
#define DWP_EMULATED 1
#else
#define DWP_EMULATED 0
#endif

enum { DWP_NONE = 0, DWP_RELU = 1, DWP_CLIP = 2 };
#define DWP_MB 8     /* output channels per 1x1 tile */
#define DWP_NV 3     /* 16-pixel vectors per 1x1 tile */

typedef struct {
    const float *x, *wd, *bd, *wp, *bp;
    float *y;
    long C, H, W, M;
    long rows;       /* output rows per band */
    long tpitch;     /* floats per channel of T: rows * W rounded up to 16 */
    int dact, pact;  /* DWP_*: the depthwise and the 1x1 conv's activations */
    float dlo, dhi, plo, phi;
} dwp_args;

/* T's floats per thread */
static inline long dwp_scratch(const dwp_args *a) { return a->C * a->tpitch + 64; }

#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
/* the activation (constants first: max / min return the second operand on NaN, which
 * propagates as the unfused Relu / Clip do) */
EDGENN_AVX512 __attribute__((always_inline)) static inline __m512 dwp_act(
        __m512 v, int act, __m512 lo, __m512 hi) {
    if (act == DWP_RELU) return _mm512_max_ps(lo, v);
    if (act == DWP_CLIP) return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    return v;
}

static inline __mmask16 dwp_mask(long n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Depthwise outputs of rows oy .. oy + R - 1 (R <= 2), NV vectors from column ox, of
 * channel plane xc (weights w, bias b) into to (row pitch W): NV * R independent FMA
 * chains, and the input rows shared by the two output rows loaded once (4 rows x 3 taps
 * x NV loads for 18 * NV FMAs). EDGE: the row's first or last vector (NV = 1), its taps
 * by masked loads; else every tap's 16 floats lie inside the row: plain loads (masks
 * computed per vector had the compiler spill them: 1.3x slower). */
EDGENN_AVX512 __attribute__((always_inline)) static inline void dwp_dw_tile(
        const dwp_args *a, const float *xc, const __m512 *w, __m512 b, long oy, long ox,
        float *to, __m512 lo, __m512 hi, const int NV, const int R, const int EDGE) {
    const long H = a->H, W = a->W;
    /* EDGE: columns ox + l, ox + l - 1 >= 0, ox + l + 1 < W */
    const __mmask16 mc = EDGE ? dwp_mask(W - ox) : 0xFFFF;
    const __mmask16 ml = EDGE && !ox ? (__mmask16)(mc & ~1u) : mc;
    const __mmask16 mr = EDGE ? dwp_mask(W - ox - 1) : 0xFFFF;
    __m512 acc[2][4];
    for (int v = 0; v < NV; v++) acc[0][v] = acc[1][v] = b;
    for (int i = 0; i < R + 2; i++) {      /* input row oy - 1 + i */
        const long iy = oy - 1 + i;
        if (iy < 0 || iy >= H) continue;
        const float *r = xc + iy * W + ox;
        for (int v = 0; v < NV; v++) {
            const float *rv = r + 16 * v;
            const __m512 xl = EDGE ? _mm512_maskz_loadu_ps(ml, rv - 1) : _mm512_loadu_ps(rv - 1);
            const __m512 xm = EDGE ? _mm512_maskz_loadu_ps(mc, rv) : _mm512_loadu_ps(rv);
            const __m512 xr = EDGE ? _mm512_maskz_loadu_ps(mr, rv + 1) : _mm512_loadu_ps(rv + 1);
            for (int q = 0; q < R; q++) {   /* output row oy + q: tap row i - q */
                const int ti = i - q;
                if (ti < 0 || ti > 2) continue;
                acc[q][v] = _mm512_fmadd_ps(w[3 * ti], xl, acc[q][v]);
                acc[q][v] = _mm512_fmadd_ps(w[3 * ti + 1], xm, acc[q][v]);
                acc[q][v] = _mm512_fmadd_ps(w[3 * ti + 2], xr, acc[q][v]);
            }
        }
    }
    for (int q = 0; q < R; q++)
        for (int v = 0; v < NV; v++) {
            const __m512 y = dwp_act(acc[q][v], a->dact, lo, hi);
            if (EDGE) _mm512_mask_storeu_ps(to + q * W + 16 * v, mc, y);
            else _mm512_storeu_ps(to + q * W + 16 * v, y);
        }
}

/* R output rows from oy: the row's first and last vectors as edges, the ones between in
 * balanced tiles of <= 4. */
EDGENN_AVX512 __attribute__((always_inline)) static inline void dwp_dw_rows(
        const dwp_args *a, const float *xc, const __m512 *w, __m512 b, long oy, float *to,
        __m512 lo, __m512 hi, const int R) {
    const long nvec = (a->W + 15) / 16, inner = nvec - 2;
    dwp_dw_tile(a, xc, w, b, oy, 0, to, lo, hi, 1, R, 1);
    if (nvec == 1) return;
    const long ntile = (inner + 3) / 4;
    for (long t = 0; t < ntile; t++) {
        const long v0 = 1 + t * inner / ntile, nv = 1 + (t + 1) * inner / ntile - v0;
        float *tv = to + 16 * v0;
        if (nv == 4) dwp_dw_tile(a, xc, w, b, oy, 16 * v0, tv, lo, hi, 4, R, 0);
        else if (nv == 3) dwp_dw_tile(a, xc, w, b, oy, 16 * v0, tv, lo, hi, 3, R, 0);
        else if (nv == 2) dwp_dw_tile(a, xc, w, b, oy, 16 * v0, tv, lo, hi, 2, R, 0);
        else dwp_dw_tile(a, xc, w, b, oy, 16 * v0, tv, lo, hi, 1, R, 0);
    }
    const long ox = 16 * (nvec - 1);
    dwp_dw_tile(a, xc, w, b, oy, ox, to + ox, lo, hi, 1, R, 1);
}

/* Depthwise of output rows [r0, r1) of every channel into T (channel c at c * tpitch,
 * the band's rows one after another), two rows at a time. */
EDGENN_AVX512 static void dwp_depthwise(const dwp_args *a, long r0, long r1, float *T) {
    const long H = a->H, W = a->W;
    const __m512 lo = _mm512_set1_ps(a->dact == DWP_CLIP ? a->dlo : 0.f);
    const __m512 hi = _mm512_set1_ps(a->dhi);
    for (long c = 0; c < a->C; c++) {
        const float *xc = a->x + c * H * W, *wc = a->wd + c * 9;
        __m512 w[9];
        for (int t = 0; t < 9; t++) w[t] = _mm512_set1_ps(wc[t]);
        const __m512 b = _mm512_set1_ps(a->bd[c]);
        float *tc = a->tpitch * c + T;
        long oy = r0;
        for (; oy + 2 <= r1; oy += 2) dwp_dw_rows(a, xc, w, b, oy, tc + (oy - r0) * W, lo, hi, 2);
        if (oy < r1) dwp_dw_rows(a, xc, w, b, oy, tc + (oy - r0) * W, lo, hi, 1);
    }
}

/* One 1x1 tile: channels m0 .. m0 + mr - 1 (mr <= 8) x NV vectors of T from pixel p0 of
 * the band (np of them real), into y at out (channel m0's first pixel of the tile). */
EDGENN_AVX512 __attribute__((always_inline)) static inline void dwp_tile(
        const dwp_args *a, const float *T, const float *wb, long m0, long mr, long p0,
        long np, float *out, const long NV) {
    const long ldy = a->H * a->W;
    __m512 acc[DWP_MB][DWP_NV];
    for (int r = 0; r < DWP_MB; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_set1_ps(a->bp[m0 + r]);
    const float *t = T + p0;
    for (long k = 0; k < a->C; k++, t += a->tpitch, wb += DWP_MB) {
        __m512 xv[DWP_NV];
        for (int v = 0; v < NV; v++) xv[v] = _mm512_loadu_ps(t + 16 * v);
        for (int r = 0; r < DWP_MB; r++) {
            const __m512 wr = _mm512_set1_ps(wb[r]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(wr, xv[v], acc[r][v]);
        }
    }
    const __m512 lo = _mm512_set1_ps(a->pact == DWP_CLIP ? a->plo : 0.f);
    const __m512 hi = _mm512_set1_ps(a->phi);
    for (int r = 0; r < DWP_MB; r++) {
        if (r >= mr) break;
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(out + r * ldy + 16 * v, dwp_mask(np - 16 * v),
                                  dwp_act(acc[r][v], a->pact, lo, hi));
    }
}

/* The 1x1 conv of the band's n pixels in T into y from pixel q0 of each output plane. */
EDGENN_AVX512 static void dwp_project(const dwp_args *a, const float *T, long n, long q0) {
    const long nvec = (n + 15) / 16, ntile = (nvec + DWP_NV - 1) / DWP_NV;
    const long ldy = a->H * a->W;
    for (long t = 0; t < ntile; t++) {
        const long v0 = t * nvec / ntile, nv = (t + 1) * nvec / ntile - v0;
        const long p0 = 16 * v0, np = n - p0;
        for (long m0 = 0; m0 < a->M; m0 += DWP_MB) {
            const float *wb = a->wp + (m0 / DWP_MB) * a->C * DWP_MB;
            const long mr = a->M - m0 < DWP_MB ? a->M - m0 : DWP_MB;
            float *out = a->y + m0 * ldy + q0 + p0;
            if (nv == 3) dwp_tile(a, T, wb, m0, mr, p0, np, out, 3);
            else if (nv == 2) dwp_tile(a, T, wb, m0, mr, p0, np, out, 2);
            else dwp_tile(a, T, wb, m0, mr, p0, np, out, 1);
        }
    }
}

/* Bands [b0, b1) of the image (band b: output rows b * rows ..), T this thread's. */
EDGENN_AVX512 static void dwp_run(const dwp_args *a, float *T, long b0, long b1) {
    for (long b = b0; b < b1; b++) {
        const long r0 = b * a->rows, r1 = r0 + a->rows < a->H ? r0 + a->rows : a->H;
        if (r0 >= r1) break;
        dwp_depthwise(a, r0, r1, T);
        dwp_project(a, T, (r1 - r0) * a->W, r0 * a->W);
    }
}
#else   /* no AVX-512 body off x86 (_dwproj.pyx's HAVE is false there: never called) */
static void dwp_run(const dwp_args *a, float *T, long b0, long b1) {
    (void)a; (void)T; (void)b0; (void)b1;
}
#endif
#endif
