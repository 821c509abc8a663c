"""The fused 1x1 conv + depthwise conv (kernels/depthwise/expand_depthwise.py: the expansion
computed straight into the c8 / c16 kernels' padded plane, _dwc_vec.h's dwc_expand), on
every path (native where the CPU has the width, SIMDe-emulated, portable C), and the
planner's fusion of such step pairs (runtime/fuse_steps.py).

Bound from the arithmetic (as tests/kernels/depthwise/test_dwc.py's): the expansion's K products and bias
summed in float32 are within gamma_(K+1) of the exact sum relative to
e_mag = |b1| + sum |w1| |x|, times the activation's slope; the depthwise sums within
gamma_(T+2) relative to |b2| + sum |w2| (|e| + e_err) + |z|, plus the expansion's error
carried through the taps (sum |w2| e_err), times the second activation's slope."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.helpers import check_planner_fuses, nan_interior_planes
from support import kernel_tables as tables

import edgenn
from edgenn.graph.ir import Node
from edgenn.kernels.depthwise import _dwc8, _dwc8_emu, expand_depthwise
from edgenn.oplist import load_kernels
from edgenn.registry import REFERENCE, TensorInfo
from edgenn.runtime import fuse_steps

load_kernels()

EPS = np.finfo(np.float32).eps
PATHS = tables.paths(_dwc8.rows(), _dwc8_emu.rows())     # every row of _dwc8.h's table
# n, K (1x1 inputs), C (expanded), h, w, depthwise k, stride, pad, dilation
GEOMS = [(1, 16, 96, 20, 23, 3, 2, 1, 1),   # MobileNetV2's stride-2 block, a 12-pixel tail
         (2, 5, 37, 9, 7, 3, 1, 1, 1),      # batch 2, a tail group of 5 (8 lanes) / 5 (16)
         (1, 24, 48, 14, 14, 3, 1, 1, 1),   # 14 = 12 + a 2-pixel tile
         (1, 3, 16, 4, 30, 3, 2, 1, 1),     # wide, short rows of the 1x1
         (1, 1, 8, 1, 1, 3, 1, 1, 1),       # one pixel, K = 1
         (1, 40, 20, 13, 11, 5, 1, 2, 1),   # 5x5
         (1, 7, 33, 12, 12, 3, 1, 2, 2),    # dilation 2
         (1, 12, 24, 15, 15, 7, 3, 3, 1),   # 7x7 stride 3
         (1, 20, 16, 5, 3, 3, 1, 1, 1),     # rows narrower than a vector: flat output
         (1, 64, 17, 3, 40, 3, 2, 1, 1)]    # K = 64, 40 = 3 x 12 + 4
EXPAND_ACTS = [("", []), ("Relu", []), ("Clip", [0.0, 6.0]), ("HardSwish", []),
               ("HardSigmoid", [0.2, 0.5]), ("LeakyRelu", [2.5])]
DW_ACTS = [("Clip", [0.0, 6.0]), ("", []), ("Relu", []), ("HardSwish", []), ("Sigmoid", []),
           ("LeakyRelu", [0.1])]
SLOPE = {"HardSwish": 1.5, "LeakyRelu": 2.5, "HardSigmoid": 0.2, "Sigmoid": 0.25}


def _gamma(n):
    return n * EPS / (1 - n * EPS)


def _case(rng, geom, act1, act2, residual):
    n, k, c, h, w, kd, s, p, d = geom
    x = rng.standard_normal((n, k, h, w)).astype(np.float32)
    w1 = (rng.standard_normal((c, k, 1, 1)) / np.sqrt(k)).astype(np.float32)
    b1 = rng.standard_normal(c).astype(np.float32)
    w2 = rng.standard_normal((c, 1, kd, kd)).astype(np.float32)
    b2 = rng.standard_normal(c).astype(np.float32)
    ea = dict(group=1, strides=[1, 1], pads=[0] * 4, dilations=[1, 1], kernel_shape=[1, 1],
              auto_pad="NOTSET", activation=act1[0], activation_params=act1[1])
    da = dict(group=c, strides=[s, s], pads=[p] * 4, dilations=[d, d], kernel_shape=[kd, kd],
              auto_pad="NOTSET", activation=act2[0], activation_params=act2[1])
    conv = REFERENCE["Conv"]
    f64 = [v.astype(np.float64) for v in (x, w1, b1, w2, b2)]
    e = conv(ea, f64[:3])[0]
    e_err = SLOPE.get(act1[0], 1.0) * _gamma(k + 1) * conv(
        dict(ea, activation=""), [np.abs(v) for v in f64[:3]])[0]
    plain = dict(da, activation="", activation_params=[])
    pre = conv(plain, [e, f64[3], f64[4]])[0]
    mag = conv(plain, [np.abs(e) + e_err, np.abs(f64[3]), np.abs(f64[4])])[0]
    carried = conv(plain, [e_err, np.abs(f64[3]), np.zeros(c)])[0]
    z = rng.standard_normal(pre.shape).astype(np.float32) if residual else None
    if residual:
        pre, mag = pre + z, mag + np.abs(z)
    exact = REFERENCE["Conv"](dict(da, kernel_shape=[1, 1], strides=[1, 1], pads=[0] * 4,
                                   dilations=[1, 1], group=c),
                              [pre, np.ones((c, 1, 1, 1)), np.zeros(c)])[0]
    t = kd * kd + 2
    bound = SLOPE.get(act2[0], 1.0) * (_gamma(t) * mag + carried) + 8 * EPS * np.abs(exact) \
        + 1e-30
    ins = [x, w1, b1, w2, b2] + ([z] if residual else [None])
    node = Node("ExpandDepthwise", ["x", "w1", "b1", "w2", "b2", "z" if residual else ""],
                ["y"], {"expand": ea, "depthwise": da}, "pair")
    return node, ins, exact, bound


def _infos(ins):
    return [None if v is None else TensorInfo(v.dtype.name, v.shape, v if 0 < i < 5 else None)
            for i, v in enumerate(ins)]


def _run(node, ins, path, threads=1, infos=None, split_rows=False):
    lib, row = tables.lib_and_row(path, _dwc8, _dwc8_emu)
    infos = infos or _infos(ins)
    n, _, h, w = ins[0].shape
    out = REFERENCE["ExpandDepthwise"](node.attrs, ins)[0]
    assert expand_depthwise._supports(node, infos, [TensorInfo("float32", out.shape)])
    run = expand_depthwise.prepare(node, infos, [TensorInfo("float32", out.shape)], threads,
                                   0, lib=lib, split_rows=split_rows, row=row)
    y = np.full(out.shape, np.nan, np.float32)
    run(ins, [y])
    return y


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("gi", range(len(GEOMS)))
def test_matches_the_two_convs_within_the_sum_bound(path, gi):
    geom = GEOMS[gi]
    rng = np.random.default_rng(gi)
    node, ins, exact, bound = _case(rng, geom, EXPAND_ACTS[gi % len(EXPAND_ACTS)],
                                    DW_ACTS[gi % len(DW_ACTS)], residual=gi % 3 == 1)
    for threads in (1, 3):
        y = _run(node, ins, path, threads)
        err = np.abs(y.astype(np.float64) - exact)
        assert np.all(err <= bound), (geom, threads, float((err / bound).max()))


# tall planes for the rows split: flat bands (W < 16 / 8), row-wise ones, stride 2, 5x5,
# dilation, batch 2
TALL_GEOMS = [(1, 24, 40, 34, 7, 3, 1, 1, 1), (1, 16, 33, 40, 12, 3, 2, 1, 1),
              (2, 5, 17, 19, 23, 5, 1, 2, 1), (1, 9, 20, 26, 9, 3, 1, 2, 2),
              (1, 12, 48, 17, 16, 3, 1, 1, 1)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("split_rows", [True, False], ids=["rows", "groups"])
def test_threads_give_the_one_thread_bits(path, split_rows, monkeypatch):
    # threads taking bands of output rows, or even shares of the (group, row) pairs (a
    # group's rows split where shares meet), expand the rows each part reads (the ones two
    # parts share twice) and compute every output as one thread does; the planes'
    # interiors start as NaN, so a row a part reads and did not expand shows
    rng = np.random.default_rng(7)
    for geom in TALL_GEOMS + GEOMS:
        node, ins, _, _ = _case(rng, geom, ("Clip", [0.0, 6.0]), ("Relu", []), True)
        want = _run(node, ins, path)
        oh = want.shape[2]
        nan_interior_planes(monkeypatch, expand_depthwise)
        for threads in sorted({2, 3, oh}):
            got = _run(node, ins, path, threads,
                       split_rows=split_rows)
            np.testing.assert_array_equal(got, want, str((geom, threads)))
        monkeypatch.undo()


@pytest.mark.parametrize("act1", EXPAND_ACTS, ids=[a for a, _ in EXPAND_ACTS])
@pytest.mark.parametrize("act2", DW_ACTS[:3], ids=[a or "none" for a, _ in DW_ACTS[:3]])
def test_every_expansion_activation(act1, act2):
    rng = np.random.default_rng(7)
    node, ins, exact, bound = _case(rng, (1, 9, 40, 11, 13, 3, 2, 1, 1), act1, act2, False)
    for path in PATHS:
        y = _run(node, ins, path)
        assert np.all(np.abs(y - exact) <= bound), path


@pytest.mark.parametrize("path", [p for p in PATHS if p.endswith(tables.EMULATED)])
def test_a_lane_slip_in_the_expansion_fails_the_bound(path):
    """The emulated lane is not vacuous: two expanded channels' weights swapped."""
    rng = np.random.default_rng(3)
    node, ins, exact, bound = _case(rng, GEOMS[2], EXPAND_ACTS[0], DW_ACTS[1], False)
    infos = _infos(ins)
    w1 = ins[1].copy()
    w1[[0, 1]] = w1[[1, 0]]
    infos[1] = TensorInfo("float32", w1.shape, w1)
    y = _run(node, ins, path, infos=infos)
    assert not np.all(np.abs(y - exact) <= bound)


