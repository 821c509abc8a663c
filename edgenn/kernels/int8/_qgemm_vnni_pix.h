/* qconv_u8s8_7x32__avx512vnni: the implicit-GEMM conv tile turned around (onnxruntime
 * MLAS's ConvSym orientation): 7 output pixels broadcast x 32 output channels in the
 * lanes, where _qgemm_vnni_conv.h's tiles broadcast 6 channels' weights over 32 pixels.
 *
 * A plane of 7k pixels (49, 196, 784, 3136: every plane of ResNet-18 and of MobileNetV2
 * from 56x56 down) is whole tiles, where the 32-pixel tiles leave a last 1-16 pixels at a
 * fraction of their rate (a 7x7 plane: 32 + 16 + 1), and 32-channel blocks cover the
 * usual channel counts where 6-row panels leave a 2- or 4-row one.
 *
 * b: the shifted nc4 image (qg_conv.shifted) at output pixel n0, so group g's 4 bytes of
 * pixel n0 + i are at b + goff[g] + 4 i; w: the 32-channel block's weights,
 * [ng][32 channels][4 bytes] (qconv's packing with 32 lanes). 14 accumulators c<i><h>:
 * pixel i, channels 16h .. 16h + 15. pf (or NULL): ng * 32 bytes to prefetch into L2, a
 * line every 2 groups (the driver's slice of the next block's weights: a block is read
 * at 128 bytes a group, per product 4.6 times the weight bytes of the 6 x 32 tiles:
 * faster than memory delivers it where a whole model has pushed the weights out of the
 * caches).
 *   qvp_acc: the s32 sums into out[7 pixels][32 channels];
 *   qvp_u8 / qvp_fz (native build): the integer / float epilogues in registers, the same
 *   operations in the same order as qvc_*_u8 / _fz per output, the bytes written through
 *   an 8 x 16 transpose: r <= 7 pixels and mc <= 32 channels of y (channel rows ld apart)
 *   from the tile's first output; z the residual in y's layout or NULL;
 *   qvp_f32: the float output (qe_span_c's operations), through two 8 x 8 transposes.
 * A tile of r < 7 pixels reads 7 (<= 24 bytes past the image's last pixel: its slack).
 * Optional: QVP_DP(c, x, w) the product step (the emulated test build's broken twin) and
 * QVP_PREFIX the functions' prefix (qvp). */

#ifdef QVP_DP
#define QVP_DP_GIVEN 1
#else
#define QVP_DP(c, x, w) _mm512_dpbusd_epi32(c, x, w)
#endif
#ifndef QVP_PREFIX
#define QVP_PREFIX qvp
#define QVP_PREFIX_DEFAULT 1
#endif
#define QVP_CAT_(a, b) a##_##b
#define QVP_CAT(a, b) QVP_CAT_(a, b)
#define QVP_FN(kind) QVP_CAT(QVP_PREFIX, kind)


#define QVP_ROW(i)                                                                                \
    {                                                                                             \
        const __m512i s = _mm512_set1_epi32(*(const int32_t *)(px + 4 * (i)));                    \
        c##i##0 = QVP_DP(c##i##0, s, w0);                                                         \
        c##i##1 = QVP_DP(c##i##1, s, w1);                                                         \
    }
/* the ng groups into named accumulators (an indexed array made GCC shuffle them through
 * memory), then c[7][2] over them for the epilogues */
#define QVP_ACCUMULATE                                                                            \
    __m512i c00 = QVP_INIT(0), c01 = QVP_INIT(1), c10 = c00, c11 = c01, c20 = c00, c21 = c01,     \
            c30 = c00, c31 = c01, c40 = c00, c41 = c01, c50 = c00, c51 = c01, c60 = c00,          \
            c61 = c01;                                                                            \
    for (long g = 0; g < ng; g++, w += 4 * QVP_CH) {                                              \
        if (pf && !(g & 1)) _mm_prefetch((const char *)pf + 32 * g, _MM_HINT_T1);                 \
        const uint8_t *px = b + goff[g];                                                          \
        const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64);                \
        QVP_ROW(0) QVP_ROW(1) QVP_ROW(2) QVP_ROW(3) QVP_ROW(4) QVP_ROW(5) QVP_ROW(6)              \
    }                                                                                             \
    const __m512i c[QVP_PX][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},                 \
                                  {c40, c41}, {c50, c51}, {c60, c61}};

