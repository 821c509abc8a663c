/* The vector body of _convdirect.h on CD_L-float vectors: a register tile of MB output
 * channels x NV vectors of pixels (MB <= 12, NV <= 3, compile-time constants at each
 * use) accumulated over the taps (c, i, j), bias and Relu / Clip / PRelu in registers, a ragged
 * last tile through a spill. Included once per width with the CD_* macros defined (AVX2:
 * 8 floats, AVX-512F: 16). */

CD_ATTR __attribute__((always_inline))
static inline CD_V CD_EPI(CD_V v, float b, const cd_args *a, long m)
{
    v = CD_ADD(v, CD_SET1(b));
    if (a->act == EDGENN_ACT_PRELU) return CD_PRELU(v, CD_SET1(a->slope[m]));
    if (a->act != EDGENN_ACT_NONE) {
        v = CD_MAX(v, CD_SET1(a->act == EDGENN_ACT_CLIP ? a->lo : 0.f));
        if (a->act == EDGENN_ACT_CLIP) v = CD_MIN(v, CD_SET1(a->hi));
    }
    return v;
}

/* a ragged tail through a spill: a masked store would do, but SIMDe's emulation of one
 * writes the whole vector back (past the end of y) */
CD_ATTR __attribute__((always_inline)) static inline void CD_STORE(float *out, CD_V v, long n)
{
    if (n >= CD_L) { CD_STOREU(out, v); return; }
    if (n <= 0) return;
    float t[CD_L];
    CD_STOREU(t, v);
    memcpy(out, t, (size_t)n * 4);
}

/* One register tile: channels m0 .. m0 + mr - 1 (mr <= MB) x NV vectors of pixels from
 * ow0 of output row oh (np of them are inside the row). */
CD_ATTR __attribute__((always_inline))
static inline void CD_BLOCK(const cd_args *a, const float *wb, const long *joff, long m0,
                            long mr, long oh, long ow0, long np, const long MB, const long NV)
{
    const long sw = a->SW;
    CD_V acc[12][3];
    for (int r = 0; r < MB; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = CD_ZERO();
    const float *w = wb;
    for (long c = 0; c < a->C; c++)
        for (long i = 0; i < a->KH; i++) {
            const float *row = a->xp + (c * a->Hp + oh * a->SH + i - a->xrow0) * sw * a->Wq
                               + ow0;
            for (long j = 0; j < a->KW; j++, w += MB) {
                const float *src = row + joff[j];
                CD_V x[3];
                for (int v = 0; v < NV; v++) x[v] = CD_LOAD(src + CD_L * v);
                for (int r = 0; r < MB; r++) {
                    CD_V wr = CD_SET1(w[r]);
                    for (int v = 0; v < NV; v++)
                        acc[r][v] = CD_FMA(wr, x[v], acc[r][v]);
                }
            }
        }
    float *out = a->y + (m0 * a->OH + oh) * a->OW + ow0;
    const long ldo = a->OH * a->OW;
    if (mr == MB && np >= CD_L * NV) {  /* whole tile: stores in registers, no tails */
        for (int r = 0; r < MB; r++) {
            const float b = a->bias ? a->bias[m0 + r] : 0.f;
            for (int v = 0; v < NV; v++)
                CD_STOREU(out + r * ldo + CD_L * v, CD_EPI(acc[r][v], b, a, m0 + r));
        }
        return;
    }
#pragma GCC unroll 12
    for (int r = 0; r < MB; r++) {      /* constant bounds: acc stays in registers */
        if (r >= mr) break;
        const float b = a->bias ? a->bias[m0 + r] : 0.f;
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            CD_STORE(out + r * ldo + CD_L * v, CD_EPI(acc[r][v], b, a, m0 + r), np - CD_L * v);
    }
}

/* The layer (rows oh0 .. oh1): per block of MB channels and output row, the row's
 * ceil(OW / L) pixel vectors in balanced tiles of <= NV vectors (OW = 112 at NV = 3:
 * 3 + 2 + 2 vectors, not 3 + 3 + 3 with 32 of 144 lanes wasted). */
CD_ATTR __attribute__((always_inline))
static inline void CD_TILE(const cd_args *a, const long MB, const long NV)
{
    const long T = a->C * a->KH * a->KW, sw = a->SW;
    long joff[CD_MAX_KW];       /* tap j's offset in the phase rows: no division per tap */
    for (long j = 0; j < a->KW; j++)
        joff[j] = (j % sw) * a->Wq + j / sw;
    const long nvec = (a->OW + CD_L - 1) / CD_L, ntile = (nvec + NV - 1) / NV;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = a->oh0; oh < a->oh1; oh++)
            for (long t = 0; t < ntile; t++) {
                const long v0 = t * nvec / ntile, nv = (t + 1) * nvec / ntile - v0;
                const long ow0 = v0 * CD_L, np = a->OW - ow0;
                if (NV >= 3 && nv == 3)
                    CD_BLOCK(a, wb, joff, m0, mr, oh, ow0, np, MB, 3);
                else if (NV >= 2 && nv == 2)
                    CD_BLOCK(a, wb, joff, m0, mr, oh, ow0, np, MB, 2);
                else
                    CD_BLOCK(a, wb, joff, m0, mr, oh, ow0, np, MB, 1);
            }
    }
}

/* this width's parameters, so the next width defines its own */
#undef CD_V
#undef CD_L
#undef CD_ATTR
#undef CD_LOAD
#undef CD_STOREU
#undef CD_SET1
#undef CD_ZERO
#undef CD_FMA
#undef CD_ADD
#undef CD_MAX
#undef CD_MIN
#undef CD_PRELU
#undef CD_EPI
#undef CD_STORE
#undef CD_TILE
#undef CD_BLOCK
