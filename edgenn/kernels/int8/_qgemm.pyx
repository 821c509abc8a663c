# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of the int8 kernels (_qgemm.h, _qdw.h, epilogue _qepi.h): QConv (group-1 and
grouped, implicit im2col), depthwise QConv and QGemm, each planned once (weights packed,
epilogue constants fixed) and run many times without allocating.

    k = QConvKernel(wpacked, wide, geom, group, M, epi)   # qconv.py prepares the arguments
    k.run(x_u8 (N, C, H, W), y (N, M, OH, OW) u8 or f32, z_u8 or None)
    k = QDepthwiseKernel(w (C, T) int8, geom, x_zp, epi)
    k = QGemmKernel(bpacked, wide, rows, K, N, epi);  k.run(a (rows, K), y (rows, N), z)

epi is a dict (see qgemm.epilogue_args): float_path, per_col, bias (int32), mult (float32),
yzp, lo, hi, out_f32, inv_y, has_z, zzp, zscale, act, p0, p1 [, fadd, post, ps, pb].
row: a name in the family's tables (qgemm_table.h): TABLE for QConv / QGemm, DW_TABLE for
the depthwise kernel; None: the best row this CPU runs without a VNNI tier (base_row()).
"""
from collections import namedtuple

import numpy as np
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t
from libc.string cimport memset

from edgenn.kernels.native.tables import Table

cnp.import_array()

include "_workspace.pxi"
include "_epilogue.pxi"

cdef extern from "_qepi.h" nogil:
    unsigned QE_ACTS
    unsigned QVP_ACTS
    ctypedef struct qe_epi:
        int float_path
        int per_col
        const int32_t *bias
        const float *mult
        const float *fadd
        int32_t yzp, lo, hi
        int out_f32
        float inv_y
        int has_z
        int32_t zzp
        float zscale
        int act
        float p0, p1
        int post
        float ps, pb

include "_cpu.pxi"

cdef extern from "_qgemm.h" nogil:
    int QG_MR, QG_NR, QVT_MAX, QVP_CH
    ctypedef struct qg_conv:
        const uint8_t *x
        int C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow
        uint8_t pad
        uint8_t *xp
        int Hp, Wp
        int phased, Hq, Wq
        int nc4, shifted
    long qg_conv_padded_size(qg_conv *g)
    long qg_conv_shifted_size(const qg_conv *g)
    long qg_conv_phase_size(qg_conv *g)
    long qg_conv_pitch(const qg_conv *g)
    ctypedef struct qg_excess_table:
        const int32_t *start
        const int32_t *group
        const uint8_t *data
    ctypedef struct qg_row:
        const char *name
        int isa, mr, nr, exact, ch_block
        void *conv_implicit
    ctypedef struct qg_conv_plan:
        long M, K, N, G
        const qg_row *row
        int wide, direct
        long nc
        qg_excess_table excess
        int flat
        const long *row_off
        long Nf
        const long *goff
    ctypedef struct qg_gemm_plan:
        long M, K, N, G, NP
        const qg_row *row
        int wide
        long mc
        qg_excess_table excess
        long pb, pe
    long qg_conv_block(long N, long G)
    long qg_conv_workspace(const qg_conv_plan *p)
    void qg_conv_fill_padded(const qg_conv *g)
    void qg_conv_cols(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                      const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, long jb, long je)
    void qg_conv_run(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                     const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, void *yf,
                     uint8_t *zf)
    void qg_conv_fill_padded_part(const qg_conv *g, int t, int nt)
    void qg_conv_rows_part(const qg_conv_plan *p, const uint8_t *wp, const qg_conv *g,
                           const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws, int t,
                           int nt)
    void qg_conv_expand_part(const qg_conv_plan *p, const qg_conv *g, const uint8_t *z,
                             uint8_t *zf, int t, int nt)
    void qg_conv_compact_part(const qg_conv_plan *p, const qg_conv *g, const char *yf,
                              char *y, long es, int t, int nt)
    void qg_conv_row_offsets(const qg_conv *g, long K, long *off)
    long qg_gemm_block(long M, long G)
    long qg_gemm_workspace(const qg_gemm_plan *p)
    void qg_gemm_run(const qg_gemm_plan *p, const uint8_t *bp, const uint8_t *a, long lda,
                     const qe_epi *e, void *y, const uint8_t *z, uint8_t *ws)

include "_qdw_decl.pxi"

cdef extern from "_qdw.h" nogil:
    void qdw_run_channels(const qdw_plan *p, const uint8_t *x, const int8_t *w,
                          const int32_t *wp, const qe_epi *e, void *y, const uint8_t *z,
                          int16_t *P, int32_t *obuf, int c0, int c1)
    void qdw_run(const qdw_plan *p, const uint8_t *x, const int8_t *w, const int32_t *wp,
                 const qe_epi *e, void *y, const uint8_t *z, int16_t *P, int32_t *obuf)

MR, NR = QG_MR, QG_NR
FLAT_WASTE = 0.5     # flat QConv plans where the dropped columns are <= this share of a row
# implicit-GEMM plans on the shifted image where it saves >= this share of the products
# (a smaller saving only breaks even with the shifted image's own cost)
EXACT_GAIN = 0.04
TAIL_COLUMNS = QVT_MAX   # a block's last columns computed with the rows in the lanes

cdef extern from "qgemm_table.h" nogil:
    const qg_row qg_rows[]
    const qdw_row qdw_rows[]
    int QG_ROW_COUNT, QDW_ROW_COUNT

# A row of the GEMM table (qg_rows): name, isa (the tier it needs), its register tile mr x
# nr, exact (its tiles take any 8-bit weights as they are: no wide / excess split),
# pixel_tiles (QConv only, in 7 x 32 tiles: weights in 32-channel blocks), implicit (QConv
# plans that read the image in place), usable (this CPU runs it: the one probe,
# EDGENN_MAX_ISA applied)
Row = namedtuple("Row", "name isa mr nr exact pixel_tiles implicit usable")
# A row of the depthwise table (qdw_rows): name, isa, usable
DwRow = namedtuple("DwRow", "name isa usable")
TABLE = Table("qgemm", tuple(
    Row(qg_rows[i].name.decode(), edgenn_isa_name(qg_rows[i].isa).decode(), qg_rows[i].mr,
        qg_rows[i].nr, bool(qg_rows[i].exact), qg_rows[i].ch_block != QG_MR,
        qg_rows[i].conv_implicit != NULL, bool(edgenn_isa_usable(qg_rows[i].isa)))
    for i in range(QG_ROW_COUNT)))
DW_TABLE = Table("qconv_dw", tuple(
    DwRow(qdw_rows[i].name.decode(), edgenn_isa_name(qdw_rows[i].isa).decode(),
          bool(edgenn_isa_usable(qdw_rows[i].isa))) for i in range(QDW_ROW_COUNT)))
ROWS, DW_ROWS = TABLE.rows, DW_TABLE.rows
rows, row_index = TABLE.usable, TABLE.index
dw_rows, dw_row_index = DW_TABLE.usable, DW_TABLE.index


def has_vnni(str tier) -> bool:
    """Whether this CPU runs a row of the VNNI tier ("avx512vnni" / "avxvnni")."""
    return any(r.isa == tier for r in rows())


def base_row(dw=False) -> str:
    """The best row this CPU runs without a VNNI tier (the AVX2 one, else the portable):
    the int8 family's default."""
    names = [r.name for r in (dw_rows() if dw else rows()) if not r.isa.endswith("vnni")]
    return names[len(names) - 1]       # (no negative index: wraparound is off here)


