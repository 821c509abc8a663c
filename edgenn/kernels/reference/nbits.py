"""Reference kernels of the nbits family (layouts in graph/shapes/nbits.py).

MatMulNBits dequantizes the whole weight to float32 (N, K) and multiplies in float32, as
onnxruntime does at accuracy_level 0; `dequantize_nbits` is that first step, shared with
the fast kernels' tests. GatherBlockQuantized takes the gathered codes first and
dequantizes only those.
"""
from __future__ import annotations

import numpy as np

from ...graph.shapes.nbits import matmul_zero_points, unpack_codes
from ...registry import reference


def dequantize_nbits(b, scales, zero_points, g_idx, K: int, N: int, bits: int,
                     block_size: int) -> np.ndarray:
    """MatMulNBits' weight as float32 (N, K): W[n, k] = (code[n, k] - zp[n, blk]) *
    scale[n, blk], blk = g_idx[k] if given else k // block_size. b: uint8
    (N, k_blocks, block_size * bits / 8); scales (N * k_blocks) or (N, k_blocks);
    zero_points None, packed uint8 or float (graph/shapes/nbits.py)."""
    k_blocks = (K + block_size - 1) // block_size
    codes = unpack_codes(np.asarray(b).reshape(N, -1), bits, K).astype(np.float32)
    s = np.asarray(scales).reshape(N, k_blocks).astype(np.float32)
    z = matmul_zero_points(zero_points, N, k_blocks, bits)
    blk = np.arange(K) // block_size if g_idx is None else np.asarray(g_idx)[:K]
    # per block: (code - zp) * scale, both in float32 as onnxruntime computes them
    return (codes - z[:, blk]) * s[:, blk]


@reference("MatMulNBits")
def matmul_nbits(attrs, inputs):
    a, b, scales = inputs[:3]
    zp, g_idx, bias = (inputs[i] if i < len(inputs) else None for i in (3, 4, 5))
    K, N = int(attrs["K"]), int(attrs["N"])
    w = dequantize_nbits(b, scales, zp, g_idx, K, N, int(attrs.get("bits", 4)),
                         int(attrs["block_size"]))
    y = np.matmul(np.asarray(a, np.float32), w.T)
    if bias is not None:
        y = y + np.asarray(bias, np.float32)
    return [y.astype(np.asarray(a).dtype, copy=False)]


def _expand_blocks(values: np.ndarray, axis: int, block: int, dim: int) -> np.ndarray:
    """Per-block values -> one per element along `axis` (dim elements)."""
    return np.take(np.repeat(values, block, axis=axis), np.arange(dim), axis=axis)


@reference("GatherBlockQuantized")
def gather_block_quantized(attrs, inputs):
    from ...graph.shapes.tensor_geometry import _wrap_indices
    data, idx, scales = inputs[:3]
    zp = inputs[3] if len(inputs) > 3 else None
    bits, block = int(attrs.get("bits", 4)), int(attrs.get("block_size", 128))
    rank = data.ndim
    g, q = int(attrs.get("gather_axis", 0)) % rank, int(attrs.get("quantize_axis", 1)) % rank
    flat = _wrap_indices(idx, data.shape[g], "GatherBlockQuantized").reshape(-1)
    idx_shape = tuple(np.shape(idx))
    if data.dtype == np.uint8:         # gather_axis 0, packed along the last = quantize axis
        codes = unpack_codes(np.take(data, flat, axis=0), bits).astype(np.float32)
        dim = codes.shape[-1]
        if zp is None:
            z = np.float32(1 << (bits - 1))
        else:
            z = unpack_codes(np.take(zp, flat, axis=0), bits, scales.shape[-1])
            z = _expand_blocks(z.astype(np.float32), rank - 1, block, dim)
        s = _expand_blocks(np.take(scales, flat, axis=0).astype(np.float32), rank - 1,
                           block, dim)
    else:                              # int8: one code per element, any axes
        dim = data.shape[q]
        codes = np.take(data, flat, axis=g).astype(np.float32)
        s = scales.astype(np.float32)
        z = np.zeros_like(s) if zp is None else zp.astype(np.float32)
        if g == q:
            s, z = (np.take(_expand_blocks(v, q, block, dim), flat, axis=g) for v in (s, z))
        else:
            s, z = (_expand_blocks(np.take(v, flat, axis=g), q, block, dim) for v in (s, z))
    y = (codes - z) * s
    y = y.reshape(y.shape[:g] + idx_shape + y.shape[g + 1:])
    return [y.astype(scales.dtype, copy=False)]
