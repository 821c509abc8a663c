"""LSTM, GRU and RNN: the input projection of every time step and direction as one GEMM
(edgenn's packed sgemm of the same tier, the weights packed once: X (T*B, I) @ [W_0^T |
W_1^T] (I, D*G*H)), then the recurrence
of each direction in C (_recurrent.h: h_{t-1} R^T on packed R^T, gates, state update),
all steps in one call (the biases added there, as each step's row is read). One spec per
row of the recurrence's table (_recurrent.h: scalar, AVX2, AVX-512F).

Handles both layouts through strides (no transposes), sequence_lens, initial states,
peepholes, clip, input_forget, linear_before_reset and the activations Sigmoid, Tanh and
Relu in any position (the others stay with the reference kernel).
"""
from __future__ import annotations

import numpy as np

from ...graph.shapes.recurrent import GATES, activations, directions
from ...registry import kernel
from .. import scratch
from . import _recurrent
from ..gemm import _sgemm

FAST_ACTS = tuple(_recurrent.ACTS)


def _const_or_absent(ins, i) -> bool:
    return len(ins) <= i or ins[i] is None or ins[i].value is not None


def _supports(node, ins, outs) -> bool:
    x = ins[0]
    if x.dtype != "float32" or any(o is not None and o.dtype != "float32" for o in outs):
        return False
    if ins[1].value is None or ins[2].value is None or not _const_or_absent(ins, 3):
        return False
    if node.op == "LSTM" and not _const_or_absent(ins, 7):
        return False
    return all(name in FAST_ACTS for name, _, _ in activations(node))


class _Shape:
    def __init__(self, node, ins):
        self.layout = int(node.attrs.get("layout", 0) or 0)
        xs = ins[0].shape
        self.T, self.B = (xs[1], xs[0]) if self.layout else (xs[0], xs[1])
        self.I = xs[2]
        self.nd, self.G = directions(node), GATES[node.op]
        self.H = ins[2].shape[-1]
        self.GH = self.G * self.H


def _biases(node, bias, s: _Shape) -> np.ndarray:
    """(D*G*H,) the biases folded into the projection; GRU with linear_before_reset keeps
    Rbh out (it is multiplied by r)."""
    GH, H = s.GH, s.H
    out = np.zeros((s.nd, GH), np.float32)
    if bias is None:
        return out.reshape(-1)
    wb, rb = bias[:, :GH].astype(np.float32), bias[:, GH:].astype(np.float32)
    out[:] = wb + rb
    if node.op == "GRU" and node.attrs.get("linear_before_reset", 0):
        out[:, 2 * H:] = wb[:, 2 * H:]
    return out.reshape(-1)


