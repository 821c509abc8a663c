"""Conv and Gemm on edgenn's own packed sgemm (_sgemm.pyx / sgemm.h), epilogue fused into
the GEMM's register tiles: no extra passes for bias, residual or activation.

conv_sgemm: group-1 2-D conv, x (N, C, H, W), W (M, C, KH, KW) -> y (N, M, OH, OW). The
weights are the constant A (M, C*KH*KW), packed once; per image, B (C*KH*KW, OH*OW) is
either x itself (1x1, stride 1, no padding: read in place) or packed block by block
straight from the image (implicit im2col, never materialized).

gemm_sgemm: Gemm with a constant B; A (..., K) or A^T per call, C constant (per column,
per row, scalar or full), alpha and beta folded at prepare.

The specs are generated from the family's table (sgemm_table.h, read as _sgemm.ROWS):
per row `sgemm_<tile>__<isa>`, conv_sgemm_<tile>__<isa> and gemm_sgemm_<tile>__<isa>
(with *_mt twins), and conv_rows_<tile>__<isa> for rows that have the rows mode. The
portable row is the family's fallback: offered only where no SIMD row runs."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..plan_context import current
from . import _sgemm as sg
from ..native import epilogue
from .conv import geometry
from ..native.threading_cost import plan_threads


def _conv_supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and len(w.shape) == 4 and node.attrs.get("group", 1) == 1
            and node.attrs.get("activation", "") in sg.ACTIVATIONS
            and int(np.prod(w.shape[1:])) > 0
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None))


def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and _conv_supports(node, ins, outs)


# rows mode offered up to this many output pixels (from about 28 x 28 outputs on, the
# column mode's 32-pixel vectors are full and it is as fast or faster; the tuner picks)
ROWS_MAX_PIXELS = 1024


def _is_direct(node, ins, outs) -> bool:
    """A 1x1, stride-1, unpadded conv: B is the image itself, read in place."""
    (sh, sw), (ph, pw), _ = geometry(node, ins[0].shape, ins[1].shape, outs[0].shape)
    return (tuple(ins[1].shape[2:]) == (1, 1) and sh == sw == 1 and ph == pw == 0
            and tuple(outs[0].shape[2:]) == tuple(ins[0].shape[2:]))


def _rows_supports(node, ins, outs) -> bool:
    return (_conv_supports(node, ins, outs)
            and int(np.prod(outs[0].shape[2:])) <= ROWS_MAX_PIXELS)


def _rows_mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and _rows_supports(node, ins, outs)


def _prepare_conv(node, ins, outs, threads: int, row: str, rows: bool = False):
    x, w, y = ins[0], ins[1].value, outs[0]
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    _, _, oh, ow = y.shape
    (sh, sw), (ph, pw), (dh, dw) = geometry(node, x.shape, w.shape, y.shape)
    k, npix = c * kh * kw, oh * ow
    bias = ins[2].value.reshape(m) if len(ins) > 2 and ins[2] is not None else None
    direct = _is_direct(node, ins, outs)
    wmat = np.asarray(w, np.float32).reshape(m, k)
    epi = dict(bias_row=bias, act=node.attrs.get("activation", ""),
               params=node.attrs.get("activation_params", []) or [], threads=threads, row=row)
    conv = None if direct else (c, h, wd, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
    # threads > 1, a 1x1 conv that narrows >= 2x (an inverted residual's projection, read
    # after its block's channel-split depthwise layer): its threads may split K instead
    # of M, where the plan context asks (runtime/session.py times plans with and without)
    can_split_k = rows and direct and threads > 1 and k >= 2 * m and \
        epi["act"] in sg.K_SPLIT_ACTIVATIONS
    if rows:     # W^T as the constant B panels; the image read in place or im2col'd
        g = sg.SGemm(m, npix, k, packed_wt=sg.pack_b(np.ascontiguousarray(wmat.T)), conv=conv,
                     k_split=can_split_k and current().k_split, **epi)
    else:
        g = sg.SGemm(m, npix, k, packed_a=sg.pack_a(wmat), direct_b=direct, conv=conv, **epi)
    has_z = len(ins) > 3 and ins[3] is not None
    gemm = g.run_images    # whole batch in one call, x / out / z as given (C-contiguous)
    ws = scratch.bytes_(g.workspace_bytes)

    if has_z:
        def run(inputs, outputs):
            gemm(inputs[0], outputs[0], inputs[3], ws.get())
    else:
        def run(inputs, outputs):
            gemm(inputs[0], outputs[0], None, ws.get())

    def cstep(ins, outs, in_cells, out_cells):
        """run as a C step where run_images would take the arrays as they are (float32:
        no conversion); ws.get() is this context's workspace (the loop is built with the
        context's scratch active)."""
        if any(a.dtype != np.float32 for a in [ins[0], outs[0]] + ([ins[3]] if has_z else [])):
            return None
        return g.images_cstep(n, in_cells[0], out_cells[0], in_cells[3] if has_z else None,
                              ws.get())
    run.cstep = cstep
    run.can_split_k = can_split_k
    run.splits_k = g.k_parts > 0
    return run