/* The accumulators' start: 0 (the bare sums), or (the epilogues) the channels' biases, so
 * the sums come out with them added (as _qgemm_vnni_conv.h's QVC_INIT) */
#define QVP_INIT(h) _mm512_setzero_si512()
QV_TARGET static void QVP_FN(acc)(long ng, const uint8_t *w, const uint8_t *b, const long *goff,
                                  const uint8_t *pf, int32_t *out) {
    QVP_ACCUMULATE
    for (int i = 0; i < QVP_PX; i++)
        for (int h = 0; h < 2; h++) _mm512_storeu_si512(out + i * QVP_CH + 16 * h, c[i][h]);
}

#if defined(EDGENN_QEPI_H) && QE_X86 && !defined(QVP_HELPERS)   /* native build */
#define QVP_HELPERS 1
/* p[i] (i < 8): 16 channels' bytes of pixel i -> channel l's pixels 0 .. r-1 at y + l ld
 * (l < mc <= 16): bytes, then 16-bit, then 32-bit unpacks leave channels 2k, 2k + 1 as the
 * two halves of d[k]. */
__attribute__((always_inline)) QV_TARGET static inline void
qvp_store_transposed(const __m128i p[8], int r, int mc, uint8_t *y, long ld) {
    __m128i a[8], s[8], d[8];
    for (int k = 0; k < 4; k++) {
        a[2 * k] = _mm_unpacklo_epi8(p[2 * k], p[2 * k + 1]);       /* channels 0-7 */
        a[2 * k + 1] = _mm_unpackhi_epi8(p[2 * k], p[2 * k + 1]);   /* channels 8-15 */
    }
    for (int k = 0; k < 2; k++)
        for (int q = 0; q < 2; q++) {   /* pixels 4q .. 4q + 3, channels 8k .. 8k + 7 */
            s[4 * k + q] = _mm_unpacklo_epi16(a[4 * q + k], a[4 * q + k + 2]);
            s[4 * k + q + 2] = _mm_unpackhi_epi16(a[4 * q + k], a[4 * q + k + 2]);
        }
    /* s[4k + 2j + q]: channels 8k + 4j .. + 3, pixels 4q .. 4q + 3 */
    for (int k = 0; k < 4; k++) {
        d[2 * k] = _mm_unpacklo_epi32(s[2 * k], s[2 * k + 1]);
        d[2 * k + 1] = _mm_unpackhi_epi32(s[2 * k], s[2 * k + 1]);
    }
    const __mmask16 pm = (__mmask16)((1u << r) - 1);
    for (int k = 0; k < 8; k++) {
        if (2 * k >= mc) break;
        _mm_mask_storeu_epi8(y + 2 * k * ld, pm, d[k]);
        if (2 * k + 1 < mc) _mm_mask_storeu_epi8(y + (2 * k + 1) * ld, pm, _mm_unpackhi_epi64(d[k], d[k]));
    }
}

/* The inverse: channel l's pixels 0 .. r-1 at z + l ld (l < mc; others 0) -> p[i] the
 * 16 channels of pixel i (i < 8). */
