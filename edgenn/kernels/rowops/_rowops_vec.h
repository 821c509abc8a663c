/* The float row ops of _rowops.h's vector rows, written once: softmax and log-softmax of
 * a row, the attention row (scale, mask, softmax), LayerNorm and RMS norm of a row, erf / GELU /
 * sigmoid, bias + GELU rows. Included per ISA with:
 *   RV, RV_M, RV_L            vector type, its lane mask type, lanes
 *   RV_FN(name), RV_ATTR      the functions' names (name##_<isa>) and target attribute
 *   RV_LOAD(p) RV_STORE(p, v) RV_SET1(f) RV_ZERO()
 *   RV_ADD RV_SUB RV_MUL RV_DIV, RV_FMA(a, b, c) = a * b + c in one rounding
 *   RV_MAX(a, b)              x86's max (b where either is NaN: _neon.h)
 *   RV_HSUM(v) RV_HMAX(v)     the lanes' sum / maximum (a float)
 *   RV_EXP(v) RV_ERF(v)       _simd_math.h's exp and erf of the width
 *   RV_GE(a, b) RV_UNORD(a)   lane masks: a >= b (ordered), a is NaN
 *   RV_MOR(m, n) RV_MNONE() RV_MANY(m)  mask or, the empty mask, any lane set
 *   RV_AND(v, m)              v where m, else +0
 *   RV_SELECT(m, a, b)        a where m, else b
 *   RV_NEG_ABS(v)             -|v| (the sign bit set)
 *   RV_BYTES_ZERO(p)          the lanes whose byte p[lane] is 0 (RV_L bytes at p)
 * The loops and their order of operations are the AVX2 build's, so its bits are kept;
 * the lanes past the last whole vector run the scalar helpers of _rowops.h. Its
 * parameters are undefined at the end. */

/* softmax's exp(d), d = x - max <= 0: 0 below -87 (where expf itself is ~FLT_MIN) */
RV_ATTR __attribute__((always_inline)) static inline RV RV_FN(row_exp0)(RV d)
{
    return RV_AND(RV_EXP(d), RV_GE(d, RV_SET1(-87.0f)));
}

RV_ATTR __attribute__((always_inline)) static inline RV RV_FN(row_gelu)(RV v)
{
    RV e = RV_ERF(RV_MUL(v, RV_SET1(0.7071067811865476f)));
    return RV_MUL(RV_MUL(RV_SET1(0.5f), v), RV_ADD(RV_SET1(1.0f), e));
}

/* row_max_generic's contract: the maximum, or 1 with the row set to NaN */
RV_ATTR static inline int RV_FN(row_max)(float *y, long C, float *out)
{
    const long CL = C - C % RV_L;
    RV mv = RV_SET1(-INFINITY);
    RV_M bad = RV_MNONE();
    for (long j = 0; j < CL; j += RV_L) {
        RV v = RV_LOAD(y + j);
        bad = RV_MOR(bad, RV_UNORD(v));
        mv = RV_MAX(mv, v);
    }
    return row_max_end(y, CL, C, RV_HMAX(mv), RV_MANY(bad), out);
}

RV_ATTR static void RV_FN(row_softmax)(float *y, long C)
{
    const long CL = C - C % RV_L;
    float m;
    if (RV_FN(row_max)(y, C, &m))
        return;
    const RV mb = RV_SET1(m);
    RV s0 = RV_ZERO(), s1 = RV_ZERO();
    long j = 0;
    for (; j + 2 * RV_L <= C; j += 2 * RV_L) {
        RV e0 = RV_FN(row_exp0)(RV_SUB(RV_LOAD(y + j), mb));
        RV e1 = RV_FN(row_exp0)(RV_SUB(RV_LOAD(y + j + RV_L), mb));
        RV_STORE(y + j, e0);
        RV_STORE(y + j + RV_L, e1);
        s0 = RV_ADD(s0, e0);
        s1 = RV_ADD(s1, e1);
    }
    for (; j < CL; j += RV_L) {
        RV e0 = RV_FN(row_exp0)(RV_SUB(RV_LOAD(y + j), mb));
        RV_STORE(y + j, e0);
        s0 = RV_ADD(s0, e0);
    }
    float s = RV_HSUM(RV_ADD(s0, s1));
    for (; j < C; j++) {
        y[j] = row_exp0(y[j] - m);
        s += y[j];
    }
    const RV inv = RV_SET1(1.0f / s), tiny = RV_SET1(FLT_MIN);
    for (j = 0; j < CL; j += RV_L) {
        RV p = RV_MUL(RV_LOAD(y + j), inv);
        RV_STORE(y + j, RV_AND(p, RV_GE(p, tiny)));
    }
    for (; j < C; j++)
        y[j] = row_flush1(y[j] * (1.0f / s));
}

