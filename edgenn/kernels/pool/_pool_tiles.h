/* MaxPool over non-overlapping windows (kernel == stride, no padding, no dilation: the
 * 2x2 / 2x1 / 4x1 pools of CRNN-style recognizers and VGG-style backbones), straight on
 * NCHW planes: no interleaving into c8 planes as _dwc8.h's general loops need.
 *
 * x (P, H, W) -> y (P, OH, OW), OH = H / kh, OW = W / kw (floor; trailing rows / columns
 * that fill no window are not read). Per output row: the kh input rows are reduced
 * elementwise (vertical max), then each kw adjacent columns (kw = 2: even / odd lanes
 * deinterleaved by one shuffle and one lane permute per 8 outputs). Max of finite values
 * is exact, so any order of the taps gives the reference's result.
 *
 * The rows of pool_rows (below): plain C, AVX2 (8 lanes) and ARM64 NEON (4 lanes; LD2
 * deinterleaves kw = 2; max as x86's, _neon.h).
 */
#ifndef EDGENN_POOL_TILES_H
#define EDGENN_POOL_TILES_H
#include "_cpu.h"
#include "_simd.h"

static inline float tile_max1(float a, float b) { return a > b ? a : b; }

static void maxpool_tiles_generic(const float *x, float *y, long P, long H, long W,
                                  int kh, int kw, float *row)
{
    long OH = H / kh, OW = W / kw, span = OW * kw;
    for (long p = 0; p < P; p++)
        for (long oh = 0; oh < OH; oh++) {
            const float *r = x + (p * H + oh * kh) * W;
            for (long j = 0; j < span; j++) row[j] = r[j];
            for (int i = 1; i < kh; i++)
                for (long j = 0; j < span; j++) row[j] = tile_max1(row[j], r[i * W + j]);
            float *o = y + (p * OH + oh) * OW;
            for (long j = 0; j < OW; j++) {
                float m = row[j * kw];
                for (int t = 1; t < kw; t++) m = tile_max1(m, row[j * kw + t]);
                o[j] = m;
            }
        }
}

#if defined(__x86_64__) && !defined(EDGENN_SIMDE)
/* kw = 1: 8 outputs, the max of kh rows */
EDGENN_AVX2 static inline void maxpool_cols1_avx2(const float *r, long W, int kh, float *o)
{
    __m256 m = _mm256_loadu_ps(r);
    for (int i = 1; i < kh; i++) m = _mm256_max_ps(m, _mm256_loadu_ps(r + i * W));
    _mm256_storeu_ps(o, m);
}

/* kw = 2: 16 inputs -> 8 outputs */
EDGENN_AVX2 static inline void maxpool_cols2_avx2(const float *r, long W, int kh, float *o)
{
    __m256 a = _mm256_loadu_ps(r), b = _mm256_loadu_ps(r + 8);
    for (int i = 1; i < kh; i++) {
        a = _mm256_max_ps(a, _mm256_loadu_ps(r + i * W));
        b = _mm256_max_ps(b, _mm256_loadu_ps(r + i * W + 8));
    }
    __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    __m256 m = _mm256_max_ps(even, odd);  /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    m = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), 0xD8));
    _mm256_storeu_ps(o, m);
}

#define PT_FN maxpool_tiles_avx2
#define PT_ATTR EDGENN_AVX2
#define PT_L 8
#define PT_COLS1 maxpool_cols1_avx2
#define PT_COLS2 maxpool_cols2_avx2
#include "_pool_tiles_vec.h"
#endif

/* GlobalAveragePool's means: y[r] = float(((a0 + a1) + (a2 + a3)) / S) of each row of
 * x (R, S), in double: lane j sums x[r, 4i + j], the tail past S - S % 4 into lane 0. The
 * AVX2 build holds the four lanes in one vector (a float -> double conversion and one add
 * per four values, the same sums in the same order, so the same bits). */
static void global_mean_rows_generic(const float *x, float *y, long R, long S)
{
    const long S4 = S - S % 4;
    for (long r = 0; r < R; r++, x += S) {
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (long i = 0; i < S4; i += 4) {
            a0 += x[i];
            a1 += x[i + 1];
            a2 += x[i + 2];
            a3 += x[i + 3];
        }
        for (long i = S4; i < S; i++)
            a0 += x[i];
        y[r] = (float)(((a0 + a1) + (a2 + a3)) / (double)S);
    }
}

