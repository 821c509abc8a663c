/* The vector body of _convdirect.h on CD_L-float vectors: a register tile of MB output
 * channels x NV vectors of pixels (MB <= 12, NV <= 3, compile-time constants at each
 * use) accumulated over the taps (c, i, j), bias and Relu / Clip / PRelu in registers, a ragged
 * last tile through a spill. Included once per width with the CD_* macros defined (AVX2:
 * 8 floats, AVX-512F: 16). */

CD_ATTR __attribute__((always_inline))
static inline CD_V CD_EPI(CD_V v, float b, const cd_args *a, long m)
{
    v = CD_ADD(v, CD_SET1(b));
    if (a->act == CD_ACT_PRELU) return CD_PRELU(v, CD_SET1(a->slope[m]));
    if (a->act != CD_ACT_NONE) {
        v = CD_MAX(v, CD_SET1(a->act == CD_ACT_CLIP ? a->lo : 0.f));
        if (a->act == CD_ACT_CLIP) v = CD_MIN(v, CD_SET1(a->hi));
    }
    return v;
}

/* a ragged tail through a spill: a masked store would do, but SIMDe's emulation of one
 * writes the whole vector back (past the end of y) */
CD_ATTR static void CD_STORE(float *out, CD_V v, long n)
{
    if (n >= CD_L) { CD_STOREU(out, v); return; }
    if (n <= 0) return;
    float t[CD_L];
    CD_STOREU(t, v);
    memcpy(out, t, (size_t)n * 4);
}

CD_ATTR __attribute__((always_inline))
static inline void CD_TILE(const cd_args *a, const long MB, const long NV)
{
    const long T = a->C * a->KH * a->KW, sw = a->SW, PX = CD_L * NV;
    long joff[CD_MAX_KW];       /* tap j's offset in the phase rows: no division per tap */
    for (long j = 0; j < a->KW; j++)
        joff[j] = (j % sw) * a->Wq + j / sw;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = a->oh0; oh < a->oh1; oh++)
            for (long ow0 = 0; ow0 < a->OW; ow0 += PX) {
                CD_V acc[12][3];
                for (int r = 0; r < MB; r++)
                    for (int v = 0; v < NV; v++) acc[r][v] = CD_ZERO();
                const float *w = wb;
                for (long c = 0; c < a->C; c++)
                    for (long i = 0; i < a->KH; i++) {
                        const float *row = a->xp + (c * a->Hp + oh * a->SH + i) * sw * a->Wq
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
                long np = a->OW - ow0;
                for (long r = 0; r < mr; r++) {
                    float *out = a->y + ((m0 + r) * a->OH + oh) * a->OW + ow0;
                    float b = a->bias ? a->bias[m0 + r] : 0.f;
                    for (int v = 0; v < NV; v++)
                        CD_STORE(out + CD_L * v, CD_EPI(acc[r][v], b, a, m0 + r),
                                 np - CD_L * v);
                }
            }
    }
}
