"""The C row ops (edgenn/kernels/rowops/_rowops): every row of their table this CPU runs
(the portable one, AVX2, AVX-512's attention softmax and RMS norm) against the reference,
plus what test_kernels_fast does not check: LayerNorm's mean / inv-std outputs, the RMS
norm's float32 error bound over many row lengths, NaN and infinity handling, the C kernels
being priced ahead of the Numba ones."""
import numpy as np
import pytest

from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.kernels.rowops import _rowops, _rowops_emu, rows
from edgenn.oplist import load_all
from edgenn.registry import KERNELS, REFERENCE, TensorInfo

from support import kernel_tables as tables  # noqa: E402

load_all()
# the table's rows this CPU runs, and every SIMD row again on SIMDe (the NEON one included)
BUILDS = tables.paths(_rowops.rows(), _rowops_emu.rows())


def _lib(build):
    """-> (the module that builds the path's row, the row's name)."""
    return tables.lib_and_row(build, _rowops, _rowops_emu)
f32 = np.float32


def _close(got, want, tol=1e-5):
    scale = max(float(np.max(np.abs(want))), 1e-6)
    assert float(np.max(np.abs(got.astype(np.float64) - want))) / scale <= tol


@pytest.mark.parametrize("build", BUILDS)
def test_softmax_rows(build):
    lib, row = _lib(build)
    rng = np.random.default_rng(0)
    for shape in [(3, 1), (4, 7), (2, 8), (5, 33), (1, 6625)]:
        x = (rng.standard_normal(shape) * 10).astype(f32)
        y = np.empty_like(x)
        lib.softmax_rows(x, y, row)
        want = REFERENCE["Softmax"]({"axis": -1}, [x])[0]
        _close(y, want)
        lib.softmax_rows(x, x, row)  # in place
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("build", BUILDS)
def test_logsoftmax_rows(build):
    """Against float64: log(s), s = sum exp(x - max) >= 1, is off by the relative error of
    s ((C + 4) eps: the sum and exp) plus one rounding of each of x - max - log s."""
    lib, row = _lib(build)
    rng = np.random.default_rng(1)
    eps = float(np.finfo(f32).eps)
    for shape in [(3, 1), (4, 7), (2, 8), (5, 33), (80, 97), (1, 6625)]:
        for scale in (0.1, 10, 1000):
            x = (rng.standard_normal(shape) * scale).astype(f32)
            y = np.empty_like(x)
            lib.softmax_rows(x, y, row, log=True)
            x64 = x.astype(np.float64)
            m = x64.max(-1, keepdims=True)
            logs = np.log(np.exp(x64 - m).sum(-1, keepdims=True))
            want = x64 - m - logs
            bound = (shape[1] + 4) * eps + 3 * eps * (np.abs(x64) + np.abs(m) + logs)
            assert np.all(np.abs(y - want) <= bound)


@pytest.mark.parametrize("build", BUILDS)
def test_logsoftmax_special_rows(build):
    lib, row = _lib(build)
    x = np.zeros((4, 11), f32)
    x[0, 5], x[1, 9], x[2, :], x[3, 2] = np.nan, np.inf, -np.inf, -np.inf
    y = np.empty_like(x)
    lib.softmax_rows(x, y, row, log=True)
    want = REFERENCE["LogSoftmax"]({"axis": -1}, [x])[0]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    assert y[3, 2] == -np.inf and abs(np.exp(y[3]).sum() - 1) < 1e-6


@pytest.mark.parametrize("build", BUILDS)
def test_softmax_special_rows(build):
    lib, row = _lib(build)
    x = np.zeros((4, 11), f32)
    x[0, 5] = np.nan
    x[1, 9] = np.inf
    x[2, :] = -np.inf
    x[3, 2] = -np.inf
    y = np.empty_like(x)
    lib.softmax_rows(x, y, row)
    assert np.isnan(y[:3]).all()
    assert y[3, 2] < 1e-30 and abs(y[3].sum() - 1) < 1e-6




