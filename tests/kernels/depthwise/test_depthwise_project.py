"""The fused 3x3 depthwise conv + 1x1 conv (kernels/depthwise/depthwise_project.py, _dwproj.h: in
bands of output rows, the depthwise output never written out whole), both widths (AVX2 8
lanes, AVX-512F 16) native where the CPU has them and always SIMDe-emulated, and the
planner's fusion of such step pairs.

Bound from the arithmetic: the depthwise sum (bias + 9 taps) in float32 is within gamma_10
of the exact sum relative to t_mag = |bd| + sum |wd| |x|; Relu / Clip have slope 1; the 1x1
sum (bias + C products) within gamma_(C+1) relative to |bp| + sum |wp| (|t| + t_err), plus
the depthwise error carried through the weights (sum |wp| t_err)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import kernel_tables as tables
from support.helpers import check_planner_fuses

import edgenn
from edgenn.graph.ir import Node
from edgenn.kernels.depthwise import _dwproj, _dwproj_emu, depthwise_project
from edgenn.oplist import load_kernels
from edgenn.registry import REFERENCE, TensorInfo
from edgenn.runtime import fuse_steps

load_kernels()

EPS = np.finfo(np.float32).eps
PATHS = tables.paths(_dwproj.rows(), _dwproj_emu.rows())     # every row of _dwproj.h's table
# n, C, H, W, M
GEOMS = [(1, 32, 112, 112, 16),   # MobileNetV2's first block: 7 vectors a row, 2 blocks of 8
         (2, 5, 9, 7, 11),        # batch 2, a row narrower than a vector, a ragged block
         (1, 3, 1, 1, 1),         # one pixel: every tap but the centre is padding
         (1, 8, 1, 17, 9),        # one row: no row above or below
         (1, 17, 16, 16, 8),      # one full vector a row: both edges on it
         (1, 4, 5, 17, 24),       # 17: an edge vector of one pixel
         (1, 6, 33, 33, 7),       # odd rows: a last band of one row
         (1, 9, 4, 48, 40),       # an inner vector between the edges, 5 channel blocks
         (1, 2, 7, 65, 3),        # 5 vectors: 3 inner in one tile
         (1, 24, 15, 100, 32)]    # 7 vectors: 5 inner in tiles of 2 + 3, a 4-pixel edge
ACTS = [("", []), ("Relu", []), ("Clip", [-0.5, 1.5]), ("Clip", [0.0, 6.0])]


def _gamma(n):
    return n * EPS / (1 - n * EPS)


def _attrs(act, depthwise, c):
    if depthwise:
        return dict(group=c, strides=[1, 1], pads=[1] * 4, dilations=[1, 1],
                    kernel_shape=[3, 3], auto_pad="NOTSET", activation=act[0],
                    activation_params=act[1])
    return dict(group=1, strides=[1, 1], pads=[0] * 4, dilations=[1, 1], kernel_shape=[1, 1],
                auto_pad="NOTSET", activation=act[0], activation_params=act[1])


def _case(rng, geom, dact, pact):
    n, c, h, w, m = geom
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wd = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    bd = rng.standard_normal(c).astype(np.float32)
    wp = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    bp = rng.standard_normal(m).astype(np.float32)
    da, pa = _attrs(dact, True, c), _attrs(pact, False, c)
    conv = REFERENCE["Conv"]
    f64 = [v.astype(np.float64) for v in (x, wd, bd, wp, bp)]
    t = conv(da, f64[:3])[0]
    t_err = _gamma(10) * conv(dict(da, activation=""), [np.abs(v) for v in f64[:3]])[0]
    plain = dict(pa, activation="", activation_params=[])
    exact = conv(pa, [t, f64[3], f64[4]])[0]
    mag = conv(plain, [np.abs(t) + t_err, np.abs(f64[3]), np.abs(f64[4])])[0]
    carried = conv(plain, [t_err, np.abs(f64[3]), np.zeros(m)])[0]
    bound = _gamma(c + 1) * mag + carried + 8 * EPS * np.abs(exact) + 1e-30
    node = Node("DepthwiseProject", ["x", "wd", "bd", "wp", "bp", ""], ["y"],
                {"depthwise": da, "project": pa}, "pair")
    return node, [x, wd, bd, wp, bp, None], exact, bound


def _infos(ins):
    return [None if v is None else TensorInfo(v.dtype.name, v.shape, v if 0 < i < 5 else None)
            for i, v in enumerate(ins)]


def _run(node, ins, path, threads=1):
    lib, row = tables.lib_and_row(path, _dwproj, _dwproj_emu)
    out = [TensorInfo("float32", REFERENCE["DepthwiseProject"](node.attrs, ins)[0].shape)]
    assert depthwise_project._supports(node, _infos(ins), out)
    run = depthwise_project.prepare(node, _infos(ins), out, threads, row, lib=lib)
    y = np.full(out[0].shape, np.nan, np.float32)
    run(ins, [y])
    return y


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("gi", range(len(GEOMS)))
def test_matches_the_two_convs_within_the_sum_bound(path, gi):
    rng = np.random.default_rng(gi)
    node, ins, exact, bound = _case(rng, GEOMS[gi], ACTS[gi % 4], ACTS[(gi + 1) % 4])
    for threads in (1, 3):
        y = _run(node, ins, path, threads)
        err = np.abs(y.astype(np.float64) - exact)
        assert np.all(err <= bound), (GEOMS[gi], threads, float((err / bound).max()))


@pytest.mark.parametrize("path", PATHS)
def test_every_band_height_gives_the_same_bits(path):
    lib, row = tables.lib_and_row(path, _dwproj, _dwproj_emu)
    """Bands of 1 .. H + 1 rows (odd ones end on a single row), 1 or 2 threads: the sums
    per output do not depend on the banding."""
    rng = np.random.default_rng(5)
    c, h, w, m = 7, 9, 37, 10
    x = rng.standard_normal((c, h, w)).astype(np.float32)
    wd = rng.standard_normal((c, 9)).astype(np.float32)
    bd = rng.standard_normal(c).astype(np.float32)
    wpk, bpk = lib.pack(rng.standard_normal((m, c)).astype(np.float32),
                        rng.standard_normal(m).astype(np.float32), row)
    first = None
    for rows in range(1, h + 2):
        for threads in (1, 2):
            y = np.full((m, h, w), np.nan, np.float32)
            t = np.zeros((threads, lib.scratch(c, w, rows)), np.float32)
            lib.run(x, wd, bd, wpk, bpk, y, t, rows, "Clip", 0.0, 6.0, "Relu", 0.0, 0.0, row)
            first = y if first is None else first
            assert np.array_equal(y, first), (rows, threads)


@pytest.mark.parametrize("row", [r.name for r in _dwproj_emu.ROWS])
def test_a_channel_slip_fails_the_bound(row):
    """The emulated lane is not vacuous: two input channels of the 1x1 weights swapped in
    the packing."""
    rng = np.random.default_rng(3)
    node, ins, exact, bound = _case(rng, (1, 6, 5, 19, 9), ACTS[0], ACTS[0])
    wpk, bpk = _dwproj_emu.pack(ins[3].reshape(9, 6), ins[4], row)
    y = np.zeros((9, 5, 19), np.float32)
    t = np.zeros((1, _dwproj_emu.scratch(6, 19, 2)), np.float32)
    args = (ins[0][0], ins[1].reshape(6, 9), ins[2], wpk, bpk, y, t, 2, "", 0, 0, "", 0, 0,
            row)
    _dwproj_emu.run(*args)
    assert np.all(np.abs(y - exact[0]) <= bound[0])
    wpk[:, [1, 2]] = wpk[:, [2, 1]]
    _dwproj_emu.run(*args)
    assert not np.all(np.abs(y - exact[0]) <= bound[0])


def test_supports_exactly_what_the_kernel_computes():
    rng = np.random.default_rng(1)
    node, ins, exact, _ = _case(rng, (1, 4, 6, 6, 5), ACTS[2], ACTS[1])
    out = [TensorInfo("float32", exact.shape)]
    assert depthwise_project._supports(node, _infos(ins), out)
    changes = [("depthwise", "strides", [2, 2]), ("depthwise", "pads", [0] * 4),
               ("depthwise", "dilations", [2, 2]), ("depthwise", "activation", "LeakyRelu"),
               ("depthwise", "group", 1), ("project", "activation", "HardSwish"),
               ("project", "group", 2)]
    for half, key, value in changes:
        attrs = dict(node.attrs, **{half: dict(node.attrs[half], **{key: value})})
        bad = Node(node.op, node.inputs, node.outputs, attrs, node.name)
        assert not depthwise_project._supports(bad, _infos(ins), out), (half, key)
    infos = _infos(ins)
    residual = infos[:5] + [TensorInfo("float32", exact.shape)]
    assert not depthwise_project._supports(node, residual, out)
    dynamic = infos[:3] + [TensorInfo("float32", ins[3].shape)] + infos[4:]
    assert not depthwise_project._supports(node, dynamic, out)
    five = _case(rng, (1, 4, 6, 6, 5), ACTS[0], ACTS[0])[1]
    five[1] = rng.standard_normal((4, 1, 5, 5)).astype(np.float32)
    assert not depthwise_project._supports(node, _infos(five), out)


# -- the planner ---------------------------------------------------------------------------

def _block_model(tmp_path, also_output=False):
    """x (1, 3, 32, 40) -> stem 3x3 stride 2, 3 -> 16 + Clip -> depthwise 3x3 + Clip ->
    1x1 16 -> 8 (MobileNetV2's first block, smaller)"""
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
        ("w0", rng.standard_normal((16, 3, 3, 3)) * 0.3), ("b0", rng.standard_normal(16)),
        ("w1", rng.standard_normal((16, 1, 3, 3))), ("b1", rng.standard_normal(16)),
        ("w2", rng.standard_normal((8, 16, 1, 1)) * 0.2), ("lo", np.array(0.0)),
        ("hi", np.array(6.0)))]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["s"], kernel_shape=[3, 3],
                              pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["s", "lo", "hi"], ["s6"]),
             helper.make_node("Conv", ["s6", "w1", "b1"], ["d"], group=16, kernel_shape=[3, 3],
                              pads=[1] * 4),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "w2"], ["y"], kernel_shape=[1, 1])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 20])]
    if also_output:
        outs.append(helper.make_tensor_value_info("d6", TensorProto.FLOAT, [1, 16, 16, 20]))
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 32, 40])], outs, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "block.onnx"
    onnx.save(m, path)
    return str(path)


