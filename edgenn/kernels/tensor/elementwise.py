"""Elementwise and data-movement kernels writing straight into the planned output.

Most are the NumPy ufunc with `out=`: the reference computes a fresh array that the
runtime then copies into the output buffer (an allocation plus a copy per step); these
write once, in place. Sigmoid and Erf also have vectorized Numba kernels (the helpers of
transformer.py), priced out by the C ones of rows.py. Transpose copies a transposed view
after merging axes that stay adjacent.

float32 only (inputs and output), except where noted (Cast from any numeric type, Gather
indices, Where's bool condition, Expand).
"""
from __future__ import annotations

import functools

import numpy as np

from ...registry import kernel
from ..reference.tensor import norm_axis, slice_objects, split_sizes, transpose_perm
from ..rowops import _rowops
from ..native import epilogue
from . import _eltwise
from ..native.threading_cost import numba_cost

F32 = "float32"


def _all_f32(ins, outs) -> bool:
    return all(i is None or i.dtype == F32 for i in ins) and outs[0].dtype == F32


# -- binary, with broadcasting ------------------------------------------------------------------

BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Pow": np.power}


# ops that may raise numpy's FP warnings on ordinary data (x/0, log(-1), ...) run under
# errstate(ignore): IEEE results, silently, as the reference. Entering and leaving it is
# a fixed cost per call, so Add/Sub/Mul (only overflow, rare) and the exact ops skip it.
QUIET = {"Div", "Pow", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos"}


def _binary(op: str, ufunc):
    @kernel(op, f"{op.lower()}_ufunc",
            supports=lambda node, ins, outs: len(ins) == 2 and _all_f32(ins, outs))
    def prepare(node, ins, outs):
        def run(inputs, outputs):
            ufunc(inputs[0], inputs[1], out=outputs[0])

        def run_quiet(inputs, outputs):
            with np.errstate(all="ignore"):
                ufunc(inputs[0], inputs[1], out=outputs[0])
        chosen = run_quiet if op in QUIET else run
        if op in _eltwise.BINARY:
            chosen.cstep = functools.partial(_binary_cstep, op)
        return chosen
    return prepare


def _binary_cstep(op, ins, outs, in_cells, out_cells):
    """The compiled loop's form of a binary step (_eltwise.h), or None where the operands
    do not collapse to three broadcast dims."""
    dims = collapse_broadcast(ins[0].shape, ins[1].shape, outs[0].shape)
    if dims is None:
        return None
    n, sa, sb = dims
    return _eltwise.binary_step(op, n, sa, sb, in_cells[0], in_cells[1], out_cells[0])


def collapse_broadcast(a_shape, b_shape, y_shape):
    """Two C-contiguous operands broadcast to y_shape as at most 3 dims -> ((n0, n1, n2),
    a's element strides, b's), a stride 0 where the operand is broadcast; None if more
    dims remain. Dims of size 1 are dropped; neighbours merge where both operands step
    through them as one (contiguous in both, or broadcast in both)."""
    rank = len(y_shape)
    a_shape = (1,) * (rank - len(a_shape)) + tuple(a_shape)
    b_shape = (1,) * (rank - len(b_shape)) + tuple(b_shape)

    def strides(shape):
        out, step = [], 1
        for d in reversed(range(rank)):
            out.append(0 if shape[d] == 1 else step)
            step *= shape[d]
        return out[::-1]
    sa, sb = strides(a_shape), strides(b_shape)
    dims = [[y_shape[d], sa[d], sb[d]] for d in range(rank) if y_shape[d] != 1]
    merged: list = []
    for n, da, db in dims:
        if merged and merged[-1][1] == da * n and merged[-1][2] == db * n:
            merged[-1] = [merged[-1][0] * n, da, db]
        else:
            merged.append([n, da, db])
    if len(merged) > 3:
        return None
    merged = [[1, 0, 0]] * (3 - len(merged)) + merged
    return tuple(tuple(m[i] for m in merged) for i in range(3))


# the unary ops with a C form: -x, or the fused-activation code of the op (_eltwise.h)
C_UNARY = {"Neg": _eltwise.NEG, "Relu": epilogue.code("Relu"), "Clip": epilogue.code("Clip")}


def _unary_cstep(op, lo=0.0, hi=0.0):
    """The compiled loop's form of an elementwise unary step (_eltwise.h)."""
    def cstep(ins, outs, in_cells, out_cells):
        return _eltwise.unary_step(C_UNARY[op], outs[0].size, in_cells[0], out_cells[0],
                                   lo, hi)
    return cstep


for _op, _uf in BINARY.items():
    _binary(_op, _uf)


# -- PRelu with a constant slope in [0, 1] ------------------------------------------------------

def _prelu_supports(node, ins, outs) -> bool:
    s = ins[1].value if len(ins) > 1 and ins[1] is not None else None
    return _all_f32(ins, outs) and s is not None and bool(np.all((s >= 0) & (s <= 1))) and \
        tuple(np.broadcast_shapes(ins[0].shape, s.shape)) == tuple(ins[0].shape)


@kernel("PRelu", "prelu_max", supports=_prelu_supports)
def prepare_prelu(node, ins, outs):
    """y = max(x, slope x): with 0 <= slope <= 1 that is x for x >= 0 and slope x below,
    exactly (max picks one of the two products): two passes, no temporary."""
    slope = np.require(ins[1].value, dtype=np.float32, requirements="C")

    def run(inputs, outputs):
        y = outputs[0]
        np.multiply(inputs[0], slope, out=y)
        np.maximum(inputs[0], y, out=y)
    return run


def _prelu_any_supports(node, ins, outs) -> bool:
    s = ins[1].value if len(ins) > 1 and ins[1] is not None else None
    return _all_f32(ins, outs) and s is not None and bool(np.all(np.isfinite(s))) and \
        tuple(np.broadcast_shapes(ins[0].shape, s.shape)) == tuple(ins[0].shape)


@kernel("PRelu", "prelu_split", supports=_prelu_any_supports)
def prepare_prelu_split(node, ins, outs):
    """Any finite constant slope: y = slope min(x, 0) + max(x, 0), four branch-free passes
    (a masked copy or np.where is far slower on the random signs of activations);
    exact: one of the two terms is zero (NaN stays NaN)."""
    from .. import scratch
    slope = np.require(ins[1].value, dtype=np.float32, requirements="C")
    pos_h = scratch.array(tuple(outs[0].shape), np.float32)

    def run(inputs, outputs):
        x, y, pos = inputs[0], outputs[0], pos_h.get()
        np.minimum(x, 0, out=y)
        np.multiply(y, slope, out=y)
        np.maximum(x, 0, out=pos)
        np.add(y, pos, out=y)
    return run


# -- variadic Max / Min / Sum (any number of inputs, broadcasting) -----------------------------

def _variadic(op: str, ufunc):
    @kernel(op, f"{op.lower()}_ufunc",
            supports=lambda node, ins, outs: len([i for i in ins if i is not None]) >= 1
            and _all_f32(ins, outs))
    def prepare(node, ins, outs):
        def run(inputs, outputs):
            xs = [x for x in inputs if x is not None]
            y = outputs[0]
            if len(xs) == 1:
                np.copyto(y, xs[0])
                return
            ufunc(xs[0], xs[1], out=y)
            for x in xs[2:]:
                ufunc(y, x, out=y)
        return run
    return prepare


for _op, _uf in (("Max", np.maximum), ("Min", np.minimum), ("Sum", np.add)):
    _variadic(_op, _uf)


# -- unary ----------------------------------------------------------------------------------------

def _ufunc_unary(ufunc):
    def prepare(node, ins, outs):
        def run(inputs, outputs):
            ufunc(inputs[0], out=outputs[0])

        def run_quiet(inputs, outputs):
            with np.errstate(all="ignore"):
                ufunc(inputs[0], out=outputs[0])
        chosen = run_quiet if node.op in QUIET else run
        if node.op in C_UNARY:
            chosen.cstep = _unary_cstep(node.op)
        return chosen
    return prepare


UNARY = {"Relu": None, "Tanh": np.tanh, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
         "Neg": np.negative, "Abs": np.abs, "Reciprocal": np.reciprocal, "Floor": np.floor,
         "Ceil": np.ceil, "Sin": np.sin, "Cos": np.cos}


def _unary_supports(node, ins, outs) -> bool:
    return _all_f32(ins, outs)


for _op, _uf in UNARY.items():
    if _uf is not None:
        kernel(_op, f"{_op.lower()}_ufunc", supports=_unary_supports)(_ufunc_unary(_uf))


@kernel("Relu", "relu_ufunc", supports=_unary_supports)
def prepare_relu(node, ins, outs):
    zero = np.float32(0)

    def run(inputs, outputs):
        np.maximum(inputs[0], zero, out=outputs[0])
    run.cstep = _unary_cstep("Relu")
    return run


@kernel("LeakyRelu", "leakyrelu_ufunc", supports=_unary_supports)
def prepare_leaky(node, ins, outs):
    alpha = np.float32(node.attrs.get("alpha", 0.01))

    def run(inputs, outputs):  # y = x >= 0 ? x : alpha x = max(x, alpha x) for alpha <= 1
        x, y = inputs[0], outputs[0]
        np.multiply(x, alpha, out=y)
        np.maximum(y, x, out=y)

    def run_general(inputs, outputs):
        x, y = inputs[0], outputs[0]
        np.multiply(x, alpha, out=y)
        np.copyto(y, x, where=x >= 0)
    return run if 0 <= alpha <= 1 else run_general


@kernel("HardSigmoid", "hardsigmoid_ufunc", supports=_unary_supports)
def prepare_hardsigmoid(node, ins, outs):
    alpha = np.float32(node.attrs.get("alpha", 0.2))
    beta = np.float32(node.attrs.get("beta", 0.5))

    def run(inputs, outputs):
        y = outputs[0]
        np.multiply(inputs[0], alpha, out=y)
        np.add(y, beta, out=y)
        np.clip(y, 0, 1, out=y)
    return run


@kernel("HardSwish", "hardswish_ufunc", supports=_unary_supports)
def prepare_hardswish(node, ins, outs):
    sixth, half = np.float32(1 / 6), np.float32(0.5)

    def run(inputs, outputs):  # x * clip(x/6 + 1/2, 0, 1)
        x, y = inputs[0], outputs[0]
        np.multiply(x, sixth, out=y)
        np.add(y, half, out=y)
        np.clip(y, 0, 1, out=y)
        np.multiply(y, x, out=y)
    return run


@kernel("Clip", "clip_ufunc",
        supports=lambda node, ins, outs: ins[0].dtype == F32 and outs[0].dtype == F32 and all(
            i is None or (i.value is not None and i.value.size == 1) for i in ins[1:]))
def prepare_clip(node, ins, outs):
    """min/max are constant scalars (omitted = unbounded); min > max gives max, as the
    reference (max applied after min)."""
    lo = ins[1].value.reshape(()).astype(np.float32) if len(ins) > 1 and ins[1] else None
    hi = ins[2].value.reshape(()).astype(np.float32) if len(ins) > 2 and ins[2] else None

    def run(inputs, outputs):
        x, y = inputs[0], outputs[0]
        if lo is not None:
            np.maximum(x, lo, out=y)
            x = y
        if hi is not None:
            np.minimum(x, hi, out=y)
        elif lo is None:
            np.copyto(y, x)
    if lo is not None and hi is not None and not (np.isnan(lo) or np.isnan(hi)):
        run.cstep = _unary_cstep("Clip", lo, hi)    # lo > hi gives hi, as run
    return run


def _jit(*warm):
    from ..rowops.transformer import jit
    return jit(*warm)


@kernel("Sigmoid", "sigmoid_numba", supports=_unary_supports,
        cost=numba_cost, requires=("numba",))
def prepare_sigmoid(node, ins, outs):
    from ..rowops.transformer import RowScratch
    fn = _jit("sigmoid").sigmoid
    sc = RowScratch(int(np.prod(ins[0].shape)))

    def run(inputs, outputs):
        fn(inputs[0].reshape(-1), outputs[0].reshape(-1), sc.get())
    return run


@kernel("Erf", "erf_numba", supports=_unary_supports,
        cost=numba_cost, requires=("numba",))
def prepare_erf(node, ins, outs):
    fn = _jit("erf").erf

    def run(inputs, outputs):
        fn(inputs[0].reshape(-1), outputs[0].reshape(-1))
    return run


# -- data movement --------------------------------------------------------------------------------

def _merged_transpose(shape, perm):
    """Drop size-1 axes and merge input axes that stay adjacent and in order under perm:
    -> (input shape, perm) of the smallest equivalent transpose."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    p = [a for a in perm if shape[a] != 1]
    rank_of = {a: i for i, a in enumerate(keep)}
    p = [rank_of[a] for a in p]
    shp = [shape[a] for a in keep]
    groups = []  # runs of consecutive input axes, in output order
    for a in p:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = [int(np.prod([shp[a] for a in groups[g]])) for g in order]
    pos = {g: i for i, g in enumerate(order)}
    return tuple(new_shape), tuple(pos[g] for g in range(len(groups)))


@kernel("Transpose", "transpose_copy",
        supports=lambda node, ins, outs: ins[0].dtype == outs[0].dtype == F32)
def prepare_transpose(node, ins, outs):
    src_shape, p = _node_merged_transpose(node, ins)
    dst_shape = tuple(src_shape[a] for a in p)

    def run(inputs, outputs):
        np.copyto(outputs[0].reshape(dst_shape),
                  inputs[0].reshape(src_shape).transpose(p))
    return run


def _node_merged_transpose(node, ins):
    """The node's Transpose with adjacent axes that move together merged: (shape, perm)."""
    shape = tuple(ins[0].shape)
    return _merged_transpose(shape, transpose_perm(len(shape), node.attrs.get("perm")))


def _tiled_transpose_supports(node, ins, outs) -> bool:
    """float32, and after merging axes the output's rows do not run along the input's:
    the strided copy would read one float per cache line (K to k_t in attention)."""
    if not (ins[0].dtype == outs[0].dtype == F32) or not 2 <= len(ins[0].shape) <= 8:
        return False
    p = _node_merged_transpose(node, ins)[1]
    return len(p) >= 2 and p[-1] != len(p) - 1


@kernel("Transpose", "transpose_tiled", supports=_tiled_transpose_supports)
def prepare_tiled_transpose(node, ins, outs):
    src_shape, p = _node_merged_transpose(node, ins)
    tiled = _rowops.transpose

    def run(inputs, outputs):
        tiled(inputs[0].reshape(-1), outputs[0].reshape(-1), src_shape, p)
    return run


def _pad_supports(node, ins, outs) -> bool:
    """Constant mode, constant non-negative pads (no axes input), constant or no value."""
    if node.attrs.get("mode", "constant") != "constant" or ins[1].value is None:
        return False
    if len(ins) > 3 and ins[3] is not None:
        return False
    if len(ins) > 2 and ins[2] is not None and ins[2].value is None:
        return False
    return ins[0].dtype == outs[0].dtype and bool(np.all(np.asarray(ins[1].value) >= 0))


@kernel("Pad", "pad_constant_copy", supports=_pad_supports)
def prepare_pad(node, ins, outs):
    """y = value everywhere, then x copied into its window (one fill, one copy)."""
    rank = len(ins[0].shape)
    pads = [int(v) for v in np.asarray(ins[1].value).reshape(-1)]
    window = tuple(slice(b, b + d) for b, d in zip(pads[:rank], ins[0].shape))
    value = ins[2].value if len(ins) > 2 and ins[2] is not None else None
    fill = np.zeros((), outs[0].dtype) if value is None or np.size(value) == 0 else \
        np.asarray(value).reshape(-1)[0].astype(outs[0].dtype)

    def run(inputs, outputs):
        y = outputs[0]
        y.fill(fill)
        y[window] = inputs[0]
    return run


def _index_pad_supports(node, ins, outs) -> bool:
    """reflect / edge / wrap with constant non-negative pads, no axes input."""
    if node.attrs.get("mode", "constant") not in ("reflect", "edge", "wrap"):
        return False
    if ins[1].value is None or (len(ins) > 3 and ins[3] is not None):
        return False
    pads = np.asarray(ins[1].value).reshape(-1)
    return bool(np.all(pads >= 0)) and 0 not in ins[0].shape and \
        np.prod(outs[0].shape) < 1 << 26


@kernel("Pad", "pad_gather", supports=_index_pad_supports)
def prepare_index_pad(node, ins, outs):
    """reflect / edge / wrap: y is a gather of x by a flat index built once (np.pad of
    each axis' positions, numpy's modes being ONNX's), so a run is one np.take."""
    from ..reference.tensor import _PAD_MODES
    shape = tuple(ins[0].shape)
    rank = len(shape)
    pads = [int(v) for v in np.asarray(ins[1].value).reshape(-1)]
    mode = _PAD_MODES[node.attrs["mode"]]
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
    flat = np.zeros((), np.int64)
    for ax in range(rank):
        pos = np.pad(np.arange(shape[ax], dtype=np.int64), (pads[ax], pads[ax + rank]),
                     mode=mode) * strides[ax]
        flat = np.add.outer(flat, pos)
    index = np.ascontiguousarray(flat.reshape(-1))

    def run(inputs, outputs):
        np.take(inputs[0].reshape(-1), index, out=outputs[0].reshape(-1))
    return run


def _consts(ins, first: int) -> bool:
    """Inputs first.. constant or omitted."""
    return all(i is None or i.value is not None for i in ins[first:])


@kernel("Slice", "slice_copy", supports=lambda node, ins, outs: _consts(ins, 1))
def prepare_slice(node, ins, outs):
    """Constant starts / ends / axes / steps: one strided copy into the output."""
    vals = [None if i is None else i.value for i in ins[1:5]] + [None] * 4
    window = tuple(slice_objects(ins[0].shape, vals[0], vals[1], vals[2], vals[3]))

    def run(inputs, outputs):
        np.copyto(outputs[0], inputs[0][window])
    return run


@kernel("Split", "split_copy", supports=lambda node, ins, outs: _consts(ins, 1))
def prepare_split(node, ins, outs):
    """Constant split sizes (or num_outputs / equal parts): one copy per output."""
    shape = ins[0].shape
    axis = norm_axis(node.attrs.get("axis", 0), len(shape))
    sizes = split_sizes(shape[axis], ins[1].value if len(ins) > 1 and ins[1] is not None
                        else None, node.attrs.get("num_outputs"))
    bounds = np.cumsum([0] + list(sizes))
    windows = [tuple(slice(int(lo), int(hi)) if a == axis else slice(None)
                     for a in range(len(shape))) for lo, hi in zip(bounds[:-1], bounds[1:])]

    def run(inputs, outputs):
        x = inputs[0]
        for y, window in zip(outputs, windows):
            if y is not None:
                np.copyto(y, x[window])
    return run


def _gather_supports(node, ins, outs) -> bool:
    return (ins[0].dtype == outs[0].dtype == F32 and ins[1].dtype in ("int64", "int32")
            and len(ins[0].shape) >= 1)


@kernel("Gather", "gather_take", supports=_gather_supports)
def prepare_gather(node, ins, outs):
    """np.take into the output; indices checked (negative ones count from the end, out of
    range is an error, as the reference)."""
    axis = int(node.attrs.get("axis", 0)) % len(ins[0].shape)
    dim = ins[0].shape[axis]
    const = ins[1].value
    if const is not None:
        from ..reference.tensor import _wrap_indices
        const = np.asarray(_wrap_indices(const, dim, "Gather"))

    def run(inputs, outputs):
        idx = const
        if idx is None:
            idx = inputs[1]
            if idx.size and (idx.max() >= dim or idx.min() < -dim):
                raise ValueError(f"Gather index out of range for dim(s) {dim}")
        np.take(inputs[0], idx, axis=axis, out=outputs[0], mode="wrap")
    return run


@kernel("Cast", "cast_copy",
        supports=lambda node, ins, outs: outs[0].dtype == F32
        and ins[0].dtype in ("float32", "float64", "float16", "int64", "int32", "int8",
                             "uint8", "bool"))
def prepare_cast(node, ins, outs):
    def run(inputs, outputs):
        np.copyto(outputs[0], inputs[0], casting="unsafe")
    return run


@kernel("Cast", "cast_to_bool",
        supports=lambda node, ins, outs: outs[0].dtype == "bool"
        and ins[0].dtype in ("float32", "float64", "int64", "int32", "int8", "uint8", "bool"))
def prepare_cast_bool(node, ins, outs):
    """x != 0 (NaN is True, as astype(bool)), written into the planned output."""
    def run(inputs, outputs):
        np.not_equal(inputs[0], 0, out=outputs[0])
    return run


@kernel("Where", "where_copyto",
        supports=lambda node, ins, outs: ins[0].dtype == "bool" and ins[1].dtype == F32
        and ins[2].dtype == F32 and outs[0].dtype == F32)
def prepare_where(node, ins, outs):
    def run(inputs, outputs):  # y = y-branch, then the x-branch where cond (broadcasting)
        cond, x, y = inputs
        np.copyto(outputs[0], y)
        np.copyto(outputs[0], x, where=cond)
    return run


@kernel("Expand", "expand_copyto",
        supports=lambda node, ins, outs: ins[0].dtype == outs[0].dtype and ins[0].dtype in (
            "float32", "float64", "int64", "int32", "bool"))
def prepare_expand(node, ins, outs):
    """Any of these dtypes: a broadcasting copy (the attention-mask path of BERT-likes is
    int64)."""
    def run(inputs, outputs):
        np.copyto(outputs[0], inputs[0])  # the output shape is the broadcast shape
    return run