def _gemm_bias(node, ins, outs):
    """-> (bias_row, bias_col, const_z) from Gemm's constant C (times beta), or None if C
    is not constant. Rows = every output dim but the last."""
    n = outs[0].shape[-1]
    rows = int(np.prod(outs[0].shape[:-1]))
    if len(ins) < 3 or ins[2] is None:
        return None, None, None
    if ins[2].value is None:
        return None
    c = np.asarray(ins[2].value, np.float32) * np.float32(node.attrs.get("beta", 1.0))
    if c.size == 1:
        return None, np.full(n, c.reshape(()), np.float32), None
    if c.shape[-1] == n and c.size == n:
        return None, c.reshape(n), None
    if c.ndim == 2 and c.shape == (rows, 1):
        return c.reshape(rows), None, None
    return None, None, np.ascontiguousarray(np.broadcast_to(c, (rows, n)))


def _gemm_supports(node, ins, outs) -> bool:
    a, b = ins[0], ins[1]
    if not (a.dtype == b.dtype == "float32" and b.value is not None and len(b.shape) == 2
            and (len(a.shape) == 2 or not node.attrs.get("transA", 0))
            and epilogue.supported(node) and a.shape[-1 if not node.attrs.get("transA", 0)
                                                     else 0] > 0):
        return False
    bias = _gemm_bias(node, ins, outs)
    has_z = len(ins) > 3 and ins[3] is not None
    return bias is not None and not (bias[2] is not None and has_z)


def _gemm_mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and outs[0].shape[-1] >= 4 * 16 and _gemm_supports(node, ins, outs)


def prepare_gemm(node, ins, outs, row: str, threads: int = 1):
    at = node.attrs
    trans_a = bool(at.get("transA", 0))
    bmat = ins[1].value.T if at.get("transB", 0) else ins[1].value
    bmat = np.asarray(bmat, np.float32) * np.float32(at.get("alpha", 1.0))
    k, n = bmat.shape
    rows = int(np.prod(outs[0].shape[:-1]))
    bias_row, bias_col, const_z = _gemm_bias(node, ins, outs)
    g = sg.SGemm(rows, n, k, packed_b=sg.pack_b(bmat), bias_row=bias_row, bias_col=bias_col,
                 act=at.get("activation", ""), params=at.get("activation_params", []) or [],
                 row=row, threads=threads)
    has_z = len(ins) > 3 and ins[3] is not None
    gemm = g.run
    ws = scratch.bytes_(g.workspace_bytes)

    def run(inputs, outputs):
        a = inputs[0].T if trans_a else inputs[0].reshape(rows, k)
        z = np.require(inputs[3], requirements="C").reshape(rows, n) if has_z else const_z
        gemm(a, outputs[0].reshape(rows, n), z, ws.get())
    return run


def _register(op: str, name: str, supports, prepare, row) -> None:
    """One spec of table row `row`. Untimed plans (tune="off") rank the rows whose tile
    spans 2 x 2 panels above the other families' kernels (priority 0), the single-panel
    rows with them."""
    kernel(op, name, supports=supports, isa="" if row.isa == "scalar" else row.isa,
           priority=int(row.mr > sg.MR), family="sgemm", fallback=row.isa == "scalar")(prepare)


# Per row: one thread, and *_mt (output pixels / columns split over the session's OpenMP
# threads, which the tuner weighs against one thread: a busy core makes a split slower).
# The rows mode (pixels broadcast, channels in the vectors, so 7x7 = 49 pixels are not cut
# into 16-wide column vectors, and each weight panel is read once for all pixels): 1x1
# convs read the image in place, others its explicit im2col.
for _row in sg.ROWS:
    _t = _row.name[len("sgemm_"):]
    _register("Conv", f"conv_sgemm_{_t}", _conv_supports,
              lambda node, ins, outs, r=_row.name: _prepare_conv(node, ins, outs, 1, r), _row)
    _register("Conv", f"conv_sgemm_{_t}_mt", _mt_supports,
              lambda node, ins, outs, r=_row.name: _prepare_conv(node, ins, outs,
                                                                 plan_threads(), r), _row)
    _register("Gemm", f"gemm_sgemm_{_t}", _gemm_supports,
              lambda node, ins, outs, r=_row.name: prepare_gemm(node, ins, outs, r), _row)
    _register("Gemm", f"gemm_sgemm_{_t}_mt", _gemm_mt_supports,
              lambda node, ins, outs, r=_row.name: prepare_gemm(node, ins, outs, r,
                                                                threads=plan_threads()), _row)
    if _row.rows_mode:
        _register("Conv", f"conv_rows_{_t}", _rows_supports,
                  lambda node, ins, outs, r=_row.name: _prepare_conv(node, ins, outs, 1, r,
                                                                     True), _row)
        _register("Conv", f"conv_rows_{_t}_mt", _rows_mt_supports,
                  lambda node, ins, outs, r=_row.name: _prepare_conv(
                      node, ins, outs, plan_threads(), r, True), _row)