def _fused_steps(sess):
    return [s for s in sess.plan.steps if s.node.op == "DepthwiseProject"]


@pytest.mark.skipif(not _dwproj.rows(), reason="the fused kernel needs AVX2: not on this "
                    "CPU (its bodies run emulated above)")
def test_the_planner_fuses_where_measured_faster(tmp_path, monkeypatch):
    path = _block_model(tmp_path)
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 32, 40)).astype(np.float32)}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, x)[0]
    check_planner_fuses(monkeypatch, path, x, want, "DepthwiseProject", "depthwise_project_",
                        "d6", threads=(1, 2))     # d6: the depthwise output


def test_no_fusion_where_the_middle_is_an_output(tmp_path, monkeypatch):
    monkeypatch.setattr(fuse_steps, "fusion_pays", lambda first, second, fused:
                        fused.kernel != "reference")
    path = _block_model(tmp_path, also_output=True)
    sess = edgenn.InferenceSession(path, tune="full")
    assert not _fused_steps(sess)
    x = {"x": np.ones((1, 3, 32, 40), np.float32)}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, x)
    for got, ref in zip(sess.run(None, x), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_candidates_name_the_pair_by_its_first_conv():
    from edgenn.runtime.fuse_steps import conv_pair_candidates as find
    dw = Node("Conv", ["x", "w1", "b1"], ["t"], {"group": 16}, "dw")
    pw = Node("Conv", ["t", "w2", "b2"], ["y"], {}, "pw")
    ((k, (fused, second)),) = find([dw, pw], {}, ["y"]).items()
    assert fused.op == "DepthwiseProject" and second is pw
    assert fused.attrs == {"depthwise": {"group": 16}, "project": {}}
    expand = Node("Conv", ["x", "w1"], ["t"], {}, "e")
    depthwise = Node("Conv", ["t", "w2"], ["y"], {"group": 16}, "d")
    ((_, (fused, _)),) = find([expand, depthwise], {}, ["y"]).items()
    assert fused.op == "ExpandDepthwise"
