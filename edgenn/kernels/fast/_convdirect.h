/* Direct 2-D convolution for few input channels (a network's first layer: RGB or gray
 * images into 16-64 channels), for _convdirect.pyx.
 *
 * With C*KH*KW = 27 the GEMM form (implicit im2col, sgemm.h) spends more time packing B
 * than multiplying. Here nothing is packed per call: output pixels are the vector lanes,
 * and a register tile of MB output channels x NV vectors of pixels (AVX-512F: 12 x 32
 * or 8 x 48, AVX2: 6 x 16) is accumulated over the taps (c, i, j) with one input load
 * per vector and MB broadcast weights per tap: the FMA ports, not packing or loads,
 * bound it.
 *
 * xp: the image zero-padded, (C, Hp, SW, Wq): each padded row split into its SW column
 * phases (stride 2: even and odd columns), so tap j of output pixel o reads phase j % SW
 * at o + j / SW and every load is a plain unit-stride vector load, whatever the stride.
 * Wq >= ceil(OW / tile) * tile + (KW - 1) / SW, so full vector loads past the last
 * output stay inside the phase row; wp: the weights packed per
 * block of MB channels, [block][tap = (c, i, j)][MB] (zero rows past M); y (M, OH, OW).
 * Epilogue in registers: + bias, then none / Relu / Clip(lo, hi); a ragged last tile is
 * stored through a spill, a ragged channel block stores its first M - m0 rows.
 * Per output the sum runs over the taps in (c, i, j) order, one FMA each, on every tier.
 */
#ifndef EDGENN_CONVDIRECT_H
#define EDGENN_CONVDIRECT_H
#include <string.h>
#include "_simd.h"

#ifdef EDGENN_SIMDE
#define CD_EMULATED 1
#else
#define CD_EMULATED 0
#endif

enum { CD_ACT_NONE = 0, CD_ACT_RELU = 1, CD_ACT_CLIP = 2 };

typedef struct {
    const float *xp, *wp, *bias;
    float *y;
    long C, Hp, Wq, KH, KW, SH, SW, M, OH, OW;   /* Wq: floats per column phase of a row */
    int act;
    float lo, hi;
} cd_args;

/* channels per register tile (the weight packing's MB) and pixels per tile, per tier:
 * 0 portable 8 x 8, 1 AVX2 6 x 16, 2 AVX-512F 12 x 32, 3 AVX-512F 8 x 48 */
static inline long cd_mb(int tier) { return tier == 2 ? 12 : tier == 1 ? 6 : 8; }
static inline long cd_px(int tier) { return tier == 3 ? 48 : tier == 2 ? 32 : tier == 1 ? 16 : 8; }

static inline float cd_act1(float v, const cd_args *a)
{
    if (a->act == CD_ACT_RELU) return v > 0.f ? v : 0.f;
    if (a->act == CD_ACT_CLIP) return v < a->lo ? a->lo : (v > a->hi ? a->hi : v);
    return v;
}

/* portable: 8 channels x 8 pixels, constant-bounded loops the compiler can vectorize */
static void cd_run_scalar(const cd_args *a)
{
    enum { MB = 8, PX = 8 };
    const long T = a->C * a->KH * a->KW;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = 0; oh < a->OH; oh++)
            for (long ow0 = 0; ow0 < a->OW; ow0 += PX) {
                float acc[MB][PX];
                memset(acc, 0, sizeof(acc));
                const float *w = wb;
                for (long c = 0; c < a->C; c++)
                    for (long i = 0; i < a->KH; i++) {
                        const float *row = a->xp + (c * a->Hp + oh * a->SH + i) * a->SW * a->Wq
                                           + ow0;
                        for (long j = 0; j < a->KW; j++, w += MB) {
                            const float *src = row + (j % a->SW) * a->Wq + j / a->SW;
                            float v[PX];
                            for (int p = 0; p < PX; p++) v[p] = src[p];
                            for (int r = 0; r < MB; r++)
                                for (int p = 0; p < PX; p++) acc[r][p] += w[r] * v[p];
                        }
                    }
                long np = a->OW - ow0 < PX ? a->OW - ow0 : PX;
                for (long r = 0; r < mr; r++) {
                    float *out = a->y + ((m0 + r) * a->OH + oh) * a->OW + ow0;
                    float b = a->bias ? a->bias[m0 + r] : 0.f;
                    for (long p = 0; p < np; p++) out[p] = cd_act1(acc[r][p] + b, a);
                }
            }
    }
}

#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
/* AVX2: 6 channels x 16 pixels (12 ymm accumulators) */
EDGENN_AVX2 static inline __m256 cd_epi8(__m256 v, float b, const cd_args *a)
{
    v = _mm256_add_ps(v, _mm256_set1_ps(b));
    if (a->act != CD_ACT_NONE) {
        v = _mm256_max_ps(v, _mm256_set1_ps(a->act == CD_ACT_CLIP ? a->lo : 0.f));
        if (a->act == CD_ACT_CLIP) v = _mm256_min_ps(v, _mm256_set1_ps(a->hi));
    }
    return v;
}

/* a ragged tail through a spill: a masked store would do, but SIMDe's emulation of one
 * writes the whole vector back (past the end of y) */
