"""Transformer kernels: FusedAttention, LayerNormalization, Softmax, Gelu (Numba + BLAS).

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

import math
from types import SimpleNamespace

import numpy as np

from ...registry import kernel

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
    sc = scratch(8)
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


def scratch(n: int) -> tuple:
    """Scratch of exp_into / sigmoid for rows of n: (float32, its int32 view, int32)."""
    pb = np.empty(n, np.float32)
    return pb, pb.view(np.int32), np.empty(n, np.int32)


# -- FusedAttention ---------------------------------------------------------------------------

def _attention_supports(node, ins, outs) -> bool:
    q, kt, v = ins[0], ins[1], ins[2]
    if not (q.dtype == kt.dtype == v.dtype == "float32"):
        return False
    if len(ins) > 3 and ins[3] is not None:
        m = ins[3]
        kind = node.attrs.get("mask_kind", "add")
        want = "float32" if kind == "add" else "bool"
        # the mask's row dim may broadcast (1 or S); its T dim may not
        if m.dtype != want or len(m.shape) < 1 or m.shape[-1] != kt.shape[-1]:
            return False
    return True


SMALL_SCORES = 128 * 1024  # bytes: below this, the scores of all heads are one scratch


@kernel("FusedAttention", "attention_blas_numba", supports=_attention_supports)
def prepare_attention(node, ins, outs):
    """Per head (one (S, D) query block), BLAS for q @ k_t and p @ v, Numba for
    scale + mask + softmax in one pass over a (S, T) scratch that is reused by every head;
    tiny problems stack every head in one small scratch instead."""
    q, kt, v, y = ins[0].shape, ins[1].shape, ins[2].shape, outs[0].shape
    S, T = q[-2], kt[-1]
    lead = tuple(y[:-2])
    has_mask = len(ins) > 3 and ins[3] is not None
    kind = 0 if not has_mask else (1 if node.attrs.get("mask_kind", "add") == "add" else 2)
    j = jit("scale_mask_softmax_bool" if kind == 2 else "scale_mask_softmax")
    scale = node.attrs.get("scale")
    scale = np.float32(1 / math.sqrt(q[-1]) if scale is None else scale)
    mshape = tuple(ins[3].shape) if has_mask else (1, T)
    if len(mshape) == 1:
        mshape = (1,) + mshape
    mlead, mrows = mshape[:-2], mshape[-2]

    def index(shape_lead, at):
        """index of head `at` (over `lead`) in an operand whose lead dims broadcast."""
        off = len(lead) - len(shape_lead)
        return tuple(0 if shape_lead[d] == 1 else at[off + d] for d in range(len(shape_lead)))

    heads = []
    for at in np.ndindex(*lead):
        heads.append((index(q[:-2], at), index(kt[:-2], at), index(v[:-2], at),
                      index(mlead, at), at))
    dummy = np.zeros((1, T), np.float32)
    smx = j.scale_mask_softmax
    mm = np.matmul
    if mrows not in (1, S):
        raise AssertionError(mshape)
    heads_n = int(np.prod(lead))
    if (heads_n * S * T * 4 <= SMALL_SCORES and q[:-2] == kt[:-2] == v[:-2] == lead
            and all(d == 1 for d in mlead)):
        # small problem (PP-OCR's 8 heads of 40 x 40): every head's scores fit in a small
        # scratch, so 2 batched matmuls and one softmax call replace a loop over heads
        scores = np.empty(lead + (S, T), np.float32)
        flat = scores.reshape(heads_n * S, T)
        flat_i, sc = flat.view(np.int32), scratch(T)
        m2 = (1, T) if mrows == 1 else (S, T)

        def run_stacked(inputs, outputs):
            mm(inputs[0], inputs[1], out=scores)
            smx(flat, flat_i, sc, scale, inputs[3].reshape(m2) if has_mask else dummy, kind)
            mm(scores, inputs[2], out=outputs[0])
        return run_stacked

    scores = np.empty((S, T), np.float32)
    scores_i = scores.view(np.int32)
    sc = scratch(T)

    def run(inputs, outputs):
        qa, ka, va, ya = inputs[0], inputs[1], inputs[2], outputs[0]
        mask = inputs[3].reshape(mshape) if has_mask else None
        for qi, ki, vi, mi, yi in heads:
            mm(qa[qi], ka[ki], out=scores)
            smx(scores, scores_i, sc, scale, dummy if mask is None else mask[mi], kind)
            mm(scores, va[vi], out=ya[yi])
    return run


# -- LayerNormalization -----------------------------------------------------------------------

def _layernorm_supports(node, ins, outs) -> bool:
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    if x.dtype != "float32" or scale.dtype != "float32" or len(x.shape) == 0:
        return False
    if int(node.attrs.get("stash_type", 1)) != 1:
        return False
    axis = int(node.attrs.get("axis", -1)) % len(x.shape)
    cols = int(np.prod(x.shape[axis:]))
    if int(np.prod(scale.shape)) != cols or cols == 0:
        return False
    if bias is not None and (bias.dtype != "float32" or int(np.prod(bias.shape)) != cols):
        return False
    return all(o is None or o.dtype == "float32" for o in outs)


@kernel("LayerNormalization", "layernorm_numba", supports=_layernorm_supports)
def prepare_layernorm(node, ins, outs):
    """x (..., C...) normalized over the dims from `axis` on: rows (R, C) of the flat x."""
    j = jit("layernorm_rows")
    x = ins[0].shape
    axis = int(node.attrs.get("axis", -1)) % len(x)
    rows, cols = int(np.prod(x[:axis])), int(np.prod(x[axis:]))
    eps = np.float32(node.attrs.get("epsilon", 1e-5))
    has_bias = len(ins) > 2 and ins[2] is not None
    zeros = np.zeros(cols, np.float32)
    mean_tmp, inv_tmp = np.empty(rows, np.float32), np.empty(rows, np.float32)
    ln = j.layernorm_rows

    def run(inputs, outputs):
        scale = inputs[1].reshape(cols)
        bias = inputs[2].reshape(cols) if has_bias else zeros
        mean = outputs[1].reshape(rows) if len(outputs) > 1 and outputs[1] is not None \
            else mean_tmp
        inv = outputs[2].reshape(rows) if len(outputs) > 2 and outputs[2] is not None \
            else inv_tmp
        ln(inputs[0].reshape(rows, cols), scale, bias, eps, outputs[0].reshape(rows, cols),
           mean, inv)
    return run


# -- Softmax ----------------------------------------------------------------------------------

def _softmax_axis(node, rank: int) -> int | None:
    """The first reduced axis when the reduction covers the trailing dims, else None."""
    axis = int(node.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    if node.attrs.get("coerce_2d", 0) or axis == rank - 1:
        return axis
    return None


@kernel("Softmax", "softmax_numba",
        supports=lambda node, ins, outs: ins[0].dtype == "float32" and len(ins[0].shape) > 0
        and _softmax_axis(node, len(ins[0].shape)) is not None
        and int(np.prod(ins[0].shape[_softmax_axis(node, len(ins[0].shape)):])) > 0)
def prepare_softmax(node, ins, outs):
    """Rows (R, C) of the flat x, C = the product of the trailing (reduced) dims."""
    j = jit("softmax_rows")
    x = ins[0].shape
    axis = _softmax_axis(node, len(x))
    rows, cols = int(np.prod(x[:axis])), int(np.prod(x[axis:]))
    sc = scratch(cols)
    sm = j.softmax_rows

    def run(inputs, outputs):
        y = outputs[0].reshape(rows, cols)
        sm(inputs[0].reshape(rows, cols), y, y.view(np.int32), sc)
    return run


# -- Gelu -------------------------------------------------------------------------------------

@kernel("Gelu", "gelu_numba",
        supports=lambda node, ins, outs: ins[0].dtype == "float32"
        and node.attrs.get("approximate", "none") == "none")
def prepare_gelu(node, ins, outs):
    g = jit("gelu").gelu

    def run(inputs, outputs):
        g(inputs[0].reshape(-1), outputs[0].reshape(-1))
    return run
