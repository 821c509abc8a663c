/* Tiled 2-D transposes of float32 matrices, for the Transpose kernel transpose_tiled
 * (elementwise.py): dst[i * ldd + j] = src[j * lds + i] for i < n, j < m.
 *
 * A strided copy (NumPy's, when the output's rows run across the input's) reads one float
 * per cache line on one side; here 8 x 8 tiles go through registers (AVX2: eight 32-byte
 * row loads, the in-register transpose of _simd.h, eight 32-byte stores), so both sides
 * move whole 32-byte pieces. The edges (n or m not a multiple of 8) are copied one float
 * at a time. Every build gives the same bits: a transpose only moves them. */
#ifndef EDGENN_TRANSPOSE_H
#define EDGENN_TRANSPOSE_H

#include "_simd.h"

static void tr2d_scalar(const float *src, long lds, float *dst, long ldd, long n, long m)
{
    for (long j = 0; j < m; j++)
        for (long i = 0; i < n; i++)
            dst[i * ldd + j] = src[j * lds + i];
}

#if defined(__x86_64__) || defined(EDGENN_SIMDE)
EDGENN_AVX2 static void tr2d_avx2(const float *src, long lds, float *dst, long ldd, long n, long m)
{
    long j = 0;
    for (; j + 8 <= m; j += 8) {       /* 8 source rows at a time, swept along them */
        long i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 r[8];
            for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(src + (j + k) * lds + i);
            simd_transpose8_ps(r);
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(dst + (i + k) * ldd + j, r[k]);
        }
        for (; i < n; i++)
            for (int k = 0; k < 8; k++) dst[i * ldd + j + k] = src[(j + k) * lds + i];
    }
    tr2d_scalar(src + j * lds, lds, dst + j, ldd, n, m - j);
}
#endif

#include "_neon.h"
#if EDGENN_NEON
/* 4 x 4 tiles in q registers: TRN1 / TRN2 of 32-bit lanes, then of 64-bit halves */
static void tr2d_neon(const float *src, long lds, float *dst, long ldd, long n, long m)
{
    long j = 0;
    for (; j + 4 <= m; j += 4) {       /* 4 source rows at a time, swept along them */
        long i = 0;
        for (; i + 4 <= n; i += 4) {
            const float32x4_t r0 = vld1q_f32(src + j * lds + i);
            const float32x4_t r1 = vld1q_f32(src + (j + 1) * lds + i);
            const float32x4_t r2 = vld1q_f32(src + (j + 2) * lds + i);
            const float32x4_t r3 = vld1q_f32(src + (j + 3) * lds + i);
            const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1);
            const float32x4_t t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
#define TR_D(v) vreinterpretq_f64_f32(v)
            vst1q_f32(dst + i * ldd + j, vreinterpretq_f32_f64(vtrn1q_f64(TR_D(t0), TR_D(t2))));
            vst1q_f32(dst + (i + 1) * ldd + j,
                      vreinterpretq_f32_f64(vtrn1q_f64(TR_D(t1), TR_D(t3))));
            vst1q_f32(dst + (i + 2) * ldd + j,
                      vreinterpretq_f32_f64(vtrn2q_f64(TR_D(t0), TR_D(t2))));
            vst1q_f32(dst + (i + 3) * ldd + j,
                      vreinterpretq_f32_f64(vtrn2q_f64(TR_D(t1), TR_D(t3))));
#undef TR_D
        }
        for (; i < n; i++)
            for (int k = 0; k < 4; k++) dst[i * ldd + j + k] = src[(j + k) * lds + i];
    }
    tr2d_scalar(src + j * lds, lds, dst + j, ldd, n, m - j);
}
#endif

/* a 2-D tile loop: tr2d_scalar, or a row's vector one (the caller checks the CPU) */
typedef void (*tr2d_fn)(const float *src, long lds, float *dst, long ldd, long n, long m);

#define TR_MAX_RANK 8

/* y = x transposed, both contiguous: x of shape `shape` (rank r <= TR_MAX_RANK), y of shape
 * shape[perm[k]]; the source's last axis is output axis b (perm[b] == r - 1), the output's
 * last axis is not it (b < r - 1). Every other output axis is an outer loop of 2-D
 * transposes (i along output axis b, j along the output's last axis). */
static void tr_run(tr2d_fn tile, const float *x, float *y, int r, const long *shape,
                   const int *perm)
{
    long ss[TR_MAX_RANK], ds[TR_MAX_RANK], o[TR_MAX_RANK], idx[TR_MAX_RANK];
    int b = 0;
    ss[r - 1] = 1;
    for (int a = r - 2; a >= 0; a--) ss[a] = ss[a + 1] * shape[a + 1];
    for (int k = 0; k < r; k++) {
        o[k] = shape[perm[k]];
        if (perm[k] == r - 1) b = k;
        idx[k] = 0;
    }
    ds[r - 1] = 1;
    for (int k = r - 2; k >= 0; k--) ds[k] = ds[k + 1] * o[k + 1];
    for (int k = 0; k < r; k++)
        if (o[k] == 0) return;
    const long lds = ss[perm[r - 1]], ldd = ds[b], n = o[b], m = o[r - 1];
    for (;;) {
        long so = 0, doff = 0;
        for (int k = 0; k < r; k++) {
            so += idx[k] * ss[perm[k]];
            doff += idx[k] * ds[k];
        }
        tile(x + so, lds, y + doff, ldd, n, m);
        int k = r - 2;                      /* the next outer index (odometer) */
        for (; k >= 0; k--) {
            if (k == b) continue;
            if (++idx[k] < o[k]) break;
            idx[k] = 0;
        }
        if (k < 0) return;
    }
}

#endif