#if defined(__x86_64__) && !defined(EDGENN_SIMDE)
EDGENN_AVX2 static void global_mean_rows_avx2(const float *x, float *y, long R, long S)
{
    const long S4 = S - S % 4;
    for (long r = 0; r < R; r++, x += S) {
        __m256d a = _mm256_setzero_pd();
        for (long i = 0; i < S4; i += 4)
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
        double l[4];
        _mm256_storeu_pd(l, a);
        for (long i = S4; i < S; i++)
            l[0] += x[i];
        y[r] = (float)(((l[0] + l[1]) + (l[2] + l[3])) / (double)S);
    }
}
#endif

#include "_neon.h"
#if EDGENN_NEON
/* kw = 1: 4 outputs, the max of kh rows */
static inline void maxpool_cols1_neon(const float *r, long W, int kh, float *o)
{
    float32x4_t m = vld1q_f32(r);
    for (int i = 1; i < kh; i++) m = edgenn_vmaxq(m, vld1q_f32(r + i * W));
    vst1q_f32(o, m);
}

/* kw = 2: 8 inputs -> 4 outputs, LD2 splitting even and odd columns */
static inline void maxpool_cols2_neon(const float *r, long W, int kh, float *o)
{
    float32x4x2_t a = vld2q_f32(r);
    for (int i = 1; i < kh; i++) {
        const float32x4x2_t b = vld2q_f32(r + i * W);
        a.val[0] = edgenn_vmaxq(a.val[0], b.val[0]);
        a.val[1] = edgenn_vmaxq(a.val[1], b.val[1]);
    }
    vst1q_f32(o, edgenn_vmaxq(a.val[0], a.val[1]));
}

#define PT_FN maxpool_tiles_neon
#define PT_ATTR
#define PT_L 4
#define PT_COLS1 maxpool_cols1_neon
#define PT_COLS2 maxpool_cols2_neon
#include "_pool_tiles_vec.h"

/* the portable loop's four double lanes in two float64x2 vectors: the same sums */
static void global_mean_rows_neon(const float *x, float *y, long R, long S)
{
    const long S4 = S - S % 4;
    for (long r = 0; r < R; r++, x += S) {
        float64x2_t a01 = vdupq_n_f64(0.0), a23 = vdupq_n_f64(0.0);
        for (long i = 0; i < S4; i += 4) {
            const float32x4_t v = vld1q_f32(x + i);
            a01 = vaddq_f64(a01, vcvt_f64_f32(vget_low_f32(v)));
            a23 = vaddq_f64(a23, vcvt_high_f64_f32(v));
        }
        double l[4];
        vst1q_f64(l, a01);
        vst1q_f64(l + 2, a23);
        for (long i = S4; i < S; i++)
            l[0] += x[i];
        y[r] = (float)(((l[0] + l[1]) + (l[2] + l[3])) / (double)S);
    }
}
#endif

/* The NCHW pooling loops' table: one row per build, best last. */
typedef struct {
    const char *name;        /* pool_nchw__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    void (*maxpool_tiles)(const float *x, float *y, long P, long H, long W, int kh, int kw,
                          float *row);
    void (*global_mean_rows)(const float *x, float *y, long R, long S);
} pool_row;

static const pool_row pool_rows[] = {
    {"pool_nchw__scalar", EDGENN_ISA_SCALAR, maxpool_tiles_generic, global_mean_rows_generic},
#if defined(__x86_64__) && !defined(EDGENN_SIMDE)
    {"pool_nchw__avx2", EDGENN_ISA_AVX2, maxpool_tiles_avx2, global_mean_rows_avx2},
#endif
#if EDGENN_NEON
    {"pool_nchw__neon", EDGENN_ISA_NEON, maxpool_tiles_neon, global_mean_rows_neon},
#endif
};
#define POOL_ROW_COUNT ((int)(sizeof pool_rows / sizeof pool_rows[0]))

#endif