__attribute__((always_inline)) QV_TARGET static inline void
qvp_load_transposed(const uint8_t *z, long ld, int r, int mc, __m128i p[8]) {
    const __mmask16 pm = (__mmask16)((1u << r) - 1);
    __m128i rows[16], s[8], t[8], u[8];
    for (int l = 0; l < 16; l++)
        rows[l] = l < mc ? _mm_maskz_loadu_epi8(pm, z + l * ld) : _mm_setzero_si128();
    for (int k = 0; k < 8; k++)   /* pixel j: channels 2k, 2k + 1 */
        s[k] = _mm_unpacklo_epi8(rows[2 * k], rows[2 * k + 1]);
    for (int k = 0; k < 4; k++) {  /* channels 4k .. 4k + 3: pixels 0-3, 4-7 */
        t[2 * k] = _mm_unpacklo_epi16(s[2 * k], s[2 * k + 1]);
        t[2 * k + 1] = _mm_unpackhi_epi16(s[2 * k], s[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++)    /* channels 8k .. 8k + 7 */
        for (int q = 0; q < 2; q++) {
            /* pixels 4q, 4q + 1 | 4q + 2, 4q + 3 */
            u[4 * k + 2 * q] = _mm_unpacklo_epi32(t[4 * k + q], t[4 * k + q + 2]);
            u[4 * k + 2 * q + 1] = _mm_unpackhi_epi32(t[4 * k + q], t[4 * k + q + 2]);
        }
    /* u[4k + m]: channels 8k .. 8k + 7 of pixels 2m, 2m + 1 */
    for (int m = 0; m < 4; m++) {
        p[2 * m] = _mm_unpacklo_epi64(u[m], u[4 + m]);
        p[2 * m + 1] = _mm_unpackhi_epi64(u[m], u[4 + m]);
    }
}
#endif

#undef QVP_INIT

#if defined(EDGENN_QEPI_H) && QE_X86
/* channels 16h .. 16h + 15 of the tile's mc: their biases (0 past mc) */
#define QVP_INIT(h) _mm512_maskz_loadu_epi32(qv_lanes16(mc - 16 * (h)), e->bias + m0 + 16 * (h))
/* For each zmm h of 16 channels (lane mask m of the valid ones) and pixel i: q = sum +
 * bias (the accumulators started at it), BODY (which leaves the u8 value in q's lanes),
 * the pixels' bytes stored transposed at y's channel rows. PRE(h) may set per-h
 * constants. */
#define QVP_FOR_OUTPUTS(PRE, BODY)                                                                \
    for (int h = 0; h < 2; h++) {                                                                 \
        const int mh = mc - 16 * h;                                                               \
        if (mh <= 0) break;                                                                       \
        const __mmask16 m = qv_lanes16(mh);                                                       \
        const __m512 mult = _mm512_maskz_loadu_ps(m, e->mult + m0 + 16 * h);                     \
        PRE                                                                                       \
        __m128i p[8];                                                                             \
        _Pragma("GCC unroll 7") for (int i = 0; i < QVP_PX; i++) {                                \
            __m512i q = c[i][h];                                                                  \
            BODY                                                                                  \
            p[i] = _mm512_cvtepi32_epi8(q);                                                       \
        }                                                                                         \
        p[7] = p[6];                                                                              \
        qvp_store_transposed(p, r, mh < 16 ? mh : 16, y + 16 * h * ld, ld);                      \
    }

QV_TARGET static void QVP_FN(u8)(long ng, const uint8_t *w, const uint8_t *b, const long *goff,
                                 const uint8_t *pf, int r, int mc, const qe_epi *e, long m0,
                                 uint8_t *y, long ld) {
    QVP_ACCUMULATE
    const qv_epi_consts k = qv_epi_setup(e);
    QVP_FOR_OUTPUTS(, q = qv_epi_int(&k, q, mult);)
}

QV_TARGET static void QVP_FN(fz)(long ng, const uint8_t *w, const uint8_t *b, const long *goff,
                                 const uint8_t *pf, int r, int mc, const qe_epi *e, long m0,
                                 uint8_t *y, const uint8_t *z, long ld) {
    QVP_ACCUMULATE
    const qv_epi_consts k = qv_epi_setup(e);
    QVP_FOR_OUTPUTS(
        const __m512 fadd = e->fadd ? _mm512_maskz_loadu_ps(m, e->fadd + m0 + 16 * h) : k.zero;
        __m128i zt[8];
        if (z) qvp_load_transposed(z + 16 * h * ld, ld, r, mh < 16 ? mh : 16, zt);,
        const __m512i zi = z ? _mm512_cvtepu8_epi32(zt[i]) : _mm512_setzero_si512();
        q = qv_epi_requant(&k, qv_epi_float(&k, q, mult, e->fadd ? &fadd : NULL,
                                            z ? &zi : NULL));)
}

/* v[i] (i < 8): 16 channels' floats of pixel i -> channel l's pixels 0 .. r-1 at y + l ld
 * (l < mc <= 16): two 8 x 8 transposes (unpack, shuffle, 128-bit lane swap). */
__attribute__((always_inline)) QV_TARGET static inline void
qvp_store_transposed_f32(const __m512 v[8], int r, int mc, float *y, long ld) {
    const __mmask8 pm = (__mmask8)((1u << r) - 1);
    for (int half = 0; half < 2; half++) {
        __m256 a[8], t[8], o[8];
        for (int i = 0; i < 8; i++)
            a[i] = half ? _mm512_extractf32x8_ps(v[i], 1) : _mm512_castps512_ps256(v[i]);
        for (int k = 0; k < 4; k++) {
            t[2 * k] = _mm256_unpacklo_ps(a[2 * k], a[2 * k + 1]);
            t[2 * k + 1] = _mm256_unpackhi_ps(a[2 * k], a[2 * k + 1]);
        }
        for (int q = 0; q < 2; q++)   /* pixels 4q .. 4q + 3 */
            for (int k = 0; k < 2; k++) {
                a[4 * q + 2 * k] = _mm256_shuffle_ps(t[4 * q + k], t[4 * q + k + 2], 0x44);
                a[4 * q + 2 * k + 1] = _mm256_shuffle_ps(t[4 * q + k], t[4 * q + k + 2], 0xee);
            }
        /* a[4q + j]: channels j, j + 4 (per 128-bit lane) of pixels 4q .. 4q + 3 */
        for (int j = 0; j < 4; j++) {
            o[j] = _mm256_permute2f128_ps(a[j], a[4 + j], 0x20);
            o[j + 4] = _mm256_permute2f128_ps(a[j], a[4 + j], 0x31);
        }
        for (int l = 0; l < 8; l++)
            if (8 * half + l < mc) _mm256_mask_storeu_ps(y + (8 * half + l) * ld, pm, o[l]);
    }
}

/* The float output (out_f32): the float epilogue's operations up to the requantization
 * (float bias, residual, Relu / Clip, post affine), stored as float. */
QV_TARGET static void QVP_FN(f32)(long ng, const uint8_t *w, const uint8_t *b, const long *goff,
                                  const uint8_t *pf, int r, int mc, const qe_epi *e, long m0,
                                  float *y, const uint8_t *z, long ld) {
    QVP_ACCUMULATE
    const qv_epi_consts k = qv_epi_setup(e);
    const __m512 ps = _mm512_set1_ps(e->ps), pb = _mm512_set1_ps(e->pb);
    for (int h = 0; h < 2; h++) {
        const int mh = mc - 16 * h;
        if (mh <= 0) break;
        const __mmask16 m = qv_lanes16(mh);
        const __m512 mult = _mm512_maskz_loadu_ps(m, e->mult + m0 + 16 * h);
        const __m512 fadd = e->fadd ? _mm512_maskz_loadu_ps(m, e->fadd + m0 + 16 * h) : k.zero;
        __m128i zt[8];
        if (z) qvp_load_transposed(z + 16 * h * ld, ld, r, mh < 16 ? mh : 16, zt);
        __m512 v[8];
        _Pragma("GCC unroll 7") for (int i = 0; i < QVP_PX; i++) {
            const __m512i zi = z ? _mm512_cvtepu8_epi32(zt[i]) : _mm512_setzero_si512();
            v[i] = qv_epi_float(&k, c[i][h], mult, e->fadd ? &fadd : NULL, z ? &zi : NULL);
            if (e->post) v[i] = _mm512_add_ps(_mm512_mul_ps(v[i], ps), pb);
        }
        v[7] = v[6];
        qvp_store_transposed_f32(v, r, mh < 16 ? mh : 16, y + 16 * h * ld, ld);
    }
}
#undef QVP_FOR_OUTPUTS
#undef QVP_INIT
#endif

#undef QVP_ACCUMULATE
#undef QVP_ROW
#undef QVP_FN
#undef QVP_CAT
#undef QVP_CAT_
#ifdef QVP_DP_GIVEN
#undef QVP_DP_GIVEN
#else
#undef QVP_DP
#endif
#ifdef QVP_PREFIX_DEFAULT
#undef QVP_PREFIX
#undef QVP_PREFIX_DEFAULT
#endif
