/* The vector body of _dwproj.h on DWP_L-float vectors; included once per width with the
 * DWP_* macros defined: the vector type and ops, DWP_MASK_T / DWP_LMASK(n) (lanes 0 ..
 * n - 1) / DWP_NOLANE0(m) / DWP_MLOAD(m, p) (masked-off lanes neither read nor faulted) /
 * DWP_STOREN(p, v, n) (lanes 0 .. n - 1 stored), DWP_MBW (1x1 tile channels), DWP_DWNV
 * (depthwise tile vectors, <= 4) and the function names DWP_FN(name). */

DWP_ATTR __attribute__((always_inline)) static inline DWP_V DWP_FN(act)(
        DWP_V v, int act, DWP_V lo, DWP_V hi) {
    /* constants first: max / min return the second operand on NaN, which propagates as
     * the unfused Relu / Clip do */
    if (act == EDGENN_ACT_RELU) return DWP_MAX(lo, v);
    if (act == EDGENN_ACT_CLIP) return DWP_MIN(hi, DWP_MAX(lo, v));
    return v;
}

/* Depthwise outputs of rows oy .. oy + R - 1 (R <= 2), NV vectors from column ox, of
 * channel plane xc (weights w, bias b) into to (row pitch W): NV * R independent FMA
 * chains, and the input rows shared by the two output rows loaded once (4 rows x 3 taps
 * x NV loads for 18 * NV FMAs). EDGE: the row's first or last vector (NV = 1), its taps
 * by masked loads; else every tap's floats lie inside the row: plain loads (masks
 * computed per vector make the compiler spill them), and where
 * DWP_ALIGNR is defined (AVX-512F, NEON) the left / right taps are the aligned loads shifted by
 * one float instead of two more loads, each across a cache line. */
DWP_ATTR __attribute__((always_inline)) static inline void DWP_FN(dw_tile)(
        const dwp_args *a, const float *xc, const DWP_V *w, DWP_V b, long oy, long ox,
        float *to, DWP_V lo, DWP_V hi, const int NV, const int R, const int EDGE) {
    const long H = a->H, W = a->W;
    /* EDGE: columns ox + l, ox + l - 1 >= 0, ox + l + 1 < W */
    const DWP_MASK_T mc = DWP_LMASK(EDGE ? W - ox : DWP_L);
    const DWP_MASK_T ml = EDGE && !ox ? DWP_NOLANE0(mc) : mc;
    const DWP_MASK_T mr = DWP_LMASK(EDGE ? W - ox - 1 : DWP_L);
    DWP_V acc[2][4];
    for (int v = 0; v < NV; v++) acc[0][v] = acc[1][v] = b;
    for (int i = 0; i < R + 2; i++) {      /* input row oy - 1 + i */
        const long iy = oy - 1 + i;
        if (iy < 0 || iy >= H) continue;
        const float *r = xc + iy * W + ox;
        DWP_V xl[4], xm[4], xr[4];
        for (int v = 0; v < NV; v++) xm[v] = EDGE ? DWP_MLOAD(mc, r + DWP_L * v) : DWP_LOAD(r + DWP_L * v);
#ifdef DWP_ALIGNR
        if (!EDGE) {   /* the shifted taps from the aligned loads and the tile's two neighbours */
            for (int v = 0; v < NV; v++) {
                xl[v] = DWP_ALIGNR(xm[v], v ? xm[v - 1] : DWP_SET1(r[-1]), DWP_L - 1);
                xr[v] = DWP_ALIGNR(v + 1 < NV ? xm[v + 1] : DWP_SET1(r[DWP_L * NV]), xm[v], 1);
            }
        } else
#endif
        for (int v = 0; v < NV; v++) {
            const float *rv = r + DWP_L * v;
            xl[v] = EDGE ? DWP_MLOAD(ml, rv - 1) : DWP_LOAD(rv - 1);
            xr[v] = EDGE ? DWP_MLOAD(mr, rv + 1) : DWP_LOAD(rv + 1);
        }
        for (int v = 0; v < NV; v++)
            for (int q = 0; q < R; q++) {   /* output row oy + q: tap row i - q */
                const int ti = i - q;
                if (ti < 0 || ti > 2) continue;
                acc[q][v] = DWP_FMA(w[3 * ti], xl[v], acc[q][v]);
                acc[q][v] = DWP_FMA(w[3 * ti + 1], xm[v], acc[q][v]);
                acc[q][v] = DWP_FMA(w[3 * ti + 2], xr[v], acc[q][v]);
            }
    }
    for (int q = 0; q < R; q++)
        for (int v = 0; v < NV; v++) {
            const DWP_V y = DWP_FN(act)(acc[q][v], a->dact, lo, hi);
            if (EDGE) DWP_STOREN(to + q * W + DWP_L * v, y, W - ox);
            else DWP_STORE(to + q * W + DWP_L * v, y);
        }
}

