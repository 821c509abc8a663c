"""GatherBlockQuantized of a constant table -> QGather (graph/shapes/quant.py), whose fast
kernel gathers and dequantizes rows in one pass.

Applies to a 2-D table gathered along axis 0 and quantized along axis 1 (an embedding:
onnxruntime-genai's builder writes its tied table as a Reshape of the lm_head's
MatMulNBits weight, constant once folded), float32 scales, constant zero points or none.
QGather has no zero point, so the codes become signed: c = code - zp, padded with zeros
to whole blocks. When every c fits a nibble ([-8, 7]: 4-bit codes with the default zero
point 8, i.e. each nibble's top bit flipped) the table stays 4-bit (two's complement
nibbles, low first); else when it fits int8, it becomes 8-bit; else the node stays (its
reference kernel runs).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..shapes.nbits import pack_codes, unpack_codes


def _signed_codes(data: np.ndarray, zp, bits: int, blocks: int, block: int) -> np.ndarray:
    """int16 (V, blocks * block): code - zero point, zero past the row's end."""
    if data.dtype == np.uint8:
        codes = unpack_codes(data, bits).astype(np.int16)
        z = np.int16(1 << (bits - 1)) if zp is None else \
            np.repeat(unpack_codes(zp, bits, blocks).astype(np.int16), block, axis=1)
    else:
        codes = data.astype(np.int16)
        z = np.int16(0) if zp is None else np.repeat(zp.astype(np.int16), block, axis=1)
    dim = codes.shape[1]
    c = np.zeros((codes.shape[0], blocks * block), np.int16)
    c[:, :dim] = codes - (z if np.ndim(z) == 0 else z[:, :dim])
    return c


def gather_block_quantized_to_qgather(graph: Graph) -> bool:
    changed = 0
    for node in graph.nodes:
        if node.op != "GatherBlockQuantized" or not node.inputs[0] or not node.inputs[2]:
            continue
        data, scales = graph.consts.get(node.inputs[0]), graph.consts.get(node.inputs[2])
        zp_name = node.inputs[3] if len(node.inputs) > 3 else ""
        zp = graph.consts.get(zp_name) if zp_name else None
        if data is None or scales is None or (zp_name and zp is None):
            continue
        if data.ndim != 2 or scales.dtype != np.float32 or data.dtype not in (np.uint8, np.int8):
            continue
        if int(node.attrs.get("gather_axis", 0)) % 2 != 0 or \
                int(node.attrs.get("quantize_axis", 1)) % 2 != 1:
            continue
        bits, block = int(node.attrs.get("bits", 4)), int(node.attrs.get("block_size", 128))
        dim = data.shape[1] * (8 // bits if data.dtype == np.uint8 else 1)
        blocks = scales.shape[1]
        if scales.shape[0] != data.shape[0] or blocks != (dim + block - 1) // block:
            continue            # a malformed node: its shape rule says so at plan time
        c = _signed_codes(data, zp, bits, blocks, block)
        lo, hi = (int(c.min()), int(c.max())) if c.size else (0, 0)
        if -8 <= lo and hi <= 7:
            codes, qbits = pack_codes((c & 0x0F).astype(np.uint8), 4), 4
        elif -128 <= lo and hi <= 127:
            codes, qbits = c.astype(np.int8), 8
        else:
            continue
        base = node.name or "gather_block_quantized"
        node.inputs = [graph.add_const(f"{base}/codes", codes),
                       graph.add_const(f"{base}/scale", np.ascontiguousarray(scales)),
                       node.inputs[1]]
        node.op = "QGather"
        node.attrs = {"bits": qbits, "block": block, "dim": dim}
        changed += 1
    if changed:
        graph.note_fusion("gather_block_quantized_to_qgather", changed)
    return bool(changed)
