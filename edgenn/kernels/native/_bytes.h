/* Byte helpers shared by the int8 kernels (_qgemm.h) and the byte pools (_pool_bytes.h). */
#ifndef EDGENN_BYTES_H
#define EDGENN_BYTES_H

#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* d[0 .. n) = s[0], s[2], ..., reading only s[0 .. 2 (n - 1)]: 16 outputs a step by SSE2
 * mask-and-pack of 32 bytes, and the end by one more step ending at the last output
 * (overlapping: the same bytes again), which takes the odd bytes of the 32 starting one
 * byte earlier so that it reads nothing past s[2 (n - 1)]. */
static inline void edgenn_even_bytes(uint8_t *d, const uint8_t *s, long n) {
    long t = 0;
#if defined(__SSE2__)
    if (n >= 17) {
        const __m128i lo = _mm_set1_epi16(0xff);
        for (; t + 16 <= n && 2 * t + 32 <= 2 * n - 1; t += 16) {
            __m128i a = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + 2 * t)), lo);
            __m128i b = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + 2 * t + 16)), lo);
            _mm_storeu_si128((__m128i *)(d + t), _mm_packus_epi16(a, b));
        }
        if (t < n) {   /* outputs n - 16 .. n - 1: the odd bytes of s[2 (n - 16) - 1 ..] */
            const uint8_t *p = s + 2 * (n - 16) - 1;
            __m128i a = _mm_srli_epi16(_mm_loadu_si128((const __m128i *)p), 8);
            __m128i b = _mm_srli_epi16(_mm_loadu_si128((const __m128i *)(p + 16)), 8);
            _mm_storeu_si128((__m128i *)(d + n - 16), _mm_packus_epi16(a, b));
            return;
        }
    }
#endif
    for (; t < n; t++) d[t] = s[2 * t];
}

#endif
