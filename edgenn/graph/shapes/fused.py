"""Shape rules of ops that exist only inside edgenn, produced by the fusion passes.

FusedAttention(q, k_t, v[, mask]) -> y, attrs scale (default 1/sqrt(D)), mask_kind
("add": mask is added to the scores; "bool": False masks a score out):
    q (..., S, D), k_t (..., D, T) (K already transposed), v (..., T, Dv),
    mask broadcastable to (..., S, T);  y = softmax(q @ k_t * scale + mask) @ v, (..., S, Dv).
The leading dims (B, H for the usual (B, H, S, D)) broadcast like MatMul's batch dims.
Optional perm_q / perm_k / perm_v: the input as stored is transposed by it to give q / k_t /
v (the heads' Transposes absorbed: (B, S, H, D) read with perm (0, 2, 1, 3)); perm_y: the
output is y transposed by it (the Transpose back to (B, S, H, Dv)).

AttentionMaskBias(mask, keys) -> bias float32, attr filter_value (onnxruntime's
com.microsoft Attention masks, converters/onnx/contrib_transformer.py): keys (B, T, ...)
gives the key length T; mask is int32
    (B,) valid key lengths (keys j >= len are masked), (2B,) end and start positions,
    (B, T) 1 keep / 0 mask, or (B, S, T) the same per query;
bias = 0 where kept, filter_value where masked, shaped (B, 1, 1, T) or (B, 1, S, T) to add
to the (B, heads, S, T) scores.

ExpandDepthwise(x, w1, b1, w2, b2, z) -> y, attrs "expand" and "depthwise" (each a Conv's
attributes): the Conv (x, w1, b1) and the Conv of its output (w2, b2, z), as one step. Made
by the planner only (runtime/fuse_steps.py), where its kernel measured faster.
DepthwiseProject(x, w1, b1, w2, b2, z) -> y, attrs "depthwise" and "project": the same
for a depthwise Conv and the 1x1 Conv of its output.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ...registry import TensorInfo, shape_rule
from ..ir import Node
from .nn import conv

OPS = ("FusedAttention", "AttentionMaskBias", "ExpandDepthwise", "DepthwiseProject")


PERM_ATTRS = ("perm_q", "perm_k", "perm_v")   # inputs 0-2 as stored -> q, k_t, v


def permuted(shape, perm) -> tuple:
    """shape transposed by perm (None: as it is)."""
    return tuple(shape) if perm is None else tuple(shape[p] for p in perm)


def inverse(perm) -> list[int] | None:
    return None if perm is None else [int(i) for i in np.argsort(perm)]


def attention_views(node, ins) -> list[TensorInfo]:
    """The FusedAttention's q, k_t, v (and mask) as the op reads them: inputs 0-2 with their
    perm_* applied (GraphError for a perm that is not one of the input's axes)."""
    out = list(ins)
    for i, key in enumerate(PERM_ATTRS):
        perm = node.attrs.get(key)
        if perm is None or ins[i] is None:
            continue
        _check_perm(node, key, perm, ins[i].shape)
        out[i] = TensorInfo(ins[i].dtype, permuted(ins[i].shape, perm))
    return out


def _check_perm(node, key: str, perm, shape) -> None:
    if sorted(int(p) for p in perm) != list(range(len(shape))):
        raise GraphError(f"{node.op} node {node.name!r}: {key} {list(perm)} is not a "
                         f"permutation of the axes of {shape}")


@shape_rule("FusedAttention")
def fused_attention(node, ins):
    (y,) = _attention_logical(node, attention_views(node, ins))
    perm = node.attrs.get("perm_y")
    if perm is not None:
        _check_perm(node, "perm_y", perm, y.shape)
    return [TensorInfo(y.dtype, permuted(y.shape, perm))]


def _attention_logical(node, ins):
    q, kt, v = ins[0], ins[1], ins[2]
    mask = ins[3] if len(ins) > 3 else None
    where = f"{node.op} node {node.name!r}"
    if min(len(q.shape), len(kt.shape), len(v.shape)) < 3:
        raise GraphError(f"{where}: q {q.shape}, k_t {kt.shape}, v {v.shape} need rank >= 3")
    if q.dtype not in ("float16", "float32", "float64") or kt.dtype != q.dtype \
            or v.dtype != q.dtype:
        raise GraphError(f"{where}: q, k_t, v must share one float dtype, got "
                         f"{q.dtype}, {kt.dtype}, {v.dtype}")
    s, d = q.shape[-2:]
    t = kt.shape[-1]
    if kt.shape[-2] != d or v.shape[-2] != t:
        raise GraphError(f"{where}: q {q.shape} @ k_t {kt.shape} @ v {v.shape}: "
                         f"inner dimensions differ")
    kind = node.attrs.get("mask_kind", "add")
    if kind not in ("add", "bool"):
        raise GraphError(f"{where}: mask_kind {kind!r} must be 'add' or 'bool'")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], kt.shape[:-2], v.shape[:-2])
        if mask is not None:
            target = (*lead, s, t)
            if np.broadcast_shapes(mask.shape, target) != target:
                raise ValueError(f"mask {mask.shape} does not broadcast to {target}")
    except ValueError as exc:
        raise GraphError(f"{where}: shapes q {q.shape}, k_t {kt.shape}, v {v.shape}"
                         f"{'' if mask is None else f', mask {mask.shape}'} do not broadcast: "
                         f"{exc}") from None
    return [TensorInfo(q.dtype, (*lead, s, v.shape[-1]))]

