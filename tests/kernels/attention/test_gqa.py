"""GroupQueryAttention in C (_gqa.h): every row this CPU runs and every SIMD row again on
SIMDe (_gqa_emu, NEON's among them) against the reference kernel
(kernels/reference/decoder.py) over the decoders' shapes and variants.

Bound, from the float32 arithmetic of both implementations (each within it of the exact
result, so their difference within twice it). The rotation is the same operations in
both (the written cache rows are compared bit for bit); a score is a dot of H products
times scale: |error| <= (H + 8) eps scale sum_d |q_d k_d| <= (H + 8) eps scale |q| |k|
(Cauchy-Schwarz; a rotation keeps the 2-norm), dS; softcap's tanh is 1-Lipschitz and
computed within a few eps of softcap, + 8 eps softcap. A probability's relative error
is at most twice the score error plus (n + 8) eps (the exp, the sum of n terms, the
division), and the weighted sum of n rows adds n eps sum_t p_t |v_t|; with sum_t p_t <= 1,
per output |error| <= (2 dS + (2 n + 8) eps) max |v|.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from support import kernel_tables as tables

from edgenn.kernels.attention import _gqa, _gqa_emu
from edgenn.kernels.reference.decoder import group_query_attention as reference

EPS = float(np.finfo(np.float32).eps)
PATHS = tables.paths(_gqa.rows(), _gqa_emu.rows())      # every row of _gqa.h


def _caches(rows: int, half: int):
    angle = np.arange(rows)[:, None] * (10000.0 ** (-np.arange(half) / half))[None]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def make_case(seed, B=1, S=1, N=9, KVN=3, H=64, T=(33,), extra=5, rotary="plain",
              in_place=1, window=-1, softcap=0.0, packed=False, smooth=0, pos_ids=False,
              rot_dim=None):
    """attrs, inputs (the reference's order) and the capacity of one case. T (B,): keys
    after the step; the past buffer holds max(T) + extra rows (a shared buffer longer than
    the valid keys)."""
    rng = np.random.default_rng(seed)
    T = np.array(T[:B], np.int64)
    P = int(T.max()) + extra
    seq = (T - 1).astype(np.int32)
    total = int(T.max())

    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    if packed:
        q, k, v = f(B, S, (N + 2 * KVN) * H), None, None
    else:
        q, k, v = f(B, S, N * H), f(B, S, KVN * H), f(B, S, KVN * H)
    pk, pv = f(B, KVN, P, H), f(B, KVN, P, H)
    attrs = dict(num_heads=N, kv_num_heads=KVN, kv_in_place=in_place,
                 local_window_size=window, softcap=softcap, smooth_softmax=smooth)
    cos = sin = pids = None
    if rotary:
        attrs.update(do_rotary=1, rotary_interleaved=int(rotary == "interleaved"))
        cos, sin = _caches(P + S + 8, (rot_dim or H) // 2)
        if pos_ids:
            past = T - np.minimum(T, S)
            pids = (past[:, None] + np.arange(S)[None] + rng.integers(0, 4, (B, 1)))
            pids = pids.astype(np.int64)
    ins = [q, k, v, pk, pv, seq, np.array([total], np.int32), cos, sin, pids]
    return attrs, ins


def run_kernel(lib, row, attrs, ins):
    """-> output, cache_k, cache_v (the past arrays' copies updated in place, or the
    present outputs)"""
    q, k, v, pk, pv, seq, total, cos, sin, pids = ins
    B, S = q.shape[:2]
    N, KVN = attrs["num_heads"], attrs["kv_num_heads"]
    H = pk.shape[3]
    g = lib.GQA(N, KVN, H, k is None, float(attrs.get("scale", 0.0)), attrs["softcap"],
                attrs["local_window_size"], bool(attrs.get("rotary_interleaved", 0)),
                bool(attrs["smooth_softmax"]), bool(attrs["kv_in_place"]), row=row)
    out = np.full((B, S, N * H), 7.0, np.float32)
    tl = int(total[0])
    if attrs["kv_in_place"]:
        ck, cv = pk.copy(), pv.copy()
        g.run(q, k, v, ck, cv, seq, tl, cos, sin, pids, out, ck, cv)
    else:
        L = max(tl, pk.shape[2])
        ck = np.full((B, KVN, L, H), 7.0, np.float32)
        cv = np.full((B, KVN, L, H), 7.0, np.float32)
        g.run(q, k, v, pk, pv, seq, tl, cos, sin, pids, out, ck, cv)
    return out, ck, cv


def run_reference(attrs, ins):
    ins = list(ins)
    if attrs["kv_in_place"]:
        ins[3], ins[4] = ins[3].copy(), ins[4].copy()
        out = reference(attrs, ins)[0]
        return out, ins[3], ins[4]
    return tuple(reference(attrs, ins))


def bound(attrs, ins, ck, cv):
    """The per-output bound of the module docstring for the whole case (max over rows)."""
    q, k = ins[0], ins[1]
    N, KVN = attrs["num_heads"], attrs["kv_num_heads"]
    H = ck.shape[3]
    B, S = q.shape[:2]
    qh = q[..., :N * H].reshape(B, S, N, H).astype(np.float64)
    qn = np.sqrt((qh ** 2).sum(-1)).max()
    seq = ins[5].astype(np.int64) + 1
    kn = max(np.sqrt((ck[b, :, :seq[b]].astype(np.float64) ** 2).sum(-1)).max()
             for b in range(B))
    vmax = max(np.abs(cv[b, :, :seq[b]]).max() for b in range(B))
    scale = float(attrs.get("scale", 0.0)) or 1.0 / math.sqrt(H)
    ds = (H + 8) * EPS * scale * qn * kn + 8 * EPS * attrs["softcap"]
    n = int(seq.max())
    return 2 * (2 * ds + (2 * n + 8) * EPS) * vmax


def check(path, attrs, ins):
    lib, row = tables.lib_and_row(path, _gqa, _gqa_emu)
    got, gk, gv = run_kernel(lib, row, attrs, ins)
    want, wk, wv = run_reference(attrs, ins)
    # the cache: bit for bit (the same rotation, copies and zeros)
    np.testing.assert_array_equal(gk, wk)
    np.testing.assert_array_equal(gv, wv)
    S = ins[0].shape[1]
    T = ins[5].astype(np.int64) + 1
    tol = bound(attrs, ins, wk, wv)
    for b in range(ins[0].shape[0]):
        kept = min(S, int(T[b]))          # rows past it: padding, unspecified
        np.testing.assert_allclose(got[b, :kept], want[b, :kept], rtol=0, atol=tol,
                                   err_msg=f"{path} entry {b}")
    return got, want, tol


HEADS = [(1, 1, 16), (4, 1, 32), (9, 3, 64), (8, 2, 80), (32, 8, 128), (9, 3, 64),
         (4, 1, 80), (8, 2, 16), (32, 8, 32)]
DECODE_T = [1, 5, 17, 33, 63, 100, 129, 257, 300]


def decode_cases():
    """S = 1 over head shapes x lengths, the variants cycled through them."""
    out = []
    for i, (N, KVN, H) in enumerate(HEADS):
        for j, t in enumerate(DECODE_T):
            c = i * len(DECODE_T) + j
            B = 1 + c % 2
            out.append(dict(
                seed=c, B=B, S=1, N=N, KVN=KVN, H=H, T=(t, max(1, t - 7 - c % 11)),
                extra=1 + c % 9, in_place=c % 2 if c % 3 else 1 - c % 2,
                rotary=[None, "plain", "interleaved"][c % 3],
                window=[-1, -1, 7, 64, -1][c % 5], softcap=[0.0, 0.0, 0.0, 30.0][c % 4],
                packed=c % 5 == 1, smooth=int(c % 7 == 3), pos_ids=c % 6 == 4))
    return out


def prefill_cases():
    """S in {2, 7, 64}: a first prompt (no past), a chunk after a past, a right-padded
    prompt (T < S for one entry), windows, softcap."""
    out = []
    for c, (S, N, KVN, H, T) in enumerate([
            (2, 9, 3, 64, (2, 2)), (2, 4, 1, 32, (40, 17)), (7, 8, 2, 80, (7, 5)),
            (7, 9, 3, 64, (150, 9)), (7, 1, 1, 128, (7,)), (64, 9, 3, 64, (64, 50)),
            (64, 4, 1, 16, (200, 64)), (64, 8, 2, 32, (64,)), (7, 32, 8, 128, (300, 120)),
            (2, 32, 8, 16, (3, 1))]):
        out.append(dict(
            seed=100 + c, B=len(T), S=S, N=N, KVN=KVN, H=H, T=T, extra=c % 4,
            in_place=c % 2, rotary=[None, "plain", "interleaved"][c % 3],
            window=[-1, 5, -1, 33][c % 4], softcap=[0.0, 20.0, 0.0][c % 3],
            packed=c % 4 == 2, smooth=int(c % 5 == 1), pos_ids=c % 3 == 1))
    return out


def _id(c):
    return (f"S{c['S']}-{c['N']}x{c['KVN']}x{c['H']}-T{'_'.join(map(str, c['T']))}"
            f"-{'ip' if c['in_place'] else 'pr'}-{c['rotary'] or 'norot'}"
            f"{'-w%d' % c['window'] if c['window'] > 0 else ''}"
            f"{'-cap' if c['softcap'] else ''}{'-packed' if c['packed'] else ''}"
            f"{'-smooth' if c['smooth'] else ''}{'-pids' if c['pos_ids'] else ''}")


CASES = decode_cases() + prefill_cases()


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
@pytest.mark.parametrize("path", PATHS)
def test_gqa_rows(path, case):
    check(path, *make_case(**case))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rot_dim", [16, 48])
def test_gqa_partial_rotary_and_odd_head(path, rot_dim):
    """rotary over the first r < H channels (the rest copied); H = 72 leaves a channel tail
    on every width but 8 and 4"""
    check(path, *make_case(7, B=2, S=3, N=4, KVN=2, H=72, T=(40, 3), rotary="plain",
                           rot_dim=rot_dim, in_place=0))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("where", ["query", "key", "value", "inf_query"])
def test_gqa_nan(path, where):
    """A NaN (or an infinite query value) makes what the reference makes NaN: the query
    head's row (key / inf: every head of the group; value: the channel of the group)."""
    attrs, ins = make_case(11, B=2, S=1, N=8, KVN=2, H=32, T=(50, 20), rotary=None,
                           window=16)
    q, pk, pv = ins[0], ins[3], ins[4]
    if where == "query":
        q[0, 0, 3 * 32 + 5] = np.nan                   # head 3 (group 0)
    elif where == "inf_query":
        q[1, 0, 6 * 32] = np.inf                       # head 6 (group 1): +-inf scores
    elif where == "key":
        pk[0, 1, 45, 7] = np.nan                       # group 1, a key in the window
    else:
        pv[1, 0, 10, 9] = np.nan                       # group 0, channel 9
    lib, row = tables.lib_and_row(path, _gqa, _gqa_emu)
    got = run_kernel(lib, row, attrs, ins)[0]
    with np.errstate(invalid="ignore"):               # the reference's inf - inf
        want = run_reference(attrs, ins)[0]
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
def test_gqa_bound_discriminates(path):
    """The bound is tight enough to see one key too many: a window one wider differs by
    more than it."""
    attrs, ins = make_case(5, B=1, S=1, N=9, KVN=3, H=64, T=(300,), window=64)
    lib, row = tables.lib_and_row(path, _gqa, _gqa_emu)
    got = run_kernel(lib, row, attrs, ins)[0]
    want, wk, wv = run_reference(dict(attrs, local_window_size=65), ins)
    assert np.abs(got - want).max() > bound(attrs, ins, wk, wv)


@pytest.mark.parametrize("path", PATHS[:1])
def test_gqa_refusals(path):
    """Bad seqlens_k / rotary positions: a ValueError, the in-place cache untouched."""
    attrs, ins = make_case(3, B=2, S=1, T=(10, 8), rotary="plain")
    lib, row = tables.lib_and_row(path, _gqa, _gqa_emu)
    for bad in (np.array([9, 0], np.int32), np.array([3, -1], np.int32)):
        ins2 = list(ins)
        ins2[5] = bad if bad[1] < 0 else np.array([ins[3].shape[2], 3], np.int32)
        before = ins2[3].copy()
        with pytest.raises(ValueError):
            run_kernel(lib, row, attrs, ins2)
        np.testing.assert_array_equal(ins2[3], before)
    ins2 = list(ins)
    ins2[7], ins2[8] = ins[7][:5], ins[8][:5]          # positions 9, 7 past the caches
    with pytest.raises(ValueError, match="rotary"):
        run_kernel(lib, row, attrs, ins2)
