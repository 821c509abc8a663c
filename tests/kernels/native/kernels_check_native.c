/* kernels_check.c's checks of the rows a target builds natively (no EDGENN_SIMDE: on
 * aarch64 the NEON rows and the portable ones; compiling the x86 AVX-512 bodies through
 * SIMDe, as kernels_check.c does for its families, takes GCC minutes for these two). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_cpu.h"
#include "_dwc8.h"
#include "_convdirect.h"
#include "_dwrows.h"
#include "_dwproj.h"
#include "_winograd.h"
#include "_recurrent.h"
#include "_nbits.h"
#include "_nbits_q8.h"
#include "_pool_tiles.h"
#include "_rowops.h"
#include "qgemm_table.h"
#include "kernels_check.h"

/* Depthwise conv and MaxPool on the c<L> rows (_dwc8.h): every row this CPU runs (the
 * portable loops, and on arm64 the NEON c4 body), channel counts that leave a partial
 * group, strides 1 / 2, 3x3 and 5x5, a residual and a clamp, against a direct loop; small
 * integers, so every tier's sums are exact in fp32. */
static void check_dwc(void) {
    static const int shapes[][6] = {   /* C, H, W, k, stride, pad */
        {4, 7, 7, 3, 1, 1}, {5, 9, 6, 3, 2, 1}, {11, 12, 13, 5, 1, 2}, {8, 14, 14, 5, 2, 2},
        {3, 2, 3, 3, 1, 1}};
    char what[160];
    for (int r = 0; r < DWC_ROW_COUNT; r++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int kind = KIND_CONV; kind <= KIND_MAX; kind++) {
        const dwc_row *row = &dwc_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const int C = shapes[s][0], H = shapes[s][1], W = shapes[s][2], k = shapes[s][3];
        const int st = shapes[s][4], pd = shapes[s][5], L = row->lanes, T = k * k;
        const int OH = (H + 2 * pd - k) / st + 1, OW = (W + 2 * pd - k) / st + 1;
        const int G = (C + L - 1) / L;
        int Hp = (OH - 1) * st + k, Wp = (OW - 1) * st + k;
        if (Hp < H + pd) Hp = H + pd;
        if (Wp < W + pd) Wp = W + pd;
        dwc8_geom g = {0};
        g.kind = kind; g.N = 1; g.C = C; g.H = H; g.W = W; g.OH = OH; g.OW = OW; g.T = T;
        g.sh = g.sw = st; g.ph = g.pw = pd; g.Hp = Hp; g.Wp = Wp; g.L = L;
        g.mode = kind == KIND_CONV ? EDGENN_ACT_CLIP : EDGENN_ACT_NONE;
        g.p0 = -20.f; g.p1 = 25.f; g.has_z = kind == KIND_CONV;
        float *x = malloc(sizeof(float) * C * H * W), *y = malloc(sizeof(float) * C * OH * OW);
        float *z = malloc(sizeof(float) * C * OH * OW);
        float *wl = calloc((size_t)G * T * L, sizeof(float)), *bl = calloc((size_t)G * L, sizeof(float));
        float *Q = malloc(sizeof(float) * Hp * Wp * L);
        float *obuf = malloc(sizeof(float) * (dwc8_obuf_floats(OH, OW, L) + 16));
        long *off = malloc(sizeof(long) * T);
        for (long i = 0; i < (long)Hp * Wp * L; i++) Q[i] = kind == KIND_MAX ? -INFINITY : 0.f;
        for (long i = 0; i < (long)C * H * W; i++) x[i] = (float)((int)(rnd() % 9) - 4);
        for (long i = 0; i < (long)C * OH * OW; i++) z[i] = (float)((int)(rnd() % 5) - 2);
        for (int c = 0; c < C; c++) {
            bl[(c / L) * L + c % L] = (float)((int)(rnd() % 5) - 2);
            for (int t = 0; t < T; t++)
                wl[((long)(c / L) * T + t) * L + c % L] = (float)((int)(rnd() % 5) - 2);
        }
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) off[i * k + j] = ((long)i * Wp + j) * L;
        int rc = dwc8_run(row, x, wl, bl, off, g.has_z ? z : NULL, y, Q, obuf, &g);
        int ok = rc == 0;
        for (int c = 0; c < C && ok; c++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double a = kind == KIND_MAX ? -INFINITY : bl[(c / L) * L + c % L];
                    for (int i = 0; i < k; i++)
                        for (int j = 0; j < k; j++) {
                            const int iy = oy * st + i - pd, ix = ox * st + j - pd;
                            const int in = iy >= 0 && iy < H && ix >= 0 && ix < W;
                            const double v = in ? x[((long)c * H + iy) * W + ix] : 0.0;
                            if (kind == KIND_MAX) {
                                if (in && v > a) a = v;
                            } else {
                                a += v * wl[((long)(c / L) * T + i * k + j) * L + c % L];
                            }
                        }
                    const long o = ((long)c * OH + oy) * OW + ox;
                    if (kind == KIND_CONV) {
                        a += z[o];
                        a = a < g.p0 ? g.p0 : a > g.p1 ? g.p1 : a;
                    }
                    ok &= y[o] == (float)a;
                }
        snprintf(what, sizeof what, "%s %s C%d %dx%d k%d s%d: exact on small integers",
                 row->name, kind == KIND_MAX ? "maxpool" : "conv+z+clip", C, H, W, k, st);
        check(ok, what);
        free(x); free(y); free(z); free(wl); free(bl); free(Q); free(obuf); free(off);
    }
}

/* Direct conv (_convdirect.h): every row this CPU runs (the portable tile, and on arm64
 * the NEON 8 x 12), strides 1 / 2, 3x3 and 7x7 stems, ragged channel blocks and pixel
 * tiles, Clip and PRelu, against a direct loop on small integers (exact on every tier). */
