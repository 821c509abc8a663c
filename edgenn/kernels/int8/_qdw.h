/* Depthwise int8 2-D convolution (QConv with group == C == M) with the fused epilogue
 * (_qepi.h), NCHW, any kernel / stride / padding / dilation.
 *
 * Per image and channel: the plane is packed once into int16 (x - x_zp), zero-padded, and
 * split by column phase (column ix of the padded plane goes to phase ix % sw at ix / sw),
 * so every tap of a row of outputs reads consecutive int16 whatever the stride. The plane
 * (and its phases) fits L1/L2 even at 112x112. Outputs are vectorized over 16 pixels: for
 * each pair of taps, the two shifted input vectors are interleaved (vpunpck*wd) and
 * multiplied-added with the pair of weights (vpmaddwd, s16 x s16 -> s32): exact for any
 * 8-bit weights (|x - zp| <= 255, |w| <= 128). Rows of >= 16 outputs: sums and
 * requantization fused, 16 outputs stored straight into y (the last vector of a row
 * overlapping the previous one). Narrower rows (7x7, 14x14 planes): with stride 1 the
 * output rows are flattened over the padded row pitch (a 7x7 plane is 4 vectors, not 7),
 * the sums go to a buffer, then through the shared epilogue; on AVX-512 the integer
 * epilogue runs in registers instead, 16 lanes, the lanes of real outputs compressed to
 * the front and stored as one run (qdw_channel_narrow).
 * Where vpmaddwd has the fp32 FMA's throughput (one pipe on some cores), this is about as
 * fast as the fp32 depthwise kernel (dwc8), not faster: less memory, same multiplies.
 *
 * Builds: AVX2 (runtime-checked), AVX-512 VNNI (the same sums by vpdpwssd, 256-bit:
 * _qdw_sums.h is written once for both; neither wins everywhere, the tuner picks) and
 * portable C over the same packed plane.
 */
#ifndef EDGENN_QDW_H
#define EDGENN_QDW_H

#include <stdint.h>
#include <string.h>

#include "_qepi.h"
#include "_qgemm_vnni.h"
#include "_qgemm_avxvnni.h"

#define QDW_MAXT 1024        /* taps per window handled (kh * kw) */
#define QDW_FMASKS 64        /* flat vectors whose lane masks a plan holds (1024 outputs) */

typedef struct qdw_row qdw_row;

typedef struct {
    int C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    int Hp, Wl;              /* rows per phase plane, row pitch (int16) */
    int flat;                /* stride 1: outputs flattened over the row pitch */
    int T, npair;            /* taps, tap pairs (an odd last tap pairs with weight 0) */
    uint8_t xzp;
    const qdw_row *row;      /* the table row whose entry points run it (set before
                                qdw_setup) */
    long plane_elems;        /* per phase: Hp * Wl + 32 (slack for narrow-row stores) */
    long tap_off[QDW_MAXT];  /* int16 offset of tap t from an output's base */
    int nflat;               /* flat, rows < 16 wide: vectors of 16 flat positions covering
                                the plane (0: more than QDW_FMASKS) ... */
    uint16_t fmask[QDW_FMASKS];  /* ... and per vector its lanes that are outputs (the
                                others fall on the pitch's padding columns or past the end) */
    int u8rows;              /* 3x3, stride <= 2, no dilation, AVX-512 VNNI: the u8 plane
                                read by vpdpbusd, a row of taps per instruction (qdw_u8.h) */
    long Hu, Wu;             /* its rows and row pitch (bytes) */
} qdw_plan;

/* A row of the table (qgemm_table.h qdw_rows): its entry points. channel: one channel of
 * one image (its plane packed into P, sums, epilogue into yc); u8_channels: a channel range
 * through the u8 plane for u8rows plans (integer epilogue), or NULL (no u8rows plans). */
typedef void (*qdw_channel_t)(const qdw_plan *p, const uint8_t *xc, const uint8_t *xend,
                              const int8_t *w8, const int32_t *wc, const qe_epi *e, int c,
                              char *yc, const uint8_t *zc, int16_t *P, int32_t *obuf);