@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("kind", ["none", "add", "bool"])
@pytest.mark.parametrize("mrows", [1, 6])
def test_scale_mask_softmax(build, kind, mrows):
    lib, row = _lib(build)
    rng = np.random.default_rng(1)
    for T in (1, 8, 13, 16, 17, 130):
        s = rng.standard_normal((6, T)).astype(f32)
        if kind == "add":
            m = (rng.standard_normal((mrows, T)) * 4).astype(f32)
            z = s * f32(0.3) + np.resize(m, s.shape)
            lib.scale_mask_softmax(s, 0.3, m, row)
        elif kind == "bool":
            m = rng.random((mrows, T)) < 0.6
            m[:, -1] = True
            z = np.where(np.resize(m, s.shape), s * f32(0.3), -np.inf)
            lib.scale_bool_mask_softmax(s, 0.3, m.view(np.uint8), row)
        else:
            z = s * f32(0.3)
            lib.scale_mask_softmax(s, 0.3, None, row)
        e = np.exp(z - z.max(-1, keepdims=True))
        _close(s, e / e.sum(-1, keepdims=True))


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("T", [7, 16, 130])
def test_masked_softmax_has_no_subnormals(build, T):
    """A padding mask of -3.4e38 (torch's finfo.min, as exported BERTs carry) gives exactly
    0 at masked positions, as the reference, never a subnormal (which would slow the next
    GEMM ~100x on Intel cores); the kept positions still sum to 1."""
    lib, row = _lib(build)
    rng = np.random.default_rng(2)
    s = (rng.standard_normal((5, T)) * 30).astype(f32)
    m = np.zeros((1, T), f32)
    m[0, T // 2:] = np.finfo(np.float32).min
    want = REFERENCE["Softmax"]({"axis": -1}, [s * f32(0.2) + m])[0]
    lib.scale_mask_softmax(s, 0.2, m, row)
    tiny = (s != 0) & (np.abs(s) < np.finfo(np.float32).tiny)
    assert not tiny.any() and (s[:, T // 2:] == 0).all()
    _close(s, want)
    assert np.allclose(s.sum(-1), 1, atol=1e-6)


def _smx(lib, scale, kind, build):
    """rows.c_smx on the module `lib`."""
    if kind == 2:
        return lambda s, m: lib.scale_bool_mask_softmax(s, scale, m.view(np.uint8), build)
    return lambda s, m: lib.scale_mask_softmax(s, scale, m, build)


@pytest.mark.parametrize("build", BUILDS)
def test_attention_portable(build):
    """The whole FusedAttention kernel on one build (looped heads and stacked heads)."""
    lib, row = _lib(build)
    rng = np.random.default_rng(2)
    for ql, s_, t in [((1, 12), 128, 128), ((2, 3), 7, 9)]:
        q = rng.standard_normal(ql + (s_, 16)).astype(f32)
        kt = rng.standard_normal(ql + (16, t)).astype(f32)
        v = rng.standard_normal(ql + (t, 8)).astype(f32)
        for mask, kind in [(None, "add"), (rng.standard_normal((1, 1, t)).astype(f32), "add"),
                           (rng.random(ql + (s_, t)) < 0.7, "bool")]:
            if kind == "bool":
                mask[..., 0] = True
            inputs = [q, kt, v] + ([] if mask is None else [mask])
            node = Node("FusedAttention", ["q", "k", "v", "m"][:len(inputs)], ["y"],
                        {"mask_kind": kind}, "attn")
            ins = [TensorInfo(x.dtype.name, x.shape) for x in inputs]
            outs = infer_node(node, ins, fold=False)
            y = np.empty(outs[0].shape, f32)
            rows.attention_plan(node, ins, outs, lambda sc, k, t: _smx(lib, sc, k, row))(
                inputs, [y])
            _close(y, REFERENCE["FusedAttention"](node.attrs, inputs)[0])


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_layernorm_statistics(build, with_bias):
    lib, row = _lib(build)
    rng = np.random.default_rng(3)
    for shape in [(5, 384), (3, 7), (2, 1), (4, 16)]:
        x = (rng.standard_normal(shape) * 3 + 5).astype(f32)
        scale = rng.standard_normal(shape[-1]).astype(f32)
        bias = rng.standard_normal(shape[-1]).astype(f32) if with_bias else None
        y, mean, inv = np.empty_like(x), np.empty(shape[0], f32), np.empty(shape[0], f32)
        lib.layernorm_rows(x, scale, bias, 1e-5, y, mean, inv, row)
        ref = REFERENCE["LayerNormalization"]({"axis": -1, "epsilon": 1e-5},
                                              [x, scale] + ([bias] if with_bias else []))
        _close(y, ref[0])
        _close(mean, ref[1].reshape(-1))
        _close(inv, ref[2].reshape(-1))
        y2 = np.empty_like(x)
        lib.layernorm_rows(x, scale, bias, 1e-5, y2, None, None, row)
        np.testing.assert_array_equal(y, y2)


def test_layernorm_kernel_writes_statistics():
    """The registered kernel fills the optional Mean / InvStdDev outputs."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 10)).astype(f32)
    scale, bias = rng.standard_normal(10).astype(f32), rng.standard_normal(10).astype(f32)
    node = Node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], {"axis": -1}, "ln")
    ins = [TensorInfo(a.dtype.name, a.shape) for a in (x, scale, bias)]
    outs = infer_node(node, ins, fold=False)
    got = [np.full(o.shape, np.nan, f32) for o in outs]
    for spec in KERNELS["LayerNormalization"]:
        spec.prepare(node, ins, outs)([x, scale, bias], got)
        for g, w in zip(got, REFERENCE["LayerNormalization"](node.attrs, [x, scale, bias])):
            assert g.shape == w.shape
            _close(g, w)


RMS_LENGTHS = (1, 3, 7, 8, 9, 16, 63, 64, 65, 576, 1536, 4095)


def _rms64(x, scale, eps):
    """The RMS norm of float32 rows, computed exactly enough in float64."""
    x64 = x.astype(np.float64)
    ms = (x64 * x64).mean(-1, keepdims=True)
    return x64 / np.sqrt(ms + float(f32(eps))) * scale.astype(np.float64)


def _rms_bound(C):
    """_rowops.h's bound on y's relative error, at its worst over the rows: the longest
    accumulator chain of the narrowest row (4 lanes), the lane sums and tail of the
    widest (16): ((C / 16 + 38) / 2 + 6) u, u = 2^-24."""
    return (C / 32 + 25) * 2.0 ** -24


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("C", RMS_LENGTHS)
def test_rmsnorm_rows(build, C):
    """Every row length around the 4 / 8 / 16 lanes and their 4 accumulators, magnitudes
    whose squares stay normal floats (1, 1e15, 1e-15: eps dominates, or alone with eps 0),
    each element within the float32 bound of the float64 result; y may be x."""
    lib, row = _lib(build)
    rng = np.random.default_rng(C)
    scale = rng.standard_normal(C).astype(f32)
    for mag, eps in [(1.0, 1e-5), (3.0, 1e-6), (1e15, 1e-5), (1e-15, 1e-5), (1e-15, 0.0)]:
        x = (rng.standard_normal((3, C)) * mag).astype(f32)
        y = np.empty_like(x)
        lib.rmsnorm_rows(x, scale, eps, y, row)
        want = _rms64(x, scale, eps)
        err = np.abs(y - want)
        assert np.all(err <= _rms_bound(C) * np.abs(want)), (mag, eps, float(err.max()))
        lib.rmsnorm_rows(x, scale, eps, x, row)    # in place
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("build", BUILDS)
def test_rmsnorm_special_rows(build):
    """Zeros give exactly 0 (eps alone under the root); a NaN makes its row NaN and no
    other; an inf makes its row 0 and NaN at the inf, as the float32 formula (the
    reference); a row whose squares overflow float32 gives 0, as the reference too."""
    lib, row = _lib(build)
    rng = np.random.default_rng(7)
    for C in (1, 7, 16, 65, 576):
        scale = rng.standard_normal(C).astype(f32)
        x = rng.standard_normal((5, C)).astype(f32)
        x[0] = 0
        x[1, C // 2] = np.nan
        x[2, C - 1] = np.inf
        x[3] *= f32(1e30)
        y = np.empty_like(x)
        lib.rmsnorm_rows(x, scale, 1e-5, y, row)
        with np.errstate(over="ignore", invalid="ignore"):   # the inf and overflow rows
            want = REFERENCE["RMSNormalization"]({"axis": -1, "epsilon": 1e-5}, [x, scale])[0]
        assert np.all(y[0] == 0) and np.isnan(y[1]).all()
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
        np.testing.assert_array_equal(y[2:4], want[2:4])
        assert np.all(np.abs(y[4] - _rms64(x[4:], scale, 1e-5)) <= _rms_bound(C)
                      * np.abs(_rms64(x[4:], scale, 1e-5)))


@pytest.mark.parametrize("build", BUILDS)
def test_unary(build):
    lib, row = _lib(build)
    from scipy.special import erf
    x = np.concatenate([np.linspace(-12, 12, 2001), [-1e4, -90, 90, 1e4, 0, -0.0]]).astype(f32)
    xd = x.astype(np.float64)
    for fn, want, tol in [(lib.erf, erf(xd), 5e-7),
                          (lib.gelu, 0.5 * xd * (1 + erf(xd / np.sqrt(2))), 1e-6),
                          (lib.sigmoid, 0.5 * (1 + np.tanh(xd / 2)), 1e-7)]:
        for n in (len(x), 7, 1):
            y = np.empty(n, f32)
            fn(x[:n], y, row)
            err = np.abs(y - want[:n]) / np.maximum(1, np.abs(want[:n]))
            assert err.max() < tol, fn
    special = np.array([np.nan, np.inf, -np.inf] * 3, f32)
    y = np.empty_like(special)
    for fn, want in [(lib.erf, [np.nan, 1, -1]), (lib.sigmoid, [np.nan, 1, 0])]:
        fn(special, y, row)
        np.testing.assert_allclose(y[:3], want, atol=1e-30)


@pytest.mark.parametrize("build", BUILDS)
def test_bias_gelu_rows(build):
    lib, row = _lib(build)
    from scipy.special import erf
    rng = np.random.default_rng(5)
    for shape in [(3, 1536), (5, 13), (1, 3)]:
        y = (rng.standard_normal(shape) * 3).astype(f32)
        b = rng.standard_normal(shape[1]).astype(f32)
        v = (y + b).astype(np.float64)
        lib.bias_gelu_rows(y, b, row)
        _close(y, 0.5 * v * (1 + erf(v / np.sqrt(2))))


def test_c_kernels_priced_ahead_of_numba():
    """Registered first (tuning off) and cheaper (tuning prunes the Numba ones)."""
    for op, c_name in [("FusedAttention", "attention_blas_c"),
                       ("LayerNormalization", "layernorm_c"), ("Softmax", "softmax_c"),
                       ("Gelu", "gelu_c"), ("Sigmoid", "sigmoid_c"), ("Erf", "erf_c")]:
        specs = KERNELS[op]
        names = [s.name for s in specs]
        numba = [s for s in specs if s.name.endswith("_numba")]
        assert c_name in names and numba, op
        assert all(names.index(c_name) < names.index(s.name) for s in numba), names
        assert all(s.cost is not None and s.cost(None, [], []) >= 4
                   * specs[names.index(c_name)].cost(None, [], []) for s in numba)


@pytest.mark.parametrize("build", BUILDS)
def test_dynamic_quantize_matches_reference(build):
    """DynamicQuantizeLinear in C, both builds: parameters and values bit-exact with the
    reference over tails around the vector width, one-signed ranges, zeros, ties."""
    lib, row = _lib(build)
    from edgenn.kernels.reference.quant import dynamic_quantize_linear
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 15, 16, 17, 33, 1000, 4099):
        for shift in (0.0, 3.0, -3.0):
            x = (rng.standard_normal(n) * 2 + shift).astype(np.float32)
            x[: n // 5] = (np.arange(n // 5) - 2.5).astype(np.float32) * 0.1   # ties
            y = np.empty(n, np.uint8)
            scale, zp = lib.dynamic_quantize_u8(x, y, build=row)
            want_y, want_scale, want_zp = dynamic_quantize_linear({}, [x])
            assert np.float32(scale) == want_scale and zp == want_zp, (n, shift)
            np.testing.assert_array_equal(y, want_y)


@pytest.mark.parametrize("build", BUILDS)
def test_uint8_ops_are_the_portable_rows_bytes(build):
    """QuantizeLinear (divide by the scale, or QConv's multiply), DequantizeLinear and QAdd
    (with and without Relu) on every row: the portable row's bytes / floats exactly, over
    lengths around the vector widths, ties, values past the uint8 range, NaN and +-inf;
    and QuantizeLinear against NumPy's rint."""
    lib, row = _lib(build)
    rng = np.random.default_rng(9)
    for n in (1, 7, 8, 9, 31, 32, 33, 1000):
        x = (rng.standard_normal(n) * 60).astype(f32)
        x[: n // 4] = (np.arange(n // 4) - 3.5).astype(f32) * 0.5            # ties at .5
        x[n // 4: n // 4 + 3] = [np.nan, np.inf, -np.inf][: max(0, min(3, n - n // 4))]
        for scale, zp, divide in ((0.5, 128, True), (0.37, 3, True), (2.0, 250, False)):
            got, want = np.empty(n, np.uint8), np.empty(n, np.uint8)
            lib.quantize_u8(x, got, scale, zp, divide, row)
            _rowops.quantize_u8(x, want, scale, zp, divide, "rowops__scalar")
            np.testing.assert_array_equal(got, want, f"quantize n={n} scale={scale}")
            finite = np.isfinite(x)
            t = x / f32(scale) if divide else x * f32(scale)
            ref = np.clip(np.rint(np.clip(t, -1024, 1024)) + zp, 0, 255)
            np.testing.assert_array_equal(got[finite], ref[finite].astype(np.uint8))
        q = rng.integers(0, 256, n).astype(np.uint8)
        r = rng.integers(0, 256, n).astype(np.uint8)
        got, want = np.empty(n, f32), np.empty(n, f32)
        lib.dequantize_u8(q, got, 0.173, 131, row)
        _rowops.dequantize_u8(q, want, 0.173, 131, "rowops__scalar")
        np.testing.assert_array_equal(got, want)
        for relu in (False, True):
            got, want = np.empty(n, np.uint8), np.empty(n, np.uint8)
            lib.qadd_u8(q, r, got, 0.05, 120, 0.031, 7, 0.07, 100, relu, row)
            _rowops.qadd_u8(q, r, want, 0.05, 120, 0.031, 7, 0.07, 100, relu, "rowops__scalar")
            np.testing.assert_array_equal(got, want, f"qadd n={n} relu={relu}")


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("T", [5, 16, 37])
def test_attention_softmax_nan_and_fully_masked_rows(build, T):
    """A NaN score, or a row whose every position is masked out (all -inf), gives a NaN
    row, as the reference's arithmetic does; the other rows are untouched by it."""
    lib, row = _lib(build)
    rng = np.random.default_rng(T)
    s = rng.standard_normal((3, T)).astype(f32)
    s[0, T // 2] = np.nan
    keep = np.ones((3, T), bool)
    keep[1] = False
    want_row2 = np.exp(s[2] * f32(0.5) - (s[2] * f32(0.5)).max())
    lib.scale_bool_mask_softmax(s, 0.5, keep.view(np.uint8), row)
    assert np.isnan(s[0]).all() and np.isnan(s[1]).all()
    _close(s[2], want_row2 / want_row2.sum())


@pytest.mark.parametrize("shape,perm", [((128, 384), (1, 0)), ((17, 9, 13), (1, 2, 0)),
                                        ((9, 13, 17), (2, 0, 1)), ((3, 5, 7, 6), (3, 1, 0, 2)),
                                        ((8, 16), (1, 0)), ((1, 9), (1, 0)), ((0, 4), (1, 0))])
@pytest.mark.parametrize("build", BUILDS)
def test_tiled_transpose_moves_every_float(shape, perm, build):
    """The 8 x 8 tiles (AVX2) and the portable loops: exactly NumPy's transpose, every
    output written (NaN-filled before), edges not multiples of 8 included."""
    lib, row = _lib(build)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want = np.ascontiguousarray(x.transpose(perm))
    y = np.full(x.size, np.nan, np.float32)
    lib.transpose(x.reshape(-1), y, shape, perm, row)
    np.testing.assert_array_equal(y.reshape(want.shape), want)


def test_tiled_transpose_refuses_what_it_does_not_do():
    x = np.zeros(6, np.float32)
    with pytest.raises(ValueError, match="perm"):
        _rowops.transpose(x, x.copy(), (2, 3), (0, 1))    # rows already run along the input
    with pytest.raises(ValueError, match="prod"):
        _rowops.transpose(x, np.zeros(5, np.float32), (2, 3), (1, 0))
