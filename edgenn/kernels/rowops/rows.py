"""Row kernels of transformer models in C (_rowops.pyx / _rowops.h): FusedAttention
(BLAS + C scale/mask/softmax), LayerNormalization, RMSNormalization, Softmax, LogSoftmax,
Gelu, Sigmoid, Erf.

Registered before the Numba ones of transformer.py / elementwise.py (registry order is the
order used with tuning off) and priced with c_cost against their numba_cost, so tuning
prunes the Numba candidates and a transformer model never imports numba (~0.5 s) nor loads
its cached functions (~0.9 s) at start-up.

The supports predicates and the attention plan (heads, broadcasting, scratch) live here and
are shared with the Numba kernels of transformer.py, so both accept exactly the same nodes.
"""
from __future__ import annotations

import math

import numpy as np

from ...graph.shapes.fused import PERM_ATTRS, attention_views, inverse, permuted
from ...registry import kernel
from .. import scratch
from . import _rowops
from ..native.threading_cost import c_cost


# -- FusedAttention ---------------------------------------------------------------------------

def attention_supports(node, ins, outs) -> bool:
    q, kt, v = attention_views(node, ins)[:3]
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


def attention_plan(node, ins, outs, make_smx):
    """The run function of FusedAttention: y = softmax(q @ k_t * scale + mask) @ v.

    Per head (one (S, D) query block), BLAS for q @ k_t and p @ v, and the softmax of
    `make_smx(scale, kind, T)` over a (S, T) scratch s reused by every head; tiny problems
    stack every head in one small scratch instead. make_smx returns smx(s, mask) that makes
    s (R, T) <- softmax(s * scale + mask) in place, mask (MS, T) with MS 1 or S (row i uses
    mask row i % MS) or None; kind 0 no mask, 1 additive (float32), 2 boolean (False =
    -inf).

    Inputs stored transposed (perm_q / perm_k / perm_v, perm_y: graph/shapes/fused.py)
    are read and written through strided views: each head's (S, D) block is then a
    matrix with a row stride, which BLAS reads in place (no Transpose copies)."""
    views = attention_views(node, ins)
    q, kt, v = views[0].shape, views[1].shape, views[2].shape
    perms = [node.attrs.get(k) for k in PERM_ATTRS]
    y_view = inverse(node.attrs.get("perm_y"))      # the output as y (..., S, Dv)
    y = permuted(outs[0].shape, y_view)
    S, T = q[-2], kt[-1]
    lead = tuple(y[:-2])
    has_mask = len(ins) > 3 and ins[3] is not None
    kind = 0 if not has_mask else (1 if node.attrs.get("mask_kind", "add") == "add" else 2)
    scale = node.attrs.get("scale")
    scale = np.float32(1 / math.sqrt(q[-1]) if scale is None else scale)
    mshape = tuple(ins[3].shape) if has_mask else (1, T)
    if len(mshape) == 1:
        mshape = (1,) + mshape
    mlead, mrows = mshape[:-2], mshape[-2]
    if mrows not in (1, S):
        raise AssertionError(mshape)

    def index(shape_lead, at):
        """index of head `at` (over `lead`) in an operand whose lead dims broadcast."""
        off = len(lead) - len(shape_lead)
        return tuple(0 if shape_lead[d] == 1 else at[off + d] for d in range(len(shape_lead)))

    heads = [(index(q[:-2], at), index(kt[:-2], at), index(v[:-2], at), index(mlead, at), at)
             for at in np.ndindex(*lead)]

    def logical(inputs, outputs):
        """q, k_t, v, y as the op computes them: views of the stored arrays."""
        qkv = [x if p is None else x.transpose(p) for x, p in zip(inputs[:3], perms)]
        return (*qkv, outputs[0] if y_view is None else outputs[0].transpose(y_view))

    mm = np.matmul
    heads_n = int(np.prod(lead))
    if (heads_n * S * T * 4 <= SMALL_SCORES and q[:-2] == kt[:-2] == v[:-2] == lead
            and all(d == 1 for d in mlead)):
        # small problem (PP-OCR's 8 heads of 40 x 40): every head's scores fit in a small
        # scratch, so 2 batched matmuls and one softmax call replace a loop over heads
        stacked = scratch.array(lead + (S, T), np.float32)
        smx = make_smx(scale, kind, T)
        m2 = (1, T) if mrows == 1 else (S, T)

        def run_stacked(inputs, outputs):
            qa, ka, va, ya = logical(inputs, outputs)
            scores = stacked.get()
            mm(qa, ka, out=scores)
            smx(scores.reshape(heads_n * S, T), inputs[3].reshape(m2) if has_mask else None)
            mm(scores, va, out=ya)
        return run_stacked

    per_head = scratch.array((S, T), np.float32)
    smx = make_smx(scale, kind, T)

    def run(inputs, outputs):
        qa, ka, va, ya = logical(inputs, outputs)
        mask = inputs[3].reshape(mshape) if has_mask else None
        scores = per_head.get()
        for qi, ki, vi, mi, yi in heads:
            mm(qa[qi], ka[ki], out=scores)
            smx(scores, None if mask is None else mask[mi])
            mm(scores, va[vi], out=ya[yi])
    return run


def c_smx(scale, kind, cols=None, build=None):
    """make_smx for the C row op (build: a row of _rowops.TABLE, None: the best)."""
    if kind == 2:
        boolsm = _rowops.scale_bool_mask_softmax
        return lambda s, m: boolsm(s, scale, m.view(np.uint8), build)
    sm = _rowops.scale_mask_softmax
    return lambda s, m: sm(s, scale, m, build)


