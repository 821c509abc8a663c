# The implicit-GEMM conv tile's test entry (QVC_IMPLICIT, _qgemm_vnni_conv.h), included
# by _qgemm.pyx (native) and _qgemm_emu.pyx (SIMDe): vnni_tiles.implicit_tile calls it.
cdef extern from *:
    """
    typedef void (*qvi_ukr_t)(long, const uint8_t *, const uint8_t *, const long *, int,
                              int32_t *);
    static qvi_ukr_t qvi_pick(int rows, int npan) {
    #if QV_HAVE
        return qvci_acc[qvc_index(rows, npan)];
    #else
        (void)rows; (void)npan;
        return 0;
    #endif
    }
    """
    ctypedef void (*qvi_ukr_t)(long, const uint8_t *, const uint8_t *, const long *, int,
                               int32_t *)
    qvi_ukr_t qvi_pick(int rows, int npan)


def vnni_implicit_into(const uint8_t[::1] a, const uint8_t[::1] b, const long[::1] goff,
                       long ng, int npan, int32_t[::1] out, int rows=6):
    """Tests (vnni_tiles.implicit_tile checks the sizes): the implicit-GEMM conv tile,
    group g's 32 pixels x 4 bytes at b + goff[g]."""
    qvi_pick(rows, npan)(ng, &a[0], &b[0], &goff[0], npan, &out[0])
