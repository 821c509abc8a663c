# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _convdirect.h: direct convolution for few input channels.

    wp = pack_weights(w, tier)           # w (M, C, KH, KW) -> [block][tap][MB]
    run(xp, wp, bias, y, KH, KW, SH, SW, act, lo, hi, tier)   # y (M, OH, OW)

xp (C, Hp, SW * Wq): the padded image with each row split into its SW column phases
(phase p holds padded columns p, p + SW, ...; see _convdirect.h).
"""
import numpy as np
from cython.parallel cimport prange

cdef extern from "_cpu.h" nogil:
    int edgenn_isa_x86(int t)
    int EDGENN_ISA_AVX2, EDGENN_ISA_AVX512

cdef extern from "_convdirect.h" nogil:
    int CD_EMULATED
    ctypedef struct cd_args:
        const float *xp
        const float *wp
        const float *bias
        const float *slope
        float *y
        long C, Hp, Wq, KH, KW, SH, SW, M, OH, OW
        long oh0, oh1
        int act
        float lo, hi
    long cd_mb(int tier)
    long cd_px(int tier)
    void cd_run(const cd_args *a, int tier)
    void cd_fill_phases(const float *x, float *xp, long C, long H, long W, long Hp, long Wq,
                        long pt, long pl, long SW)
    void phases_fill_plane(const float *x, float *xp, long H, long W, long Wq, long pt,
                           long pl, long SW)

EMULATED = bool(CD_EMULATED)
TIER = {"scalar": 0, "avx2": 1, "avx512": 2, "avx512_8x48": 3}
HAVE = {"scalar": True,
        "avx2": EMULATED or bool(edgenn_isa_x86(EDGENN_ISA_AVX2)),
        "avx512": EMULATED or bool(edgenn_isa_x86(EDGENN_ISA_AVX512))}
HAVE["avx512_8x48"] = HAVE["avx512"]
ACT = {"": 0, "Relu": 1, "Clip": 2, "PRelu": 3}


cdef inline long _fill_start(int t, int nt, long oh, long sh, long pt, long h) noexcept nogil:
    """First image row thread t of nt copies: the first row its output rows read (0 for
    the first thread, h past the last), so the threads' ranges partition [0, h)."""
    if t == 0:
        return 0
    if t == nt:
        return h
    return min(h, max(0, t * oh // nt * sh - pt))


def fill_phases(const float[:, :, ::1] x, float[:, :, ::1] xp, long pt, long pl, long sw,
                int threads=1, long sh=1, long oh=0):
    """x (C, H, W) into xp (C, Hp, sw * Wq) as run() reads it: padded (pt + iy, pl + ix)
    at phase (pl + ix) % sw, column (pl + ix) // sw; the borders are not written.
    threads > 1: thread t copies the rows that run(..., threads) reads first for its output
    rows (t * oh // nt ..., stride sh), so each thread finds its share in its own core's
    cache (filled by one thread, the stem conv's two-thread run read half of a 600 KB
    image from the other core: 254 us against 290 on one thread, AMD EPYC 25/17)."""
    cdef long c = x.shape[0], h = x.shape[1], w = x.shape[2]
    if sw < 1 or xp.shape[2] % sw or xp.shape[0] != c or xp.shape[1] < pt + h \
            or pt < 0 or pl < 0 or (pl + w + sw - 1) // sw > xp.shape[2] // sw:
        raise ValueError("fill_phases: xp does not hold the padded image")
    if not (c and h and w):
        return
    cdef int t, nt = max(1, min(threads, oh))
    cdef long lo, hi, k, hp = xp.shape[1], wq = xp.shape[2] // sw
    with nogil:
        if nt == 1:
            cd_fill_phases(&x[0, 0, 0], &xp[0, 0, 0], c, h, w, hp, wq, pt, pl, sw)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                lo = _fill_start(t, nt, oh, sh, pt, h)
                hi = _fill_start(t + 1, nt, oh, sh, pt, h)
                for k in range(c):
                    if hi > lo:
                        phases_fill_plane(&x[k, lo, 0], &xp[k, 0, 0], hi - lo, w, wq, pt + lo,
                                          pl, sw)


def tile(str isa):
    """(channels, pixels) of a tier's register tile."""
    return int(cd_mb(TIER[isa])), int(cd_px(TIER[isa]))


def pack_weights(w, str isa):
    """w (M, C, KH, KW) float32 -> (blocks, C*KH*KW, MB), zero rows past M."""
    mb = tile(isa)[0]
    m = w.shape[0]
    blocks = -(-m // mb)
    t = int(np.prod(w.shape[1:]))
    out = np.zeros((blocks * mb, t), np.float32)
    out[:m] = np.asarray(w, np.float32).reshape(m, t)
    return np.ascontiguousarray(out.reshape(blocks, mb, t).transpose(0, 2, 1))


def run(const float[:, :, ::1] xp, const float[:, :, ::1] wp, bias, float[:, :, ::1] y,
        long kh, long kw, long sh, long sw, str act, float lo, float hi, str isa,
        slope=None, int threads=1):
    """y (M, OH, OW) = act(conv(xp, w) + bias); xp (C, Hp, SW * Wq) padded and split into
    column phases as _convdirect.h says (checked); slope (M,) float32 for act "PRelu";
    threads > 1: the output rows split into that many ranges (OpenMP), the same sums."""
    if isa not in TIER or not HAVE[isa]:
        raise ValueError(f"isa {isa!r}: not one of {tuple(TIER)} or not on this CPU")
    cdef int tier = TIER[isa]
    cdef long px = cd_px(tier), mb = cd_mb(tier)
    cdef long m = y.shape[0], oh = y.shape[1], ow = y.shape[2], c = xp.shape[0]
    if wp.shape[0] * mb < m or wp.shape[1] != c * kh * kw or wp.shape[2] != mb:
        raise ValueError("conv_direct: packed weights do not match")
    if kw > 64 or sw < 1 or sh < 1 or xp.shape[2] % sw or \
            xp.shape[2] // sw < -(-ow // px) * px + (kw - 1) // sw or \
            xp.shape[1] < (oh - 1) * sh + kh:
        raise ValueError("conv_direct: the padded input is too small")
    cdef const float[::1] b
    cdef cd_args a
    a.xp, a.wp, a.y = &xp[0, 0, 0], &wp[0, 0, 0], &y[0, 0, 0]
    a.bias = NULL
    if bias is not None:
        b = bias
        if b.shape[0] < m:
            raise ValueError("conv_direct: bias too short")
        a.bias = &b[0]
    a.C, a.Hp, a.Wq, a.KH, a.KW, a.SH, a.SW = c, xp.shape[1], xp.shape[2] // sw, kh, kw, sh, sw
    a.M, a.OH, a.OW = m, oh, ow
    a.act, a.lo, a.hi = ACT[act], lo, hi
    cdef const float[::1] sl
    a.slope = NULL
    if act == "PRelu":
        if slope is None:
            raise ValueError("conv_direct: PRelu needs its slopes")
        sl = slope
        if sl.shape[0] < m:
            raise ValueError("conv_direct: one PRelu slope per output channel")
        a.slope = &sl[0]
    if m == 0 or oh == 0 or ow == 0:
        return
    a.oh0, a.oh1 = 0, oh
    cdef int t, nt = max(1, min(threads, oh))
    cdef cd_args part
    with nogil:
        if nt == 1:
            cd_run(&a, tier)
        else:
            for t in prange(nt, num_threads=nt, schedule="static"):
                part = a
                part.oh0 = t * oh // nt
                part.oh1 = (t + 1) * oh // nt
                cd_run(&part, tier)
