/* The vector bodies of _recurrent.h, on RC_L-float vectors: the panel GEMV of up to
 * RC_ROWS batch rows at once (RC_GEMM: panels of 8, 4, 2, 1 vectors as rc_panel packs
 * them, each read once per step for all those rows; the last N % L columns through a
 * zero-padded vector, RC_PANEL) and the state update of one batch row after it (RC_CELL; columns
 * past the last whole vector go to rc_cell_generic). Included once per width with the
 * RC_* operation macros defined (AVX2: 8 floats, AVX-512F: 16, NEON: 4). */

/* One panel of NV vectors (NV accumulators over the K rows), added into acc. */
RC_ATTR __attribute__((always_inline))
static inline void RC_PANEL(int nv, const float *v, const float *p, long K, float *acc)
{
    RC_V s[8];
    for (int u = 0; u < nv; u++)
        s[u] = RC_LOAD(acc + RC_L * u);
    for (long k = 0; k < K; k++, p += RC_L * nv) {
        const RC_V b = RC_SET1(v[k]);
        for (int u = 0; u < nv; u++)
            s[u] = RC_FMA(b, RC_LOAD(p + RC_L * u), s[u]);
    }
    for (int u = 0; u < nv; u++)
        RC_STORE(acc + RC_L * u, s[u]);
}

/* R batch rows at once (R <= RC_ROWS): vectors [v0, v0 + NVC) of one panel of NVP
 * vectors, so each panel row is loaded once for all R rows; R broadcasts, one load and
 * R * NVC accumulators stay in registers. Per output the sum is the GEMV's: k = 0..K-1,
 * one FMA each, so batched and single rows give the same bits. */
