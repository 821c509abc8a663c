/* The sparse family's tables (_spmm.h, _spgemm.h), best last within an architecture.
 *
 * sp_rows: the register tiles of the sparse convolutions (1x1 and tap-shifted) and of the
 * tiled sparse FC layers, one row per width in pixels; rows narrower than 32 pixels serve
 * the FC layers' few rows only (sparse.py, sparse_gemm.py). spv_rows: the gathered dot
 * products of the few-row FC layers, one row per SIMD width.
 *
 * Adding a tile: its _spmm_tile.h instance and one row here; the Python side
 * (_spmm.pyx), the tuner's specs and the tests' parameter lists are read from these.
 * Every row sums a nonzero's products in the same order, so rows differ only in speed.
 */
#ifndef EDGENN_SPMM_TABLE_H
#define EDGENN_SPMM_TABLE_H

#include "_spgemm.h"

static const sp_row sp_rows[] = {
    {"spmm_32x1__scalar", EDGENN_ISA_SCALAR, 32, NULL},
#if SP_X86
    {"spmm_8x1__avx2", EDGENN_ISA_AVX2, 8, sp_tile_avx2_8},
    {"spmm_16x1__avx2", EDGENN_ISA_AVX2, 16, sp_tile_avx2_16},
    {"spmm_32x1__avx2", EDGENN_ISA_AVX2, 32, sp_tile_avx2},
    {"spmm_16x1__avx512f", EDGENN_ISA_AVX512, 16, sp_tile_avx512_16},
    {"spmm_32x1__avx512f", EDGENN_ISA_AVX512, 32, sp_tile_avx512_32},
    {"spmm_64x1__avx512f", EDGENN_ISA_AVX512, 64, sp_tile_avx512},
#endif
#if EDGENN_NEON
    {"spmm_8x1__neon", EDGENN_ISA_NEON, 8, sp_tile_neon_8},
    {"spmm_16x1__neon", EDGENN_ISA_NEON, 16, sp_tile_neon_16},
    {"spmm_32x1__neon", EDGENN_ISA_NEON, 32, sp_tile_neon_32},
#endif
};
#define SP_ROW_COUNT ((int)(sizeof sp_rows / sizeof sp_rows[0]))

static const spv_row spv_rows[] = {
    {"spmv_4x1__scalar", EDGENN_ISA_SCALAR, spg_spmv_generic},
#if SP_X86
    {"spmv_4x8__avx2", EDGENN_ISA_AVX2, spg_spmv_avx2},
    {"spmv_4x16__avx512f", EDGENN_ISA_AVX512, spg_spmv_avx512},
#endif
};
#define SPV_ROW_COUNT ((int)(sizeof spv_rows / sizeof spv_rows[0]))

#endif
