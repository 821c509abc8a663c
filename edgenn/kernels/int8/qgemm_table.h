/* The int8 GEMM / conv family's tables, best last within an architecture.
 *
 * qg_rows: the u8 x s8 GEMM micro-kernels of QConv (group-1 and grouped) and QGemm. Every
 * row packs the same 6 x 8 panels (_qgemm.h); a row says which bodies its plans run: the
 * AVX2 ones (vpmaddubsw tiles, sweeps, epilogues; else the portable C), the vpdpbusd
 * tiles of a VNNI tier, and (QConv only) the 7-pixel x 32-channel tiles on the shifted
 * image. qdw_rows: the int8 depthwise conv's (_qdw.h): its AVX2 body, and the sums by
 * vpdpwssd of a VNNI tier.
 *
 * Every row computes the same integers (the sums are exact; the epilogue is _qepi.h's),
 * so the tuner may swap one for another. The Python side (_qgemm.pyx), the tuner's specs
 * (qgemm.py, qconv.py) and the tests' parameter lists are read from these tables.
 */
#ifndef EDGENN_QGEMM_TABLE_H
#define EDGENN_QGEMM_TABLE_H

#include "_cpu.h"
#include "_qgemm.h"

typedef struct {
    const char *name;        /* q<gemm|conv>_u8s8_<mr>x<nr>__<isa> */
    int isa;                 /* the EDGENN_ISA_* tier it needs (_cpu.h) */
    int mr, nr;              /* its register tile */
    int avx2;                /* the AVX2 bodies (else the portable C) */
    int vnni;                /* QG_VNNI_*: the vpdpbusd tiles, or 0 */
    int pixel_tiles;         /* QConv only: the 7 x 32 tiles (_qgemm_vnni_pix.h) */
} qg_row;

static const qg_row qg_rows[] = {
    {"qgemm_u8s8_6x8__scalar", EDGENN_ISA_SCALAR, 6, 8, 0, 0, 0},
#if QE_X86
    {"qgemm_u8s8_6x8__avx2", EDGENN_ISA_AVX2, 6, 8, 1, 0, 0},
#if QA_HAVE
    {"qgemm_u8s8_6x16__avxvnni", EDGENN_ISA_AVXVNNI, 6, 16, 1, QG_VNNI_AVX, 0},
#endif
#if QV_HAVE
    {"qgemm_u8s8_6x32__avx512vnni", EDGENN_ISA_AVX512VNNI, 6, 32, 1, QG_VNNI_AVX512, 0},
    {"qconv_u8s8_7x32__avx512vnni", EDGENN_ISA_AVX512VNNI, 7, 32, 1, QG_VNNI_AVX512, 1},
#endif
#endif
};
#define QG_ROW_COUNT ((int)(sizeof qg_rows / sizeof qg_rows[0]))

typedef struct {
    const char *name;        /* qconv_dw_u8s8__<isa> */
    int isa;
    int avx2;                /* the AVX2 body (else the portable C) */
    int vnni;                /* QG_VNNI_*: the sums by vpdpwssd, or 0 */
} qdw_row;

static const qdw_row qdw_rows[] = {
    {"qconv_dw_u8s8__scalar", EDGENN_ISA_SCALAR, 0, 0},
#if QE_X86
    {"qconv_dw_u8s8__avx2", EDGENN_ISA_AVX2, 1, 0},
#if QA_HAVE
    {"qconv_dw_u8s8__avxvnni", EDGENN_ISA_AVXVNNI, 1, QG_VNNI_AVX},
#endif
#if QV_HAVE
    {"qconv_dw_u8s8__avx512vnni", EDGENN_ISA_AVX512VNNI, 1, QG_VNNI_AVX512},
#endif
#endif
};
#define QDW_ROW_COUNT ((int)(sizeof qdw_rows / sizeof qdw_rows[0]))

#endif
