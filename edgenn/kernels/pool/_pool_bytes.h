/* MaxPool on quantized planes (uint8 / int8), any window: x (P, H, W) -> y (P, OH, OW).
 *
 * Output row oy reads input rows iy = oy*sh - ph + i*dh (i < kh) and columns ix = ox*sw -
 * pw + j*dw (j < kw); cells outside the image are ignored (ONNX pads MaxPool with -inf).
 * Per output row: the in-image rows among its kh are reduced elementwise into row[pw ..
 * pw + W) (contiguous: the compiler vectorizes it, 16 / 32 bytes per instruction), the row's
 * left and right margins hold the type's minimum, below every value; then the max of the kw
 * cells starting at every column, hm[q] = max_j row[q + j dw] (contiguous again), and the
 * outputs are hm[ox sw] (stride 2: the even bytes, edgenn_even_bytes). A
 * window with no in-image cell gives the minimum. Max is exact and order-free, so this is
 * the reference's result. (Not a kw-cell loop per output at stride sw: its strided reads
 * keep the compiler from vectorizing it.)
 * row: scratch of maxpool_bytes_row(...) elements: the padded row (pw + W + the right
 * margin the last window reaches), then hm.
 */
#ifndef EDGENN_POOL_BYTES_H
#define EDGENN_POOL_BYTES_H
#include <stdint.h>
#include <string.h>

#include "_bytes.h"

/* Elements of the padded row: pw + W + the right margin the last window reaches. */
static long maxpool_bytes_padded(long W, long OW, int kw, int sw, int pw, int dw) {
    long right = (OW - 1) * sw + (long)(kw - 1) * dw + 1 - pw - W;
    return pw + W + (right > 0 ? right : 0);
}

/* Elements of row scratch the kernels need: the padded row, then hm ((OW - 1) sw + 1
 * window maxima). */
static long maxpool_bytes_row(long W, long OW, int kw, int sw, int pw, int dw) {
    return maxpool_bytes_padded(W, OW, kw, sw, pw, dw) + (OW - 1) * sw + 1;
}

/* The 3-wide, stride-2 window maxima of a padded uint8 row (ResNet's 3x3 / 2 stem pool):
 * o[ox] = max(row[2 ox], row[2 ox + 1], row[2 ox + 2]) for ox < OW (OW >= 16), 16 outputs a
 * step: the even and odd bytes of 32 at 2 ox, and the even bytes of 32 at 2 ox + 2, by
 * SSE2 mask / shift and pack; the end by one more step ending at the last output. Reads
 * row[0 .. 2 OW + 2), one byte past the last window (the scratch's hm follows the row; the
 * byte lands in a dropped odd lane). One pass instead of two max passes, a copy and a
 * gather. */
static inline int pb_u8_h3s2(uint8_t *o, const uint8_t *row, long OW) {
#if defined(__SSE2__)
    if (OW < 16) return 0;
    const __m128i lo = _mm_set1_epi16(0xff);
    for (long ox = 0;; ox += 16) {
        if (ox > OW - 16) ox = OW - 16;
        const uint8_t *p = row + 2 * ox;
        __m128i a0 = _mm_loadu_si128((const __m128i *)p);
        __m128i a1 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i c0 = _mm_loadu_si128((const __m128i *)(p + 2));
        __m128i c1 = _mm_loadu_si128((const __m128i *)(p + 18));
        __m128i even = _mm_packus_epi16(_mm_and_si128(a0, lo), _mm_and_si128(a1, lo));
        __m128i odd = _mm_packus_epi16(_mm_srli_epi16(a0, 8), _mm_srli_epi16(a1, 8));
        __m128i next = _mm_packus_epi16(_mm_and_si128(c0, lo), _mm_and_si128(c1, lo));
        _mm_storeu_si128((__m128i *)(o + ox), _mm_max_epu8(_mm_max_epu8(even, odd), next));
        if (ox == OW - 16) return 1;
    }
#else
    (void)o; (void)row; (void)OW;
    return 0;
#endif
}

#define PB_KERNEL(NAME, T, LOW)                                                              \
static void NAME(const T *x, T *y, long P, long H, long W, long OH, long OW, int kh, int kw, \
                 int sh, int sw, int ph, int pw, int dh, int dw, T *row)                     \
{                                                                                            \
    const long right = maxpool_bytes_padded(W, OW, kw, sw, pw, dw) - pw - W;                \
    T *hm = row + pw + W + right;                                                            \
    const long nq = (OW - 1) * sw + 1;                                                       \
    for (long q = 0; q < pw; q++) row[q] = LOW;                                              \
    for (long q = 0; q < right; q++) row[pw + W + q] = LOW;                                  \
    T *mid = row + pw;                                                                       \
    for (long p = 0; p < P; p++) {                                                           \
        const T *plane = x + p * H * W;                                                      \
        for (long oy = 0; oy < OH; oy++) {                                                   \
            int first = 1;                                                                   \
            for (int i = 0; i < kh; i++) {                                                   \
                long iy = oy * sh - ph + (long)i * dh;                                       \
                if (iy < 0 || iy >= H) continue;                                             \
                const T *r = plane + iy * W;                                                 \
                if (first) { memcpy(mid, r, (size_t)W * sizeof(T)); first = 0; continue; }   \
                for (long q = 0; q < W; q++) mid[q] = r[q] > mid[q] ? r[q] : mid[q];        \
            }                                                                                \
            T *o = y + (p * OH + oy) * OW;                                                   \
            if (first) { for (long q = 0; q < OW; q++) o[q] = LOW; continue; }               \
            if (LOW == 0 && kw == 3 && sw == 2 && dw == 1 &&                                 \
                pb_u8_h3s2((uint8_t *)o, (const uint8_t *)row, OW)) continue;                \
            memcpy(hm, row, (size_t)nq * sizeof(T));                                         \
            for (int j = 1; j < kw; j++) {                                                   \
                const T *c = row + (long)j * dw;                                             \
                for (long q = 0; q < nq; q++) hm[q] = c[q] > hm[q] ? c[q] : hm[q];          \
            }                                                                                \
            if (sw == 1) memcpy(o, hm, (size_t)OW * sizeof(T));                              \
            else if (sw == 2) edgenn_even_bytes((uint8_t *)o, (const uint8_t *)hm, OW);      \
            else for (long ox = 0; ox < OW; ox++) o[ox] = hm[ox * sw];                       \
        }                                                                                    \
    }                                                                                        \
}

PB_KERNEL(maxpool_u8, uint8_t, 0)
PB_KERNEL(maxpool_s8, int8_t, -128)


#endif