@kernel("FusedAttention", "attention_blas_c", supports=attention_supports, cost=c_cost, pool="blas")
def prepare_attention(node, ins, outs):
    return attention_plan(node, ins, outs, c_smx)


# -- LayerNormalization -----------------------------------------------------------------------

def layernorm_supports(node, ins, outs) -> bool:
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


def layernorm_geometry(node, ins):
    """(rows, cols, eps, has_bias): x (..., C...) normalized over the dims from `axis` on
    is rows (R, C) of the flat x."""
    x = ins[0].shape
    axis = int(node.attrs.get("axis", -1)) % len(x)
    return (int(np.prod(x[:axis])), int(np.prod(x[axis:])),
            np.float32(node.attrs.get("epsilon", 1e-5)), len(ins) > 2 and ins[2] is not None)


def _optional(outputs, i):
    return outputs[i] if len(outputs) > i and outputs[i] is not None else None


@kernel("LayerNormalization", "layernorm_c", supports=layernorm_supports, cost=c_cost)
def prepare_layernorm(node, ins, outs):
    rows, cols, eps, has_bias = layernorm_geometry(node, ins)
    ln = _rowops.layernorm_rows

    def run(inputs, outputs):
        mean, inv = _optional(outputs, 1), _optional(outputs, 2)
        ln(inputs[0].reshape(rows, cols), inputs[1].reshape(cols),
           inputs[2].reshape(cols) if has_bias else None, eps,
           outputs[0].reshape(rows, cols), None if mean is None else mean.reshape(rows),
           None if inv is None else inv.reshape(rows))
    return run


# -- RMSNormalization -------------------------------------------------------------------------

def rmsnorm_supports(node, ins, outs) -> bool:
    """float32 x, scale and y, stash_type 1; scale one value per normalized element (the
    normalized dims, from `axis` on, are one row of the flat x)."""
    x, scale = ins[0], ins[1]
    if x.dtype != "float32" or scale.dtype != "float32" or outs[0].dtype != "float32" or \
            len(x.shape) == 0 or int(node.attrs.get("stash_type", 1)) != 1:
        return False
    axis = int(node.attrs.get("axis", -1)) % len(x.shape)
    cols = int(np.prod(x.shape[axis:]))
    return cols > 0 and int(np.prod(scale.shape)) == cols


@kernel("RMSNormalization", "rmsnorm_c", supports=rmsnorm_supports, cost=c_cost)
def prepare_rmsnorm(node, ins, outs):
    x = ins[0].shape
    axis = int(node.attrs.get("axis", -1)) % len(x)
    rows, cols = int(np.prod(x[:axis])), int(np.prod(x[axis:]))
    eps = np.float32(node.attrs.get("epsilon", 1e-5))
    rms = _rowops.rmsnorm_rows

    def run(inputs, outputs):
        rms(inputs[0].reshape(rows, cols), inputs[1].reshape(cols), eps,
            outputs[0].reshape(rows, cols))
    return run


# -- Softmax ----------------------------------------------------------------------------------

def softmax_axis(node, rank: int) -> int | None:
    """The first reduced axis when the reduction covers the trailing dims, else None."""
    axis = int(node.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    if node.attrs.get("coerce_2d", 0) or axis == rank - 1:
        return axis
    return None


def softmax_supports(node, ins, outs) -> bool:
    if ins[0].dtype != "float32" or len(ins[0].shape) == 0:
        return False
    axis = softmax_axis(node, len(ins[0].shape))
    return axis is not None and int(np.prod(ins[0].shape[axis:])) > 0


def softmax_rows_shape(node, ins):
    """(R, C): the flat x as rows, C = the product of the trailing (reduced) dims."""
    x = ins[0].shape
    axis = softmax_axis(node, len(x))
    return int(np.prod(x[:axis])), int(np.prod(x[axis:]))


@kernel("Softmax", "softmax_c", supports=softmax_supports, cost=c_cost)
@kernel("LogSoftmax", "logsoftmax_c", supports=softmax_supports, cost=c_cost)
def prepare_softmax(node, ins, outs):
    shape = softmax_rows_shape(node, ins)
    sm, log = _rowops.softmax_rows, node.op == "LogSoftmax"

    def run(inputs, outputs):
        sm(inputs[0].reshape(shape), outputs[0].reshape(shape), log=log)

    run.cstep = lambda ins, outs, in_cells, out_cells: _rowops.softmax_cstep(
        *shape, log, in_cells[0], out_cells[0])
    return run


# -- Gelu, Sigmoid, Erf (elementwise, flat) --------------------------------------------------

def gelu_supports(node, ins, outs) -> bool:
    return ins[0].dtype == "float32" and node.attrs.get("approximate", "none") == "none"


def unary_f32(node, ins, outs) -> bool:
    return ins[0].dtype == "float32" and outs[0].dtype == "float32"


def _flat(fn, c_form=None):
    """A flat unary kernel; c_form(n, x_cell, y_cell): its C step (_cstep.h)."""
    def prepare(node, ins, outs):
        def run(inputs, outputs):
            fn(inputs[0].reshape(-1), outputs[0].reshape(-1))

        if c_form is not None:
            run.cstep = lambda ins, outs, in_cells, out_cells: c_form(
                outs[0].size, in_cells[0], out_cells[0])
        return run
    return prepare


kernel("Gelu", "gelu_c", supports=gelu_supports, cost=c_cost)(
    _flat(_rowops.gelu, _rowops.gelu_cstep))
kernel("Sigmoid", "sigmoid_c", supports=unary_f32, cost=c_cost)(
    _flat(_rowops.sigmoid, _rowops.sigmoid_cstep))
kernel("Erf", "erf_c", supports=unary_f32, cost=c_cost)(_flat(_rowops.erf))