EDGENN_AVX2 static void cd_store8(float *out, __m256 v, long n)
{
    if (n >= 8) { _mm256_storeu_ps(out, v); return; }
    if (n <= 0) return;
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(out, t, (size_t)n * 4);
}

EDGENN_AVX2 static void cd_run_avx2(const cd_args *a)
{
    enum { MB = 6 };
    const long T = a->C * a->KH * a->KW, sw = a->SW;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = 0; oh < a->OH; oh++)
            for (long ow0 = 0; ow0 < a->OW; ow0 += 16) {
                __m256 acc[MB][2];
                for (int r = 0; r < MB; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
                const float *w = wb;
                for (long c = 0; c < a->C; c++)
                    for (long i = 0; i < a->KH; i++) {
                        const float *row = a->xp + (c * a->Hp + oh * a->SH + i) * sw * a->Wq
                                           + ow0;
                        for (long j = 0; j < a->KW; j++, w += MB) {
                            const float *src = row + (j % sw) * a->Wq + j / sw;
                            __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
                            for (int r = 0; r < MB; r++) {
                                __m256 wr = _mm256_broadcast_ss(w + r);
                                acc[r][0] = _mm256_fmadd_ps(wr, v0, acc[r][0]);
                                acc[r][1] = _mm256_fmadd_ps(wr, v1, acc[r][1]);
                            }
                        }
                    }
                long np = a->OW - ow0;
                for (long r = 0; r < mr; r++) {
                    float *out = a->y + ((m0 + r) * a->OH + oh) * a->OW + ow0;
                    float b = a->bias ? a->bias[m0 + r] : 0.f;
                    cd_store8(out, cd_epi8(acc[r][0], b, a), np);
                    cd_store8(out + 8, cd_epi8(acc[r][1], b, a), np - 8);
                }
            }
    }
}

/* AVX-512F: 12 channels x 32 pixels (24 zmm accumulators) */
EDGENN_AVX512 static inline __m512 cd_epi16(__m512 v, float b, const cd_args *a)
{
    v = _mm512_add_ps(v, _mm512_set1_ps(b));
    if (a->act != CD_ACT_NONE) {
        v = _mm512_max_ps(v, _mm512_set1_ps(a->act == CD_ACT_CLIP ? a->lo : 0.f));
        if (a->act == CD_ACT_CLIP) v = _mm512_min_ps(v, _mm512_set1_ps(a->hi));
    }
    return v;
}

EDGENN_AVX512 static void cd_store16(float *out, __m512 v, long n)
{
    if (n >= 16) { _mm512_storeu_ps(out, v); return; }
    if (n <= 0) return;
    float t[16];
    _mm512_storeu_ps(t, v);
    memcpy(out, t, (size_t)n * 4);
}

/* MB channels x NV vectors of 16 pixels: 12 x 32 (24 accumulators) or 8 x 48 (24; no
 * ragged channel block when M is a multiple of 8, e.g. 16 / 32 / 64 channels) */
EDGENN_AVX512 static inline __attribute__((always_inline)) void cd_avx512_t(
        const cd_args *a, const long MB, const long NV)
{
    const long T = a->C * a->KH * a->KW, sw = a->SW, PX = 16 * NV;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = 0; oh < a->OH; oh++)
            for (long ow0 = 0; ow0 < a->OW; ow0 += PX) {
                __m512 acc[12][3];
                for (int r = 0; r < MB; r++)
                    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
                const float *w = wb;
                for (long c = 0; c < a->C; c++)
                    for (long i = 0; i < a->KH; i++) {
                        const float *row = a->xp + (c * a->Hp + oh * a->SH + i) * sw * a->Wq
                                           + ow0;
                        for (long j = 0; j < a->KW; j++, w += MB) {
                            const float *src = row + (j % sw) * a->Wq + j / sw;
                            __m512 x[3];
                            for (int v = 0; v < NV; v++) x[v] = _mm512_loadu_ps(src + 16 * v);
                            for (int r = 0; r < MB; r++) {
                                __m512 wr = _mm512_set1_ps(w[r]);
                                for (int v = 0; v < NV; v++)
                                    acc[r][v] = _mm512_fmadd_ps(wr, x[v], acc[r][v]);
                            }
                        }
                    }
                long np = a->OW - ow0;
                for (long r = 0; r < mr; r++) {
                    float *out = a->y + ((m0 + r) * a->OH + oh) * a->OW + ow0;
                    float b = a->bias ? a->bias[m0 + r] : 0.f;
                    for (int v = 0; v < NV; v++)
                        cd_store16(out + 16 * v, cd_epi16(acc[r][v], b, a), np - 16 * v);
                }
            }
    }
}

EDGENN_AVX512 static void cd_run_avx512(const cd_args *a) { cd_avx512_t(a, 12, 2); }
EDGENN_AVX512 static void cd_run_avx512_8x48(const cd_args *a) { cd_avx512_t(a, 8, 3); }
#endif

/* tier: 0 portable, 1 AVX2+FMA, 2 / 3 AVX-512F (the caller checks the CPU has it) */
static void cd_run(const cd_args *a, int tier)
{
#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
    if (tier == 3) { cd_run_avx512_8x48(a); return; }
    if (tier == 2) { cd_run_avx512(a); return; }
    if (tier == 1) { cd_run_avx2(a); return; }
#endif
    (void)tier;
    cd_run_scalar(a);
}
#endif