def test_kernels_take_only_what_they_compute():
    rng = np.random.default_rng(1)
    node, ins, _, _ = _case(rng, GEOMS[0], ("Clip", [0.0, 6.0]), ("Clip", [0.0, 6.0]), False)
    out = [TensorInfo("float32", REFERENCE["ExpandDepthwise"](node.attrs, ins)[0].shape)]
    assert expand_depthwise._supports(node, _infos(ins), out)
    for change in (dict(strides=[2, 2]), dict(pads=[1, 1, 1, 1]), dict(group=2),
                   dict(activation="Sigmoid"), dict(activation="Gelu")):
        bad = Node(node.op, node.inputs, node.outputs,
                   dict(node.attrs, expand=dict(node.attrs["expand"], **change)), node.name)
        assert not expand_depthwise._supports(bad, _infos(ins), out), change
    dense = Node(node.op, node.inputs, node.outputs,   # the second conv not depthwise
                 dict(node.attrs, depthwise=dict(node.attrs["depthwise"], group=1)), node.name)
    assert not expand_depthwise._supports(dense, _infos(ins), out)


# -- the planner ---------------------------------------------------------------------------

def _block_model(tmp_path, also_output=False, second_reader=False):
    """x (1, 8, 16, 16) -> 1x1 8 -> 48 + Clip -> depthwise 3x3 stride 2 + Clip -> 1x1 -> 8"""
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
        ("w1", rng.standard_normal((48, 8, 1, 1)) * 0.3), ("b1", rng.standard_normal(48)),
        ("w2", rng.standard_normal((48, 1, 3, 3))), ("b2", rng.standard_normal(48)),
        ("w3", rng.standard_normal((8, 48, 1, 1)) * 0.2), ("lo", np.array(0.0)),
        ("hi", np.array(6.0)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["e"], kernel_shape=[1, 1]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
             helper.make_node("Conv", ["e6", "w2", "b2"], ["d"], group=48, kernel_shape=[3, 3],
                              pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "w3"], ["y"], kernel_shape=[1, 1])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])]
    if also_output:
        outs.append(helper.make_tensor_value_info("e6", TensorProto.FLOAT, [1, 48, 16, 16]))
    if second_reader:
        nodes.append(helper.make_node("ReduceMean", ["e6"], ["m"], keepdims=1))
        outs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 1, 1, 1]))
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 16, 16])], outs, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "block.onnx"
    onnx.save(m, path)
    return str(path)


