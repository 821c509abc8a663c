/* The sums of the int8 depthwise kernel (_qdw.h), written once for two tiers: included
 * with QDW_FN(name) (the tier's function names), QDW_ATTR (its target attribute) and
 * QDW_DOT(acc, pairs, w) (acc + the s16 pair products of pairs and w, s32): AVX2 as
 * vpmaddwd + vpaddd, AVX-512 VNNI (with VL, 256-bit) as one vpdpwssd. The same integer
 * sums either way (exact: |x - zp| <= 255, |w| <= 128, no saturation).
 * Included inside _qdw.h's x86 section, after qdw_out16_* and qdw_pack_plane_avx2; with
 * QDW_SUMS_ONLY, without the wide rows' kernel (its float epilogue is the x86 section's:
 * _qgemm_emu, the VNNI body on SIMDe, any CPU); with QDW_NARROW16 (AVX-512: natively, or
 * on SIMDe in _qgemm_emu) the integer epilogue on 16 lanes and the narrow rows' kernel. */

/* 16 outputs from the int16 plane at b: tap pairs (x0, x1) . (w0, w1) by vpmaddwd (exact:
 * |x - zp| <= 255, |w| <= 128). alo = outputs 0-3 | 8-11, ahi = 4-7 | 12-15 (lane order). */
QDW_ATTR static inline void QDW_FN(qdw_taps16)(const qdw_plan *p, const int16_t *b, const int32_t *wp,
                                      __m256i *lo, __m256i *hi) {
    __m256i alo = _mm256_setzero_si256(), ahi = alo;
    for (int q = 0; q < p->npair; q++) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(b + qdw_off(p, 2 * q)));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(b + qdw_off(p, 2 * q + 1)));
        __m256i wv = _mm256_set1_epi32(wp[q]);
        alo = QDW_DOT(alo, _mm256_unpacklo_epi16(v0, v1), wv);
        ahi = QDW_DOT(ahi, _mm256_unpackhi_epi16(v0, v1), wv);
    }
    *lo = alo;
    *hi = ahi;
}

/* Sums of `rows` rows of n outputs, 16 per step (n rounded up: acc has room, P has
 * slack): row r's outputs read P from r * pstride, go to acc + r * opitch. */
QDW_ATTR static void QDW_FN(qdw_sums)(const qdw_plan *p, const int16_t *P, long rows, long pstride,
                                  long n, long opitch, const int32_t *wp, int32_t *acc) {
    for (long r = 0; r < rows; r++, P += pstride, acc += opitch)
    for (long o = 0; o < n; o += 16) {
        const int16_t *b = P + o;
        __m256i alo, ahi;
        QDW_FN(qdw_taps16)(p, b, wp, &alo, &ahi);
        /* alo = outputs 0-3 | 8-11, ahi = 4-7 | 12-15 */
        _mm256_storeu_si256((__m256i *)(acc + o), _mm256_permute2x128_si256(alo, ahi, 0x20));
        _mm256_storeu_si256((__m256i *)(acc + o + 8), _mm256_permute2x128_si256(alo, ahi, 0x31));
    }
}

/* 3x3: the sums of the 16 outputs whose taps start at b, as (outputs 0-3 | 8-11,
 * 4-7 | 12-15); o: the nine tap offsets, w: the five weight pairs (the last one is tap 8
 * with 0). Two chains per half, added at the end: a vpdpwssd chain over all five pairs
 * was latency-bound (5 x 4-5 cycles per 16 outputs). */
#define QDW_SUMS3X3(b, alo, ahi)                                                                   \
    {                                                                                              \
        __m256i v0_, v1_, blo_, bhi_;                                                              \
        v0_ = _mm256_loadu_si256((const __m256i *)((b) + o8));                                     \
        alo = _mm256_madd_epi16(_mm256_unpacklo_epi16(v0_, zero), w8);                             \
        ahi = _mm256_madd_epi16(_mm256_unpackhi_epi16(v0_, zero), w8);                             \
        v0_ = _mm256_loadu_si256((const __m256i *)((b) + o0));                                     \
        v1_ = _mm256_loadu_si256((const __m256i *)((b) + o1));                                     \
        blo_ = _mm256_madd_epi16(_mm256_unpacklo_epi16(v0_, v1_), w01);                            \
        bhi_ = _mm256_madd_epi16(_mm256_unpackhi_epi16(v0_, v1_), w01);                            \
        QDW_PAIR(b, o2, o3, w23, alo, ahi) QDW_PAIR(b, o4, o5, w45, blo_, bhi_)                    \
        QDW_PAIR(b, o6, o7, w67, alo, ahi)                                                         \
        alo = _mm256_add_epi32(alo, blo_);                                                         \
        ahi = _mm256_add_epi32(ahi, bhi_);                                                         \
    }