RC_ATTR __attribute__((always_inline))
static inline void RC_PANEL_ROWS(const int NVP, const int v0, const int NVC, const int R,
                                 const float *const *v, const float *p, long K,
                                 float *const *acc, long n)
{
    RC_V s[RC_ROWS][8];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < NVC; u++)
            s[r][u] = RC_LOAD(acc[r] + n + RC_L * (v0 + u));
    p += RC_L * v0;
    for (long k = 0; k < K; k++, p += RC_L * NVP) {
        RC_V b[RC_ROWS];
        for (int r = 0; r < R; r++)
            b[r] = RC_SET1(v[r][k]);
        for (int u = 0; u < NVC; u++) {
            const RC_V w = RC_LOAD(p + RC_L * u);
            for (int r = 0; r < R; r++)
                s[r][u] = RC_FMA(b[r], w, s[r][u]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < NVC; u++)
            RC_STORE(acc[r] + n + RC_L * (v0 + u), s[r][u]);
}

/* one panel of NVP vectors for R rows, in chunks of at most RC_MAXACC / R vectors */
RC_ATTR __attribute__((always_inline))
static inline void RC_PANEL_R(const int NVP, const int R, const float *const *v,
                              const float *p, long K, float *const *acc, long n)
{
    const int c = NVP * R <= RC_MAXACC ? NVP : NVP / 2 * R <= RC_MAXACC ? NVP / 2 :
                  NVP / 4 * R <= RC_MAXACC ? NVP / 4 : 1;
    for (int v0 = 0; v0 < NVP; v0 += c) {
        if (c == 8) RC_PANEL_ROWS(NVP, v0, 8, R, v, p, K, acc, n);
        else if (c == 4) RC_PANEL_ROWS(NVP, v0, 4, R, v, p, K, acc, n);
        else if (c == 2) RC_PANEL_ROWS(NVP, v0, 2, R, v, p, K, acc, n);
        else RC_PANEL_ROWS(NVP, v0, 1, R, v, p, K, acc, n);
    }
}

RC_ATTR __attribute__((always_inline))
static inline void RC_GEMM_T(const int R, const float *const *v, const float *pk, long K,
                             float *const *acc, long N)
{
    long n = 0;
    for (; N - n >= 8 * RC_L; n += 8 * RC_L, pk += K * 8 * RC_L)
        RC_PANEL_R(8, R, v, pk, K, acc, n);
    for (int nv = 4; nv >= 1; nv /= 2)
        if (N - n >= nv * RC_L) {
            if (nv == 4) RC_PANEL_R(4, R, v, pk, K, acc, n);
            else if (nv == 2) RC_PANEL_R(2, R, v, pk, K, acc, n);
            else RC_PANEL_R(1, R, v, pk, K, acc, n);
            n += nv * RC_L;
            pk += K * nv * RC_L;
        }
    if (n < N)                      /* the last N % L columns: one row at a time */
        for (int r = 0; r < R; r++) {
            float t[RC_L] = {0};
            RC_PANEL(1, v[r], pk, K, t);
            for (long j = 0; j < N - n; j++)
                acc[r][n + j] += t[j];
        }
}

/* acc[r][0:N] += v[r] R^T for R rows (1 <= R <= RC_ROWS) */
RC_ATTR
static void RC_GEMM(int R, const float *const *v, const float *pk, long K, float *const *acc,
                    long N)
{
    switch (R) {
    case 1: RC_GEMM_T(1, v, pk, K, acc, N); break;
    case 2: RC_GEMM_T(2, v, pk, K, acc, N); break;
    case 3: RC_GEMM_T(3, v, pk, K, acc, N); break;
    default: RC_GEMM_T(4, v, pk, K, acc, N); break;
    }
}

RC_ATTR __attribute__((always_inline))
static inline RC_V RC_ACT(int fn, RC_V x)
{
    const RC_V one = RC_SET1(1.0f);
    if (fn == RA_RELU)
        return RC_MAX(x, RC_SET1(0.0f));
    if (fn == RA_SIGMOID)
        return RC_DIV(one, RC_ADD(one, RC_EXP(RC_SUB(RC_SET1(0.0f), x))));
    /* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|) */
    RC_V e = RC_EXP(RC_MUL(RC_ABS(x), RC_SET1(-2.0f)));
    RC_V t = RC_DIV(RC_SUB(one, e), RC_ADD(one, e));
    return RC_COPYSIGN(t, x);
}

RC_ATTR __attribute__((always_inline))
static inline RC_V RC_CLIP(RC_V x, float clip)
{
    return clip > 0.0f ? RC_MIN(RC_MAX(x, RC_SET1(-clip)), RC_SET1(clip)) : x;
}

RC_ATTR
static void RC_CELL(const rc_args *a, float *g, float *h, float *c, float *yrow)
{
    const long H = a->H, J = H - H % RC_L;
    const float cl = a->clip;
    const float *peep = a->peep;
    const int fa = a->f, ga = a->g, ha = a->h, cell = a->cell;
    const RC_V one = RC_SET1(1.0f);
    for (long j = 0; j < J; j += RC_L) {
        RC_V hn;
        if (cell == RC_LSTM) {
            RC_V cv = RC_LOAD(c + j);
            RC_V gi = RC_LOAD(g + j), go = RC_LOAD(g + H + j);
            RC_V gf = RC_LOAD(g + 2 * H + j), gc = RC_LOAD(g + 3 * H + j);
            if (peep) {
                gi = RC_FMA(RC_LOAD(peep + j), cv, gi);
                gf = RC_FMA(RC_LOAD(peep + 2 * H + j), cv, gf);
            }
            RC_V i = RC_ACT(fa, RC_CLIP(gi, cl));
            RC_V f = a->input_forget ? RC_SUB(one, i) : RC_ACT(fa, RC_CLIP(gf, cl));
            RC_V cn = RC_FMA(f, cv, RC_MUL(i, RC_ACT(ga, RC_CLIP(gc, cl))));
            if (peep)
                go = RC_FMA(RC_LOAD(peep + H + j), cn, go);
            hn = RC_MUL(RC_ACT(fa, RC_CLIP(go, cl)), RC_ACT(ha, cn));
            RC_STORE(c + j, cn);
        } else if (cell == RC_GRU) {
            RC_V z = RC_LOAD(g + j), hh = RC_LOAD(g + 2 * H + j);
            if (a->lbr)   /* xp_h + r (h Rh^T + Rbh) */
                hh = RC_FMA(RC_LOAD(g + H + j), hh, RC_LOAD(g + 3 * H + j));
            hh = RC_ACT(ga, RC_CLIP(hh, cl));
            hn = RC_FMA(z, RC_SUB(RC_LOAD(h + j), hh), hh);   /* (1 - z) hh + z h */
        } else {
            hn = RC_ACT(fa, RC_CLIP(RC_LOAD(g + j), cl));
        }
        RC_STORE(h + j, hn);
        if (yrow)
            RC_STORE(yrow + j, hn);
    }
    rc_cell_generic(a, g, h, c, yrow, J);
}

/* the includer's parameters, undefined for the next width */
#undef RC_V
#undef RC_L
#undef RC_ATTR
#undef RC_LOAD
#undef RC_STORE
#undef RC_SET1
#undef RC_ADD
#undef RC_SUB
#undef RC_MUL
#undef RC_DIV
#undef RC_FMA
#undef RC_MIN
#undef RC_MAX
#undef RC_EXP
#undef RC_ABS
#undef RC_COPYSIGN
#undef RC_ACT
#undef RC_CLIP
#undef RC_CELL
#undef RC_PANEL
#undef RC_MAXACC
#undef RC_PANEL_ROWS
#undef RC_PANEL_R
#undef RC_GEMM_T
#undef RC_GEMM
