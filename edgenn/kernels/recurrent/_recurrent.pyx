# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _recurrent.h: the recurrence of LSTM / GRU / RNN, one direction.

    r = Recurrence(cell, H, rt, bias, rbh, peep, acts, input_forget, lbr, clip,
                   row="recurrent_4x64__avx2")      # a row of the table (_recurrent.h)
    r.run(xp, xp_off, xp_ts, xp_bs, T, B, hs, cs, y, y_off, y_ts, y_bs, lens, reverse, ws)

xp, y: flat float32 buffers with element offsets and (t, b) strides; hs, cs (B, H) the
state, updated in place; lens int32 (B,) or None; ws: workspace_floats(B) floats.
"""
from collections import namedtuple

import numpy as np

from edgenn.kernels.native.tables import Table

include "_cpu.pxi"

cdef extern from "_recurrent.h" nogil:
    int RC_LSTM, RC_GRU, RC_RNN
    int RA_SIGMOID, RA_TANH, RA_RELU
    ctypedef struct rc_args:
        long T, B, H
        int cell, reverse, input_forget, lbr
        int f, g, h
        float clip
        const float *xp
        long xp_ts, xp_bs
        const float *rt
        const float *rt_h
        const float *bias
        const float *rbh
        const float *peep
        const int *lens
        float *hs
        float *cs
        float *y
        long y_ts, y_bs
        float *ws
    ctypedef struct rc_row:
        const char *name
        int isa
        long lanes
    const rc_row rc_rows[]
    int RC_ROW_COUNT
    void rc_run(const rc_args *a, const rc_row *row)

# A row of the table (_recurrent.h's rc_rows): name, isa (the tier it needs), lanes (the
# packing's floats per vector), usable (this CPU runs it; every row when emulated)
Row = namedtuple("Row", "name isa lanes usable")
TABLE = Table("recurrent", tuple(
    Row(rc_rows[i].name.decode(), edgenn_isa_name(rc_rows[i].isa).decode(), rc_rows[i].lanes,
        bool(edgenn_row_usable(rc_rows[i].isa))) for i in range(RC_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index, best_row, row_of_isa = TABLE.usable, TABLE.index, TABLE.best, TABLE.best_of_isa
CELLS = {"LSTM": RC_LSTM, "GRU": RC_GRU, "RNN": RC_RNN}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
ACTS = {"Sigmoid": RA_SIGMOID, "Tanh": RA_TANH, "Relu": RA_RELU}


def pack(m, long L):
    """R^T (K, N) -> the panels of _recurrent.h for a row of L lanes: widths 8L, 4L, 2L, L
    taken greedily, then the last N % L columns padded."""
    m = np.asarray(m, np.float32)
    K, N = m.shape
    parts, n, w = [], 0, 8 * L
    while w >= L:
        while N - n >= w:
            parts.append(m[:, n:n + w].ravel())
            n += w
        w //= 2
    if n < N:
        t = np.zeros((K, L), np.float32)
        t[:, :N - n] = m[:, n:]
        parts.append(t.ravel())
    flat = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return _aligned(flat)


def _aligned(a, int align=64):
    """A copy of the 1-D float32 `a` starting on an `align`-byte boundary (whole cache
    lines per panel row: an unaligned 64-byte load touches two lines)."""
    buf = np.empty(a.size + align // 4, np.float32)
    start = (-buf.ctypes.data % align) // 4
    out = buf[start:start + a.size]
    out[...] = a
    return out


cdef long _reach(long off, long T, long ts, long B, long bs, long width):
    """One past the last float a (T, B) walk of `width`-float rows touches."""
    return off + (T - 1) * ts + (B - 1) * bs + width


cdef class Recurrence:
    """One direction's weights: rt (H, G*H) = R^T (packed here for the row), bias (G*H,)
    added to every step's xp or None, rbh (H,) GRU's Rbh when
    linear_before_reset, peep (3H,) LSTM's peepholes (i, o, f) or None; acts the names
    of f, g(, h)."""
    cdef readonly object rt, rt_h, bias, rbh, peep
    cdef readonly long H, GH
    cdef readonly str row, cell
    cdef rc_args a
    cdef const rc_row *r

    def __init__(self, str cell, long H, rt, bias=None, rbh=None, peep=None,
                 acts=("Sigmoid", "Tanh", "Tanh"),
                 bint input_forget=False, bint lbr=False, float clip=0, str row=None):
        row = row or best_row()
        self.r = &rc_rows[row_index(row)]
        if cell not in CELLS or H < 1:
            raise ValueError(f"cell {cell!r} / hidden size {H}")
        codes = [ACTS[a] for a in acts] + [RA_TANH] * 3      # KeyError: not fused here
        self.cell, self.H, self.GH, self.row = cell, H, GATES[cell] * H, row
        rt = np.asarray(rt, np.float32)
        if rt.shape != (H, self.GH):
            raise ValueError(f"rt {rt.shape} != ({H}, {self.GH})")
        split = cell == "GRU" and not lbr      # z, r from h; the h gate from r * h
        self.rt = pack(rt[:, :2 * H] if split else rt, self.r.lanes)
        self.rt_h = pack(rt[:, 2 * H:], self.r.lanes) if split else None
        self.rbh = None if rbh is None else np.ascontiguousarray(rbh, np.float32)
        self.peep = None if peep is None else np.ascontiguousarray(peep, np.float32)
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        if self.bias is not None and self.bias.shape != (self.GH,):
            raise ValueError(f"bias {self.bias.shape} != ({self.GH},)")
        if (cell == "GRU" and lbr) != (self.rbh is not None) or \
                (self.rbh is not None and self.rbh.shape != (H,)):
            raise ValueError("rbh: GRU with linear_before_reset only, (H,)")
        if self.peep is not None and (cell != "LSTM" or self.peep.shape != (3 * H,)):
            raise ValueError("peep: LSTM only, (3H,)")
        cdef const float[::1] rv = self.rt
        cdef const float[::1] pv
        memset_args(&self.a)
        self.a.H = H
        self.a.cell = CELLS[cell]
        self.a.input_forget, self.a.lbr = input_forget, lbr
        self.a.f, self.a.g, self.a.h = codes[0], codes[1], codes[2]
        self.a.clip = clip
        self.a.rt = &rv[0]
        if self.rt_h is not None:
            pv = self.rt_h
            self.a.rt_h = &pv[0]
        if self.rbh is not None:
            pv = self.rbh
            self.a.rbh = &pv[0]
        if self.peep is not None:
            pv = self.peep
            self.a.peep = &pv[0]
        if self.bias is not None:
            pv = self.bias
            self.a.bias = &pv[0]

    def workspace_floats(self, long B) -> int:
        return B * (self.GH + self.H)

    def run(self, const float[::1] xp, long xp_off, long xp_ts, long xp_bs, long T, long B,
            float[:, ::1] hs, cs, y, long y_off, long y_ts, long y_bs, lens,
            bint reverse, float[::1] ws):
        if T < 1 or B < 1:
            return
        cdef long H = self.H
        if min(xp_off, xp_ts, xp_bs, y_off, y_ts, y_bs) < 0 or \
                _reach(xp_off, T, xp_ts, B, xp_bs, self.GH) > xp.shape[0]:
            raise ValueError("xp: offsets / strides outside the buffer")
        if hs.shape[0] != B or hs.shape[1] != H or ws.shape[0] < self.workspace_floats(B):
            raise ValueError("state or workspace shapes")
        cdef rc_args a = self.a
        cdef float[:, ::1] cv
        cdef float[::1] yv
        cdef const int[::1] lv
        a.T, a.B, a.reverse = T, B, reverse
        a.xp, a.xp_ts, a.xp_bs = &xp[xp_off], xp_ts, xp_bs
        a.hs, a.ws = &hs[0, 0], &ws[0]
        if self.cell == "LSTM":
            cv = cs
            if cv.shape[0] != B or cv.shape[1] != H:
                raise ValueError("cell state shape")
            a.cs = &cv[0, 0]
        if y is not None:
            yv = y
            if _reach(y_off, T, y_ts, B, y_bs, H) > yv.shape[0]:
                raise ValueError("y: offsets / strides outside the buffer")
            a.y, a.y_ts, a.y_bs = &yv[y_off], y_ts, y_bs
        if lens is not None:
            lv = lens
            if lv.shape[0] != B:
                raise ValueError("lens shape")
            a.lens = &lv[0]
        with nogil:
            rc_run(&a, self.r)


cdef void memset_args(rc_args *a) noexcept:
    a.T = a.B = a.H = 0
    a.cell = a.reverse = a.input_forget = a.lbr = 0
    a.f = a.g = a.h = 0
    a.clip = 0
    a.xp = a.rt = a.rt_h = a.bias = a.rbh = a.peep = NULL
    a.xp_ts = a.xp_bs = a.y_ts = a.y_bs = 0
    a.lens = NULL
    a.hs = a.cs = a.y = a.ws = NULL
