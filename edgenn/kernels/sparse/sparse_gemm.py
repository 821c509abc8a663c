"""Sparse fully connected layers (_spgemm.h, through _spmm.pyx's SparseGemm): Gemm and
MatMul candidates for a constant weight W that is mostly zeros (at least sparse.MIN_ZEROS):

    y (rows, N) = act(x (rows, K) W (K, N) + C + Z)

x (..., K), every leading dim flattened into the rows. Gemm: transA 0, B (K, N) or, with
transB, (N, K); alpha folded into W and beta into C, as the dense kernels do; C absent or a
constant that broadcasts over the last axis (a scalar or an (N,) bias), Z (input 3) the
fused residual, activation "" / Relu / Clip fused. MatMul: W a constant 2-D matrix, no
epilogue (the declutter pass turns most of those into Gemm; the rest are planned here).

W^T (N, K) is kept in CSR. Two algorithms, one spec per tier, XNNPACK-style names:
- spmv_4xL: few rows (batch 1): per output, its nonzeros' x gathered L at a time, blocks
  of 4 rows sharing the weight loads;
- spgemm_Tx1: many rows: y^T = W^T x^T on the sparse 1x1 conv's register tiles (T rows of
  x per tile, packed transposed), narrow tiles (T = 8, 16) for a few rows, wide ones (32,
  64) for a batch or a transformer's tokens.
Each is offered only where its tile is not mostly empty rows (_offered); the tuner times
them against gemm_blas / gemm_sgemm* (matmul_blas) and keeps the faster per layer.
"""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..native import epilogue
from .sparse import MIN_ZEROS, _spmm, csr, zero_fraction
from ..native.threading_cost import plan_threads, threaded_only

SPMV_MAX_ROWS = 8     # beyond, a narrow tile is faster (below, the tuner picks)



def _specs() -> tuple:
    """(spec name, tier it needs, table row, algorithm, rows per tile (0: spmv)), best
    first: the spmv rows (spmm_table.h's spv_rows) under their own names, then every tile
    row as spgemm_<pixels>x1__<isa>."""
    lib = _spmm()
    need = lambda r: "" if r.isa == "scalar" else r.isa        # noqa: E731
    return tuple((r.name, need(r), r.name, "spmv", 0) for r in reversed(lib.SPMV_ROWS)) + \
        tuple((r.name.replace("spmm_", "spgemm_", 1), need(r), r.name, "tiled", r.pixels)
              for r in reversed(lib.ROWS))


SPECS = _specs()
_NARROWEST = {need: min(t for _, n, _, a, t in SPECS if n == need and a == "tiled")
              for need in {n for _, n, _, _, _ in SPECS}}


def _rows(shape) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


def _bias(node, ins, n: int):
    """-> (ok, bias): Gemm's C times beta as an (n,) float32 vector, or None without C;
    ok False for a C the kernels do not take (not constant, or per row)."""
    if node.op != "Gemm" or len(ins) < 3 or ins[2] is None:
        return True, None
    if ins[2].value is None:
        return False, None
    c = np.asarray(ins[2].value, np.float32) * np.float32(node.attrs.get("beta", 1.0))
    if c.size == 1:
        return True, np.full(n, c.reshape(()), np.float32)
    if c.size == n and c.shape[-1] == n:
        return True, np.ascontiguousarray(c.reshape(n))
    return False, None


def _fc(node, ins, outs) -> bool:
    """A float32 x (..., K) times a mostly-zero constant W (K, N) with an epilogue the C
    code has."""
    x, w, y = ins[0], ins[1], outs[0]
    a = node.attrs
    if not (x.dtype == w.dtype == y.dtype == "float32" and w.value is not None
            and len(w.shape) == 2 and len(x.shape) >= 1 and len(y.shape) >= 1
            and 0 not in x.shape and 0 not in w.shape
            and _rows(x.shape) == _rows(y.shape) and a.get("activation", "") in _spmm().ACTIVATIONS):
        return False
    if node.op == "Gemm":
        z = ins[3] if len(ins) > 3 else None
        if a.get("transA", 0) or not _bias(node, ins, y.shape[-1])[0] \
                or (z is not None and tuple(z.shape) != tuple(y.shape)):
            return False
    elif a.get("activation", ""):
        return False
    return zero_fraction(w.value) >= MIN_ZEROS


def _offered(rows: int, need: str, algo: str, t: int) -> bool:
    """spmv for a few rows; a tile of t rows if at least half full (or the tier's narrowest)
    and not so narrow that W is streamed more than 8 times."""
    if algo == "spmv":
        return rows <= SPMV_MAX_ROWS
    return (t <= 2 * rows or t == _NARROWEST[need]) and 8 * t >= rows


def _prepare(node, ins, outs, row: str, lib=None, threads: int = 1):
    """row: a name in lib.SPMV or lib.TABLE; lib: the extension module (tests pass the
    SIMDe-emulated _spmm_emu); threads > 1: the outputs split over OpenMP threads (the
    *_mt specs)."""
    if lib is None:
        from . import _spmm as lib
    at = node.attrs
    b = np.asarray(ins[1].value, np.float32)
    wt = b if node.op == "Gemm" and at.get("transB", 0) else b.T        # W^T (N, K)
    if node.op == "Gemm" and float(at.get("alpha", 1.0)) != 1.0:
        wt = wt * np.float32(at["alpha"])
    n, k = wt.shape
    rows = _rows(outs[0].shape)
    bias = _bias(node, ins, n)[1]
    _, act, lo, hi, _ = epilogue.constant_parts(node, ins[:2], n)   # C is _bias's
    kern = lib.SparseGemm(*csr(wt), k, bias, act, lo, hi, row=row)
    ws_h = scratch.array((max(kern.workspace_floats * threads, 1),), np.float32)
    has_z = node.op == "Gemm" and len(ins) > 3 and ins[3] is not None

    def run(inputs, outputs):
        z = np.require(inputs[3], requirements="C").reshape(rows, n) if has_z else None
        kern.run(inputs[0].reshape(rows, k), outputs[0].reshape(rows, n), z, ws_h.get(),
                 threads)
    run.kernel = kern
    return run


def _register():
    for op in ("Gemm", "MatMul"):
        for name, need, row, algo, t in SPECS:
            def sup(node, ins, outs, n=need, a=algo, t=t):
                return _fc(node, ins, outs) and _offered(_rows(outs[0].shape), n, a, t)
            kernel(op, name, isa=need, supports=sup)(
                lambda node, ins, outs, r=row: _prepare(node, ins, outs, r))
            if need:   # the outputs over the session's threads (OpenMP)
                kernel(op, name + "_mt", isa=need, pool="omp", supports=threaded_only(sup))(
                    lambda node, ins, outs, r=row: _prepare(node, ins, outs, r,
                                                            threads=plan_threads()))


_register()
