/* The int8 GEMM / conv family's tables, best last within an architecture.
 *
 * qg_rows: the u8 x s8 GEMM micro-kernels of QConv (group-1 and grouped) and QGemm. Every
 * row packs the same 6 x 8 panels (_qgemm.h) and is a set of entry points (struct qg_row):
 * the 6 x 8 tiles and their sweep (AVX2's vpmaddubsw bodies, or the portable C), and where
 * a row has them, exact tiles of a VNNI tier over a packed block, an implicit GEMM that
 * reads the image in place, and (QConv only) 7-pixel x 32-channel tiles. qdw_rows: the
 * int8 depthwise conv's (_qdw.h): a channel's body, and the u8-plane 3x3 body.
 *
 * Every row computes the same integers (the sums are exact; the epilogue is _qepi.h's),
 * so the tuner may swap one for another. The Python side (_qgemm.pyx), the tuner's specs
 * (qgemm.py, qconv.py) and the tests' parameter lists are read from these tables.
 */
#ifndef EDGENN_QGEMM_TABLE_H
#define EDGENN_QGEMM_TABLE_H

#include "_cpu.h"
#include "_qgemm.h"
#include "_qdw.h"
#include "_qgemm_avxvnni_pix.h"
#include "_qgemm_neondot.h"

#define QG_PORTABLE_BODIES                                                                         \
    .conv_u8 = qg_ukr_u8_conv_c, .gemm_u8 = qg_ukr_u8_gemm_c, .wide = qg_ukr_wide_c,               \
    .sweep = qg_sweep_c
#define QG_AVX2_BODIES                                                                             \
    .conv_u8 = qg_ukr_u8_conv_avx2, .gemm_u8 = qg_ukr_u8_gemm_avx2, .wide = qg_ukr_wide_avx2,      \
    .sweep = qg_sweep_avx2, .conv_small_k = qg_sweep16_avx2, .gemm_rows = qg_gemm_rows_avx2

static const qg_row qg_rows[] = {
    {.name = "qgemm_u8s8_6x8__scalar", .isa = EDGENN_ISA_SCALAR, .mr = 6, .nr = 8,
     .ch_block = QG_MR, QG_PORTABLE_BODIES},
#if QE_X86
    {.name = "qgemm_u8s8_6x8__avx2", .isa = EDGENN_ISA_AVX2, .mr = 6, .nr = 8,
     .ch_block = QG_MR, QG_AVX2_BODIES},
#if QA_HAVE
    {.name = "qgemm_u8s8_6x16__avxvnni", .isa = EDGENN_ISA_AVXVNNI, .mr = 6, .nr = 16,
     .exact = 1, .ch_block = QG_MR, QG_AVX2_BODIES,
     .conv_tiles = qa_conv_tiles, .gemm_tiles = qa_gemm_tiles},
    {.name = "qconv_u8s8_3x32__avxvnni", .isa = EDGENN_ISA_AVXVNNI, .mr = 3, .nr = 32,
     .exact = 1, .ch_block = QAP_CH, QG_AVX2_BODIES, .conv_implicit = qap_conv_range},
#endif
#if QV_HAVE
    {.name = "qgemm_u8s8_6x32__avx512vnni", .isa = EDGENN_ISA_AVX512VNNI, .mr = 6, .nr = 32,
     .exact = 1, .ch_block = QG_MR, .pairs = 1, QG_AVX2_BODIES,
     .conv_tiles = qv_conv_tiles, .tail_patterns = qvt_patterns_packed,
     .gemm_tiles = qv_gemm_tiles, .conv_implicit = qv_conv_implicit},
    {.name = "qconv_u8s8_7x32__avx512vnni", .isa = EDGENN_ISA_AVX512VNNI, .mr = 7, .nr = 32,
     .exact = 1, .ch_block = QVP_CH, QG_AVX2_BODIES, .conv_implicit = qvp_conv_range},
#endif
#endif
#if QND_HAVE
    {.name = "qgemm_u8s8_6x8__neondot", .isa = EDGENN_ISA_NEONDOT, .mr = 6, .nr = 8,
     .exact = 1, .ch_block = QG_MR, QG_PORTABLE_BODIES,
     .conv_u8 = qnd_ukr_conv, .gemm_u8 = qnd_ukr_gemm},
#endif
};
#define QG_ROW_COUNT ((int)(sizeof qg_rows / sizeof qg_rows[0]))

static const qdw_row qdw_rows[] = {
    {"qconv_dw_u8s8__scalar", EDGENN_ISA_SCALAR, qdw_channel_c, NULL},
#if QE_X86
    {"qconv_dw_u8s8__avx2", EDGENN_ISA_AVX2, qdw_channel_avx2, NULL},
#if QA_HAVE
    {"qconv_dw_u8s8__avxvnni", EDGENN_ISA_AVXVNNI, qdw_channel_avxvnni, NULL},
#endif
#if QV_HAVE
    {"qconv_dw_u8s8__avx512vnni", EDGENN_ISA_AVX512VNNI, qdw_channel_vnni, qdw_u8_channels},
#endif
#endif
};
#define QDW_ROW_COUNT ((int)(sizeof qdw_rows / sizeof qdw_rows[0]))

#endif
