/* MatMulNBits with A quantized to int8 per call (onnxruntime's accuracy_level 4: int8
 * compute on A allowed): the nbits family's second arithmetic, its own table (nbq_rows).
 *
 * Per row of A and block b of the weights' block size bs (K zero-padded to kb * bs):
 *   m = max |a_k|; scale_a = m / 127 (float32); q_k = rne(clamp(a_k / scale_a, -127, 127))
 *   sum_q = sum_k q_k (an integer, kept as float32: |sum_q| <= 127 * 256, exact)
 * A block whose m is 0, or whose scale_a underflows to 0, gets q = 0 (its terms vanish).
 * A block holding a NaN or an infinity gets scale_a = NaN and q = 0, so every output of
 * that row is NaN (whatever the weights).
 * Then per output column n: acc = sum_k code[n, k] q_k in int32 (exact: at most
 * 255 * 127 * 256 < 2^24 in magnitude), and the block's epilogue (_nbits_q8_vec.h) adds
 * scale_w[n, b] * scale_a * (acc - zp[n, b] sum_q) to y in float32 with fixed roundings,
 * after the bias, blocks in order. Every row computes the same integers and the same
 * float operations in the same order: the outputs agree bit for bit across rows and tiers.
 *
 * Packed layout (_nbits.pyx's pack_i8; N padded to whole panels of NB_NR = 16 columns,
 * scale 0, codes 0):
 *   codes   bytes (np, kb, bs / (4 P), 16, 4), P = 8 / bits codes a byte: per panel,
 *           block and word group, one 32-bit word per column; byte i of the word holds
 *           the codes of k = g 4P + 4 j + i (j < P) in bits [bits j, bits (j + 1)). So a
 *           64-byte line is 16 columns x 4 P values of k, one vpdpbusd's unsigned operand
 *           per j after a shift and a byte mask; 4-bit codes stay 4 bits a weight
 *   scales  float (np, kb, 16), as the fp32 rows'
 *   zero points: none (zp0 = 2^(bits-1) for every block) or uint8 (np, kb, 16) (+16 bytes
 *           of padding: the NEON row reads 8 at a time); integer float zero points are
 *           converted to these at pack, other float ones are refused there
 * Rows: portable C, AVX2 (vpmaddubsw + vpmaddwd), AVX-VNNI and AVX-512 VNNI (vpdpbusd),
 * ARM64 dot product (SDOT); one body, _nbits_q8_vec.h.
 */
#ifndef EDGENN_NBITS_Q8_H
#define EDGENN_NBITS_Q8_H

#include <float.h>
#include "_nbits.h"

/* One pass of up to rmax rows of A over one panel (all its blocks). */
typedef struct {
    int bits, zp_mode;             /* NB_ZP_NONE or NB_ZP_U8 */
    long bs, kb;
    float zp0;
    const uint8_t *codes;          /* the panel's codes (kb * bs / (4 P) * 64 bytes) */
    const float *scales;           /* the panel's (kb, 16) */
    const uint8_t *zp8;            /* the panel's (kb, 16) or NULL */
    const float *bias;             /* 16 floats or NULL */
    const int8_t *qa;              /* R rows of int8 A: quad (k / 4, r) at (k / 4 R + r) 4 */
    const float *sa, *sq; long ldq;    /* R rows of kb block scales / code sums of A */
    float *y; long ldy;            /* R rows of 16 outputs */
} nbq_tile;

typedef void (*nbq_tile_fn)(int R, const nbq_tile *t);

