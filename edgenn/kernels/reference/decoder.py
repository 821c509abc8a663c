"""Reference kernels of the decoder family (graph/shapes/decoder.py): NumPy, vectorized over
heads and tokens (a loop over batch entries only), since they are what runs for now.

Layouts: RotaryEmbedding's x is (B, S, N*H) or (B, N, S, H); GroupQueryAttention's query is
(B, S, N*H) (or packed (B, S, (N + 2 KVN) H)), its caches (B, KVN, L, H) (BNSH). Data the
shapes cannot check (seqlens_k, position ids) is checked here and refused with a
ValueError, which the runtime reports as an InputError naming the node.
"""
from __future__ import annotations

import math

import numpy as np

from ...graph.shapes.decoder import gqa_head_size, rotary_geometry
from ...registry import reference


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """x (..., H) with its first r = 2 * cos.shape[-1] channels rotated, the rest copied;
    cos / sin broadcast against x[..., :r/2]. Interleaved: the pairs are channels (2i, 2i+1),
    else (i, i + r/2). Each pair (a, b) -> (a cos - b sin, a sin + b cos)."""
    half = cos.shape[-1]
    r = 2 * half
    out = x.copy()
    if interleaved:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
    else:
        a, b = x[..., :half], x[..., half:r]
    real, imag = a * cos - b * sin, a * sin + b * cos
    if interleaved:
        out[..., 0:r:2], out[..., 1:r:2] = real, imag
    else:
        out[..., :half], out[..., half:r] = real, imag
    return out


def _cache_rows(cache: np.ndarray, positions: np.ndarray, what: str) -> np.ndarray:
    """cache (M, r/2) rows at int positions (any shape) -> positions.shape + (r/2,)."""
    if positions.size and (positions.min() < 0 or positions.max() >= cache.shape[0]):
        raise ValueError(f"{what} positions {int(positions.min())}..{int(positions.max())} "
                         f"are outside the cos / sin caches' {cache.shape[0]} rows")
    return cache[positions]


@reference("RotaryEmbedding")
def rotary_embedding(attrs, inputs):
    x, cos_cache, sin_cache = inputs[:3]
    pos = inputs[3] if len(inputs) > 3 else None
    g = rotary_geometry(attrs, x.shape, cos_cache.shape)
    dt = np.float32 if x.dtype != np.float64 else np.float64
    if pos is None:                     # caches already per token: (B, S, r/2)
        cos, sin = cos_cache, sin_cache
    else:
        pos = pos.astype(np.int64)
        if pos.size == 1:               # one offset: token s is at offset + s
            pos = pos.reshape(-1)[0] + np.arange(g.seq)[None, :]
        cos = _cache_rows(cos_cache, pos, "RotaryEmbedding")
        sin = _cache_rows(sin_cache, pos, "RotaryEmbedding")
    # cos / sin (B or 1, S, r/2) -> against x as (B, S, N, H) or (B, N, S, H)
    cos, sin = (c.astype(dt)[:, :, None, :] if x.ndim == 3 else c.astype(dt)[:, None]
                for c in (cos, sin))
    xv = x.astype(dt).reshape(x.shape[0], x.shape[1], g.heads, g.head) if x.ndim == 3 \
        else x.astype(dt)
    y = rotate(xv, cos, sin, bool(attrs.get("interleaved", 0)))
    return [y.reshape(x.shape).astype(x.dtype, copy=False)]


def _heads(t: np.ndarray, heads: int, head: int) -> np.ndarray:
    """(B, S, heads * head) -> (B, heads, S, head)."""
    b, s = t.shape[:2]
    return t.reshape(b, s, heads, head).transpose(0, 2, 1, 3)


def _lengths(seqlens_k: np.ndarray, s: int, limit: int, past_len: int, in_place: bool):
    """Per batch entry: T (keys after this step), Q (new tokens kept), P = T - Q (keys before
    it); refused unless 1 <= T <= limit (the cache length) and P fits the past buffer."""
    total = seqlens_k.astype(np.int64).reshape(-1) + 1
    bad = np.flatnonzero((total < 1) | (total > limit))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"seqlens_k[{b}] = {int(total[b]) - 1}: the keys after this step "
                         f"({int(total[b])}) must be 1 .. {limit}, the length of the "
                         f"{'past buffer updated in place' if in_place else 'present cache'}")
    new = np.minimum(total, s)
    past = total - new
    bad = np.flatnonzero(past > past_len)
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"seqlens_k[{b}] = {int(total[b]) - 1} with {s} new tokens puts "
                         f"{int(past[b])} keys before them, more than the past buffer's "
                         f"{past_len}")
    return total, new, past


def _softmax(scores: np.ndarray, sink: np.ndarray | None) -> np.ndarray:
    """softmax over the last axis of (N, S, T) scores (-inf = masked); sink (N,): one more
    logit per head that counts in the denominator only (smooth softmax: a sink of 0)."""
    m = scores.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink[:, None, None])
    e = np.exp(scores - m)
    denom = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + np.exp(sink[:, None, None] - m)
    return e / denom