def _always(first, second, fused):
    """fusion_pays, were the fused kernel always the faster"""
    return fused.kernel != "reference"


def _fused_steps(sess):
    return [s for s in sess.plan.steps if s.node.op == "ExpandDepthwise"]


def test_the_planner_fuses_where_measured_faster(tmp_path, monkeypatch):
    path = _block_model(tmp_path)
    x = {"x": np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    want = edgenn.InferenceSession(path, reference=True).run(None, x)[0]
    check_planner_fuses(monkeypatch, path, x, want, "ExpandDepthwise", "expand_depthwise_c",
                        "e6")                     # e6: the expanded tensor


def test_no_fusion_unmeasured_or_where_the_middle_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(fuse_steps, "fusion_pays", _always)
    for kwargs in (dict(also_output=True), dict(second_reader=True)):
        path = _block_model(tmp_path, **kwargs)
        sess = edgenn.InferenceSession(path, tune="full")
        assert not _fused_steps(sess), kwargs
        x = {"x": np.ones((1, 8, 16, 16), np.float32)}
        ref = edgenn.InferenceSession(path, reference=True).run(None, x)
        for got, want in zip(sess.run(None, x), ref):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_fusion_pays_only_on_measured_times():
    from edgenn.runtime.fuse_steps import fusion_pays
    from edgenn.runtime.select import Choice

    def c(kernel, t):
        return Choice(kernel, None, times={} if t is None else {kernel: t})
    assert fusion_pays(c("a", 3.0), c("b", 2.0), c("f", 4.0))
    assert fusion_pays(c("a", 3.0), c("b", 2.0), c("f", 5.1))       # a tie: FUSED_MARGIN
    assert not fusion_pays(c("a", 3.0), c("b", 2.0), c("f", 5.2))
    assert not fusion_pays(c("a", None), c("b", 2.0), c("f", 1.0))      # tuning off
    assert not fusion_pays(c("a", 3.0), c("b", 2.0), c("reference", 1.0))


def test_fusion_is_decided_on_the_pair_and_fused_step_timed_side_by_side(tmp_path,
                                                                         monkeypatch):
    """The three steps are re-timed in the same rounds (select.time_side_by_side) and
    those times decide, whatever their own choose() measured; the verdict's times are
    cached per CPU, and a cached plan reuses them without timing."""
    from edgenn.runtime import select, tunecache
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path / "cache"))
    path = _block_model(tmp_path)
    calls = []

    def timed(fused_s):
        def fake(pair, fused, infos, choices, threads):
            calls.append([c.kernel for c in choices])
            return {"first": 1.0, "second": 1.0, "fused": fused_s}
        return fake
    monkeypatch.setattr(select, "_time_pair", timed(2.5))        # slower than the pair
    assert not _fused_steps(edgenn.InferenceSession(path, tune="full"))
    assert len(calls) == 1 and calls[0][2].startswith("expand_depthwise_c")
    monkeypatch.setattr(select, "_time_pair", timed(1.5))
    assert _fused_steps(edgenn.InferenceSession(path, tune="full"))
    tunecache._loaded.clear()                                     # as a new process
    monkeypatch.setattr(select, "_time_pair", timed(9.0))
    assert _fused_steps(edgenn.InferenceSession(path, tune="cached"))  # the cached verdict
    assert len(calls) == 2


