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


cdef extern from *:
    """
    /* patterns of the columns, then the rows-in-lanes sums (broken: the emulated build's
     * twin with one weight operand halved, where QVT_BROKEN defines it) */
    static int qvt_test(long G, const uint8_t *a, const uint8_t *xp, const long *goff, int r,
                        int32_t *pat, int32_t *out, int broken) {
    #if QV_HAVE
        qvt_patterns(G, xp, goff, 0, r, pat);
    #ifdef QVT_BROKEN
        if (broken) {
            qvt_sums_broken(G, a, pat, r, out);
            return 0;
        }
    #endif
        if (broken) return -1;
        qvt_sums(G, a, pat, r, out);
        return 0;
    #else
        (void)G; (void)a; (void)xp; (void)goff; (void)r; (void)pat; (void)out; (void)broken;
        return -1;
    #endif
    }
    """
    int qvt_test(long G, const uint8_t *a, const uint8_t *xp, const long *goff, int r,
                 int32_t *pat, int32_t *out, int broken)


def vnni_tail_into(const uint8_t[::1] a, const uint8_t[::1] b, const long[::1] goff, long ng,
                   int ncols, int32_t[::1] pat, int32_t[::1] out, bint broken=False):
    """Tests (vnni_tiles.tail_tile checks the sizes): the last-columns kernel, columns
    0 .. ncols - 1 of the image b (group g's pixels at b + goff[g]) -> out [6 rows][8]."""
    if qvt_test(ng, &a[0], &b[0], &goff[0], ncols, &pat[0], &out[0], broken):
        raise ValueError("no such kernel in this build")
