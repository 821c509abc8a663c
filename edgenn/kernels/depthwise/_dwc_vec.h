/* The vector body of _dwc8.h on DWC_L-float vectors: AVX2+FMA (8 lanes) and AVX-512F (16),
 * included once per width with the DWC_* macros defined (DWC_FN names each function for
 * its width). A group is DWC_L channels interleaved in Q (Hp, Wp, DWC_L); every tap of
 * every output pixel is one DWC_L-lane multiply-add. */

/* r[p] <- pixel p's DWC_L channels: DWC_L pixels from each of the planes s, s + plane, ... */
DWC_ATTR static inline __attribute__((always_inline)) void DWC_FN(dwc_gather)(
        const float *s, long plane, DWC_V r[DWC_L])
{
    for (int l = 0; l < DWC_L; l++)
        r[l] = DWC_LOADU(s + l * plane);
    DWC_TRANSPOSE(r);
}

/* Rows [iy0, iy1) of a small plane of a full group as one flat run: DWC_L pixels at a
 * time through a transpose (the tail block overlapping), each pixel's vector stored to its padded cell.
 * Its own function, called instead of the row-wise pack below (a flag inside that one
 * would slow it down on the planes it handles). */
DWC_ATTR static void DWC_FN(dwc_pack_flat)(const float *xb, int c0, float *Q,
                                           const dwc8_geom *g, int iy0, int iy1)
{
    const long plane = (long)g->H * g->W;
    const float *src = xb + (long)c0 * plane;
    const int W = g->W;
    const long end = (long)iy1 * W;     /* rows [iy0, iy1): >= DWC_L pixels */
    DWC_V r[DWC_L];
    for (long i = (long)iy0 * W; i < end; i += DWC_L) {
        if (i > end - DWC_L)
            i = end - DWC_L;
        DWC_FN(dwc_gather)(src + i, plane, r);
        int iy = (int)(i / W), ix = (int)(i % W);
        for (int p = 0; p < DWC_L; p++, ix++) {
            while (ix >= W) {
                ix -= W;
                iy++;
            }
            DWC_STOREU(Q + ((long)(iy + g->ph) * g->Wp + ix + g->pw) * DWC_L, r[p]);
        }
    }
}

/* dwc8_pack for a full group (nl == DWC_L), DWC_L pixels at a time through a transpose;
 * the tail is one more block ending at the last pixel (overlapping writes are idempotent);
 * rows narrower than a vector in scalar (small planes go flat instead: dwc8_flat_in). */
DWC_ATTR static void DWC_FN(dwc_pack)(const float *xb, int c0, float *Q, const dwc8_geom *g,
                                      int iy0, int iy1)
{
    const long plane = (long)g->H * g->W;
    const float *src = xb + (long)c0 * plane;
    const int W = g->W;
    for (int iy = iy0; iy < iy1; iy++) {
        float *dst = Q + ((long)(iy + g->ph) * g->Wp + g->pw) * DWC_L;
        const float *s = src + (long)iy * W;
        DWC_V r[DWC_L];
        if (W < DWC_L) {                /* (masked loads measured slower here) */
            for (int ix = 0; ix < W; ix++)
                for (int l = 0; l < DWC_L; l++)
                    dst[ix * DWC_L + l] = s[l * plane + ix];
            continue;
        }
        for (int ix = 0; ix < W; ix += DWC_L) {
            if (ix > W - DWC_L)
                ix = W - DWC_L;
            DWC_FN(dwc_gather)(s + ix, plane, r);
            for (int p = 0; p < DWC_L; p++)
                DWC_STOREU(dst + (ix + p) * DWC_L, r[p]);
        }
    }
}

/* n >= DWC_L pixels of obuf (n, DWC_L) to the planes d, d + plane, ...: DWC_L pixels at a
 * time through a transpose, the tail block ending at the last pixel (overlapping). A row
 * (dwc_unpack_row), or a whole small plane (dwc_unpack_flat). */
