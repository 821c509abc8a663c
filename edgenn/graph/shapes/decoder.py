"""Shape rules of the decoder family: rotary position embeddings and attention over a
key / value cache (onnxruntime's RotaryEmbedding and GroupQueryAttention, 1.32 semantics).

RotaryEmbedding(x, cos_cache, sin_cache[, position_ids]) -> y (the ONNX opset-23 input
order; converters/onnx/decoder.py also maps com.microsoft's (x, position_ids, cos, sin)):
    x (B, S, N*H) or (B, N, S, H); attrs interleaved (0: pairs (i, i + r/2), 1: pairs
    (2i, 2i+1)), num_heads (N of a 3D x; 0: H = 2 * cos_cache.shape[-1]),
    rotary_embedding_dim r (0: r = H; r < H rotates the first r channels of each head and
    copies the rest);
    position_ids int64 (B, S): token (b, s) reads row position_ids[b, s] of the caches
    (M, r/2); one element: an offset, token s reads row offset + s; omitted: the caches are
    per token already, (B, S, r/2).  y = x with each pair (a, b) -> (a cos - b sin,
    a sin + b cos), same shape.

GroupQueryAttention(query, key, value, past_key, past_value, seqlens_k,
total_sequence_length, cos_cache, sin_cache, position_ids, attention_bias, head_sink)
-> output, present_key, present_value:
    query (B, S, N*H), key / value (B, S, KVN*H); or key and value omitted and query packed
    (B, S, (N + 2 KVN) H) as q | k | v. N = num_heads, KVN = kv_num_heads, N % KVN == 0:
    query head n reads kv head n // (N / KVN).
    past_key / past_value (B, KVN, P, H) (BNSH), both or neither; seqlens_k int32 (B,): the
    keys of entry b after this step, minus one, T_b = seqlens_k[b] + 1;
    total_sequence_length int32, one element: the batch's longest T (the attention mask's
    width).
    The S new tokens of entry b are kept Q_b = min(S, T_b) (rows Q_b .. S-1 are padding of
    a right-padded prompt: their output is unspecified), at absolute positions
    P_b = T_b - Q_b .. T_b - 1; query row i attends causally to keys 0 .. P_b + i, and with
    local_window_size W > 0 to the last W of them only (keys P_b + i - W + 1 .. P_b + i).
    Present length L = max(total_sequence_length, P) (onnxruntime's rule, so a past buffer
    longer than the valid keys, its "shared buffer" form, keeps its length): present_key /
    present_value (B, KVN, L, H) = past rows 0 .. P_b - 1, the new keys / values at
    P_b .. T_b - 1, zeros after.
    attrs scale (0: 1/sqrt(H)), softcap (> 0: scores -> softcap tanh(scores / softcap),
    after the scale), local_window_size (-1: none), do_rotary (rotate q and k at their
    absolute positions, or at position_ids (B, S) int64 when given, with cos_cache /
    sin_cache (M, r/2), r <= H; as onnxruntime, a first prompt (S == total_sequence_length)
    reads position_ids[0, 0] only, token i at position_ids[0, 0] + i), rotary_interleaved,
    smooth_softmax (1: softmax with one more logit of 0 in its denominator);
    attention_bias (B or 1, N or 1, S, >= T): added to the scores, column j = key position j;
    head_sink (N,): per head, the extra denominator logit (replaces smooth_softmax's 0).
    output (B, S, N*H).

    kv_in_place (edgenn's own attribute, default 0): 1 = the cache is updated in place.
    past_key / past_value are the caller's preallocated (B, KVN, L, H) buffers; the kernel
    writes the new keys / values into them at P_b .. T_b - 1 (no copy of the cache per
    token) and attends over rows 0 .. T_b - 1; present_key / present_value must be omitted
    ("" in node.outputs) and the node has the one output. A generator owns those buffers
    and feeds the same arrays every step.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import GraphError
from ...registry import TensorInfo, const_value, shape_rule

OPS = ("RotaryEmbedding", "GroupQueryAttention")
# total_sequence_length decides the present length
CONST_INPUTS: dict = {"GroupQueryAttention": (6,)}
FLOATS = ("float16", "float32")


@dataclass
class RotaryGeometry:
    seq: int      # S
    heads: int    # N
    head: int     # H
    rotary: int   # r, the rotated channels of a head


def rotary_geometry(attrs, x_shape, cos_shape) -> RotaryGeometry:
    """S, N, H, r of a RotaryEmbedding; ValueError with the reason when they do not fit."""
    heads = int(attrs.get("num_heads", 0) or 0)
    rotary = int(attrs.get("rotary_embedding_dim", 0) or 0)
    if len(x_shape) == 4:
        seq, heads_x, head = x_shape[2], x_shape[1], x_shape[3]
        if heads and heads != heads_x:
            raise ValueError(f"num_heads {heads} but x {tuple(x_shape)} has {heads_x} heads")
        heads = heads_x
    elif len(x_shape) == 3:
        seq, hidden = x_shape[1], x_shape[2]
        if heads:
            if hidden % heads:
                raise ValueError(f"hidden size {hidden} is not divisible by num_heads {heads}")
            head = hidden // heads
        else:
            head = 2 * cos_shape[-1]
            if head == 0 or hidden % head:
                raise ValueError(f"without num_heads the head size is 2 * cos_cache's last "
                                 f"dim = {head}, which does not divide hidden size {hidden}")
            heads = hidden // head
    else:
        raise ValueError(f"x {tuple(x_shape)} must be (B, S, N*H) or (B, N, S, H)")
    rotary = rotary or head
    if rotary > head or rotary % 2:
        raise ValueError(f"rotary_embedding_dim {rotary} must be even and <= head size {head}")
    if cos_shape[-1] != rotary // 2:
        raise ValueError(f"cos / sin caches {tuple(cos_shape)} need a last dim of rotary dim "
                         f"/ 2 = {rotary // 2}")
    return RotaryGeometry(seq, heads, head, rotary)


@shape_rule("RotaryEmbedding")
def rotary_embedding(node, ins):
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    where = f"{node.op} node {node.name!r}"
    if x is None or cos is None or sin is None:
        raise GraphError(f"{where}: needs x, cos_cache and sin_cache")
    if x.dtype not in FLOATS + ("float64",) or cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise GraphError(f"{where}: x, cos_cache, sin_cache must share one float dtype, got "
                         f"{x.dtype}, {cos.dtype}, {sin.dtype}")
    if cos.shape != sin.shape:
        raise GraphError(f"{where}: cos_cache {cos.shape} and sin_cache {sin.shape} differ")
    try:
        g = rotary_geometry(node.attrs, x.shape, cos.shape)
    except ValueError as exc:
        raise GraphError(f"{where}: {exc}") from None
    b = x.shape[0]
    if pos is None:
        if len(cos.shape) != 3 or cos.shape[:2] not in ((b, g.seq), (1, g.seq)):
            raise GraphError(f"{where}: without position_ids the caches must be (B, S, r/2) "
                             f"= ({b}, {g.seq}, {g.rotary // 2}), got {cos.shape}")
    else:
        if pos.dtype not in ("int64", "int32"):
            raise GraphError(f"{where}: position_ids must be int64, got {pos.dtype}")
        one = 1
        for d in pos.shape:
            one *= d
        if one != 1 and pos.shape != (b, g.seq):
            raise GraphError(f"{where}: position_ids {pos.shape} must be (B, S) = "
                             f"({b}, {g.seq}) or one offset")
        if len(cos.shape) != 2:
            raise GraphError(f"{where}: with position_ids the caches must be (max positions, "
                             f"r/2), got {cos.shape}")
    return [TensorInfo(x.dtype, x.shape)]


def gqa_head_size(attrs, q_shape, packed: bool) -> int:
    """H of a GroupQueryAttention; ValueError when the heads do not divide the hidden size."""
    n, kvn = int(attrs.get("num_heads", 0)), int(attrs.get("kv_num_heads", 0))
    if n <= 0 or kvn <= 0 or n % kvn:
        raise ValueError(f"num_heads {n} must be a positive multiple of kv_num_heads {kvn}")
    heads = n + 2 * kvn if packed else n
    if q_shape[-1] % heads or q_shape[-1] == 0:
        raise ValueError(f"query hidden size {q_shape[-1]} is not divisible by "
                         f"{'num_heads + 2 kv_num_heads' if packed else 'num_heads'} = {heads}")
    return q_shape[-1] // heads


def _need(where, ok: bool, what: str) -> None:
    if not ok:
        raise GraphError(f"{where}: {what}")


@shape_rule("GroupQueryAttention")
def group_query_attention(node, ins):
    ins = list(ins) + [None] * (12 - len(ins))
    q, k, v, pk, pv, seqlens, total, cos, sin, pos, bias, sink = ins[:12]
    where = f"{node.op} node {node.name!r}"
    _need(where, q is not None and seqlens is not None and total is not None,
          "needs query, seqlens_k and total_sequence_length")
    _need(where, (k is None) == (v is None), "key and value must both be given or both be "
          "omitted (packed query)")
    _need(where, len(q.shape) == 3 and q.dtype in FLOATS,
          f"query must be float (B, S, hidden), got {q.dtype} {q.shape}")
    try:
        h = gqa_head_size(node.attrs, q.shape, k is None)
    except ValueError as exc:
        raise GraphError(f"{where}: {exc}") from None
    n, kvn = int(node.attrs["num_heads"]), int(node.attrs["kv_num_heads"])
    b, s = q.shape[:2]
    for name, t in (("key", k), ("value", v)):
        if t is not None:
            _need(where, t.dtype == q.dtype and t.shape == (b, s, kvn * h),
                  f"{name} {t.dtype} {t.shape} must be {q.dtype} (B, S, kv_num_heads * H) = "
                  f"{(b, s, kvn * h)}")
    _need(where, (pk is None) == (pv is None), "past_key and past_value must both be given "
          "or both be omitted")
    past_len = 0
    if pk is not None:
        _need(where, len(pk.shape) == 4 and pk.shape[:2] == (b, kvn) and pk.shape[3] == h
              and pv.shape == pk.shape and pk.dtype == q.dtype and pv.dtype == q.dtype,
              f"past_key {pk.dtype} {pk.shape} / past_value {pv.dtype} {pv.shape} must be "
              f"{q.dtype} (B, kv_num_heads, P, H) = ({b}, {kvn}, P, {h})")
        past_len = pk.shape[2]
    _need(where, seqlens.dtype == "int32" and seqlens.shape == (b,),
          f"seqlens_k must be int32 (B,) = ({b},), got {seqlens.dtype} {seqlens.shape}")
    _need(where, total.dtype == "int32" and _size(total.shape) == 1,
          f"total_sequence_length must be one int32, got {total.dtype} {total.shape}")
    _check_rotary(node, where, cos, sin, pos, q.dtype, b, s, h)
    if bias is not None:
        _need(where, bias.dtype == q.dtype and len(bias.shape) == 4
              and bias.shape[0] in (1, b) and bias.shape[1] in (1, n) and bias.shape[2] == s,
              f"attention_bias {bias.dtype} {bias.shape} must be {q.dtype} (B or 1, N or 1, "
              f"S, total length)")
    if sink is not None:
        _need(where, sink.dtype == q.dtype and sink.shape == (n,),
              f"head_sink {sink.dtype} {sink.shape} must be {q.dtype} (num_heads,) = ({n},)")
    out = TensorInfo(q.dtype, (b, s, n * h))
    outs = list(node.outputs) + [""] * 3
    if int(node.attrs.get("kv_in_place", 0)):
        _need(where, pk is not None, "kv_in_place needs past_key / past_value: the buffers "
              "updated in place")
        _need(where, pk.value is None and pv.value is None, "kv_in_place needs run-time "
              "past_key / past_value arrays, not constants")
        _need(where, not outs[1] and not outs[2], "kv_in_place writes into past_key / "
              "past_value: present_key / present_value must be omitted")
        return [out]
    _need(where, bool(outs[1]) and bool(outs[2]), "present_key / present_value may be "
          "omitted only with kv_in_place = 1")
    total_len = int(const_value(node, total, "total_sequence_length").reshape(-1)[0])
    length = max(total_len, past_len)
    _need(where, total_len >= 1 and length >= s, f"total_sequence_length {total_len} with "
          f"past length {past_len} leaves no room for {s} new tokens")
    present = TensorInfo(q.dtype, (b, kvn, length, h))
    return [out, present, TensorInfo(q.dtype, present.shape)]


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _check_rotary(node, where, cos, sin, pos, dtype, b, s, h) -> None:
    if not int(node.attrs.get("do_rotary", 0)):
        return
    _need(where, cos is not None and sin is not None, "do_rotary needs cos_cache and sin_cache")
    _need(where, cos.dtype == dtype and sin.dtype == dtype and cos.shape == sin.shape
          and len(cos.shape) == 2 and 0 < 2 * cos.shape[1] <= h,
          f"cos_cache {cos.dtype} {cos.shape} / sin_cache {sin.dtype} {sin.shape} must be "
          f"{dtype} (max positions, r/2) with r <= head size {h}")
    if pos is not None:
        _need(where, pos.dtype == "int64" and pos.shape == (b, s),
              f"position_ids must be int64 (B, S) = ({b}, {s}), got {pos.dtype} {pos.shape}")