typedef void (*qdw_u8_channels_t)(const qdw_plan *p, const uint8_t *x, const int8_t *w,
                                  const qe_epi *e, uint8_t *y, uint8_t *U, int c0, int c1);
struct qdw_row {
    const char *name;        /* qconv_dw_u8s8__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    qdw_channel_t channel;
    qdw_u8_channels_t u8_channels;
};

static long qdw_roundup(long a, long b) { return (a + b - 1) / b * b; }

/* Fill the geometry-derived fields; -> scratch sizes (int16 plane elements incl. slack,
 * int32 output-row elements). */
static void qdw_setup(qdw_plan *p, long *plane_size, long *obuf_size) {
    int need_w = (p->ow - 1) * p->sw + (p->kw - 1) * p->dw + 1;   /* padded columns read */
    int need_h = (p->oh - 1) * p->sh + (p->kh - 1) * p->dh + 1;
    int wp = need_w > p->pw + p->W ? need_w : p->pw + p->W;
    p->Hp = need_h > p->ph + p->H ? need_h : p->ph + p->H;
    p->flat = p->sh == 1 && p->sw == 1;
    if (p->flat) {
        p->Wl = wp;
    } else {
        long per_phase = (wp + p->sw - 1) / p->sw;
        long reach = qdw_roundup(p->ow, 16) + ((long)(p->kw - 1) * p->dw) / p->sw;
        p->Wl = (int)(per_phase > reach ? per_phase : reach);
    }
    p->plane_elems = (long)p->Hp * p->Wl + 32;
    p->T = p->kh * p->kw;
    p->npair = (p->T + 1) / 2;
    for (int i = 0; i < p->kh; i++)
        for (int j = 0; j < p->kw; j++) {
            long cj = (long)j * p->dw;
            p->tap_off[i * p->kw + j] = (cj % p->sw) * p->plane_elems + (long)i * p->dh * p->Wl
                                        + cj / p->sw;
        }
    *plane_size = p->plane_elems * p->sw + 64;   /* slack: flattened vectors read past */
    long nflat = p->flat ? qdw_roundup((long)(p->oh - 1) * p->Wl + p->ow, 16) / 16 : 0;
    p->nflat = nflat <= QDW_FMASKS ? (int)nflat : 0;
    for (int v = 0; v < p->nflat; v++) {
        unsigned m = 0;
        for (int i = 0; i < 16; i++) {
            long pos = (long)v * 16 + i;
            if (pos / p->Wl < p->oh && pos % p->Wl < p->ow) m |= 1u << i;
        }
        p->fmask[v] = (uint16_t)m;
    }
    /* (rows of <= 8 outputs take two output rows per vector, qdw_u8.h) */
    p->u8rows = p->row->u8_channels && p->kh == 3 && p->kw == 3 && p->dh == 1
                && p->dw == 1 && p->sw <= 2;
    if (p->u8rows) {
        /* rows <= 8 wide: one more output row's taps (the odd last row's pair) */
        p->Hu = (long)(p->oh - 1 + (p->ow <= 8)) * p->sh + 3;
        if (p->Hu < p->ph + p->H) p->Hu = p->ph + p->H;
        /* a block of 16 outputs at ox0 reads 16 bytes at sw * (ox0 + 4t), t < 4 */
        p->Wu = (long)p->sw * (qdw_roundup(p->ow, 16) - 4) + 16;
        if (p->Wu < p->pw + p->W) p->Wu = p->pw + p->W;
        if ((p->Hu * p->Wu + 64) / 2 + 1 > *plane_size)   /* int16 elements */
            *plane_size = (p->Hu * p->Wu + 64) / 2 + 1;
    }
    long orows = p->flat ? (long)p->oh * p->Wl : (long)p->oh * qdw_roundup(p->ow, 16);
    *obuf_size = qdw_roundup(orows, 16) + 16;
}

/* Weights (C, T) int8 -> pairs (C, npair) of int16 (w_2p | w_2p+1 << 16) as int32. */
static void qdw_pack_weights(const qdw_plan *p, const int8_t *w, int32_t *wp) {
    for (int c = 0; c < p->C; c++)
        for (int q = 0; q < p->npair; q++) {
            int t0 = 2 * q, t1 = 2 * q + 1;
            uint16_t lo = (uint16_t)(int16_t)w[(long)c * p->T + t0];
            uint16_t hi = t1 < p->T ? (uint16_t)(int16_t)w[(long)c * p->T + t1] : 0;
            wp[(long)c * p->npair + q] = (int32_t)((uint32_t)lo | ((uint32_t)hi << 16));
        }
}

/* Plane (H, W) u8 -> P (phases of Hp x Wl int16, x - xzp); the padding stays zero. */
static void qdw_pack_plane_c(const qdw_plan *p, const uint8_t *x, int16_t *P) {
    const int z = p->xzp;
    for (int iy = 0; iy < p->H; iy++) {
        const uint8_t *s = x + (long)iy * p->W;
        int16_t *row = P + (long)(iy + p->ph) * p->Wl;
        for (int ix = 0; ix < p->W; ix++) {
            int pc = ix + p->pw;
            row[(pc % p->sw) * p->plane_elems + pc / p->sw] = (int16_t)(s[ix] - z);
        }
    }
}

/* The tap-pair offsets of the (unpaired) last tap point at tap 0 with weight 0. */
static inline long qdw_off(const qdw_plan *p, int t) { return t < p->T ? p->tap_off[t] : p->tap_off[0]; }

/* Sums for the n outputs starting at base (int16 offset in P), output o at base + o
 * (stride 1 flat) -> acc[0..n). */
static void qdw_sums_c(const qdw_plan *p, const int16_t *P, long base, long n,
                       const int8_t *w, int32_t *acc) {
    for (long o = 0; o < n; o++) {
        int32_t s = 0;
        for (int t = 0; t < p->T; t++) s += (int32_t)P[base + p->tap_off[t] + o] * w[t];
        acc[o] = s;
    }
}

#if QE_X86
/* Plane (H, W) u8 -> P as qdw_pack_plane_c. Rows narrower than one vector are stored as
 * a whole vector with the lanes past the row zeroed (they land on padding or slack, or on
 * a later row that is written afterwards); xend: end of the image (no reads past it). */
QE_AVX2 static void qdw_pack_plane_avx2(const qdw_plan *p, const uint8_t *x, const uint8_t *xend,
                                        int16_t *P) {
    const __m256i z = _mm256_set1_epi16(p->xzp), lo8 = _mm256_set1_epi16(0xff);
    const __m256i lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (p->sw > 2) {
        qdw_pack_plane_c(p, x, P);
        return;
    }
    const int W = p->W;
    uint8_t tmp[32];
    for (int iy = 0; iy < p->H; iy++) {
        const uint8_t *s = x + (long)iy * W;
        int16_t *row = P + (long)(iy + p->ph) * p->Wl;
        if (p->sw == 1) {
            int16_t *d = row + p->pw;
            if (W >= 16) {   /* the last step ends at W (overlapping the previous one) */
                for (int ix = 0; ix < W; ix += 16) {
                    if (ix > W - 16) ix = W - 16;
                    __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(s + ix)));
                    _mm256_storeu_si256((__m256i *)(d + ix), _mm256_sub_epi16(v, z));
                }
            } else {
                const uint8_t *src = s;
                if (s + 16 > xend) {
                    memcpy(tmp, s, W);
                    src = tmp;
                }
                __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)src));
                v = _mm256_sub_epi16(v, z);
                v = _mm256_and_si256(v, _mm256_cmpgt_epi16(_mm256_set1_epi16((short)W), lane));
                _mm256_storeu_si256((__m256i *)d, v);
            }
        } else {   /* stride 2: even / odd input columns to their phases */
            int pe = p->pw, po = 1 + p->pw;   /* padded columns of input columns 0 and 1 */
            if (W >= 32) {
                for (int ix = 0; ix < W; ix += 32) {   /* last step ends at W */
                    if (ix > W - 32) ix = W - 32;
                    __m256i v = _mm256_loadu_si256((const __m256i *)(s + ix));
                    __m256i ev = _mm256_sub_epi16(_mm256_and_si256(v, lo8), z);
                    __m256i od = _mm256_sub_epi16(_mm256_srli_epi16(v, 8), z);
                    int ce = ix + pe, co = ix + po;
                    _mm256_storeu_si256((__m256i *)(row + (ce & 1) * p->plane_elems + (ce >> 1)), ev);
                    _mm256_storeu_si256((__m256i *)(row + (co & 1) * p->plane_elems + (co >> 1)), od);
                }
            } else {
                const uint8_t *src = s;
                if (s + 32 > xend) {
                    memcpy(tmp, s, W);
                    src = tmp;
                }
                __m256i v = _mm256_loadu_si256((const __m256i *)src);
                __m256i ev = _mm256_sub_epi16(_mm256_and_si256(v, lo8), z);
                __m256i od = _mm256_sub_epi16(_mm256_srli_epi16(v, 8), z);
                __m256i ne = _mm256_set1_epi16((short)((W + 1) / 2)), no = _mm256_set1_epi16((short)(W / 2));
                ev = _mm256_and_si256(ev, _mm256_cmpgt_epi16(ne, lane));
                od = _mm256_and_si256(od, _mm256_cmpgt_epi16(no, lane));
                _mm256_storeu_si256((__m256i *)(row + (pe & 1) * p->plane_elems + (pe >> 1)), ev);
                _mm256_storeu_si256((__m256i *)(row + (po & 1) * p->plane_elems + (po >> 1)), od);
            }
        }
    }
}