DWC_ATTR static inline void DWC_FN(dwc_unpack_run)(const float *obuf, float *d, long n,
                                                   long plane)
{
    DWC_V r[DWC_L];
    for (long i = 0; i < n; i += DWC_L) {
        if (i > n - DWC_L)
            i = n - DWC_L;
        for (int p = 0; p < DWC_L; p++)
            r[p] = DWC_LOADU(obuf + (i + p) * DWC_L);
        DWC_TRANSPOSE(r);
        for (int l = 0; l < DWC_L; l++)
            DWC_STOREU(d + l * plane + i, r[l]);
    }
}

/* Rows [oy0, oy1) of small output planes (dwc8_flat_out), >= DWC_L pixels: obuf
 * ((oy1-oy0)*OW, DWC_L) to the planes c0.. . */
DWC_ATTR static void DWC_FN(dwc_unpack_flat)(const float *obuf, float *yb, int c0,
                                             const dwc8_geom *g)
{
    const long plane = (long)g->OH * g->OW;
    DWC_FN(dwc_unpack_run)(obuf, yb + (long)c0 * plane + (long)g->oy0 * g->OW,
                           (long)(g->oy1 - g->oy0) * g->OW, plane);
}

/* dwc8_unpack_row for a full group (nl == DWC_L); tails as in the pack. */
DWC_ATTR static void DWC_FN(dwc_unpack_row)(const float *obuf, float *yb, int c0, int oy,
                                            const dwc8_geom *g)
{
    const long plane = (long)g->OH * g->OW;
    const int OW = g->OW;
    float *d = yb + (long)c0 * plane + (long)oy * OW;
    if (OW < DWC_L) {                   /* (masked stores are slow on AMD) */
        for (int l = 0; l < DWC_L; l++)
            for (int ox = 0; ox < OW; ox++)
                d[l * plane + ox] = obuf[ox * DWC_L + l];
        return;
    }
    DWC_FN(dwc_unpack_run)(obuf, d, OW, plane);
}

/* The activation of one accumulator vector, in registers (the cheap activations). */
typedef struct { DWC_V zero, one, lo, hi, sixth, half; } DWC_FN(dwc_actc);

DWC_ATTR __attribute__((always_inline))
static inline DWC_V DWC_FN(dwc_act)(DWC_V v, int mode, const DWC_FN(dwc_actc) *k)
{
    /* constant first: max/min return their second operand on NaN, so NaN propagates
     * as in the reference */
    switch (mode) {
    case EDGENN_ACT_RELU: return DWC_MAX(k->zero, v);
    case EDGENN_ACT_CLIP: return DWC_MIN(k->hi, DWC_MAX(k->lo, v));
    case EDGENN_ACT_HARDSIGMOID:
        return DWC_MIN(k->one, DWC_MAX(k->zero, DWC_FMA(v, k->lo, k->hi)));
    case EDGENN_ACT_HARDSWISH:
        return DWC_MUL(v, DWC_MIN(k->one, DWC_MAX(k->zero, DWC_FMA(v, k->sixth, k->half))));
    case EDGENN_ACT_LEAKYRELU:                 /* v >= 0 ? v : v * alpha */
        return DWC_SELECT_GE0(v, DWC_MUL(v, k->lo), k->zero);
    default: return v;
    }
}

/* P pixels (xc: their first input plane, planes `plane` apart) of the fused 1x1 conv:
 * each pixel's L channels bias + the K products in order (one broadcast input per pixel
 * and k, one weight vector per k), the activation, each stored to its cell of Q (pixel
 * (iy, ix) of the image onward, rows of W pixels in Q's rows of Wp cells). */
