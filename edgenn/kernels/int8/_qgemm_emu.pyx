# cython: language_level=3
"""Tests only: the AVX-512 VNNI micro-kernels (_qgemm_vnni.h) compiled against SIMDe for a
plain x86-64 (or any) target, so a CPU without VNNI still runs their bodies and checks
them against the reference; plus a deliberately broken twin (one weight operand halved)
that proves the check can fail. Called through vnni_tiles.tile. Also the VNNI sums of the
int8 depthwise kernel (_qdw_sums.h, vpdpwssd) and their broken twin: dw_sums."""
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t

cdef extern from *:
    """
    #define EDGENN_SIMDE 1
    #define QV_KEEP_MACROS 1   /* _qgemm_avxvnni.h keeps QA_UKR for the broken twin */
    #include "_qgemm_vnni.h"
    #include "_qgemm_avxvnni.h"
    /* the full conv tile with one weight operand halved, through the tiles' own template */
    #define QVC_DP(c, v, s) _mm512_dpbusd_epi32(c, v, _mm512_srai_epi32(s, 1))
    #define QVC_DP8(c, v, s) _mm256_dpbusd_epi32(c, v, _mm256_srai_epi32(s, 1))
    #define QVC_PREFIX qvc_broken
    #define QVC_ROWS 6
    #define QVC_NV 2
    #include "_qgemm_vnni_conv.h"
    #define QVC_ROWS 6
    #define QVC_NV 0
    #include "_qgemm_vnni_conv.h"
    #undef QVC_DP
    #undef QVC_DP8
    #undef QVC_PREFIX
    #define qv_ukr_conv_6x32_broken qvc_broken_6x2_acc
    /* the 7-pixel x 32-channel tile's broken twin (_qgemm_vnni_pix.h) */
    #define QVP_DP(c, x, w) _mm512_dpbusd_epi32(c, x, _mm512_srai_epi32(w, 1))
    #define QVP_PREFIX qvp_broken
    #include "_qgemm_vnni_pix.h"
    #undef QVP_DP
    #undef QVP_PREFIX
    #define QVP_BROKEN 1
    #define QVT_BROKEN_DP(c, x, w) _mm512_dpbusd_epi32(c, x, _mm512_srai_epi32(w, 1))
    QVT_SUMS(qvt_sums_broken, QVT_BROKEN_DP)
    #define QVT_BROKEN 1
    #define QA_DP_BROKEN(c, v, s) QA_DPBUSD(c, v, _mm256_srai_epi32(s, 1))
    QA_UKR(qa_ukr_conv_6x32_broken, QA_DP_BROKEN)
    typedef void (*qv_ukr_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *);
    /* 0-2: AVX-512 VNNI (conv: the tile shape for rows x npan), 3-5: AVX-VNNI */
    static qv_ukr_t qv_emu_pick(int which, int rows, int npan) {
        static const qv_ukr_t ukr[6] = {0, qv_ukr_gemm_6x32, qv_ukr_conv_6x32_broken,
                                        qa_ukr_conv_6x32, qa_ukr_gemm_6x32,
                                        qa_ukr_conv_6x32_broken};
        if (which == 2 && npan == 1)
            return qvc_broken_6x0_acc;   /* the 8-pixel (ymm) tile's broken twin */
        return which == 0 ? qvc_acc[qvc_index(rows, npan)] : ukr[which];
    }
    """
    ctypedef void (*qv_ukr_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *)
    qv_ukr_t qv_emu_pick(int which, int rows, int npan)


def vnni_ukr_into(int which, const uint8_t[::1] a, const uint8_t[::1] b, long ng, long bps,
                  int npan, int32_t[::1] out, int rows=6):
    """which 0 conv (rows 6 / 4 / 2: the driver's tile shape for them), 1 gemm, 2 the
    broken conv twin; 3-5 the same on AVX-VNNI (vnni_tiles.tile checks the sizes)."""
    qv_emu_pick(which, rows, npan)(ng, &a[0], &b[0], bps, npan, &out[0])