/* -- the portable row: one column per "vector", its 4 bytes of k in a uint32 ---------- */
static inline __attribute__((always_inline)) uint32_t nbq_load4(const void *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

static inline __attribute__((always_inline)) int32_t nbq_dp_scalar(int32_t acc, uint32_t u,
                                                                   uint32_t s)
{
    for (int i = 0; i < 4; i++)
        acc += (int32_t)((u >> (8 * i)) & 255u) * (int32_t)(int8_t)(uint8_t)(s >> (8 * i));
    return acc;
}

#if defined(EDGENN_SIMDE)
#define NBQ_KEEP_X86(x) ((void)0)        /* the baseline target has no FMA to fuse into */
#define NBQ_KEEP_NEON(x) ((void)0)
#define NBQ_KEEP_SCALAR(x) ((void)0)
#elif defined(__aarch64__)
#define NBQ_KEEP_NEON(x) __asm__("" : "+w"(x))
#define NBQ_KEEP_SCALAR(x) __asm__("" : "+w"(x))
#elif defined(__x86_64__) || defined(__i386__)
#define NBQ_KEEP_X86(x) __asm__("" : "+v"(x))
#define NBQ_KEEP_SCALAR(x) __asm__("" : "+x"(x))
#else
#define NBQ_KEEP_SCALAR(x) ((void)0)
#endif

#define NBQ_VI uint32_t
#define NBQ_VA int32_t
#define NBQ_VF float
#define NBQ_L 1
#define NBQ_ATTR
#define NBQ_LOADI(p) nbq_load4(p)
#define NBQ_SRL(x, n) ((x) >> (n))
#define NBQ_AND(x, m) ((x) & (m))
#define NBQ_SET1I(m) ((uint32_t)(m))
#define NBQ_BCAST(p) nbq_load4(p)
#define NBQ_ZEROA() 0
#define NBQ_ADDA(a, b) ((a) + (b))
#define NBQ_DP(acc, u, s) nbq_dp_scalar(acc, u, s)
#define NBQ_CODES8(w) (w)
#define NBQ_SHIFT8 0.0f
#define NBQ_CVT(x) ((float)(x))
#define NBQ_LOADF(p) (*(p))
#define NBQ_STOREF(p, v) (*(p) = (v))
#define NBQ_SET1F(f) (f)
#define NBQ_ZEROF() 0.0f
#define NBQ_ADDF(a, b) ((a) + (b))
#define NBQ_SUBF(a, b) ((a) - (b))
#define NBQ_MULF(a, b) ((a) * (b))
#define NBQ_ZP8(p) ((float)*(p))
#define NBQ_KEEP(x) NBQ_KEEP_SCALAR(x)
#define NBQ_TILE_T nbq_tile_t_scalar
#define NBQ_TILE nbq_tile_scalar
#define NBQ_ROWS_MAX 2
#include "_nbits_q8_vec.h"

#if NB_X86
/* AVX2: vpmaddubsw + vpmaddwd (no VNNI), 8 columns a vector */
#include "_nbits_q8_ymm.h"
#define NBQ_ATTR EDGENN_AVX2
#define NBQ_MADDUBS _mm256_maddubs_epi16
#define NBQ_MADDWD _mm256_madd_epi16
#define NBQ_ADD16 _mm256_add_epi16
#define NBQ_TILE_T nbq_tile_t_avx2
#define NBQ_TILE nbq_tile_avx2
#include "_nbits_q8_vec.h"

/* AVX-VNNI (VEX vpdpbusd on ymm): the AVX2 width with one instruction per dot product */
#if defined(EDGENN_SIMDE)
#define NBQ_AVXVNNI_ATTR
#define NBQ_DPBUSD256(c, u, s) _mm256_dpbusd_epi32(c, u, s)
#define NBQ_HAVE_AVXVNNI 1
#elif __GNUC__ >= 11 || defined(__clang__)
#define NBQ_AVXVNNI_ATTR __attribute__((target("avx2,fma,avxvnni")))
#define NBQ_DPBUSD256(c, u, s) _mm256_dpbusd_avx_epi32(c, u, s)
#define NBQ_HAVE_AVXVNNI 1
#else
#define NBQ_HAVE_AVXVNNI 0
#endif
#if NBQ_HAVE_AVXVNNI
#include "_nbits_q8_ymm.h"
#define NBQ_ATTR NBQ_AVXVNNI_ATTR
#define NBQ_DP NBQ_DPBUSD256
#define NBQ_CODES8(w) (w)
#define NBQ_TILE_T nbq_tile_t_avxvnni
#define NBQ_TILE nbq_tile_avxvnni
#include "_nbits_q8_vec.h"
#endif

/* AVX-512 VNNI: a panel in one zmm, vpdpbusd */
#if defined(EDGENN_SIMDE)
#define NBQ_AVX512VNNI_ATTR
#else
#define NBQ_AVX512VNNI_ATTR __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vnni")))
#endif
#define NBQ_VI __m512i
#define NBQ_VA __m512i
#define NBQ_VF __m512
#define NBQ_L 16
#define NBQ_ATTR NBQ_AVX512VNNI_ATTR
#define NBQ_LOADI(p) _mm512_loadu_si512((const void *)(p))
#define NBQ_SRL(x, n) _mm512_srli_epi32(x, n)
#define NBQ_AND _mm512_and_si512
#define NBQ_SET1I(m) _mm512_set1_epi32((int)(m))
#define NBQ_BCAST(p) _mm512_set1_epi32((int)nbq_load4(p))
#define NBQ_ZEROA _mm512_setzero_si512
#define NBQ_ADDA _mm512_add_epi32
#define NBQ_DP(c, u, s) _mm512_dpbusd_epi32(c, u, s)
#define NBQ_CODES8(w) (w)
#define NBQ_SHIFT8 0.0f
#define NBQ_CVT _mm512_cvtepi32_ps
#define NBQ_LOADF _mm512_loadu_ps
#define NBQ_STOREF _mm512_storeu_ps
#define NBQ_SET1F _mm512_set1_ps
#define NBQ_ZEROF _mm512_setzero_ps
#define NBQ_ADDF _mm512_add_ps
#define NBQ_SUBF _mm512_sub_ps
#define NBQ_MULF _mm512_mul_ps
/* u8 -> u16 -> u32 (SIMDe has no direct u8 -> u32 widening at 512 bits) */
#define NBQ_ZP8(p) _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_cvtepu8_epi16( \
    _mm_loadu_si128((const __m128i *)(p)))))