DWC_ATTR __attribute__((always_inline))
static inline void DWC_FN(dwc_expand_px)(const float *xc, long plane, const float *w, int K,
                                         DWC_V bias, float *Q, int iy, int ix,
                                         const dwc8_geom *g, int mode,
                                         const DWC_FN(dwc_actc) *k, const int P)
{
    DWC_V acc[DWC_EXPAND_PX];
#pragma GCC unroll 16
    for (int p = 0; p < P; p++)
        acc[p] = bias;
    for (int c = 0; c < K; c++, xc += plane) {
        const DWC_V wv = DWC_LOADU(w + (long)c * DWC_L);
        __builtin_prefetch(w + (long)(c + DWC_EXPAND_PF) * DWC_L);
        for (int p = 0; p < P; p++)
            acc[p] = DWC_FMA(wv, DWC_SET1(xc[p]), acc[p]);
    }
    float *dst = Q + ((long)(iy + g->ph) * g->Wp + ix + g->pw) * DWC_L;
#pragma GCC unroll 16
    for (int p = 0; p < P; p++) {
        DWC_STOREU(dst, DWC_FN(dwc_act)(acc[p], mode, k));
        dst += DWC_L;
        if (++ix == g->W) {             /* the next image row: past Q's padding cells */
            ix = 0;
            dst += (long)(g->Wp - g->W) * DWC_L;
        }
    }
}

/* Rows [iy0, iy1) of Q's interior for group gi <- the fused 1x1 conv of image xb (K, H,
 * W) (g->ex): their pixels as one run of register tiles of balanced sizes, <=
 * DWC_EXPAND_PX (neither a row's nor the plane's tail is left to a short, latency-bound
 * tile: 7x7 is 5 tiles of 9-10, not 4 of 12 and one of 1). */
DWC_ATTR static void DWC_FN(dwc_expand)(const float *xb, int gi, float *Q, const dwc8_geom *g,
                                        int iy0, int iy1)
{
    const dwc8_expand *ex = g->ex;
    const long plane = (long)g->H * g->W;
    const long first = (long)iy0 * g->W, run = (long)(iy1 - iy0) * g->W;
    const long ntile = (run + DWC_EXPAND_PX - 1) / DWC_EXPAND_PX;
    const int K = ex->K;
    const float *w = ex->w + (long)gi * K * DWC_L;
    const DWC_V bias = DWC_LOADU(ex->b + (long)gi * DWC_L);
    DWC_FN(dwc_actc) k = { DWC_SET1(0.0f), DWC_SET1(1.0f), DWC_SET1(ex->p0), DWC_SET1(ex->p1),
                           DWC_SET1(1.0f / 6.0f), DWC_SET1(0.5f) };
    for (long t = 0; t < ntile; t++) {
        const long i = first + t * run / ntile;
        const int iy = (int)(i / g->W), ix = (int)(i % g->W);
        switch ((int)(first + (t + 1) * run / ntile - i)) {
#define DWC_TAIL(n) case n: DWC_FN(dwc_expand_px)(xb + i, plane, w, K, bias, Q, iy, ix, g, \
                                              ex->mode, &k, n); break;
        DWC_EXPAND_TAILS
#undef DWC_TAIL
        default: break;
        }
    }
}

/* Any kernel's T taps (weight vectors wl, tap offsets off) of NP <= 4 pixels from q
 * (sx floats apart) into o: NP FMA chains side by side, so a row's last pixels (3 of a
 * 7x7 plane's 7) do not run one at a time, one chain latency-bound. */
DWC_ATTR __attribute__((always_inline))
static inline void DWC_FN(dwc_taps)(const float *q, const float *wl, DWC_V bias,
                                    const long *off, float *o, long sx, int T, int mode,
                                    const DWC_FN(dwc_actc) *k, const int NP)
{
    DWC_V a[4];
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++)
        a[p] = bias;
    for (int t = 0; t < T; t++) {
        const DWC_V wt = DWC_LOADU(wl + t * DWC_L);
        const float *x = q + off[t];
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++)
            a[p] = DWC_FMA(wt, DWC_LOADU(x + p * sx), a[p]);
    }
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++)
        DWC_STOREU(o + p * DWC_L, DWC_FN(dwc_act)(a[p], mode, k));
}

/* The 3x3 taps (w: their nine vectors, in registers) of row oy's OW pixels from q into
 * obuf, + bias, then the activation. Tap (i, j) at row pointer i (rp floats apart) + j cp:
 * three pointers and, where cp is the constant DWC_L (dilation 1 across, every MobileNet /
 * EfficientNet depthwise conv), immediate displacements; eight offsets had not fit the
 * general registers and were reloaded from the stack per pixel. */
