"""2-D convolution as GEMM: 1x1 stride-1 convs multiply directly, others go through the
Cython im2col. x (N, C, H, W), W (M, C, KH, KW) -> y (N, M, OH, OW), groups == 1."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..native import epilogue


def geometry(node, x_shape, w_shape, y_shape):
    """-> (strides, pads (top, left), dilations) for a 2-D conv, resolving auto_pad."""
    a = node.attrs
    strides = list(a.get("strides") or [1, 1])
    dil = list(a.get("dilations") or [1, 1])
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for d in range(2):
            total = max(0, (y_shape[2 + d] - 1) * strides[d] + (w_shape[2 + d] - 1) * dil[d]
                        + 1 - x_shape[2 + d])
            pads.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    elif auto == "VALID":
        pads = [0, 0]
    else:
        pads = list(a.get("pads") or [0, 0, 0, 0])[:2]
    return strides, pads, dil


def _supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and node.attrs.get("group", 1) == 1 and epilogue.supported(node)
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None))


@kernel("Conv", "conv_gemm", supports=_supports, pool="blas")
def prepare(node, ins, outs):
    from ._im2col import im2col
    x, w, y = ins[0], ins[1].value, outs[0]
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    _, _, oh, ow = y.shape
    (sh, sw), (ph, pw), (dh, dw) = geometry(node, x.shape, w.shape, y.shape)
    wmat = np.require(w.reshape(m, c * kh * kw), dtype=np.float32, requirements="C")
    bias = ins[2].value.reshape(m, 1).astype(np.float32) if len(ins) > 2 and ins[2] else None
    direct = kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and not any(
        node.attrs.get("pads") or [0])
    cols_h = None if direct else scratch.array((c * kh * kw, oh * ow), np.float32)
    tmp_h = scratch.array((m, oh * ow), np.float32)
    act, params = node.attrs.get("activation", ""), node.attrs.get("activation_params", [])
    has_z = len(ins) > 3 and ins[3] is not None

    def run(inputs, outputs):
        xs, out = inputs[0], outputs[0]
        cols, tmp = None if direct else cols_h.get(), tmp_h.get()
        for b in range(n):
            yb = out[b].reshape(m, oh * ow)
            if direct:
                np.matmul(wmat, xs[b].reshape(c, h * wd), out=yb)
            else:
                im2col(xs[b], cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
                np.matmul(wmat, cols, out=yb)
            if bias is not None:
                np.add(yb, bias, out=yb)
            if has_z:
                np.add(yb, inputs[3][b].reshape(m, oh * ow), out=yb)
            epilogue.activate(yb, act, params, tmp)
    return run
