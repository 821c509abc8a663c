/* The 3x3 int8 depthwise kernel on AVX-512 VNNI that reads the u8 plane itself (a row of
 * three taps per vpdpbusd), for _qdw.h's plans with u8rows set (3x3, stride 1 or 2 across,
 * any down, no dilation). Included after the VNNI sums built with QDW_NARROW16 (they give
 * qdw_requant16_u8 and QDW_FN(qdw_int16_of)): by _qdw.h, and on SIMDe by _qgemm_emu.
 *
 * The plane is copied into a zero-point-padded u8 plane U (Hu rows of Wu bytes: the
 * padding holds x_zp, so no border case), and for 16 outputs ox0.. of an output row:
 *   lane t (outputs ox0 + 4t .. + 3) = the 16 bytes of U's row at sw * (ox0 + 4t), put in
 *   the lane by one dword permute of the row's 32 / 64 bytes (vpermd: one load and one
 *   permute, not four loads and three inserts), shuffled in the lane so output o's
 *   dword is its row's three taps and one more byte (bytes sw*o .. sw*o + 3), then
 *   vpdpbusd with the broadcast (w0, w1, w2, 0):
 * per tap row of 16 outputs a load, a permute, a shuffle and a vpdpbusd, where the int16
 * path packs the plane to int16 first and needs nine loads, ten unpacks and ten
 * multiply-adds. The sums are of x, not x - x_zp: x_zp * sum(w) is taken from the bias
 * (exact: |sum| <= 9 * 255 * 128). Integer epilogue only (the float path stays int16).
 * QDW_U8_FN / QDW_U8_DP (default: the names, vpdpbusd) rename the functions and replace
 * the multiply-add: the emulated test build's broken twin (_qgemm_emu.pyx). */
#ifndef QDW_U8_FN
#define QDW_U8_FN(name) name
#endif
#ifndef QDW_U8_DP
#define QDW_U8_DP(acc, v, w) _mm512_dpbusd_epi32(acc, v, w)
#endif

/* The tap bytes of outputs [ox0, ox0 + 16) from U's row r: output o's dword its three
 * taps and one more byte (a load, a dword permute, a byte shuffle). */
#define QDW_U8_TAPROW(r, sw, ox0)                                                                  \
    _mm512_shuffle_epi8(_mm512_permutexvar_epi32(lanes, (sw) == 1                                  \
        ? _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)((r) + (long)(sw) * (ox0))))  \
        : _mm512_loadu_si512((const void *)((r) + (long)(sw) * (ox0)))), taps)

/* Outputs [ox0, ox0 + 16) of one row of channel c: u rows of U at the output row's first
 * tap row, wr the three (w0, w1, w2, 0) row weights (strides down of 3 and more;
 * qdw_channel_u8rows walks down columns for 1 and 2). */
#define QDW_U8_ROW(i)                                                                              \
    acc = QDW_U8_DP(acc, QDW_U8_TAPROW(u + (i) * Wu, sw, ox0), w##i);

/* The same for outputs 0-7 of two output rows (rows <= 8 wide: 7x7 planes): lanes 0-1
 * read the tap row of output row oy, lanes 2-3 that of row oy + 1 (ustep bytes on; the
 * last odd row's second half reads U's spare bottom rows and is not stored). */
#define QDW_U8_ROW2(i)                                                                             \
    {                                                                                              \
        const uint8_t *r_ = u + (i) * Wu;                                                          \
        __m512i v_ = _mm512_permutex2var_epi32(                                                    \
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)r_)), lanes2,               \
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r_ + ustep))));            \
        acc = QDW_U8_DP(acc, _mm512_shuffle_epi8(v_, taps), w##i);                                 \
    }

/* One channel's plane x into U's interior (the rest holds x_zp from qdw_u8_fill): 16 bytes
 * per step, the last one masked (no memcpy call per row: on short rows the call costs
 * more than the copy). */
