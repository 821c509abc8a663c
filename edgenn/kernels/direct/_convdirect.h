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
 * xp: the image zero-padded, (C, Hp, SW, Wq) (cd_run_bands: a band of its rows, from
 * padded row xrow0): each padded row split into its SW column phases (stride 2: even and
 * odd columns), so tap j of output pixel o reads phase j % SW at o + j / SW and every load
 * is a plain unit-stride vector load, whatever the stride.
 * Wq >= ceil(OW / tile) * tile + (KW - 1) / SW, so full vector loads past the last
 * output stay inside the phase row; wp: the weights packed per
 * block of MB channels, [block][tap = (c, i, j)][MB] (zero rows past M); y (M, OH, OW).
 * Epilogue in registers: + bias, then none / Relu / Clip(lo, hi) / PRelu (a slope per
 * channel, y < 0 ? y * slope : y, NaN kept); a ragged last tile is
 * stored through a spill, a ragged channel block stores its first M - m0 rows.
 * Per output the sum runs over the taps in (c, i, j) order, one FMA each, on every tier.
 */
#ifndef EDGENN_CONVDIRECT_H
#define EDGENN_CONVDIRECT_H
#include <string.h>
#include "_cpu.h"
#include "_simd.h"
#include "_epilogue.h"
#include "_phases.h"

/* a clamp or nothing, or PRelu (one slope per output channel) */
#define CD_ACTS (EDGENN_ACTS_CLAMP | EDGENN_ACT_BIT(EDGENN_ACT_PRELU))
#define CD_MAX_KW 64                /* widest kernel (the caller checks) */

typedef struct {
    const float *xp, *wp, *bias;
    const float *slope;             /* PRelu: (M,) slope per output channel */
    float *y;
    long C, Hp, Wq, KH, KW, SH, SW, M, OH, OW;   /* Wq: floats per column phase of a row */
    long oh0, oh1;                  /* the output rows this call computes (threads split OH) */
    long xrow0;                     /* the padded row xp's first row holds (cd_run_bands: a
                                       band of rows; else 0, the whole image) */
    int act;
    float lo, hi;
} cd_args;

static inline float cd_act1(float v, const cd_args *a, long m)
{
    if (a->act == EDGENN_ACT_PRELU) return v >= 0.f ? v : v * a->slope[m];
    if (a->act == EDGENN_ACT_RELU) return v > 0.f ? v : 0.f;
    if (a->act == EDGENN_ACT_CLIP) return v < a->lo ? a->lo : (v > a->hi ? a->hi : v);
    return v;
}

/* portable: 8 channels x 8 pixels, constant-bounded loops the compiler can vectorize */
static void cd_run_scalar(const cd_args *a)
{
    enum { MB = 8, PX = 8 };
    const long T = a->C * a->KH * a->KW;
    long joff[CD_MAX_KW];
    for (long j = 0; j < a->KW; j++)
        joff[j] = (j % a->SW) * a->Wq + j / a->SW;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = a->oh0; oh < a->oh1; oh++)
            for (long ow0 = 0; ow0 < a->OW; ow0 += PX) {
                float acc[MB][PX];
                memset(acc, 0, sizeof(acc));
                const float *w = wb;
                for (long c = 0; c < a->C; c++)
                    for (long i = 0; i < a->KH; i++) {
                        const float *row = a->xp + (c * a->Hp + oh * a->SH + i - a->xrow0)
                                           * a->SW * a->Wq + ow0;
                        for (long j = 0; j < a->KW; j++, w += MB) {
                            const float *src = row + joff[j];
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
                    for (long p = 0; p < np; p++) out[p] = cd_act1(acc[r][p] + b, a, m0 + r);
                }
            }
    }
}