/* R output rows from oy: the row's first and last vectors as edges, the ones between in
 * balanced tiles of <= DWP_DWNV. */
DWP_ATTR __attribute__((always_inline)) static inline void DWP_FN(dw_rows)(
        const dwp_args *a, const float *xc, const DWP_V *w, DWP_V b, long oy, float *to,
        DWP_V lo, DWP_V hi, const int R) {
    const long nvec = (a->W + DWP_L - 1) / DWP_L, inner = nvec - 2;
    DWP_FN(dw_tile)(a, xc, w, b, oy, 0, to, lo, hi, 1, R, 1);
    if (nvec == 1) return;
    const long ntile = (inner + DWP_DWNV - 1) / DWP_DWNV;
    for (long t = 0; t < ntile; t++) {
        const long v0 = 1 + t * inner / ntile, nv = 1 + (t + 1) * inner / ntile - v0;
        const long ox = DWP_L * v0;
        if (DWP_DWNV >= 4 && nv == 4) DWP_FN(dw_tile)(a, xc, w, b, oy, ox, to + ox, lo, hi, 4, R, 0);
        else if (DWP_DWNV >= 3 && nv == 3) DWP_FN(dw_tile)(a, xc, w, b, oy, ox, to + ox, lo, hi, 3, R, 0);
        else if (nv == 2) DWP_FN(dw_tile)(a, xc, w, b, oy, ox, to + ox, lo, hi, 2, R, 0);
        else DWP_FN(dw_tile)(a, xc, w, b, oy, ox, to + ox, lo, hi, 1, R, 0);
    }
    const long ox = DWP_L * (nvec - 1);
    DWP_FN(dw_tile)(a, xc, w, b, oy, ox, to + ox, lo, hi, 1, R, 1);
}

/* Depthwise of output rows [r0, r1) of every channel into T (channel c at c * tpitch,
 * the band's rows one after another), two rows at a time. */
DWP_ATTR static void DWP_FN(depthwise)(const dwp_args *a, long r0, long r1, float *T) {
    const long H = a->H, W = a->W;
    const DWP_V lo = DWP_SET1(a->dact == EDGENN_ACT_CLIP ? a->dlo : 0.f), hi = DWP_SET1(a->dhi);
    for (long c = 0; c < a->C; c++) {
        const float *xc = a->x + c * H * W, *wc = a->wd + c * 9;
        DWP_V w[9];
        for (int t = 0; t < 9; t++) w[t] = DWP_SET1(wc[t]);
        const DWP_V b = DWP_SET1(a->bd[c]);
        float *tc = a->tpitch * c + T;
        long oy = r0;
        for (; oy + 2 <= r1; oy += 2)
            DWP_FN(dw_rows)(a, xc, w, b, oy, tc + (oy - r0) * W, lo, hi, 2);
        if (oy < r1) DWP_FN(dw_rows)(a, xc, w, b, oy, tc + (oy - r0) * W, lo, hi, 1);
    }
}

/* One 1x1 tile: channels m0 .. m0 + mr - 1 (mr <= DWP_MBW) x NV vectors of T from pixel
 * p0 of the band (np of them real), into y at out (channel m0's first pixel of the tile). */
