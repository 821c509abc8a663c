/* The vector body of _dwrows.h on DWR_L-float vectors; included once per width with the
 * DWR_* macros defined. */

/* Plane x (H, W) into the phase plane P (_phases.h's layout) in vectors: stride 1 copies
 * rows (L floats, then 4 on x86, then singles), stride 2 deinterleaves even / odd columns
 * (DWR_DEINTERLEAVE: 2 L inputs -> L + L); short stride-2 rows and other strides through
 * phases_fill_plane. */
DWR_ATTR __attribute__((always_inline))
static inline void DWR_FILL(const dwr_args *a, const float *x, float *P)
{
    const long W = a->W, Wq = a->Wq, pl = a->PL, SW = a->SW;
    if (SW > 2 || (SW == 2 && W < 2 * DWR_L)) {
        phases_fill_plane(x, P, a->H, W, Wq, a->PT, pl, SW);
        return;
    }
    for (long iy = 0; iy < a->H; iy++) {
        const float *s = x + iy * W;
        float *d = P + (a->PT + iy) * SW * Wq;
        long ix = 0;
        if (SW == 1) {
            for (; ix + DWR_L <= W; ix += DWR_L) DWR_STOREU(d + pl + ix, DWR_LOAD(s + ix));
#if DWR_L > 4
            for (; ix + 4 <= W; ix += 4) _mm_storeu_ps(d + pl + ix, _mm_loadu_ps(s + ix));
#endif
            for (; ix < W; ix++) d[pl + ix] = s[ix];
            continue;
        }
        float *e = d + (pl & 1) * Wq + pl / 2;               /* image columns ix even */
        float *o = d + ((pl + 1) & 1) * Wq + (pl + 1) / 2;   /* ix odd */
        for (; ix + 2 * DWR_L <= W; ix += 2 * DWR_L) {
            DWR_V ev, od;
            DWR_DEINTERLEAVE(DWR_LOAD(s + ix), DWR_LOAD(s + ix + DWR_L), ev, od);
            DWR_STOREU(e + ix / 2, ev);
            DWR_STOREU(o + ix / 2, od);
        }
        for (; ix + 1 < W; ix += 2) {
            e[ix / 2] = s[ix];
            o[ix / 2] = s[ix + 1];
        }
        if (ix < W) e[ix / 2] = s[ix];
    }
}

/* + z, the activation and the store of one result vector: n lanes of it inside the row;
 * spill: a short vector goes through a spill (else AVX2 stores all 8 lanes, the extra
 * ones into the next row of the plane, which is written after this one). */
DWR_ATTR __attribute__((always_inline))
static inline void DWR_OUT(const dwr_args *a, DWR_V r, float *yo, const float *zo, long n,
                           DWR_V lo, DWR_V hi, int spill)
{
#if DWR_MASKED
    (void)spill;
    const __mmask16 k = n >= DWR_L ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    if (zo) r = DWR_ADD(r, _mm512_maskz_loadu_ps(k, zo));
#else
    float t[DWR_L];
    if (zo) {
        if (n >= DWR_L) r = DWR_ADD(r, DWR_LOAD(zo));
        else {
            for (int i = 0; i < DWR_L; i++) t[i] = i < n ? zo[i] : 0.f;
            r = DWR_ADD(r, DWR_LOAD(t));
        }
    }
#endif
    /* constant first: max / min return the second operand on NaN, which propagates */
    if (a->act == EDGENN_ACT_RELU) r = DWR_MAX(lo, r);
    else if (a->act == EDGENN_ACT_CLIP) r = DWR_MIN(hi, DWR_MAX(lo, r));
#if DWR_MASKED
    _mm512_mask_storeu_ps(yo, k, r);
#else
    if (n >= DWR_L || !spill) DWR_STOREU(yo, r);
    else {
        DWR_STOREU(t, r);
        for (long i = 0; i < n; i++) yo[i] = t[i];
    }
#endif
}