#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
/* -- the vector tile, one body for both widths (_convdirect_vec.h) ------------------- */
/* AVX2: 8 floats; 6 channels x 16 pixels (12 ymm accumulators) */
#define CD_V __m256
#define CD_L 8
#define CD_ATTR EDGENN_AVX2
#define CD_LOAD _mm256_loadu_ps
#define CD_STOREU _mm256_storeu_ps
#define CD_SET1 _mm256_set1_ps
#define CD_ZERO _mm256_setzero_ps
#define CD_FMA _mm256_fmadd_ps
#define CD_ADD _mm256_add_ps
#define CD_MAX _mm256_max_ps
#define CD_MIN _mm256_min_ps
#define CD_PRELU(v, s) _mm256_blendv_ps(v, _mm256_mul_ps(v, s), \
                                        _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ))
#define CD_EPI cd_epi8
#define CD_STORE cd_store8
#define CD_TILE cd_tile8
#define CD_BLOCK cd_block8
#include "_convdirect_vec.h"
/* AVX-512F: 16 floats; 12 x 32 or 8 x 48 (24 zmm accumulators; 8 x 48 leaves no
 * ragged channel block when M is a multiple of 8, e.g. 16 / 32 / 64 channels) */
#define CD_V __m512
#define CD_L 16
#define CD_ATTR EDGENN_AVX512
#define CD_LOAD _mm512_loadu_ps
#define CD_STOREU _mm512_storeu_ps
#define CD_SET1 _mm512_set1_ps
#define CD_ZERO _mm512_setzero_ps
#define CD_FMA _mm512_fmadd_ps
#define CD_ADD _mm512_add_ps
#define CD_MAX _mm512_max_ps
#define CD_MIN _mm512_min_ps
#define CD_PRELU(v, s) _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), \
                                                              _CMP_LT_OQ), v, s)
#define CD_EPI cd_epi16
#define CD_STORE cd_store16
#define CD_TILE cd_tile16
#define CD_BLOCK cd_block16
#include "_convdirect_vec.h"

EDGENN_AVX2 static void cd_run_avx2(const cd_args *a) { cd_tile8(a, 6, 2); }
EDGENN_AVX512 static void cd_run_avx512(const cd_args *a) { cd_tile16(a, 12, 2); }
EDGENN_AVX512 static void cd_run_avx512_8x48(const cd_args *a) { cd_tile16(a, 8, 3); }
#endif

/* ARM64 NEON (_neon.h): 4 floats; 8 channels x 12 pixels (24 of the 32 q registers
 * accumulate); max / min as x86's, so the rows compute the same bits. The template
 * (cd_block4) serves the ragged blocks. */
#include "_neon.h"
#if EDGENN_NEON
#define CD_V float32x4_t
#define CD_L 4
#define CD_ATTR
#define CD_LOAD vld1q_f32
#define CD_STOREU vst1q_f32
#define CD_SET1 vdupq_n_f32
#define CD_ZERO() vdupq_n_f32(0.f)
#define CD_FMA(a, b, c) vfmaq_f32(c, a, b)              /* a * b + c, one rounding */
#define CD_ADD vaddq_f32
#define CD_MAX edgenn_vmaxq
#define CD_MIN edgenn_vminq
#define CD_PRELU(v, s) vbslq_f32(vcltq_f32(v, vdupq_n_f32(0.f)), vmulq_f32(v, s), v)
#define CD_EPI cd_epi4
#define CD_STORE cd_store4
#define CD_TILE cd_tile4
#define CD_BLOCK cd_block4
#include "_convdirect_vec.h"

/* The NEON 8 x 12 tile: 8 channels x NV (<= 3) vectors of pixels in named accumulators
 * (the template's array was stored back to the stack every tap on aarch64), per tap the
 * 8 weights as two vectors and one FMA by lane per accumulator: the template's sums, in
 * its order (a * b + c, one rounding, is the same whichever operand is broadcast). Full
 * blocks only; a ragged one (fewer channels, or pixels past the row) is the template's. */