static void check_convdirect(void) {
    static const long shapes[][8] = {   /* C, H, W, M, k, stride, pad, act (0 clip, 1 prelu) */
        {3, 16, 16, 16, 3, 2, 1, 0}, {3, 9, 23, 13, 3, 1, 1, 1}, {1, 12, 17, 8, 7, 2, 3, 0},
        {4, 5, 5, 20, 3, 1, 0, 1}};
    char what[160];
    for (int r = 0; r < CD_ROW_COUNT; r++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const cd_row *row = &cd_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const long C = shapes[s][0], H = shapes[s][1], W = shapes[s][2], M = shapes[s][3];
        const long k = shapes[s][4], st = shapes[s][5], pd = shapes[s][6], T = C * k * k;
        const int prelu = (int)shapes[s][7];
        const long OH = (H + 2 * pd - k) / st + 1, OW = (W + 2 * pd - k) / st + 1;
        const long mb = row->mb, px = row->px, blocks = (M + mb - 1) / mb;
        long wq = (OW + px - 1) / px * px + (k - 1) / st;
        if (wq < (pd + W + st - 1) / st) wq = (pd + W + st - 1) / st;
        const long hb = (OH - 1) * st + k;
        float *x = malloc(sizeof(float) * C * H * W), *y = malloc(sizeof(float) * M * OH * OW);
        float *w = malloc(sizeof(float) * M * T), *wp = calloc((size_t)blocks * T * mb, 4);
        float *bias = malloc(sizeof(float) * M), *slope = malloc(sizeof(float) * M);
        float *buf = calloc((size_t)C * hb * st * wq + 64, 4);
        for (long i = 0; i < C * H * W; i++) x[i] = (float)((int)(rnd() % 9) - 4);
        for (long i = 0; i < M * T; i++) w[i] = (float)((int)(rnd() % 5) - 2);
        for (long m = 0; m < M; m++) {
            bias[m] = (float)((int)(rnd() % 5) - 2);
            slope[m] = (float)((int)(rnd() % 3) + 1) * 0.25f;
            for (long t = 0; t < T; t++) wp[((m / mb) * T + t) * mb + m % mb] = w[m * T + t];
        }
        cd_args a = {0};
        a.wp = wp; a.bias = bias; a.slope = slope; a.y = y;
        a.C = C; a.Wq = wq; a.KH = a.KW = k; a.SH = a.SW = st; a.M = M; a.OH = OH; a.OW = OW;
        a.oh0 = 0; a.oh1 = OH;
        a.act = prelu ? EDGENN_ACT_PRELU : EDGENN_ACT_CLIP;
        a.lo = -30.f; a.hi = 40.f;
        cd_run_bands(&a, x, H, W, pd, pd, buf, OH, row);
        int ok = 1;
        for (long m = 0; m < M; m++)
            for (long oy = 0; oy < OH; oy++)
                for (long ox = 0; ox < OW; ox++) {
                    double v = bias[m];
                    for (long c = 0; c < C; c++)
                        for (long i = 0; i < k; i++)
                            for (long j = 0; j < k; j++) {
                                const long iy = oy * st + i - pd, ix = ox * st + j - pd;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    v += (double)x[(c * H + iy) * W + ix]
                                         * w[m * T + (c * k + i) * k + j];
                            }
                    if (prelu) v = v >= 0 ? v : v * slope[m];
                    else v = v < a.lo ? a.lo : v > a.hi ? a.hi : v;
                    ok &= y[(m * OH + oy) * OW + ox] == (float)v;
                }
        snprintf(what, sizeof what, "%s C%ld %ldx%ld M%ld k%ld s%ld %s: exact on small integers",
                 row->name, C, H, W, M, k, st, prelu ? "prelu" : "clip");
        check(ok, what);
        free(x); free(y); free(w); free(wp); free(bias); free(slope); free(buf);
    }
}

/* Depthwise conv on NCHW rows (_dwrows.h): every row this CPU runs (on arm64 the NEON
 * rows4), 3x3 at strides 1 / 2 (the nine weights in registers) and 5x5 / 2x2 dilated
 * (the general taps), row widths that end in a partial vector, a residual and a clamp,
 * two planes per run, against a direct loop on small integers (exact on every tier). */