RV_ATTR static void RV_FN(row_logsoftmax)(float *y, long C)
{
    const long CL = C - C % RV_L;
    float m;
    if (RV_FN(row_max)(y, C, &m))
        return;
    const RV mb = RV_SET1(m);
    RV sv = RV_ZERO();
    for (long j = 0; j < CL; j += RV_L)
        sv = RV_ADD(sv, RV_FN(row_exp0)(RV_SUB(RV_LOAD(y + j), mb)));
    float s = RV_HSUM(sv);
    for (long j = CL; j < C; j++)
        s += row_exp0(y[j] - m);
    const float off = m + logf(s);
    const RV ob = RV_SET1(off);
    for (long j = 0; j < CL; j += RV_L)
        RV_STORE(y + j, RV_SUB(RV_LOAD(y + j), ob));
    for (long j = CL; j < C; j++)
        y[j] -= off;
}

/* the attention row's scores: row * scale (+ mask, or -inf where the bool mask is 0) */
RV_ATTR static void RV_FN(row_scale_mask)(float *row, long T, float scale, const void *mrow,
                                          int kind)
{
    const RV sc = RV_SET1(scale);
    const long TL = T - T % RV_L;
    long j = 0;
    if (kind == ROW_MASK_ADD) {
        const float *m = (const float *)mrow;
        for (; j < TL; j += RV_L)
            RV_STORE(row + j, RV_FMA(RV_LOAD(row + j), sc, RV_LOAD(m + j)));
        for (; j < T; j++)
            row[j] = row[j] * scale + m[j];
    } else if (kind == ROW_MASK_BOOL) {
        const unsigned char *m = (const unsigned char *)mrow;
        const RV ninf = RV_SET1(-INFINITY);
        for (; j < TL; j += RV_L)
            RV_STORE(row + j, RV_SELECT(RV_BYTES_ZERO(m + j), ninf, RV_MUL(RV_LOAD(row + j), sc)));
        for (; j < T; j++)
            row[j] = m[j] ? row[j] * scale : -INFINITY;
    } else {
        for (; j < TL; j += RV_L)
            RV_STORE(row + j, RV_MUL(RV_LOAD(row + j), sc));
        for (; j < T; j++)
            row[j] *= scale;
    }
}

/* the row entry: the scores, then their softmax */
RV_ATTR static void RV_FN(row_scale_mask_softmax)(float *row, long T, float scale,
                                                  const void *mrow, int kind)
{
    RV_FN(row_scale_mask)(row, T, scale, mrow, kind);
    RV_FN(row_softmax)(row, T);
}

RV_ATTR static void RV_FN(row_layernorm)(const float *x, const float *scale, const float *bias,
                                         float eps, float *y, long C, float *mean, float *inv)
{
    const long CL = C - C % RV_L, C4L = C - C % (4 * RV_L);
    /* four accumulators: the adds of a row are not one dependency chain */
    RV a0 = RV_ZERO(), a1 = a0, a2 = a0, a3 = a0;
    long j;
    for (j = 0; j < C4L; j += 4 * RV_L) {
        a0 = RV_ADD(a0, RV_LOAD(x + j));
        a1 = RV_ADD(a1, RV_LOAD(x + j + RV_L));
        a2 = RV_ADD(a2, RV_LOAD(x + j + 2 * RV_L));
        a3 = RV_ADD(a3, RV_LOAD(x + j + 3 * RV_L));
    }
    for (; j < CL; j += RV_L)
        a0 = RV_ADD(a0, RV_LOAD(x + j));
    float s = RV_HSUM(RV_ADD(RV_ADD(a0, a1), RV_ADD(a2, a3)));
    for (; j < C; j++)
        s += x[j];
    const float mu = s / (float)C;
    const RV mb = RV_SET1(mu);
    a0 = a1 = a2 = a3 = RV_ZERO();
    for (j = 0; j < C4L; j += 4 * RV_L) {
        RV d0 = RV_SUB(RV_LOAD(x + j), mb);
        RV d1 = RV_SUB(RV_LOAD(x + j + RV_L), mb);
        RV d2 = RV_SUB(RV_LOAD(x + j + 2 * RV_L), mb);
        RV d3 = RV_SUB(RV_LOAD(x + j + 3 * RV_L), mb);
        a0 = RV_FMA(d0, d0, a0);
        a1 = RV_FMA(d1, d1, a1);
        a2 = RV_FMA(d2, d2, a2);
        a3 = RV_FMA(d3, d3, a3);
    }
    for (; j < CL; j += RV_L) {
        RV d = RV_SUB(RV_LOAD(x + j), mb);
        a0 = RV_FMA(d, d, a0);
    }
    float v = RV_HSUM(RV_ADD(RV_ADD(a0, a1), RV_ADD(a2, a3)));
    for (; j < C; j++)
        v += (x[j] - mu) * (x[j] - mu);
    const float iv = 1.0f / sqrtf(v / (float)C + eps);
    const RV ib = RV_SET1(iv);
    for (j = 0; j < CL; j += RV_L) {
        RV d = RV_MUL(RV_SUB(RV_LOAD(x + j), mb), ib);
        RV b = bias ? RV_LOAD(bias + j) : RV_ZERO();
        RV_STORE(y + j, RV_FMA(d, RV_LOAD(scale + j), b));
    }
    for (; j < C; j++)
        y[j] = (x[j] - mu) * iv * scale[j] + (bias ? bias[j] : 0.0f);
    *mean = mu;
    *inv = iv;
}