cdef extern from *:
    """
    #include "_qdw.h"
    #define QDW_SUMS_ONLY 1
    #define QDW_ATTR
    #define QDW_FN(name) name##_emu
    #define QDW_DOT(acc, pairs, w) _mm256_dpwssd_epi32(acc, pairs, w)
    #define QDW_NARROW16 1      /* the narrow rows' kernel and the 16-lane epilogue */
    #include "_qdw_sums.h"
    #undef QDW_NARROW16
    #include "_qdw_u8.h"        /* the u8-plane kernel, as native */
    /* plans set up as the AVX-512 VNNI row's: u8rows where its u8_channels apply */
    static const qdw_row qdw_emu_row = {"qconv_dw_u8s8__avx512vnni-emulated", 0, qdw_channel_c,
                                        qdw_u8_channels};
    /* and its broken twin, one weight operand halved */
    #define QDW_U8_FN(name) name##_broken
    #define QDW_U8_DP(acc, v, w) _mm512_dpbusd_epi32(acc, v, _mm512_srai_epi32(w, 1))
    #include "_qdw_u8.h"
    #undef QDW_FN
    #undef QDW_DOT
    #define QDW_FN(name) name##_broken
    #define QDW_DOT(acc, pairs, w) _mm256_dpwssd_epi32(acc, pairs, _mm256_srai_epi16(w, 1))
    #include "_qdw_sums.h"
    static void qdw_emu_sums(int which, const qdw_plan *p, const int16_t *P, long rows,
                             long pstride, long n, long opitch, const int32_t *wp,
                             int32_t *acc) {
        if (which == 1 && p->T == 9) qdw_sums3x3_broken(p, P, rows, pstride, n, opitch, wp, acc);
        else if (which == 1) qdw_sums_broken(p, P, rows, pstride, n, opitch, wp, acc);
        else if (p->T == 9 && which == 0) qdw_sums3x3_emu(p, P, rows, pstride, n, opitch, wp, acc);
        else qdw_sums_emu(p, P, rows, pstride, n, opitch, wp, acc);
    }
    """
    void qdw_emu_sums(int which, const qdw_plan *p, const int16_t *P, long rows, long pstride,
                      long n, long opitch, const int32_t *wp, int32_t *acc)


cdef extern from *:
    """
    /* One layer of C channels, integer epilogue (y = clamp(round((sums + bias) * mult)
     * + yzp)), on the kernels the native AVX-512 VNNI plan dispatches to for rows
     * narrower than 16 (_qdw.h's qdw_run_channels): the u8 plane where p->u8rows, else
     * the int16 plane's narrow kernel; which 1: the u8 kernel's broken twin. -> -1 for
     * a plan with wide int16 rows (their sums: qdw_emu_sums). */
    static int qdw_emu_layer(int which, const qdw_plan *p, const uint8_t *x, const int8_t *w,
                              const int32_t *wp, const int32_t *bias, const float *mult,
                              int32_t yzp, int32_t lo, int32_t hi, uint8_t *y, int16_t *P,
                              int32_t *obuf) {
        qe_epi e;
        memset(&e, 0, sizeof e);
        e.bias = bias;
        e.mult = mult;
        e.yzp = yzp;
        e.lo = lo;
        e.hi = hi;
        const long ohw = (long)p->oh * p->ow;
        (void)obuf;
        if (p->u8rows) {
            (which ? qdw_u8_channels_broken : qdw_u8_channels)(p, x, w, &e, y, (uint8_t *)P, 0,
                                                               p->C);
            return 0;
        }
        if (which || p->ow >= 16 || (p->flat && !p->nflat)) return -1;
        for (int c = 0; c < p->C; c++) {
            qdw_pack_plane_c(p, x + (long)c * p->H * p->W, P);
            qdw_channel_narrow_emu(p, P, wp + (long)c * p->npair, &e, c, y + c * ohw);
        }
        return 0;
    }
    """
    int qdw_emu_layer(int which, const qdw_plan *p, const uint8_t *x, const int8_t *w,
                       const int32_t *wp, const int32_t *bias, const float *mult, int32_t yzp,
                       int32_t lo, int32_t hi, uint8_t *y, int16_t *P, int32_t *obuf)


include "_qdw_decl.pxi"

cdef extern from *:
    const qdw_row qdw_emu_row


