"""Direct convolution for few input channels (kernels/direct/conv_direct.py, _convdirect.h)
on every tier: the native ones this CPU runs and the AVX2 / AVX-512F bodies built on SIMDe
(_convdirect_emu, any CPU), over the first-layer geometries of kernel_cases (strides 1 / 2
in each direction, rectangular kernels, asymmetric and auto pads, output channels and
widths no tile divides, no bias) and the fused Relu / Clip epilogues, against float64.
Bound from the arithmetic: a float32 sum of n = C KH KW products plus the bias is within
gamma_(n+1) = (n+1) eps / (1 - (n+1) eps) of the exact one, relative to sum |w| |x| + |b|
(Higham 2002 (3.5)); clamping never widens it. Then the planner: a network's RGB stem
offers the kernel and the tuner's choice matches the reference."""
import numpy as np
import pytest
from support import kernel_tables as tables
from support.kernel_cases.conv_gemm import first_layer_cases

from edgenn.graph.infer import infer_node
from edgenn.kernels.direct import _convdirect, _convdirect_emu, conv_direct
from edgenn.registry import REFERENCE, TensorInfo

EPS = np.finfo(np.float32).eps
# every row of _convdirect.h's table, native and SIMDe-emulated
PATHS = tables.paths(_convdirect.rows(), _convdirect_emu.rows())
PORTABLE = _convdirect.ROWS[0].name


def _lib(path):
    return tables.lib_and_row(path, _convdirect, _convdirect_emu)


def _float64(node, inputs, absolute=False):
    attrs = {k: v for k, v in node.attrs.items() if k not in ("activation", "activation_params")}
    vals = [np.abs(v).astype(np.float64) if absolute else v.astype(np.float64) for v in inputs]
    return REFERENCE["Conv"](attrs, vals)[0]


@pytest.mark.parametrize("path", PATHS)
def test_direct_conv_matches_float64_within_the_sum_bound(path):
    lib, row = _lib(path)
    covered = 0
    for node, inputs in first_layer_cases(np.random.default_rng(1)):
        ins = [TensorInfo("float32", inputs[0].shape)] + [TensorInfo.of(v) for v in inputs[1:]]
        outs = infer_node(node, ins, fold=False)
        assert conv_direct._supports(node, ins, outs), node.attrs
        covered += 1
        y = np.full(outs[0].shape, np.nan, np.float32)
        conv_direct.prepare(node, ins, outs, row, lib=lib)(inputs, [y])
        exact, mag = _float64(node, inputs), _float64(node, inputs, absolute=True)
        n = int(np.prod(inputs[1].shape[1:])) + 1
        bound = n * EPS / (1 - n * EPS) * mag + 1e-30
        act, params = node.attrs.get("activation", ""), node.attrs.get("activation_params")
        if act == "Relu":
            exact = np.maximum(exact, 0)
        elif act == "Clip":
            exact = np.clip(exact, *params)
        elif act == "PRelu":                # slopes scale the error bound too
            slope = np.asarray(params).reshape(1, -1, 1, 1)
            bound = bound * np.maximum(1.0, np.abs(slope))
            exact = np.where(exact >= 0, exact, exact * slope)
        assert np.all(np.isfinite(y)), (path, node.attrs)
        assert np.all(np.abs(y - exact) <= bound), (path, node.attrs,
                                                    float(np.max(np.abs(y - exact) - bound)))
    assert covered >= 50


@pytest.mark.parametrize("path", [p for p in PATHS if p != PORTABLE])
def test_row_ranges_over_threads_give_the_same_bits(path):
    """The *_mt kernels: output rows split over 2 and 3 OpenMP threads (3 > the rows of a
    2-row output) give exactly the one-thread result."""
    lib, row = _lib(path)
    for node, inputs in list(first_layer_cases(np.random.default_rng(2)))[::7]:
        ins = [TensorInfo("float32", inputs[0].shape)] + [TensorInfo.of(v) for v in inputs[1:]]
        outs = infer_node(node, ins, fold=False)
        got = []
        for threads in (1, 2, 3):
            y = np.full(outs[0].shape, np.nan, np.float32)
            conv_direct.prepare(node, ins, outs, row, lib=lib, threads=threads)(inputs, [y])
            got.append(y)
        assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2]), node.attrs
        assert np.all(np.isfinite(got[0]))


