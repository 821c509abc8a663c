"""Sparse 1x1 convolution (kernels/sparse/_spmm.pyx + _spmm.h, kernels/sparse/sparse.py) and
magnitude pruning (compress/prune.py).

The kernel against float64 over output channels, inputs and pixel counts around its tiles
(32 pixels AVX2, 64 AVX-512F: the partial tile goes through the workspace), sparsities 0
to 1 (empty rows, full rows), every fused epilogue, with and without bias and residual,
on every tier this CPU runs and on the AVX2 / AVX-512F bodies built on SIMDe (any CPU).
Bound from the arithmetic: a float32 sum of n products is within gamma_n = n eps / (1 -
n eps) of the exact one, relative to sum |w| |x| (+ |b| + |z|), Higham 2002 (3.5).
Then the planner: a pruned 1x1 Conv offers the sparse kernels and the tuner's choice
matches the reference; a layer below MIN_ZEROS never offers them.
"""
import numpy as np
import pytest
from support.helpers import helper, make_model
from support import kernel_tables as tables

import edgenn
from edgenn.kernels.sparse import _spmm, _spmm_emu
from edgenn.graph.ir import Node
from edgenn.kernels.sparse import sparse
from edgenn.kernels.sparse.sparse import MIN_ZEROS, conv_rows, csr
from edgenn.oplist import load_all
from edgenn.registry import REFERENCE, TensorInfo

load_all()   # the shape rules and reference kernels the specs are checked against

PATHS = tables.paths(_spmm.rows(), _spmm_emu.rows())     # every row of spmm_table.h
PORTABLE = _spmm.ROWS[0].name                            # any CPU, any EDGENN_MAX_ISA
EPS = np.finfo(np.float32).eps
RNG = np.random.default_rng(11)
SHAPES = [(1, 1, 1), (3, 2, 31), (3, 2, 32), (5, 3, 33), (16, 8, 63), (7, 9, 64), (9, 5, 65),
          (64, 96, 49), (24, 144, 196), (40, 33, 129), (32, 16, 3136)]
SPARSITY = [0.0, 0.5, 0.8, 0.95, 1.0]
ACTS = [("", 0.0, 0.0), ("Relu", 0.0, 0.0), ("Clip", -0.5, 0.7)]


def _lib(path):
    return tables.lib_and_row(path, _spmm, _spmm_emu)


def _sparse(m, k, sparsity):
    w = RNG.standard_normal((m, k)).astype(np.float32)
    w[RNG.random((m, k)) < sparsity] = 0
    if m > 2 and sparsity < 1:
        w[0] = 0                          # an empty row
        w[1] = RNG.standard_normal(k)     # a full row
    return w


def _check(y, w, x, b, z, act, lo, hi):
    exact = w.astype(np.float64) @ x
    mag = np.abs(w).astype(np.float64) @ np.abs(x)
    if b is not None:
        exact, mag = exact + b[:, None], mag + np.abs(b)[:, None]
    if z is not None:
        exact, mag = exact + z, mag + np.abs(z)
    n = np.count_nonzero(w, axis=1)[:, None] + 2          # products + bias + residual
    bound = n * EPS / (1 - n * EPS) * mag + 1e-30
    if act == "Relu":
        exact = np.maximum(exact, 0)
    elif act == "Clip":
        exact = np.clip(exact, lo, hi)                     # clamping never widens the error
    assert np.all(np.isfinite(y))
    assert np.all(np.abs(y - exact) <= bound), float(np.max(np.abs(y - exact) - bound))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_float64(path, shape):
    lib, row = _lib(path)
    m, k, s = shape
    x = RNG.standard_normal((k, s)).astype(np.float32)
    for sparsity in SPARSITY:
        w = _sparse(m, k, sparsity)
        for (act, lo, hi), with_extras in zip(ACTS * 2, [True] * 3 + [False] * 3):
            b = RNG.standard_normal(m).astype(np.float32) if with_extras else None
            z = RNG.standard_normal((m, s)).astype(np.float32) if with_extras else None
            kern = lib.SparseConv1x1(*csr(w), k, s, b, act, lo, hi, row=row)
            y = np.full((m, s), np.nan, np.float32)
            ws = np.full(max(kern.workspace_floats, 1), np.nan, np.float32)
            kern.run(x, y, z, ws)
            _check(y, w, x, b, z, act, lo, hi)