def dw_sums(int which, const uint8_t[:, ::1] x, const int8_t[:, ::1] w, geom, int x_zp):
    """One channel of the int8 depthwise sums on the VNNI body (which 0: the kernel, 2: its
    generic tap loop, 1: a broken twin): x (H, W) u8, w (kh, kw) s8, geom (sh, sw, ph, pw,
    dh, dw, oh, ow) -> (oh, ow) int32 sums of (x - x_zp) * w, read from the kernel's
    int16 plane (zero padding) as the native kernel does for rows of any width."""
    import numpy as np
    cdef qdw_plan p
    cdef long psize, osize, r, o
    p.C, p.H, p.W, p.kh, p.kw = 1, x.shape[0], x.shape[1], w.shape[0], w.shape[1]
    p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.oh, p.ow = geom
    p.xzp, p.row = x_zp, &qdw_emu_row
    qdw_setup(&p, &psize, &osize)
    plane = np.zeros(psize, np.int16)
    wp = np.zeros(p.npair, np.int32)
    cdef int16_t[::1] pv = plane
    cdef int32_t[::1] wv = wp
    qdw_pack_weights(&p, &w[0, 0], &wv[0])
    qdw_pack_plane_c(&p, &x[0, 0], &pv[0])
    cdef long rows = 1 if p.flat else p.oh
    cdef long n = (p.oh - 1) * p.Wl + p.ow if p.flat else p.ow
    cdef long opitch = p.Wl if p.flat else (p.ow + 15) // 16 * 16
    acc = np.zeros(osize + 64, np.int32)
    cdef int32_t[::1] av = acc
    qdw_emu_sums(which, &p, &pv[0], rows, <long>p.sh * p.Wl, n, opitch, &wv[0], &av[0])
    out = np.empty((p.oh, p.ow), np.int32)
    for r in range(p.oh):
        for o in range(p.ow):
            out[r, o] = acc[r * opitch + o]
    return out


def dw_layer(int which, const uint8_t[:, :, ::1] x, const int8_t[:, :, ::1] w, geom, int x_zp,
             const int32_t[::1] bias, const float[::1] mult, int yzp, int lo, int hi):
    """The int8 depthwise layer on the kernels the native AVX-512 VNNI plan runs (the u8
    plane for 3x3 plans, else narrow int16 rows), on SIMDe (which 0; 1: the u8-plane
    kernel's broken twin, 3x3 plans only): x (C, H, W) u8, w (C, kh, kw) s8, geom (sh, sw,
    ph, pw, dh, dw, oh, ow), per-channel bias / mult, integer epilogue -> (y (C, oh, ow)
    u8, whether the plan read the u8 plane)."""
    import numpy as np
    cdef qdw_plan p
    cdef long psize, osize
    p.C, p.H, p.W, p.kh, p.kw = x.shape[0], x.shape[1], x.shape[2], w.shape[1], w.shape[2]
    p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.oh, p.ow = geom
    p.xzp, p.row = x_zp, &qdw_emu_row
    qdw_setup(&p, &psize, &osize)
    if which == 1 and not p.u8rows:
        raise ValueError("the broken twin is the u8-plane kernel's: a 3x3 plan")
    if bias.shape[0] < p.C or mult.shape[0] < p.C:
        raise ValueError("bias / mult: one per channel")
    plane = np.zeros(psize, np.int16)
    obuf = np.zeros(osize, np.int32)
    wp = np.zeros(p.C * p.npair, np.int32)
    y = np.zeros((p.C, p.oh, p.ow), np.uint8)
    cdef int16_t[::1] pv = plane
    cdef int32_t[::1] ov = obuf, wv = wp
    cdef uint8_t[:, :, ::1] yv = y
    qdw_pack_weights(&p, &w[0, 0, 0], &wv[0])
    if qdw_emu_layer(which, &p, &x[0, 0, 0], &w[0, 0, 0], &wv[0], &bias[0], &mult[0], yzp, lo,
                     hi, &yv[0, 0, 0], &pv[0], &ov[0]):
        raise ValueError("rows of >= 16 outputs: their sums are dw_sums'")
    return y, bool(p.u8rows)


include "_qgemm_implicit.pxi"