/* The integer epilogue of 16 outputs of channel c given as (0-3 | 8-11, 4-7 | 12-15),
 * stored at y: the two packs put the outputs back in order. Always inlined (a call per 16
 * outputs passes its constants on the stack, a large share of the work it does). */
QE_AVX2 __attribute__((always_inline)) static inline void qdw_out16_int(
        __m256i alo, __m256i ahi, __m256i bias, __m256 mult, __m256i zp16, __m128i lo8,
        __m128i hi8, char *y) {
    const __m256 big = _mm256_set1_ps(16777216.f);
    __m256i qlo = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(
        _mm256_add_epi32(alo, bias)), mult), big));
    __m256i qhi = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(
        _mm256_add_epi32(ahi, bias)), mult), big));
    __m256i s16 = _mm256_adds_epi16(_mm256_packs_epi32(qlo, qhi), zp16);   /* 0-7 | 8-15 */
    __m256i u8 = _mm256_permute4x64_epi64(_mm256_packus_epi16(s16, s16), 0x08);
    __m128i v = _mm_min_epu8(_mm_max_epu8(_mm256_castsi256_si128(u8), lo8), hi8);
    _mm_storeu_si128((__m128i *)y, v);
}

/* The float epilogue of those 16 outputs (residual z), u8 or float32 at y. */
QE_AVX2 static void qdw_out16_float(__m256i alo, __m256i ahi, const qe_epi *e, long c, char *y,
                                    const uint8_t *z) {
    const long es = e->out_f32 ? 4 : 1;
    qe_vec8(_mm256_permute2x128_si256(alo, ahi, 0x20), e, c, 0, y, z);
    qe_vec8(_mm256_permute2x128_si256(alo, ahi, 0x31), e, c, 0, y + 8 * es, z ? z + 8 : NULL);
}

