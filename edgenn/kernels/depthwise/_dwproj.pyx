# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _dwproj.h: a 3x3 depthwise conv and the 1x1 conv of its output, in bands.

    wpk, bpk = pack(w1x1, b1x1, row)         # [ceil(M / MB)][C][MB], (ceil(M / MB) * MB,)
    T = np.zeros((threads, scratch(C, W, rows)), np.float32)
    run(x, wd, bd, wpk, bpk, y, T, rows, dact, dlo, dhi, pact, plo, phi, row)

row: a name in the table (_dwproj.h's dwp_rows): AVX2 (1x1 tiles of 4 channels x 24
pixels), AVX-512F (8 x 48).
"""
from collections import namedtuple

import numpy as np
from cython.parallel cimport prange

from edgenn.kernels.native.tables import Table

include "_cpu.pxi"

include "_epilogue.pxi"

cdef extern from "_dwproj.h" nogil:
    unsigned DWP_ACTS
    ctypedef struct dwp_args:
        const float *x
        const float *wd
        const float *bd
        const float *wp
        const float *bp
        float *y
        long C, H, W, M, rows, tpitch
        int dact, pact
        float dlo, dhi, plo, phi
    long dwp_scratch(const dwp_args *a)
    ctypedef void (*dwp_run_fn)(const dwp_args *a, float *T, long r0, long r1) noexcept
    ctypedef struct dwp_row:
        const char *name
        int isa
        long lanes, mb
        dwp_run_fn run
    const dwp_row dwp_rows[]
    int DWP_ROW_COUNT

# A row of the table (_dwproj.h's dwp_rows): name, isa (the tier it needs), lanes, mb (1x1
# tile channels), usable (this CPU runs it; every row in the SIMDe-emulated build)
Row = namedtuple("Row", "name isa lanes mb usable")
TABLE = Table("depthwise_project", tuple(
    Row(dwp_rows[i].name.decode(), edgenn_isa_name(dwp_rows[i].isa).decode(),
        dwp_rows[i].lanes, dwp_rows[i].mb, bool(edgenn_row_usable(dwp_rows[i].isa)))
    for i in range(DWP_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index = TABLE.usable, TABLE.index
ACTIVATIONS = _activations(DWP_ACTS)       # a clamp or nothing


def _tpitch(long w, long rows):
    return (rows * w + 15) // 16 * 16


def scratch(long c, long w, long rows):
    """Floats of one thread's T for bands of `rows` rows of width w, c channels."""
    return int(c * _tpitch(w, rows) + 64)


def pack(w, b, str row):
    """w (M, C[, 1, 1]) float32, b (M,) or None -> ([ceil(M / MB)][C][MB],
    (ceil(M / MB) * MB,)), zero past M; MB the row's 1x1 tile channels."""
    cdef long mb = ROWS[row_index(row)].mb
    w = np.asarray(w, np.float32)
    m, c = w.shape[:2]
    blocks = -(-m // mb)
    wp = np.zeros((blocks * mb, c), np.float32)
    wp[:m] = w.reshape(m, c)
    bp = np.zeros(blocks * mb, np.float32)
    if b is not None:
        bp[:m] = b
    return np.ascontiguousarray(wp.reshape(blocks, mb, c).transpose(0, 2, 1)), bp


def run(const float[:, :, ::1] x, const float[:, ::1] wd, const float[::1] bd,
        const float[:, :, ::1] wp, const float[::1] bp, float[:, :, ::1] y, float[:, ::1] T,
        long rows, str dact, float dlo, float dhi, str pact, float plo, float phi,
        str row):
    """y (M, H, W) = pact(conv1x1(dact(depthwise3x3(x) + bd)) + bp), x (C, H, W), wd (C, 9),
    bd (C,), wp / bp from pack(); T (threads, scratch(C, W, rows)): T's rows (OpenMP
    threads) split the output rows evenly, each its share in bands of <= rows; row: the
    table's row (pack()'s)."""
    cdef const dwp_row *r = &dwp_rows[row_index(row)]
    cdef long mb = r.mb
    cdef dwp_args a
    a.C, a.H, a.W, a.M = x.shape[0], x.shape[1], x.shape[2], y.shape[0]
    if wd.shape[0] != a.C or wd.shape[1] != 9 or bd.shape[0] != a.C \
            or wp.shape[1] != a.C or wp.shape[2] != mb or wp.shape[0] * mb < a.M \
            or bp.shape[0] < wp.shape[0] * mb or y.shape[1] != a.H or y.shape[2] != a.W:
        raise ValueError("depthwise_project: weights or output do not match x")
    if rows < 1 or dact not in ACTIVATIONS or pact not in ACTIVATIONS:
        raise ValueError("depthwise_project: bad band or activation")
    a.rows, a.tpitch = rows, _tpitch(a.W, rows)
    if T.shape[1] < dwp_scratch(&a):
        raise ValueError("depthwise_project: scratch too small")
    if a.C == 0 or a.H == 0 or a.W == 0 or a.M == 0:
        return
    a.x, a.wd, a.bd, a.wp, a.bp, a.y = &x[0, 0, 0], &wd[0, 0], &bd[0], &wp[0, 0, 0], &bp[0], \
        &y[0, 0, 0]
    a.dact, a.pact = ACTIVATION_NAMES.index(dact), ACTIVATION_NAMES.index(pact)
    a.dlo, a.dhi, a.plo, a.phi = dlo, dhi, plo, phi
    cdef int t, nt = max(1, min(T.shape[0], a.H))
    with nogil:
        if nt == 1:
            r.run(&a, &T[0, 0], 0, a.H)
        else:       # thread t: output rows [t*H/nt, (t+1)*H/nt), in bands of <= rows
            for t in prange(nt, num_threads=nt, schedule="static"):
                r.run(&a, &T[t, 0], t * a.H // nt, (t + 1) * a.H // nt)