@shape_rule("AttentionMaskBias")
def attention_mask_bias(node, ins):
    mask, keys = ins[0], ins[1]
    where = f"{node.op} node {node.name!r}"
    if len(keys.shape) < 2:
        raise GraphError(f"{where}: keys {keys.shape} need (batch, key length, ...)")
    b, t = keys.shape[0], keys.shape[1]
    r = len(mask.shape)
    ok = (r == 1 and mask.shape[0] in (b, 2 * b)) or (r == 2 and mask.shape == (b, t)) or \
        (r == 3 and mask.shape[0] == b and mask.shape[2] == t)
    if not ok:
        raise GraphError(f"{where}: mask {mask.shape} is none of (B,), (2B,), (B, T), "
                         f"(B, S, T) for B = {b}, T = {t}")
    return [TensorInfo("float32", (b, 1, mask.shape[1] if r == 3 else 1, t))]


CONST_INPUTS: dict = {}


def _conv_pair(node, ins, keys):
    """Two Convs as one node: x, w1, b1 of the first and w2, b2, z of the second (which
    reads the first's output), attrs keys[0] / keys[1] their Conv attributes."""
    x, w1, b1, w2, b2, z = (list(ins) + [None] * 6)[:6]
    if not all(isinstance(node.attrs.get(k), dict) for k in keys) \
            or len(node.inputs) < 6 or x is None or w1 is None or w2 is None:
        raise GraphError(f"{node.op} node {node.name!r}: needs inputs x, w1, b1, w2, b2, z "
                         f"and the two Convs' attributes ({keys[0]!r}, {keys[1]!r})")
    first = Node("Conv", node.inputs[:3], ["t"], node.attrs[keys[0]], node.name)
    (t,) = conv(first, [x, w1, b1])
    second = Node("Conv", ["t"] + node.inputs[3:6], node.outputs, node.attrs[keys[1]],
                  node.name)
    return conv(second, [t, w2, b2, z])


PAIR_KEYS = {"ExpandDepthwise": ("expand", "depthwise"),
             "DepthwiseProject": ("depthwise", "project")}


@shape_rule("ExpandDepthwise")
def expand_depthwise(node, ins):
    return _conv_pair(node, ins, PAIR_KEYS["ExpandDepthwise"])


@shape_rule("DepthwiseProject")
def depthwise_project(node, ins):
    return _conv_pair(node, ins, PAIR_KEYS["DepthwiseProject"])