DWC_ATTR __attribute__((always_inline))
static inline void DWC_FN(dwc_row9)(const float *q, long rp, const long cp, const DWC_V *w,
                                    DWC_V bias, float *obuf, long sx, int OW, const int mode,
                                    const DWC_FN(dwc_actc) *k)
{
    const float *q1 = q + rp, *q2 = q + 2 * rp;
    int ox = 0;
#if DWC_ROW9_PX > 1
    /* DWC_ROW9_PX pixels at a time, each step for all of them: 2 DWC_ROW9_PX independent
     * chains (one pixel's two would leave an in-order core waiting on the FMA latency);
     * per pixel the same operations in the same order as below */
    for (; ox + DWC_ROW9_PX <= OW; ox += DWC_ROW9_PX, q += DWC_ROW9_PX * sx,
         q1 += DWC_ROW9_PX * sx, q2 += DWC_ROW9_PX * sx) {
        DWC_V a[DWC_ROW9_PX], b[DWC_ROW9_PX];
#define DWC_ROW9_STEP(stmt) \
    _Pragma("GCC unroll 4") for (int p = 0; p < DWC_ROW9_PX; p++) {                      \
        const long s = p * sx; (void)s; stmt; }
        DWC_ROW9_STEP(a[p] = DWC_FMA(w[0], DWC_LOADU(q + s), bias))
        DWC_ROW9_STEP(b[p] = DWC_MUL(w[1], DWC_LOADU(q + s + cp)))
        DWC_ROW9_STEP(a[p] = DWC_FMA(w[2], DWC_LOADU(q + s + 2 * cp), a[p]))
        DWC_ROW9_STEP(b[p] = DWC_FMA(w[3], DWC_LOADU(q1 + s), b[p]))
        DWC_ROW9_STEP(a[p] = DWC_FMA(w[4], DWC_LOADU(q1 + s + cp), a[p]))
        DWC_ROW9_STEP(b[p] = DWC_FMA(w[5], DWC_LOADU(q1 + s + 2 * cp), b[p]))
        DWC_ROW9_STEP(a[p] = DWC_FMA(w[6], DWC_LOADU(q2 + s), a[p]))
        DWC_ROW9_STEP(b[p] = DWC_FMA(w[7], DWC_LOADU(q2 + s + cp), b[p]))
        DWC_ROW9_STEP(a[p] = DWC_FMA(w[8], DWC_LOADU(q2 + s + 2 * cp), a[p]))
        DWC_ROW9_STEP(DWC_STOREU(obuf + (ox + p) * DWC_L,
                                 DWC_FN(dwc_act)(DWC_ADD(a[p], b[p]), mode, k)))
#undef DWC_ROW9_STEP
    }
#endif
    for (; ox < OW; ox++, q += sx, q1 += sx, q2 += sx) {
        DWC_V a = DWC_FMA(w[0], DWC_LOADU(q), bias);
        DWC_V b = DWC_MUL(w[1], DWC_LOADU(q + cp));
        a = DWC_FMA(w[2], DWC_LOADU(q + 2 * cp), a);
        b = DWC_FMA(w[3], DWC_LOADU(q1), b);
        a = DWC_FMA(w[4], DWC_LOADU(q1 + cp), a);
        b = DWC_FMA(w[5], DWC_LOADU(q1 + 2 * cp), b);
        a = DWC_FMA(w[6], DWC_LOADU(q2), a);
        b = DWC_FMA(w[7], DWC_LOADU(q2 + cp), b);
        a = DWC_FMA(w[8], DWC_LOADU(q2 + 2 * cp), a);
        DWC_STOREU(obuf + ox * DWC_L, DWC_FN(dwc_act)(DWC_ADD(a, b), mode, k));
    }
}

/* dwc_row9 with `mode` a constant where it is one of the common ones, so no pixel
 * dispatches on it (a switch per pixel is a large share of this short loop's work). */
