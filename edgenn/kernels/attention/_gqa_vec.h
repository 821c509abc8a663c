/* The vector bodies of _gqa.h on GQ_L-float vectors: a block's scores (GQ_L keys at a
 * time: one partial-sum vector per key over the head's channels, then GQ_REDUCE folds
 * the GQ_L vectors into one vector of their sums), the softmax of a row, the weighted sum
 * of V rows. Included once per width with the GQ_* operation macros defined (AVX2: 8
 * floats, AVX-512F: 16, NEON: 4); channels past the last whole vector (H % GQ_L) and keys
 * past the last whole block run in scalar code. */

#define GQ_FN(f) GQ_CAT(f, GQ_SFX)

/* the horizontal sum / max of one vector, lane 0 first */
GQ_ATTR static inline __attribute__((always_inline)) float GQ_FN(gq_hsum)(GQ_V x)
{
    float t[GQ_L], r = 0.0f;
    GQ_STORE(t, x);
    for (int i = 0; i < GQ_L; i++)
        r += t[i];
    return r;
}

GQ_ATTR static inline __attribute__((always_inline)) float GQ_FN(gq_hmax)(GQ_V x)
{
    float t[GQ_L], r = -INFINITY;
    GQ_STORE(t, x);
    for (int i = 0; i < GQ_L; i++)
        r = t[i] > r ? t[i] : r;
    return r;
}

/* s[t] = scale * dot(q, k + t*H), t < n */
GQ_ATTR static void GQ_FN(gq_scores)(const float *q, const float *k, long H, long n,
                                     float scale, float *s)
{
    const long J = H - H % GQ_L;
    const GQ_V sc = GQ_SET1(scale);
    long t = 0;
    for (; t + GQ_L <= n; t += GQ_L) {
        const float *kb = k + t * H;
        GQ_V a[GQ_L];
        for (int u = 0; u < GQ_L; u++)
            a[u] = GQ_SET1(0.0f);
        for (long c = 0; c < J; c += GQ_L) {
            const GQ_V qv = GQ_LOAD(q + c);
            for (int u = 0; u < GQ_L; u++)
                a[u] = GQ_FMA(qv, GQ_LOAD(kb + u * H + c), a[u]);
        }
        GQ_V r = GQ_REDUCE(a);
        if (J < H) {
            float tl[GQ_L];
            for (int u = 0; u < GQ_L; u++) {
                float x = 0.0f;
                for (long d = J; d < H; d++)
                    x += q[d] * kb[u * H + d];
                tl[u] = x;
            }
            r = GQ_ADD(r, GQ_LOAD(tl));
        }
        GQ_STORE(s + t, GQ_MUL(r, sc));
    }
    for (; t < n; t++) {
        const float *kr = k + t * H;
        GQ_V a = GQ_SET1(0.0f);
        for (long c = 0; c < J; c += GQ_L)
            a = GQ_FMA(GQ_LOAD(q + c), GQ_LOAD(kr + c), a);
        float x = GQ_FN(gq_hsum)(a);
        for (long d = J; d < H; d++)
            x += q[d] * kr[d];
        s[t] = x * scale;
    }
}

/* s[0:n] (n >= 1) scores -> probabilities, in place (gq_softmax_scalar's steps) */
GQ_ATTR static void GQ_FN(gq_softmax)(float *s, long n, float cap, int smooth)
{
    const long J = n - n % GQ_L;
    GQ_V mx = GQ_SET1(-INFINITY), ck = GQ_SET1(0.0f);
    long t;
    for (t = 0; t < J; t += GQ_L) {
        const GQ_V x = GQ_LOAD(s + t);
        mx = GQ_MAX(mx, x);
        ck = GQ_ADD(ck, GQ_SUB(x, x));     /* NaN iff a score is NaN or infinite */
    }
    float m = GQ_FN(gq_hmax)(mx), chk = GQ_FN(gq_hsum)(ck);
    for (; t < n; t++) {
        m = s[t] > m ? s[t] : m;
        chk += s[t] - s[t];
    }
    if (chk != 0.0f) {
        gq_softmax_exact(s, n, cap, smooth);
        return;
    }
    if (cap > 0.0f) {                      /* cap tanh(s / cap), tanh through exp(-2|x|) */
        const GQ_V c = GQ_SET1(cap), one = GQ_SET1(1.0f), m2 = GQ_SET1(-2.0f);
        mx = GQ_SET1(-INFINITY);
        for (t = 0; t < J; t += GQ_L) {
            const GQ_V x = GQ_DIV(GQ_LOAD(s + t), c);
            const GQ_V e = GQ_EXP(GQ_MUL(GQ_ABS(x), m2));
            const GQ_V y = GQ_MUL(c, GQ_COPYSIGN(GQ_DIV(GQ_SUB(one, e), GQ_ADD(one, e)), x));
            GQ_STORE(s + t, y);
            mx = GQ_MAX(mx, y);
        }
        m = GQ_FN(gq_hmax)(mx);
        for (; t < n; t++) {
            s[t] = cap * gq_tanh1(s[t] / cap);
            m = s[t] > m ? s[t] : m;
        }
    }
    if (smooth && m < 0.0f)
        m = 0.0f;
    const GQ_V mv = GQ_SET1(m);
    GQ_V sum = GQ_SET1(0.0f);
    for (t = 0; t < J; t += GQ_L) {
        const GQ_V e = GQ_EXP(GQ_SUB(GQ_LOAD(s + t), mv));
        GQ_STORE(s + t, e);
        sum = GQ_ADD(sum, e);
    }
    float total = GQ_FN(gq_hsum)(sum);
    for (; t < n; t++) {
        s[t] = simd_exp1(s[t] - m);
        total += s[t];
    }
    if (smooth)
        total += simd_exp1(-m);
    const GQ_V dv = GQ_SET1(total);
    for (t = 0; t < J; t += GQ_L)
        GQ_STORE(s + t, GQ_DIV(GQ_LOAD(s + t), dv));
    for (; t < n; t++)
        s[t] = s[t] / total;
}

