"""DepthwiseProject: a 3x3 depthwise conv (stride 1, pad 1) and the 1x1 conv that alone
reads its output (MobileNetV2's and EfficientNet-Lite's first block, every MobileNetV1
pair at stride 1), in bands of output rows (_dwproj.h, AVX2 and AVX-512F): the depthwise
output of a band stays in the core's caches and is read there by the 1x1 conv, never
written out whole.

An edgenn-internal op, made at plan time only (runtime/fuse_steps.py), where this kernel
measured faster than the two layers' own best kernels.

inputs: x (N, C, H, W), wd (C, 1, 3, 3), bd (C,) or "", wp (M, C, 1, 1), bp (M,) or "",
z "" (a residual of the 1x1 conv: not taken by this kernel); attrs "depthwise" and
"project": the two Convs' attributes (fused Relu / Clip included). -> y (N, M, H, W)."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..native import epilogue
from ..gemm.conv import geometry
from .expand_depthwise import halves
from ..native.threading_cost import plan_threads

T_BYTES = 96 * 1024    # a band's depthwise output (C x rows x W floats): in L2


def _dwproj():
    from . import _dwproj
    return _dwproj


def _const_conv(node, ins, group: int, kernel_hw: tuple) -> bool:
    x, w = ins[0], ins[1]
    a = node.attrs
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and len(w.shape) == 4 and tuple(w.shape[2:]) == kernel_hw
            and w.shape[1] * group == x.shape[1] and int(a.get("group", 1)) == group
            and all(int(s) == 1 for s in a.get("strides") or [1, 1])
            and all(int(d) == 1 for d in a.get("dilations") or [1, 1])
            and a.get("activation", "") in _dwproj().ACTIVATIONS
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None)
            and (len(ins) < 4 or ins[3] is None))


def _supports(node, ins, outs) -> bool:
    if node.op != "DepthwiseProject" or len(ins) < 4 or ins[0] is None or ins[1] is None \
            or ins[3] is None:
        return False
    (d, d_ins, d_outs), (p, p_ins, p_outs) = halves(node, ins, outs)
    x, c = ins[0], ins[0].shape[1] if len(ins[0].shape) == 4 else 0
    if not (_const_conv(d, d_ins, c, (3, 3)) and d_ins[1].shape[0] == c
            and _const_conv(p, p_ins, 1, (1, 1))):
        return False
    (sh, sw), (pt, pl), _ = geometry(d, x.shape, d_ins[1].shape, d_outs[0].shape)
    n, m = x.shape[0], p_ins[1].shape[0]
    return (pt, pl) == (1, 1) and tuple(outs[0].shape) == (n, m) + tuple(x.shape[2:])


def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and _supports(node, ins, outs)


def band_height(c: int, h: int, w: int) -> int:
    """Output rows per band: an even count whose depthwise output fits T_BYTES."""
    rows = T_BYTES // max(1, c * w * 4)
    return int(max(2, min(h, rows // 2 * 2)))


def prepare(node, ins, outs, threads: int, row: str, lib=None):
    """threads: OpenMP threads, each an even share of the output rows in bands of <= rows
    (band_height); row: a name in the table (lib.ROWS); lib: the extension (tests pass the
    SIMDe-emulated _dwproj_emu)."""
    if lib is None:
        from . import _dwproj as lib
    (d, d_ins, _), (p, p_ins, _) = halves(node, ins, outs)
    n, c, h, w = ins[0].shape
    m = p_ins[1].shape[0]
    wd = np.ascontiguousarray(np.asarray(d_ins[1].value, np.float32).reshape(c, 9))
    bd, dact, dlo, dhi, _ = epilogue.constant_parts(d, d_ins, c)
    bd = np.zeros(c, np.float32) if bd is None else bd
    bp, pact, plo, phi, _ = epilogue.constant_parts(p, p_ins, m)
    wpk, bpk = lib.pack(np.asarray(p_ins[1].value, np.float32).reshape(m, c), bp, row)
    rows = band_height(c, h, w)
    threads = max(1, min(threads, h))       # each an even share of the rows
    t_h = scratch.array((threads, lib.scratch(c, w, rows)), np.float32, persistent=True,
                        fill=0.0)
    run_c = lib.run

    def run(inputs, outputs):
        x, y, t = np.ascontiguousarray(inputs[0]), outputs[0], t_h.get()
        for b in range(n):
            run_c(x[b], wd, bd, wpk, bpk, y[b], t, rows, dact, dlo, dhi, pact, plo, phi, row)
    return run


def _register():
    """A spec per row of the table (_dwproj.h's dwp_rows), named after it, and its *_mt
    twin on the session's threads."""
    from . import _dwproj
    for row in _dwproj.ROWS:
        kernel("DepthwiseProject", row.name, supports=_supports, isa=row.isa)(
            lambda node, ins, outs, r=row.name: prepare(node, ins, outs, 1, r))
        kernel("DepthwiseProject", row.name + "_mt", supports=_mt_supports, isa=row.isa)(
            lambda node, ins, outs, r=row.name: prepare(node, ins, outs, plan_threads(), r))


_register()
