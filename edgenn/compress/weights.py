"""Weight-only int8 / int4 for size: the weights are stored as symmetric integer codes with
one scale per block of one output channel, and decoded to float32 at load, so the
compute stays fp32 (for models whose activations must stay float, e.g. transformers).

Blocks run along the reduction axes of one output channel: int8 uses one block per channel
(per-channel scales), int4 blocks of 32 values (as llama.cpp's q4 formats), since a single
scale over a whole channel is too coarse at 15 levels. Scales are fitted by ADMM (the
alternating least-squares of Leng et al., MNN's tool), never worse than max-abs.

In the .enn file such a tensor has codec "qblock": blobs "q" (int8 codes, or two int4
codes per uint8, low nibble first) and "scale" ((channels, blocks) float32; float16 for
int4), plus its shape, channel axis, bits and block size; every blob is CRC-checked like
any other.
"""
from __future__ import annotations

import numpy as np

from ..graph import codecs as qblock
from ..graph.codecs import INT4_BLOCK, QMAX, decode, encode  # noqa: F401 - re-exported
from ..errors import InputError
from ..graph.ir import Graph
from ..quant.calibration import admm_scales

MIN_ELEMENTS = 1024          # smaller tensors (biases, norms, scales) stay raw
# the codec fits its scales by ADMM once this module is imported
qblock.FIT_SCALES = lambda rows, qmax: admm_scales(rows, 0, qmax)


def output_axis(graph: Graph, name: str) -> int | None:
    """The output-channel axis of weight `name` from its consumers, None if not a weight."""
    axes = set()
    for node in graph.nodes:
        for i, inp in enumerate(node.inputs):
            if inp != name:
                continue
            if node.op in ("Conv", "ConvTranspose") and i == 1:
                axes.add(0 if node.op == "Conv" else 1)
            elif node.op == "Gemm" and i == 1:
                axes.add(0 if node.attrs.get("transB", 0) else 1)
            elif node.op == "MatMul" and i == 1:
                axes.add(-1)
            else:
                return None   # used as data elsewhere: leave it exact
    return axes.pop() if len(axes) == 1 else None


def row_block(k: int, block: int, bits: int) -> int:
    """The block (values per scale) for rows of k values, near `block` without padding:
    a row no longer than a block is one block; else the largest divisor of k from block
    down to block / 2, else `block` (the last block padded). int4 blocks are even (two
    codes per byte). Padding had cost codes and scales: a 5x5 depthwise row of 25 values
    took 64 codes at block 64, a 200-value row 256."""
    even = (lambda b: b + b % 2) if bits == 4 else (lambda b: b)
    if k <= block:
        return even(k)
    for d in range(block, (block + 1) // 2 - 1, -1):
        if k % d == 0 and (bits != 4 or d % 2 == 0):
            return d
    return block


def compress_weights(graph: Graph, bits: int = 8, min_elements: int = MIN_ELEMENTS,
                     names=None, fit: str = "admm", block: int | None = None, calib=None,
                     threads: int = 1) -> dict:
    """Mark every float32 weight of >= min_elements values (of `names` only, if given) for
    weight-only coding and replace it in memory by its decoded value, so the graph runs now
    exactly as it will after save + load. block: values per scale (default 32 for int4,
    a whole channel for int8). With `calib` (calibration data, as quantize takes), the
    codes of MatMul / Gemm / Conv weights are chosen by GPTQ against their inputs on it
    (gptq.py; the others as without).
    -> {"tensors": n, "bytes_before": b0, "bytes_after": b1, "gptq": n_gptq}."""
    if block is not None and (block < 1 or bits == 4 and block % 2):
        raise InputError(f"block must be a positive (for int4: even) count, got {block}")
    codecs = graph.meta.setdefault("weight_codecs", {})
    chosen = {}
    for name, w in list(graph.consts.items()):
        if names is not None and name not in names:
            continue
        if w.dtype != np.float32 or w.size < min_elements or w.ndim < 2:
            continue
        axis = output_axis(graph, name)
        if axis is not None:
            chosen[name] = axis
    from . import gptq
    hs = {}
    if calib is not None and chosen:
        hs = gptq.hessians(graph, chosen, calib, threads)
    before = after = 0
    by_gptq = len(hs)
    for name, axis in chosen.items():
        w = graph.consts[name]
        k = w.size // max(w.shape[axis], 1)
        size = row_block(k, block or (qblock.INT4_BLOCK if bits == 4 else k), bits)
        if name in hs:
            coded = gptq.coded(w, axis, hs.pop(name), bits, size)
        else:
            coded = encode(w, axis, bits, fit, block=size)
        graph.consts[name] = decoded = decode(coded["q"], coded["scale"], coded["meta"])
        qblock.remember(decoded, coded)
        codecs[name] = {"bits": bits, "axis": coded["meta"]["axis"],
                        "block": coded["meta"]["block"]}
        before += w.nbytes
        after += coded["q"].nbytes + coded["scale"].nbytes
    return {"tensors": len(chosen), "bytes_before": before, "bytes_after": after,
            "gptq": by_gptq}
