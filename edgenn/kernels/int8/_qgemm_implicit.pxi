# The implicit-GEMM conv tiles' test entries (QVC_IMPLICIT, _qgemm_vnni_conv.h; the
# rows-in-lanes tail, _qgemm_vnni_tail.h; the 7-pixel x 32-channel tile, _qgemm_vnni_pix.h),
# included by _qgemm.pyx (native) and _qgemm_emu.pyx (SIMDe): vnni_tiles calls them.
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
    qvi_ukr_t qvi_pick(int nrows, int npan)


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


cdef extern from *:
    """
    /* the 7 x 32 tile's sums (broken: the emulated build's twin, where QVP_BROKEN) */
    static int qvp_test(long G, const uint8_t *w, const uint8_t *xp, const long *goff,
                        int32_t *out, int broken) {
    #if QV_HAVE
    #ifdef QVP_BROKEN
        if (broken) {
            qvp_broken_acc(G, w, xp, goff, NULL, out);
            return 0;
        }
    #endif
        if (broken) return -1;
        qvp_acc(G, w, xp, goff, NULL, out);
        return 0;
    #else
        (void)G; (void)w; (void)xp; (void)goff; (void)out; (void)broken;
        return -1;
    #endif
    }
    """
    int qvp_test(long G, const uint8_t *w, const uint8_t *xp, const long *goff,
                 int32_t *out, int broken)


def vnni_pixel_tile_into(const uint8_t[::1] w, const uint8_t[::1] b, const long[::1] goff,
                         long ng, int32_t[::1] out, bint broken=False):
    """Tests (vnni_tiles.pixel_tile checks the sizes): the 7-pixel x 32-channel tile, w
    [ng][32 channels][4], pixel i of group g at b + goff[g] + 4 i -> out [7 pixels][32]."""
    if qvp_test(ng, &w[0], &b[0], &goff[0], &out[0], broken):
        raise ValueError("no such kernel in this build")
