/* The body of _nbits_q8.h's rows on NBQ_L-column vectors (a panel of NB_NR = 16 columns
 * is NV = 16 / NBQ_L vectors; a 32-bit lane is one column's 4 consecutive values of k):
 * R rows of int8 A (R <= NBQ_ROWS_MAX) against one panel's codes, all its blocks.
 *
 * Per word of codes (P = 8 / BITS codes of k per byte, so a word holds 4 P values of k of
 * one column): sub-group j (k = 4 j .. 4 j + 3 of the word) is (word >> BITS j) & mask in
 * every byte, the unsigned operand of one u8 x s8 dot product against the row's 4 int8
 * values of A broadcast to every lane. The sums are integers in 32-bit lanes, exact
 * whatever their order: NS = 1, 2 or 4 chains by (u P + j) mod NS (u: the word within an
 * unrolled step of U words), so that R * NV * NS >= 4 independent dot-product chains hide
 * the latency when R is small.
 *
 * The u8 x s8 dot product per width: vpdpbusd (VNNI); vpmaddubsw + vpmaddwd (AVX2:
 * NBQ_MADDUBS; two sub-groups' s16 pair sums added before vpmaddwd, each at most
 * 2 * 15 * 127 for 4-bit codes, so no s16 saturation; 8-bit codes split into nibbles,
 * the high nibble's pairs weighted 16 by vpmaddwd); SDOT (NEON: codes < 128 are the same
 * bytes as s8; 8-bit codes go in as code - 128 and the zero point moves by 128, the same
 * integers); a byte loop (portable).
 *
 * Block epilogue per row and column, in float32 with these roundings in this order (every
 * row, the tests' NumPy model):
 *   t = float(acc) - zp * sum_q            exact: every term is an integer below 2^24
 *   d = scale_w * scale_a                   one rounding
 *   p = t * d                               one rounding (NBQ_KEEP: never fused with the add)
 *   y = y + p                               one rounding; y starts at the bias (or 0)
 * Included once per width with the NBQ_* macros defined; undefined again at the end. */

