"""Depthwise 2-D convolution (group == C == M, one filter per channel) in Numba.

x (N, C, H, W), w (C, 1, KH, KW) -> y (N, C, OH, OW); any kernel size, stride, dilation
and padding; bias, residual and activation in the same pass where cheap."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from . import epilogue
from .conv import geometry

_jit = None


def _compiled():
    global _jit
    if _jit is None:
        import numba

        @numba.njit(cache=True, nogil=True)
        def depthwise(x, w, bias, y, sh, sw, ph, pw, dh, dw):
            n, c, h, wd = x.shape
            _, _, oh, ow = y.shape
            kh, kw = w.shape[2], w.shape[3]
            for b in range(n):
                for ch in range(c):
                    for oy in range(oh):
                        for ox in range(ow):
                            acc = np.float32(0.0)
                            for i in range(kh):
                                iy = oy * sh - ph + i * dh
                                if iy < 0 or iy >= h:
                                    continue
                                for j in range(kw):
                                    ix = ox * sw - pw + j * dw
                                    if 0 <= ix < wd:
                                        acc += x[b, ch, iy, ix] * w[ch, 0, i, j]
                            y[b, ch, oy, ox] = acc + bias[ch]
        _jit = depthwise
    return _jit


def _supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and node.attrs.get("group", 1) == x.shape[1] == w.shape[0] and w.shape[1] == 1
            and epilogue.supported(node)
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None))


@kernel("Conv", "depthwise_numba", supports=_supports)
def prepare(node, ins, outs):
    fn = _compiled()
    x, w, y = ins[0], ins[1].value, outs[0]
    (sh, sw), (ph, pw), (dh, dw) = geometry(node, x.shape, w.shape, y.shape)
    wc = np.ascontiguousarray(w, dtype=np.float32)
    c = w.shape[0]
    bias = (ins[2].value.astype(np.float32) if len(ins) > 2 and ins[2] is not None
            else np.zeros(c, np.float32))
    tmp = np.empty(y.shape, np.float32)
    act, params = node.attrs.get("activation", ""), node.attrs.get("activation_params", [])
    has_z = len(ins) > 3 and ins[3] is not None

    def run(inputs, outputs):
        out = outputs[0]
        fn(inputs[0], wc, bias, out, sh, sw, ph, pw, dh, dw)
        if has_z:
            np.add(out, inputs[3], out=out)
        epilogue.activate(out, act, params, tmp)
    return run
