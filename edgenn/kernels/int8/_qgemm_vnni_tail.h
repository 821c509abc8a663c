/* The last one or two (<= QVT_MAX) columns of an implicit-GEMM conv block on AVX-512 VNNI,
 * with the 6 weight rows in the lanes instead of the pixels (included by _qgemm_vnni.h).
 *
 * The pixel tiles put 16 columns in a zmm, so a block's last r columns cost a whole tile:
 * a 7x7 plane's 49th pixel took an 8-lane ymm tile, 6 sums per group for 1 pixel. Here the
 * 6-row weight panel is read as it is packed, [G][6 rows][4 bytes]: 8 groups are 48
 * dwords, 3 zmm, lane d holding row d % 6 of group d / 6, so one vpdpbusd against a
 * "pattern" zmm holding each lane's group's 4 pixel bytes sums 16 (row, group) products
 * for one column: 3 products per 8 groups, all lanes used (the pixel tiles: 6 x 32 in 12).
 * The patterns are built once per block (qvt_patterns), then every 6-row panel reuses
 * them; the 3 x 8 lanes of a column are summed per row at the end.
 *
 *   pat: r columns x ceil(G / 8) blocks x 48 int32 (u8 x 4), lanes of groups >= G zero
 *   QVT_SUMS(name, DP): name(G, a, pat, r, out) -> out[row * 8 + column] (s32, r <=
 *   QVT_MAX columns, the first block of the 6 x 32 tile's acc layout: qv_tile_out reads it)
 */
#ifndef EDGENN_QGEMM_VNNI_TAIL_H
#define EDGENN_QGEMM_VNNI_TAIL_H

#include <string.h>

/* columns: the most a block's tail takes this way; from about three on the ymm tile is as
 * fast or faster (the patterns of many columns no longer fit in L1) */
#define QVT_MAX 2
#define QVT_LANES 48              /* dwords of 8 groups of a 6-row panel */

/* Pattern bytes per column for G groups */
static inline long qvt_column_bytes(long G) {
    return (G + 7) / 8 * QVT_LANES * 4;
}

/* The pattern of one column into p: group g's 4 bytes at x + goff[g] (goff NULL: at
 * x + g * gstride). */
static void qvt_pattern(long G, const uint8_t *x, const long *goff, long gstride, int32_t *p) {
    for (long g = 0; g < (G + 7) / 8 * 8; g++) {
        int32_t v = 0;
        if (g < G) memcpy(&v, x + (goff ? goff[g] : g * gstride), 4);
        for (int k = 0; k < 6; k++) p[g * 6 + k] = v;
    }
}

/* The patterns of columns col0 .. col0 + r - 1 of the nc4 image xp (group g's 4 bytes of
 * column n at xp + goff[g] + 4 n) into pat (r * qvt_column_bytes(G) bytes). */
static void qvt_patterns(long G, const uint8_t *xp, const long *goff, long col0, int r,
                         int32_t *pat) {
    for (int i = 0; i < r; i++)
        qvt_pattern(G, xp + 4 * (col0 + i), goff, 0, pat + (long)i * (G + 7) / 8 * QVT_LANES);
}

/* The same from a packed B block in the pairs layout (qg_interleave: columns 16h .. 16h +
 * 15 at b + 2h * bps, 64 bytes per group, 4 per column), its columns c0 .. c0 + r - 1. */
static void qvt_patterns_packed(long G, const uint8_t *b, long bps, long c0, int r,
                                int32_t *pat) {
    for (int i = 0; i < r; i++) {
        const long c = c0 + i;
        qvt_pattern(G, b + (c / 16) * 2 * bps + (c % 16) * 4, NULL, 64,
                    pat + (long)i * (G + 7) / 8 * QVT_LANES);
    }
}

#if QV_HAVE
/* Sums of R (constant) columns: 3R accumulators; the panel's last partial block copied
 * out first (its bytes may end the weights: no read past them). */
#define QVT_SUMS_R(NAME, DP)                                                                      \
    QV_TARGET static inline __attribute__((always_inline)) void NAME(                          \
        long G, const uint8_t *a,                                                              \
                                                          const int32_t *pat, const int R,     \
                                                          int32_t *sums) {                     \
        const long blocks = (G + 7) / 8, full = G / 8, pstride = blocks * QVT_LANES;            \
        __m512i acc[QVT_MAX][3];                                                                \
        for (int i = 0; i < R; i++)                                                             \
            acc[i][0] = acc[i][1] = acc[i][2] = _mm512_setzero_si512();                         \
        for (long j = 0; j < blocks; j++) {                                                     \
            __m512i w[3];                                                                       \
            if (j < full) {                                                                     \
                for (int v = 0; v < 3; v++)                                                     \
                    w[v] = _mm512_loadu_si512(a + j * 192 + 64 * v);                            \
            } else {                /* (G - 8j) groups of 24 bytes, then zeros */                \
                uint8_t last[192] = {0};                                                        \
                memcpy(last, a + j * 192, (size_t)(G - 8 * j) * 24);                            \
                for (int v = 0; v < 3; v++)                                                     \
                    w[v] = _mm512_loadu_si512(last + 64 * v);                                   \
            }                                                                                   \
            for (int i = 0; i < R; i++) {                                                       \
                const int32_t *p = pat + i * pstride + j * QVT_LANES;                           \
                for (int v = 0; v < 3; v++)                                                     \
                    acc[i][v] = DP(acc[i][v], _mm512_loadu_si512(p + 16 * v), w[v]);            \
            }                                                                                   \
        }                                                                                       \
        for (int i = 0; i < R; i++)                                                             \
            for (int v = 0; v < 3; v++)                                                         \
                _mm512_storeu_si512(sums + (i * 3 + v) * 16, acc[i][v]);                        \
    }

/* r columns' sums -> out[row * 8 + column] (rows 0 .. 5, columns < r; the rest zero) */
#define QVT_SUMS(NAME, DP)                                                                        \
    QVT_SUMS_R(NAME##_r, DP)                                                                    \
    QV_TARGET static void NAME(long G, const uint8_t *a, const int32_t *pat, int r,            \
                               int32_t *out) {                                                 \
        int32_t sums[QVT_MAX * QVT_LANES];                                                      \
        if (r == 1)        /* constant counts: the accumulators stay in registers */           \
            NAME##_r(G, a, pat, 1, sums);                                                       \
        else                                                                                    \
            NAME##_r(G, a, pat, QVT_MAX, sums);                                                 \
        memset(out, 0, sizeof(int32_t) * QV_MR * 8);                                            \
        for (int i = 0; i < r; i++)                                                             \
            for (int d = 0; d < QVT_LANES; d++)                                                 \
                out[(d % 6) * 8 + i] += sums[i * QVT_LANES + d];                                \
    }

#define QVT_DP(c, x, w) _mm512_dpbusd_epi32(c, x, w)   /* pattern u8 x weights s8 */
QVT_SUMS(qvt_sums, QVT_DP)
#endif

#endif
