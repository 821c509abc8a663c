# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _convdirect.h: direct convolution for few input channels.

    row = best_row()                     # or any name in rows(): the table (_convdirect.h)
    wp = pack_weights(w, row)            # w (M, C, KH, KW) -> [block][tap][MB]
    buf = np.zeros((threads, C, band_rows(band, SH, KH), SW * Wq), np.float32)
    run_bands(x, buf, wp, bias, y, KH, KW, SH, SW, PT, PL, act, lo, hi, row, None, threads,
              band)                      # y (M, OH, OW)

buf: per thread, a band's padded rows, each split into its SW column phases (phase p holds
padded columns p, p + SW, ...; see _convdirect.h).
"""
from collections import namedtuple

import numpy as np
from cython.parallel cimport prange

from edgenn.kernels.native.tables import Table

include "_cpu.pxi"

include "_epilogue.pxi"

cdef extern from "_convdirect.h" nogil:
    unsigned CD_ACTS
    ctypedef struct cd_args:
        const float *xp
        const float *wp
        const float *bias
        const float *slope
        float *y
        long C, Hp, Wq, KH, KW, SH, SW, M, OH, OW
        long oh0, oh1, xrow0
        int act
        float lo, hi
    ctypedef struct cd_row:
        const char *name
        int isa
        long mb, px
    const cd_row cd_rows[]
    int CD_ROW_COUNT
    void cd_run_bands(const cd_args *a0, const float *x, long H, long W, long pt, long pl,
                      float *buf, long band, const cd_row *row)

ACTIVATIONS = _activations(CD_ACTS)       # _convdirect.h's

# One row of the table (_convdirect.h's cd_rows): name, isa (the tier it needs), the
# register tile mb channels x px pixels, usable (this CPU runs it; all in the emulated build)
Row = namedtuple("Row", "name isa mb px usable")
TABLE = Table("conv_direct", tuple(
    Row(cd_rows[i].name.decode(), edgenn_isa_name(cd_rows[i].isa).decode(), cd_rows[i].mb,
        cd_rows[i].px, bool(edgenn_row_usable(cd_rows[i].isa))) for i in range(CD_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index, best_row = TABLE.usable, TABLE.index, TABLE.best


def tile(str row):
    """(channels, pixels) of a row's register tile."""
    r = ROWS[TABLE.index(row)]
    return r.mb, r.px


def pack_weights(w, str row):
    """w (M, C, KH, KW) float32 -> (blocks, C*KH*KW, MB), zero rows past M."""
    mb = tile(row)[0]
    m = w.shape[0]
    blocks = -(-m // mb)
    t = int(np.prod(w.shape[1:]))
    out = np.zeros((blocks * mb, t), np.float32)
    out[:m] = np.asarray(w, np.float32).reshape(m, t)
    return np.ascontiguousarray(out.reshape(blocks, mb, t).transpose(0, 2, 1))


cdef int _layer(cd_args *a, const float[:, :, ::1] xp, const float[:, :, ::1] wp, bias,
                float[:, :, ::1] y, long kh, long kw, long sh, long sw, str act, float lo,
                float hi, const cd_row *row, slope) except -1:
    """Check run_bands()' arguments and fill a (xp: one thread's band buffer, (C, rows,
    SW * Wq))."""
    cdef long px = row.px, mb = row.mb
    cdef long m = y.shape[0], oh = y.shape[1], ow = y.shape[2], c = xp.shape[0]
    if wp.shape[0] * mb < m or wp.shape[1] != c * kh * kw or wp.shape[2] != mb:
        raise ValueError("conv_direct: packed weights do not match")
    if kw > 64 or sw < 1 or sh < 1 or xp.shape[2] % sw or \
            xp.shape[2] // sw < -(-ow // px) * px + (kw - 1) // sw:
        raise ValueError("conv_direct: the padded input is too small")
    cdef const float[::1] b
    a.xp, a.wp, a.y = &xp[0, 0, 0], &wp[0, 0, 0], &y[0, 0, 0]
    a.bias = NULL
    if bias is not None:
        b = bias
        if b.shape[0] < m:
            raise ValueError("conv_direct: bias too short")
        a.bias = &b[0]
    a.C, a.Hp, a.Wq, a.KH, a.KW, a.SH, a.SW = c, xp.shape[1], xp.shape[2] // sw, kh, kw, sh, sw
    a.M, a.OH, a.OW = m, oh, ow
    a.act, a.lo, a.hi = ACTIVATION_NAMES.index(act), lo, hi
    cdef const float[::1] sl
    a.slope = NULL
    if act == "PRelu":
        if slope is None:
            raise ValueError("conv_direct: PRelu needs its slopes")
        sl = slope
        if sl.shape[0] < m:
            raise ValueError("conv_direct: one PRelu slope per output channel")
        a.slope = &sl[0]
    a.oh0, a.oh1, a.xrow0 = 0, oh, 0
    return 0


def band_rows(long band, long sh, long kh):
    """Padded input rows a band of `band` output rows reads (run_bands' buffer planes)."""
    return (band - 1) * sh + kh


def run_bands(const float[:, :, ::1] x, float[:, :, :, ::1] buf, const float[:, :, ::1] wp,
              bias, float[:, :, ::1] y, long kh, long kw, long sh, long sw, long pt,
              long pl, str act, float lo, float hi, str row, slope=None, int threads=1,
              long band=8):
    """y (M, OH, OW) = act(conv(x, w) + bias) from the image x (C, H, W), zero padding pt
    rows above and pl columns left: per band of `band` output rows, its padded rows filled
    into a buffer (buf (threads, C, band_rows(band, sh, kh), SW * Wq), zero-filled once:
    the borders are never written) and computed while they are in cache; slope (M,)
    float32 for act "PRelu"; threads > 1: output row ranges, a buffer each, the same sums."""
    cdef long c = x.shape[0], h = x.shape[1], w = x.shape[2]
    if buf.shape[1] != c or buf.shape[2] < band_rows(band, sh, kh) or band < 1 \
            or pt < 0 or pl < 0 or (pl + w + sw - 1) // sw > buf.shape[3] // max(sw, 1):
        raise ValueError("conv_direct: the band buffer does not hold the padded rows")
    cdef cd_args a
    cdef const cd_row *r = &cd_rows[row_index(row)]
    _layer(&a, buf[0], wp, bias, y, kh, kw, sh, sw, act, lo, hi, r, slope)
    cdef long oh = y.shape[1]
    if a.M == 0 or oh == 0 or a.OW == 0:    # (rows past the image read as padding)
        return
    cdef int t, nt = max(1, min(threads, oh, buf.shape[0]))
    cdef cd_args part
    with nogil:
        if nt == 1:
            cd_run_bands(&a, &x[0, 0, 0], h, w, pt, pl, &buf[0, 0, 0, 0], band, r)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                part = a
                part.oh0 = t * oh // nt
                part.oh1 = (t + 1) * oh // nt
                cd_run_bands(&part, &x[0, 0, 0], h, w, pt, pl, &buf[t, 0, 0, 0], band, r)
