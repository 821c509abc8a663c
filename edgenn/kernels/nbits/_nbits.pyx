# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _nbits.h: Y = A W^T (+ bias) with W block-quantized to 2, 4 or 8 bits
(onnxruntime's MatMulNBits), the codes kept packed and unpacked in registers.

    g = NBits(N, K, bits, block_size, b, scales, zero_points=None, bias=None,
              row="nbits_f32_6x16__avx512f")        # a row of either table
    g.run(a, y, ws=None, threads=1)    # a (M, K), y (M, N): float32, C-contiguous

Two tables, two arithmetics: TABLE (_nbits.h, nbits_f32_*: the codes unpacked to float,
FMA) and QTABLE (_nbits_q8.h, nbits_i8_*: A quantized to int8 per block per call, integer
dot products; for accuracy_level 4 only, and integer zero points: i8_zero_points_ok).

b: uint8 (N, k_blocks, block_size * bits / 8), codes low bits first; scales float32
(N * k_blocks); zero_points None (2^(bits-1)), uint8 packed like the codes (N,
ceil(k_blocks * bits / 8)), or float32 (N * k_blocks); bias float32 (N,) or None.
"""
from collections import namedtuple

import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint8_t, uint32_t

from edgenn.kernels.native.tables import Table

cnp.import_array()

include "_cpu.pxi"
include "_workspace.pxi"

cdef extern from "_nbits.h" nogil:
    int NB_NR, NB_ZP_NONE, NB_ZP_U8, NB_ZP_F32
    ctypedef struct nb_args:
        long M, N, K, kb, bs
        int bits, zp_mode
        float zp0
        const uint32_t *codes
        const float *scales
        const uint8_t *zp8
        const float *zpf
        const float *bias
        const float *a
        long lda
        float *y
        long ldy
        float *ws
    ctypedef struct nb_row:
        const char *name
        int isa
        int rmax
    const nb_row nb_rows[]
    int NB_ROW_COUNT
    long nb_ws_floats(long M, long kb, long bs)
    void nb_run(const nb_row *row, const nb_args *x, int nthreads)

cdef extern from "_nbits_q8.h" nogil:
    ctypedef struct nbq_row:
        const char *name
        int isa
        int rmax
    const nbq_row nbq_rows[]
    int NBQ_ROW_COUNT
    void nbq_run(const nbq_row *row, const nb_args *x, int nthreads)

# A row of the table (_nbits.h's nb_rows): name, isa (the tier it needs), rmax (rows of A
# per pass over the codes), usable (this CPU runs it; every row when emulated)
Row = namedtuple("Row", "name isa rmax usable")
TABLE = Table("nbits", tuple(
    Row(nb_rows[i].name.decode(), edgenn_isa_name(nb_rows[i].isa).decode(), nb_rows[i].rmax,
        bool(edgenn_row_usable(nb_rows[i].isa))) for i in range(NB_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index, best_row, row_of_isa = TABLE.usable, TABLE.index, TABLE.best, TABLE.best_of_isa
# The int8-activation table (_nbits_q8.h's nbq_rows), the same fields
QTABLE = Table("nbits_i8", tuple(
    Row(nbq_rows[i].name.decode(), edgenn_isa_name(nbq_rows[i].isa).decode(),
        nbq_rows[i].rmax, bool(edgenn_row_usable(nbq_rows[i].isa)))
    for i in range(NBQ_ROW_COUNT)))
QROWS = QTABLE.rows
qrows, qrow_index, qbest_row = QTABLE.usable, QTABLE.index, QTABLE.best
BITS = (2, 4, 8)
PANEL = NB_NR


def unpack_codes(packed, long rows, long count, int bits):
    """uint8 (rows, bytes) of `bits`-bit codes, low bits first -> uint8 (rows, count)."""
    p = np.ascontiguousarray(packed, np.uint8).reshape(rows, -1)
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits)
    q = (p[:, :, None] >> shifts) & np.uint8((1 << bits) - 1)
    return np.ascontiguousarray(q.reshape(rows, -1)[:, :count])


def _panels(m, long N, long np_, int to=2):
    """(N, X, ...) -> (np_, X, ..., 16, ...) (the 16 columns at axis `to`) with the
    columns past N zero."""
    out = np.zeros((np_ * NB_NR,) + m.shape[1:], m.dtype)
    out[:N] = m
    out = out.reshape((np_, NB_NR) + m.shape[1:])
    return np.ascontiguousarray(np.moveaxis(out, 1, to))


def pack(long N, long K, int bits, long bs, b, scales, zero_points=None):
    """MatMulNBits' B / scales / zero_points -> (codes uint32, scales float32, zp_mode,
    zp0, zero points uint8 or float32 or None) in _nbits.h's layout."""
    if bits not in BITS or bs < 16 or bs & (bs - 1):
        raise ValueError(f"bits {bits} / block_size {bs}")
    cdef long kb = (K + bs - 1) // bs
    cdef long P = 32 // bits, np_ = (N + NB_NR - 1) // NB_NR
    blob = bs * bits // 8
    q = unpack_codes(np.asarray(b, np.uint8).reshape(N, kb * blob), N, kb * bs, bits)
    qt = _panels(q.reshape(N, kb, bs // P, P), N, np_, 3)    # (np, kb, g, 16, P)
    codes = np.zeros(qt.shape[:-1], np.uint32)
    for j in range(P):
        codes |= qt[..., j].astype(np.uint32) << np.uint32(bits * j)
    codes = codes.ravel()
    sc = _panels(np.asarray(scales, np.float32).reshape(N, kb), N, np_).reshape(-1)
    if zero_points is None:
        return codes, sc, NB_ZP_NONE, float(1 << (bits - 1)), None
    zp = np.asarray(zero_points)
    if zp.dtype == np.uint8:
        z = unpack_codes(zp.reshape(N, -1), N, kb, bits)
        # 16 bytes past the end: a NEON row reads a panel's zero points 8 bytes at a time
        z = np.concatenate([_panels(z, N, np_).reshape(-1), np.zeros(16, np.uint8)])
        return codes, sc, NB_ZP_U8, 0.0, z
    z = _panels(zp.astype(np.float32).reshape(N, kb), N, np_).reshape(-1)
    return codes, sc, NB_ZP_F32, 0.0, z


def i8_zero_points_ok(zero_points) -> bool:
    """Whether the int8 rows take these zero points: absent, uint8, or float holding
    integers in [0, 255] (the rows fold zp * sum_q as an exact integer)."""
    if zero_points is None:
        return True
    zp = np.asarray(zero_points)
    if zp.dtype == np.uint8:
        return True
    return bool(np.all(np.isfinite(zp)) and np.all(zp == np.round(zp))
                and np.all(zp >= 0) and np.all(zp <= 255))


def pack_i8(long N, long K, int bits, long bs, b, scales, zero_points=None):
    """MatMulNBits' B / scales / zero_points -> (codes uint32, scales, zp_mode, zp0,
    zero points uint8 or None) in _nbits_q8.h's layout: codes (np, kb, bs / (4 P), 16, 4)
    bytes, P = 8 / bits, byte i of a column's word holding k = 4 P g + 4 j + i in bits
    [bits j, bits (j + 1)); float zero points (integers, i8_zero_points_ok) as uint8."""
    if bits not in BITS or bs < 16 or bs & (bs - 1):
        raise ValueError(f"bits {bits} / block_size {bs}")
    if not i8_zero_points_ok(zero_points):
        raise ValueError("the int8 rows take integer zero points in [0, 255] only")
    cdef long kb = (K + bs - 1) // bs
    cdef long P = 8 // bits, np_ = (N + NB_NR - 1) // NB_NR
    blob = bs * bits // 8
    q = unpack_codes(np.asarray(b, np.uint8).reshape(N, kb * blob), N, kb * bs, bits)
    q = q.reshape(N, kb, bs // (4 * P), P, 4)
    words = np.zeros((N, kb, bs // (4 * P), 4), np.uint8)
    for j in range(P):
        words |= (q[:, :, :, j, :] << np.uint8(bits * j)).astype(np.uint8)
    codes = np.ascontiguousarray(_panels(words, N, np_, 3)).reshape(-1).view(np.uint32)
    sc = _panels(np.asarray(scales, np.float32).reshape(N, kb), N, np_).reshape(-1)
    if zero_points is None:
        return codes, sc, NB_ZP_NONE, float(1 << (bits - 1)), None
    zp = np.asarray(zero_points)
    if zp.dtype == np.uint8:
        z = unpack_codes(zp.reshape(N, -1), N, kb, bits)
    else:
        z = zp.astype(np.float64).reshape(N, kb).astype(np.uint8)
    # 16 bytes past the end: a NEON row reads a panel's zero points 8 bytes at a time
    z = np.concatenate([_panels(z, N, np_).reshape(-1), np.zeros(16, np.uint8)])
    return codes, sc, NB_ZP_U8, 0.0, z


cdef class NBits:
    """The packed weights of one MatMulNBits node for one row of the table."""
    cdef readonly object codes, scales, zp, bias
    cdef readonly long N, K, bits, block_size, kb
    cdef readonly str row
    cdef readonly bint int8
    cdef nb_args x
    cdef const nb_row *r
    cdef const nbq_row *qr

    def __init__(self, long N, long K, int bits, long block_size, b, scales,
                 zero_points=None, bias=None, str row=None):
        row = row or best_row()
        self.int8 = row in QTABLE
        self.r, self.qr = NULL, NULL
        if self.int8:
            self.qr = &nbq_rows[qrow_index(row)]
        else:
            self.r = &nb_rows[row_index(row)]
        self.row, self.N, self.K, self.bits, self.block_size = row, N, K, bits, block_size
        self.kb = (K + block_size - 1) // block_size
        self.codes, self.scales, mode, zp0, self.zp = (pack_i8 if self.int8 else pack)(
            N, K, bits, block_size, b, scales, zero_points)
        np_ = (N + NB_NR - 1) // NB_NR
        if bias is not None:
            self.bias = np.zeros(np_ * NB_NR, np.float32)
            self.bias[:N] = np.asarray(bias, np.float32).reshape(N)
        cdef const uint32_t[::1] cv = self.codes
        cdef const float[::1] fv
        cdef const uint8_t[::1] bv
        self.x.M = 0
        self.x.N, self.x.K, self.x.kb, self.x.bs = N, K, self.kb, block_size
        self.x.bits, self.x.zp_mode, self.x.zp0 = bits, mode, zp0
        self.x.codes = &cv[0]
        fv = self.scales
        self.x.scales = &fv[0]
        self.x.zp8 = NULL
        self.x.zpf = NULL
        self.x.bias = NULL
        if mode == NB_ZP_U8:
            bv = self.zp
            self.x.zp8 = &bv[0]
        elif mode == NB_ZP_F32:
            fv = self.zp
            self.x.zpf = &fv[0]
        if self.bias is not None:
            fv = self.bias
            self.x.bias = &fv[0]

    def workspace_floats(self, long M) -> int:
        return nb_ws_floats(M, self.kb, self.block_size)

    @property
    def packed_bytes(self) -> int:
        """Bytes of weights a call reads: codes, scales, zero points."""
        return self.codes.nbytes + self.scales.nbytes + (0 if self.zp is None else
                                                         self.zp.nbytes)

    def run(self, const float[:, ::1] a, float[:, ::1] y, ws=None, int threads=1):
        cdef long M = a.shape[0]
        if a.shape[1] != self.K or y.shape[0] != M or y.shape[1] != self.N:
            raise ValueError(f"a ({a.shape[0]}, {a.shape[1]}), y ({y.shape[0]}, {y.shape[1]}) for "
                             f"K {self.K}, N {self.N}")
        if M == 0:
            return
        cdef long need = nb_ws_floats(M, self.kb, self.block_size)
        if ws is None:
            ws = _own_ws(need * 4)
        cdef float *wp = <float *>_ws_data(ws, need * 4, "nbits")
        cdef nb_args x = self.x
        x.M = M
        x.a, x.lda = &a[0, 0], self.K
        x.y, x.ldy = &y[0, 0], self.N
        x.ws = wp
        with nogil:
            if self.qr != NULL:
                nbq_run(self.qr, &x, threads)
            else:
                nb_run(self.r, &x, threads)
