/* The AVX-512 VNNI conv micro-kernels of one tile shape, included once per shape by
 * _qgemm_vnni.h with QVC_ROWS (6, 4 or 2 weight rows: the full A panel, or the tail of
 * M = 6q + 4 / 6q + 2 channels, 64 and 128 among them, without the dead rows' products)
 * and QVC_NV (2 or 1 zmm of 16 pixels: 32 columns, or the last <= 16 of a block; 0: one
 * panel of 8 pixels summed in ymm, a block's last <= 8) defined.
 *
 * A: one 6-row weight panel, [ng][6 rows][4 bytes] (rows past QVC_ROWS not read);
 * B: the im2col block's panel pairs (qg_interleave's pairs layout): pair h (columns 16h ..
 * 16h + 15) at b + 2h * bps, [ng][64 bytes]; for NV = 2 a missing second pair (npan <= 2)
 * re-reads the first, its sums dropped.
 *   QVC_FN(acc): the s32 sums into out's [4 blocks][6 rows][8 columns] (rows < QVC_ROWS);
 *   QVC_FN(u8):  the integer epilogue in registers (qv_int_out's epilogues);
 *   QVC_FN(fz):  the float epilogue in registers (qv_float_out's: residual, float bias,
 *                Relu / Clip), qe_vec8's operations in its order.
 * u8 / fz: mr <= QVC_ROWS rows and nvalid <= 16 * QVC_NV (NV 0: 8) columns of y from row
 * m0's first output (row stride ld), z the residual in y's layout or NULL.
 * NV = 0 reads the first panel of b's pair (the first 32 of each group's 64 bytes), so a
 * block's last <= 8 pixels (a 7x7 plane's 49th, 14x14's last 4) take 8 lanes of sums, not
 * 16 or 32 (on small planes that last block is a visible share of the layer).
 * QVC_IMPLICIT 1 (the implicit-GEMM instances, prefix qvci): b is the image itself, laid
 * out with 4 channels interleaved per pixel (qg_conv_fill_nc4), and group g's 16 pixels
 * are the 64 bytes at b + goff[g] (the 4 channels of one tap): no im2col block is packed,
 * the argument after b is goff instead of bps.
 * Optional: QVC_DP(c, v, s) / QVC_DP8 the zmm / ymm dot-product step (default vpdpbusd; the emulated test build
 * instantiates a deliberately broken one) and QVC_PREFIX the functions' prefix (qvc).
 * QVC_ROWS and QVC_NV are undefined at the end, so each instance is two defines and an
 * include. */

#ifdef QVC_DP
#define QVC_DP_GIVEN 1
#else
#define QVC_DP(c, v, s) _mm512_dpbusd_epi32(c, v, s)
#endif
#ifdef QVC_DP8                      /* the ymm step of NV = 0 */
#define QVC_DP8_GIVEN 1
#else
#define QVC_DP8(c, v, s) _mm256_dpbusd_epi32(c, v, s)
#endif
#ifndef QVC_PREFIX
#define QVC_PREFIX qvc
#define QVC_PREFIX_DEFAULT 1
#endif
#define QVC_CAT_(a, b, c, d) a##_##b##x##c##_##d
#define QVC_CAT(a, b, c, d) QVC_CAT_(a, b, c, d)
#define QVC_FN(kind) QVC_CAT(QVC_PREFIX, QVC_ROWS, QVC_NV, kind)

/* Sums the ng groups into named accumulators c<row><zmm> (the rows and zmm past the
 * shape are never touched; an array indexed in the loop made GCC shuffle the 12 registers
 * every iteration), then declares c[6][2] over them for the epilogues. */
#define QVC_NVL (QVC_NV ? QVC_NV : 1)   /* zmm of sums per row in the epilogues */
#if QVC_IMPLICIT
#define QVC_P1 const long d1 = npan > 2 ? 64 : 0;
#define QVC_BARG const long *goff
#define QVC_B0(g) (b + goff[g])          /* group g's first 16 pixels */
#define QVC_B1(g) (b + goff[g] + d1)     /* and the next 16 (the first again: npan <= 2) */
#else
#define QVC_P1 const uint8_t *p1 = npan > 2 ? b + 2 * bps : b; (void)p1;
#define QVC_BARG long bps
#define QVC_B0(g) (b + 64 * (g))
#define QVC_B1(g) (p1 + 64 * (g))
#endif
/* The next 6-row panel's same bytes into L2 while this one is summed: a panel is read
 * first from memory where the weights outgrow the caches (ResNet-18's 7x7 layers, 2.4 MB
 * each), and the stream of 24 bytes per group is too slow for the hardware prefetchers. */
