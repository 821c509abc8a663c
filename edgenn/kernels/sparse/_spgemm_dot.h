/* The gathered dot products of spg_spmv (_spgemm.h), written once for every vector ISA:
 * included with SPG_V (float vector), SPG_VI (int32 vector), SPG_MASK (a lane mask), SPG_L
 * (lanes), SPG_ATTR (target attribute), SPG_NAME and these defined:
 *   SPG_LOADI(p) / SPG_LOAD(p)            SPG_L int32 indices / weights
 *   SPG_GATHER(idx, base)                 base[idx[l]] per lane
 *   SPG_TAIL(r)                           the mask of lanes 0 .. r-1 (0 < r < SPG_L)
 *   SPG_LOADI_TAIL / SPG_LOAD_TAIL(k, p)  the masked lanes loaded, the rest 0
 *   SPG_GATHER_TAIL(k, idx, base)         the masked lanes gathered, the rest 0
 *   SPG_FMA, SPG_ZERO, SPG_HSUM(v)        a v + c, 0, the sum of the lanes
 *
 * Per output n (row n of W^T, nonzeros j0 .. j1), rows of x in blocks of R <= SPG_R: each
 * SPG_L nonzeros' indices and weights are loaded once and gathered from the R rows, R
 * independent FMA chains; the last (j1 - j0) % SPG_L under a mask, so nothing past the row
 * is read and masked-off lanes add exact zeros. */

SPG_ATTR static inline __attribute__((always_inline)) void
SPG_CAT(SPG_NAME, _rows)(const int R, const float *x, float *y, long m, long K, long ld,
                         long n, const sp_epi *e, const int *col)
{
    const int j0 = e->row_ptr[n], j1 = e->row_ptr[n + 1], rem = (j1 - j0) % SPG_L;
    const float *xm = x + m * K;
    SPG_V a[SPG_R];
    for (int i = 0; i < R; i++) a[i] = SPG_ZERO();
    int j = j0;
    for (; j + SPG_L <= j1; j += SPG_L) {
        const SPG_VI idx = SPG_LOADI(col + j);
        const SPG_V w = SPG_LOAD(e->val + j);
        for (int i = 0; i < R; i++) a[i] = SPG_FMA(w, SPG_GATHER(idx, xm + i * K), a[i]);
    }
    if (rem) {
        const SPG_MASK k = SPG_TAIL(rem);
        const SPG_VI idx = SPG_LOADI_TAIL(k, col + j);
        const SPG_V w = SPG_LOAD_TAIL(k, e->val + j);
        for (int i = 0; i < R; i++)
            a[i] = SPG_FMA(w, SPG_GATHER_TAIL(k, idx, xm + i * K), a[i]);
    }
    for (int i = 0; i < R; i++)
        y[(m + i) * ld + n] = spg_out(SPG_HSUM(a[i]), e, m + i, n, ld);
}

/* y (M, N) = act(x (M, K) W + bias + z), y and z rows ld apart: outputs outside, so each
 * row of W^T is read from memory once and reused from L1 by every block of rows. */
SPG_ATTR static void SPG_NAME(const float *x, float *y, long M, long K, long N, long ld,
                              const sp_epi *e, const int *col)
{
    for (long n = 0; n < N; n++) {
        long m = 0;
        for (; m + SPG_R <= M; m += SPG_R)
            SPG_CAT(SPG_NAME, _rows)(SPG_R, x, y, m, K, ld, n, e, col);
        switch (M - m) {      /* a constant R per call: the chains stay in registers */
        case 3: SPG_CAT(SPG_NAME, _rows)(3, x, y, m, K, ld, n, e, col); break;
        case 2: SPG_CAT(SPG_NAME, _rows)(2, x, y, m, K, ld, n, e, col); break;
        case 1: SPG_CAT(SPG_NAME, _rows)(1, x, y, m, K, ld, n, e, col); break;
        default: break;
        }
    }
}
