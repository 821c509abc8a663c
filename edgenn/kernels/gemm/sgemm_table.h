/* The fp32 GEMM family's table: one row per microkernel (sgemm.h's sg_row), best last
 * within each architecture.
 *
 * Adding a microkernel: its header (the tile and whichever entry points it has), one
 * #include and one row here. The Python side (_sgemm.pyx: rows()), the tuner's kernel
 * specs (conv_sgemm.py, winograd.py) and the tests' parameter lists (native and
 * SIMDe-emulated) are all read from this table.
 *
 * Every row packs the same panels (sgemm.h), so a row can be swapped for another on a
 * packed constant; the rows' sums are FMA chains over k in the same order and share the
 * epilogue, so every row gives the same bits where the ISA's FMA is used (the portable
 * row's auto-vectorized FMA contraction may differ in the last bit).
 */
#ifndef EDGENN_SGEMM_TABLE_H
#define EDGENN_SGEMM_TABLE_H

#include "sgemm.h"
#if SG_X86
#include "sgemm_avx2.h"
#include "sgemm_avx512.h"
#endif
#include "sgemm_neon.h"

static const sg_row sg_rows[] = {
    {"sgemm_6x16__scalar", EDGENN_ISA_SCALAR, SG_MR, SG_NR, sg_ukr_c,
     NULL, NULL, NULL, NULL, NULL, NULL, NULL},
#if SG_X86
    {"sgemm_6x16__avx2", EDGENN_ISA_AVX2, SG_MR, SG_NR, sg_ukr_avx2,
     sg_sweep_avx2, NULL, NULL, sg_pack_a_rows_avx2, sg_gemv_avx2, NULL, NULL},
    {"sgemm_12x32__avx512f", EDGENN_ISA_AVX512, SG_MR2, SG_NR2, sg_ukr_avx2,
     sg_sweep_avx2, sg_tile_avx512, sg_ukr_avx512_pfb_12x2, sg_pack_a_rows_avx2, sg_gemv_avx2,
     sg_gemm_rows_krange_avx512, sg_sum_parts_avx512},
#endif
#if SG_NEON
    {"sgemm_6x16__neon", EDGENN_ISA_NEON, SG_MR, SG_NR, sg_ukr_neon,
     NULL, NULL, NULL, NULL, NULL, NULL, NULL},
#endif
};
#define SG_ROW_COUNT ((int)(sizeof sg_rows / sizeof sg_rows[0]))

#endif
