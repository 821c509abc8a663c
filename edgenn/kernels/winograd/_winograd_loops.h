/* The transform loops for one tile size (WM, WALPHA, IN1D, OUT1D) and one instruction set
 * (ISA, ATTR, NL, VT, V* ops); included by _winograd_tmpl.h. Layouts: see _winograd.h. */

/* Input transform of tile rows [row0, row0 + nrows) of x (N, C, H, W) into V (alpha^2, C, Tb).
 * Scratch: P (nrows*m + 2, alpha, twp); xp (twp*m + alpha), zero outside the columns
 * written here; zeros (alpha * twp), all zero. twp = tw rounded up to a multiple of 8. */
ATTR static void WCAT(win_in, WM, ISA)(const float *x, int C, int H, int W, int ph, int pw,
                                      int th, int tw, int twp, int row0, int nrows,
                                      float *V, float *P, float *xp, const float *zeros) {
    const size_t Tb = (size_t)nrows * tw, CT = (size_t)C * Tb;
    const int xplen = twp * WM + WALPHA;
    const int ncopy = W < xplen - pw ? W : xplen - pw;
    const size_t pstride = (size_t)WALPHA * twp;
    GATHER_SETUP(WM);
    for (int c = 0; c < C; c++) {
        for (int g = row0; g < row0 + nrows;) {
            /* the tile rows ty0 .. ty1-1 of one image n */
            const int n = g / th, ty0 = g % th;
            const int left = row0 + nrows - g;
            const int ty1 = th < ty0 + left ? th : ty0 + left;
            const float *xc = x + ((size_t)n * C + c) * H * W;
            int r0 = ty0 * WM - ph, r1 = (ty1 - 1) * WM - ph + WALPHA;
            if (r0 < 0) r0 = 0;
            if (r1 > H) r1 = H;
            /* W pass, once per input row r: P[r - r0][j][tx] = (B^T d)[j], d = xp[tx*m ..] */
            for (int r = r0; r < r1; r++) {
                float *pr = P + (size_t)(r - r0) * pstride;
                memcpy(xp + pw, xc + (size_t)r * W, (size_t)ncopy * sizeof(float));
                for (int tx = 0; tx < twp; tx += NL) {
                    VT d[WALPHA], o[WALPHA];
                    LOAD_TILES(WM, xp + tx * WM, d);
                    IN1D(d, o);
                    for (int j = 0; j < WALPHA; j++) VSTORE(pr + j * twp + tx, o[j]);
                }
            }
            /* H pass, unit stride over tiles: V[i*alpha + j, c, t] = (B^T P[rows of ty][j])[i] */
            for (int ty = ty0; ty < ty1; ty++) {
                const float *rows[WALPHA];
                for (int k = 0; k < WALPHA; k++) {
                    const int r = ty * WM - ph + k;
                    rows[k] = (r >= r0 && r < r1) ? P + (size_t)(r - r0) * pstride : zeros;
                }
                float *vt = V + (size_t)c * Tb + (size_t)(g - row0 + ty - ty0) * tw;
                /* a full vector past the row's end lands on (channel, tile) slots of the same
                 * xi that are stored later; only the end of the xi plane needs short stores */
                const long room = (long)(C - c) * (long)Tb - (long)(g - row0 + ty - ty0) * tw;
                for (int j = 0; j < WALPHA; j++) {
                    for (int tx = 0; tx < tw; tx += NL) {
                        VT d[WALPHA], o[WALPHA];
                        for (int k = 0; k < WALPHA; k++) d[k] = VLOAD(rows[k] + j * twp + tx);
                        IN1D(d, o);
                        for (int i = 0; i < WALPHA; i++)
                            VSTORE_N(vt + (size_t)(i * WALPHA + j) * CT + tx, o[i], room - tx);
                    }
                }
            }
            g += ty1 - ty0;
        }
    }
}

/* Output transform of M (alpha^2, K, Tb) for tile rows [row0, row0 + nrows) into
 * y (N, K, OH, OW): y = act(A^T m A + bias[k] + z), z (N, K, OH, OW) or NULL, bias or NULL.
 * Scratch: Q (m, alpha, twp), rowbuf (twp * m). M is read up to 7 floats past its end. */
ATTR static void WCAT(win_out, WM, ISA)(const float *M, float *y, int K, int OH, int OW,
                                       int th, int tw, int twp, int row0, int nrows,
                                       const float *bias, const float *z, int act,
                                       float p0, float p1, float *Q, float *rowbuf) {
    const size_t Tb = (size_t)nrows * tw, KT = (size_t)K * Tb;
    for (int k = 0; k < K; k++) {
        const float b = bias ? bias[k] : 0.f;
        const VT bv = VSET1(b);
        for (int g = row0; g < row0 + nrows; g++) {
            const int n = g / th, ty = g % th;
            const float *mt = M + (size_t)k * Tb + (size_t)(g - row0) * tw;
            /* H pass, unit stride over tiles: Q[r][j][tx] = (A^T M[., j])[r] */
            for (int j = 0; j < WALPHA; j++) {
                for (int tx = 0; tx < tw; tx += NL) {
                    VT s[WALPHA], o[WM];
                    for (int i = 0; i < WALPHA; i++)
                        s[i] = VLOAD(mt + (size_t)(i * WALPHA + j) * KT + tx);
                    OUT1D(s, o);
                    for (int r = 0; r < WM; r++) VSTORE(Q + (r * WALPHA + j) * twp + tx, o[r]);
                }
            }
            /* W pass per output row, interleaved into rowbuf, then the epilogue into y */
            for (int r = 0; r < WM && ty * WM + r < OH; r++) {
                const float *qr = Q + r * WALPHA * twp;
                for (int tx = 0; tx < tw; tx += NL) {
                    VT s[WALPHA], o[WM];
                    for (int j = 0; j < WALPHA; j++) s[j] = VLOAD(qr + j * twp + tx);
                    OUT1D(s, o);
                    ILV_STORE(WM, rowbuf + tx * WM, o);
                }
                const size_t off = (((size_t)n * K + k) * OH + ty * WM + r) * OW;
                float *out = y + off;
                const float *zr = z ? z + off : NULL;
                int ox = 0;
                for (; ox + NL <= OW; ox += NL) {
                    VT v = VADD(VLOAD(rowbuf + ox), bv);
                    if (zr) v = VADD(v, VLOAD(zr + ox));
                    VSTORE(out + ox, VACT(v, act, p0, p1));
                }
                for (; ox < OW; ox++) {
                    float v = rowbuf[ox] + b;
                    if (zr) v += zr[ox];
                    out[ox] = act1(v, act, p0, p1);
                }
            }
        }
    }
}