/* row_rmsnorm_generic's contract and error bound (_rowops.h), ss in four accumulators */
RV_ATTR static void RV_FN(row_rmsnorm)(const float *x, const float *scale, float eps, float *y,
                                       long C)
{
    const long CL = C - C % RV_L, C4L = C - C % (4 * RV_L);
    RV a0 = RV_ZERO(), a1 = a0, a2 = a0, a3 = a0;
    long j;
    for (j = 0; j < C4L; j += 4 * RV_L) {
        const RV v0 = RV_LOAD(x + j), v1 = RV_LOAD(x + j + RV_L);
        const RV v2 = RV_LOAD(x + j + 2 * RV_L), v3 = RV_LOAD(x + j + 3 * RV_L);
        a0 = RV_FMA(v0, v0, a0);
        a1 = RV_FMA(v1, v1, a1);
        a2 = RV_FMA(v2, v2, a2);
        a3 = RV_FMA(v3, v3, a3);
    }
    for (; j < CL; j += RV_L) {
        const RV v = RV_LOAD(x + j);
        a0 = RV_FMA(v, v, a0);
    }
    float ss = RV_HSUM(RV_ADD(RV_ADD(a0, a1), RV_ADD(a2, a3)));
    for (; j < C; j++)
        ss += x[j] * x[j];
    const float iv = 1.0f / sqrtf(ss / (float)C + eps);
    const RV ib = RV_SET1(iv);
    for (j = 0; j < CL; j += RV_L)
        RV_STORE(y + j, RV_MUL(RV_MUL(RV_LOAD(x + j), ib), RV_LOAD(scale + j)));
    for (; j < C; j++)
        y[j] = x[j] * iv * scale[j];
}

RV_ATTR static void RV_FN(row_unary)(const float *x, float *y, long n, int fn)
{
    const long nL = n - n % RV_L;
    const RV one = RV_SET1(1.0f), zero = RV_ZERO();
    long j = 0;
    if (fn == ROW_ERF) {
        for (; j < nL; j += RV_L)
            RV_STORE(y + j, RV_ERF(RV_LOAD(x + j)));
        for (; j < n; j++)
            y[j] = row_erf1(x[j]);
    } else if (fn == ROW_GELU) {
        for (; j < nL; j += RV_L)
            RV_STORE(y + j, RV_FN(row_gelu)(RV_LOAD(x + j)));
        for (; j < n; j++)
            y[j] = row_gelu1(x[j]);
    } else {
        for (; j < nL; j += RV_L) {
            RV v = RV_LOAD(x + j);
            RV e = RV_EXP(RV_NEG_ABS(v));                     /* exp(-|x|) */
            RV r = RV_DIV(one, RV_ADD(one, e));
            RV t = RV_SELECT(RV_GE(v, zero), r, RV_MUL(e, r));
            RV_STORE(y + j, RV_SELECT(RV_UNORD(v), v, t));
        }
        for (; j < n; j++)
            y[j] = row_sigmoid1(x[j]);
    }
}

/* y (R, N) <- gelu(y + bias), bias (N,): the fused Gemm epilogue */
RV_ATTR static void RV_FN(row_bias_gelu)(float *y, const float *bias, long R, long N)
{
    const long NL = N - N % RV_L;
    for (long r = 0; r < R; r++) {
        float *yr = y + r * N;
        long j = 0;
        for (; j < NL; j += RV_L)
            RV_STORE(yr + j, RV_FN(row_gelu)(RV_ADD(RV_LOAD(yr + j), RV_LOAD(bias + j))));
        for (; j < N; j++)
            yr[j] = row_gelu1(yr[j] + bias[j]);
    }
}

#undef RV
#undef RV_M
#undef RV_L
#undef RV_FN
#undef RV_ATTR
#undef RV_LOAD
#undef RV_STORE
#undef RV_SET1
#undef RV_ZERO
#undef RV_ADD
#undef RV_SUB
#undef RV_MUL
#undef RV_DIV
#undef RV_FMA
#undef RV_MAX
#undef RV_HSUM
#undef RV_HMAX
#undef RV_EXP
#undef RV_ERF
#undef RV_GE
#undef RV_UNORD
#undef RV_MOR
#undef RV_MNONE
#undef RV_MANY
#undef RV_AND
#undef RV_SELECT
#undef RV_NEG_ABS
#undef RV_BYTES_ZERO
