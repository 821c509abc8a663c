"""QGather: the rows of a quantized embedding table, dequantized only when gathered
(compress/embeddings.py makes the op; graph/shapes/quant.py has its layout).

indices (any shape, n values) -> y (n, dim) float32: the n code rows taken in one np.take
into scratch (out-of-range indices raise, negative ones count from the end, as Gather),
widened to float32 and multiplied by their block scales straight into y. int4 codes are
unpacked on the way (two per byte, low nibble first)."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch


def _supports(node, ins, outs) -> bool:
    return ins[0].value is not None and ins[1].value is not None


@kernel("QGather", "qgather_take", supports=_supports)
def prepare(node, ins, outs):
    codes, scale = ins[0].value, np.asarray(ins[1].value, np.float32)
    bits, block, dim = (int(node.attrs[k]) for k in ("bits", "block", "dim"))
    n = int(np.prod(ins[2].shape, dtype=np.int64))
    blocks = scale.shape[1]
    width = blocks * block
    c_h = scratch.array((n, codes.shape[1]), codes.dtype)
    q_h = scratch.array((n, width), np.int8) if bits == 4 else None
    s_h = scratch.array((n, blocks), np.float32)
    f_h = scratch.array((n, blocks, block), np.float32)

    def run(inputs, outputs):
        idx = inputs[2].reshape(-1)
        c, s, f = c_h.get(), s_h.get(), f_h.get()
        np.take(codes, idx, axis=0, out=c)
        np.take(scale, idx, axis=0, out=s)
        q = c
        if bits == 4:
            q = q_h.get()
            np.bitwise_and(c, 0x0F, out=q[:, 0::2], casting="unsafe")
            np.right_shift(c, 4, out=q[:, 1::2], casting="unsafe")
            q -= (q > 7).astype(np.int8) * 16         # two's complement nibbles
        np.multiply(q.reshape(n, blocks, block), s[:, :, None], out=f)
        y = outputs[0].reshape(n, dim)
        np.copyto(y, f.reshape(n, width)[:, :dim])
    return run