static void check_dwrows(void) {
    static const long shapes[][7] = {   /* C, H, W, k, stride, pad, dilation */
        {2, 7, 7, 3, 1, 1, 1}, {3, 14, 30, 3, 2, 1, 1}, {2, 9, 37, 3, 1, 1, 1},
        {2, 11, 13, 5, 1, 2, 1}, {1, 10, 19, 3, 1, 2, 2}, {2, 1, 1, 3, 1, 1, 1}};
    char what[160];
    for (int r = 0; r < DWR_ROW_COUNT; r++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const dwr_row *row = &dwr_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const long C = shapes[s][0], H = shapes[s][1], W = shapes[s][2], k = shapes[s][3];
        const long st = shapes[s][4], pd = shapes[s][5], dl = shapes[s][6], T = k * k;
        const long OH = (H + 2 * pd - dl * (k - 1) - 1) / st + 1;
        const long OW = (W + 2 * pd - dl * (k - 1) - 1) / st + 1;
        float *x = malloc(sizeof(float) * C * H * W), *y = malloc(sizeof(float) * C * OH * OW);
        float *z = malloc(sizeof(float) * C * OH * OW), *w = malloc(sizeof(float) * C * T);
        float *bias = malloc(sizeof(float) * C);
        for (long i = 0; i < C * H * W; i++) x[i] = (float)((int)(rnd() % 9) - 4);
        for (long i = 0; i < C * OH * OW; i++) z[i] = (float)((int)(rnd() % 5) - 2);
        for (long i = 0; i < C * T; i++) w[i] = (float)((int)(rnd() % 5) - 2);
        for (long c = 0; c < C; c++) bias[c] = (float)((int)(rnd() % 5) - 2);
        dwr_args a = {0};
        a.x = x; a.w = w; a.bias = bias; a.z = z; a.y = y;
        a.N = 1; a.C = C; a.H = H; a.W = W; a.KH = a.KW = k; a.SH = a.SW = st;
        a.DH = a.DW = dl; a.PT = a.PL = pd; a.OH = OH; a.OW = OW;
        a.act = EDGENN_ACT_CLIP; a.lo = -20.f; a.hi = 25.f;
        dwr_plane(&a, row->lanes, &a.Hp, &a.Wq);
        float *P = calloc((size_t)(a.Hp * st * a.Wq), sizeof(float));
        row->planes(&a, P, 0, C);
        int ok = 1;
        for (long c = 0; c < C; c++)
            for (long oy = 0; oy < OH; oy++)
                for (long ox = 0; ox < OW; ox++) {
                    double v = bias[c];
                    for (long i = 0; i < k; i++)
                        for (long j = 0; j < k; j++) {
                            const long iy = oy * st + i * dl - pd, ix = ox * st + j * dl - pd;
                            if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                v += (double)x[(c * H + iy) * W + ix] * w[c * T + i * k + j];
                        }
                    const long o = (c * OH + oy) * OW + ox;
                    v += z[o];
                    v = v < a.lo ? a.lo : v > a.hi ? a.hi : v;
                    ok &= y[o] == (float)v;
                }
        snprintf(what, sizeof what, "%s C%ld %ldx%ld k%ld s%ld d%ld conv+z+clip: exact on "
                 "small integers", row->name, C, H, W, k, st, dl);
        check(ok, what);
        free(x); free(y); free(z); free(w); free(bias); free(P);
    }
}

/* DepthwiseProject (_dwproj.h): every row this CPU runs (on arm64 the NEON 8 x 12), the
 * 3x3 depthwise (clamped) then the 1x1 conv (Relu) in bands, widths with edge vectors on
 * both sides and one vector alone, output channels that leave a partial tile, against a
 * direct loop on small integers (exact on every tier). */
static void check_dwproj(void) {
    static const long shapes[][5] = {   /* C, H, W, M, band rows */
        {3, 9, 13, 11, 2}, {4, 5, 4, 8, 3}, {2, 6, 29, 17, 4}, {5, 3, 1, 3, 1}};
    char what[160];
    for (int r = 0; r < DWP_ROW_COUNT; r++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const dwp_row *row = &dwp_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const long C = shapes[s][0], H = shapes[s][1], W = shapes[s][2], M = shapes[s][3];
        const long mb = row->mb, blocks = (M + mb - 1) / mb;
        dwp_args a = {0};
        a.C = C; a.H = H; a.W = W; a.M = M; a.rows = shapes[s][4];
        a.tpitch = (a.rows * W + 15) / 16 * 16;
        a.dact = EDGENN_ACT_CLIP; a.dlo = -6.f; a.dhi = 9.f; a.pact = EDGENN_ACT_RELU;
        float *x = malloc(sizeof(float) * C * H * W), *y = malloc(sizeof(float) * M * H * W);
        float *wd = malloc(sizeof(float) * C * 9), *bd = malloc(sizeof(float) * C);
        float *w = malloc(sizeof(float) * M * C), *wp = calloc((size_t)(blocks * C * mb), 4);
        float *bp = calloc((size_t)(blocks * mb), 4), *T = calloc((size_t)dwp_scratch(&a), 4);
        float *d = malloc(sizeof(float) * C * H * W);
        for (long i = 0; i < C * H * W; i++) x[i] = (float)((int)(rnd() % 9) - 4);
        for (long i = 0; i < C * 9; i++) wd[i] = (float)((int)(rnd() % 5) - 2);
        for (long c = 0; c < C; c++) bd[c] = (float)((int)(rnd() % 5) - 2);
        for (long m = 0; m < M; m++) {
            bp[m] = (float)((int)(rnd() % 5) - 2);
            for (long c = 0; c < C; c++) {
                w[m * C + c] = (float)((int)(rnd() % 5) - 2);
                wp[((m / mb) * C + c) * mb + m % mb] = w[m * C + c];
            }
        }
        a.x = x; a.wd = wd; a.bd = bd; a.wp = wp; a.bp = bp; a.y = y;
        row->run(&a, T, 0, H);
        for (long c = 0; c < C; c++)   /* the depthwise, clamped: exact, as the kernel's */
            for (long oy = 0; oy < H; oy++)
                for (long ox = 0; ox < W; ox++) {
                    double v = bd[c];
                    for (long i = 0; i < 3; i++)
                        for (long j = 0; j < 3; j++) {
                            const long iy = oy + i - 1, ix = ox + j - 1;
                            if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                v += (double)x[(c * H + iy) * W + ix] * wd[c * 9 + i * 3 + j];
                        }
                    d[(c * H + oy) * W + ox] = (float)(v < a.dlo ? a.dlo : v > a.dhi ? a.dhi : v);
                }
        int ok = 1;
        for (long m = 0; m < M; m++)
            for (long p = 0; p < H * W; p++) {
                double v = bp[m];
                for (long c = 0; c < C; c++) v += (double)d[c * H * W + p] * w[m * C + c];
                ok &= y[m * H * W + p] == (float)(v > 0 ? v : 0);
            }
        snprintf(what, sizeof what, "%s C%ld %ldx%ld M%ld band %ld: exact on small integers",
                 row->name, C, H, W, M, a.rows);
        check(ok, what);
        free(x); free(y); free(wd); free(bd); free(w); free(wp); free(bp); free(T); free(d);
    }
}

