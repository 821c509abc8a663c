# cython: language_level=3
"""Tests only: the AVX-512 VNNI micro-kernels (_qgemm_vnni.h) compiled against SIMDe for a
plain x86-64 (or any) target, so a CPU without VNNI still runs their bodies and checks
them against the reference; plus a deliberately broken twin (one weight operand halved)
that proves the check can fail. Called through vnni_tiles.tile."""
from libc.stdint cimport int32_t, uint8_t

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

def vnni_ukr_into(int which, const uint8_t[::1] a, const uint8_t[::1] b, long ng, long bps,
                  int npan, int32_t[::1] out):
    """which 0 conv, 1 gemm, 2 the broken conv twin (vnni_tiles.tile checks the sizes)."""
    qv_emu_pick(which)(ng, &a[0], &b[0], bps, npan, &out[0])