#define QDW_PAIR(b, OA, OB, WV, alo, ahi)                                                          \
        v0_ = _mm256_loadu_si256((const __m256i *)((b) + OA));                                     \
        v1_ = _mm256_loadu_si256((const __m256i *)((b) + OB));                                     \
        alo = QDW_DOT(alo, _mm256_unpacklo_epi16(v0_, v1_), WV);       \
        ahi = QDW_DOT(ahi, _mm256_unpackhi_epi16(v0_, v1_), WV);
#define QDW_3X3_CONSTS                                                                             \
    const long o0 = p->tap_off[0], o1 = p->tap_off[1], o2 = p->tap_off[2], o3 = p->tap_off[3],     \
               o4 = p->tap_off[4], o5 = p->tap_off[5], o6 = p->tap_off[6], o7 = p->tap_off[7],     \
               o8 = p->tap_off[8];                                                                 \
    const __m256i w01 = _mm256_set1_epi32(wp[0]), w23 = _mm256_set1_epi32(wp[1]),                  \
                  w45 = _mm256_set1_epi32(wp[2]), w67 = _mm256_set1_epi32(wp[3]),                  \
                  w8 = _mm256_set1_epi32(wp[4]), zero = _mm256_setzero_si256();

/* 3x3 specialisation of qdw_sums_avx2 (the tap loop unrolled, offsets in registers). */
QDW_ATTR static void QDW_FN(qdw_sums3x3)(const qdw_plan *p, const int16_t *P, long rows,
                                     long pstride, long n, long opitch, const int32_t *wp,
                                     int32_t *acc) {
    QDW_3X3_CONSTS
    for (long r = 0; r < rows; r++, P += pstride, acc += opitch)
        for (long o = 0; o < n; o += 16) {
            __m256i alo, ahi;
            QDW_SUMS3X3(P + o, alo, ahi)
            _mm256_storeu_si256((__m256i *)(acc + o), _mm256_permute2x128_si256(alo, ahi, 0x20));
            _mm256_storeu_si256((__m256i *)(acc + o + 8), _mm256_permute2x128_si256(alo, ahi, 0x31));
        }
}

#if defined(QDW_NARROW16)
/* The integer epilogue on 16 lanes (AVX-512): the sums (alo, ahi: outputs 0-3 | 8-11,
 * 4-7 | 12-15) requantized, in order, clamped s32. Exactly qdw_out16_int: clamping in s32
 * equals its saturating packs (|q| <= 2^24, 0 <= lo <= hi <= 255). */
typedef struct { __m512i bias, zp, lo, hi; __m512 mult; } qdw_int16;

/* channel c's constants; bias: its int32 constant (e->bias[c], or adjusted by the caller) */
QDW_ATTR static inline qdw_int16 QDW_FN(qdw_int16_of)(const qe_epi *e, long c, int32_t bias) {
    qdw_int16 k = {_mm512_set1_epi32(bias), _mm512_set1_epi32(e->yzp),
                   _mm512_set1_epi32(e->lo), _mm512_set1_epi32(e->hi), _mm512_set1_ps(e->mult[c])};
    return k;
}

/* 16 sums in order (acc) requantized, clamped s32. */
QDW_ATTR static inline __m512i qdw_requant16_u8(__m512i acc, const qdw_int16 *k) {
    const __m512 f = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(
        _mm512_add_epi32(acc, k->bias)), k->mult), _mm512_set1_ps(16777216.f));
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), k->zp);
    return _mm512_min_epi32(_mm512_max_epi32(q, k->lo), k->hi);
}

