"""ExpandDepthwise: a 1x1 conv and the depthwise conv that alone reads its output (an
inverted residual's expansion and depthwise layers, MobileNet's), in one pass: per group
of 8 / 16 expanded channels the 1x1 conv is computed straight into the depthwise conv's
zero-padded channel-interleaved plane (_dwc8.h's dwc_expand), which the c8 / c16 loops
then read. The expanded tensor (6x the block's input) is never written out, nor read back
and transposed into the plane.

An edgenn-internal op, made at plan time only (runtime/fuse_steps.py), where this kernel
measured faster than the two layers' own best kernels.

inputs: x (N, K, H, W), w1 (C, K, 1, 1), b1 (C,) or "", w2 (C, 1, KH, KW), b2 (C,) or "",
z (N, C, OH, OW) or "" (a residual of the depthwise conv); attrs "expand" and "depthwise":
the two Convs' attributes (fused activations included). -> y (N, C, OH, OW)."""
from __future__ import annotations

import numpy as np

from ...graph.ir import Node
from ...graph.shapes.fused import PAIR_KEYS
from ...registry import TensorInfo
from . import depthwise
from .depthwise import (_supports as _dw_supports, act_params, c8_parts, lane_major,
                        register_widths)
from ..native.threading_cost import c_cost, plan_threads


def _dwc8():
    from . import _dwc8
    return _dwc8


def halves(node, ins, outs):
    """-> (first conv node, its ins, outs), (second conv node, its ins, outs) of a fused
    conv pair (ExpandDepthwise: the expansion and the depthwise conv; DepthwiseProject: the
    depthwise conv and the 1x1 conv), each with its attrs of PAIR_KEYS[node.op]."""
    x, w1, b1, w2, b2, z = (list(ins) + [None] * 6)[:6]
    first_key, second_key = PAIR_KEYS[node.op]
    n, _, h, w = x.shape
    mid = TensorInfo(x.dtype, (n, w1.shape[0], h, w))
    first = Node("Conv", ["x", "w", "b" if b1 is not None else ""], ["t"],
                 node.attrs[first_key], node.name)
    second = Node("Conv", ["t", "w", "b" if b2 is not None else "", "z" if z is not None else ""],
                  ["y"], node.attrs[second_key], node.name)
    return (first, [x, w1, b1], [mid]), (second, [mid, w2, b2, z], list(outs))


def expand_ok(node, ins, outs) -> bool:
    """A 1x1, stride-1, unpadded, group-1 float32 conv with constant weights (and bias),
    no residual, an activation computed in registers."""
    x, w = ins[0], ins[1]
    a = node.attrs
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and len(w.shape) == 4 and tuple(w.shape[2:]) == (1, 1)
            and int(a.get("group", 1)) == 1
            and all(int(s) == 1 for s in a.get("strides") or [1, 1])
            and all(int(p) == 0 for p in a.get("pads") or [0, 0, 0, 0])
            and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
            and a.get("activation", "") in _dwc8().EXPAND_ACTIVATIONS   # in registers
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None)
            and (len(ins) < 4 or ins[3] is None)
            and tuple(outs[0].shape[2:]) == tuple(x.shape[2:]))


def _supports(node, ins, outs) -> bool:
    if node.op != "ExpandDepthwise" or len(ins) < 4 or ins[0] is None or ins[1] is None \
            or ins[3] is None:
        return False
    (e, e_ins, e_outs), (d, d_ins, d_outs) = halves(node, ins, outs)
    return (expand_ok(e, e_ins, e_outs) and d_ins[1].value is not None
            and d_ins[1].shape[0] == e_ins[1].shape[0] and _dw_supports(d, d_ins, d_outs))


def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and _supports(node, ins, outs)


def _cost(node, ins, outs):
    (_, _, _), (d, d_ins, d_outs) = halves(node, ins, outs)
    return c_cost(d, d_ins, d_outs)


def _rows_split_supports(node, ins, outs) -> bool:
    return depthwise.row_split_ok(outs) and _supports(node, ins, outs)


def prepare(node, ins, outs, threads: int, lanes: int, lib=None, split_rows: bool = False,
            row: str | None = None):
    """On the table's best row of `lanes` lanes (8: AVX2, 16: AVX-512F) or on `row`
    (depthwise.c8_row); threads split the channel groups, or with split_rows the output
    rows (depthwise.py, ROW_SPLIT_MIN_ROWS); lib: the extension (tests pass the
    SIMDe-emulated _dwc8_emu)."""
    if lib is None:
        from . import _dwc8 as lib
    row, lanes = depthwise.c8_row(lib, lanes, row)
    (e, e_ins, _), (d, d_ins, d_outs) = halves(node, ins, outs)
    c, k = e_ins[1].shape[:2]
    threads = depthwise.split_threads(threads, c, d_outs[0].shape[2], lanes, split_rows)
    p = c8_parts(d, d_ins[1].value, d_ins, d_ins[0].shape, d_outs[0].shape, threads, lanes,
                 lib)
    ew = lane_major(np.asarray(e_ins[1].value, np.float32).reshape(c, k), lanes)  # (g, K, l)
    eb = np.zeros(ew.shape[0] * lanes, np.float32)
    if e_ins[2] is not None:
        eb[:c] = e_ins[2].value
    eb = eb.reshape(-1, lanes)
    p.row = row
    return depthwise.c8_runner(p, lib, e_ins[0].shape, d_outs[0].shape, split_rows, 5,
                               (ew, eb, *act_params(e)))


register_widths("ExpandDepthwise", ((8, "expand_depthwise_c8", ""),
                                    (16, "expand_depthwise_c16__avx512f", "avx512"))
                + depthwise.other_widths("expand_depthwise"),
                _supports, _mt_supports, prepare, _cost, _rows_split_supports)
