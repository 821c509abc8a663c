"""Transformer kernels: FusedAttention, LayerNormalization, Softmax, Gelu (Numba + BLAS).

The C kernels of rows.py do the same and are preferred (cost 1 vs 10 here, so tuning
prunes these and never imports numba for them); these stay registered, tested, selectable.

The Numba helpers compile on first prepare (never at import) and are shared with
elementwise.py and epilogue.py through `jit()`:

- exp: Cephes expf (range reduction by ln 2, degree-6 polynomial, 2^n added straight into
  the exponent bits through an int32 view); max rel. error ~1e-7, written so LLVM
  vectorizes it (no libm call: Numba has no SVML here, and np.exp is scalar on AVX2).
- erf: Eigen's rational approximation on [-4, 4] (|error| < 5e-7, no exp, vectorizes).
- row reductions (max, sum) use fastmath so that they vectorize: max is exact in any order;
  a sum of T positive terms keeps the same T*eps bound in any order.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...registry import kernel
from .. import scratch
from .rows import (attention_plan, attention_supports, gelu_supports, layernorm_geometry,
                   layernorm_supports, softmax_rows_shape, softmax_supports)
from ..native.threading_cost import numba_cost

_JIT = None


_WARM: set = set()


def jit(*warm: str) -> SimpleNamespace:
    """The Numba helpers. Each compiles (or loads from the disk cache) on its first call;
    the names in `warm` are called once now on tiny arrays of the run-time types, so that
    a kernel's prepare, not its first run, pays for that."""
    global _JIT
    if _JIT is None:
        _JIT = _build()
    for name in warm:
        if name not in _WARM:
            _warm_call(_JIT, name)
            _WARM.add(name)
    return _JIT


def _warm_call(j: SimpleNamespace, name: str) -> None:
    f = np.float32
    x1, y1, x2 = np.ones(8, f), np.ones(8, f), np.ones((2, 8), f)
    sc = row_scratch(8)
    if name == "scale_mask_softmax":
        j.scale_mask_softmax(x2, x2.view(np.int32), sc, f(1), x2, 1)
    elif name == "scale_mask_softmax_bool":
        j.scale_mask_softmax(x2, x2.view(np.int32), sc, f(1), np.ones((2, 8), bool), 2)
    elif name == "softmax_rows":
        j.softmax_rows(x2, x2, x2.view(np.int32), sc)
    elif name == "layernorm_rows":
        j.layernorm_rows(x2, x1, y1, f(1e-5), x2, np.ones(2, f), np.ones(2, f))
    elif name == "bias_gelu_rows":
        j.bias_gelu_rows(x2, x1)
    elif name == "gelu_inplace":
        j.gelu_inplace(x1)
    elif name == "sigmoid":
        j.sigmoid(x1, y1, sc)
    else:  # erf, gelu: (x, y)
        getattr(j, name)(x1, y1)


def _build() -> SimpleNamespace:
    from . import _transformer_jit  # imports numba: only once a kernel is prepared
    return _transformer_jit.JIT


def row_scratch(n: int) -> tuple:
    """Scratch of exp_into / sigmoid for rows of n: (float32, its int32 view, int32)."""
    pb = np.empty(n, np.float32)
    return pb, pb.view(np.int32), np.empty(n, np.int32)


class RowScratch:
    """row_scratch(n) of the execution context: `get()` -> the three arrays."""

    def __init__(self, n: int):
        self.h = scratch.array((2, n), np.float32)

    def get(self) -> tuple:
        a = self.h.get()
        return a[0], a[0].view(np.int32), a[1].view(np.int32)


# -- FusedAttention ---------------------------------------------------------------------------

def numba_smx(scale, kind, cols):
    """make_smx (see rows.attention_plan) for the Numba row op (rows of `cols`)."""
    smx = jit("scale_mask_softmax_bool" if kind == 2 else "scale_mask_softmax").scale_mask_softmax
    sc, dummy = RowScratch(cols), np.zeros((1, cols), np.float32)

    def run(s, m):
        smx(s, s.view(np.int32), sc.get(), scale, dummy if m is None else m, kind)
    return run


@kernel("FusedAttention", "attention_blas_numba", supports=attention_supports,
        cost=numba_cost, requires=("numba",),
        pool="blas")
def prepare_attention(node, ins, outs):
    """Per head, BLAS for q @ k_t and p @ v, Numba for scale + mask + softmax in one pass
    (the plan, shared with the C kernel, is rows.attention_plan)."""
    return attention_plan(node, ins, outs, numba_smx)


# -- LayerNormalization -----------------------------------------------------------------------

@kernel("LayerNormalization", "layernorm_numba", supports=layernorm_supports,
        cost=numba_cost, requires=("numba",))
def prepare_layernorm(node, ins, outs):
    """x (..., C...) normalized over the dims from `axis` on: rows (R, C) of the flat x."""
    j = jit("layernorm_rows")
    rows, cols, eps, has_bias = layernorm_geometry(node, ins)
    zeros = np.zeros(cols, np.float32)
    stats = scratch.array((2, rows), np.float32)      # mean, 1 / std when not outputs
    ln = j.layernorm_rows

    def run(inputs, outputs):
        scale = inputs[1].reshape(cols)
        bias = inputs[2].reshape(cols) if has_bias else zeros
        tmp = stats.get()
        mean = outputs[1].reshape(rows) if len(outputs) > 1 and outputs[1] is not None \
            else tmp[0]
        inv = outputs[2].reshape(rows) if len(outputs) > 2 and outputs[2] is not None \
            else tmp[1]
        ln(inputs[0].reshape(rows, cols), scale, bias, eps, outputs[0].reshape(rows, cols),
           mean, inv)
    return run


# -- Softmax ----------------------------------------------------------------------------------

@kernel("Softmax", "softmax_numba", supports=softmax_supports,
        cost=numba_cost, requires=("numba",))
def prepare_softmax(node, ins, outs):
    """Rows (R, C) of the flat x, C = the product of the trailing (reduced) dims."""
    j = jit("softmax_rows")
    rows, cols = softmax_rows_shape(node, ins)
    sc = RowScratch(cols)
    sm = j.softmax_rows

    def run(inputs, outputs):
        y = outputs[0].reshape(rows, cols)
        sm(inputs[0].reshape(rows, cols), y, y.view(np.int32), sc.get())
    return run


# -- Gelu -------------------------------------------------------------------------------------

@kernel("Gelu", "gelu_numba", supports=gelu_supports,
        cost=numba_cost, requires=("numba",))
def prepare_gelu(node, ins, outs):
    g = jit("gelu").gelu

    def run(inputs, outputs):
        g(inputs[0].reshape(-1), outputs[0].reshape(-1))
    return run
