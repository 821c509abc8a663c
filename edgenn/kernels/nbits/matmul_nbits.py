"""MatMulNBits (onnxruntime's com.microsoft op: Y = A W^T + bias, W block-quantized to 2,
4 or 8 bits) on _nbits.h's rows: the codes repacked once (prepare) into panels of 16
output columns, 4-bit weights staying 4 bits, and unpacked to float in registers, each
byte read once per row tile of A (decode, M = 1: once per call); fp32 arithmetic, so the
spec serves every accuracy_level (level 4 allows int8 compute, never requires it).

One spec per row of the table (matmul_nbits_<row>), and a *_mt twin splitting the
output panels over the session's OpenMP threads. The int8 table's rows (matmul_nbits_i8_*:
A quantized to int8 per block per call, integer dot products; _nbits_q8.h) are offered
only for accuracy_level 4 (onnxruntime's contract that int8 compute on A is allowed) and
zero points that are integers; the tuner times them against the fp32 rows and keeps the
faster, and untimed they come first, as onnxruntime computes level 4. Their results
differ from the reference by A's quantization, within the bound _i8_error_bound states.
Not here: g_idx (act-order blocks), a float16 A, weights that are not constant; the
reference runs those.
"""
from __future__ import annotations

import numpy as np

from ..native.tables import register_row_specs
from .. import scratch
from ..reference.nbits import dequantize_nbits
from ..native.threading_cost import plan_threads
from . import _nbits

OP = "MatMulNBits"


def _const(ins, i) -> bool:
    return i < len(ins) and ins[i] is not None and ins[i].value is not None


def _absent(ins, i) -> bool:
    return i >= len(ins) or ins[i] is None


def _supports(node, ins, outs) -> bool:
    try:
        K, N = int(node.attrs["K"]), int(node.attrs["N"])
        bits, bs = int(node.attrs.get("bits", 4)), int(node.attrs["block_size"])
    except (KeyError, TypeError, ValueError):
        return False
    if bits not in _nbits.BITS or bs < 16 or bs & (bs - 1) or bs > 256:
        return False
    a = ins[0]
    if a is None or a.dtype != "float32" or not a.shape or a.shape[-1] != K:
        return False
    if any(o is not None and o.dtype != "float32" for o in outs):
        return False
    if not (_const(ins, 1) and _const(ins, 2)):
        return False
    if not _absent(ins, 3) and not (_const(ins, 3) and ins[3].dtype in ("uint8", "float32")):
        return False
    if not _absent(ins, 4):                    # g_idx: the reference
        return False
    if not _absent(ins, 5) and not (_const(ins, 5) and ins[5].dtype == "float32"):
        return False
    kb = (K + bs - 1) // bs
    return ins[1].value.size == N * kb * (bs * bits // 8) and ins[2].value.size == N * kb


def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and int(node.attrs.get("N", 0)) >= 64 and \
        _supports(node, ins, outs)


def _i8_supports(node, ins, outs) -> bool:
    """The int8-activation rows: accuracy_level 4 only, zero points integers in [0, 255]."""
    try:
        if int(node.attrs.get("accuracy_level", 0)) != 4:
            return False
    except (TypeError, ValueError):
        return False
    if not _supports(node, ins, outs):
        return False
    return _absent(ins, 3) or _nbits.i8_zero_points_ok(ins[3].value)


def _i8_mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and int(node.attrs.get("N", 0)) >= 64 and \
        _i8_supports(node, ins, outs)


def _i8_error_bound(node, inputs) -> np.ndarray:
    """How far the int8 rows may land from the float reference: per row m of A and block
    b, A's int8 step s = max|a| / 127 moves each product by at most s / 2 * |w|, so
    |dy[m, n]| <= sum_b s[m, b] / 2 * sum_{k in b} |w[n, k]| (float rounding aside)."""
    K, N = int(node.attrs["K"]), int(node.attrs["N"])
    bits, bs = int(node.attrs.get("bits", 4)), int(node.attrs["block_size"])
    zp = inputs[3] if len(inputs) > 3 else None
    w = np.abs(dequantize_nbits(inputs[1], inputs[2], zp, None, K, N, bits, bs))
    a = np.asarray(inputs[0], np.float64).reshape(-1, K)
    kb = -(-K // bs)
    pad = np.zeros((a.shape[0], kb * bs))
    pad[:, :K] = np.abs(a)
    step = pad.reshape(-1, kb, bs).max(axis=2) / 127
    half = np.repeat(step / 2, bs, axis=1)[:, :K]
    return (half @ w.T.astype(np.float64)).reshape(tuple(inputs[0].shape[:-1]) + (N,))


def _make(row: str, lib=_nbits, threads=None):
    """The prepare of the spec of table row `row` (lib: _nbits, or the tests' emulated
    build _nbits_emu); threads: None = one, else a callable giving the plan's count."""
    def prepare(node, ins, outs):
        K, N = int(node.attrs["K"]), int(node.attrs["N"])
        bits, bs = int(node.attrs.get("bits", 4)), int(node.attrs["block_size"])
        zp = None if _absent(ins, 3) else ins[3].value
        bias = None if _absent(ins, 5) else ins[5].value
        g = lib.NBits(N, K, bits, bs, ins[1].value, ins[2].value, zp, bias, row=row)
        M = int(np.prod(ins[0].shape[:-1], dtype=np.int64))
        ws_h = scratch.array((max(g.workspace_floats(M), 1),), np.float32)
        nt = 1 if threads is None else threads()

        def run(inputs, outputs):
            a = inputs[0].reshape(M, K)
            if not a.flags.c_contiguous or a.dtype != np.float32:
                a = np.ascontiguousarray(a, np.float32)
            out = outputs[0]
            if out.flags.c_contiguous:
                g.run(a, out.reshape(M, N), ws_h.get(), nt)
            else:
                y = np.empty((M, N), np.float32)
                g.run(a, y, ws_h.get(), nt)
                out[...] = y.reshape(out.shape)
        return run
    return prepare


def spec_name(row) -> str:
    """The spec of a table row: matmul_nbits_<tile>__<tier> (row nbits_<tile>__<tier>)."""
    return "matmul_" + row.name


register_row_specs(OP, _nbits.ROWS, spec_name, _make, _supports, _mt_supports, "nbits")
# the int8 rows rank above every fp32 row where they apply
register_row_specs(OP, _nbits.QROWS, spec_name, _make, _i8_supports, _i8_mt_supports,
                   "nbits_i8", first_priority=len(_nbits.ROWS), error_bound=_i8_error_bound)
