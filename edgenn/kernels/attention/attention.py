"""GroupQueryAttention (onnxruntime's com.microsoft op, graph/shapes/decoder.py) on _gqa.h's
rows: decode (S = 1) and causal prefill (S > 1) over a BNSH cache, float32.

Supported: packed QKV or separate Q / K / V; past_key / past_value of any capacity
(onnxruntime's shared buffer) or none; kv_in_place 1 (the new rows written into the past
arrays) or 0 (present outputs: the past rows, the new ones, zeros after); do_rotary with
cos / sin caches (interleaved or not, r <= H), positions from seqlens_k or position_ids;
local_window_size, softcap, scale, smooth_softmax. Not here (the reference runs them):
attention_bias, head_sink, float16.

One spec per row of the table (gqa_<row>), and a *_mt twin splitting the (batch entry,
kv head) passes over the session's OpenMP threads.
"""
from __future__ import annotations

import numpy as np

from ..native.tables import register_row_specs
from ..native.threading_cost import plan_threads
from . import _gqa

OP = "GroupQueryAttention"


def _given(ins, i) -> bool:
    return i < len(ins) and ins[i] is not None


def _supports(node, ins, outs) -> bool:
    if _given(ins, 10) or _given(ins, 11):           # attention_bias, head_sink
        return False
    q = ins[0]
    if q is None or q.dtype != "float32" or len(q.shape) != 3:
        return False
    for i in (1, 2, 3, 4):
        if _given(ins, i) and ins[i].dtype != "float32":
            return False
    if _given(ins, 1) != _given(ins, 2) or _given(ins, 3) != _given(ins, 4):
        return False
    if any(o is not None and o.dtype != "float32" for o in outs):
        return False
    if int(node.attrs.get("do_rotary", 0)):
        if not (_given(ins, 7) and _given(ins, 8)) or ins[7].dtype != "float32" \
                or ins[8].dtype != "float32":
            return False
        if _given(ins, 9) and ins[9].dtype != "int64":
            return False
    if int(node.attrs.get("smooth_softmax", 0)) not in (0, 1):
        return False
    return True


def _mt_supports(node, ins, outs) -> bool:
    if plan_threads() < 2 or not _supports(node, ins, outs):
        return False
    return ins[0].shape[0] * int(node.attrs["kv_num_heads"]) >= 2


def _c(a):
    """a as a C-contiguous float32 array (a view when it already is one)."""
    if a.dtype == np.float32 and a.flags.c_contiguous:
        return a
    return np.ascontiguousarray(a, np.float32)


def _make(row: str, lib=_gqa, threads=None):
    """The prepare of the spec of table row `row` (lib: _gqa, or the tests' emulated build
    _gqa_emu); threads: None = one, else a callable giving the plan's count."""
    def prepare(node, ins, outs):
        at = node.attrs
        n, kvn = int(at["num_heads"]), int(at["kv_num_heads"])
        packed = not _given(ins, 1)
        hidden = ins[0].shape[-1]
        h = hidden // (n + 2 * kvn) if packed else hidden // n
        in_place = bool(int(at.get("kv_in_place", 0)))
        rotary = bool(int(at.get("do_rotary", 0)))
        smooth = int(at.get("smooth_softmax", 0)) == 1
        g = lib.GQA(n, kvn, h, packed, float(at.get("scale", 0.0) or 0.0),
                    float(at.get("softcap", 0.0) or 0.0), int(at.get("local_window_size", -1)),
                    bool(int(at.get("rotary_interleaved", 0))), smooth, in_place, row=row)
        total_const = ins[6].value if _given(ins, 6) else None
        total_const = None if total_const is None else int(np.asarray(total_const).reshape(-1)[0])
        nt = 1 if threads is None else threads()
        run_c = g.run

        def run(inputs, outputs):
            ins_ = list(inputs) + [None] * (12 - len(inputs))
            q, k, v, pk, pv, seqlens, total, cos, sin, pos = ins_[:10]
            q = _c(q)
            if not packed:
                k, v = _c(k), _c(v)
            sl = seqlens if seqlens.dtype == np.int32 and seqlens.flags.c_contiguous \
                else np.ascontiguousarray(seqlens, np.int32)
            tl = total_const if total_const is not None else int(np.asarray(total).reshape(-1)[0])
            if rotary:
                cos, sin = _c(cos), _c(sin)
                if pos is not None and not (pos.dtype == np.int64 and pos.flags.c_contiguous):
                    pos = np.ascontiguousarray(pos, np.int64)
            else:
                cos = sin = pos = None
            out = outputs[0]
            o = out if out.dtype == np.float32 and out.flags.c_contiguous \
                else np.empty(out.shape, np.float32)
            if in_place:
                ck = pk if pk.dtype == np.float32 and pk.flags.c_contiguous else _c(pk)
                cv = pv if pv.dtype == np.float32 and pv.flags.c_contiguous else _c(pv)
                run_c(q, k, v, ck, cv, sl, tl, cos, sin, pos, o, ck, cv, nt)
                if ck is not pk:                 # a strided buffer: the rows written back
                    pk[...] = ck
                if cv is not pv:
                    pv[...] = cv
            else:
                if pk is not None:
                    pk, pv = _c(pk), _c(pv)
                pres_k, pres_v = outputs[1], outputs[2]
                ck = pres_k if pres_k.flags.c_contiguous else np.empty(pres_k.shape, np.float32)
                cv = pres_v if pres_v.flags.c_contiguous else np.empty(pres_v.shape, np.float32)
                run_c(q, k, v, pk, pv, sl, tl, cos, sin, pos, o, ck, cv, nt)
                if ck is not pres_k:
                    pres_k[...] = ck
                if cv is not pres_v:
                    pres_v[...] = cv
            if o is not out:
                out[...] = o
        return run
    return prepare


def spec_name(row) -> str:
    """The spec of a table row: group_query_attention_<row> (row gqa_k<L>__<tier>)."""
    return "group_query_attention_" + row.name


register_row_specs(OP, _gqa.ROWS, spec_name, _make, _supports, _mt_supports, "attention")