#define QVC_PREFETCH_NEXT_PANEL                                                                   \
    if ((g & 7) == 0) {          /* 8 groups: 192 bytes, 3 lines */                               \
        const char *pf_ = (const char *)(a + ng * 4 * QV_MR);                                     \
        _mm_prefetch(pf_, _MM_HINT_T1);                                                           \
        _mm_prefetch(pf_ + 64, _MM_HINT_T1);                                                      \
        _mm_prefetch(pf_ + 128, _MM_HINT_T1);                                                     \
    }
#if QVC_NV == 0
#define QVC_ROW(R)                                                                                \
    s = _mm256_set1_epi32(*(const int32_t *)(a + 4 * R));                                         \
    h##R = QVC_DP8(h##R, v0, s);
#define QVC_ACCUMULATE                                                                            \
    __m256i h0 = _mm512_castsi512_si256(QVC_INIT(0)), h1 = _mm512_castsi512_si256(QVC_INIT(1)),   \
            h2 = _mm512_castsi512_si256(QVC_INIT(2)), h3 = _mm512_castsi512_si256(QVC_INIT(3)),   \
            h4 = _mm512_castsi512_si256(QVC_INIT(4)), h5 = _mm512_castsi512_si256(QVC_INIT(5));   \
    {                                                                                             \
        (void)npan;                                                                               \
        for (long g = 0; g < ng; g++, a += 4 * QV_MR) {                                           \
            QVC_PREFETCH_NEXT_PANEL                                                               \
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)QVC_B0(g));                    \
            __m256i s;                                                                            \
            QVC_ROW(0) QVC_ROW(1)                                                                 \
            if (QVC_ROWS > 2) { QVC_ROW(2) QVC_ROW(3) }                                           \
            if (QVC_ROWS > 4) { QVC_ROW(4) QVC_ROW(5) }                                           \
        }                                                                                         \
    }                                                                                             \
    const __m512i zero_ = _mm512_setzero_si512();                                                 \
    const __m512i c[QV_MR][2] = {{_mm512_inserti64x4(zero_, h0, 0), zero_},                       \
                                 {_mm512_inserti64x4(zero_, h1, 0), zero_},                       \
                                 {_mm512_inserti64x4(zero_, h2, 0), zero_},                       \
                                 {_mm512_inserti64x4(zero_, h3, 0), zero_},                       \
                                 {_mm512_inserti64x4(zero_, h4, 0), zero_},                       \
                                 {_mm512_inserti64x4(zero_, h5, 0), zero_}};
#else
#define QVC_ROW(R)                                                                                \
    s = _mm512_set1_epi32(*(const int32_t *)(a + 4 * R));                                         \
    c##R##0 = QVC_DP(c##R##0, v0, s);                                                            \
    if (QVC_NV > 1) c##R##1 = QVC_DP(c##R##1, v1, s);
#define QVC_ACCUMULATE                                                                            \
    __m512i c00 = QVC_INIT(0), c01 = c00, c10 = QVC_INIT(1), c11 = c10, c20 = QVC_INIT(2),        \
            c21 = c20, c30 = QVC_INIT(3), c31 = c30, c40 = QVC_INIT(4), c41 = c40,                \
            c50 = QVC_INIT(5), c51 = c50;                                                         \
    {                                                                                             \
        QVC_P1                                                                                    \
        for (long g = 0; g < ng; g++, a += 4 * QV_MR) {                                           \
            QVC_PREFETCH_NEXT_PANEL                                                               \
            const __m512i v0 = _mm512_loadu_si512(QVC_B0(g));                                     \
            const __m512i v1 = QVC_NV > 1 ? _mm512_loadu_si512(QVC_B1(g)) : v0;                   \
            __m512i s;                                                                            \
            QVC_ROW(0) QVC_ROW(1)                                                                 \
            if (QVC_ROWS > 2) { QVC_ROW(2) QVC_ROW(3) }                                           \
            if (QVC_ROWS > 4) { QVC_ROW(4) QVC_ROW(5) }                                           \
        }                                                                                         \
    }                                                                                             \
    const __m512i c[QV_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},                              \
                                 {c30, c31}, {c40, c41}, {c50, c51}};

#endif