/* One tile of the general kernel: NV vectors of output row oy from column ox0 (np of
 * them inside the row); tap t at q + toff[t], weight wc[t] broadcast. */
DWR_ATTR __attribute__((always_inline))
static inline void DWR_TILE(const dwr_args *a, const float *q, const float *wc, float b,
                            const long *toff, long T, long np, float *yo, const float *zo,
                            DWR_V lo, DWR_V hi, int spill, const long NV)
{
    DWR_V acc[4];
    for (int v = 0; v < NV; v++) acc[v] = DWR_SET1(b);
    for (long t = 0; t < T; t++) {
        const DWR_V wt = DWR_SET1(wc[t]);
        const float *src = q + toff[t];
        for (int v = 0; v < NV; v++) acc[v] = DWR_FMA(wt, DWR_LOAD(src + DWR_L * v), acc[v]);
    }
    for (int v = 0; v < NV; v++)
        DWR_OUT(a, acc[v], yo + DWR_L * v, zo ? zo + DWR_L * v : NULL, np - DWR_L * v, lo, hi,
                spill);
}

/* One tile of a 3x3 kernel, dilation 1, stride SW (1 or 2) along the row: the nine
 * weights in registers, rows r0 r1 r2 of the phase plane; tap j reads phase j % SW at
 * +j / SW, so every load is a row pointer plus a constant. */
DWR_ATTR __attribute__((always_inline))
static inline void DWR_TILE3(const dwr_args *a, const float *q, long rs, long ps,
                             const DWR_V *wv, DWR_V bias, long np, float *yo,
                             const float *zo, DWR_V lo, DWR_V hi, int spill,
                             const long SW, const long NV)
{
    DWR_V acc[4];
    for (int v = 0; v < NV; v++) acc[v] = bias;
    for (int i = 0; i < 3; i++) {
        const float *r = q + i * rs;
        const float *r1 = SW == 2 ? r + ps : r + 1;   /* tap j = 1 */
        const float *r2 = SW == 2 ? r + 1 : r + 2;    /* tap j = 2 */
        for (int v = 0; v < NV; v++) {
            acc[v] = DWR_FMA(wv[3 * i], DWR_LOAD(r + DWR_L * v), acc[v]);
            acc[v] = DWR_FMA(wv[3 * i + 1], DWR_LOAD(r1 + DWR_L * v), acc[v]);
            acc[v] = DWR_FMA(wv[3 * i + 2], DWR_LOAD(r2 + DWR_L * v), acc[v]);
        }
    }
    for (int v = 0; v < NV; v++)
        DWR_OUT(a, acc[v], yo + DWR_L * v, zo ? zo + DWR_L * v : NULL, np - DWR_L * v, lo, hi,
                spill);
}

/* Every output row of planes [p0, p1) (plane p = n * C + c). Each row's ceil(OW / L)
 * vectors in balanced tiles of <= 4 (worked out once: tile_v0 / tile_nv). */