/* Winograd transforms (_winograd.h): every row this CPU runs (on arm64 the NEON 4-tile
 * one) against the portable row, F(2/4/6, 3), a tile count that leaves a partial vector,
 * two images, the fused activations, bias and residual. On small integers the transforms'
 * dyadic coefficients keep every sum exact, so the rows must agree bit for bit. */
static void check_winograd(void) {
    static const int acts[][1] = {{EDGENN_ACT_NONE}, {EDGENN_ACT_RELU}, {EDGENN_ACT_CLIP},
                                  {EDGENN_ACT_LEAKYRELU}, {EDGENN_ACT_HARDSIGMOID}};
    char what[160];
    const int N = 2, C = 3, H = 11, W = 13, K = 3;
    for (int r = 1; r < WINO_ROW_COUNT; r++)
    for (int m = 2; m <= 6; m += 2) {
        const wino_row *row = &wino_rows[r], *ref = &wino_rows[0];
        if (!edgenn_row_usable(row->isa)) continue;
        const int a = m + 2, th = (H + m - 1) / m, tw = (W + m - 1) / m;
        const int twp = (tw + 7) / 8 * 8, nrows = N * th, Tb = nrows * tw;
        float *x = malloc(sizeof(float) * N * C * H * W);
        for (long i = 0; i < (long)N * C * H * W; i++) x[i] = (float)((int)(rnd() % 9) - 4);
        float *P = malloc(sizeof(float) * (nrows * m + 2) * a * twp);
        float *xp = calloc((size_t)(twp * m + a), 4), *zeros = calloc((size_t)(a * twp), 4);
        const long vn = (long)a * a * C * Tb;
        float *v0 = malloc(sizeof(float) * vn), *v1 = malloc(sizeof(float) * vn);
        wino_input(ref, m, x, C, H, W, 1, 1, th, tw, twp, 0, nrows, v0, P, xp, zeros);
        memset(xp, 0, sizeof(float) * (twp * m + a));
        wino_input(row, m, x, C, H, W, 1, 1, th, tw, twp, 0, nrows, v1, P, xp, zeros);
        snprintf(what, sizeof what, "%s input F(%d,3) %dx%d: the portable row's bits",
                 row->name, m, H, W);
        check(memcmp(v0, v1, sizeof(float) * vn) == 0, what);
        const int OH = th * m - 1, OW = tw * m - 2;   /* ragged last tiles */
        const long mn = (long)a * a * K * Tb, yn = (long)N * K * OH * OW;
        float *M = calloc((size_t)(mn + 8), 4), *bias = malloc(sizeof(float) * K);
        float *z = malloc(sizeof(float) * yn), *y0 = malloc(sizeof(float) * yn);
        float *y1 = malloc(sizeof(float) * yn), *Q = malloc(sizeof(float) * m * a * twp);
        float *rowbuf = malloc(sizeof(float) * twp * m);
        for (long i = 0; i < mn; i++) M[i] = (float)((int)(rnd() % 9) - 4);
        for (int k = 0; k < K; k++) bias[k] = (float)((int)(rnd() % 5) - 2);
        for (long i = 0; i < yn; i++) z[i] = (float)((int)(rnd() % 5) - 2);
        for (size_t t = 0; t < sizeof acts / sizeof acts[0]; t++) {
            const int act = acts[t][0];
            const float p0 = act == EDGENN_ACT_CLIP ? -3.f : 0.25f;
            const float p1 = act == EDGENN_ACT_CLIP ? 5.f : 0.5f;
            wino_output(ref, m, M, y0, K, OH, OW, th, tw, twp, 0, nrows, bias, z, act, p0, p1,
                        Q, rowbuf);
            wino_output(row, m, M, y1, K, OH, OW, th, tw, twp, 0, nrows, bias, z, act, p0, p1,
                        Q, rowbuf);
            snprintf(what, sizeof what, "%s output F(%d,3) %dx%d %s: the portable row's bits",
                     row->name, m, OH, OW, edgenn_act_names[act]);
            check(memcmp(y0, y1, sizeof(float) * yn) == 0, what);
        }
        free(x); free(P); free(xp); free(zeros); free(v0); free(v1); free(M); free(bias);
        free(z); free(y0); free(y1); free(Q); free(rowbuf);
    }
}

/* R^T (K, N) into rc_rows' panels for L lanes (_recurrent.pyx's pack): widths 8L, 4L, 2L,
 * L taken greedily, then the last N % L columns zero-padded to L. */
static float *rc_pack(const float *m, long K, long N, long L) {
    float *out = calloc((size_t)(K * (N + L)), sizeof(float)), *o = out;
    long n = 0;
    for (long w = 8 * L; w >= L; w /= 2)
        for (; N - n >= w; n += w)
            for (long k = 0; k < K; k++)
                for (long j = 0; j < w; j++) *o++ = m[k * N + n + j];
    if (n < N)
        for (long k = 0; k < K; k++, o += L)
            for (long j = 0; j < N - n; j++) o[j] = m[k * N + n + j];
    return out;
}

/* LSTM / GRU / RNN (_recurrent.h): every row this CPU runs (on arm64 the NEON 4 x 32).
 * The GEMV of 1-4 batch rows over panels of every width and a ragged tail: exact on
 * small integers against a direct loop. The cell (sigmoid / tanh through each row's exp)
 * against the portable cell: both exps are Cephes' (within ~2 ulps of exp; rounding to
 * the nearest vs floor(x + 0.5), fused or not), and a cell adds a few roundings more, so
 * 8 float32 ulps of the largest state. */
