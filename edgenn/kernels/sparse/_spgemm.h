/* Sparse fully connected layers (Gemm / MatMul with mostly-zero constant weights):
 *     y (M, N) = act(x (M, K) W (K, N) + bias (N,) + z (M, N)),
 * x, y, z row-major float32; W as its transpose W^T (N, K) in CSR, in an sp_epi (_spmm.h):
 * e->row_ptr (N + 1) over the outputs n, e->val the nonzeros of each in increasing k, their
 * k in col (int32); bias, z, act, lo, hi as for the sparse convolutions. Two algorithms:
 *
 * spg_spmv (few rows: the batch-1 FC layer): per output n and row m, the dot product of row
 *   n of W^T with row m of x gathered at its columns, SPG_L nonzeros per gather (16 zmm, 8
 *   ymm, masked tail), one horizontal sum: the rows of spmm_table.h's spv_rows.
 * spg_tiled (many rows: a transformer's tokens, a batch): y^T (N, M) = W^T x^T is a sparse
 *   1x1 conv whose pixels are the M rows, so the register tiles of _spmm_tile.h compute it.
 *   Per block of T = row->pixels rows: x's (T, K) block is packed transposed into ws as
 *   (K, T) (zero rows past M), z's likewise as (N, T), the tile writes y^T's (N, T) block
 *   into ws, which is copied back transposed (8 x 8 AVX2 transposes on the x86 tiers: on
 *   a very sparse layer a scalar copy costs as much as the tiles themselves).
 *   e->off must hold col * T. ws: spg_ws floats, its rows from a 64-byte boundary.
 *   The rows of spmm_table.h's sp_rows: the narrow tiles serve few rows, where a tile's
 *   cost is that of its width, whatever the rows.
 *
 * Each sum runs over one output's nonzeros (plus bias, plus z): any order, so within
 * gamma_{nnz + 2} sum |w| |x| (+ |bias| + |z|) of the exact value on every tier.
 */
#ifndef EDGENN_SPGEMM_H
#define EDGENN_SPGEMM_H

#include "_spmm.h"

enum { SPG_R = 4 };   /* rows of x per block of spg_spmv (_spgemm_dot.h's switch: 1 .. 3 left) */

/* Output (m, n) of y and z, whose rows are ld floats apart (N, or more when a thread
 * computes the outputs n0 .. n0 + N of a wider layer: e, y and z then start at n0). */
static inline float spg_out(float acc, const sp_epi *e, long m, long n, long ld)
{
    if (e->bias) acc += e->bias[n];
    if (e->z) acc += e->z[m * ld + n];
    return sp_clamp(acc, e);
}

/* Portable SpMV: blocks of up to SPG_R rows share each nonzero's weight and column. */
static void spg_spmv_generic(const float *x, float *y, long M, long K, long N, long ld,
                             const sp_epi *e, const int *col)
{
    for (long n = 0; n < N; n++)
        for (long m = 0; m < M; m += SPG_R) {
            const int r = M - m < SPG_R ? (int)(M - m) : SPG_R;
            float a[SPG_R] = {0};
            for (int j = e->row_ptr[n]; j < e->row_ptr[n + 1]; j++) {
                const float w = e->val[j], *xc = x + m * K + col[j];
                for (int i = 0; i < r; i++) a[i] += w * xc[i * K];
            }
            for (int i = 0; i < r; i++) y[(m + i) * ld + n] = spg_out(a[i], e, m + i, n, ld);
        }
}

#if SP_X86
EDGENN_AVX2 static inline float spg_hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

SP_AVX512 static inline float spg_hsum512(__m512 v)
{
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return spg_hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

#define SPG_CAT_(a, b) a##b
#define SPG_CAT(a, b) SPG_CAT_(a, b)
/* AVX2: 8 nonzeros per gather; the tail's mask is a vector (lanes < r all ones) */
#define SPG_V __m256
#define SPG_VI __m256i
#define SPG_MASK __m256i
#define SPG_L 8
#define SPG_ATTR EDGENN_AVX2
#define SPG_NAME spg_spmv_avx2
#define SPG_LOADI(p) _mm256_loadu_si256((const __m256i *)(p))
#define SPG_LOAD _mm256_loadu_ps
#define SPG_GATHER(idx, base) _mm256_i32gather_ps(base, idx, 4)
#define SPG_TAIL(r) _mm256_cmpgt_epi32(_mm256_set1_epi32(r), \
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define SPG_LOADI_TAIL(k, p) _mm256_maskload_epi32(p, k)
#define SPG_LOAD_TAIL(k, p) _mm256_maskload_ps(p, k)
#define SPG_GATHER_TAIL(k, idx, base) \
    _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx, _mm256_castsi256_ps(k), 4)
#define SPG_FMA _mm256_fmadd_ps
#define SPG_ZERO _mm256_setzero_ps
#define SPG_HSUM spg_hsum256
#include "_spgemm_dot.h"
#undef SPG_V
#undef SPG_VI
#undef SPG_MASK
#undef SPG_L
#undef SPG_ATTR
#undef SPG_NAME
#undef SPG_LOADI
#undef SPG_LOAD
#undef SPG_GATHER
#undef SPG_TAIL
#undef SPG_LOADI_TAIL
#undef SPG_LOAD_TAIL
#undef SPG_GATHER_TAIL
#undef SPG_FMA
#undef SPG_ZERO
#undef SPG_HSUM
/* AVX-512F: 16 nonzeros per gather, an opmask tail. The tail gathers unmasked at index 0
 * (x[0], always readable) and zeroes the masked-off lanes after: the same result as a
 * masked gather, and SIMDe (the emulated build) has no 32-bit-index masked gather. */