#define NBQ_KEEP(x) NBQ_KEEP_X86(x)
#define NBQ_TILE_T nbq_tile_t_avx512vnni
#define NBQ_TILE nbq_tile_avx512vnni
#define NBQ_ROWS_MAX 8
#include "_nbits_q8_vec.h"
#endif

#if EDGENN_NEON
/* ARM64 dot product: SDOT on 4 columns a vector; 8-bit codes flipped to code - 128 (s8)
 * and the zero point moved by 128, so the integers are the other rows' */
#if defined(EDGENN_SIMDE)
#define NBQ_NEONDOT_ATTR
#else
#define NBQ_NEONDOT_ATTR __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#define NBQ_VI uint32x4_t
#define NBQ_VA int32x4_t
#define NBQ_VF float32x4_t
#define NBQ_L 4
#define NBQ_ATTR NBQ_NEONDOT_ATTR
#define NBQ_LOADI(p) vreinterpretq_u32_u8(vld1q_u8((const uint8_t *)(p)))
#define NBQ_SRL(x, n) vshlq_u32(x, vdupq_n_s32(-(int)(n)))
#define NBQ_AND vandq_u32
#define NBQ_SET1I(m) vdupq_n_u32((uint32_t)(m))
#define NBQ_BCAST(p) vdupq_n_u32(nbq_load4(p))
#define NBQ_ZEROA() vdupq_n_s32(0)
#define NBQ_ADDA vaddq_s32
#define NBQ_DP(c, u, s) vdotq_s32(c, vreinterpretq_s8_u32(u), vreinterpretq_s8_u32(s))
#define NBQ_CODES8(w) veorq_u32(w, vdupq_n_u32(0x80808080u))
#define NBQ_SHIFT8 128.0f
#define NBQ_CVT vcvtq_f32_s32
#define NBQ_LOADF vld1q_f32
#define NBQ_STOREF vst1q_f32
#define NBQ_SET1F vdupq_n_f32
#define NBQ_ZEROF() vdupq_n_f32(0.0f)
#define NBQ_ADDF vaddq_f32
#define NBQ_SUBF vsubq_f32
#define NBQ_MULF vmulq_f32
#define NBQ_ZP8(p) vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(p)))))
#define NBQ_KEEP(x) NBQ_KEEP_NEON(x)
#define NBQ_TILE_T nbq_tile_t_neondot
#define NBQ_TILE nbq_tile_neondot
#define NBQ_ROWS_MAX 4
#include "_nbits_q8_vec.h"
#endif

/* The int8 table, best last. */
typedef struct {
    const char *name;        /* nbits_i8_<rmax>x16__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    int rmax;                /* rows of A per pass over the codes */
    nbq_tile_fn tile;
} nbq_row;

static const nbq_row nbq_rows[] = {
    {"nbits_i8_2x16__scalar", EDGENN_ISA_SCALAR, 2, nbq_tile_scalar},
#if NB_X86
    {"nbits_i8_4x16__avx2", EDGENN_ISA_AVX2, 4, nbq_tile_avx2},
#if NBQ_HAVE_AVXVNNI
    {"nbits_i8_4x16__avxvnni", EDGENN_ISA_AVXVNNI, 4, nbq_tile_avxvnni},
#endif
    {"nbits_i8_8x16__avx512vnni", EDGENN_ISA_AVX512VNNI, 8, nbq_tile_avx512vnni},
#endif
#if EDGENN_NEON
    {"nbits_i8_4x16__neondot", EDGENN_ISA_NEONDOT, 4, nbq_tile_neondot},
#endif
};
#define NBQ_ROW_COUNT ((int)(sizeof nbq_rows / sizeof nbq_rows[0]))

/* Row `src` of A (K floats) -> its int8 values into a row tile of rt rows (row r; quad
 * (k / 4, r) at dst + (k / 4 rt + r) 4), its kb block scales and code sums. */
