"""The channel-interleaved depthwise kernels (kernels/depthwise/_dwc8.h, one vector body
_dwc_vec.h): 8 lanes (AVX2, depthwise_c8) and 16 (AVX-512F, depthwise_c16__avx512f), each
natively where the CPU has the tier and on SIMDe (_dwc8_emu, any CPU), and the portable C
loops, over the geometries the C code takes apart: channel counts with a tail group,
planes packed flat (W < lanes) and row by row (with an overlapping tail block), outputs
unpacked flat or row by row, rows under one vector, strides 1 / 2 / 3, dilation, 3x3
(taps in registers) and 1x1 / 5x5 / 7x7 (any taps), batch 2, residual, every activation.
Bound from the arithmetic: T products, the bias and z summed in float32 are within
gamma_(T+2) = (T+2) eps / (1 - (T+2) eps) of the exact sum, relative to
sum |w| |x| + |b| + |z| (Higham 2002 (3.5)); the activations are monotone and 1-Lipschitz
or worse only by their slope (HardSwish's <= 1.5, LeakyRelu's alpha), which the bound
takes; the transcendental ones (Sigmoid, SiLU, Gelu) add a few ulps of libm."""
import numpy as np
import pytest

from support.helpers import nan_interior_planes
from support import kernel_tables as tables

from edgenn.graph.ir import Node
from edgenn.kernels.depthwise import _dwc8, _dwc8_emu, depthwise
from edgenn.registry import REFERENCE, TensorInfo

EPS = np.finfo(np.float32).eps
# every row of the table (_dwc8.h's dwc_rows): the portable ones of 8 and 16 lanes, the
# vector ones this CPU runs, and every vector one again on SIMDe
PATHS = tables.paths(_dwc8.rows(), _dwc8_emu.rows())
# n, c, h, w, k, stride, pad, dilation
GEOMS = [(1, 20, 7, 7, 3, 1, 1, 1), (1, 40, 14, 14, 3, 1, 1, 1), (1, 33, 13, 13, 3, 2, 1, 1),
         (1, 32, 20, 37, 3, 2, 1, 1), (2, 17, 9, 18, 3, 1, 1, 1), (1, 16, 17, 16, 5, 1, 2, 1),
         (1, 18, 3, 5, 3, 1, 1, 1), (1, 9, 12, 11, 3, 1, 2, 2), (1, 24, 15, 15, 7, 3, 3, 1),
         (1, 16, 8, 8, 1, 1, 0, 1), (1, 3, 2, 3, 3, 1, 1, 1), (1, 48, 4, 4, 3, 2, 1, 1)]
ACTS = [("", []), ("Relu", []), ("Clip", [-0.5, 0.7]), ("HardSwish", []),
        ("HardSigmoid", [0.2, 0.5]), ("LeakyRelu", [2.5]), ("Sigmoid", []), ("SiLU", []),
        ("Gelu", [])]
SLOPE = {"HardSwish": 1.5, "LeakyRelu": 2.5, "HardSigmoid": 0.2}


def _case(rng, geom, act, params, residual):
    n, c, h, w, k, s, p, d = geom
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    attrs = dict(group=c, strides=[s, s], pads=[p] * 4, dilations=[d, d], kernel_shape=[k, k],
                 auto_pad="NOTSET", activation=act, activation_params=params)
    conv = REFERENCE["Conv"]
    plain = dict(attrs, activation="", activation_params=[])
    f64 = [v.astype(np.float64) for v in (x, wt, b)]
    exact = conv(plain, f64)[0]
    mag = conv(plain, [np.abs(v) for v in f64])[0]
    z = rng.standard_normal(exact.shape).astype(np.float32) if residual else None
    if residual:
        exact, mag = exact + z, mag + np.abs(z)
    exact = conv(dict(attrs, kernel_shape=[1, 1], strides=[1, 1], pads=[0] * 4,
                      dilations=[1, 1]), [exact, np.ones((c, 1, 1, 1)), np.zeros(c)])[0]
    t = k * k + 2
    bound = SLOPE.get(act, 1.0) * t * EPS / (1 - t * EPS) * mag + 8 * EPS * np.abs(exact) + 1e-30
    ins = [x, wt, b] + ([z] if residual else [])
    node = Node("Conv", ["x", "w", "b", "z"][:len(ins)], ["y"], attrs, "dw")
    return node, ins, exact, bound