static void check_recurrent(void) {
    static const long sizes[][2] = {{5, 77}, {12, 36}, {3, 4}};   /* K, N */
    char what[160];
    for (int r = 1; r < RC_ROW_COUNT; r++) {
        const rc_row *row = &rc_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int R = 1; R <= RC_ROWS; R++) {
            const long K = sizes[s][0], N = sizes[s][1];
            float *m = malloc(sizeof(float) * K * N), *v = malloc(sizeof(float) * R * K);
            float *acc = malloc(sizeof(float) * R * N);
            for (long i = 0; i < K * N; i++) m[i] = (float)((int)(rnd() % 9) - 4);
            for (long i = 0; i < R * K; i++) v[i] = (float)((int)(rnd() % 5) - 2);
            for (long i = 0; i < R * N; i++) acc[i] = (float)((int)(rnd() % 5) - 2);
            float *pk = rc_pack(m, K, N, row->lanes), *want = malloc(sizeof(float) * R * N);
            const float *vr[RC_ROWS];
            float *ar[RC_ROWS];
            for (int i = 0; i < R; i++) {
                vr[i] = v + i * K;
                ar[i] = acc + i * N;
                for (long j = 0; j < N; j++) {
                    double t = acc[i * N + j];
                    for (long k = 0; k < K; k++) t += (double)v[i * K + k] * m[k * N + j];
                    want[i * N + j] = (float)t;
                }
            }
            row->gemm(R, vr, pk, K, ar, N);
            snprintf(what, sizeof what, "%s GEMV of %d rows K%ld N%ld: exact on small "
                     "integers", row->name, R, K, N);
            check(memcmp(acc, want, sizeof(float) * R * N) == 0, what);
            free(m); free(v); free(acc); free(pk); free(want);
        }
        for (int cell = RC_LSTM; cell <= RC_RNN; cell++) {
            const long H = 19, G = cell == RC_LSTM ? 4 : cell == RC_GRU ? 4 : 1;
            rc_args a = {0};
            a.H = H; a.cell = cell; a.lbr = 1; a.f = RA_SIGMOID; a.g = RA_TANH;
            a.h = RA_TANH; a.clip = cell == RC_GRU ? 2.5f : 0.f;
            if (cell == RC_RNN) a.f = RA_TANH;
            float g0[4 * 19], g1[4 * 19], h0[19], h1[19], c0[19], c1[19], y0[19], y1[19];
            for (long i = 0; i < G * H; i++)
                g0[i] = g1[i] = (float)((int)(rnd() % 2001) - 1000) / 250.f;
            for (long i = 0; i < H; i++) {
                h0[i] = h1[i] = (float)((int)(rnd() % 201) - 100) / 100.f;
                c0[i] = c1[i] = (float)((int)(rnd() % 401) - 200) / 100.f;
            }
            rc_cell_generic(&a, g0, h0, c0, y0, 0);
            row->cell(&a, g1, h1, c1, y1);
            double big = 0, err = 0;
            for (long i = 0; i < H; i++) {
                big = fmax(big, fmax(fabs(h0[i]), fabs(c0[i])));
                err = fmax(err, fmax(fabs(h0[i] - h1[i]), fabs(c0[i] - c1[i])));
                err = fmax(err, fabs(y0[i] - y1[i]));
            }
            snprintf(what, sizeof what, "%s %s cell H%ld: the portable cell within 8 ulps "
                     "(%.2g)", row->name, cell == RC_LSTM ? "LSTM" : cell == RC_GRU ? "GRU"
                     : "RNN", H, err);
            check(err <= 8 * 0x1p-24 * fmax(big, 1.0), what);
        }
    }
}

/* The NCHW pooling loops (_pool_tiles.h): every row this CPU runs (on arm64 the NEON one)
 * against the portable row, bit for bit: MaxPool of non-overlapping windows (max is
 * exact) over widths with vector tails and -inf, and GlobalAveragePool's means (the same
 * four double lanes in the same order). */