#define QDW_FN(name) name##_avx2
#define QDW_ATTR QE_AVX2
#define QDW_DOT(acc, pairs, w) _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, w))
#include "_qdw_sums.h"
#undef QDW_FN
#undef QDW_ATTR
#undef QDW_DOT
#if QV_HAVE   /* _qgemm_vnni.h: AVX-512 VNNI natively, or through SIMDe in the test build */
#define QDW_FN(name) name##_vnni
#define QDW_ATTR QV_TARGET
#define QDW_DOT(acc, pairs, w) _mm256_dpwssd_epi32(acc, pairs, w)
#define QDW_NARROW16 1        /* the integer epilogue on 16 lanes, the narrow rows' kernel */
#include "_qdw_sums.h"
#include "_qdw_u8.h"
#undef QDW_NARROW16
#undef QDW_FN
#undef QDW_ATTR
#undef QDW_DOT
#endif
#if QA_HAVE   /* _qgemm_avxvnni.h: AVX-VNNI natively, or through SIMDe in the test build */
#define QDW_FN(name) name##_avxvnni
#define QDW_ATTR QA_TARGET
#define QDW_DOT(acc, pairs, w) QA_DPWSSD(acc, pairs, w)
#include "_qdw_sums.h"
#undef QDW_FN
#undef QDW_ATTR
#undef QDW_DOT
#endif
#endif

