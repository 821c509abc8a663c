/* qconv_u8s8_3x32__avxvnni: the pixel tile (_qgemm_vnni_pix.h's orientation) for CPUs
 * with AVX-VNNI and no AVX-512: 3 output pixels broadcast x 32 output channels in four
 * ymm, so these CPUs get the implicit GEMM on the shifted image (no im2col block packed
 * per call) that the 6-row tiles only have on AVX-512.
 *
 * Operands as the 7 x 32 tile's: b the shifted nc4 image at output pixel n0 (group g's 4
 * bytes of pixel n0 + i at b + goff[g] + 4 i), w a 32-channel block's weights [ng][32
 * channels][4 bytes] (qconv.pack_blocks32). 12 accumulators c<i><h> (pixel i, channels 8h
 * .. 8h + 7); with the pixel's broadcast that leaves 3 of the 16 ymm for the 4 weight
 * vectors, so one is read as vpdpbusd's memory operand. A tile of r < 3 pixels reads 3
 * (12 bytes; the image's slack covers the 7 x 32 tile's 28).
 *
 * Epilogues: the integer one (u8 out, per-channel constants, no residual) on 8 channels a
 * vector, the operations of qv_tile_out_int in its order (sum + bias, to float, times mult,
 * min with 2^24, round to nearest even, + zero point, clamp), so the bytes are the other
 * rows'; every other epilogue per channel row through qe_span_c, as the 7 x 32 tiles'
 * fallback. Included by qgemm_table.h after _qgemm.h. */
#ifndef EDGENN_QGEMM_AVXVNNI_PIX_H
#define EDGENN_QGEMM_AVXVNNI_PIX_H

#if QE_X86 && QA_HAVE
#define QAP_PX 3     /* pixels per tile */
#define QAP_CH 32    /* channels per tile: the 32-channel weight blocks' */

#define QAP_PIXEL(i)                                                                              \
    {                                                                                             \
        const __m256i s = _mm256_set1_epi32(*(const int32_t *)(px + 4 * (i)));                    \
        c##i##0 = QA_DPBUSD(c##i##0, s, w0);                                                      \
        c##i##1 = QA_DPBUSD(c##i##1, s, w1);                                                      \
        c##i##2 = QA_DPBUSD(c##i##2, s, w2);                                                      \
        c##i##3 = QA_DPBUSD(c##i##3, s, _mm256_loadu_si256((const __m256i *)(w + 96)));          \
    }

/* out [3 pixels][32 channels] = the s32 sums over ng groups */
QA_TARGET static void qap_acc(long ng, const uint8_t *w, const uint8_t *b, const long *goff,
                              int32_t *out) {
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
            c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    for (long g = 0; g < ng; g++, w += 4 * QAP_CH) {
        const uint8_t *px = b + goff[g];
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)w);
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(w + 32));
        const __m256i w2 = _mm256_loadu_si256((const __m256i *)(w + 64));
        QAP_PIXEL(0) QAP_PIXEL(1) QAP_PIXEL(2)
    }
    const __m256i c[QAP_PX][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13},
                                  {c20, c21, c22, c23}};
    for (int i = 0; i < QAP_PX; i++)
        for (int h = 0; h < 4; h++) _mm256_storeu_si256((__m256i *)(out + i * QAP_CH + 8 * h), c[i][h]);
}
#undef QAP_PIXEL

/* The integer epilogue of a tile's sums acc [3][32] in place (channels m0 .. m0 + mc - 1;
 * lanes past mc hold anything): the requantized values, still one per int32. */
QA_TARGET static void qap_requantize(int32_t *acc, int mc, const qe_epi *e, long m0) {
    const __m256 big = _mm256_set1_ps(16777216.f);
    const __m256i zp = _mm256_set1_epi32(e->yzp);
    const __m256i lo = _mm256_set1_epi32(qe_u8(e->lo)), hi = _mm256_set1_epi32(qe_u8(e->hi));
    for (int h = 0; 8 * h < mc; h++) {
        int32_t bias[8] = {0};
        float mult[8] = {0};
        for (int l = 0; l < 8 && 8 * h + l < mc; l++) {
            bias[l] = e->bias[m0 + 8 * h + l];
            mult[l] = e->mult[m0 + 8 * h + l];
        }
        const __m256i bv = _mm256_loadu_si256((const __m256i *)bias);
        const __m256 mv = _mm256_loadu_ps(mult);
        for (int i = 0; i < QAP_PX; i++) {
            __m256i *p = (__m256i *)(acc + i * QAP_CH + 8 * h);
            __m256i a = _mm256_add_epi32(_mm256_loadu_si256(p), bv);
            __m256 f = _mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a), mv), big);
            __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), zp);
            _mm256_storeu_si256(p, _mm256_min_epi32(_mm256_max_epi32(q, lo), hi));
        }
    }
}

/* The row's conv_implicit: output pixels [jb, je) x channels [mb, me) (mb a multiple of
 * 32) in 3 x 32 tiles over the shifted nc4 image, wp the 32-channel blocks' weights. */
static void qap_conv_range(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                           const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, long jb,
                           long je, long mb, long me) {
    (void)ws;
    const long N = p->N, G = p->G, es = e->out_f32 ? 4 : 1;
    const int int_out = !e->float_path && !e->per_col && !e->out_f32 && !z;
    const long block = G * 4 * QAP_CH;   /* a block's weight bytes */
    int32_t acc[QAP_PX * QAP_CH], row[QAP_PX];
    for (long m0 = mb; m0 < me; m0 += QAP_CH) {
        const int mc = me - m0 < QAP_CH ? (int)(me - m0) : QAP_CH;
        const uint8_t *w = wp + (m0 / QAP_CH) * block;
        for (long n0 = jb; n0 < je; n0 += QAP_PX) {
            const int r = je - n0 < QAP_PX ? (int)(je - n0) : QAP_PX;
            qap_acc(G, w, g->xp + 4 * n0, p->goff, acc);
            if (int_out) {
                qap_requantize(acc, mc, e, m0);
                uint8_t *yo = (uint8_t *)y + m0 * N + n0;
                for (int l = 0; l < mc; l++)
                    for (int i = 0; i < r; i++) yo[l * N + i] = (uint8_t)acc[i * QAP_CH + l];
                continue;
            }
            const uint8_t *zo = z ? z + m0 * N + n0 : NULL;
            for (int l = 0; l < mc; l++) {
                for (int i = 0; i < r; i++) row[i] = acc[i * QAP_CH + l];
                qe_span_c(row, r, e, m0 + l, n0, (char *)y + ((m0 + l) * N + n0) * es,
                          z ? zo + l * N : NULL);
            }
        }
    }
}
#endif

#endif