QDW_ATTR static inline __m512i QDW_FN(qdw_requant16)(__m256i alo, __m256i ahi, const qdw_int16 *k) {
    return qdw_requant16_u8(_mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_permute2x128_si256(alo, ahi, 0x20)),
        _mm256_permute2x128_si256(alo, ahi, 0x31), 1), k);
}

/* Those outputs in the lanes of m, stored from y as one run; -> the end of the run. */
QDW_ATTR static inline uint8_t *QDW_FN(qdw_store_lanes)(__m256i alo, __m256i ahi, __mmask16 m,
                                                  const qdw_int16 *k, uint8_t *y) {
    const int n = __builtin_popcount(m);
    _mm_mask_storeu_epi8(y, (__mmask16)((1u << n) - 1), _mm512_cvtepi32_epi8(
        _mm512_maskz_compress_epi32(m, QDW_FN(qdw_requant16)(alo, ahi, k))));
    return y + n;
}
#define QDW_OUT_INT(alo, ahi, y) \
    _mm_storeu_si128((__m128i *)(y), _mm512_cvtepi32_epi8(QDW_FN(qdw_requant16)(alo, ahi, &k16)))
#define QDW_INT_CONSTS const qdw_int16 k16 = QDW_FN(qdw_int16_of)(&e, c, e.bias[c]);
#else
#define QDW_OUT_INT(alo, ahi, y) qdw_out16_int(alo, ahi, bias, mult, zp16, lo8, hi8, y)
#define QDW_INT_CONSTS                                                                             \
    const __m256i bias = _mm256_set1_epi32(e.bias[c]), zp16 = _mm256_set1_epi16((short)e.yzp);    \
    const __m256 mult = _mm256_set1_ps(e.mult[c]);                                                 \
    const __m128i lo8 = _mm_set1_epi8((char)qe_u8(e.lo)), hi8 = _mm_set1_epi8((char)qe_u8(e.hi));
#endif

#ifndef QDW_SUMS_ONLY   /* (the emulated test build takes the sums alone) */
/* One channel, rows of at least 16 outputs: sums and epilogue fused, 16 outputs per step
 * stored straight into y (the last step of a row ends at OW, overlapping the previous). */
QDW_ATTR static void QDW_FN(qdw_channel_direct)(const qdw_plan *p, const int16_t *P,
                                            const int32_t *wp, const qe_epi *ep, long c,
                                            char *y, const uint8_t *z) {
    const qe_epi e = *ep;
    const long es = e.out_f32 ? 4 : 1, pstride = (long)p->sh * p->Wl;
    const int ow = p->ow;
    QDW_INT_CONSTS
    if (p->T == 9) {
        QDW_3X3_CONSTS
        for (int oy = 0; oy < p->oh; oy++, P += pstride) {
            char *yr = y + (long)oy * ow * es;
            const uint8_t *zr = z ? z + (long)oy * ow : NULL;
            for (int ox = 0; ox < ow; ox += 16) {
                if (ox > ow - 16) ox = ow - 16;
                __m256i alo, ahi;
                QDW_SUMS3X3(P + ox, alo, ahi)
                if (e.float_path) qdw_out16_float(alo, ahi, &e, c, yr + ox * es, zr ? zr + ox : NULL);
                else QDW_OUT_INT(alo, ahi, yr + ox);
            }
        }
        return;
    }
    for (int oy = 0; oy < p->oh; oy++, P += pstride) {
        char *yr = y + (long)oy * ow * es;
        const uint8_t *zr = z ? z + (long)oy * ow : NULL;
        for (int ox = 0; ox < ow; ox += 16) {
            if (ox > ow - 16) ox = ow - 16;
            const int16_t *b = P + ox;
            __m256i alo, ahi;
            QDW_FN(qdw_taps16)(p, b, wp, &alo, &ahi);
            if (e.float_path) qdw_out16_float(alo, ahi, &e, c, yr + ox * es, zr ? zr + ox : NULL);
            else QDW_OUT_INT(alo, ahi, yr + ox);
        }
    }
}
#endif