@reference("GroupQueryAttention")
def group_query_attention(attrs, inputs):
    """See graph/shapes/decoder.py for the inputs, attributes and the cache layout."""
    ins = list(inputs) + [None] * (12 - len(inputs))
    query, key, value, past_k, past_v, seqlens_k, total_len, cos_c, sin_c = ins[:9]
    position_ids, bias, head_sink = ins[9:12]
    n, kvn = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    b, s = query.shape[:2]
    h = gqa_head_size(attrs, query.shape, key is None)
    in_place = bool(attrs.get("kv_in_place", 0))
    if key is None:                     # packed (B, S, (N + 2 KVN) H): q | k | v
        query, key, value = np.split(query, [n * h, (n + kvn) * h], axis=-1)
    f32 = np.float32
    q = _heads(query.astype(f32), n, h)            # (B, N, S, H)
    k = _heads(key.astype(f32), kvn, h)            # (B, KVN, S, H)
    v = _heads(value.astype(f32), kvn, h)
    past_len = 0 if past_k is None else past_k.shape[2]
    total_len = int(np.asarray(total_len).reshape(-1)[0])
    cache_len = past_len if in_place else max(total_len, past_len)
    total, new, past = _lengths(seqlens_k, s, cache_len, past_len, in_place)
    if bias is not None and bias.shape[-1] < total.max():
        raise ValueError(f"attention_bias {bias.shape} has fewer columns than the "
                         f"{int(total.max())} keys of this step")
    # absolute position of query row i of entry b: past[b] + i (rows >= new[b] are padding,
    # their output unspecified: they are given the last valid row's mask)
    rows = np.arange(s)
    pos = past[:, None] + rows[None, :]                                   # (B, S)
    if attrs.get("do_rotary", 0):
        rot = pos
        if position_ids is not None:
            rot = position_ids.astype(np.int64)
            if s == total_len:          # a first prompt: onnxruntime reads the first id only
                rot = rot[:1, :1] + rows[None, :]
        cos = _cache_rows(cos_c, rot, "GroupQueryAttention rotary").astype(f32)[:, None]
        sin = _cache_rows(sin_c, rot, "GroupQueryAttention rotary").astype(f32)[:, None]
        inter = bool(attrs.get("rotary_interleaved", 0))
        q, k = rotate(q, cos, sin, inter), rotate(k, cos, sin, inter)
    if in_place:                        # the caller's buffers are the cache
        cache_k, cache_v = past_k, past_v
    else:
        dt = query.dtype if past_k is None else past_k.dtype
        cache_k = np.zeros((b, kvn, cache_len, h), dt)
        cache_v = np.zeros((b, kvn, cache_len, h), dt)
    scale = float(attrs.get("scale", 0.0) or 0.0) or 1.0 / math.sqrt(h)
    softcap = float(attrs.get("softcap", 0.0) or 0.0)
    window = int(attrs.get("local_window_size", -1))
    sink = None
    if head_sink is not None:
        sink = head_sink.astype(f32).reshape(n)
    elif int(attrs.get("smooth_softmax", 0)) == 1:
        sink = np.zeros(n, f32)
    group = n // kvn
    out = np.empty((b, s, n * h), f32)
    for i in range(b):
        t, p = int(total[i]), int(past[i])
        if not in_place and p:
            cache_k[i, :, :p] = past_k[i, :, :p]
            cache_v[i, :, :p] = past_v[i, :, :p]
        # the new rows from P: the kept ones, and as onnxruntime also the padding rows of
        # a right-padded prompt where the cache has room (unspecified, never attended)
        m = min(s, cache_len - p)
        cache_k[i, :, p:p + m] = k[i, :, :m]
        cache_v[i, :, p:p + m] = v[i, :, :m]
        keys = cache_k[i, :, :t].astype(f32)                                # (KVN, T, H)
        vals = cache_v[i, :, :t].astype(f32)
        # the G query heads of one kv head as one (G S, H) matrix against its (T, H) keys
        qg = q[i].reshape(kvn, group * s, h)
        scores = np.matmul(qg, keys.transpose(0, 2, 1)).reshape(n, s, t) * f32(scale)
        if softcap > 0:
            scores = f32(softcap) * np.tanh(scores / f32(softcap))
        if bias is not None:
            scores = scores + bias[min(i, bias.shape[0] - 1), :, :, :t].astype(f32)
        last = np.minimum(pos[i], t - 1)[:, None]                            # (S, 1)
        j = np.arange(t)[None, :]
        keep = j <= last
        if window > 0:
            keep &= j > last - window
        scores = np.where(keep[None], scores, -np.inf)
        probs = _softmax(scores, sink).astype(f32)
        y = np.matmul(probs.reshape(kvn, group * s, t), vals).reshape(n, s, h)
        out[i] = y.transpose(1, 0, 2).reshape(s, n * h)
    out = out.astype(query.dtype, copy=False)
    return [out] if in_place else [out, cache_k, cache_v]