/* acc[c0 : c0 + NC L] += sum_t p[t] v[t*H + c0 ...]: NC accumulators (two sets over
 * alternate keys when NC <= 4, so enough FMA chains are in flight), summed at the end */
GQ_ATTR static inline __attribute__((always_inline))
void GQ_FN(gq_wsum_nc)(const int NC, const float *p, const float *v, long H, long n,
                        float *acc)
{
    GQ_V a[8], b[4];
    for (int u = 0; u < NC; u++)
        a[u] = GQ_LOAD(acc + u * GQ_L);
    long t = 0;
    if (NC <= 4) {
        for (int u = 0; u < NC; u++)
            b[u] = GQ_SET1(0.0f);
        for (; t + 2 <= n; t += 2) {
            const GQ_V p0 = GQ_SET1(p[t]), p1 = GQ_SET1(p[t + 1]);
            const float *v0 = v + t * H, *v1 = v0 + H;
            for (int u = 0; u < NC; u++) {
                a[u] = GQ_FMA(p0, GQ_LOAD(v0 + u * GQ_L), a[u]);
                b[u] = GQ_FMA(p1, GQ_LOAD(v1 + u * GQ_L), b[u]);
            }
        }
        for (int u = 0; u < NC; u++)
            a[u] = GQ_ADD(a[u], b[u]);
    }
    for (; t < n; t++) {
        const GQ_V pt = GQ_SET1(p[t]);
        const float *vr = v + t * H;
        for (int u = 0; u < NC; u++)
            a[u] = GQ_FMA(pt, GQ_LOAD(vr + u * GQ_L), a[u]);
    }
    for (int u = 0; u < NC; u++)
        GQ_STORE(acc + u * GQ_L, a[u]);
}

/* acc[0:H] += sum_t p[t] v[t*H : t*H + H], t < n */
GQ_ATTR static void GQ_FN(gq_wsum)(const float *p, const float *v, long H, long n,
                                   float *acc)
{
    const long J = H - H % GQ_L;
    long c = 0;
    for (; J - c >= 8 * GQ_L; c += 8 * GQ_L)
        GQ_FN(gq_wsum_nc)(8, p, v + c, H, n, acc + c);
    if (J - c >= 4 * GQ_L) {
        GQ_FN(gq_wsum_nc)(4, p, v + c, H, n, acc + c);
        c += 4 * GQ_L;
    }
    if (J - c >= 2 * GQ_L) {
        GQ_FN(gq_wsum_nc)(2, p, v + c, H, n, acc + c);
        c += 2 * GQ_L;
    }
    if (J - c >= GQ_L) {
        GQ_FN(gq_wsum_nc)(1, p, v + c, H, n, acc + c);
        c += GQ_L;
    }
    if (J < H)
        for (long t = 0; t < n; t++)
            for (long d = J; d < H; d++)
                acc[d] += p[t] * v[t * H + d];
}

/* the includer's parameters, undefined for the next width */
#undef GQ_FN
#undef GQ_V
#undef GQ_L
#undef GQ_SFX
#undef GQ_ATTR
#undef GQ_LOAD
#undef GQ_STORE
#undef GQ_SET1
#undef GQ_ADD
#undef GQ_SUB
#undef GQ_MUL
#undef GQ_DIV
#undef GQ_FMA
#undef GQ_MAX
#undef GQ_EXP
#undef GQ_ABS
#undef GQ_COPYSIGN
#undef GQ_REDUCE
