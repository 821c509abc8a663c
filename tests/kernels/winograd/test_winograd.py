"""Winograd F(m, 3) (edgenn/kernels/winograd/winograd.py + _winograd.h): the transform matrices
against direct correlation, the C transforms (every row of their table, natively and through
the SIMDe twin) against the matrices, whole convs against the reference over edge geometries, and error growth with the
tile size on realistic magnitudes.

Tolerances come from the arithmetic, not from one CPU's runs (_tol): the probabilistic
forward-error bound of an n-term float32 sum (Higham & Mary 2019: |error| <~ sqrt(n) u
sum |terms|, u = 2^-24), n = C * 9 the reduction length, times the Winograd transforms'
error growth (the product of the infinity norms of B^T, G and A^T: 9, 190, 1252 for
F(2,3), F(4,3), F(6,3)); measured errors sit 10-80x below it (AVX2+FMA and scalar, on AMD
Zen 1 and Intel Xeon with AVX-512). On ReLU-like activations with He-scaled weights the
measured errors are ~5e-7, ~5e-6, ~1e-5."""
import itertools

import numpy as np
import pytest
from support import kernel_tables as tables

from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.kernels.gemm import _sgemm as sg
from edgenn.kernels.winograd import _winograd as cw
from edgenn.kernels.winograd import _winograd_emu as cw_emu
from edgenn.kernels.winograd import winograd as wg
from edgenn.oplist import load_all
from edgenn.registry import KERNELS, REFERENCE, TensorInfo

load_all()
U32 = 2.0 ** -24   # float32 unit roundoff
# the transforms' rows this CPU runs (_winograd.h's table: the portable one always), and
# for the transforms alone every SIMD row again through the SIMDe twin (NEON's on x86)
TRANSFORMS = [r.name for r in cw.rows()]
TRANSFORM_PATHS = tables.paths(cw.rows(), cw_emu.rows())


# where the alpha^2 GEMMs run: OpenBLAS ("") or each row of edgenn's packed sgemm table
# this CPU runs (_winograd_run.h; the rows' SIMDe twins are checked in tests/kernels/gemm/test_sgemm.py)
GEMMS = [""] + [r.name for r in sg.rows()]


@pytest.fixture(params=TRANSFORMS)
def transforms(request):
    return request.param


@pytest.fixture(params=TRANSFORM_PATHS)
def transform_path(request):
    return tables.lib_and_row(request.param, cw, cw_emu)


def _corr1d(d, g):
    return np.array([d[i:i + len(g)] @ g for i in range(len(d) - len(g) + 1)])


@pytest.mark.parametrize("m", [2, 4, 6])
def test_matrices_are_correlation(m):
    bt, g, at = wg.matrices(m)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), _corr1d(d, k), atol=1e-12)
        d2, k2 = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
        y = at @ ((g @ k2 @ g.T) * (bt @ d2 @ bt.T)) @ at.T
        want = np.array([[np.sum(d2[i:i + 3, j:j + 3] * k2) for j in range(m)] for i in range(m)])
        np.testing.assert_allclose(y, want, atol=1e-11)


def _tile_patches(x, m, ph, pw, th, tw):
    """x (N, C, H, W) -> patches (N, C, th, tw, alpha, alpha) float64, zero padded."""
    n, c, h, w = x.shape
    a = m + 2
    pad = np.zeros((n, c, th * m + 2, tw * m + 2))
    hh, ww = min(h, th * m + 2 - ph), min(w, tw * m + 2 - pw)
    pad[:, :, ph:ph + hh, pw:pw + ww] = x[:, :, :hh, :ww]
    out = np.empty((n, c, th, tw, a, a))
    for ty, tx in itertools.product(range(th), range(tw)):
        out[:, :, ty, tx] = pad[:, :, ty * m:ty * m + a, tx * m:tx * m + a]
    return out


@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("shape,pads,rows", [
    ((1, 3, 13, 17), (1, 1), None), ((2, 2, 7, 30), (0, 2), None), ((2, 5, 9, 9), (2, 0), (1, 3)),
    ((1, 1, 1, 1), (1, 1), None)])