DWP_ATTR __attribute__((always_inline)) static inline void DWP_FN(pw_tile)(
        const dwp_args *a, const float *T, const float *wb, long m0, long mr, long p0,
        long np, float *out, const long NV) {
    const long ldy = a->H * a->W;
    DWP_V acc[DWP_MBW][DWP_NV];
#pragma GCC unroll 8
    for (int r = 0; r < DWP_MBW; r++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) acc[r][v] = DWP_SET1(a->bp[m0 + r]);
    const float *t = T + p0;
    for (long k = 0; k < a->C; k++, t += a->tpitch, wb += DWP_MBW) {
        DWP_V xv[DWP_NV];
        for (int v = 0; v < NV; v++) xv[v] = DWP_LOAD(t + DWP_L * v);
        for (int r = 0; r < DWP_MBW; r++) {
            const DWP_V wr = DWP_SET1(wb[r]);
            for (int v = 0; v < NV; v++) acc[r][v] = DWP_FMA(wr, xv[v], acc[r][v]);
        }
    }
    const DWP_V lo = DWP_SET1(a->pact == EDGENN_ACT_CLIP ? a->plo : 0.f), hi = DWP_SET1(a->phi);
#pragma GCC unroll 8
    for (int r = 0; r < DWP_MBW; r++) {
        if (r >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) {
            const DWP_V y = DWP_FN(act)(acc[r][v], a->pact, lo, hi);
            if (np >= DWP_L * (v + 1)) DWP_STORE(out + r * ldy + DWP_L * v, y);
            else DWP_STOREN(out + r * ldy + DWP_L * v, y, np - DWP_L * v);
        }
    }
}

/* The 1x1 conv of the band's n pixels in T into y from pixel q0 of each output plane. */
DWP_ATTR static void DWP_FN(project)(const dwp_args *a, const float *T, long n, long q0) {
    const long nvec = (n + DWP_L - 1) / DWP_L, ntile = (nvec + DWP_NV - 1) / DWP_NV;
    const long ldy = a->H * a->W;
    for (long t = 0; t < ntile; t++) {
        const long v0 = t * nvec / ntile, nv = (t + 1) * nvec / ntile - v0;
        const long p0 = DWP_L * v0, np = n - p0;
        for (long m0 = 0; m0 < a->M; m0 += DWP_MBW) {
            const float *wb = a->wp + (m0 / DWP_MBW) * a->C * DWP_MBW;
            const long mr = a->M - m0 < DWP_MBW ? a->M - m0 : DWP_MBW;
            float *out = a->y + m0 * ldy + q0 + p0;
            if (nv == 3) DWP_FN(pw_tile)(a, T, wb, m0, mr, p0, np, out, 3);
            else if (nv == 2) DWP_FN(pw_tile)(a, T, wb, m0, mr, p0, np, out, 2);
            else DWP_FN(pw_tile)(a, T, wb, m0, mr, p0, np, out, 1);
        }
    }
}

/* Output rows [r0, r1) in bands of <= a->rows rows, as even as they can be; T this
 * thread's. */
DWP_ATTR static void DWP_FN(run)(const dwp_args *a, float *T, long r0, long r1) {
    const long n = r1 - r0, bands = (n + a->rows - 1) / a->rows;
    for (long b = 0; b < bands; b++) {
        const long s = r0 + b * n / bands, e = r0 + (b + 1) * n / bands;
        DWP_FN(depthwise)(a, s, e, T);
        DWP_FN(project)(a, T, (e - s) * a->W, s * a->W);
    }
}

/* the includer's parameters, undefined for the next width */
#undef DWP_V
#undef DWP_L
#undef DWP_ATTR
#undef DWP_LOAD
#undef DWP_STORE
#undef DWP_SET1
#undef DWP_FMA
#undef DWP_MAX
#undef DWP_MIN
#undef DWP_MASK_T
#undef DWP_LMASK
#undef DWP_NOLANE0
#undef DWP_MLOAD
#undef DWP_STOREN
#undef DWP_MBW
#undef DWP_DWNV
#undef DWP_FN
#undef DWP_ALIGNR