static void check_pool(void) {
    static const int windows[][2] = {{2, 2}, {2, 1}, {1, 2}, {3, 3}, {4, 1}};
    char what[160];
    const long P = 3, H = 9, W = 37, S = 45;
    float x[3 * 9 * 37], y0[3 * 9 * 37], y1[3 * 9 * 37], row[37], m0[7], m1[7];
    for (long i = 0; i < P * H * W; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 64.f;
    x[5] = -INFINITY;
    for (int r = 1; r < POOL_ROW_COUNT; r++) {
        const pool_row *p = &pool_rows[r];
        if (!edgenn_row_usable(p->isa)) continue;
        for (size_t k = 0; k < sizeof windows / sizeof windows[0]; k++) {
            const int kh = windows[k][0], kw = windows[k][1];
            const long n = P * (H / kh) * (W / kw);
            pool_rows[0].maxpool_tiles(x, y0, P, H, W, kh, kw, row);
            p->maxpool_tiles(x, y1, P, H, W, kh, kw, row);
            snprintf(what, sizeof what, "%s maxpool %dx%d %ldx%ld: the portable row's bits",
                     p->name, kh, kw, H, W);
            check(memcmp(y0, y1, sizeof(float) * n) == 0, what);
        }
        pool_rows[0].global_mean_rows(x, m0, 7, S);
        p->global_mean_rows(x, m1, 7, S);
        snprintf(what, sizeof what, "%s global mean 7 rows of %ld: the portable row's bits",
                 p->name, S);
        check(memcmp(m0, m1, sizeof m0) == 0, what);
    }
}

/* max |a - b| over n, relative to max(1, max |b|) */
static float rel_diff(const float *a, const float *b, long n) {
    float d = 0.f, m = 1.f;
    for (long i = 0; i < n; i++) {
        const float e = fabsf(a[i] - b[i]), v = fabsf(b[i]);
        if (!(e <= d)) d = e;   /* a NaN difference counts as the largest */
        if (v > m) m = v;
    }
    return d / m;
}

/* The row ops (_rowops.h): every row this CPU runs against the portable one. Softmax rows
 * (lanes' float sums against double: within C eps relative), the attention row with an
 * additive and a bool mask, LayerNorm, the RMS norm (float32 lanes against the portable
 * row's double sum: within the bound of _rowops.h), erf / GELU / sigmoid and bias + GELU
 * (the same polynomials, FMA against separate roundings: a few ulps), row lengths with and
 * without a partial vector. */
static void check_rowops(void) {
    static const long lengths[] = {1, 3, 4, 7, 16, 33, 128};
    enum { N = 2 * 128 };
    char what[160];
    float x[N], y0[N], y1[N], m[N], sc[128], bi[128], mu0, iv0, mu1, iv1;
    unsigned char keep[128];
    for (int i = 0; i < N; i++) {
        x[i] = (float)((int)(rnd() % 4001) - 2000) / 256.f;
        m[i] = (float)((int)(rnd() % 201) - 100) / 64.f;
    }
    for (int i = 0; i < 128; i++) {
        sc[i] = (float)((int)(rnd() % 201) - 100) / 50.f;
        bi[i] = (float)((int)(rnd() % 201) - 100) / 50.f;
        keep[i] = (unsigned char)(i % 3 != 1);
    }
    for (int r = 1; r < ROWOPS_ROW_COUNT; r++) {
        const rowops_row *row = &rowops_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
            const long C = lengths[k];
            const float tol = (float)(C + 8) * 1.2e-7f;
            memcpy(y0, x, sizeof x);
            memcpy(y1, x, sizeof x);
            rowops_softmax_rows(&rowops_rows[0], x, y0, 2, C, 0);
            rowops_softmax_rows(row, x, y1, 2, C, 0);
            snprintf(what, sizeof what, "%s softmax 2 x %ld: the portable row's", row->name, C);
            check(rel_diff(y1, y0, 2 * C) <= tol, what);
            rowops_softmax_rows(&rowops_rows[0], x, y0, 2, C, 1);
            rowops_softmax_rows(row, x, y1, 2, C, 1);
            snprintf(what, sizeof what, "%s log-softmax 2 x %ld", row->name, C);
            check(rel_diff(y1, y0, 2 * C) <= tol * 64.f, what);
            for (int kind = ROW_MASK_NONE; kind <= ROW_MASK_BOOL; kind++) {
                const void *mask = kind == ROW_MASK_ADD ? (const void *)m
                                 : kind == ROW_MASK_BOOL ? (const void *)keep : NULL;
                memcpy(y0, x, sizeof x);
                memcpy(y1, x, sizeof x);
                rowops_scale_mask_softmax(&rowops_rows[0], y0, 2, C, 0.7f, mask, 1, kind);
                rowops_scale_mask_softmax(row, y1, 2, C, 0.7f, mask, 1, kind);
                snprintf(what, sizeof what, "%s attention row 2 x %ld, mask kind %d", row->name,
                         C, kind);
                check(rel_diff(y1, y0, 2 * C) <= tol, what);
            }
            rowops_rows[0].layernorm(x, sc, bi, 1e-5f, y0, C, &mu0, &iv0);
            row->layernorm(x, sc, bi, 1e-5f, y1, C, &mu1, &iv1);
            snprintf(what, sizeof what, "%s LayerNorm of %ld", row->name, C);
            check(rel_diff(y1, y0, C) <= 8 * tol && fabsf(mu1 - mu0) <= 8 * tol * (1 + fabsf(mu0))
                  && fabsf(iv1 - iv0) <= 8 * tol * iv0, what);
            rowops_rmsnorm_rows(&rowops_rows[0], x, sc, 1e-5f, y0, 2, C);
            rowops_rmsnorm_rows(row, x, sc, 1e-5f, y1, 2, C);
            snprintf(what, sizeof what, "%s RMS norm 2 x %ld", row->name, C);
            check(rel_diff(y1, y0, 2 * C) <= 8 * tol, what);
            for (int fn = ROW_ERF; fn <= ROW_SIGMOID; fn++) {
                rowops_unary(&rowops_rows[0], x, y0, C, fn);
                rowops_unary(row, x, y1, C, fn);
                snprintf(what, sizeof what, "%s unary %d of %ld", row->name, fn, C);
                check(rel_diff(y1, y0, C) <= 1e-6f, what);
            }
            unsigned char q0[N], q1[N], u[N];
            float s0, s1;
            int z0, z1;
            rowops_quantize_u8(&rowops_rows[0], x, q0, 2 * C, 0.37f, 3, 1);
            rowops_quantize_u8(row, x, q1, 2 * C, 0.37f, 3, 1);
            snprintf(what, sizeof what, "%s quantize %ld: the portable row's bytes", row->name,
                     2 * C);
            check(memcmp(q0, q1, 2 * C) == 0, what);
            rowops_dynamic_quantize_u8(&rowops_rows[0], x, q0, 2 * C, &s0, &z0);
            rowops_dynamic_quantize_u8(row, x, q1, 2 * C, &s1, &z1);
            snprintf(what, sizeof what, "%s dynamic quantize %ld: the portable row's", row->name,
                     2 * C);
            check(memcmp(q0, q1, 2 * C) == 0 && s0 == s1 && z0 == z1, what);
            for (long i = 0; i < 2 * C; i++) u[i] = (unsigned char)rnd();
            rowops_dequantize_u8(&rowops_rows[0], u, y0, 2 * C, 0.173f, 131);
            rowops_dequantize_u8(row, u, y1, 2 * C, 0.173f, 131);
            snprintf(what, sizeof what, "%s dequantize %ld: the portable row's", row->name, 2 * C);
            check(memcmp(y0, y1, 2 * C * sizeof(float)) == 0, what);
            for (int relu = 0; relu < 2; relu++) {
                rowops_qadd_u8(&rowops_rows[0], u, q1, q0, 2 * C, 0.05f, 120, 0.031f, 7, 0.07f,
                               100, relu);
                unsigned char q2[N];
                rowops_qadd_u8(row, u, q1, q2, 2 * C, 0.05f, 120, 0.031f, 7, 0.07f, 100, relu);
                snprintf(what, sizeof what, "%s QAdd %ld relu %d: the portable row's bytes",
                         row->name, 2 * C, relu);
                check(memcmp(q0, q2, 2 * C) == 0, what);
            }
            {   /* x viewed as (2, C) -> (C, 2), and (C / 2 rounded up, 2)-ish slices */
                const long shape[2] = {2, C}, shape3[3] = {2, C < 4 ? 1 : 4, C < 4 ? C : C / 4};
                const int perm[2] = {1, 0}, perm3[3] = {2, 0, 1};
                tr_run(rowops_rows[0].transpose2d, x, y0, 2, shape, perm);
                tr_run(row->transpose2d, x, y1, 2, shape, perm);
                snprintf(what, sizeof what, "%s transpose 2 x %ld: the portable row's", row->name, C);
                check(memcmp(y0, y1, 2 * C * sizeof(float)) == 0, what);
                const long n3 = shape3[0] * shape3[1] * shape3[2];
                tr_run(rowops_rows[0].transpose2d, x, y0, 3, shape3, perm3);
                tr_run(row->transpose2d, x, y1, 3, shape3, perm3);
                snprintf(what, sizeof what, "%s transpose %ld x %ld x %ld (2, 0, 1)", row->name,
                         shape3[0], shape3[1], shape3[2]);
                check(memcmp(y0, y1, n3 * sizeof(float)) == 0, what);
            }
            memcpy(y0, x, sizeof x);
            memcpy(y1, x, sizeof x);
            rowops_bias_gelu_rows(&rowops_rows[0], y0, bi, 2, C);
            rowops_bias_gelu_rows(row, y1, bi, 2, C);
            snprintf(what, sizeof what, "%s bias + GELU 2 x %ld", row->name, C);
            check(rel_diff(y1, y0, 2 * C) <= 1e-6f, what);
        }
    }
}