def test_input_transform_matches_matrices(transform_path, m, shape, pads, rows):
    lib, row = transform_path
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    ph, pw = pads
    a = m + 2
    th, tw = -(-(h + 2 * ph - 2) // m), -(-(w + 2 * pw - 2) // m)
    twp = -(-tw // 8) * 8
    row0, nrows = rows or (0, n * th)
    v = np.full(a * a * c * nrows * tw, np.nan, np.float32)
    lib.input_transform(m, x, ph, pw, th, tw, twp, row0, nrows, v,
                        np.empty((nrows * m + 2) * a * twp, np.float32),
                        np.zeros(twp * m + a, np.float32), np.zeros(a * twp, np.float32), row)
    bt, _, _ = wg.matrices(m)
    p = _tile_patches(x, m, ph, pw, th, tw)                      # (N, C, th, tw, a, a)
    want = np.einsum("ik,nctukl,jl->ijcntu", bt, p, bt)          # (a, a, C, N, th, tw)
    want = want.reshape(a * a, c, n * th * tw)[:, :, row0 * tw:(row0 + nrows) * tw]
    got = v.reshape(a * a, c, nrows * tw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# the activations the output transform fuses: (name, p0, p1, NumPy's)
FUSED = [("", 0.0, 0.0, lambda v: v), ("Relu", 0.0, 0.0, lambda v: np.maximum(v, 0)),
         ("Clip", -0.5, 0.8, lambda v: np.clip(v, -0.5, 0.8)),
         ("HardSwish", 0.0, 0.0, lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
         ("HardSigmoid", 0.2, 0.5, lambda v: np.clip(0.2 * v + 0.5, 0, 1)),
         ("LeakyRelu", 0.1, 0.0, lambda v: np.where(v < 0, 0.1 * v, v))]


def test_every_fused_activation_is_tested():
    assert tuple(name for name, *_ in FUSED) == cw.ACTIVATIONS


@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("act,p0,p1,fn", FUSED, ids=[f[0] or "none" for f in FUSED])
def test_output_transform_matches_matrices(transform_path, m, act, p0, p1, fn):
    lib, row = transform_path
    rng = np.random.default_rng(2)
    n, k, oh, ow = 2, 3, 11, 19
    a = m + 2
    th, tw = -(-oh // m), -(-ow // m)
    twp = -(-tw // 8) * 8
    mm = rng.standard_normal((a * a, k, n * th * tw)).astype(np.float32)
    bias = rng.standard_normal(k).astype(np.float32)
    z = rng.standard_normal((n, k, oh, ow)).astype(np.float32)
    y = np.full((n, k, oh, ow), np.nan, np.float32)
    lib.output_transform(m, np.concatenate([mm.ravel(), np.zeros(8, np.float32)]), y, th, tw,
                         twp, 0, n * th, bias, z, cw.ACTIVATION_NAMES.index(act), p0, p1,
                         np.empty(m * a * twp, np.float32), np.empty(twp * m, np.float32), row)
    _, _, at = wg.matrices(m)
    t = mm.astype(np.float64).reshape(a, a, k, n, th, tw)
    full = np.einsum("ri,ijkntu,sj->nktrus", at, t, at).reshape(n, k, th * m, tw * m)
    want = fn(full[:, :, :oh, :ow] + bias[None, :, None, None] + z)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


ACTS = [("", []), ("Relu", []), ("Clip", [0.0, 6.0]), ("LeakyRelu", [0.1]),
        ("HardSigmoid", [0.2, 0.5]), ("HardSwish", []), ("SiLU", []), ("Sigmoid", []),
        ("Gelu", [])]


def _conv(n, c, h, w, k, pads, act="", params=(), residual=False, bias=True, seed=0,
          realistic=False, auto_pad="NOTSET"):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    if realistic:  # post-ReLU activations, He-scaled weights
        x, wt = np.maximum(x, 0), (wt * np.sqrt(2 / (9 * c))).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=list(pads), dilations=[1, 1],
                 group=1, auto_pad=auto_pad, activation=act, activation_params=list(params))
    inputs = [x, wt] + ([rng.standard_normal(k).astype(np.float32)] if bias else [])
    node = Node("Conv", ["x", "w", "b"][:len(inputs)], ["y"], attrs, "conv")
    ins = [TensorInfo.of(v) if i else TensorInfo(v.dtype.name, v.shape)
           for i, v in enumerate(inputs)]
    outs = infer_node(node, ins, fold=False)
    if residual:
        inputs.append(rng.standard_normal(outs[0].shape).astype(np.float32))
        node.inputs.append("z")
        ins.append(TensorInfo("float32", outs[0].shape))
    return node, inputs, ins, outs


def _growth(m: int) -> float:
    """The transforms' error growth: product of the infinity norms of B^T, G, A^T."""
    return float(np.prod([np.abs(t).sum(axis=1).max() for t in wg.matrices(m)]))


def _tol(m, node, inputs, ins, outs):
    """sqrt(n) u growth(m) * max(sum |terms|) / max |y| (activation 1.5-Lipschitz at most:
    HardSwish), n = C * 9: the bound _err's relative error is held to."""
    named = dict(zip(node.inputs, inputs))
    absolute = [np.abs(named[k]) for k in ("x", "w", "b") if k in named]
    plain = dict(node.attrs, activation="", activation_params=[])
    terms = REFERENCE["Conv"](plain, absolute)[0]
    if "z" in named:
        terms = terms + np.abs(named["z"])
    with np.errstate(over="ignore"):
        want = float(np.max(np.abs(REFERENCE["Conv"](node.attrs, inputs)[0])))
    n = ins[1].shape[1] * 9
    return 1.5 * np.sqrt(n) * U32 * _growth(m) * float(terms.max()) / max(want, 1e-6)


def _err(m, node, inputs, ins, outs, **kw):
    with np.errstate(over="ignore"):  # exp in Sigmoid/SiLU of large negative sums
        want = REFERENCE["Conv"](node.attrs, inputs)[0]
        got = np.full(outs[0].shape, np.nan, np.float32)
        wg._prepare(node, ins, outs, m, **kw)(inputs, [got])
    return float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-6)


@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("geom", [
    (1, 3, 17, 13, 8, [1, 1, 1, 1]), (2, 1, 11, 7, 5, [0, 0, 0, 0]),
    (1, 2, 2, 3, 3, [2, 2, 2, 2]), (2, 16, 23, 31, 9, [1, 1, 1, 1]),
    (1, 7, 1, 1, 3, [1, 1, 1, 1]), (1, 4, 8, 8, 4, [0, 1, 2, 0]),   # asymmetric pads
    (1, 96, 6, 6, 40, [1, 1, 1, 1]), (3, 8, 5, 27, 16, [1, 1, 1, 1])])
@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g or "blas")
def test_conv_matches_reference(transforms, m, geom, gemm):
    n, c, h, w, k, pads = geom
    for (act, params), residual in zip(ACTS, itertools.cycle((False, True))):
        args = _conv(n, c, h, w, k, pads, act, params, residual, bias=act != "Gelu")
        assert _err(m, *args, gemm_row=gemm, transform_row=transforms) <= _tol(m, *args), \
            (act, residual)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g or "blas")
def test_blocks_span_images(transforms, m, gemm):
    """Tiny blocks: one tile row each, and blocks that cross from one image to the next."""
    args = _conv(3, 5, 13, 9, 6, [1, 1, 1, 1], "Relu", residual=True)
    for block in (1, 3000, 7000):
        assert _err(m, *args, block_bytes=block, gemm_row=gemm,
                    transform_row=transforms) <= _tol(m, *args)


def test_auto_pad_same():
    args = _conv(1, 4, 10, 7, 5, [0, 0, 0, 0], auto_pad="SAME_UPPER")
    assert args[3][0].shape == (1, 5, 10, 7)
    assert _err(4, *args) <= _tol(4, *args)


def test_error_grows_with_tile_size():
    """Realistic magnitudes (post-ReLU inputs, He weights, 128 channels, ResNet-like): error
    rises F(2,3) < F(4,3) < F(6,3), and even F(6,3) stays well inside 1e-4."""
    args = _conv(1, 128, 28, 28, 64, [1, 1, 1, 1], realistic=True, seed=3)
    errs = {m: _err(m, *args) for m in (2, 4, 6)}
    assert errs[2] < errs[4] < errs[6] < 5e-5, errs
    assert errs[2] < 2e-6, errs


def test_registered_and_supports():
    names = [s.name for s in KERNELS["Conv"]]
    assert {"winograd_f23", "winograd_f43", "winograd_f43_6x16__avx2",
            "winograd_f23_12x32__avx512f"} <= set(names)
    spec = next(s for s in KERNELS["Conv"] if s.name == "winograd_f43")
    node, inputs, ins, outs = _conv(1, 4, 8, 8, 4, [1, 1, 1, 1])
    assert spec.supports(node, ins, outs)
    for key, value in [("strides", [2, 2]), ("dilations", [2, 2]), ("group", 2)]:
        bad = Node("Conv", node.inputs, node.outputs, dict(node.attrs, **{key: value}), "c")
        assert not spec.supports(bad, ins, outs)
    assert spec.cost(node, ins, outs) > 0


def test_cost_model():
    # the big early ResNet layers: Winograd clearly wins, F(4,3) best
    assert wg.winograd_cost_ratio(64, 64, 56, 56, 4) > 2
    assert wg.winograd_cost_ratio(64, 64, 56, 56, 4) > wg.winograd_cost_ratio(64, 64, 56, 56, 2)
    # few tiles: the skinny GEMMs make F(6,3) hopeless on 7x7; tiny convs are not worth it
    assert wg.winograd_cost_ratio(512, 512, 7, 7, 6) < 1
    assert wg.winograd_cost_ratio(3, 3, 8, 8, 4) < 1


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("block,hw", [(1, 15), (3000, 15), (1 << 30, 15), (1 << 30, 5)])
def test_threads_give_the_same_bits(m, block, hw):
    """The one-call conv (WinogradConv) on 2 and 3 OpenMP threads: blocks in parallel (one
    tile row each .. halves), or, with one block of few tiles (5x5), each block's products
    shared out; the same bits as one thread either way, within the reference's bound."""
    gemm = GEMMS[-1]
    args = _conv(2 if hw > 5 else 1, 6, hw, hw - 4, 7, [1, 1, 1, 1], "Relu", residual=True)
    node, inputs, ins, outs = args
    got = {}
    for threads in (1, 2, 3):
        y = np.full(outs[0].shape, np.nan, np.float32)
        wg._prepare(node, ins, outs, m, block_bytes=block, gemm_row=gemm,
                    threads=threads)(inputs, [y])
        got[threads] = y
    assert np.array_equal(got[1], got[2]) and np.array_equal(got[1], got[3])
    assert _err(m, *args, block_bytes=block, gemm_row=gemm, threads=2) <= _tol(m, *args)


def test_one_call_conv_refuses_bad_buffers():
    from edgenn.kernels.gemm import _sgemm
    u = wg.weight_transform(np.ones((4, 3, 3, 3), np.float32), 2)
    conv = cw.WinogradConv(2, (1, 3, 8, 8), (1, 4, 8, 8), 1, 1, 4, _sgemm.pack_a_batch(u),
                           _sgemm.packed_a_size(4, 3), None, 0, 0.0, 0.0, 0, 4096, 1)
    kept, work = np.zeros(conv.kept_floats, np.float32), np.zeros(conv.work_floats, np.float32)
    x, y = np.ones((1, 3, 8, 8), np.float32), np.empty((1, 4, 8, 8), np.float32)
    conv.run(x, y, None, kept, work)
    assert np.allclose(y[0, :, 1:-1, 1:-1], 27)      # all-ones 3x3x3 windows inside
    with pytest.raises(ValueError, match="C-contiguous"):
        conv.run(x[:, :, :, :7], y, None, kept, work)
    with pytest.raises(ValueError, match="C-contiguous"):
        conv.run(x, y.astype(np.float64), None, kept, work)
    with pytest.raises(ValueError, match="too small"):
        conv.run(x, y, None, kept, work[:-1])
    with pytest.raises(ValueError, match="threads"):
        cw.WinogradConv(2, (1, 3, 8, 8), (1, 4, 8, 8), 1, 1, 4, _sgemm.pack_a_batch(u),
                        _sgemm.packed_a_size(4, 3), None, 0, 0.0, 0.0, 0, 4096, 0)
    for bad_row in (-1, len(_sgemm.ROWS)):      # the GEMMs' row: an index into the table
        with pytest.raises(ValueError, match="not a row"):
            cw.WinogradConv(2, (1, 3, 8, 8), (1, 4, 8, 8), 1, 1, 4, _sgemm.pack_a_batch(u),
                            _sgemm.packed_a_size(4, 3), None, 0, 0.0, 0.0, bad_row, 4096, 1)


def test_read_only_weights_and_bias():
    """A memory-mapped .enn hands the kernels read-only arrays."""
    node, inputs, ins, outs = _conv(1, 4, 9, 9, 5, [1, 1, 1, 1], "Relu")
    for info in ins[1:]:
        info.value = info.value.copy()
        info.value.flags.writeable = False
    for gemm in GEMMS:
        assert _err(4, node, inputs, ins, outs, gemm_row=gemm) <= _tol(4, node, inputs, ins, outs)