# (C, M, H, W, KH, KW, attrs): pattern-pruned 3x3s, other sizes, pads, dilation, SAME
SHIFTED = [(3, 4, 5, 5, 3, 3, {"pads": [1, 1, 1, 1]}),
           (8, 16, 14, 14, 3, 3, {"pads": [1, 1, 1, 1]}),
           (5, 7, 9, 11, 3, 3, {"pads": [0, 0, 0, 0]}),
           (4, 6, 8, 13, 3, 3, {"pads": [2, 0, 1, 2], "dilations": [2, 1]}),
           (6, 3, 7, 7, 5, 5, {"auto_pad": "SAME_UPPER"}),
           (2, 5, 10, 3, 1, 3, {"pads": [0, 1, 0, 1]}),
           (16, 32, 7, 7, 3, 3, {"pads": [1, 1, 1, 1]}),
           # strided: the stride-phase planes (sparse._phase_layout)
           (8, 16, 14, 14, 3, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
           (3, 5, 9, 12, 3, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
           (4, 6, 11, 10, 3, 3, {"pads": [0, 2, 1, 0], "strides": [3, 2], "dilations": [1, 2]}),
           (5, 4, 8, 9, 5, 5, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
           (6, 8, 7, 7, 1, 1, {"strides": [2, 2]}),
           (2, 3, 6, 6, 3, 3, {"strides": [2, 1], "pads": [1, 1, 1, 1]})]


def _infos(c, m, h, w_, kh, kw, attrs, sparsity, with_z):
    from edgenn.graph.infer import infer_node            # the output shape, as planned
    w = RNG.standard_normal((m, c, kh, kw)).astype(np.float32)
    w[RNG.random(w.shape) < sparsity] = 0
    b = RNG.standard_normal(m).astype(np.float32)
    x = TensorInfo("float32", (2, c, h, w_))
    node = Node("Conv", ["x", "w", "b"], ["y"], dict(attrs, group=1), "conv")
    ins = [x, TensorInfo.of(w), TensorInfo.of(b)]
    out = infer_node(node, ins, fold=False)[0]
    if with_z:
        node.inputs.append("z")
        ins.append(TensorInfo("float32", out.shape))
    return node, ins, [out]


def _paired(m, k, sparsity):
    """(M, K) weights whose rows 2i and 2i + 1 share their nonzero positions."""
    keep = np.repeat(RNG.random(((m + 1) // 2, k)) >= sparsity, 2, axis=0)[:m]
    return (RNG.standard_normal((m, k)) * keep).astype(np.float32)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,k,s", [(2, 5, 33), (7, 40, 64), (16, 96, 130), (33, 17, 49)])
def test_output_channel_pairs_load_once_and_give_the_same_bits(path, m, k, s):
    lib, row = _lib(path)
    x = RNG.standard_normal((k, s)).astype(np.float32)
    for sparsity in (0.5, 0.8, 1.0):
        w = _paired(m, k, sparsity)
        w[:2, 0] = 0     # the first pair never full, so the full row put in front below
        b = RNG.standard_normal(m).astype(np.float32)       # never shares its positions
        z = RNG.standard_normal((m, s)).astype(np.float32)
        kern = lib.SparseConv1x1(*csr(w), k, s, b, "Clip", -0.5, 0.7, row=row)
        assert kern.paired
        y = np.full((m, s), np.nan, np.float32)
        kern.run(x, y, z, np.full(max(kern.workspace_floats, 1), np.nan, np.float32))
        _check(y, w, x, b, z, "Clip", -0.5, 0.7)
        # a full row in front: no pair shares positions any more, the plain tiles run,
        # and every channel's sum is the same, in the same order
        w1 = np.vstack([RNG.standard_normal((1, k)).astype(np.float32), w])
        k1 = lib.SparseConv1x1(*csr(w1), k, s, np.r_[np.float32(0), b], "Clip", -0.5, 0.7,
                               row=row)
        assert not k1.paired
        y1 = np.full((m + 1, s), np.nan, np.float32)
        k1.run(x, y1, np.vstack([np.zeros((1, s), np.float32), z]),
               np.full(max(k1.workspace_floats, 1), np.nan, np.float32))
        np.testing.assert_array_equal(y1[1:], y)


@pytest.mark.parametrize("path", PATHS)
def test_threads_split_the_output_channels_with_the_same_bits(path):
    """The *_mt specs: output channels in ranges of whole pairs over OpenMP threads (more
    threads than pairs too), paired rows and not, the 1x1 and the shifted kernels."""
    lib, row = _lib(path)
    for m, k, s in [(1, 3, 40), (7, 40, 64), (16, 33, 130), (33, 17, 49)]:
        x = RNG.standard_normal((k, s)).astype(np.float32)
        for w in (_sparse(m, k, 0.8), _paired(m, k, 0.7)):
            b = RNG.standard_normal(m).astype(np.float32)
            z = RNG.standard_normal((m, s)).astype(np.float32)
            kern = lib.SparseConv1x1(*csr(w), k, s, b, "Relu", 0, 0, row=row)
            got = []
            for threads in (1, 2, 3, 8):
                y = np.full((m, s), np.nan, np.float32)
                kern.run(x, y, z, np.full(max(kern.workspace_floats * threads, 1), np.nan,
                                          np.float32), threads)
                got.append(y)
            _check(got[0], w, x, b, z, "Relu", 0, 0)
            for y in got[1:]:
                np.testing.assert_array_equal(y, got[0])
    for case in SHIFTED[1::3]:
        node, ins, outs = _infos(*case, 0.8, True)
        x = RNG.standard_normal(ins[0].shape).astype(np.float32)
        feeds = [x, ins[1].value, ins[2].value,
                 RNG.standard_normal(outs[0].shape).astype(np.float32)]
        got = []
        for threads in (1, 2, 5):
            y = np.full(outs[0].shape, np.nan, np.float32)
            sparse._prepare_shifted(node, ins, outs, row, lib, threads=threads)(feeds, [y])
            got.append(y)
        for y in got[1:]:
            np.testing.assert_array_equal(y, got[0])


def test_pairs_need_the_same_positions_not_just_the_same_counts():
    w = np.zeros((4, 8), np.float32)
    w[0, 1] = w[1, 1] = w[2, 3] = w[3, 4] = 1.0          # pair (2, 3): one each, apart
    assert not _spmm.SparseConv1x1(*csr(w), 8, 32, row=PORTABLE).paired
    w[3, 4], w[3, 3] = 0.0, 2.0
    assert _spmm.SparseConv1x1(*csr(w), 8, 32, row=PORTABLE).paired


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", SHIFTED, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}x{c[3]}k{c[4]}{c[5]}")
def test_shifted_sparse_conv_matches_the_reference(path, case):
    lib, row = _lib(path)
    for sparsity, with_z, (act, lo, hi) in [(0.6, False, ACTS[0]), (0.9, True, ACTS[2]),
                                            (1.0, False, ACTS[1])]:
        node, ins, outs = _infos(*case, sparsity, with_z)
        node.attrs.update(activation=act, activation_params=[lo, hi] if act == "Clip" else [])
        run = sparse._prepare_shifted(node, ins, outs, row, lib)
        x = RNG.standard_normal(ins[0].shape).astype(np.float32)
        feeds = [x, ins[1].value, ins[2].value]
        if with_z:
            feeds.append(RNG.standard_normal(outs[0].shape).astype(np.float32))
        y = np.full(outs[0].shape, np.nan, np.float32)
        for _ in range(2):                        # twice: the borders stay zero
            run(feeds, [y])
        plain = Node("Conv", ["x", "w", "b"], ["y"], {k: v for k, v in node.attrs.items()
                                                      if not k.startswith("activation")})
        want = REFERENCE["Conv"](plain.attrs, [x.astype(np.float64), ins[1].value.astype(
            np.float64), ins[2].value.astype(np.float64)])[0]
        mag = REFERENCE["Conv"](plain.attrs, [np.abs(x).astype(np.float64), np.abs(
            ins[1].value).astype(np.float64), np.abs(ins[2].value).astype(np.float64)])[0]
        if with_z:
            want, mag = want + feeds[3], mag + np.abs(feeds[3])
        want = np.clip(want, lo, hi) if act == "Clip" else np.maximum(want, 0) \
            if act == "Relu" else want
        n = case[0] * case[4] * case[5] + 2
        assert np.all(np.abs(y - want) <= n * EPS / (1 - n * EPS) * mag + 1e-30), path


def test_csr_layout_and_bad_weights_refused():
    w = np.array([[0, 2, 0, 3], [0, 0, 0, 0], [1, 0, 0, 0]], np.float32)
    row_ptr, col, val = csr(w)
    assert row_ptr.tolist() == [0, 2, 2, 3] and col.tolist() == [1, 3, 0]
    assert val.tolist() == [2, 3, 1]
    bad = [((np.array([0, 2, 1, 3]), col, val, 4, 5), "CSR"),           # row_ptr decreases
           ((row_ptr, np.array([1, 4, 0]), val, 4, 5), "CSR"),          # column out of range
           ((row_ptr, col, val[:2], 4, 5), "CSR")]                      # val too short
    for args, msg in bad:
        with pytest.raises(ValueError, match=msg):
            _spmm.SparseConv1x1(*args, row=PORTABLE)       # any CPU, any EDGENN_MAX_ISA
    kern = _spmm.SparseConv1x1(row_ptr, col, val, 4, 5, row=PORTABLE)
    with pytest.raises(ValueError, match="shapes"):
        kern.run(np.zeros((3, 5), np.float32), np.zeros((3, 5), np.float32))   # x is (4, 5)
    with pytest.raises(ValueError, match="activation"):
        _spmm.SparseConv1x1(row_ptr, col, val, 4, 5, act="Sigmoid", row=PORTABLE)


def _conv_model(w, act_clip=False, residual=False):
    m, k = w.shape[:2]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="pw")]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "x2"], ["r"], name="add"))
        last = "r"
    if act_clip:
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"], name="clip"))
    else:
        nodes.append(helper.make_node("Relu", [last], ["y"], name="relu"))
    inputs = [("x", np.float32, [2, k, 14, 14])] + \
        ([("x2", np.float32, [2, m, 14, 14])] if residual else [])
    inits = {"w": w, "b": RNG.standard_normal(m).astype(np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    return make_model(nodes, inputs, [("y", np.float32, [2, m, 14, 14])], inits)


@pytest.mark.parametrize("clip, residual", [(False, False), (True, True)])
def test_pruned_pointwise_conv_offers_the_sparse_kernels(clip, residual):
    w = _sparse(48, 40, 0.9).reshape(48, 40, 1, 1)
    model = _conv_model(w, clip, residual)
    feeds = {"x": RNG.standard_normal((2, 40, 14, 14)).astype(np.float32)}
    if residual:
        feeds["x2"] = RNG.standard_normal((2, 48, 14, 14)).astype(np.float32)
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="full")
    got = sess.run(None, feeds)[0]
    ref = edgenn.InferenceSession(model.SerializeToString(), reference=True).run(None, feeds)[0]
    conv = next(s for s in sess.plan.steps if s.node.op == "Conv")
    assert conv.node.attrs.get("activation") in ("Relu", "Clip")   # fused: the C epilogue
    usable = {r.name for r in conv_rows() if r.usable}      # the 1x1 specs
    assert usable <= set(conv.choice.times), conv.choice.times      # all timed
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_dense_layers_do_not_offer_the_sparse_kernels():
    w = _sparse(48, 40, MIN_ZEROS * 0.6).reshape(48, 40, 1, 1)
    sess = edgenn.InferenceSession(_conv_model(w).SerializeToString(), tune="full")
    sess.run(None, {"x": RNG.standard_normal((2, 40, 14, 14)).astype(np.float32)})
    conv = next(s for s in sess.plan.steps if s.node.op == "Conv")
    assert not any(name.startswith("spmm") for name in conv.choice.times)


# -- magnitude pruning (compress/prune.py) ---------------------------------------------------

def test_magnitude_mask_drops_exactly_the_smallest():
    from edgenn.compress.prune import magnitude_mask
    w = RNG.standard_normal((37, 11)).astype(np.float32)
    for ratio in (0.0, 0.3, 0.8, 1.0):
        keep = magnitude_mask(w, ratio)
        assert keep.sum() == w.size - round(ratio * w.size)
        if 0 < ratio < 1:
            assert np.abs(w[keep]).min() >= np.abs(w[~keep]).max()
    ties = np.ones((4, 4), np.float32)
    assert np.array_equal(magnitude_mask(ties, 0.5), magnitude_mask(ties, 0.5))
    with pytest.raises(ValueError):
        magnitude_mask(w, 1.5)


def test_sparsify_prunes_pointwise_convs_only():
    from edgenn.compress.prune import pointwise_convs, sparsify
    from edgenn.demo import DEMO_MODEL
    g = edgenn.load(DEMO_MODEL)
    pw = [n.name for n in pointwise_convs(g)]
    other = {n.inputs[1]: g.consts[n.inputs[1]].copy() for n in g.nodes
             if n.op == "Conv" and n.name not in pw}
    assert pw and other
    rep = sparsify(g, 0.75, per_layer={pw[-1]: 0.5})
    assert rep.layers[pw[0]][1] == 0                       # the first one stays dense
    n, z = rep.layers[pw[-1]]
    assert z == round(0.5 * n)
    for name in pw[1:-1]:
        n, z = rep.layers[name]
        assert z >= round(0.75 * n)
    for k, w in other.items():
        assert np.array_equal(g.consts[k], w)              # 3x3 convs untouched
    with pytest.raises(ValueError, match="no pointwise convs layer"):
        sparsify(edgenn.load(DEMO_MODEL), 0.5, per_layer={"nope": 0.1})


def test_sparsify_fully_connected_layers():
    from edgenn.compress.prune import fully_connected, sparsify
    from edgenn.graph.ir import Graph, Node, ValueInfo
    rng = np.random.default_rng(0)
    consts = {"w1": rng.standard_normal((32, 64)).astype(np.float32),
              "w2": rng.standard_normal((10, 64)).astype(np.float32),
              "shared": rng.standard_normal((10, 10)).astype(np.float32)}
    nodes = [Node("MatMul", ["x", "w1"], ["h"], {}, "fc1"),
             Node("Gemm", ["h", "w2"], ["y"], {"transB": 1}, "fc2"),
             Node("MatMul", ["y", "shared"], ["z"], {}, "tied"),
             Node("Add", ["z", "shared"], ["out"], {}, "add")]   # "shared" read twice
    g = Graph(nodes, [ValueInfo("x", "float32", (1, 32))],
              [ValueInfo("out", "float32", (1, 10))], consts)
    assert [n.name for n in fully_connected(g)] == ["fc1", "fc2"]
    rep = sparsify(g, 0.8, skip_first=False, layers=fully_connected)
    for name, n in (("fc1", 2048), ("fc2", 640)):
        assert rep.layers[name] == (n, round(0.8 * n))
    assert np.count_nonzero(g.consts["shared"]) == 100


def test_magnitude_pruning_by_output_channel_pairs():
    from edgenn.compress.prune import magnitude_mask, pointwise_convs, sparsify
    from edgenn.demo import DEMO_MODEL
    w = RNG.standard_normal((7, 12, 1, 1)).astype(np.float32)
    keep = magnitude_mask(w, 0.75, pair_axis=0)
    assert np.array_equal(keep[0:6:2], keep[1:6:2])                 # pairs share positions
    groups = np.concatenate([(w[0:6:2] ** 2 + w[1:6:2] ** 2), w[6:] ** 2]).reshape(4, -1)
    g_keep = np.concatenate([keep[0:6:2], keep[6:]]).reshape(4, -1)
    assert g_keep.sum() == 48 - round(0.75 * 48)                   # per pair-position
    assert groups[g_keep].min() >= groups[~g_keep].max()           # the weakest pairs go
    wt = RNG.standard_normal((10, 6)).astype(np.float32)           # MatMul W (K, N)
    keep = magnitude_mask(wt, 0.5, pair_axis=-1)
    assert np.array_equal(keep[:, 0::2], keep[:, 1::2])
    g = edgenn.load(DEMO_MODEL)
    sparsify(g, 0.8, pairs=True)
    pw = list(pointwise_convs(g))[-1]
    w2 = g.consts[pw.inputs[1]].reshape(g.consts[pw.inputs[1]].shape[0], -1)
    kern = _spmm.SparseConv1x1(*csr(w2), w2.shape[1], 16, row=PORTABLE)
    assert kern.paired and abs((w2 == 0).mean() - 0.8) < 0.02


def test_pattern_pruning_keeps_k_taps_from_the_library():
    from edgenn.compress.prune import pattern_library, pattern_mask
    w = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
    lib = pattern_library(w, 4, 6)
    assert lib.shape == (6, 9) and np.all(lib.sum(1) == 4)
    assert len({tuple(r) for r in lib}) == 6                          # distinct patterns
    keep, choice = pattern_mask(w, 4, 6, connectivity=0.5)
    per_kernel = keep.reshape(24 * 16, 9)
    alive = choice.reshape(-1) >= 0
    assert alive.sum() == 24 * 16 - round(0.5 * 24 * 16)
    assert np.all(per_kernel[alive].sum(1) == 4) and not per_kernel[~alive].any()
    for row, c in zip(per_kernel[alive], choice.reshape(-1)[alive]):
        assert np.array_equal(row, lib[c])
    # the chosen pattern keeps the most energy of any library pattern
    e = (w.reshape(-1, 9).astype(np.float64) ** 2) @ lib.T
    best = e.max(1)
    assert np.allclose(e[np.arange(len(e)), np.maximum(choice.reshape(-1), 0)][alive],
                       best[alive])
    # removed kernels are the weakest: none kept is weaker than one removed
    assert best[alive].min() >= best[~alive].max()
    # by output-channel pairs (an odd last channel alone): both rows keep the same taps,
    # chosen and removed by the pair's summed energy
    w = RNG.standard_normal((7, 16, 3, 3)).astype(np.float32)
    keep, choice = pattern_mask(w, 4, 6, connectivity=0.5, pairs=True)
    assert np.array_equal(keep[0:6:2], keep[1:6:2]) and np.array_equal(choice[0:6:2], choice[1:6:2])
    assert (choice[0:6:2] < 0).sum() + (choice[6] < 0).sum() == round(0.5 * 4 * 16)
    lib = pattern_library(w, 4, 6)
    e = (w.reshape(7, 16, 9).astype(np.float64) ** 2) @ lib.T
    pair_e = e[0:6:2] + e[1:6:2]
    alive = choice[0:6:2] >= 0
    assert np.allclose(np.take_along_axis(pair_e, np.maximum(choice[0:6:2], 0)[..., None], 2)[..., 0][alive],
                       pair_e.max(2)[alive])


def test_pattern_pruned_model_runs_on_the_shifted_kernel_and_matches():
    from edgenn.compress.prune import pattern_prune
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="c2"),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    inits = {"w1": RNG.standard_normal((32, 3, 3, 3)).astype(np.float32),
             "b1": RNG.standard_normal(32).astype(np.float32),
             "w2": RNG.standard_normal((32, 32, 3, 3)).astype(np.float32),
             "b2": RNG.standard_normal(32).astype(np.float32)}
    model = make_model(nodes, [("x", np.float32, [1, 3, 20, 20])],
                       [("y", np.float32, [1, 32, 20, 20])], inits)
    g = edgenn.load(model.SerializeToString())
    rep = pattern_prune(g, k=4, patterns=4, connectivity=0.5)
    assert rep.layers["c1"][1] == 0                                  # the first kept dense
    n, z = rep.layers["c2"]
    assert z == n - 4 * round(0.5 * 32 * 32)
    x = {"x": RNG.standard_normal((1, 3, 20, 20)).astype(np.float32)}
    sess = edgenn.InferenceSession(g, tune="full")
    got = sess.run(None, x)[0]
    want = edgenn.InferenceSession(g, reference=True).run(None, x)[0]
    step = next(s for s in sess.plan.steps if s.node.name == "c2")
    assert any(name.startswith("spconv") for name in step.choice.times), step.choice.times
    # the bound every candidate is checked to before it is timed (select.CHECK_RTOL, of the
    # output's largest magnitude): the tuner may keep a dense kernel, Winograd F(4,3)
    # included, whose error on these ~190-sized outputs is ~1e-3 absolute
    from edgenn.runtime.select import CHECK_RTOL
    assert np.abs(got - want).max() <= CHECK_RTOL * np.abs(want).max(), step.choice.kernel


def test_tuning_cache_key_tells_sparsities_apart():
    from edgenn.compress.prune import magnitude_mask
    from edgenn.runtime.tunecache import node_key
    node = Node("Conv", ["x", "w"], ["y"], {"group": 1}, "c")
    x = TensorInfo("float32", (1, 16, 8, 8))

    def key(zeros):
        w = RNG.standard_normal((32, 16, 1, 1)).astype(np.float32)
        return node_key(node, [x, TensorInfo.of(np.where(magnitude_mask(w, zeros), w, 0))])
    keys = {z: key(z) for z in (0.0, 0.55, 0.95)}
    assert len(set(keys.values())) == 3
    assert key(0.95) == keys[0.95]          # other weights, same sparsity: the same entry
