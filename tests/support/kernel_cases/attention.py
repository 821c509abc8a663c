"""Kernel test cases for GroupQueryAttention (com.microsoft, graph/shapes/decoder.py):
decode and prefill, packed or separate Q / K / V, the cache in place or as present
outputs (a past buffer longer than the valid keys), rotary (interleaved or not, position
ids), a local window, softcap, smooth softmax, two batch entries of different lengths;
and attention_bias, which the fast kernels leave to the reference."""
import numpy as np

from edgenn.graph.ir import Node

CONST = {6}      # total_sequence_length: the present length at plan time


def _caches(rows, half):
    angle = np.arange(rows)[:, None] * (10000.0 ** (-np.arange(half) / half))[None]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def _case(rng, B, S, N, KVN, H, T, extra, packed=False, in_place=0, rotary=None,
          pos_ids=False, bias=False, **attrs):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)   # noqa: E731
    T = np.array(T, np.int64)
    P = int(T.max()) + extra
    q = f(B, S, (N + 2 * KVN) * H) if packed else f(B, S, N * H)
    k, v = (None, None) if packed else (f(B, S, KVN * H), f(B, S, KVN * H))
    cos = sin = pids = None
    if rotary:
        cos, sin = _caches(P + S + 4, H // 2)
        attrs.update(do_rotary=1, rotary_interleaved=int(rotary == "interleaved"))
        if pos_ids:
            pids = ((T - np.minimum(T, S))[:, None] + np.arange(S)[None]).astype(np.int64)
    ins = [q, k, v, f(B, KVN, P, H), f(B, KVN, P, H), (T - 1).astype(np.int32),
           np.array(int(T.max()), np.int32), cos, sin, pids,
           f(B, N, S, int(T.max())) if bias else None]
    while ins[-1] is None:
        ins.pop()
    attrs.update(num_heads=N, kv_num_heads=KVN, kv_in_place=in_place)
    names = [f"i{j}" if x is not None else "" for j, x in enumerate(ins)]
    outs = ["y"] if in_place else ["y", "present_k", "present_v"]
    return Node("GroupQueryAttention", names, outs, attrs, "gqa"), ins, CONST


def gqa_cases():
    rng = np.random.default_rng(43)
    yield _case(rng, 1, 1, 9, 3, 64, (37,), 11, in_place=1, rotary="plain")
    yield _case(rng, 2, 1, 4, 1, 32, (20, 9), 3, packed=True, rotary="interleaved",
                local_window_size=8)
    yield _case(rng, 2, 1, 8, 2, 16, (5, 1), 0, softcap=10.0, smooth_softmax=1)
    yield _case(rng, 1, 7, 9, 3, 64, (7,), 5, rotary="plain", pos_ids=True)
    yield _case(rng, 2, 5, 4, 2, 80, (30, 3), 2, in_place=1, rotary="plain",
                local_window_size=4)
    yield _case(rng, 1, 16, 8, 2, 32, (16,), 0, packed=True, scale=0.3)
    yield _case(rng, 1, 1, 4, 2, 16, (6,), 2, bias=True)     # the reference's


CASES = {"GroupQueryAttention": gqa_cases}