DWR_ATTR static void DWR_PLANES(const dwr_args *a, float *P, long p0, long p1)
{
    const long T = a->KH * a->KW, rs = a->SH * a->SW * a->Wq;
    long toff[DWR_MAX_TAPS];
    for (long i = 0; i < a->KH; i++)
        for (long j = 0; j < a->KW; j++)
            toff[i * a->KW + j] = i * a->DH * a->SW * a->Wq
                + ((j * a->DW) % a->SW) * a->Wq + (j * a->DW) / a->SW;
    const long nvec = (a->OW + DWR_L - 1) / DWR_L, ntile = (nvec + 3) / 4;
    long tile_v0[64], tile_nv[64];
    long nt = ntile <= 64 ? ntile : 0;      /* wider rows: the general path */
    for (long t = 0; t < nt; t++) {
        tile_v0[t] = t * nvec / ntile;
        tile_nv[t] = (t + 1) * nvec / ntile - tile_v0[t];
    }
    const int k3 = nt && a->KH == 3 && a->KW == 3 && a->DH == 1 && a->DW == 1
        && (a->SW == 1 || a->SW == 2);
    const long plane = a->OH * a->OW;
    const int in_place = a->z == a->y;   /* z read after a store could run over it */
    const DWR_V lo = DWR_SET1(a->act == EDGENN_ACT_CLIP ? a->lo : 0.f), hi = DWR_SET1(a->hi);
    for (long p = p0; p < p1; p++) {
        const long c = p % a->C;
        DWR_FILL(a, a->x + p * a->H * a->W, P);
        const float *wc = a->w + c * T;
        const float b = a->bias ? a->bias[c] : 0.f;
        float *yp = a->y + p * plane;
        const float *zp = a->z ? a->z + p * plane : NULL;
        if (k3) {
            DWR_V wv[9];
            for (int t = 0; t < 9; t++) wv[t] = DWR_SET1(wc[t]);
            const DWR_V bv = DWR_SET1(b);
            for (long oy = 0; oy < a->OH; oy++) {
                const float *q = P + oy * rs;
                float *yr = yp + oy * a->OW;
                const float *zr = zp ? zp + oy * a->OW : NULL;
                const int spill = oy == a->OH - 1 || in_place;
                for (long t = 0; t < nt; t++) {
                    const long ox0 = tile_v0[t] * DWR_L, np = a->OW - ox0;
                    const float *qt = q + ox0;
                    float *yo = yr + ox0;
                    const float *zo = zr ? zr + ox0 : NULL;
#define DWR_K3(SWC, NVC) DWR_TILE3(a, qt, a->SW * a->Wq, a->Wq, wv, bv, np, yo, zo, lo, hi, \
                                         spill, SWC, NVC)
                    switch (tile_nv[t] + 4 * (a->SW == 2)) {
                    case 1: DWR_K3(1, 1); break;
                    case 2: DWR_K3(1, 2); break;
                    case 3: DWR_K3(1, 3); break;
                    case 4: DWR_K3(1, 4); break;
                    case 5: DWR_K3(2, 1); break;
                    case 6: DWR_K3(2, 2); break;
                    case 7: DWR_K3(2, 3); break;
                    default: DWR_K3(2, 4); break;
                    }
#undef DWR_K3
                }
            }
            continue;
        }
        for (long oy = 0; oy < a->OH; oy++) {
            const float *q = P + oy * rs;
            float *yr = yp + oy * a->OW;
            const float *zr = zp ? zp + oy * a->OW : NULL;
            const int spill = oy == a->OH - 1 || in_place;
            for (long v0 = 0; v0 < nvec; v0 += 4) {   /* the general kernel: tiles of 4, */
                if (nvec - v0 >= 4) {                   /* a short last one vector by vector */
                    const long o = v0 * DWR_L;
                    DWR_TILE(a, q + o, wc, b, toff, T, a->OW - o, yr + o, zr ? zr + o : NULL,
                             lo, hi, spill, 4);
                    continue;
                }
                for (long v = v0; v < nvec; v++) {
                    const long o = v * DWR_L;
                    DWR_TILE(a, q + o, wc, b, toff, T, a->OW - o, yr + o, zr ? zr + o : NULL,
                             lo, hi, spill, 1);
                }
            }
        }
    }
}

/* the includer's parameters, undefined for the next width */
#undef DWR_V
#undef DWR_L
#undef DWR_ATTR
#undef DWR_LOAD
#undef DWR_STOREU
#undef DWR_SET1
#undef DWR_FMA
#undef DWR_ADD
#undef DWR_MAX
#undef DWR_MIN
#undef DWR_MASKED
#undef DWR_TILE
#undef DWR_PLANES
#undef DWR_FILL
#undef DWR_OUT
#undef DWR_TILE3
#undef DWR_DEINTERLEAVE
