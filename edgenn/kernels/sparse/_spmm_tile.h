/* One register tile of the sparse convolutions (_spmm.h), written once for every vector
 * ISA and width: included with SP_V (vector type), SP_L (lanes), SP_NV (vectors per
 * channel), SP_ATTR (target attribute), SP_SET1, SP_LOAD, SP_STORE, SP_FMA, SP_ADD,
 * SP_MIN, SP_MAX and SP_NAME defined; SP_NV and SP_NAME are undefined at its end (one
 * instance each), the ISA's macros by _spmm_isa_end.h after its last instance.
 *
 * A tile is SP_NV vectors = SP_NV * SP_L pixels of every output channel: x, z, y point at
 * the tile's first pixel; nonzero j of row m reads x + off[j]; z and y rows are ldy apart.
 * Two output channels run together (2 SP_NV independent FMA chains, to hide the FMA
 * latency); each channel's sum still runs over its nonzeros in increasing order. The
 * constant-bound loops over the SP_NV vectors unroll, the accumulators stay in registers.
 * With e->paired (rows 2i and 2i + 1 have the same nonzero positions: pattern pruning by
 * output-channel pairs) each x vector is loaded once for both rows: 7 loads per 8 FMAs
 * instead of 12, the same sums in the same order. */

SP_ATTR static inline void SP_CAT(SP_NAME, _out)(float *yr, const float *zr, SP_V *a,
                                                 const sp_epi *e)
{
    for (int v = 0; v < SP_NV; v++) {
        SP_V r = zr ? SP_ADD(a[v], SP_LOAD(zr + v * SP_L)) : a[v];
        if (e->act != EDGENN_ACT_NONE)
            r = SP_MIN(SP_MAX(r, SP_SET1(e->lo)), SP_SET1(e->hi));
        SP_STORE(yr + v * SP_L, r);
    }
}

SP_ATTR static inline void SP_CAT(SP_NAME, _step)(SP_V *a, const float *x, const sp_epi *e,
                                                  int j)
{
    const SP_V w = SP_SET1(e->val[j]);
    const float *xr = x + e->off[j];
    for (int v = 0; v < SP_NV; v++) a[v] = SP_FMA(w, SP_LOAD(xr + v * SP_L), a[v]);
}

/* Rows m and m + 1 with the same nonzero positions: row m + 1's values follow row m's. */
SP_ATTR static inline void SP_CAT(SP_NAME, _pair)(SP_V *a, SP_V *b, const float *x,
                                                  const sp_epi *e, long m)
{
    const int j0 = e->row_ptr[m], n = e->row_ptr[m + 1] - j0;
    const float *va = e->val + j0, *vb = va + n;
    const long *off = e->off + j0;
    for (int t = 0; t < n; t++) {
        const SP_V wa = SP_SET1(va[t]), wb = SP_SET1(vb[t]);
        const float *xr = x + off[t];
        for (int v = 0; v < SP_NV; v++) {
            const SP_V xv = SP_LOAD(xr + v * SP_L);
            a[v] = SP_FMA(wa, xv, a[v]);
            b[v] = SP_FMA(wb, xv, b[v]);
        }
    }
}

SP_ATTR static void SP_NAME(const float *x, const float *z, float *y, long ldy, long M,
                            const sp_epi *e)
{
    long m = 0;
    for (; m + 1 < M; m += 2) {
        SP_V a[SP_NV], b[SP_NV];
        for (int v = 0; v < SP_NV; v++) {
            a[v] = SP_SET1(e->bias ? e->bias[m] : 0.0f);
            b[v] = SP_SET1(e->bias ? e->bias[m + 1] : 0.0f);
        }
        int j = e->row_ptr[m], k = e->row_ptr[m + 1];
        const int je = e->row_ptr[m + 1], ke = e->row_ptr[m + 2];
        if (e->paired) {
            SP_CAT(SP_NAME, _pair)(a, b, x, e, m);
            j = je, k = ke;
        }
        for (; j < je && k < ke; j++, k++) {
            SP_CAT(SP_NAME, _step)(a, x, e, j);
            SP_CAT(SP_NAME, _step)(b, x, e, k);
        }
        for (; j < je; j++) SP_CAT(SP_NAME, _step)(a, x, e, j);
        for (; k < ke; k++) SP_CAT(SP_NAME, _step)(b, x, e, k);
        SP_CAT(SP_NAME, _out)(y + m * ldy, z ? z + m * ldy : 0, a, e);
        SP_CAT(SP_NAME, _out)(y + (m + 1) * ldy, z ? z + (m + 1) * ldy : 0, b, e);
    }
    if (m < M) {
        SP_V a[SP_NV];
        for (int v = 0; v < SP_NV; v++) a[v] = SP_SET1(e->bias ? e->bias[m] : 0.0f);
        for (int j = e->row_ptr[m]; j < e->row_ptr[m + 1]; j++)
            SP_CAT(SP_NAME, _step)(a, x, e, j);
        SP_CAT(SP_NAME, _out)(y + m * ldy, z ? z + m * ldy : 0, a, e);
    }
}

#undef SP_NV
#undef SP_NAME
