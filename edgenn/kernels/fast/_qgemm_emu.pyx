# cython: language_level=3
"""Tests only: the AVX-512 VNNI micro-kernels (_qgemm_vnni.h) compiled against SIMDe for a
plain x86-64 (or any) target, so a CPU without VNNI still runs their bodies and checks
them against the reference; plus a deliberately broken twin (one weight operand halved)
that proves the check can fail. Same entry points as _qgemm.vnni_ukr."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, uint8_t

cnp.import_array()

cdef extern from *:
    """
    #define EDGENN_SIMDE 1
    #define QV_KEEP_MACROS 1
    #include "_qgemm_vnni.h"
    #define QV_DP_BROKEN(c, v, s) _mm512_dpbusd_epi32(c, v, _mm512_srai_epi32(s, 1))
    QV_UKR(qv_ukr_conv_6x32_broken, QV_DP_BROKEN)
    typedef void (*qv_ukr_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *);
    static qv_ukr_t qv_emu_pick(int which) {
        return which == 0 ? qv_ukr_conv_6x32 : which == 1 ? qv_ukr_gemm_6x32
                                             : qv_ukr_conv_6x32_broken;
    }
    """
    ctypedef void (*qv_ukr_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *)
    qv_ukr_t qv_emu_pick(int which)

KINDS = {"conv": 0, "gemm": 1, "conv_broken": 2}


def vnni_ukr(str kind, cnp.ndarray a, cnp.ndarray b, long ng, long bps, int npan):
    """a: one A panel (ng * 24 bytes), b: 4 B panels bps bytes apart (each ng * 32 bytes),
    both uint8 -> (4, 6, 8) int32 sums (see _qgemm_vnni.h)."""
    if kind not in KINDS:
        raise ValueError(kind)
    a = np.ascontiguousarray(a, np.uint8)
    b = np.ascontiguousarray(b, np.uint8)
    if a.size < ng * 24 or b.size < (npan - 1) * bps + ng * 32 or not 1 <= npan <= 4:
        raise ValueError("panels too small")
    out = np.zeros((4, 6, 8), np.int32)
    qv_emu_pick(KINDS[kind])(ng, <const uint8_t *>cnp.PyArray_DATA(a),
                             <const uint8_t *>cnp.PyArray_DATA(b), bps, npan,
                             <int32_t *>cnp.PyArray_DATA(out))
    return out