static void nbq_quantize_row(const float *src, long K, long bs, long kb, int8_t *dst, long rt,
                             long r, float *sa, float *sq)
{
    for (long b = 0; b < kb; b++) {
        const long k0 = b * bs, k1 = K < k0 + bs ? K : k0 + bs;
        float m = 0.0f;
        int bad = 0;
        for (long k = k0; k < k1; k++) {
            const float x = fabsf(src[k]);
            bad |= !(x <= FLT_MAX);                /* NaN or infinity */
            m = x > m ? x : m;
        }
        float s = bad ? NAN : m / 127.0f;
        int sum = 0;
        for (long k = k0; k < k0 + bs; k++) {
            int q = 0;
            if (k < k1 && s > 0.0f) {              /* false for NaN and 0 */
                float v = src[k] / s;
                v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
                v = (v + 12582912.0f) - 12582912.0f;  /* round to nearest even (|v| < 2^22) */
                q = (int)v;
            }
            dst[((k / 4) * rt + r) * 4 + k % 4] = (int8_t)q;
            sum += q;
        }
        sa[b] = s;
        sq[b] = (float)sum;
    }
}

/* rows [m0, m0 + R) of A quantized into the row tiles nbq_panels runs (near-equal, at most
 * rmax rows, tile i of rt rows from row r0 at qa + r0 * Kp), scales and sums at row * kb */
static void nbq_prep_rows(const nbq_row *row, const nb_args *x, long m0, long R, int8_t *qa,
                          float *sa, float *sq)
{
    const long kb = x->kb, Kp = kb * x->bs;
    const long tiles = (R + row->rmax - 1) / row->rmax;
    long r0 = 0;
    for (long i = 0; i < tiles; i++) {
        const long rt = (R - r0) / (tiles - i);
        for (long r = 0; r < rt; r++)
            nbq_quantize_row(x->a + (m0 + r0 + r) * x->lda, x->K, x->bs, kb, qa + r0 * Kp, rt,
                             r, sa + (r0 + r) * kb, sq + (r0 + r) * kb);
        r0 += rt;
    }
}

/* panels [p0, p1) for the chunk's rows, in the row tiles of nbq_prep_rows */
static void nbq_panels(const nbq_row *row, const nb_args *x, long m0, long R, const int8_t *qa,
                       const float *sa, const float *sq, long p0, long p1)
{
    const long kb = x->kb, bs = x->bs, Kp = kb * bs;
    const long bytes = kb * bs * x->bits / 8 * NB_NR;         /* a panel's codes */
    const long tiles = (R + row->rmax - 1) / row->rmax;
    for (long p = p0; p < p1; p++) {
        nbq_tile t;
        t.bits = x->bits; t.zp_mode = x->zp_mode; t.bs = bs; t.kb = kb; t.zp0 = x->zp0;
        t.codes = (const uint8_t *)x->codes + p * bytes;
        t.scales = x->scales + p * kb * NB_NR;
        t.zp8 = x->zp8 ? x->zp8 + p * kb * NB_NR : 0;
        t.bias = x->bias ? x->bias + p * NB_NR : 0;
        t.ldq = kb;
        const long n0 = p * NB_NR, nc = x->N - n0 < NB_NR ? x->N - n0 : NB_NR;
        long r0 = 0;
        for (long i = 0; i < tiles; i++) {
            const long rt = (R - r0) / (tiles - i);
            float tmp[NB_RMAX * NB_NR];
            t.qa = qa + r0 * Kp;
            t.sa = sa + r0 * kb;
            t.sq = sq + r0 * kb;
            t.y = nb_tile_out(x, m0 + r0, n0, nc, tmp, &t.ldy);
            row->tile((int)rt, &t);
            nb_tile_flush(x, m0 + r0, n0, nc, rt, tmp);
            r0 += rt;
        }
    }
}

/* Y = A W^T (+ bias) on int8 row `row`: x as for nb_run (codes in pack_i8's layout, zp_mode
 * NB_ZP_NONE or NB_ZP_U8), ws of nb_ws_floats(M, kb, bs) floats; nthreads > 1 splits the
 * panels (OpenMP where built). */
static void nbq_run(const nbq_row *row, const nb_args *x, int nthreads)
{
    const long kb = x->kb, Kp = kb * x->bs, np = (x->N + NB_NR - 1) / NB_NR;
    const long chunk = nb_chunk_rows(Kp), rows = x->M < chunk ? x->M : chunk;
    float *sa = x->ws, *sq = x->ws + rows * kb;
    int8_t *qa = (int8_t *)(x->ws + 2 * rows * kb);
    (void)nthreads;
    for (long m0 = 0; m0 < x->M; m0 += chunk) {
        const long R = x->M - m0 < chunk ? x->M - m0 : chunk;
        nbq_prep_rows(row, x, m0, R, qa, sa, sq);
#ifdef _OPENMP
        if (nthreads > 1 && np > 1) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
            for (long p = 0; p < np; p++)
                nbq_panels(row, x, m0, R, qa, sa, sq, p, p + 1);
            continue;
        }
#endif
        nbq_panels(row, x, m0, R, qa, sa, sq, 0, np);
    }
}

#endif