DWC_ATTR __attribute__((always_inline))
static inline void DWC_FN(dwc_row9_act)(const float *q, long rp, const long cp,
                                        const DWC_V *w, DWC_V bias, float *obuf, long sx,
                                        int OW, int mode, const DWC_FN(dwc_actc) *k)
{
    switch (mode) {
    case EDGENN_ACT_NONE: DWC_FN(dwc_row9)(q, rp, cp, w, bias, obuf, sx, OW, EDGENN_ACT_NONE, k); break;
    case EDGENN_ACT_RELU: DWC_FN(dwc_row9)(q, rp, cp, w, bias, obuf, sx, OW, EDGENN_ACT_RELU, k); break;
    case EDGENN_ACT_CLIP: DWC_FN(dwc_row9)(q, rp, cp, w, bias, obuf, sx, OW, EDGENN_ACT_CLIP, k); break;
    default: DWC_FN(dwc_row9)(q, rp, cp, w, bias, obuf, sx, OW, mode, k); break;
    }
}

/* Row oy of one group into obuf (OW, DWC_L): taps (w: the nine 3x3 tap vectors when
 * T == 9), + bias, then the activation in registers (mode; EDGENN_ACT_NONE when the caller still
 * has to add a residual or apply a transcendental activation). */
DWC_ATTR __attribute__((always_inline))
static inline void DWC_FN(dwc_row)(const float *Q, const DWC_V *w, const float *wl,
                                   DWC_V bias, const long *off, float *obuf, int oy,
                                   int mode, const DWC_FN(dwc_actc) *k, const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW;
    const long sx = (long)g->sw * DWC_L;
    const float *q = Q + (long)oy * g->sh * g->Wp * DWC_L;
    const long rp = T == 9 ? off[3] : 0, cp = T == 9 ? off[1] : 0;
    if (T == 9 && off[2] == 2 * cp && off[4] == rp + cp && off[5] == rp + 2 * cp
            && off[6] == 2 * rp && off[7] == 2 * rp + cp && off[8] == 2 * rp + 2 * cp) {
        /* 3x3, the taps held in registers; tap (i, j) at i rp + j cp, as c8_plane lays
         * them out (other offsets take the loop below) */
        if (cp == DWC_L)
            DWC_FN(dwc_row9_act)(q, rp, DWC_L, w, bias, obuf, sx, OW, mode, k);
        else
            DWC_FN(dwc_row9_act)(q, rp, cp, w, bias, obuf, sx, OW, mode, k);
        return;
    }
    int ox = 0;                         /* any kernel: four pixels, four FMA chains */
    for (; ox + 4 <= OW; ox += 4, q += 4 * sx)
        DWC_FN(dwc_taps)(q, wl, bias, off, obuf + ox * DWC_L, sx, T, mode, k, 4);
    switch (OW - ox) {                  /* the row's last 1-3 pixels, their chains together */
    case 3: DWC_FN(dwc_taps)(q, wl, bias, off, obuf + ox * DWC_L, sx, T, mode, k, 3); break;
    case 2: DWC_FN(dwc_taps)(q, wl, bias, off, obuf + ox * DWC_L, sx, T, mode, k, 2); break;
    case 1: DWC_FN(dwc_taps)(q, wl, bias, off, obuf + ox * DWC_L, sx, T, mode, k, 1); break;
    default: break;
    }
}

/* Output rows [g->oy0, g->oy1) of one group (channels c0 .. c0+nl-1) into yb: rows, residual (zc:
 * plane c0 of z, planes `plane` apart, or NULL), activation, scatter to the NCHW planes. */