NBQ_ATTR __attribute__((always_inline))
static inline void NBQ_TILE_T(const int R, const int BITS, const nbq_tile *t)
{
    enum { NV = NB_NR / NBQ_L };
    const int P = 8 / BITS;
    const int NS = R * NV >= 4 ? 1 : R * NV >= 2 ? 2 : 4;
    const int U = NS > P ? NS / P : 1;              /* words per unrolled step */
    const long kb = t->kb, wpb = t->bs / (4 * P);   /* words per column per block */
    const uint8_t *w = t->codes;
    const NBQ_VI mask = NBQ_SET1I(((1u << BITS) - 1u) * 0x01010101u);
#ifdef NBQ_MADDUBS
    const NBQ_VI ones = NBQ_SET1I(0x00010001u), sixteen = NBQ_SET1I(0x00100010u);
    const NBQ_VI lo4 = NBQ_SET1I(0x0F0F0F0Fu);
#endif
    NBQ_VF y[NBQ_ROWS_MAX][NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            y[r][v] = t->bias ? NBQ_LOADF(t->bias + v * NBQ_L) : NBQ_ZEROF();
    for (long b = 0; b < kb; b++) {
        NBQ_VA acc[4][NBQ_ROWS_MAX][NV];
        for (int s = 0; s < NS; s++)
            for (int r = 0; r < R; r++)
                for (int v = 0; v < NV; v++)
                    acc[s][r][v] = NBQ_ZEROA();
        const int8_t *ab = t->qa + b * (t->bs / 4) * R * 4;  /* quad (kq, r) at (kq R + r) 4 */
        for (long g = 0; g < wpb; g += U) {
            NB_UNROLL
            for (int u = 0; u < U; u++, w += NB_NR * 4, ab += P * R * 4) {
                NBQ_VI wv[NV];
                __builtin_prefetch(w + NB_PREFETCH);
                for (int v = 0; v < NV; v++)
                    wv[v] = NBQ_LOADI(w + v * NBQ_L * 4);
#ifdef NBQ_MADDUBS
                if (BITS == 8) {     /* code = 16 hi + lo: two nibble products, exact */
                    const int c = u % NS;
                    NBQ_VI lo[NV], hi[NV];
                    for (int v = 0; v < NV; v++) {
                        lo[v] = NBQ_AND(wv[v], lo4);
                        hi[v] = NBQ_AND(NBQ_SRL(wv[v], 4), lo4);
                    }
                    for (int r = 0; r < R; r++) {
                        const NBQ_VI s = NBQ_BCAST(ab + r * 4);
                        for (int v = 0; v < NV; v++)
                            acc[c][r][v] = NBQ_ADDA(acc[c][r][v], NBQ_ADDA(
                                NBQ_MADDWD(NBQ_MADDUBS(lo[v], s), ones),
                                NBQ_MADDWD(NBQ_MADDUBS(hi[v], s), sixteen)));
                    }
                } else {
                    NB_UNROLL
                    for (int j = 0; j < P; j += 2) {
                        const int c = ((u * P + j) / 2) % NS;
                        NBQ_VI c0[NV], c1[NV];
                        for (int v = 0; v < NV; v++) {
                            c0[v] = j == 0 ? NBQ_AND(wv[v], mask)
                                           : NBQ_AND(NBQ_SRL(wv[v], BITS * j), mask);
                            c1[v] = NBQ_AND(NBQ_SRL(wv[v], BITS * (j + 1)), mask);
                        }
                        for (int r = 0; r < R; r++) {
                            const NBQ_VI s0 = NBQ_BCAST(ab + (j * R + r) * 4);
                            const NBQ_VI s1 = NBQ_BCAST(ab + ((j + 1) * R + r) * 4);
                            for (int v = 0; v < NV; v++)
                                acc[c][r][v] = NBQ_ADDA(acc[c][r][v], NBQ_MADDWD(
                                    NBQ_ADD16(NBQ_MADDUBS(c0[v], s0), NBQ_MADDUBS(c1[v], s1)),
                                    ones));
                        }
                    }
                }
#else
                NB_UNROLL
                for (int j = 0; j < P; j++) {
                    const int c = (u * P + j) % NS;
                    NBQ_VI cv[NV];
                    for (int v = 0; v < NV; v++) {
                        if (BITS == 8)
                            cv[v] = NBQ_CODES8(wv[v]);
                        else if (j == 0)
                            cv[v] = NBQ_AND(wv[v], mask);
                        else
                            cv[v] = NBQ_AND(NBQ_SRL(wv[v], BITS * j), mask);
                    }
                    for (int r = 0; r < R; r++) {
                        const NBQ_VI s = NBQ_BCAST(ab + (j * R + r) * 4);
                        for (int v = 0; v < NV; v++)
                            acc[c][r][v] = NBQ_DP(acc[c][r][v], cv[v], s);
                    }
                }
#endif
            }
        }
        for (int v = 0; v < NV; v++) {
            const long o = b * NB_NR + v * NBQ_L;
            const NBQ_VF sw = NBQ_LOADF(t->scales + o);
            NBQ_VF z = t->zp_mode == NB_ZP_U8 ? NBQ_ZP8(t->zp8 + o) : NBQ_SET1F(t->zp0);
            if (BITS == 8)
                z = NBQ_SUBF(z, NBQ_SET1F(NBQ_SHIFT8));
            for (int r = 0; r < R; r++) {
                NBQ_VA q = acc[0][r][v];
                for (int s = 1; s < NS; s++)
                    q = NBQ_ADDA(q, acc[s][r][v]);
                NBQ_VF tf = NBQ_SUBF(NBQ_CVT(q), NBQ_MULF(z, NBQ_SET1F(t->sq[r * t->ldq + b])));
                NBQ_VF d = NBQ_MULF(sw, NBQ_SET1F(t->sa[r * t->ldq + b]));
                NBQ_VF p = NBQ_MULF(tf, d);
                NBQ_KEEP(p);
                y[r][v] = NBQ_ADDF(y[r][v], p);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            NBQ_STOREF(t->y + r * t->ldy + v * NBQ_L, y[r][v]);
}

/* R rows (1 <= R <= NBQ_ROWS_MAX), the code width from t */
NBQ_ATTR
static void NBQ_TILE(int R, const nbq_tile *t)
{
#define NBQ_CASE(n) case n: \
    if (t->bits == 4) NBQ_TILE_T(n, 4, t); \
    else if (t->bits == 8) NBQ_TILE_T(n, 8, t); \
    else NBQ_TILE_T(n, 2, t); \
    break;
    switch (R) {
    NBQ_CASE(1)
    NBQ_CASE(2)
#if NBQ_ROWS_MAX >= 3
    NBQ_CASE(3)
#endif
#if NBQ_ROWS_MAX >= 4
    NBQ_CASE(4)
#endif
#if NBQ_ROWS_MAX >= 5
    NBQ_CASE(5)
#endif
#if NBQ_ROWS_MAX >= 6
    NBQ_CASE(6)
#endif
#if NBQ_ROWS_MAX >= 7
    NBQ_CASE(7)
#endif
#if NBQ_ROWS_MAX >= 8
    NBQ_CASE(8)
#endif
    default: break;
    }
#undef NBQ_CASE
}

/* the includer's parameters, undefined for the next width */
#undef NBQ_VI
#undef NBQ_VA
#undef NBQ_VF
#undef NBQ_L
#undef NBQ_ATTR
#undef NBQ_LOADI
#undef NBQ_SRL
#undef NBQ_AND
#undef NBQ_SET1I
#undef NBQ_BCAST
#undef NBQ_ZEROA
#undef NBQ_ADDA
#undef NBQ_DP
#undef NBQ_CODES8
#undef NBQ_SHIFT8
#undef NBQ_MADDUBS
#undef NBQ_MADDWD
#undef NBQ_ADD16
#undef NBQ_CVT
#undef NBQ_LOADF
#undef NBQ_STOREF
#undef NBQ_SET1F
#undef NBQ_ZEROF
#undef NBQ_ADDF
#undef NBQ_SUBF
#undef NBQ_MULF
#undef NBQ_ZP8
#undef NBQ_KEEP
#undef NBQ_TILE_T
#undef NBQ_TILE
#undef NBQ_ROWS_MAX