cdef qg_conv _geometry(geom, long group=1):
    """The conv geometry (QConvKernel's tuple: C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh,
    ow) of one group, every other field zero."""
    cdef qg_conv g
    memset(&g, 0, sizeof(g))
    (g.C, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.oh, g.ow) = geom
    g.C = g.C // group
    return g


def nc4_image(cnp.ndarray x, geom, int pad, bint shifted):
    """Tests: the implicit GEMM's image of x (C, H, W) uint8 (C a multiple of 4) for the
    conv geometry geom (QConvKernel's), the borders holding pad -> stride 1: (C/4, Hp, Wp,
    4), or shifted: (C/4, sh, kw, Hq, ow, 4); the bytes its tiles read, filled as a call
    does."""
    cdef qg_conv g = _geometry(geom)
    if x.dtype != np.uint8 or x.ndim != 3 or (x.shape[0], x.shape[1], x.shape[2]) != \
            (g.C, g.H, g.W) or g.C % 4 or (not shifted and (g.sh != 1 or g.sw != 1)):
        raise ValueError("nc4_image: x (C, H, W) uint8 with 4k channels (strided: shifted)")
    x = np.ascontiguousarray(x)
    cdef long size = qg_conv_padded_size(&g)
    g.nc4, g.shifted, g.pad = 1, shifted, pad
    if shifted:
        size = qg_conv_shifted_size(&g)
    out = np.full(size, pad, np.uint8)
    g.x = <const uint8_t *>cnp.PyArray_DATA(x)
    g.xp = <uint8_t *>cnp.PyArray_DATA(out)
    qg_conv_fill_padded(&g)
    if shifted:
        return out[:size - 64].reshape(g.C // 4, g.sh, g.kw, g.Hq, g.ow, 4)
    return out[:size - 64].reshape(g.C // 4, g.Hp, g.Wp, 4)


def implicit_ok(geom, long group, str row) -> bool:
    """Where the implicit GEMM (no im2col block: QConvKernel(implicit=True)) applies:
    group-1 convs with 4k channels on a row with an implicit GEMM, stride 1 where the default
    flat plan would run, strided ones on the shifted image. With no block to pack, it beats the
    packed block on 3x3 convs, strided ones most."""
    cdef qg_conv g = _geometry(geom, group)
    r = ROWS[row_index(row)]
    if group != 1 or g.C % 4 or not r.implicit:
        return False
    if g.sh > 1 or g.sw > 1:     # the shifted image (exact) in place of the packed phases
        return g.sh <= 64 and g.sw <= 16
    if g.kh == 1 and g.kw == 1 and g.ph == 0 and g.pw == 0 and g.oh == g.H and g.ow == g.W:
        return False                                # direct: read in place already
    qg_conv_padded_size(&g)
    return _flat_by_default(&g)


cdef bint _flat_by_default(qg_conv *g):
    """The default flat rule (Hp, Wp computed): the dropped columns are at most FLAT_WASTE
    of a row."""
    return qg_conv_pitch(g) - g.ow <= FLAT_WASTE * g.ow


cdef double _tile_cost(long n):
    """zmm products per K group of a 6-row panel over n columns (qv_conv_tiles: 32-column
    tiles; of the rest, 16 columns on one zmm and a last <= 8 on one ymm, half the cost,
    or <= TAIL_COLUMNS with the rows in the lanes, 3 products per 8 groups a column:
    _qgemm_vnni_tail.h)."""
    cdef long rem = n % 32
    cdef long panels = (rem + 7) // 8       # of 8 columns: 4 -> 32, 3 -> 16 + tail, 2 -> 16
    cdef long tail = rem - 16 if panels == 3 else rem if panels == 1 else 0
    return n // 32 * 2 + (2 if panels == 4 else 1 if panels >= 2 else 0) \
        + (tail / 16.0 if tail <= TAIL_COLUMNS else 0.5 if tail else 0)


cdef bint _exact_pays(qg_conv *g, long nf):
    """Whether the implicit GEMM takes the shifted image (kw copies, the columns exactly
    the output's pixels) over the flat one (nf columns, pitch - ow dropped per row): where
    it saves at least EXACT_GAIN of the products. It writes kw copies of the image per
    call instead of one."""
    return _tile_cost(<long>g.oh * g.ow) <= (1 - EXACT_GAIN) * _tile_cost(nf)


cdef const qg_row *_gemm_row(str row, bint wide, excess) except NULL:
    """The table's row `row` (None: base_row()); a VNNI row (the vpdpbusd tiles: exact on
    any 8-bit weights) takes the plain u8 path's weights only."""
    cdef const qg_row *r = &qg_rows[row_index(row or base_row())]
    if r.exact and (wide or excess is not None):
        raise ValueError(f"row {row!r} takes the weights as they are (no wide / excess)")
    return r


ACTIVATIONS = _activations(QE_ACTS)        # the float epilogue's (_qepi.h)
PIXEL_TILE_ACTIVATIONS = _activations(QVP_ACTS)   # the 7 x 32 tiles', in registers

cdef int FLAGS = cnp.NPY_ARRAY_C_CONTIGUOUS


cdef object _fill_epi(qe_epi *e, dict epi):
    """Copy the epilogue dict into e; -> the arrays e points into (keep them alive):
    (bias, mult, fadd or None)."""
    bias = np.ascontiguousarray(epi["bias"], np.int32)
    mult = np.ascontiguousarray(epi["mult"], np.float32)
    fadd = epi.get("fadd")
    if fadd is not None:
        fadd = np.ascontiguousarray(fadd, np.float32)
        if fadd.size < mult.size:
            raise ValueError(f"float bias of {fadd.size} values, expected {mult.size}")
    e.float_path = epi["float_path"]
    e.per_col = epi["per_col"]
    e.bias = <const int32_t *>cnp.PyArray_DATA(bias)
    e.mult = <const float *>cnp.PyArray_DATA(mult)
    e.fadd = NULL if fadd is None else <const float *>cnp.PyArray_DATA(fadd)
    e.yzp, e.lo, e.hi = epi["yzp"], epi["lo"], epi["hi"]
    e.out_f32 = epi["out_f32"]
    e.inv_y = epi["inv_y"]
    e.has_z = epi["has_z"]
    e.zzp = epi["zzp"]
    e.zscale = epi["zscale"]
    e.act = ACTIVATION_NAMES.index(epi["act"])
    e.p0, e.p1 = epi["p0"], epi["p1"]
    e.post = epi.get("post", 0)
    e.ps, e.pb = epi.get("ps", 1.0), epi.get("pb", 0.0)
    return (bias, mult, fadd)


cdef object _set_excess(qg_excess_table *t, object excess, long panels, long bytes):
    """excess = None or (start int32 (panels + 1,), group int32, data uint8): the excess
    weights per constant panel (qgemm.excess_table); -> the arrays to keep alive."""
    t.start = NULL
    t.group = NULL
    t.data = NULL
    if excess is None:
        return None
    start, group, data = (np.ascontiguousarray(excess[0], np.int32),
                          np.ascontiguousarray(excess[1], np.int32),
                          np.ascontiguousarray(excess[2], np.uint8))
    if start.size != panels + 1 or start[0] != 0 or np.any(np.diff(start) < 0) \
            or start[start.size - 1] != group.size or data.size != group.size * bytes:
        raise ValueError("malformed excess table")
    t.start = <const int32_t *>cnp.PyArray_DATA(start)
    t.group = <const int32_t *>cnp.PyArray_DATA(group)
    t.data = <const uint8_t *>cnp.PyArray_DATA(data)
    return (start, group, data)


cdef int _check(cnp.ndarray a, int typenum, long size, str what) except -1:
    if not (cnp.PyArray_TYPE(a) == typenum and cnp.PyArray_CHKFLAGS(a, FLAGS)
            and cnp.PyArray_SIZE(a) == size):
        want = "float32" if typenum == cnp.NPY_FLOAT32 else "uint8"
        raise ValueError(f"{what}: expected a C-contiguous {want} array of {size} elements, "
                         f"got {a.dtype} {(<object>a).shape}")
    return 0


cdef inline cnp.ndarray _contig(cnp.ndarray a):
    """a itself when C-contiguous, else a contiguous copy (a strided view: one copy)."""
    if a is None or cnp.PyArray_CHKFLAGS(a, FLAGS):
        return a
    return np.ascontiguousarray(a)



cdef const uint8_t *_conv_io(cnp.ndarray x, cnp.ndarray y, cnp.ndarray z, long n, long xsize,
                             long ysize, bint out_f32, bint has_z) except? NULL:
    """Check a QConv call's arrays (dtype, size); -> the residual's data or NULL."""
    _check(x, cnp.NPY_UINT8, n * xsize, "QConv x")
    _check(y, cnp.NPY_FLOAT32 if out_f32 else cnp.NPY_UINT8, n * ysize, "QConv y")
    if not has_z:
        return NULL
    if z is None:
        raise ValueError("QConv: residual z missing")
    _check(z, cnp.NPY_UINT8, n * ysize, "QConv z")
    return <const uint8_t *>cnp.PyArray_DATA(z)

cdef class DynamicScale:
    """Per-call activation scale / zero point (DynamicQuantizeLinear's outputs): before each
    run the epilogue's per-channel constants become mult[c] = a_scale * w_scale[c] (float32,
    as the reference) and bias[c] = B[c] - a_zp * wsum[c] (int32 wrap-around, as the sums).
    wsum: the weights' sums when the kernel's sums are over the raw u8 input, zeros when
    the kernel subtracts the zero point itself (depthwise)."""
    cdef cnp.ndarray wscale, wsum, bias
    cdef readonly long n

    def __init__(self, long n32, w_scale, wsum, bias):
        self.n = n32
        self.wscale = np.zeros(n32, np.float32)
        self.wscale[:np.size(w_scale)] = np.asarray(w_scale, np.float32).reshape(-1)
        self.wsum = np.zeros(n32, np.int32)
        self.wsum[:np.size(wsum)] = np.asarray(wsum).reshape(-1).astype(np.int32)
        self.bias = np.zeros(n32, np.int32)
        self.bias[:np.size(bias)] = np.asarray(bias).reshape(-1).astype(np.int32)

    @property
    def nbytes(self):
        """Bytes of the per-call constants (mult float32, bias int32) in a workspace."""
        return self.n * 8

    cdef void apply(self, qe_epi *e, float xs, int32_t xzp) noexcept nogil:
        cdef float *mult = <float *>e.mult
        cdef int32_t *bias = <int32_t *>e.bias
        cdef const float *ws = <const float *>cnp.PyArray_DATA(self.wscale)
        cdef const int32_t *wsum = <const int32_t *>cnp.PyArray_DATA(self.wsum)
        cdef const int32_t *b = <const int32_t *>cnp.PyArray_DATA(self.bias)
        cdef long c
        for c in range(self.n):
            mult[c] = xs * ws[c]
            bias[c] = <int32_t>(<unsigned int>b[c] - <unsigned int>xzp * <unsigned int>wsum[c])


cdef object _dynamic_args(DynamicScale dyn, a_scale, a_zp, str what):
    """(a_scale, a_zp) as C scalars, checked: a dynamic kernel needs both."""
    if dyn is None:
        return 0.0, 0
    if a_scale is None or a_zp is None:
        raise ValueError(f"{what}: this kernel takes a_scale and a_zp per call")
    return float(a_scale), int(a_zp)


cdef inline long _dyn_bytes(DynamicScale dyn):
    return 0 if dyn is None else dyn.n * 8


cdef inline void _dyn_epi(DynamicScale dyn, qe_epi *e, char *at, float xs, int32_t xzp) noexcept nogil:
    """e's mult / bias -> this call's constants, computed into the workspace at `at`."""
    e.mult = <const float *>at
    e.bias = <const int32_t *>(at + dyn.n * 4)
    dyn.apply(e, xs, xzp)


cdef class QConvKernel:
    """Group-1 or grouped QConv through the packed int8 GEMM. wpacked: the weights of all
    groups, each packed by qgemm.pack_a (uint8 view); geom = (C, H, W, kh, kw, sh, sw, ph,
    pw, dh, dw, oh, ow) of the whole image; M = all output channels."""
    cdef qg_conv_plan plan
    cdef qg_conv geo
    cdef qe_epi epi
    cdef object keep
    cdef DynamicScale dyn
    cdef object own_ws, own_pad
    cdef long group, Mtot, Ctot, gstride, xsize, ysize, wsize, chunk, padsize, flatsize
    cdef long zflatsize
    cdef int out_f32, threads, split_m
    cdef const qg_row *row

    def __init__(self, cnp.ndarray wpacked, bint wide, geom, long group, long M, dict epi,
                 uint8_t x_zp, str row=None, int threads=1, excess=None, flat=None,
                 bint implicit=False, exact=None, split_channels=None):
        self.geo = _geometry(geom, group)
        self.group, self.Mtot, self.Ctot = group, M, geom[0]
        self.geo.pad = x_zp
        self.plan.M = M // group
        self.plan.K = <long>self.geo.C * self.geo.kh * self.geo.kw
        self.plan.N = <long>self.geo.oh * self.geo.ow
        self.plan.wide = wide
        self.plan.G = (self.plan.K + (1 if wide else 3)) // (2 if wide else 4)
        self.plan.direct = (self.geo.kh == 1 and self.geo.kw == 1 and self.geo.sh == 1
                            and self.geo.sw == 1 and self.geo.ph == 0 and self.geo.pw == 0
                            and self.geo.oh == self.geo.H and self.geo.ow == self.geo.W)
        self.row = _gemm_row(row, wide, excess)
        self.plan.row = self.row
        # a pixel-tile row (qconv_u8s8_7x32): the implicit GEMM on the shifted image in
        # 7-pixel x 32-channel tiles (_qgemm_vnni_pix.h), 1x1 convs included (their image
        # laid out 4 channels per pixel too); wpacked in 32-channel blocks (pack_blocks32)
        cdef bint pixel_tiles = self.row.ch_block != QG_MR
        if pixel_tiles:
            if not (group == 1 and self.geo.C % 4 == 0):
                raise ValueError("pixel tiles: group-1 convs of 4k channels")
            self.plan.direct = 0
            implicit, exact, flat = True, True, True
        # the padded image (per context): borders hold the zero point, the interior is
        # copied per call; a 64-byte header says which zero point the borders hold
        self.padsize = 0 if self.plan.direct else qg_conv_padded_size(&self.geo)
        # flat (one group): im2col rows read in place over the padded width (strided
        # convs: over their phase planes' width), the pitch - ow columns between rows
        # computed and dropped (a residual is first copied into the same layout). By
        # default where they are at most FLAT_WASTE of a row; flat=True / False forces it.
        can_flat = (not self.plan.direct and group == 1
                    and self.geo.sh <= 64 and self.geo.sw <= 16)   # qg_conv_fill_phases' tables
        if flat is None:
            flat = can_flat and _flat_by_default(&self.geo)
        elif flat and not can_flat:
            raise ValueError("flat: group-1 convs only")
        self.geo.phased = flat and (self.geo.sh > 1 or self.geo.sw > 1)
        if self.geo.phased:
            self.padsize = qg_conv_phase_size(&self.geo)
        self.plan.flat = flat
        row_off = np.zeros(self.plan.K if flat else 1, np.int64)
        if flat:
            qg_conv_row_offsets(&self.geo, self.plan.K, <long *>cnp.PyArray_DATA(row_off))
        self.plan.row_off = <const long *>cnp.PyArray_DATA(row_off)
        self.plan.Nf = (<long>(self.geo.oh - 1) * qg_conv_pitch(&self.geo) + self.geo.ow
                        if flat else self.plan.N)
        # implicit GEMM (the weights' K ordered (c / 4, tap, c % 4): qconv.implicit_rows):
        # the padded image 4 channels per pixel, each group's pixels read where they lie
        goff = None
        if implicit:
            strided = self.geo.sh > 1 or self.geo.sw > 1
            if not (flat and group == 1 and self.geo.C % 4 == 0
                    and self.row.conv_implicit != NULL and not wide):
                raise ValueError("implicit GEMM: flat group-1 convs of 4k channels on AVX-512 "
                                 "VNNI")
            if strided and exact is False:
                raise ValueError("implicit GEMM: a strided conv's plan is exact")
            self.geo.nc4, self.geo.phased = 1, 0
            self.geo.shifted = (strided or _exact_pays(&self.geo, self.plan.Nf)
                                if exact is None else exact)
            taps = [(ti * self.geo.dh, tj) for ti in range(self.geo.kh)
                    for tj in range(self.geo.kw)]
            if self.geo.shifted:   # the columns are the output's pixels
                self.padsize = qg_conv_shifted_size(&self.geo)
                self.plan.Nf = self.plan.N
                sh, kw, rows = self.geo.sh, self.geo.kw, <long>self.geo.Hq * self.geo.ow * 4
                goff = np.array([((q * sh + ri % sh) * kw + tj) * rows
                                 + ri // sh * self.geo.ow * 4
                                 for q in range(self.geo.C // 4) for ri, tj in taps], np.int64)
            else:
                goff = np.array([((q * self.geo.Hp + ri) * self.geo.Wp + tj * self.geo.dw) * 4
                                 for q in range(self.geo.C // 4) for ri, tj in taps], np.int64)
            self.plan.goff = <const long *>cnp.PyArray_DATA(goff)
            # a last tile reads up to 7 pixels (28 bytes) past the last quad's plane: inside
            # the padded size's 64 bytes of slack; 192 more kept as a margin
            self.padsize += 192
        elif exact:
            raise ValueError("exact: implicit-GEMM plans only")
        self.out_f32 = epi["out_f32"]
        # the computed columns, unless they are the output's own layout (pitch == ow)
        self.flatsize = (self.plan.M * self.plan.Nf * (4 if self.out_f32 else 1) + 63) // 64 * 64 \
            if flat and self.plan.Nf != self.plan.N else 0
        self.zflatsize = (self.plan.M * self.plan.Nf + 63) // 64 * 64 \
            if self.flatsize and epi["has_z"] else 0
        self.plan.nc = qg_conv_block(self.plan.Nf, self.plan.G)
        rows = self.row.ch_block   # the weights' panels / blocks of channels
        self.gstride = (self.plan.M + rows - 1) // rows * self.plan.G * rows * 4
        wp = np.ascontiguousarray(wpacked).view(np.uint8).ravel()
        if wp.size != self.gstride * group:
            raise ValueError(f"packed weights: {wp.size} bytes, expected {self.gstride * group}")
        if excess is not None and (group != 1 or wide):
            raise ValueError("excess weights: group-1 u8-path convs only")
        ex = _set_excess(&self.plan.excess, excess, (self.plan.M + QG_MR - 1) // QG_MR,
                         QG_MR * 4)
        self.keep = (wp, _fill_epi(&self.epi, epi), ex, row_off, goff)
        # threads > 1: pixel ranges of whole QG_NR panels, one workspace each; or, where
        # the weights outweigh the columns (M > Nf: each thread reads all M x K weight
        # bytes when the pixels are split, all K x Nf column bytes when the channels are),
        # channel ranges of whole 6-row panels (split_channels: True / False forces it)
        panels = (self.plan.Nf + QG_NR - 1) // QG_NR
        mpanels = (self.plan.M + rows - 1) // rows
        if split_channels is None:
            split_channels = self.plan.M > self.plan.Nf
        self.split_m = threads > 1 and bool(split_channels) and mpanels >= 2
        self.threads = max(1, min(threads, mpanels if self.split_m else panels // 2))
        self.chunk = (panels + self.threads - 1) // self.threads * QG_NR
        self.wsize = (qg_conv_workspace(&self.plan) + 63) // 64 * 64
        self.own_ws = self.own_pad = None
        self.geo.xp = NULL
        self.xsize = self.Ctot * self.geo.H * self.geo.W
        self.ysize = M * self.plan.N

    @property
    def splits_channels(self):
        """Its threads split the output channels (else the pixels, or one thread)."""
        return bool(self.split_m)

    @property
    def simd(self):
        """The instruction-set tier of its row (reports)."""
        return edgenn_isa_name(self.row.isa).decode()

    @property
    def row_name(self):
        """The name of the table row it runs."""
        return self.row.name.decode()

    @property
    def workspace_bytes(self):
        """Transient workspace of one call: the GEMM panels per thread (+ the dynamic
        epilogue's constants)."""
        return self.wsize * self.threads + _dyn_bytes(self.dyn)

    @property
    def padded_bytes(self):
        """Persistent workspace (kept between the calls of one context, zeroed at first):
        the zero-point padded image and its header, then (flat plans) the computed
        columns and the residual in their layout; 0 for direct 1x1 convs."""
        return (64 + (self.padsize + 63) // 64 * 64 + self.flatsize + self.zflatsize
                if self.padsize else 0)

    @property
    def flat(self):
        return bool(self.plan.flat)

    @property
    def plan_groups(self):
        """K groups of 4 bytes (of 2, wide) of the packed weights' rows."""
        return self.plan.G

    @property
    def exact(self):
        """Whether the plan computes exactly the output's pixels (the shifted image)."""
        return bool(self.geo.shifted)

    def set_dynamic(self, w_scale, wsum, bias):
        """Per-call x_scale / x_zp from now on (see DynamicScale): w_scale, wsum, bias (M,)."""
        if not self.epi.float_path:
            raise ValueError("a per-call x_scale needs the float epilogue")
        self.dyn = DynamicScale(self.keep[1][1].size, w_scale, wsum, bias)

    def run(self, cnp.ndarray x, cnp.ndarray y, cnp.ndarray z=None, a_scale=None, a_zp=None,
            ws=None, xpad=None):
        """x (n, C, H, W) uint8, y (n, M, OH, OW) uint8 or float32, z like y (uint8) or None;
        all C-contiguous. a_scale / a_zp: x's scale and zero point, after set_dynamic only
        (a new zero point refills the padded image's borders). ws / xpad: the caller's
        workspaces of workspace_bytes / padded_bytes (None: the object's own)."""
        cdef float xs
        cdef int32_t xzp
        xs, xzp = _dynamic_args(self.dyn, a_scale, a_zp, "QConv")
        if ws is None:
            if self.own_ws is None:
                self.own_ws = _own_ws(self.workspace_bytes)
            ws = self.own_ws
        cdef char *wsb = _ws_data(ws, self.workspace_bytes, "QConv")
        cdef uint8_t *pb = NULL
        cdef char *yf = NULL
        cdef uint8_t *zf = NULL
        if self.padsize:
            if xpad is None:
                if self.own_pad is None:
                    self.own_pad = _own_ws(self.padded_bytes)
                xpad = self.own_pad
            pb = <uint8_t *>_ws_data(xpad, self.padded_bytes, "QConv padded image")
        cdef qe_epi e = self.epi
        cdef qg_conv g = self.geo
        if self.dyn is not None:
            _dyn_epi(self.dyn, &e, wsb + self.wsize * self.threads, xs, xzp)
            g.pad = <uint8_t>xzp
        cdef const int32_t *bias0 = e.bias
        cdef const float *mult0 = e.mult
        if pb != NULL:
            if pb[0] != 1 or pb[1] != g.pad:      # first call of this context, or a new zp
                memset(pb + 64, g.pad, self.padsize)
                pb[0], pb[1] = 1, g.pad
            g.xp = pb + 64
            if self.flatsize:
                yf = <char *>pb + 64 + (self.padsize + 63) // 64 * 64
                zf = <uint8_t *>yf + self.flatsize
        x, z = _contig(x), _contig(z)
        cdef long n = x.shape[0] if x.ndim else 0
        cdef const uint8_t *zp = _conv_io(x, y, z, n, self.xsize, self.ysize, self.out_f32,
                                          self.epi.has_z)
        cdef const uint8_t *xp = <const uint8_t *>cnp.PyArray_DATA(x)
        cdef char *yp = <char *>cnp.PyArray_DATA(y)
        cdef const uint8_t *wp = <const uint8_t *>cnp.PyArray_DATA(self.keep[0])
        cdef uint8_t *wsu = <uint8_t *>wsb
        cdef long b, gi, es = 4 if self.out_f32 else 1
        cdef long xg = <long>self.geo.C * self.geo.H * self.geo.W
        cdef long yg = self.plan.M * self.plan.N
        cdef int t
        cdef const uint8_t *zc
        with nogil:
            for b in range(n):
                for gi in range(self.group):
                    g.x = xp + b * self.xsize + gi * xg
                    e.bias = bias0 + gi * self.plan.M
                    e.mult = mult0 + gi * self.plan.M
                    if self.epi.fadd != NULL:
                        e.fadd = self.epi.fadd + gi * self.plan.M
                    zc = zp + b * self.ysize + gi * yg if zp != NULL else NULL
                    if self.threads == 1:
                        qg_conv_run(&self.plan, wp + gi * self.gstride, &g, &e,
                                    yp + (b * self.ysize + gi * yg) * es, zc, wsu, yf, zf)
                        continue
                    # the padded image and the residual's flat copy: each thread its share
                    # of the channels (copies on one thread would leave the others idle
                    # and undo much of the split's gain)
                    if not self.plan.direct or (yf != NULL and zc != NULL):
                        for t in prange(self.threads, num_threads=self.threads,
                                        schedule="static"):
                            if not self.plan.direct:
                                qg_conv_fill_padded_part(&g, t, self.threads)
                            if yf != NULL and zc != NULL:
                                qg_conv_expand_part(&self.plan, &g, zc, zf, t, self.threads)
                    if yf != NULL and zc != NULL:
                        zc = zf
                    for t in prange(self.threads, num_threads=self.threads, schedule="static"):
                        if self.split_m:
                            qg_conv_rows_part(&self.plan, wp + gi * self.gstride, &g, &e,
                                              yf if yf != NULL
                                              else yp + (b * self.ysize + gi * yg) * es,
                                              zc, wsu + t * self.wsize, t, self.threads)
                        else:
                            qg_conv_cols(&self.plan, wp + gi * self.gstride, &g, &e,
                                         yf if yf != NULL
                                         else yp + (b * self.ysize + gi * yg) * es,
                                         zc, wsu + t * self.wsize, t * self.chunk,
                                         min(self.plan.Nf, (t + 1) * self.chunk))
                    if yf != NULL:
                        for t in prange(self.threads, num_threads=self.threads,
                                        schedule="static"):
                            qg_conv_compact_part(&self.plan, &g, <const char *>yf,
                                                 yp + (b * self.ysize + gi * yg) * es, es, t,
                                                 self.threads)


cdef class QDepthwiseKernel:
    """Depthwise QConv (group == C == M). w (C, kh*kw) int8; geom as QConvKernel's."""
    cdef qdw_plan plan
    cdef qe_epi epi
    cdef object keep
    cdef DynamicScale dyn
    cdef object own_ws, own_planes
    cdef long xsize, ysize, psize, osize
    cdef int out_f32, threads
    cdef const qdw_row *row

    def __init__(self, cnp.ndarray w, geom, dict epi, uint8_t x_zp, str row=None,
                 int threads=1):
        (self.plan.C, self.plan.H, self.plan.W, self.plan.kh, self.plan.kw, self.plan.sh,
         self.plan.sw, self.plan.ph, self.plan.pw, self.plan.dh, self.plan.dw, self.plan.oh,
         self.plan.ow) = geom
        if self.plan.kh * self.plan.kw > QDW_MAXT:
            raise ValueError(f"depthwise window {self.plan.kh}x{self.plan.kw} too large")
        self.plan.xzp = x_zp
        # a VNNI row: the sums by vpdpwssd (256-bit: AVX-512 VL / VEX)
        self.row = &qdw_rows[dw_row_index(row or base_row(dw=True))]
        self.plan.row = self.row
        cdef long psize, osize
        qdw_setup(&self.plan, &psize, &osize)
        wc = np.ascontiguousarray(w, np.int8).reshape(self.plan.C, self.plan.kh * self.plan.kw)
        wpairs = np.zeros((self.plan.C, self.plan.npair), np.int32)
        qdw_pack_weights(&self.plan, <const int8_t *>cnp.PyArray_DATA(wc),
                         <int32_t *>cnp.PyArray_DATA(wpairs))
        self.keep = (wc, wpairs, _fill_epi(&self.epi, epi))
        self.out_f32 = epi["out_f32"]
        # threads > 1: channel ranges, a plane and output buffer each
        self.threads = max(1, min(threads, self.plan.C))
        self.psize, self.osize = psize, osize
        self.own_ws = self.own_planes = None
        self.xsize = <long>self.plan.C * self.plan.H * self.plan.W
        self.ysize = <long>self.plan.C * self.plan.oh * self.plan.ow

    @property
    def simd(self):
        """The instruction-set tier of its row (reports)."""
        return edgenn_isa_name(self.row.isa).decode()

    @property
    def row_name(self):
        """The name of the table row it runs."""
        return self.row.name.decode()

    @property
    def workspace_bytes(self):
        """Transient: the int32 output rows per thread (+ the dynamic epilogue's constants)."""
        return self.osize * self.threads * 4 + _dyn_bytes(self.dyn)

    @property
    def plane_bytes(self):
        """Persistent, zeroed at first (the padding stays zero): an int16 plane per thread."""
        return self.psize * self.threads * 2

    def set_dynamic(self, w_scale, bias):
        """Per-call x_scale / x_zp from now on (the kernel subtracts x_zp itself)."""
        if not self.epi.float_path:
            raise ValueError("a per-call x_scale needs the float epilogue")
        self.dyn = DynamicScale(self.keep[2][1].size, w_scale, np.zeros(1, np.int32), bias)

    def run(self, cnp.ndarray x, cnp.ndarray y, cnp.ndarray z=None, a_scale=None, a_zp=None,
            ws=None, planes=None):
        """As QConvKernel.run; ws / planes: the caller's workspaces of workspace_bytes /
        plane_bytes (None: the object's own)."""
        cdef float xs
        cdef int32_t xzp
        xs, xzp = _dynamic_args(self.dyn, a_scale, a_zp, "QConv")
        if ws is None:
            if self.own_ws is None:
                self.own_ws = _own_ws(self.workspace_bytes)
            ws = self.own_ws
        if planes is None:
            if self.own_planes is None:
                self.own_planes = _own_ws(self.plane_bytes)
            planes = self.own_planes
        cdef char *wsb = _ws_data(ws, self.workspace_bytes, "QConv depthwise")
        cdef int16_t *P = <int16_t *>_ws_data(planes, self.plane_bytes, "QConv depthwise planes")
        cdef int32_t *ob = <int32_t *>wsb
        cdef qe_epi e = self.epi
        cdef qdw_plan pl = self.plan
        if self.dyn is not None:
            _dyn_epi(self.dyn, &e, wsb + self.osize * self.threads * 4, xs, xzp)
            pl.xzp = <uint8_t>xzp
        x, z = _contig(x), _contig(z)
        cdef long n = x.shape[0] if x.ndim else 0
        cdef const uint8_t *zp = _conv_io(x, y, z, n, self.xsize, self.ysize, self.out_f32,
                                          self.epi.has_z)
        cdef const uint8_t *xp = <const uint8_t *>cnp.PyArray_DATA(x)
        cdef char *yp = <char *>cnp.PyArray_DATA(y)
        cdef const int8_t *wp = <const int8_t *>cnp.PyArray_DATA(self.keep[0])
        cdef const int32_t *wpairs = <const int32_t *>cnp.PyArray_DATA(self.keep[1])
        cdef long b, es = 4 if self.out_f32 else 1
        cdef int t, nt = self.threads, per = (self.plan.C + self.threads - 1) // self.threads
        with nogil:
            for b in range(n):
                if nt == 1:
                    qdw_run(&pl, xp + b * self.xsize, wp, wpairs, &e,
                            yp + b * self.ysize * es,
                            zp + b * self.ysize if zp != NULL else NULL, P, ob)
                    continue
                for t in prange(nt, num_threads=nt, schedule="static"):
                    qdw_run_channels(&pl, xp + b * self.xsize, wp, wpairs, &e,
                                     yp + b * self.ysize * es,
                                     zp + b * self.ysize if zp != NULL else NULL,
                                     P + t * self.psize, ob + t * self.osize, t * per,
                                     min(self.plan.C, (t + 1) * per))


cdef class QGemmKernel:
    """QGemm: y (rows, N) = epilogue(a (rows, K) u8 x B (K, N) s8); bpacked from
    qgemm.pack_b (NP panels of 8 columns, NP a multiple of 4).

    threads > 1: row ranges (whole 6-row panels) over OpenMP threads, a workspace each;
    with fewer row panels than threads (a batch-1 classifier: one row), column ranges
    (whole groups of 4 B panels, 32 columns) instead, each thread packing the rows.
    set_dynamic(w_scale, wsum, bias): a_scale / a_zp are given per call (run's a_scale,
    a_zp: the outputs of DynamicQuantizeLinear); the epilogue's S = a_scale * w_scale and
    bias - a_zp * wsum are then recomputed per call (float path only)."""
    cdef qg_gemm_plan plan
    cdef qg_gemm_plan part[64]
    cdef long row0[64]
    cdef qe_epi epi
    cdef object keep
    cdef object own_ws
    cdef DynamicScale dyn
    cdef long wsize
    cdef int out_f32, threads, split_cols
    cdef const qg_row *row

    def __init__(self, cnp.ndarray bpacked, bint wide, long rows, long K, long N, dict epi,
                 str row=None, int threads=1, excess=None):
        self.plan.M, self.plan.K, self.plan.N = rows, K, N
        self.plan.wide = wide
        self.plan.G = (K + (1 if wide else 3)) // (2 if wide else 4)
        self.plan.NP = (N + 31) // 32 * 4
        self.plan.pb, self.plan.pe = 0, self.plan.NP
        self.row = _gemm_row(row, wide, excess)
        if self.row.ch_block != QG_MR:
            raise ValueError(f"row {row!r}: QConv only")
        self.plan.row = self.row
        self.plan.mc = qg_gemm_block(rows, self.plan.G)
        bp = np.ascontiguousarray(bpacked).view(np.uint8).ravel()
        if bp.size != self.plan.NP * self.plan.G * QG_NR * 4:
            raise ValueError(f"packed B: {bp.size} bytes, expected "
                             f"{self.plan.NP * self.plan.G * QG_NR * 4}")
        if excess is not None and wide:
            raise ValueError("excess weights: u8 path only")
        ex = _set_excess(&self.plan.excess, excess, self.plan.NP, QG_NR * 4)
        self.keep = (bp, _fill_epi(&self.epi, epi), ex)
        self.out_f32 = epi["out_f32"]
        self.dyn = None
        # row ranges: whole 6-row panels, at most one range per thread; fewer panels than
        # threads: column ranges of whole 32-column groups (so the single-row Gemm of a
        # batch-1 classifier does not run on one thread)
        panels = (rows + QG_MR - 1) // QG_MR
        groups = self.plan.NP // 4
        cols = panels < min(threads, 64) and groups > panels
        self.threads = max(1, min(threads, groups if cols else panels, 64))
        self.split_cols = cols and self.threads > 1
        per = (panels + self.threads - 1) // self.threads * QG_MR
        cdef int t
        self.wsize = 0
        for t in range(self.threads):
            self.part[t] = self.plan
            if cols:
                self.row0[t] = 0
                self.part[t].pb = groups * t // self.threads * 4
                self.part[t].pe = groups * (t + 1) // self.threads * 4
            else:
                self.row0[t] = min(rows, t * per)
                self.part[t].M = min(rows, (t + 1) * per) - self.row0[t]
                self.part[t].mc = qg_gemm_block(max(self.part[t].M, 1), self.plan.G)
            self.wsize = max(self.wsize, (qg_gemm_workspace(&self.part[t]) + 63) // 64 * 64)
        self.own_ws = None

    @property
    def workspace_bytes(self):
        """Transient: the packed A panels per thread (+ the dynamic epilogue's constants)."""
        return self.wsize * self.threads + _dyn_bytes(self.dyn)

    def set_dynamic(self, w_scale, wsum, bias):
        """Per-call a_scale / a_zp from now on: w_scale (N,), wsum (N,) = sum_k b[k, n],
        bias (N,) int32 (see DynamicScale)."""
        if not self.epi.float_path:
            raise ValueError("a per-call a_scale needs the float epilogue")
        self.dyn = DynamicScale(self.keep[1][1].size, w_scale, wsum, bias)

    @property
    def simd(self):
        """The instruction-set tier of its row (reports)."""
        return edgenn_isa_name(self.row.isa).decode()

    @property
    def row_name(self):
        """The name of the table row it runs."""
        return self.row.name.decode()

    @property
    def thread_count(self):
        return self.threads

    @property
    def splits_columns(self):
        """Its threads split the columns (else the rows, or one thread)."""
        return bool(self.split_cols)

    def run(self, cnp.ndarray a, cnp.ndarray y, cnp.ndarray z=None, a_scale=None, a_zp=None,
            ws=None):
        """a: rows x K uint8 (C-contiguous, any shape of that size); y rows x N (uint8 or
        float32); z like y or None; a_scale / a_zp: scalars, after set_dynamic only;
        ws: the caller's workspace of workspace_bytes (None: the object's own)."""
        a, z = _contig(a), _contig(z)
        cdef long rows = self.plan.M, N = self.plan.N
        _check(a, cnp.NPY_UINT8, rows * self.plan.K, "QGemm a")
        _check(y, cnp.NPY_FLOAT32 if self.out_f32 else cnp.NPY_UINT8, rows * N, "QGemm y")
        cdef const uint8_t *zp = NULL
        if self.epi.has_z:
            if z is None:
                raise ValueError("QGemm: residual z missing")
            _check(z, cnp.NPY_UINT8, rows * N, "QGemm z")
            zp = <const uint8_t *>cnp.PyArray_DATA(z)
        cdef float xs
        cdef int32_t xzp
        xs, xzp = _dynamic_args(self.dyn, a_scale, a_zp, "QGemm")
        if rows == 0 or N == 0:
            return
        cdef const uint8_t *bp = <const uint8_t *>cnp.PyArray_DATA(self.keep[0])
        cdef const uint8_t *ap = <const uint8_t *>cnp.PyArray_DATA(a)
        cdef char *yp = <char *>cnp.PyArray_DATA(y)
        if ws is None:
            if self.own_ws is None:
                self.own_ws = _own_ws(self.workspace_bytes)
            ws = self.own_ws
        cdef uint8_t *wsu = <uint8_t *>_ws_data(ws, self.workspace_bytes, "QGemm")
        cdef qe_epi e = self.epi
        cdef long K = self.plan.K, es = 4 if self.out_f32 else 1
        cdef int t
        with nogil:
            if self.dyn is not None:
                _dyn_epi(self.dyn, &e, <char *>wsu + self.wsize * self.threads, xs, xzp)
            if self.threads == 1:
                qg_gemm_run(&self.plan, bp, ap, K, &e, yp, zp, wsu)
            else:
                for t in prange(self.threads, num_threads=self.threads, schedule="static"):
                    if self.part[t].M > 0:
                        qg_gemm_run(&self.part[t], bp, ap + self.row0[t] * K, K, &e,
                                    yp + self.row0[t] * N * es,
                                    zp + self.row0[t] * N if zp != NULL else NULL,
                                    wsu + t * self.wsize)


cdef extern from *:
    """
    typedef void (*qv_ukr_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *);
    /* 0, 1: AVX-512 VNNI conv (the tile shape for rows x npan) and gemm; 3, 4: AVX-VNNI */
    static qv_ukr_t qv_native_pick(int which, int rows, int npan) {
    #if QV_HAVE && QA_HAVE
        return which == 0 ? qvc_acc[qvc_index(rows, npan)] : which == 1 ? qv_ukr_gemm_6x32
             : which == 3 ? qa_ukr_conv_6x32 : qa_ukr_gemm_6x32;
    #else
        (void)which; (void)rows; (void)npan;
        return 0;
    #endif
    }
    """
    ctypedef void (*qv_ukr_t)(long, const uint8_t *, const uint8_t *, long, int, int32_t *)
    qv_ukr_t qv_native_pick(int which, int nrows, int npan)


def vnni_ukr_into(int which, const uint8_t[::1] a, const uint8_t[::1] b, long ng, long bps,
                  int npan, int32_t[::1] out, int rows=6):
    """Tests (vnni_tiles.tile checks the sizes): the native VNNI tile, which 0 conv (rows
    6 / 4 / 2: the tile shape the conv driver takes for that many rows), 1 gemm (AVX-512
    VNNI), 3 conv, 4 gemm (AVX-VNNI)."""
    qv_native_pick(which, rows, npan)(ng, &a[0], &b[0], bps, npan, &out[0])


include "_qgemm_implicit.pxi"