def _run(node, ins, path, broken=False, threads=None, split_rows=False):
    infos = [TensorInfo(v.dtype.name, v.shape, v if i in (1, 2) else None)
             for i, v in enumerate(ins)]
    lib, row = tables.lib_and_row(path, _dwc8, _dwc8_emu)
    lanes = tables.row(path, _dwc8, _dwc8_emu).lanes
    x = ins[0]
    n, c, h, w = x.shape
    k = node.attrs["kernel_shape"][0]
    s, p, d = node.attrs["strides"][0], node.attrs["pads"][0], node.attrs["dilations"][0]
    oh, ow = ((h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1)
    out = TensorInfo("float32", (n, c, oh, ow))
    if broken:          # weights of two lanes swapped: the check must see it
        wt = ins[1].copy()
        wt[[0, 1]] = wt[[1, 0]]
        infos[1] = TensorInfo("float32", wt.shape, wt)
    if threads is None:
        threads = 2 if c > lanes else 1
    run = depthwise._prepare_c8(node, infos, [out], threads, lib=lib, split_rows=split_rows,
                                row=row)
    y = np.full(out.shape, np.nan, np.float32)
    run(ins, [y])
    return y


@pytest.mark.parametrize("path", PATHS)
def test_within_the_sum_bound(path):
    rng = np.random.default_rng(0)
    for gi, geom in enumerate(GEOMS):
        for ai, (act, params) in enumerate(ACTS):
            if (gi + ai) % 3 and act not in ("", "Clip"):
                continue                    # every activation on a third of the planes
            for residual in (False, True):
                node, ins, exact, bound = _case(rng, geom, act, params, residual)
                y = _run(node, ins, path)
                assert np.all(np.abs(y - exact) <= bound), (path, geom, act, residual)


VECTOR_ROWS = [p for p in PATHS if tables.row(p, _dwc8, _dwc8_emu).vector]


def _vector_widths(lib):
    """One build's vector rows' paths (native: those this CPU runs; emulated: all)."""
    rows = [p for p in VECTOR_ROWS if tables.lib_and_row(p, _dwc8, _dwc8_emu)[0] is lib]
    return rows if len(rows) > 1 else []


# a build's FMA is its own (SIMDe's emulated FMA rounds twice), so widths compare per build
@pytest.mark.parametrize("lib", [lib for lib in (_dwc8, _dwc8_emu) if _vector_widths(lib)],
                         ids=lambda v: v.__name__)
def test_every_vector_width_gives_the_same_bits(lib):
    # the same sums in the same order on 8 and 16 lanes (3x3: two FMA chains joined last)
    rng = np.random.default_rng(1)
    first, *others = _vector_widths(lib)
    for geom in GEOMS:
        node, ins, _, _ = _case(rng, geom, "Clip", [-0.5, 0.7], True)
        want = _run(node, ins, first)
        for path in others:
            np.testing.assert_array_equal(_run(node, ins, path), want, (path, geom))


@pytest.mark.parametrize("path", [p for p in VECTOR_ROWS if p.endswith(tables.EMULATED)])
def test_the_check_is_not_vacuous(path):
    # one lane's weights taken from its neighbour (a lane-order slip in the packing): fails
    rng = np.random.default_rng(2)
    node, ins, exact, bound = _case(rng, GEOMS[2], "", [], False)
    y = _run(node, ins, path, broken=True)
    assert not np.all(np.abs(y - exact) <= bound)


# tall planes for the rows split: flat bands (W < 16 / 8), row-wise ones, 16-wide rows,
# stride 2, 5x5, dilation, batch 2
TALL_GEOMS = [(1, 20, 34, 7, 3, 1, 1, 1), (1, 40, 40, 12, 3, 2, 1, 1), (2, 17, 19, 23, 5, 1, 2, 1),
              (1, 9, 26, 9, 3, 1, 2, 2), (1, 33, 17, 16, 3, 1, 1, 1)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("split_rows", [True, False], ids=["rows", "groups"])
def test_threads_give_the_one_thread_bits(path, split_rows, monkeypatch):
    # threads taking bands of output rows (every channel group each), or even shares of
    # the (group, row) pairs (whole groups, a group's rows split where shares meet),
    # compute every output as one thread does; each part fills the padded rows it reads,
    # and no other: the planes' interiors start as NaN
    rng = np.random.default_rng(4)
    for geom in TALL_GEOMS + GEOMS:
        node, ins, _, _ = _case(rng, geom, "Clip", [-0.5, 0.7], True)
        want = _run(node, ins, path, threads=1)
        oh = want.shape[2]
        nan_interior_planes(monkeypatch, depthwise)
        for threads in sorted({2, 3, oh}):
            got = _run(node, ins, path, threads=threads, split_rows=split_rows)
            np.testing.assert_array_equal(got, want, str((geom, threads)))
        monkeypatch.undo()


def test_a_band_short_of_its_rows_fails(monkeypatch):
    # bands told their taps reach two rows less than they do (the first tap row moved last:
    # the span comes from the last tap's offset) leave rows unfilled: the NaN shows
    rng = np.random.default_rng(5)
    node, ins, _, _ = _case(rng, TALL_GEOMS[0], "", [], False)
    nan_interior_planes(monkeypatch, depthwise)
    x, wt = ins[0], ins[1]
    oh, ow = x.shape[2], x.shape[3]
    y = np.empty((1, x.shape[1], oh, ow), np.float32)
    infos = [TensorInfo(v.dtype.name, v.shape, v if i in (1, 2) else None)
             for i, v in enumerate(ins)]
    for order, fails in ((list(range(9)), False), ([3, 4, 5, 6, 7, 8, 0, 1, 2], True)):
        p = depthwise.c8_parts(node, wt, infos, x.shape, y.shape, 3, 16, _dwc8_emu)
        _dwc8_emu.dwc8(x, np.ascontiguousarray(p.w8[:, order]), p.b8,
                       np.ascontiguousarray(p.off[order]), y, y, p.q.get(), p.obuf.get(),
                       *p.geom, p.mode, p.p0, p.p1, False, "depthwise_c16__avx512f", True)
        assert np.isnan(y).any() == fails


@pytest.mark.parametrize("lib", [_dwc8, _dwc8_emu], ids=lambda v: v.__name__)
def test_a_bound_layer_refuses_arrays_of_other_sizes(lib):
    # Dwc8Layer checks only what a call passes (x, z, y, Q, obuf): each wrong one refused
    rng = np.random.default_rng(6)
    node, ins, _, _ = _case(rng, GEOMS[1], "", [], True)
    infos = [TensorInfo(v.dtype.name, v.shape, v if i in (1, 2) else None)
             for i, v in enumerate(ins)]
    x, z = ins[0], ins[3]
    p = depthwise.c8_parts(node, ins[1], infos, x.shape, z.shape, 2, 16, lib)
    layer = lib.Dwc8Layer(p.w8, p.b8, p.off, x.shape, z.shape, *p.geom, p.mode, p.p0, p.p1,
                          True, lib.best_row(16))
    q, obuf, y = p.q.get(), p.obuf.get(), np.empty(z.shape, np.float32)
    layer.run(x, z, y, q, obuf)                     # the right ones run
    for bad in ((x[:, :, :-1].copy(), z, y, q, obuf), (x.astype(np.float64), z, y, q, obuf),
                (x, z[:, :-1].copy(), y, q, obuf), (x, None, y, q, obuf),
                (x, z, y[..., ::2], q, obuf), (x, z, y, q[:, :8].copy(), obuf),
                (x, z, y, q, obuf[:1].copy())):
        with pytest.raises(ValueError):
            layer.run(*bad)


def test_rows_of_other_widths_are_specs_of_their_own():
    # ARM64's 4-lane NEON row (in the emulated table here; natively where it is built)
    # becomes depthwise_c4__neon (+ _mt, a rows split) and ExpandDepthwise's twin; the
    # x86 widths keep their names (the tuning caches are keyed by them)
    emu = depthwise.other_widths("depthwise", _dwc8_emu)
    assert (4, "depthwise_c4__neon", "neon") in emu
    assert all(lanes not in (8, 16) for lanes, _, _ in emu)
    assert (4, "expand_depthwise_c4__neon", "neon") in \
        depthwise.other_widths("expand_depthwise", _dwc8_emu)
    from edgenn.registry import KERNELS
    names = {s.name for s in KERNELS["Conv"]}
    for _, name, _ in depthwise.other_widths("depthwise"):   # this CPU's own table
        assert {name, name + "_mt", depthwise.rowsplit_name(name) + "_mt"} <= names