QV_TARGET static void QDW_U8_FN(qdw_u8_plane)(const qdw_plan *p, const uint8_t *x, uint8_t *U) {
    const int W = p->W, Wu = (int)p->Wu;
    const __mmask16 wtail = (__mmask16)((1u << (W % 16)) - 1);
    for (int iy = 0; iy < p->H; iy++) {
        const uint8_t *src = x + (long)iy * W;
        uint8_t *dst = U + (long)(iy + p->ph) * Wu + p->pw;
        int ix = 0;
        for (; ix + 16 <= W; ix += 16)
            _mm_storeu_si128((__m128i *)(dst + ix), _mm_loadu_si128((const __m128i *)(src + ix)));
        if (wtail) _mm_mask_storeu_epi8(dst + ix, wtail, _mm_maskz_loadu_epi8(wtail, src + ix));
    }
}

/* Channel c from its plane in U (qdw_u8_plane) into y. */
QV_TARGET static void QDW_U8_FN(qdw_channel_u8rows)(const qdw_plan *p, const uint8_t *U,
                                                    const int8_t *w, const qe_epi *e, long c,
                                                    uint8_t *y) {
    const int ow = p->ow, sw = p->sw, Wu = (int)p->Wu;
    int32_t wsum = 0, wd[3];
    for (int i = 0; i < 3; i++) {
        wd[i] = (int32_t)((uint32_t)(uint8_t)w[3 * i] | (uint32_t)(uint8_t)w[3 * i + 1] << 8
                          | (uint32_t)(uint8_t)w[3 * i + 2] << 16);
        wsum += w[3 * i] + w[3 * i + 1] + w[3 * i + 2];
    }
    const __m512i w0 = _mm512_set1_epi32(wd[0]), w1 = _mm512_set1_epi32(wd[1]),
                  w2 = _mm512_set1_epi32(wd[2]);
    const int s = sw;      /* lane bytes of output o (0-3): s*o .. s*o + 3 */
    const __m512i taps = _mm512_broadcast_i32x4(_mm_setr_epi8(
        0, 1, 2, 3, s, s + 1, s + 2, s + 3, 2 * s, 2 * s + 1, 2 * s + 2, 2 * s + 3,
        3 * s, 3 * s + 1, 3 * s + 2, 3 * s + 3));
    /* lane t's 16 bytes start at sw * 4t: dwords sw*t .. sw*t + 3 of the row's load, put in
     * place by one dword permute (AVX-512F) instead of four loads and three inserts; the
     * paired rows take lanes 2-3 from the second row's load (dwords 16..) */
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, s, s + 1, s + 2, s + 3, 2 * s,
                                            2 * s + 1, 2 * s + 2, 2 * s + 3, 3 * s, 3 * s + 1,
                                            3 * s + 2, 3 * s + 3);
    const __m512i lanes2 = _mm512_setr_epi32(0, 1, 2, 3, s, s + 1, s + 2, s + 3, 16, 17, 18,
                                             19, 16 + s, 17 + s, 18 + s, 19 + s);
    const qdw_int16 k16 = QDW_FN(qdw_int16_of)(e, c, e->bias[c] - (int32_t)p->xzp * wsum);
    const int oh = p->oh;
    const long ustep = (long)p->sh * Wu;
    const __mmask16 otail = (__mmask16)((1u << (ow % 16)) - 1);
    if (ow <= 8) {   /* two output rows per vector: lanes 0-1 row oy, lanes 2-3 row oy + 1 */
        const __mmask16 rtail = (__mmask16)((1u << ow) - 1);
        for (int oy = 0; oy < oh; oy += 2) {
            const uint8_t *u = U + oy * ustep;
            __m512i acc = _mm512_setzero_si512();
            QDW_U8_ROW2(0) QDW_U8_ROW2(1) QDW_U8_ROW2(2)
            const __m128i q = _mm512_cvtepi32_epi8(qdw_requant16_u8(acc, &k16));
            uint8_t *yr = y + (long)oy * ow;
            _mm_mask_storeu_epi8(yr, rtail, q);
            if (oy + 1 < oh) _mm_mask_storeu_epi8(yr + ow, rtail, _mm_srli_si128(q, 8));
        }
        return;
    }
    /* strides 1 and 2 down: down a column of 16 outputs, each tap row's permute and
     * shuffle done once for the output rows that share it (stride 1: rows oy .. oy + 2,
     * two carried, 3 -> 1 per 16 outputs; stride 2: rows 2oy .. 2oy + 2, the first
     * carried, 3 -> 2): the permutes and shuffles are what bounds this loop */
    if (p->sh <= 2) {
        for (int ox0 = 0; ox0 < ow; ox0 += 16) {
            __m512i v0 = QDW_U8_TAPROW(U, sw, ox0), v1 = QDW_U8_TAPROW(U + Wu, sw, ox0);
            for (int oy = 0; oy < oh; oy++) {
                const uint8_t *u = U + oy * ustep;
                if (p->sh == 2 && oy) v1 = QDW_U8_TAPROW(u + Wu, sw, ox0);
                const __m512i v2 = QDW_U8_TAPROW(u + 2 * Wu, sw, ox0);
                __m512i acc = QDW_U8_DP(_mm512_setzero_si512(), v0, w0);
                acc = QDW_U8_DP(acc, v1, w1);
                acc = QDW_U8_DP(acc, v2, w2);
                const __m128i q = _mm512_cvtepi32_epi8(qdw_requant16_u8(acc, &k16));
                uint8_t *yr = y + (long)oy * ow;
                if (ox0 + 16 <= ow) _mm_storeu_si128((__m128i *)(yr + ox0), q);
                else _mm_mask_storeu_epi8(yr + ox0, otail, q);
                v0 = p->sh == 1 ? v1 : v2;
                v1 = v2;
            }
        }
        return;
    }
    for (int oy = 0; oy < oh; oy++) {
        const uint8_t *u = U + oy * ustep;
        uint8_t *yr = y + (long)oy * ow;
        for (int ox0 = 0; ox0 < ow; ox0 += 16) {
            __m512i acc = _mm512_setzero_si512();
            QDW_U8_ROW(0) QDW_U8_ROW(1) QDW_U8_ROW(2)
            const __m128i q = _mm512_cvtepi32_epi8(qdw_requant16_u8(acc, &k16));
            if (ox0 + 16 <= ow) _mm_storeu_si128((__m128i *)(yr + ox0), q);
            else _mm_mask_storeu_epi8(yr + ox0, otail, q);
        }
    }
}
#undef QDW_U8_ROW
#undef QDW_U8_ROW2
#undef QDW_U8_TAPROW

/* U (Hu x Wu bytes) all x_zp: the padding of every channel's copy. */
static void QDW_U8_FN(qdw_u8_fill)(const qdw_plan *p, uint8_t *U) {
    memset(U, p->xzp, p->Hu * p->Wu + 64);
}

/* The row entry `u8_channels`: channels [c0, c1) of one image x (C, H, W) through the u8
 * plane U (integer epilogue), y (C, oh, ow) u8. */
static void QDW_U8_FN(qdw_u8_channels)(const qdw_plan *p, const uint8_t *x, const int8_t *w,
                                       const qe_epi *e, uint8_t *y, uint8_t *U, int c0,
                                       int c1) {
    const long ohw = (long)p->oh * p->ow;
    QDW_U8_FN(qdw_u8_fill)(p, U);
    for (int c = c0; c < c1; c++) {
        QDW_U8_FN(qdw_u8_plane)(p, x + (long)c * p->H * p->W, U);
        QDW_U8_FN(qdw_channel_u8rows)(p, U, w + (long)c * p->T, e, c, y + c * ohw);
    }
}
#undef QDW_U8_FN
#undef QDW_U8_DP