def _make(row: str, lib=_recurrent, gemm_lib=_sgemm):
    """The prepare of the spec of the recurrence's table row `row` (its input projection
    on gemm_lib's best sgemm row of the same tier; lib, gemm_lib: _recurrent and _sgemm,
    or the tests' emulated builds _recurrent_emu and _sgemm_emu)."""
    def prepare(node, ins, outs):
        isa = lib.ROWS[lib.row_index(row)].isa
        s = _Shape(node, ins)
        w, r = ins[1].value.astype(np.float32), ins[2].value.astype(np.float32)
        bias = ins[3].value if len(ins) > 3 and ins[3] is not None else None
        peep = ins[7].value if node.op == "LSTM" and len(ins) > 7 and ins[7] is not None \
            else None
        wt = np.ascontiguousarray(np.concatenate([w[d].T for d in range(s.nd)], axis=1))
        b_all = _biases(node, bias, s)
        lbr = node.op == "GRU" and bool(node.attrs.get("linear_before_reset", 0))
        acts = activations(node)
        per = len(acts) // s.nd
        clip = node.attrs.get("clip")
        reverse = (node.attrs.get("direction", "forward") or "forward") == "reverse"
        units = [lib.Recurrence(
            node.op, s.H, r[d].T, bias=b_all[d * s.GH:(d + 1) * s.GH],
            rbh=bias[d, s.GH + 2 * s.H:].astype(np.float32) if lbr and bias is not None
            else (np.zeros(s.H, np.float32) if lbr else None),
            peep=None if peep is None else peep[d],
            acts=[a[0] for a in acts[d * per:(d + 1) * per]],
            input_forget=bool(node.attrs.get("input_forget", 0)), lbr=lbr,
            clip=0.0 if clip is None else float(clip), row=row) for d in range(s.nd)]
        T, B, H, GH, nd = s.T, s.B, s.H, s.GH, s.nd
        rows = T * B
        proj = gemm_lib.SGemm(rows, nd * GH, s.I, packed_b=gemm_lib.pack_b(wt),
                              row=gemm_lib.row_of_isa(isa)) if rows else None
        proj_ws = scratch.bytes_(proj.workspace_bytes if rows else 1)
        xp_h = scratch.array((rows * nd * GH,), np.float32)
        state_h = scratch.array((2, nd, B, H), np.float32)
        ws_h = scratch.array((units[0].workspace_floats(B),), np.float32)
        has = [i < len(ins) and ins[i] is not None for i in range(8)]
        if s.layout:   # rows of X are (b, t); Y (B, T, D, H); states (B, D, H)
            xp_ts, xp_bs, y_ts, y_bs = nd * GH, T * nd * GH, nd * H, T * nd * H
        else:          # rows (t, b); Y (T, D, B, H); states (D, B, H)
            xp_ts, xp_bs, y_ts, y_bs = B * nd * GH, nd * GH, nd * B * H, H

        def state_in(a):      # an initial state in the node's layout -> (D, B, H)
            return a.transpose(1, 0, 2) if s.layout else a

        def run(inputs, outputs):
            if rows == 0:
                for o in outputs:
                    if o is not None:
                        o.fill(0)
                return
            xp = xp_h.get()
            xp2 = xp.reshape(rows, nd * GH)
            proj.run(inputs[0].reshape(rows, s.I), xp2, None, proj_ws.get())  # biases: in C
            st = state_h.get()
            hs, cs = st[0], st[1]
            for k, dst in ((5, hs), (6, cs)):
                if has[k] and (k == 5 or node.op == "LSTM"):
                    np.copyto(dst, state_in(inputs[k]), casting="unsafe")
                else:
                    dst.fill(0)
            lens = None
            if has[4]:
                lens = np.clip(inputs[4], 0, T).astype(np.int32)
            y = outputs[0] if len(outputs) and outputs[0] is not None else None
            yflat = None if y is None else y.reshape(-1)
            ws = ws_h.get()
            for d, unit in enumerate(units):
                y_off = d * H if s.layout else d * B * H
                unit.run(xp, d * GH, xp_ts, xp_bs, T, B, hs[d], cs[d], yflat, y_off,
                         y_ts, y_bs, lens, reverse or d == 1, ws)
            if lens is not None:
                st[:, :, lens == 0] = 0      # an empty sequence has zero Y_h, Y_c (as ORT)
            for k, src in ((1, hs), (2, cs)):
                if len(outputs) > k and outputs[k] is not None:
                    outputs[k][...] = src.transpose(1, 0, 2) if s.layout else src
        return run
    return prepare


def spec_name(op: str, row) -> str:
    """The spec of a table row (_recurrent.h's rc_rows) for op: <op>_sgemm_gemv__<tier>."""
    return f"{op.lower()}_sgemm_gemv__{row.isa}"


for _op in GATES:       # a spec per row, the later (better) rows first in priority
    for _prio, _row in enumerate(_recurrent.ROWS):
        kernel(_op, spec_name(_op, _row), supports=_supports,
               isa="" if _row.isa == "scalar" else _row.isa, priority=_prio)(_make(_row.name))
