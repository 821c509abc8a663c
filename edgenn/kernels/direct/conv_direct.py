"""conv_direct: 2-D convolution for few input channels (C <= 8: a network's RGB / gray
first layer) straight from the zero-padded image (_convdirect.pyx / _convdirect.h):
output pixels in the vector lanes, a register tile of output channels x pixels, one
broadcast weight per tap and channel; nothing is packed per call.

x (N, C, H, W), W (M, C, KH, KW) constant, stride 1 or 2, dilation 1, group 1, any pads;
bias and the Relu / Clip / per-channel PRelu epilogue fused. A Conv candidate per row of
the table; the tuner keeps it only where it beats the GEMM and Winograd forms."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..native import epilogue
from ..gemm.conv import geometry
from ..native.threading_cost import plan_threads

MAX_CHANNELS = 8



def _convdirect():
    from . import _convdirect
    return _convdirect


def _supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    if len(x.shape) != 4 or x.dtype != "float32" or w.value is None or len(w.shape) != 4:
        return False
    a = node.attrs
    strides = [int(s) for s in a.get("strides") or [1, 1]]
    return (int(a.get("group", 1)) == 1 and 0 < x.shape[1] <= MAX_CHANNELS
            and [int(d) for d in a.get("dilations") or [1, 1]] == [1, 1]
            and strides[0] in (1, 2) and strides[1] in (1, 2) and w.shape[3] <= 64
            and a.get("activation", "") in _convdirect().ACTIVATIONS
            and (len(ins) < 4 or ins[3] is None)
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None))


def prepare(node, ins, outs, row: str, lib=None, threads: int = 1):
    """row: a name in the table (lib.rows()); lib: the extension module (tests pass the
    SIMDe-emulated _convdirect_emu); threads > 1: the output rows split over OpenMP
    threads (the *_mt specs)."""
    if lib is None:
        from . import _convdirect as lib
    n, c, h, wd = ins[0].shape
    w = np.asarray(ins[1].value, np.float32)
    m, _, kh, kw = w.shape
    oh, ow = outs[0].shape[2:]
    (sh, sw), (pt, pl), _ = geometry(node, ins[0].shape, w.shape, outs[0].shape)
    px = lib.tile(row)[1]
    # the padded rows of a band of output rows, each split into its sw column phases
    # (padded column q * sw + p in phase p at q): every tap of every output of whole pixel
    # tiles stays inside a phase row, and tap j reads phase j % sw from o + j // sw
    wq = max(-(-ow // px) * px + (kw - 1) // sw, -(-(pl + wd) // sw))
    band = band_height(c, sw * wq, sh, kh, oh)
    wpk = lib.pack_weights(w, row)
    bias, act, lo, hi, slope = epilogue.constant_parts(node, ins, m)
    nt = max(1, min(threads, oh))
    buf_h = scratch.array((nt, c, lib.band_rows(band, sh, kh), sw * wq), np.float32,
                          persistent=True, fill=0.0)
    run_c = lib.run_bands

    def run(inputs, outputs):
        x, y, buf = np.ascontiguousarray(inputs[0]), outputs[0], buf_h.get()
        for b in range(n):
            run_c(x[b], buf, wpk, bias, y[b], kh, kw, sh, sw, pt, pl, act, lo, hi, row, slope,
                  nt, band)
    return run


BAND_BYTES = 128 * 1024   # a band's padded input rows (all channels): in L2


def band_height(c: int, row_floats: int, sh: int, kh: int, oh: int) -> int:
    """Output rows per band: as many as keep the band's padded input rows within
    BAND_BYTES (at least one)."""
    per_row = c * row_floats * 4
    rows = (BAND_BYTES // per_row - kh) // sh + 1
    return int(max(1, min(oh, rows)))


def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and outs[0].shape[2] > 1 and _supports(node, ins, outs)


def _register():
    """A Conv spec per row of the table (_convdirect.h's cd_rows), named after it; the
    vector rows also split the output rows over the session's threads (OpenMP, *_mt)."""
    for row in reversed(_convdirect().ROWS):   # best first: "first capable" order
        isa = "" if row.isa == "scalar" else row.isa
        kernel("Conv", row.name, supports=_supports, isa=isa)(
            lambda node, ins, outs, r=row.name: prepare(node, ins, outs, r))
        if isa:
            kernel("Conv", row.name + "_mt", supports=_mt_supports, isa=isa)(
                lambda node, ins, outs, r=row.name: prepare(node, ins, outs, r,
                                                        threads=plan_threads()))


_register()