#define SPG_V __m512
#define SPG_VI __m512i
#define SPG_MASK __mmask16
#define SPG_L 16
#define SPG_ATTR SP_AVX512
#define SPG_NAME spg_spmv_avx512
#define SPG_LOADI(p) _mm512_loadu_si512((const void *)(p))
#define SPG_LOAD _mm512_loadu_ps
#define SPG_GATHER(idx, base) _mm512_i32gather_ps(idx, base, 4)
#define SPG_TAIL(r) ((__mmask16)((1u << (r)) - 1))
#define SPG_LOADI_TAIL(k, p) _mm512_mask_loadu_epi32(_mm512_setzero_si512(), k, p)
#define SPG_LOAD_TAIL(k, p) _mm512_maskz_loadu_ps(k, p)
#define SPG_GATHER_TAIL(k, idx, base) _mm512_maskz_mov_ps(k, _mm512_i32gather_ps(idx, base, 4))
#define SPG_FMA _mm512_fmadd_ps
#define SPG_ZERO _mm512_setzero_ps
#define SPG_HSUM spg_hsum512
#include "_spgemm_dot.h"
#endif

typedef void (*spv_fn)(const float *x, float *y, long M, long K, long N, long ld,
                       const sp_epi *e, const int *col);

/* A row of the spmv table (spmm_table.h): one SIMD width of the gathered dot products */
typedef struct {
    const char *name;        /* spmv_<rows>x<lanes>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    spv_fn run;              /* y (M, N) = act(x W + bias + z); y and z rows ld floats apart */
} spv_row;

/* The workspace of spg_tiled on a row, in floats. */
static inline long spg_ws(long K, long N, const sp_row *row)
{
    return (K + 2 * N) * row->pixels + SP_ALIGN;
}

#if SP_X86
/* dst (8, 8) rows ldd apart <- src (8, 8)^T, rows lds apart: unpack, shuffle, swap lanes */
EDGENN_AVX2 static inline void spg_t8x8(const float *src, long lds, float *dst, long ldd)
{
    __m256 r[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            r[i + 2 * h] = _mm256_shuffle_ps(u[i + h], u[i + h + 2], 0x44);
            r[i + 2 * h + 1] = _mm256_shuffle_ps(u[i + h], u[i + h + 2], 0xee);
        }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}
#endif

/* dst (cols, rows), rows ldd apart <- src (rows, cols)^T, rows lds apart; in 8 x 8 blocks
 * (AVX2 when simd: every x86 tier has it), the edges element by element. */
static void spg_transpose(const float *src, long lds, long rows, long cols, float *dst,
                          long ldd, int simd)
{
    long i0 = 0;
#if SP_X86
    if (simd)
        for (; i0 + 8 <= rows; i0 += 8)
            for (long j = 0; j + 8 <= cols; j += 8)
                spg_t8x8(src + i0 * lds + j, lds, dst + j * ldd + i0, ldd);
#endif
    (void)simd;
    const long j0 = i0 ? cols - cols % 8 : 0;     /* the columns the blocks left */
    for (long i = 0; i < rows; i++)
        for (long j = i < i0 ? j0 : 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

/* b (cols, T) <- a (r, cols)^T, rows lda apart; columns r .. T-1 of b zero. */
static void spg_pack_t(const float *a, long lda, long r, long cols, float *b, long T,
                       int simd)
{
    spg_transpose(a, lda, r, cols, b, T, simd);
    if (r < T)
        for (long c = 0; c < cols; c++) memset(b + c * T + r, 0, (T - r) * sizeof(float));
}

/* The portable tile: spmm_generic over the T columns of a packed block. */
static void spg_tile_generic(const float *x, const float *z, float *y, long ldy, long M,
                             const sp_epi *e)
{
    sp_epi ep = *e;
    ep.z = z;
    spmm_generic(x, y, M, ldy, &ep);
}

/* y (M, N) = act(x W + bias + z) through y^T = W^T x^T on the spmm tiles (see the top);
 * y and z rows ld floats apart (spg_out). */
static void spg_tiled_ld(const float *x, float *y, long M, long K, long N, long ld,
                         const sp_epi *e, const sp_row *row, float *ws)
{
    const long T = row->pixels;
    const int simd = row->tile != NULL;
    const sp_tile_fn tile = simd ? row->tile : spg_tile_generic;
    float *xt = sp_align(ws), *zt = xt + K * T, *yt = zt + N * T;
    for (long m0 = 0; m0 < M; m0 += T) {
        const long r = M - m0 < T ? M - m0 : T;
        spg_pack_t(x + m0 * K, K, r, K, xt, T, simd);
        if (e->z) spg_pack_t(e->z + m0 * ld, ld, r, N, zt, T, simd);
        tile(xt, e->z ? zt : 0, yt, T, N, e);
        spg_transpose(yt, T, N, r, y + m0 * ld, ld, simd);    /* y's r rows <- y^T's block */
    }
}

#endif
