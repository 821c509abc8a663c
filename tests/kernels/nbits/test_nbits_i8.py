"""MatMulNBits' int8-activation rows (_nbits_q8.h: every row this CPU runs, and the SIMD
bodies again on SIMDe) against a NumPy model of the same arithmetic, bit for bit, and
against a float64 oracle of the float product within the quantization bound of A.

The model (_model): per row of A and block b of bs values of k (K zero-padded),
scale_a = float32(max |a| / 127), q = rint(clip(a / scale_a, -127, 127)) (a block with a
NaN or an infinity: scale_a NaN, q 0; max 0 or scale_a 0: q 0), sum_q = sum q; per output
t_b = sum_k code q - zp sum_q (exact integers), then in float32, blocks in order after the
bias: y = y + t_b * (scale_w * scale_a). Every row must give exactly these bits.

Bound against the float product Y = A W^T + bias (W = (code - zp) scale_w, float64):
the rows compute Yq = bias + sum_b scale_w scale_a t_b (A replaced by scale_a q) with
float32 roundings, so |y - Y| <= |Yq - Y| + |y - Yq|:
  |Yq - Y| <= sum_b sum_k |w_k| |scale_a q_k - a_k| <= sum_b (scale_a / 2)(1 + 1e-4) sum_k |w_k|
    (a / scale_a is within a few float32 ulps of the exact quotient, at most 127.x in
    magnitude; the rounding to the integer leaves at most 1/2 of a step),
  |y - Yq| <= gamma_{kb + 3} (|bias| + sum_b |scale_w scale_a t_b|), the float32 steps.
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
PATHS = tables.paths(_nbits.qrows(), _nbits_emu.qrows())     # every row of _nbits_q8.h
NATIVE = [r.name for r in _nbits.qrows()]
BLOCKS = (16, 32, 64, 128, 256)
F32MAX = float(np.finfo(np.float32).max)


def _lib(path):
    return tables.lib_and_row(path, _nbits, _nbits_emu)


def _codes(b, zp, N, K, bits, bs):
    """-> (codes int64 (N, kb, bs), zero points int64 (N, kb))."""
    kb = -(-K // bs)
    per = 8 // bits
    raw = np.asarray(b, np.uint8).reshape(N, -1)
    c = ((raw[:, :, None] >> (np.arange(per) * bits)) & ((1 << bits) - 1)).reshape(N, -1)
    c = c[:, :kb * bs].reshape(N, kb, bs).astype(np.int64)
    if zp is None:
        z = np.full((N, kb), 1 << (bits - 1), np.int64)
    elif zp.dtype == np.uint8:
        zr = zp.reshape(N, -1)
        z = ((zr[:, :, None] >> (np.arange(per) * bits)) & ((1 << bits) - 1)).reshape(N, -1)
        z = z[:, :kb].astype(np.int64)
    else:
        z = zp.reshape(N, kb).astype(np.int64)
    return c, z


def _quantize(a, K, bs):
    """A (M, K) float32 -> (q int64 (M, kb, bs), scale_a float32 (M, kb), sum_q (M, kb))."""
    kb = -(-K // bs)
    M = a.shape[0]
    ap = np.zeros((M, kb * bs), np.float32)
    ap[:, :K] = a
    ab = ap.reshape(M, kb, bs)
    with np.errstate(all="ignore"):
        mag = np.abs(ab)
        bad = ~np.all(mag <= np.float32(F32MAX), axis=2)
        s = (np.where(bad[:, :, None], np.float32(0), mag).max(axis=2) / np.float32(127)).astype(np.float32)
        s[bad] = np.nan
        ok = (s > 0)[:, :, None]
        v = (ab / np.where(ok, s[:, :, None], np.float32(1))).astype(np.float32)
        q = np.where(ok, np.rint(np.clip(v, -127, 127)), 0).astype(np.int64)
    return q, s, q.sum(axis=2)


def _model(a, b, sc, zp, bias, N, K, bits, bs):
    """The rows' arithmetic in NumPy: -> float32 (M, N)."""
    kb = -(-K // bs)
    q, s, sq = _quantize(a, K, bs)
    c, z = _codes(b, zp, N, K, bits, bs)
    acc = np.einsum("nbk,mbk->mnb", c, q, optimize=True)
    t = (acc - z[None] * sq[:, None, :]).astype(np.float32)      # exact: |t| < 2^24
    sw = np.asarray(sc, np.float32).reshape(N, kb)
    M = a.shape[0]
    y = np.zeros((M, N), np.float32) if bias is None else \
        np.broadcast_to(np.asarray(bias, np.float32), (M, N)).copy()
    with np.errstate(all="ignore"):
        for blk in range(kb):
            d = sw[None, :, blk] * s[:, blk, None]
            y = y + t[:, :, blk] * d
    return y


def _bound(a, b, sc, zp, bias, N, K, bits, bs):
    """-> (the float product Y float64, the bound of |y - Y| per output)."""
    kb = -(-K // bs)
    c, z = _codes(b, zp, N, K, bits, bs)
    w = ((c - z[:, :, None]) * np.asarray(sc, np.float64).reshape(N, kb, 1))
    _, s, _ = _quantize(a, K, bs)
    M = a.shape[0]
    ap = np.zeros((M, kb * bs))
    ap[:, :K] = a
    wf = w.reshape(N, -1)
    exact = ap @ wf.T
    absw = np.abs(w).sum(axis=2)                                 # (N, kb)
    s64 = s.astype(np.float64)
    quant = (0.5 + 1e-4) * (s64 @ absw.T)                        # (M, N)
    mag = np.abs(ap) @ np.abs(wf).T + 0.5 * (s64 @ absw.T)
    if bias is not None:
        exact = exact + bias
        mag = mag + np.abs(bias)
    n = kb + 3
    return exact, quant + (n * EPS / (1 - n * EPS)) * mag + 1e-37


def _case(rng, N, K, bits, bs, zp_kind, bias=True, scale=0.05):
    kb = -(-K // bs)
    b = rng.integers(0, 256, (N, kb, bs * bits // 8), dtype=np.uint8)
    sc = rng.uniform(0.1, 1.0, N * kb).astype(np.float32) * np.float32(scale)
    if zp_kind == "none":
        zp = None
    elif zp_kind == "u8":
        zp = rng.integers(0, 256, (N, -(-kb * bits // 8)), dtype=np.uint8)
    else:       # float zero points holding integers: the only float ones the rows take
        zp = rng.integers(0, 1 << bits, (N, kb)).astype(np.float32)
    bb = rng.standard_normal(N).astype(np.float32) if bias else None
    return b, sc, zp, bb


def _run(path, a, b, sc, zp, bias, N, K, bits, bs, threads=1):
    lib, row = _lib(path)
    g = lib.NBits(N, K, bits, bs, b, sc, zp, bias, row=row)
    assert g.int8
    y = np.full((a.shape[0], N), -7.0, np.float32)
    g.run(np.ascontiguousarray(a, np.float32), y, threads=threads)
    return y


def _same(y, want):
    assert np.array_equal(y, want, equal_nan=True), (
        int(np.sum(~((y == want) | (np.isnan(y) & np.isnan(want))))), y.shape)


KS = (32, 48, 576, 1000, 1536, 4160)
NS = (1, 7, 16, 960, 1537)
MS = (1, 2, 5, 16)
ZPS = ("none", "u8", "f32")


def _shape_cases():
    """Every (K, N) pair, with M, bits, block size, zero points and bias cycled over them."""
    out = []
    for i, (K, N) in enumerate(itertools.product(KS, NS)):
        out.append((MS[i % len(MS)], K, N, (4, 8, 2)[i % 3], BLOCKS[(i // 3) % len(BLOCKS)],
                    ZPS[(i // 2) % 3], i % 4 != 3))
    return out


SHAPES = _shape_cases()
_MODELS: dict = {}


def _inputs(case):
    """The case's inputs, the model's output and the bound (computed once per case)."""
    if case not in _MODELS:
        M, K, N, bits, bs, zp_kind, bias = case
        rng = np.random.default_rng(abs(hash(case)) % 2**32)
        b, sc, zp, bb = _case(rng, N, K, bits, bs, zp_kind, bias)
        a = rng.standard_normal((M, K)).astype(np.float32)
        _MODELS[case] = (a, b, sc, zp, bb, _model(a, b, sc, zp, bb, N, K, bits, bs),
                         _bound(a, b, sc, zp, bb, N, K, bits, bs))
    return _MODELS[case]


# emulated rows (SIMDe) take the shapes up to 3M multiply-adds; the native rows all
PATH_CASES = [pytest.param(path, case, id="{}-m{}k{}n{}b{}bs{}{}{}".format(
    path, *case[:5], case[5], "" if case[6] else "-nobias"))
    for case in SHAPES for path in PATHS
    if path in NATIVE or case[0] * case[1] * case[2] <= 3_000_000]


@pytest.mark.parametrize("path,case", PATH_CASES)
def test_shapes_bits_and_bound(path, case):
    """Bit for bit the model's output (so every row's and tier's), and within the
    quantization bound of the float product."""
    M, K, N, bits, bs, zp_kind, bias = case
    a, b, sc, zp, bb, want, (exact, bound) = _inputs(case)
    y = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    _same(y, want)
    err = np.abs(y - exact)
    assert np.all(err <= bound), float((err / bound).max())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", _nbits.BITS)
@pytest.mark.parametrize("bs", BLOCKS)
def test_blocks_and_zero_points(path, bits, bs):
    """Every block size and code width with each kind of zero point, K not a multiple of
    the block, N across a panel's edge, M across row tiles (8 rows: two AVX-512 tiles)."""
    rng = np.random.default_rng(bits * 1000 + bs)
    for zp_kind, M in zip(ZPS, (1, 9, 4)):
        K, N = 3 * bs + 9, 37
        b, sc, zp, bb = _case(rng, N, K, bits, bs, zp_kind)
        a = rng.standard_normal((M, K)).astype(np.float32)
        y = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
        _same(y, _model(a, b, sc, zp, bb, N, K, bits, bs))
        exact, bound = _bound(a, b, sc, zp, bb, N, K, bits, bs)
        assert np.all(np.abs(y - exact) <= bound)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", _nbits.BITS)
def test_extreme_codes_no_saturation(path, bits):
    """Top codes against q = +-127 everywhere (one sign per block): the u8 x s8 pair sums
    reach 2 * 255 * 127 at 8 bits, past s16 (an AVX2 row's vpmaddubsw would saturate
    there without its nibble split); zero points at both ends."""
    N, K, bs, top = 19, 256, 64, (1 << bits) - 1
    kb = K // bs
    rng = np.random.default_rng(bits)
    q = np.full((N, K), top, np.uint8)
    q[::2, ::3] = 0
    per = 8 // bits
    b = np.zeros((N, K // per), np.uint8)
    for j in range(per):
        b |= (q[:, j::per] << (bits * j)).astype(np.uint8)
    sc = np.full(N * kb, 1e-3, np.float32)
    a = np.ones((3, K), np.float32)
    a[1] = -1.0
    a[2, ::2] = -1.0
    for z in (None, np.zeros((N, kb), np.float32), np.full((N, kb), top, np.float32)):
        y = _run(path, a, b.reshape(N, kb, -1), sc, z, None, N, K, bits, bs)
        _same(y, _model(a, b.reshape(N, kb, -1), sc, z, None, N, K, bits, bs))
        exact, bound = _bound(a, b.reshape(N, kb, -1), sc, z, None, N, K, bits, bs)
        assert np.all(np.abs(y - exact) <= bound)
    del rng


@pytest.mark.parametrize("path", PATHS)
def test_zero_rows_and_magnitudes(path):
    """A row of zeros gives the bias exactly; rows scaled by 1e30, 1e-30 and 1e-41
    (subnormal: its blocks' scales underflow towards 0) and blocks of mixed magnitude
    stay bit for bit the model's and within the bound."""
    rng = np.random.default_rng(5)
    M, K, N, bits, bs = 7, 300, 40, 4, 32
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "u8")
    a = rng.standard_normal((M, K)).astype(np.float32)
    a[0] = 0.0
    a[1] *= np.float32(1e30)
    a[2] *= np.float32(1e-30)
    a[3] *= np.float32(1e-41)
    a[4, :64] *= np.float32(1e20)          # one block huge, the next ones ordinary
    a[5, 32:64] = 0.0                      # one block of zeros
    a[6, 5] = np.float32(3e38)             # near float32's max
    y = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    _same(y, _model(a, b, sc, zp, bb, N, K, bits, bs))
    assert np.array_equal(y[0], bb)
    assert np.all(np.isfinite(y))
    exact, bound = _bound(a, b, sc, zp, bb, N, K, bits, bs)
    assert np.all(np.abs(y - exact) <= bound)


@pytest.mark.parametrize("path", PATHS)
def test_nan_inf_rows(path):
    """A NaN or an infinity anywhere in a row of A (the last, padded block included) makes
    every output of that row NaN; the other rows are unchanged."""
    rng = np.random.default_rng(7)
    M, K, N, bits, bs = 5, 200, 40, 4, 32
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "u8")
    a = rng.standard_normal((M, K)).astype(np.float32)
    clean = a.copy()
    a[1, 17] = np.nan
    a[3, 199] = np.inf
    a[4, 0] = -np.inf
    y = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    _same(y, _model(a, b, sc, zp, bb, N, K, bits, bs))
    for m in (1, 3, 4):
        assert np.all(np.isnan(y[m]))
    ok = _model(clean, b, sc, zp, bb, N, K, bits, bs)
    for m in (0, 2):
        assert np.array_equal(y[m], ok[m])


@pytest.mark.parametrize("path", NATIVE[1:])
def test_threads_same_bits(path):
    """The panels split over threads: the same bits as one thread."""
    rng = np.random.default_rng(3)
    M, K, N, bits, bs = 3, 576, 960, 4, 32
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "none")
    a = rng.standard_normal((M, K)).astype(np.float32)
    y1 = _run(path, a, b, sc, zp, bb, N, K, bits, bs)
    y2 = _run(path, a, b, sc, zp, bb, N, K, bits, bs, threads=2)
    assert np.array_equal(y1, y2)


def test_packed_bytes_stay_low_bit():
    """4-bit weights stay 4 bits a weight in the int8 rows' layout too."""
    rng = np.random.default_rng(0)
    N, K, bs = 960, 576, 32
    b, sc, _, _ = _case(rng, N, K, 4, bs, "none")
    g = _nbits.NBits(N, K, 4, bs, b, sc, row=_nbits.qbest_row())
    assert g.codes.nbytes == N * K // 2
    assert g.packed_bytes == b.nbytes + sc.nbytes


def test_float_zero_points_must_be_integers():
    rng = np.random.default_rng(1)
    N, K, bs = 20, 64, 32
    b, sc, _, _ = _case(rng, N, K, 4, bs, "none")
    assert _nbits.i8_zero_points_ok(None)
    assert _nbits.i8_zero_points_ok(np.array([[3.0, 15.0]] * N, np.float32))
    assert not _nbits.i8_zero_points_ok(np.array([[3.5, 15.0]] * N, np.float32))
    assert not _nbits.i8_zero_points_ok(np.array([[-1.0, 15.0]] * N, np.float32))
    with pytest.raises(ValueError):
        _nbits.NBits(N, K, 4, bs, b, sc, np.full((N, 2), 7.25, np.float32),
                     row=_nbits.qbest_row())


def _node(K, N, bits, bs, has_zp, has_bias, level):
    ins = ["a", "b", "s", "zp" if has_zp else "", "", "bias" if has_bias else ""]
    return Node("MatMulNBits", ins, ["y"], {"K": K, "N": N, "bits": bits, "block_size": bs,
                                          "accuracy_level": level}, "mm0")


# the specs whose tier this CPU has (every row's body also runs emulated above)
I8_SPECS = [s.name for s in KERNELS["MatMulNBits"] if s.name.startswith("matmul_nbits_i8")
            and (not s.isa or isa.usable(s.isa))]


def test_every_row_has_specs():
    assert {"matmul_" + r.name for r in _nbits.QROWS} <= set(I8_SPECS)


@pytest.mark.parametrize("spec", I8_SPECS)
def test_specs(spec):
    """Each int8 spec: offered for accuracy_level 4 only, and float zero points only when
    they are integers; through prepare / run with leading dims of A, the model's bits."""
    from edgenn.kernels import isa
    s = next(k for k in KERNELS["MatMulNBits"] if k.name == spec)
    rng = np.random.default_rng(11)
    K, N, bits, bs = 100, 33, 4, 16
    b, sc, zp, bb = _case(rng, N, K, bits, bs, "u8")
    a = rng.standard_normal((2, 3, K)).astype(np.float32)
    infos = [TensorInfo("float32", a.shape), TensorInfo.of(b), TensorInfo.of(sc),
             TensorInfo.of(zp), None, TensorInfo.of(bb)]
    outs = [TensorInfo("float32", (2, 3, N))]
    for level in (0, 1, 2, 3):
        assert not matmul_nbits._i8_supports(_node(K, N, bits, bs, True, True, level),
                                             infos, outs)
    node = _node(K, N, bits, bs, True, True, 4)
    assert matmul_nbits._i8_supports(node, infos, outs)
    zf = rng.integers(0, 16, (N, -(-K // bs))).astype(np.float32)
    assert matmul_nbits._i8_supports(node, infos[:3] + [TensorInfo.of(zf)] + infos[4:], outs)
    zf[0, 0] += 0.5
    assert not matmul_nbits._i8_supports(node, infos[:3] + [TensorInfo.of(zf)] + infos[4:],
                                         outs)
    run = s.prepare(node, infos, outs)
    y = np.full((2, 3, N), np.nan, np.float32)
    run([a, b, sc, zp, None, bb], [y])
    _same(y.reshape(6, N), _model(a.reshape(6, K), b, sc, zp, bb, N, K, bits, bs))


def _ort(a, b, sc, zp, bias, N, K, bits, bs):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    names = ["A", "B", "scales", "zp" if zp is not None else "", "",
             "bias" if bias is not None else ""]
    while names[-1] == "":
        names.pop()
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(sc, "scales")]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=K, N=N,
                            bits=bits, block_size=bs, accuracy_level=4)
    M = a.shape[0]
    graph = helper.make_graph(
        [node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [M, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"A": a})[0]


@pytest.mark.parametrize("case", [(1, 576, 960, 4, 32, "none"), (5, 1000, 37, 4, 64, "u8"),
                                  (3, 576, 100, 8, 32, "u8"), (16, 256, 48, 4, 128, "none"),
                                  (2, 1536, 20, 8, 16, "none")],
                         ids=lambda c: "m{}k{}n{}b{}bs{}{}".format(*c))
def test_onnxruntime_level4_agrees(case):
    """onnxruntime's accuracy_level 4 MatMulNBits quantizes A too (its own rounding): each
    output is within the quantization bound of the float product, so the two differ by at
    most twice that bound; never compared for equality."""
    M, K, N, bits, bs, zp_kind = case
    rng = np.random.default_rng(M * K + N)
    b, sc, zp, bb = _case(rng, N, K, bits, bs, zp_kind)
    a = rng.standard_normal((M, K)).astype(np.float32)
    y = _run(NATIVE[-1], a, b, sc, zp, bb, N, K, bits, bs)
    want = _ort(a, b, sc, zp, bb, N, K, bits, bs)
    exact, bound = _bound(a, b, sc, zp, bb, N, K, bits, bs)
    assert np.all(np.abs(y - exact) <= bound)
    assert np.all(np.abs(want - y) <= 2 * bound), float((np.abs(want - y) / bound).max())