#define CD_N_ACC(r) float32x4_t c##r##0 = z, c##r##1 = z, c##r##2 = z;
#define CD_N_FMA(r, wv, l)                                                       \
    c##r##0 = vfmaq_laneq_f32(c##r##0, x0, wv, l);                               \
    if (NV > 1) c##r##1 = vfmaq_laneq_f32(c##r##1, x1, wv, l);                   \
    if (NV > 2) c##r##2 = vfmaq_laneq_f32(c##r##2, x2, wv, l);
#define CD_N_OUT(r)                                                              \
    {                                                                            \
        const float b = a->bias ? a->bias[m0 + r] : 0.f;                         \
        vst1q_f32(out + r * ldo, cd_epi4(c##r##0, b, a, m0 + r));                \
        if (NV > 1) vst1q_f32(out + r * ldo + 4, cd_epi4(c##r##1, b, a, m0 + r)); \
        if (NV > 2) vst1q_f32(out + r * ldo + 8, cd_epi4(c##r##2, b, a, m0 + r)); \
    }
static inline __attribute__((always_inline)) void cd_block_neon(
        const cd_args *a, const float *wb, const long *joff, long m0, long oh, long ow0,
        const long NV)
{
    const float32x4_t z = vdupq_n_f32(0.f);
    CD_N_ACC(0) CD_N_ACC(1) CD_N_ACC(2) CD_N_ACC(3) CD_N_ACC(4) CD_N_ACC(5) CD_N_ACC(6)
    CD_N_ACC(7)
    const long sw = a->SW;
    const float *w = wb;
    for (long c = 0; c < a->C; c++)
        for (long i = 0; i < a->KH; i++) {
            const float *row = a->xp + (c * a->Hp + oh * a->SH + i - a->xrow0) * sw * a->Wq
                               + ow0;
            for (long j = 0; j < a->KW; j++, w += 8) {
                const float *src = row + joff[j];
                const float32x4_t w0 = vld1q_f32(w), w1 = vld1q_f32(w + 4);
                const float32x4_t x0 = vld1q_f32(src);
                const float32x4_t x1 = NV > 1 ? vld1q_f32(src + 4) : z;
                const float32x4_t x2 = NV > 2 ? vld1q_f32(src + 8) : z;
                CD_N_FMA(0, w0, 0) CD_N_FMA(1, w0, 1) CD_N_FMA(2, w0, 2) CD_N_FMA(3, w0, 3)
                CD_N_FMA(4, w1, 0) CD_N_FMA(5, w1, 1) CD_N_FMA(6, w1, 2) CD_N_FMA(7, w1, 3)
            }
        }
    float *out = a->y + (m0 * a->OH + oh) * a->OW + ow0;
    const long ldo = a->OH * a->OW;
    CD_N_OUT(0) CD_N_OUT(1) CD_N_OUT(2) CD_N_OUT(3) CD_N_OUT(4) CD_N_OUT(5) CD_N_OUT(6)
    CD_N_OUT(7)
}
#undef CD_N_ACC
#undef CD_N_FMA
#undef CD_N_OUT

/* cd_tile4's loop (the same balanced pixel tiles), full blocks on cd_block_neon */
static void cd_run_neon(const cd_args *a)
{
    const long T = a->C * a->KH * a->KW, sw = a->SW, MB = 8, NV = 3;
    long joff[CD_MAX_KW];
    for (long j = 0; j < a->KW; j++)
        joff[j] = (j % sw) * a->Wq + j / sw;
    const long nvec = (a->OW + 3) / 4, ntile = (nvec + NV - 1) / NV;
    for (long m0 = 0; m0 < a->M; m0 += MB) {
        const float *wb = a->wp + (m0 / MB) * T * MB;
        const long mr = a->M - m0 < MB ? a->M - m0 : MB;
        for (long oh = a->oh0; oh < a->oh1; oh++)
            for (long t = 0; t < ntile; t++) {
                const long v0 = t * nvec / ntile, nv = (t + 1) * nvec / ntile - v0;
                const long ow0 = v0 * 4, np = a->OW - ow0;
                if (mr == MB && np >= 4 * nv) {
                    if (nv == 3) cd_block_neon(a, wb, joff, m0, oh, ow0, 3);
                    else if (nv == 2) cd_block_neon(a, wb, joff, m0, oh, ow0, 2);
                    else cd_block_neon(a, wb, joff, m0, oh, ow0, 1);
                } else if (nv == 3) {
                    cd_block4(a, wb, joff, m0, mr, oh, ow0, np, MB, 3);
                } else if (nv == 2) {
                    cd_block4(a, wb, joff, m0, mr, oh, ow0, np, MB, 2);
                } else {
                    cd_block4(a, wb, joff, m0, mr, oh, ow0, np, MB, 1);
                }
            }
    }
}
#endif

/* The family's table: one row per register tile of mb output channels x px pixels (mb is
 * the weight packing's block, px the pixel tile the padded rows are sized for), best last
 * within an architecture. A new tile: its body and one row here. */
typedef struct {
    const char *name;        /* conv_direct_<mb>x<px>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    long mb, px;
    void (*run)(const cd_args *a);
} cd_row;

static const cd_row cd_rows[] = {
    {"conv_direct_8x8__scalar", EDGENN_ISA_SCALAR, 8, 8, cd_run_scalar},
#if (defined(__x86_64__) || defined(EDGENN_SIMDE))
    {"conv_direct_6x16__avx2", EDGENN_ISA_AVX2, 6, 16, cd_run_avx2},
    {"conv_direct_8x48__avx512f", EDGENN_ISA_AVX512, 8, 48, cd_run_avx512_8x48},
    {"conv_direct_12x32__avx512f", EDGENN_ISA_AVX512, 12, 32, cd_run_avx512},
#endif
#if EDGENN_NEON
    {"conv_direct_8x12__neon", EDGENN_ISA_NEON, 8, 12, cd_run_neon},
#endif
};
#define CD_ROW_COUNT ((int)(sizeof cd_rows / sizeof cd_rows[0]))

/* Output rows [oh0, oh1) of one image x (C, H, W) (zero padding pt rows above, pl columns
 * left), in bands of `band` output rows: each band's padded input rows are filled into
 * buf (C planes of Hb = (band - 1) * SH + KH rows, SW * Wq floats each; its left / right
 * borders zero from the start, never written) and the band computed while they are in
 * L1 / L2. A whole padded copy of a 224x224 image (650 KB) had gone out to L2 / L3 and
 * come back for the conv. a: the layer (xp, Hp, oh0, oh1, xrow0 are set here). */
static void cd_run_bands(const cd_args *a0, const float *x, long H, long W, long pt, long pl,
                         float *buf, long band, const cd_row *row)
{
    cd_args a = *a0;
    const long Hb = (band - 1) * a.SH + a.KH, rowf = a.SW * a.Wq;
    a.xp = buf;
    a.Hp = Hb;
    for (long b0 = a0->oh0; b0 < a0->oh1; b0 += band) {
        const long b1 = b0 + band < a0->oh1 ? b0 + band : a0->oh1;
        const long r0 = b0 * a.SH, r1 = (b1 - 1) * a.SH + a.KH;   /* padded rows read */
        for (long c = 0; c < a.C; c++)
            for (long r = r0; r < r1; r++) {
                float *dst = buf + (c * Hb + r - r0) * rowf;
                const long iy = r - pt;
                if (iy >= 0 && iy < H)
                    phases_fill_plane(x + (c * H + iy) * W, dst, 1, W, a.Wq, 0, pl, a.SW);
                else
                    memset(dst, 0, (size_t)rowf * sizeof(float));
            }
        a.xrow0 = r0;
        a.oh0 = b0;
        a.oh1 = b1;
        row->run(&a);
    }
}
#endif