@pytest.mark.parametrize("path", PATHS)
def test_every_band_height_gives_the_same_bits(path):
    """run_bands: bands of 1 .. OH + 1 output rows (each filling its padded rows into the
    reused buffer: top / bottom padding rows zeroed, stale rows overwritten), over 1-3
    threads, strides 1-3, top pads 0-3: exactly the whole image in one band."""
    lib, row = _lib(path)
    rng = np.random.default_rng(4)
    mb, px = lib.tile(row)
    for c, h, w, m, k, pt, pl, s in [(3, 23, 20, 8, 3, 1, 1, 2), (1, 9, 7, 5, 3, 0, 2, 1),
                                     (2, 13, 11, 9, 5, 3, 3, 2), (3, 5, 4, 4, 3, 1, 0, 3)]:
        x = rng.standard_normal((c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c, k, k)).astype(np.float32)
        oh = (h + 2 * pt - k) // s + 1
        ow = (w + 2 * pl - k) // s + 1
        wq = max(-(-ow // px) * px + (k - 1) // s, -(-(pl + w) // s))
        wpk = lib.pack_weights(wt, row)
        first = None
        for band in range(1, oh + 2):
            for threads in (1, 2, 3):
                buf = np.zeros((threads, c, lib.band_rows(band, s, k), s * wq), np.float32)
                y = np.full((m, oh, ow), np.nan, np.float32)
                lib.run_bands(x, buf, wpk, None, y, k, k, s, s, pt, pl, "", 0, 0, row,
                              None, threads, band)
                first = y if first is None else first
                assert np.array_equal(y, first), (c, h, w, band, threads)
        assert np.all(np.isfinite(first))


def test_direct_conv_refuses_what_it_does_not_compute():
    from edgenn.graph.ir import Node
    x = TensorInfo("float32", (1, 3, 16, 16))
    w = TensorInfo.of(np.ones((8, 3, 3, 3), np.float32))
    base = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    for attrs, xi, extra in [(dict(base, dilations=[2, 2]), x, []),
                             (dict(base, activation="LeakyRelu", activation_params=[0.1]), x,
                              []),
                             (dict(base, strides=[3, 3]), x, []),
                             (dict(base, activation="Sigmoid"), x, []),
                             (base, TensorInfo("float32", (1, 9, 16, 16)), []),
                             (base, x, [TensorInfo.of(np.ones(8, np.float32)),
                                        TensorInfo("float32", (1, 8, 16, 16))])]:
        wi = w if xi.shape[1] == 3 else TensorInfo.of(np.ones((8, 9, 3, 3), np.float32))
        node = Node("Conv", ["x", "w", "b", "z"][:2 + len(extra)], ["y"], attrs, "c")
        ins = [xi, wi] + extra
        outs = infer_node(node, ins, fold=False)
        assert not conv_direct._supports(node, ins, outs), attrs


def test_an_rgb_stem_offers_the_direct_kernel_and_runs_right():
    from support.helpers import helper, make_model

    import edgenn
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                                         strides=[2, 2]),
                        helper.make_node("Relu", ["c"], ["y"])],
                       [("x", np.float32, (1, 3, 64, 64))], [("y", np.float32, (1, 32, 32, 32))],
                       {"w": w, "b": b})
    sess = edgenn.InferenceSession(model.SerializeToString())
    step = next(s for s in sess.plan.steps if s.node.op == "Conv")
    assert any(k.startswith("conv_direct") for k in step.choice.candidates), \
        step.choice.candidates
    x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    exact = np.maximum(_float64(step.node, [x, w, b]), 0)
    mag = _float64(step.node, [x, w, b], absolute=True)
    got = sess.run(None, {"x": x})[0]
    assert np.all(np.abs(got - exact) <= 28 * EPS / (1 - 28 * EPS) * mag + 1e-30)
