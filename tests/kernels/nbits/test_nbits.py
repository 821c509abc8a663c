"""MatMulNBits' fast kernels (_nbits.h: every row this CPU runs, and the AVX2 / AVX-512F /
NEON bodies again on SIMDe) against a float64 oracle of the dequantized weights.

Bound, from the arithmetic of the rows: per block b of bs values of k and per output, the
row sums t_b = sum_k a_k q_k and sum_k a_k in float32 (within gamma_bs of the exact sums,
Higham (3.5), whatever the order of the partial sums), folds t_b - zp sum_k a_k (one FMA)
and adds t_b * s to the output (one FMA per block, kb blocks after the bias). So
|y - exact| <= gamma_n (|bias| + sum_k |a_k| (|q_k| + |zp_b|) |s_b|), n = bs + 2 kb + 4,
gamma_n = n eps / (1 - n eps). The magnitude counts |q| + |zp| rather than |q - zp|: the
fold's cancellation is in the bound, not hidden by a tuned tolerance.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from support import kernel_tables as tables

from edgenn.graph.ir import Node
from edgenn.kernels.nbits import _nbits, _nbits_emu, matmul_nbits
from edgenn.registry import KERNELS, TensorInfo
from edgenn.kernels import isa

EPS = float(np.finfo(np.float32).eps)
PATHS = tables.paths(_nbits.rows(), _nbits_emu.rows())     # every row of _nbits.h
NATIVE = [r.name for r in _nbits.rows()]
BLOCKS = (16, 32, 64, 128, 256)

try:    # the reference's dequantization, where it has landed (kernels/reference/nbits.py)
    from edgenn.kernels.reference.nbits import dequantize_nbits as _ref_dequantize
except ImportError:
    _ref_dequantize = None


def _lib(path):
    return tables.lib_and_row(path, _nbits, _nbits_emu)


def _codes_and_zp(b, zp, N, K, bits, bs):
    """-> (codes float64 (N, kb, bs), zero points float64 (N, kb)): the oracle's own
    unpacking of MatMulNBits' layout (low bits first)."""
    kb = -(-K // bs)
    per = 8 // bits
    raw = np.asarray(b, np.uint8).reshape(N, -1)
    q = ((raw[:, :, None] >> (np.arange(per) * bits)) & ((1 << bits) - 1)).reshape(N, -1)
    q = q[:, :kb * bs].reshape(N, kb, bs).astype(np.float64)
    if zp is None:
        z = np.full((N, kb), 2.0 ** (bits - 1))
    elif zp.dtype == np.uint8:
        zr = zp.reshape(N, -1)
        z = ((zr[:, :, None] >> (np.arange(per) * bits)) & ((1 << bits) - 1)).reshape(N, -1)
        z = z[:, :kb].astype(np.float64)
    else:
        z = zp.reshape(N, kb).astype(np.float64)
    return q, z


def _oracle(a, b, scales, zp, bias, N, K, bits, bs):
    """-> (exact Y float64, bound per output)."""
    kb = -(-K // bs)
    q, z = _codes_and_zp(b, zp, N, K, bits, bs)
    s = np.asarray(scales, np.float64).reshape(N, kb, 1)
    if _ref_dequantize is not None:
        w = np.asarray(_ref_dequantize(b, scales, zp, None, K, N, bits, bs), np.float64)
    else:
        w = ((q - z[:, :, None]) * s).reshape(N, -1)[:, :K]
    mag = ((np.abs(q) + np.abs(z)[:, :, None]) * np.abs(s)).reshape(N, -1)[:, :K]
    a64 = a.astype(np.float64)
    exact = a64 @ w.T
    big = np.abs(a64) @ mag.T
    if bias is not None:
        exact = exact + bias
        big = big + np.abs(bias)
    n = bs + 2 * kb + 4
    # + 2 eps of the magnitude: the reference's float32 W where it dequantizes
    return exact, (n * EPS / (1 - n * EPS) + 2 * EPS) * big + 1e-30


def _case(rng, N, K, bits, bs, zp_kind, bias=True, scale=0.05):
    kb = -(-K // bs)
    b = rng.integers(0, 256, (N, kb, bs * bits // 8), dtype=np.uint8)
    sc = rng.uniform(0.1, 1.0, N * kb).astype(np.float32) * np.float32(scale)
    if zp_kind == "none":
        zp = None
    elif zp_kind == "u8":
        zp = rng.integers(0, 256, (N, -(-kb * bits // 8)), dtype=np.uint8)
    else:
        zp = rng.uniform(0, 2 ** bits - 1, (N, kb)).astype(np.float32)
    bs_ = rng.standard_normal(N).astype(np.float32) if bias else None
    return b, sc, zp, bs_


def _run(path, a, b, sc, zp, bias, N, K, bits, bs, threads=1):
    lib, row = _lib(path)
    g = lib.NBits(N, K, bits, bs, b, sc, zp, bias, row=row)
    y = np.full((a.shape[0], N), np.nan, np.float32)
    g.run(np.ascontiguousarray(a, np.float32), y, threads=threads)
    return y


def _check(path, rng, M, K, N, bits, bs, zp_kind, bias=True):
    b, sc, zp, bb = _case(rng, N, K, bits, bs, zp_kind, bias)
    a = rng.standard_normal((M, K)).astype(np.float32)
    y = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    exact, bound = _oracle(a, b, sc, zp, bb, N, K, bits, bs)
    assert np.all(np.isfinite(y))
    err = np.abs(y - exact)
    assert np.all(err <= bound), (float(err.max()), float(bound[np.unravel_index(
        np.argmax(err - bound), err.shape)]))


KS = (16, 32, 48, 576, 1000, 1536, 4160)
NS = (1, 7, 8, 15, 16, 960, 1537)
MS = (1, 2, 3, 5, 16, 64)
ZPS = ("none", "u8", "f32")


def _shape_cases():
    """Every (K, N) pair, with M, bits, block size, zero points and bias cycled over them
    (so each value of each meets many of the others)."""
    out = []
    for i, (K, N) in enumerate(itertools.product(KS, NS)):
        bits = (4, 8, 2)[i % 3]
        bs = BLOCKS[(i // 3) % len(BLOCKS)]
        out.append((MS[i % len(MS)], K, N, bits, bs, ZPS[(i // 2) % 3], i % 4 != 3))
    return out


SHAPES = _shape_cases()


# emulated rows (SIMDe) take the shapes up to 3M multiply-adds; the native rows all
PATH_CASES = [pytest.param(path, case, id="{}-m{}k{}n{}b{}bs{}{}{}".format(
    path, *case[:5], case[5], "" if case[6] else "-nobias"))
    for case in SHAPES for path in PATHS
    if path in NATIVE or case[0] * case[1] * case[2] <= 3_000_000]


@pytest.mark.parametrize("path,case", PATH_CASES)
def test_shapes(path, case):
    M, K, N, bits, bs, zp_kind, bias = case
    _check(path, np.random.default_rng(hash(case) % 2**32), M, K, N, bits, bs, zp_kind, bias)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", _nbits.BITS)
@pytest.mark.parametrize("bs", BLOCKS)
def test_blocks_and_zero_points(path, bits, bs):
    """Every block size and code width with each kind of zero point, K not a multiple of
    the block (the last block padded), N across a panel's edge, M across row tiles."""
    rng = np.random.default_rng(bits * 1000 + bs)
    for zp_kind, M in zip(ZPS, (1, 7, 4)):
        _check(path, rng, M, 3 * bs + 9, 37, bits, bs, zp_kind)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", _nbits.BITS)
def test_extreme_codes(path, bits):
    """Codes 0 and 2^bits - 1 only, zero points at both ends too, a large scale (the
    outputs near 1e33): the decode's top code (no mask on its shift) and the fold."""
    rng = np.random.default_rng(bits)
    N, K, bs, top = 19, 96, 32, (1 << bits) - 1
    kb = K // bs
    q = rng.choice([0, top], (N, kb * bs)).astype(np.uint8)
    per = 8 // bits
    b = np.zeros((N, kb * bs // per), np.uint8)
    for j in range(per):
        b |= (q[:, j::per] << (bits * j)).astype(np.uint8)
    sc = np.full(N * kb, 1e30, np.float32)
    sc[::3] = 1e-30
    zq = rng.choice([0, top], (N, kb)).astype(np.uint8)
    zp = np.zeros((N, -(-kb * bits // 8)), np.uint8)
    for c in range(kb):
        zp[:, c // per] |= (zq[:, c] << (bits * (c % per))).astype(np.uint8)
    a = rng.standard_normal((3, K)).astype(np.float32)
    for z in (None, zp, zq.astype(np.float32)):
        y = _run(path, a, b.reshape(N, kb, -1), sc, z, None, N, K, bits, bs)
        exact, bound = _oracle(a, b.reshape(N, kb, -1), sc, z, None, N, K, bits, bs)
        assert np.all(np.isfinite(y)) and np.all(np.abs(y - exact) <= bound)


@pytest.mark.parametrize("path", PATHS)
def test_nan_inf_propagate(path):
    """A NaN or an inf in a row of A makes that row's outputs non-finite (as A @ W^T does
    wherever W's column is not all zero); the other rows are unchanged."""
    rng = np.random.default_rng(7)
    M, K, N, bits, bs = 5, 200, 40, 4, 32
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "u8")
    a = rng.standard_normal((M, K)).astype(np.float32)
    a[1, 17] = np.nan
    a[3, 199] = np.inf          # in the last, padded block
    a[4, 0] = -np.inf
    y = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    exact, bound = _oracle(np.where(np.isfinite(a), a, 0), b, sc, zp, bb, N, K, bits, bs)
    for m in (1, 3, 4):
        assert not np.any(np.isfinite(y[m]))
    for m in (0, 2):
        assert np.all(np.abs(y[m] - exact[m]) <= bound[m])


@pytest.mark.parametrize("path", NATIVE[1:])
def test_threads_same_bits(path):
    """The panels split over threads: every output's sums are the same as one thread's."""
    rng = np.random.default_rng(3)
    M, K, N, bits, bs = 3, 576, 960, 4, 32
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "none")
    a = rng.standard_normal((M, K)).astype(np.float32)
    y1 = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    y2 = _run(path, a, b, sc, zp, bb, N, K, bits, bs, threads=2)
    assert np.array_equal(y1, y2)


def test_packed_bytes_stay_low_bit():
    """4-bit weights stay 4 bits a weight once packed (plus the block's scale)."""
    rng = np.random.default_rng(0)
    N, K, bs = 960, 576, 32
    b, sc, zp, _ = _case(rng, N, K, 4, bs, "none")
    g = _nbits.NBits(N, K, 4, bs, b, sc)
    assert g.codes.nbytes == N * K // 2
    assert g.packed_bytes == b.nbytes + sc.nbytes


def _node(K, N, bits, bs, has_zp, has_bias, level=0):
    ins = ["a", "b", "s", "zp" if has_zp else "", "", "bias" if has_bias else ""]
    return Node("MatMulNBits", ins, ["y"], {"K": K, "N": N, "bits": bits, "block_size": bs,
                                          "accuracy_level": level}, "mm0")


# the specs whose tier this CPU has (every row's body also runs emulated in test_shapes)
@pytest.mark.parametrize("spec", [s.name for s in KERNELS["MatMulNBits"]
                                  if s.name.startswith("matmul_nbits_f32") and
                                  (not s.isa or isa.usable(s.isa))])
def test_specs(spec):
    """Each registered spec through prepare / run: A with leading dims, every row's spec
    capable; g_idx and a float16 A left to the reference."""
    from edgenn.kernels import isa
    s = next(k for k in KERNELS["MatMulNBits"] if k.name == spec)
    rng = np.random.default_rng(11)
    K, N, bits, bs = 100, 33, 4, 16
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "u8")
    a = rng.standard_normal((2, 3, K)).astype(np.float32)
    node = _node(K, N, bits, bs, True, True)
    infos = [TensorInfo.of(a), TensorInfo.of(b), TensorInfo.of(sc), TensorInfo.of(zp), None,
             TensorInfo.of(bb)]
    infos[0] = TensorInfo("float32", a.shape)
    outs = [TensorInfo("float32", (2, 3, N))]
    assert matmul_nbits._supports(node, infos, outs)
    gi = infos[:4] + [TensorInfo("int32", (K,), np.arange(K, dtype=np.int32) // bs)] + infos[5:]
    assert not matmul_nbits._supports(node, gi, outs)
    assert not matmul_nbits._supports(node, [TensorInfo("float16", a.shape)] + infos[1:], outs)
    run = (s.prepare)(node, infos, outs)
    y = np.full((2, 3, N), np.nan, np.float32)
    run([a, b, sc, zp, None, bb], [y])
    exact, bound = _oracle(a.reshape(6, K), b, sc, zp, bb, N, K, bits, bs)
    assert np.all(np.abs(y.reshape(6, N) - exact) <= bound)
    try:
        from edgenn.registry import REFERENCE
        ref = REFERENCE.get("MatMulNBits")
    except ImportError:
        ref = None
    if ref is not None:     # the reference kernel, where it has landed
        want = np.asarray(ref(node.attrs, [a, b, sc, zp, None, bb])[0], np.float64)
        assert np.all(np.abs(y - want) <= bound.reshape(2, 3, N) * 2)