/* The accumulators' start: 0 (the bare sums), or (the epilogues) row R's bias, so the
 * sums come out with it added (the same int32 wrap-around sum, one add fewer per zmm:
 * the epilogue is the bound of short-K layers such as MobileNetV2's K = 16 expansion). */
#define QVC_INIT(R) _mm512_setzero_si512()
QV_TARGET static void QVC_FN(acc)(long ng, const uint8_t *a, const uint8_t *b, QVC_BARG,
                                  int npan, int32_t *out) {
    QVC_ACCUMULATE
    for (int r = 0; r < QVC_ROWS; r++)
        for (int h = 0; h < QVC_NVL; h++) {
            _mm256_storeu_si256((__m256i *)(out + ((2 * h) * QV_MR + r) * 8),
                                _mm512_castsi512_si256(c[r][h]));
            _mm256_storeu_si256((__m256i *)(out + ((2 * h + 1) * QV_MR + r) * 8),
                                _mm512_extracti64x4_epi64(c[r][h], 1));
        }
}

#undef QVC_INIT

#if defined(EDGENN_QEPI_H) && QE_X86   /* the native build (SIMDe lacks masked byte loads) */
#define QVC_INIT(R) \
    ((R) < mr ? _mm512_set1_epi32(e->bias[m0 + (R)]) : _mm512_setzero_si512())
/* For each zmm h of valid columns (lane mask m) and row r < mr: q = sum + bias (the
 * accumulators started at it), BODY (which leaves the u8 value in q's lanes), stored at
 * y's row r. */
#define QVC_FOR_OUTPUTS(BODY)                                                                     \
    for (int h = 0; h < QVC_NVL; h++) {                                                            \
        const __mmask16 m = qv_lanes16(nvalid - 16 * h);                                              \
        if (!m) break;                                                                            \
        _Pragma("GCC unroll 6") for (int r = 0; r < QVC_ROWS; r++) {                              \
            if (r >= mr) break;                                                                   \
            __m512i q = c[r][h];                                                                  \
            BODY                                                                                  \
            _mm512_mask_cvtepi32_storeu_epi8(y + r * ld + 16 * h, m, q);                          \
        }                                                                                         \
    }

QV_TARGET static void QVC_FN(u8)(long ng, const uint8_t *a, const uint8_t *b, QVC_BARG,
                                 int npan, int mr, long nvalid, const qe_epi *e, long m0,
                                 uint8_t *y, long ld) {
    QVC_ACCUMULATE
    const qv_epi_consts k = qv_epi_setup(e);
    QVC_FOR_OUTPUTS(q = qv_epi_int(&k, q, _mm512_set1_ps(e->mult[m0 + r]));)
}

QV_TARGET static void QVC_FN(fz)(long ng, const uint8_t *a, const uint8_t *b, QVC_BARG,
                                 int npan, int mr, long nvalid, const qe_epi *e, long m0,
                                 uint8_t *y, const uint8_t *z, long ld) {
    QVC_ACCUMULATE
    const qv_epi_consts k = qv_epi_setup(e);
    QVC_FOR_OUTPUTS(
        const __m512 fadd = e->fadd ? _mm512_set1_ps(e->fadd[m0 + r]) : k.zero;
        const __m512i zi = z ? _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, z + r * ld + 16 * h))
                             : _mm512_setzero_si512();
        q = qv_epi_requant(&k, qv_epi_float(&k, q, _mm512_set1_ps(e->mult[m0 + r]),
                                            e->fadd ? &fadd : NULL, z ? &zi : NULL));)
}
#undef QVC_INIT
#endif

#undef QVC_ACCUMULATE
#undef QVC_PREFETCH_NEXT_PANEL
#undef QVC_ROW
#undef QVC_FOR_OUTPUTS
#undef QVC_FN
#undef QVC_CAT
#undef QVC_CAT_
#ifdef QVC_DP_GIVEN
#undef QVC_DP_GIVEN
#else
#undef QVC_DP
#endif
#ifdef QVC_DP8_GIVEN
#undef QVC_DP8_GIVEN
#else
#undef QVC_DP8
#endif
#ifdef QVC_PREFIX_DEFAULT
#undef QVC_PREFIX
#undef QVC_PREFIX_DEFAULT
#endif
#undef QVC_ROWS
#undef QVC_NV
#undef QVC_NVL
#undef QVC_BARG
#undef QVC_B0
#undef QVC_B1
#undef QVC_P1