/* The portable row's channel: the int16 plane, then each output row's sums and the
 * shared epilogue. */
static void qdw_channel_c(const qdw_plan *p, const uint8_t *xc, const uint8_t *xend,
                          const int8_t *wc, const int32_t *wpairs, const qe_epi *e, int c,
                          char *yc, const uint8_t *zc, int16_t *P, int32_t *obuf) {
    (void)xend;
    (void)wpairs;
    const long es = e->out_f32 ? 4 : 1;
    qdw_pack_plane_c(p, xc, P);
    for (int oy = 0; oy < p->oh; oy++) {
        long base = (long)oy * p->sh * p->Wl;
        if (p->flat) {
            qdw_sums_c(p, P, base, p->ow, wc, obuf);
        } else {
            for (int ox = 0; ox < p->ow; ox++)   /* output ox reads phase-plane column ox */
                qdw_sums_c(p, P, base + ox, 1, wc, obuf + ox);
        }
        qe_span(obuf, p->ow, e, c, 0, yc + (long)oy * p->ow * es,
                zc ? zc + (long)oy * p->ow : NULL, 0);
    }
}

/* One image: x (C, H, W) u8 -> y (C, OH, OW) (u8 or float32), z residual like y or NULL.
 * w (C, T) int8, wp its packed pairs. P: plane scratch, zeroed once by the caller (the
 * padding is never written); obuf: row sums. Channels [c0, c1) on the plan's row. */
static void qdw_run_channels(const qdw_plan *p, const uint8_t *x, const int8_t *w,
                             const int32_t *wp, const qe_epi *e, void *y, const uint8_t *z,
                             int16_t *P, int32_t *obuf, int c0, int c1) {
    const long es = e->out_f32 ? 4 : 1, ohw = (long)p->oh * p->ow;
    if (p->u8rows && !e->float_path) {   /* the u8 plane (qdw_u8.h) */
        p->row->u8_channels(p, x, w, e, (uint8_t *)y, (uint8_t *)P, c0, c1);
        return;
    }
    const uint8_t *xend = x + (long)p->C * p->H * p->W;
    for (int c = c0; c < c1; c++)
        p->row->channel(p, x + (long)c * p->H * p->W, xend, w + (long)c * p->T,
                        wp + (long)c * p->npair, e, c, (char *)y + c * ohw * es,
                        z ? z + c * ohw : NULL, P, obuf);
}

/* The whole layer on the calling thread (threads: disjoint channel ranges [c0, c1), each
 * with its own P and obuf). */
static inline void qdw_run(const qdw_plan *p, const uint8_t *x, const int8_t *w, const int32_t *wp,
                    const qe_epi *e, void *y, const uint8_t *z, int16_t *P, int32_t *obuf) {
    qdw_run_channels(p, x, w, wp, e, y, z, P, obuf, 0, p->C);
}

#endif
