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
 * the reference's result. (Per output, a kw-cell loop at stride sw was ~8x slower: the
 * strided reads kept the compiler from vectorizing it.)
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
