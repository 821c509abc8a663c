/* The body of _nbits.h's rows on NB_L-float vectors (a panel of NB_NR = 16 columns is
 * NV = 16 / NB_L vectors): R rows of A (R <= NB_ROWS_MAX) against one panel's codes, all
 * its blocks. Per group of P = 32 / BITS values of k, one word per column (NV vector
 * loads) is decoded to floats in registers, code j by a shift and a mask (AVX-512, 4 bits:
 * a shift and a 16-entry table lookup), and FMA'd with a[r][k] broadcast into the block's
 * accumulators: NS = 1, 2 or 4 sets by j mod NS, so that R * NV * NS >= 4 independent FMA
 * chains hide the FMA latency when R is small. At the end of a block, per row and
 * column: t = sum_k a_k q_k - zp * sum_k a_k, y += t * scale. Included once per width
 * with the NB_* macros defined; undefined again at the end. */

NB_ATTR __attribute__((always_inline))
static inline void NB_TILE_T(const int R, const int BITS, const nb_tile *t)
{
    enum { NV = NB_NR / NB_L };
    const int P = 32 / BITS;
    const int NS = R * NV >= 4 ? 1 : R * NV >= 2 ? 2 : 4;
    const long kb = t->kb, bs = t->bs, gpb = t->bs / P;
    const uint32_t *w = t->codes;
    const NB_VI mask = NB_SET1I((1u << BITS) - 1u);
    NB_V y[NB_ROWS_MAX][NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            y[r][v] = t->bias ? NB_LOAD(t->bias + v * NB_L) : NB_ZERO();
    for (long b = 0; b < kb; b++) {
        NB_V acc[4][NB_ROWS_MAX][NV];
        for (int s = 0; s < NS; s++)
            for (int r = 0; r < R; r++)
                for (int v = 0; v < NV; v++)
                    acc[s][r][v] = NB_ZERO();
        const float *ab = t->a + b * bs * R;      /* (k, r) at k * R + r */
        for (long g = 0; g < gpb; g++, w += NB_NR, ab += P * R) {
            NB_VI wv[NV];
            __builtin_prefetch((const char *)w + NB_PREFETCH);
            for (int v = 0; v < NV; v++)
                wv[v] = NB_LOADI(w + v * NB_L);
            NB_UNROLL
            for (int j = 0; j < P; j++) {
                for (int v = 0; v < NV; v++) {
                    NB_V c;
#ifdef NB_DECODE4
                    if (BITS == 4)
                        c = NB_DECODE4(wv[v], 4 * j);
                    else
#endif
                    if (j == 0)
                        c = NB_CVT(NB_ANDI(wv[v], mask));
                    else if (BITS * (j + 1) == 32)
                        c = NB_CVT(NB_SRL(wv[v], BITS * j));
                    else
                        c = NB_CVT(NB_ANDI(NB_SRL(wv[v], BITS * j), mask));
                    for (int r = 0; r < R; r++)
                        acc[j % NS][r][v] = NB_FMA(NB_SET1(ab[j * R + r]), c,
                                                   acc[j % NS][r][v]);
                }
            }
        }
        for (int v = 0; v < NV; v++) {
            const long o = b * NB_NR + v * NB_L;
            const NB_V s = NB_LOAD(t->scales + o);
            const NB_V z = t->zp_mode == NB_ZP_U8 ? NB_ZP8(t->zp8 + o) :
                           t->zp_mode == NB_ZP_F32 ? NB_LOAD(t->zpf + o) : NB_SET1(t->zp0);
            for (int r = 0; r < R; r++) {
                NB_V q = acc[0][r][v];
                for (int u = 1; u < NS; u++)
                    q = NB_ADD(q, acc[u][r][v]);
                q = NB_FMA(NB_SET1(-t->asum[r * t->ldas + b]), z, q);
                y[r][v] = NB_FMA(q, s, y[r][v]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            NB_STORE(t->y + r * t->ldy + v * NB_L, y[r][v]);
}

/* R rows (1 <= R <= NB_ROWS_MAX), the code width from t */
NB_ATTR
static void NB_TILE(int R, const nb_tile *t)
{
#define NB_CASE(n) case n: \
    if (t->bits == 4) NB_TILE_T(n, 4, t); \
    else if (t->bits == 8) NB_TILE_T(n, 8, t); \
    else NB_TILE_T(n, 2, t); \
    break;
    switch (R) {
    NB_CASE(1)
    NB_CASE(2)
#if NB_ROWS_MAX >= 3
    NB_CASE(3)
#endif
#if NB_ROWS_MAX >= 4
    NB_CASE(4)
#endif
#if NB_ROWS_MAX >= 5
    NB_CASE(5)
#endif
#if NB_ROWS_MAX >= 6
    NB_CASE(6)
#endif
    default: break;
    }
#undef NB_CASE
}

/* the includer's parameters, undefined for the next width */
#undef NB_V
#undef NB_VI
#undef NB_L
#undef NB_ATTR
#undef NB_LOADI
#undef NB_SRL
#undef NB_ANDI
#undef NB_SET1I
#undef NB_CVT
#undef NB_SET1
#undef NB_LOAD
#undef NB_STORE
#undef NB_ZERO
#undef NB_ADD
#undef NB_FMA
#undef NB_ZP8
#undef NB_DECODE4
#undef NB_TILE_T
#undef NB_TILE
#undef NB_ROWS_MAX
