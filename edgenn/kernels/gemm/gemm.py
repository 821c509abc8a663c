"""Gemm and MatMul writing straight into the planned output (no temporary), with the fused
epilogue. Gemm: A (..., K) or A^T, B (K, N) or B^T (constant), C broadcast to the output."""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..rowops import _rowops
from ..native import epilogue


def _gemm_supports(node, ins, outs) -> bool:
    a, b = ins[0], ins[1]
    return (a.dtype == b.dtype == "float32" and b.value is not None and len(b.shape) == 2
            and (len(a.shape) == 2 or not node.attrs.get("transA", 0))
            and epilogue.supported(node))


@kernel("Gemm", "gemm_blas", supports=_gemm_supports, pool="blas")
def prepare_gemm(node, ins, outs):
    at = node.attrs
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    trans_a = bool(at.get("transA", 0))
    bmat = ins[1].value.T if at.get("transB", 0) else ins[1].value
    bmat = np.require(bmat * np.float32(alpha), dtype=np.float32, requirements="C")
    k, n = bmat.shape
    c = ins[2].value if len(ins) > 2 and ins[2] is not None else None
    c_const = c is not None
    if c is not None:
        c = (c.astype(np.float32) * np.float32(beta))
    has_c_input = len(ins) > 2 and ins[2] is not None and not c_const
    has_z = len(ins) > 3 and ins[3] is not None
    rows = int(np.prod(outs[0].shape[:-1]))
    act, params = at.get("activation", ""), at.get("activation_params", [])
    if act == "Gelu" and c_const and not has_z and not trans_a and c.size == n \
            and c.shape[-1:] == (n,):
        # bias + exact GELU in one vectorized C pass over y (rows, n)
        bias_gelu = _rowops.bias_gelu_rows
        cvec = np.require(c.reshape(n), dtype=np.float32, requirements="C")

        def run_bias_gelu(inputs, outputs):
            y = outputs[0].reshape(rows, n)
            np.matmul(inputs[0].reshape(rows, k), bmat, out=y)
            bias_gelu(y, cvec)
        return run_bias_gelu
    tmp_h = scratch.array((rows, n), np.float32)

    def run(inputs, outputs):
        tmp = tmp_h.get()
        a = inputs[0].T if trans_a else inputs[0].reshape(rows, k)
        y = outputs[0].reshape(rows, n)
        np.matmul(a, bmat, out=y)
        if c_const:
            np.add(y, c, out=y)
        elif has_c_input:
            y += beta * inputs[2]
        if has_z:
            np.add(y, inputs[3].reshape(rows, n), out=y)
        epilogue.activate(y, act, params, tmp)
    return run


@kernel("MatMul", "matmul_blas",
        supports=lambda node, ins, outs: ins[0].dtype == ins[1].dtype == "float32"
        and len(ins[0].shape) >= 2 and len(ins[1].shape) >= 2, pool="blas")
def prepare_matmul(node, ins, outs):
    def run(inputs, outputs):
        np.matmul(inputs[0], inputs[1], out=outputs[0])
    return run