#if defined(QDW_NARROW16)
/* One channel, rows narrower than 16 outputs, integer epilogue, u8 y: per vector of 16
 * outputs (flat: 16 consecutive positions of the row pitch, the plan's fmask its outputs;
 * else one output row of ow) the sums requantized in registers, no s32 buffer. */
QDW_ATTR static void QDW_FN(qdw_channel_narrow)(const qdw_plan *p, const int16_t *P,
                                            const int32_t *wp, const qe_epi *e, long c,
                                            uint8_t *y) {
    const qdw_int16 k16 = QDW_FN(qdw_int16_of)(e, c, e->bias[c]);
    const long nvec = p->flat ? p->nflat : p->oh, step = p->flat ? 16 : (long)p->sh * p->Wl;
    const __mmask16 row = (__mmask16)((1u << p->ow) - 1);
#define QDW_MASK(v) (p->flat ? (__mmask16)p->fmask[v] : row)
    if (p->T == 9) {
        QDW_3X3_CONSTS
        for (long v = 0; v < nvec; v++) {
            __m256i alo, ahi;
            QDW_SUMS3X3(P + v * step, alo, ahi)
            y = QDW_FN(qdw_store_lanes)(alo, ahi, QDW_MASK(v), &k16, y);
        }
        return;
    }
    for (long v = 0; v < nvec; v++) {
        __m256i alo, ahi;
        QDW_FN(qdw_taps16)(p, P + v * step, wp, &alo, &ahi);
        y = QDW_FN(qdw_store_lanes)(alo, ahi, QDW_MASK(v), &k16, y);
    }
#undef QDW_MASK
}
#endif

#ifndef QDW_SUMS_ONLY
/* The tier's row entry `channel`: one channel's plane packed to int16, then rows of >= 16
 * outputs fused with their epilogue, narrow integer rows in 16 lanes (QDW_NARROW16), or
 * the sums into obuf and the shared epilogue. (No target attribute: a dispatcher.) */
static void QDW_FN(qdw_channel)(const qdw_plan *p, const uint8_t *xc, const uint8_t *xend,
                                const int8_t *w8, const int32_t *wc, const qe_epi *e, int c,
                                char *yc, const uint8_t *zc, int16_t *P, int32_t *obuf) {
    (void)w8;
    qdw_pack_plane_avx2(p, xc, xend, P);
    if (p->ow >= 16) {   /* wide rows: sums and epilogue fused, straight into y */
        QDW_FN(qdw_channel_direct)(p, P, wc, e, c, yc, zc);
        return;
    }
#if defined(QDW_NARROW16)
    if (!e->float_path && (!p->flat || p->nflat)) {
        QDW_FN(qdw_channel_narrow)(p, P, wc, e, c, (uint8_t *)yc);
        return;
    }
#endif
    /* narrow rows, stride 1: all rows in one flattened sweep of pitch Wl */
    const long ohw = (long)p->oh * p->ow;
    long rows = p->flat ? 1 : p->oh, n = p->flat ? (long)(p->oh - 1) * p->Wl + p->ow : p->ow;
    long pstride = (long)p->sh * p->Wl, opitch = p->flat ? p->Wl : qdw_roundup(p->ow, 16);
    if (p->T == 9) QDW_FN(qdw_sums3x3)(p, P, rows, pstride, n, opitch, wc, obuf);
    else QDW_FN(qdw_sums)(p, P, rows, pstride, n, opitch, wc, obuf);
    if (p->ow < 8 && p->oh > 1) {   /* narrow rows: compact, then one span */
        for (int oy = 1; oy < p->oh; oy++)
            memmove(obuf + (long)oy * p->ow, obuf + oy * opitch, p->ow * sizeof(int32_t));
        qe_rows_avx2(obuf, 0, 1, ohw, e, c, 0, 0, yc, 0, zc);
    } else {
        qe_rows_avx2(obuf, opitch, p->oh, p->ow, e, c, 0, 0, yc, p->ow, zc);
    }
}
#endif
#undef QDW_OUT_INT
#undef QDW_INT_CONSTS
#undef QDW_3X3_CONSTS
#undef QDW_PAIR
#undef QDW_SUMS3X3