/* The int8 6 x 8 tiles (qgemm_table.h): every row this CPU runs against the portable tile
 * on the same panels (exact integers), random bytes and the extremes (u8 255 against s8
 * -128 and 127), K from 1 to 300 groups. */
static void check_qgemm_tiles(void) {
    static const long ngs[] = {1, 2, 7, 64, 300};
    char what[160];
    for (int r = 1; r < QG_ROW_COUNT; r++) {
        const qg_row *row = &qg_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        for (int conv = 0; conv < 2; conv++)
        for (size_t t = 0; t < sizeof ngs / sizeof ngs[0]; t++)
        for (int fill = 0; fill < 3; fill++) {
            const long ng = ngs[t];
            uint8_t *a = malloc(ng * 24), *b = malloc(ng * 32);
            const uint8_t s8 = fill == 1 ? 0x80 : 0x7f;
            for (long i = 0; i < ng * 24; i++) a[i] = fill ? (conv ? s8 : 255) : (uint8_t)rnd();
            for (long i = 0; i < ng * 32; i++) b[i] = fill ? (conv ? 255 : s8) : (uint8_t)rnd();
            int32_t want[48], got[48];
            qg_ukr_u8_c(ng, a, b, want, conv ? QG_CONV : QG_GEMM);
            (conv ? row->conv_u8 : row->gemm_u8)(ng, a, b, got);
            snprintf(what, sizeof what, "%s %s ng=%ld fill=%d: the portable tile's sums",
                     row->name, conv ? "conv" : "gemm", ng, fill);
            check(memcmp(got, want, sizeof want) == 0, what);
            free(a);
            free(b);
        }
    }
}

/* MatMulNBits (_nbits.h): every row this CPU runs (on arm64 the NEON 4 x 16) against a
 * direct loop over the unpacked codes, 2 / 4 / 8 bits, each kind of zero point, K not a
 * multiple of the block, N across a panel's edge, 1-7 rows of A. Small integers in A, the
 * codes and power-of-2 scales keep every sum exact in fp32, so the rows agree bit for bit. */