DWC_ATTR static inline __attribute__((always_inline)) void DWC_FN(dwc_group_t)(
        const float *Q, const float *wl, const float *bl, const long *off, int nl,
        const float *zc, float *obuf, float *yb, int c0, const dwc8_geom *g, const int flat)
{
    const long plane = (long)g->OH * g->OW;
    const int OW = g->OW;
    DWC_FN(dwc_actc) k = { DWC_SET1(0.0f), DWC_SET1(1.0f), DWC_SET1(g->p0), DWC_SET1(g->p1),
                           DWC_SET1(1.0f / 6.0f), DWC_SET1(0.5f) };
    DWC_V w[9];
    for (int t = 0; t < 9 && t < g->T; t++)
        w[t] = DWC_LOADU(wl + t * DWC_L);
    const DWC_V bias = DWC_LOADU(bl);
    /* activation in registers unless a residual comes first or it needs libm */
    const int late = zc != NULL || g->mode == EDGENN_ACT_SIGMOID || g->mode == EDGENN_ACT_SILU
        || g->mode == EDGENN_ACT_GELU;
    const int mode = late ? EDGENN_ACT_NONE : g->mode;
    for (int oy = g->oy0; oy < g->oy1; oy++) {
        float *row = flat ? obuf + (long)(oy - g->oy0) * OW * DWC_L : obuf;
        DWC_FN(dwc_row)(Q, w, wl, bias, off, row, oy, mode, &k, g);
        if (late) {
            if (zc)
                for (int l = 0; l < nl; l++)
                    for (int ox = 0; ox < OW; ox++)
                        row[ox * DWC_L + l] += zc[l * plane + (long)oy * OW + ox];
            dwc8_act_scalar(row, OW * DWC_L, g);
        }
        if (flat)
            continue;
        if (nl == DWC_L)
            DWC_FN(dwc_unpack_row)(obuf, yb, c0, oy, g);
        else
            dwc8_unpack_row(obuf, yb, c0, nl, oy, g);
    }
    if (flat)
        DWC_FN(dwc_unpack_flat)(obuf, yb, c0, g);
}

/* Two instances, so the row-wise one compiles as it did before the flat output existed:
 * flat, every row kept in obuf and unpacked whole at the end (a full group, small output
 * plane: dwc8_flat_out), else each row unpacked as it is done. */
DWC_ATTR static void DWC_FN(dwc_group_flat)(const float *Q, const float *wl, const float *bl,
        const long *off, const float *zc, float *obuf, float *yb, int c0, const dwc8_geom *g)
{
    DWC_FN(dwc_group_t)(Q, wl, bl, off, DWC_L, zc, obuf, yb, c0, g, 1);
}

DWC_ATTR static void DWC_FN(dwc_group)(const float *Q, const float *wl, const float *bl,
        const long *off, int nl, const float *zc, float *obuf, float *yb, int c0,
        const dwc8_geom *g)
{
    if (nl == DWC_L && dwc8_flat_out(g) && (long)(g->oy1 - g->oy0) * g->OW >= DWC_L)
        DWC_FN(dwc_group_flat)(Q, wl, bl, off, zc, obuf, yb, c0, g);
    else
        DWC_FN(dwc_group_t)(Q, wl, bl, off, nl, zc, obuf, yb, c0, g, 0);
}

/* Row oy of one group of MaxPool / AveragePool into obuf (OW, DWC_L). */
DWC_ATTR static void DWC_FN(dwc_pool_row)(const float *Q, const long *off, float *obuf,
                                          int oy, const dwc8_geom *g)
{
    const int T = g->T, OW = g->OW;
    const long sx = (long)g->sw * DWC_L;
    const float *q = Q + (long)oy * g->sh * g->Wp * DWC_L;
    for (int ox = 0; ox < OW; ox++, q += sx) {
        DWC_V a = DWC_LOADU(q + off[0]);
        if (g->kind == KIND_MAX) {       /* max(v, a): v if v > a, as the reference */
            for (int t = 1; t < T; t++)
                a = DWC_MAX(DWC_LOADU(q + off[t]), a);
        } else {
            for (int t = 1; t < T; t++)
                a = DWC_ADD(a, DWC_LOADU(q + off[t]));
            a = DWC_DIV(a, DWC_SET1(g->cnt[(long)oy * OW + ox]));
        }
        DWC_STOREU(obuf + ox * DWC_L, a);
    }
}

/* this width's parameters, so the next width defines its own */
#undef DWC_WIDTH
#undef DWC_L
#undef DWC_V
#undef DWC_ATTR
#undef DWC_LOADU
#undef DWC_STOREU
#undef DWC_SET1
#undef DWC_FMA
#undef DWC_MUL
#undef DWC_ADD
#undef DWC_DIV
#undef DWC_MAX
#undef DWC_MIN
#undef DWC_TRANSPOSE
#undef DWC_SELECT_GE0
#undef DWC_EXPAND_PX
#undef DWC_EXPAND_TAILS
#undef DWC_ROW9_PX