def test_side_by_side_times_steps_their_choose_did_not(tmp_path, monkeypatch):
    """A step with one capable kernel is bound untimed by choose(); the side-by-side rounds
    time it anyway (such pairs were never fused: the AVX2 row-split plan had one depthwise
    kernel). Tuning off, or a reference step: nothing is timed."""
    from edgenn.runtime import select
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(select, "_time_pair", lambda *a: {"first": 1.0, "second": 2.0,
                                                          "fused": 2.5})
    a = Node("Conv", ["x", "w1"], ["t"], {}, "a")
    b = Node("Conv", ["t", "w2"], ["y"], {}, "b")
    fused = Node("ExpandDepthwise", ["x", "w1", "", "w2", "", ""], ["y"], {}, "a+b")
    info = lambda names: [TensorInfo("float32", (1, 4)) if n else None for n in names]  # noqa: E731
    untimed = [select.Choice(k, None) for k in ("conv_k", "dw_k", "fused_k")]
    got = select.time_side_by_side((a, b), fused, info, untimed, select.Tuner(mode="full"))
    assert [c.times for c in got] == [{"conv_k": 1.0}, {"dw_k": 2.0}, {"fused_k": 2.5}]
    assert fuse_steps.fusion_pays(*got)
    assert select.time_side_by_side((a, b), fused, info, untimed,
                                    select.Tuner(mode="off")) is None
    ref = untimed[:2] + [select.Choice("reference", None)]
    assert select.time_side_by_side((a, b), fused, info, ref, select.Tuner(mode="full")) is None