static void check_nbits(void) {
    static const long shapes[][4] = {{1, 40, 7, 16}, {3, 100, 37, 32}, {7, 64, 16, 64}};
    char what[160];
    for (int r = 0; r < NB_ROW_COUNT; r++)
    for (int bits = 2; bits <= 8; bits *= 2)
    for (int zm = NB_ZP_NONE; zm <= NB_ZP_F32; zm++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const nb_row *row = &nb_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const long M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], bs = shapes[s][3];
        const long kb = (K + bs - 1) / bs, Kp = kb * bs, np_ = (N + 15) / 16, P = 32 / bits;
        uint8_t *q = calloc((size_t)(np_ * 16 * Kp), 1), *z8 = calloc((size_t)(np_ * kb * 16 + 16), 1);
        float *sc = calloc((size_t)(np_ * kb * 16), sizeof(float));
        float *zf = calloc((size_t)(np_ * kb * 16), sizeof(float));
        float *a = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * M * N);
        float *bias = calloc((size_t)(np_ * 16), sizeof(float));
        uint32_t *codes = calloc((size_t)(np_ * Kp * 16 / P), sizeof(uint32_t));
        float *ws = malloc(sizeof(float) * nb_ws_floats(M, kb, bs));
        for (long n = 0; n < N; n++) {
            bias[n] = (float)((int)(rnd() % 9) - 4);
            for (long k = 0; k < K; k++) q[n * Kp + k] = (uint8_t)(rnd() % (1u << bits));
            for (long b = 0; b < kb; b++) {
                const long o = (n / 16 * kb + b) * 16 + n % 16;
                sc[o] = (float)(1 << (rnd() % 3)) / 4.f;
                z8[o] = (uint8_t)(rnd() % (1u << bits));
                zf[o] = (float)z8[o] + 0.5f;
            }
        }
        for (long i = 0; i < M * K; i++) a[i] = (float)((int)(rnd() % 7) - 3);
        for (long n = 0; n < np_ * 16; n++)      /* (np, kb, bs / P, 16) words */
            for (long k = 0; k < Kp; k++)
                codes[((n / 16 * kb + k / bs) * (bs / P) + k % bs / P) * 16 + n % 16] |=
                    (uint32_t)q[n * Kp + k] << (bits * (k % P));
        nb_args x = {0};
        x.M = M; x.N = N; x.K = K; x.kb = kb; x.bs = bs; x.bits = bits; x.zp_mode = zm;
        x.zp0 = (float)(1 << (bits - 1)); x.codes = codes; x.scales = sc;
        x.zp8 = zm == NB_ZP_U8 ? z8 : NULL; x.zpf = zm == NB_ZP_F32 ? zf : NULL;
        x.bias = bias; x.a = a; x.lda = K; x.y = y; x.ldy = N; x.ws = ws;
        nb_run(row, &x, 1);
        int ok = 1;
        for (long m = 0; m < M; m++)
            for (long n = 0; n < N; n++) {
                double t = bias[n];
                for (long k = 0; k < K; k++) {
                    const long o = (n / 16 * kb + k / bs) * 16 + n % 16;
                    const double zp = zm == NB_ZP_U8 ? z8[o] : zm == NB_ZP_F32 ? zf[o] : x.zp0;
                    t += (double)a[m * K + k] * (q[n * Kp + k] - zp) * sc[o];
                }
                ok &= y[m * N + n] == (float)t;
            }
        snprintf(what, sizeof what, "%s %d-bit zp mode %d M%ld K%ld N%ld bs%ld: exact on "
                 "small integers", row->name, bits, zm, M, K, N, bs);
        check(ok, what);
        free(q); free(z8); free(sc); free(zf); free(a); free(y); free(bias); free(codes); free(ws);
    }
}

/* The int8-activation rows (accuracy_level 4): any bytes are valid packed codes at every
 * width (each byte holds 8 / bits whole codes), so random words need no packer; every
 * usable row gives the scalar row's bits (their integer sums are exact and the float
 * epilogue is one sequence of roundings), A rows, zero points and scales included. */
static void check_nbits_i8(void) {
    static const long shapes[][4] = {{1, 40, 7, 16}, {3, 100, 37, 32}, {9, 256, 48, 64}};
    char what[160];
    for (int r = 1; r < NBQ_ROW_COUNT; r++)
    for (int bits = 2; bits <= 8; bits *= 2)
    for (int zm = NB_ZP_NONE; zm <= NB_ZP_U8; zm++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const nbq_row *row = &nbq_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const long M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], bs = shapes[s][3];
        const long kb = (K + bs - 1) / bs, Kp = kb * bs, np_ = (N + 15) / 16;
        const long nbytes = np_ * 16 * Kp * bits / 8;
        uint8_t *codes = malloc((size_t)nbytes), *z8 = calloc((size_t)(np_ * kb * 16 + 16), 1);
        float *sc = calloc((size_t)(np_ * kb * 16), sizeof(float));
        float *a = malloc(sizeof(float) * M * K), *bias = calloc((size_t)(np_ * 16), 4);
        float *y0 = malloc(sizeof(float) * M * N), *y1 = malloc(sizeof(float) * M * N);
        float *ws = malloc(sizeof(float) * nb_ws_floats(M, kb, bs));
        for (long i = 0; i < nbytes; i++) codes[i] = (uint8_t)rnd();
        for (long i = 0; i < np_ * kb * 16; i++) {
            sc[i] = (float)(1 << (rnd() % 5)) / 8.f;
            z8[i] = (uint8_t)(rnd() % (1u << bits));
        }
        for (long n = 0; n < N; n++) bias[n] = (float)((int)(rnd() % 9) - 4) / 4.f;
        for (long i = 0; i < M * K; i++) a[i] = (float)((int)(rnd() % 2001) - 1000) / 97.f;
        nb_args x = {0};
        x.M = M; x.N = N; x.K = K; x.kb = kb; x.bs = bs; x.bits = bits; x.zp_mode = zm;
        x.zp0 = (float)(1 << (bits - 1)); x.codes = (const uint32_t *)codes; x.scales = sc;
        x.zp8 = zm == NB_ZP_U8 ? z8 : NULL; x.bias = bias; x.a = a; x.lda = K;
        x.ldy = N; x.ws = ws;
        x.y = y0;
        nbq_run(&nbq_rows[0], &x, 1);
        x.y = y1;
        nbq_run(row, &x, 1);
        snprintf(what, sizeof what, "%s %d-bit zp mode %d M%ld K%ld N%ld bs%ld: the scalar "
                 "row's bits", row->name, bits, zm, M, K, N, bs);
        check(memcmp(y0, y1, sizeof(float) * M * N) == 0, what);
        free(codes); free(z8); free(sc); free(a); free(bias); free(y0); free(y1); free(ws);
    }
}

void check_native_rows(void) {
    check_dwc();
    check_convdirect();
    check_dwrows();
    check_dwproj();
    check_winograd();
    check_recurrent();
    check_nbits();
    check_nbits_i8();
    check_attention_rows();
    check_pool();
    check_rowops();
    check_qgemm_tiles();
}