def test_side_by_side_rounds_chain_the_pair_through_its_middle(tmp_path):
    """_time_pair: the first step writes the middle tensor the second reads, each gets
    its own node's inputs (x, w1, b1; middle, w2, b2), the fused step all six, and the
    three are timed."""
    from edgenn.runtime import select
    from edgenn.runtime.plan import specialize
    graph = edgenn.load(_block_model(tmp_path))
    nodes, infos = specialize(graph, {"x": (1, 8, 16, 16)})
    a, b = [n for n in nodes if n.op == "Conv"][:2]    # the expansion, the depthwise conv
    ((_, (fused, _)),) = fuse_steps.conv_pair_candidates([a, b], {}, list(b.outputs)).items()
    seen = {}

    def recorder(role):
        def run(inputs, outputs):
            seen[role] = (inputs, outputs)
        return select.Choice(role, run, times={role: 1.0})
    info = lambda names: [infos[i] if i else None for i in names]    # noqa: E731
    times = select._time_pair((a, b), fused, info, [recorder(r) for r in
                                                    ("first", "second", "fused")], 1)
    assert set(times) == {"first", "second", "fused"} and min(times.values()) > 0
    (x, w1, b1), (middle,) = seen["first"]
    assert seen["second"][0][0] is middle and middle.shape == (1, 48, 16, 16)
    assert [i is v for i, v in zip(seen["second"][0][1:], seen["fused"][0][3:5])] == [1, 1]
    assert seen["second"][1][0] is seen["fused"][1][0]               # both write y
    assert w1 is seen["fused"][0][1] and len(seen["fused"][0]) == 6
    np.testing.assert_array_equal(x, seen["fused"][0][0])


def test_candidates_are_conv_pairs_whose_middle_one_step_reads():
    from edgenn.runtime.fuse_steps import conv_pair_candidates as find
    a = Node("Conv", ["x", "w1", "b1"], ["t"], {}, "a")
    b = Node("Conv", ["t", "w2", "b2"], ["y"], {}, "b")
    ((k, (fused, second)),) = find([a, b], {}, ["y"]).items()
    assert k == 0 and second is b and fused.outputs == ["y"]
    assert fused.inputs == ["x", "w1", "b1", "w2", "b2", ""]
    assert not find([Node("Conv", ["x", "w1", "b1", "r"], ["t"], {}, "a"), b], {}, ["y"])
    assert not find([a, b], {}, ["y", "t"])                              # t an output
    assert not find([a, b, Node("Relu", ["t"], ["u"])], {}, ["y", "u"])  # t read twice
    assert not find([a, b, Node("Relu", ["tv"], ["u"])], {"tv": "t"}, ["y", "u"])  # a view
    assert not find([a, Node("Relu", ["t"], ["y"])], {}, ["y"])          # not a conv


def test_a_fused_step_probes_as_its_two_nodes(tmp_path, monkeypatch):
    """The scalable families' layer probes (scale/probe.py) find a fused step's nodes."""
    from edgenn.scale import probe
    monkeypatch.setattr(fuse_steps, "fusion_pays", _always)
    path = _block_model(tmp_path)
    graph = edgenn.load(path)
    (step,) = _fused_steps(edgenn.InferenceSession(graph, tune="full"))
    one = probe.layer_graph(graph, step.node.name, {"x": (1, 8, 16, 16)})
    assert [n.op for n in one.nodes] == ["Conv", "Conv"]
    assert [v.name for v in one.inputs] == ["x"] and [v.name for v in one.outputs] == \
        [step.node.outputs[0]]
    with pytest.raises(KeyError):
        probe.layer_graph(graph, "no+such", {"x": (1, 8, 16, 16)})


def test_a_malformed_fused_node_is_a_graph_error():
    from edgenn.errors import GraphError
    from edgenn.graph.infer import infer_node
    x, w = TensorInfo("float32", (1, 4, 5, 5)), TensorInfo("float32", (8, 4, 1, 1))
    for attrs, inputs in (({"expand": 3, "depthwise": {}}, ["x", "w", "", "w", "", ""]),
                          ({}, ["x", "w", "", "w", "", ""]),
                          ({"expand": {}, "depthwise": {}}, ["x"])):
        node = Node("ExpandDepthwise", inputs, ["y"], attrs, "bad")
        with pytest.raises(GraphError, match="ExpandDepthwise"):
            infer_node(node, [x, w, None, w, None, None][:len(inputs)], fold=False)
