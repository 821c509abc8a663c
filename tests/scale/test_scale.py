"""Scalable model families (edgenn/scale, graph/family.py, `edgenn scale`, issue #12).

- factors: resolution only where the outputs keep their shape (a classifier after global
  pooling scales, a fully convolutional net does not), data resized with the input, each
  factor changing what it should (pruned channels, zeros, int8 ops);
- the search (digits CNN, its real held-out digits): the front is exactly the
  non-dominated candidates, members are front points spread over the range, a second run
  over the same inputs measures nothing and picks the same members;
- the family file: members read back with the figures they were measured with (the
  accuracy of every member recomputed from its session), shared tensors stored once, the
  same family saves byte-identically, corrupt or truncated files are named errors;
- the probe: a probe layer alone computes what it computes inside its model; predictions
  scale class by class; `choose` honours latency, accuracy and size targets.
"""
import json

import numpy as np
import pytest
from support.helpers import helper, make_model, run_cli
from support.quant_data import digits

import edgenn
from edgenn.cli import EXIT_OK, EXIT_REJECTED
from edgenn.demo import DEMO_MODEL
from edgenn.errors import ModelFormatError
from edgenn.graph import family as ennf
from edgenn.graph import format as enn
from edgenn.quant.data import Batches
from edgenn.scale import factors as F
from edgenn.scale import probe
from edgenn.scale.build import build
from edgenn.scale.family import load_family
from edgenn.scale.search import Candidate, pareto, spread

RNG = np.random.default_rng(12)


def _cnn(head="pool", size=32):
    """x (1, 3, size, size) -> conv 3x3 s2 -> relu -> 1x1 -> relu -> 3x3 -> relu -> 1x1
    -> head: "pool" GAP -> FC (10 classes); "dense" the (1, 16, size/2, size/2) map;
    "flatten" Flatten -> FC (tied to the input size)."""
    w = lambda *s: (RNG.standard_normal(s) * (2.0 / np.prod(s[1:])) ** 0.5).astype(np.float32)
    h = size // 2
    inits = {"w1": w(8, 3, 3, 3), "b1": np.zeros(8, np.float32), "w2": w(16, 8, 1, 1),
             "b2": np.zeros(16, np.float32), "w3": w(16, 16, 3, 3),
             "b3": np.zeros(16, np.float32), "w4": w(16, 16, 1, 1),
             "b4": np.zeros(16, np.float32), "wf": w(10, 16), "bf": np.zeros(10, np.float32),
             "wl": w(10, 16 * h * h)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1] * 4),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"])]
    if head == "pool":
        nodes += [helper.make_node("GlobalAveragePool", ["c4"], ["p"]),
                  helper.make_node("Flatten", ["p"], ["f"]),
                  helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
        out = ("y", np.float32, [1, 10])
    elif head == "flatten":
        nodes += [helper.make_node("Flatten", ["c4"], ["f"]),
                  helper.make_node("Gemm", ["f", "wl", "bf"], ["y"], transB=1)]
        out = ("y", np.float32, [1, 10])
    else:
        nodes[-1].output[0] = "y"
        out = ("y", np.float32, [1, 16, h, h])
    return edgenn.load(make_model(nodes, [("x", np.float32, [1, 3, size, size])], [out],
                                  inits).SerializeToString())


def _images(n, size=32):
    """Smooth random images (low-frequency noise upsampled), one batch of n."""
    small = RNG.standard_normal((n, 3, size // 8, size // 8)).astype(np.float32)
    return np.ascontiguousarray(small.repeat(8, 2).repeat(8, 3))


def test_resolution_only_where_the_outputs_keep_their_shape():
    g = _cnn()
    assert F.scaled_inputs(g, 0.75) == {"x": (1, 3, 24, 24)}       # multiple of 8
    assert F.scaled_inputs(g, 1.0) == {}
    levels = F.applicable(g)
    assert levels["resolution"][0] == 1.0 and len(levels["resolution"]) >= 3
    # a head tied to the input size (Flatten -> FC) cannot take another resolution
    assert F.scaled_inputs(_cnn("flatten"), 0.75) is None
    assert F.applicable(_cnn("flatten"))["resolution"] == (1.0,)
    # a dense map (a detector's) may: it is resized back for fidelity
    dense = _cnn("dense")
    assert F.scaled_inputs(dense, 0.5) == {"x": (1, 3, 16, 16)}
    half = F.apply(dense, F.Factors(resolution=0.5), Batches([{"x": _images(2)}]))
    assert half.outputs[0].shape == (1, 16, 8, 8)                   # declared as it runs
    assert edgenn.InferenceSession(half).run(None, {"x": _images(1, 16)})[0].shape == \
        (1, 16, 8, 8)
    small = np.ones((1, 16, 8, 8), np.float32)
    (back,) = F.resize_outputs([small], [np.zeros((1, 16, 16, 16), np.float32)])
    assert back.shape == (1, 16, 16, 16) and np.allclose(back, 1.0)
    # dynamic dims are bound to the data's before any scaling
    from edgenn.graph.ir import ValueInfo
    free = edgenn.graph.ir.Graph(g.nodes, [ValueInfo("x", "float32", ("n", 3, "h", "w"))],
                                 g.outputs, g.consts, g.meta)
    bound = F.bind_to_data(free, Batches([{"x": _images(2)}]))
    assert bound.inputs[0].shape == ("n", 3, 32, 32)
    # the digits CNN's 8x8 input is too small to scale: one level only
    assert F.applicable(edgenn.load(DEMO_MODEL))["resolution"] == (1.0,)


def test_factors_change_what_they_should():
    g = _cnn()
    calib = Batches([{"x": _images(8)}])
    m = F.apply(g, F.Factors(resolution=0.75, width=0.5, precision="int8"), calib)
    assert m.inputs[0].shape == (1, 3, 24, 24)
    assert any(n.op in ("QConv", "QGemm") for n in m.nodes)
    assert m.meta["entropy_coding"] == "zstd" and m.meta["scale_factors"]["width"] == 0.5
    kept = [np.asarray(m.consts[n.inputs[3]]).shape[0] for n in m.nodes if n.op == "QConv"]
    assert min(kept) < 16                                          # channels were removed
    out = edgenn.InferenceSession(m).run(None, {"x": _images(1, 24)})[0]
    assert out.shape == (1, 10)
    s = F.apply(g, F.Factors(sparsity="sparse"), calib)
    w = [s.consts[n.inputs[1]] for n in s.nodes if n.op == "Conv"
         and s.consts[n.inputs[1]].shape[2:] == (1, 1)]
    assert len(w) == 2 and not (w[0] == 0).any()                   # the first kept dense
    assert abs(float((w[1] == 0).mean()) - F.SPARSE_RATIO) < 0.05
    assert g.inputs[0].shape == (1, 3, 32, 32)                     # the source unchanged
    resized = F.resize_feeds(calib, {"x": (1, 3, 16, 16)}, g.inputs)
    assert resized.feeds[0]["x"].shape == (8, 3, 16, 16)
    # a constant image stays constant under the bilinear resize
    const = F.resize_feeds(Batches([{"x": np.full((2, 3, 32, 32), 0.5, np.float32)}]),
                           {"x": (1, 3, 24, 24)}, g.inputs)
    assert np.allclose(const.feeds[0]["x"], 0.5)


def _cand(lat, fid):
    from edgenn.scale.measure import Measurement
    return Candidate(F.Factors(width=lat), Measurement(lat, fid, fid, None, None, 1, {}, {}))


def test_fidelity_of_sequences_and_maps():
    from edgenn.quant.metrics import compare, fidelity
    from edgenn.scale.measure import mask_iou
    ref = [[np.array([[[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]], np.float32)]]
    out = [[np.array([[[0.7, 0.3], [0.6, 0.4], [0.9, 0.1]]], np.float32)]]
    assert fidelity(compare(ref, out))["top1"] == pytest.approx(2 / 3)   # per position
    a = np.zeros((1, 1, 4, 4), np.float32)
    a[..., :2, :] = 0.9                                             # 8 text pixels
    b = np.zeros_like(a)
    b[..., 1:3, :] = 0.9                                            # 8, 4 shared
    assert mask_iou([[a]], [[b]]) == pytest.approx(4 / 12)
    assert mask_iou([[a * 0]], [[b]]) is None                      # no text in the data


def _recognizer(width=64, fixed_height=False):
    """A CTC-recognizer-shaped net: x (1, 3, 16, width) -> conv 3x3 s2 -> relu -> mean over
    H -> (1, T = width / 2, 8) -> MatMul (8 -> 5 classes, class 0 the blank) -> Softmax.
    fixed_height: an 8 x 1 average pool first, so H below 16 is refused (as SVTR's)."""
    w = lambda *s: (RNG.standard_normal(s) * (2.0 / np.prod(s[1:])) ** 0.5).astype(np.float32)
    pool = [helper.make_node("AveragePool", ["r0"], ["r1"], kernel_shape=[8, 1])]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r0" if fixed_height else "r1"]),
             *(pool if fixed_height else []),
             helper.make_node("ReduceMean", ["r1"], ["m"], axes=[2], keepdims=0),  # (1, 8, T)
             helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1]),          # (1, T, 8)
             helper.make_node("MatMul", ["t", "wc"], ["l"]),
             helper.make_node("Softmax", ["l"], ["y"], axis=-1)]
    return edgenn.load(make_model(
        nodes, [("x", np.float32, [1, 3, 16, width])], [("y", np.float32, [1, width // 2, 5])],
        {"w1": w(8, 3, 3, 3), "b1": np.zeros(8, np.float32), "wc": w(8, 5) * 4},
        opset=13).SerializeToString())


def test_a_recognizers_sequence_scales_with_its_input():
    g = _recognizer()
    assert F.scaled_inputs(g, 0.5) == {"x": (1, 3, 8, 32)}
    half = F.apply(g, F.Factors(resolution=0.5), Batches([{"x": _images(2, 64)[..., :16, :]}]))
    assert half.outputs[0].shape == (1, 16, 5)                     # declared as it runs
    y = edgenn.InferenceSession(half).run(None, {"x": _images(1, 64)[..., :8, :32]})[0]
    assert y.shape == (1, 16, 5)
    (back,) = F.resize_outputs([y], [np.zeros((1, 32, 5), np.float32)])
    assert back.shape == (1, 32, 5)
    assert np.allclose(back[:, ::2].sum(-1), 1.0, atol=1e-5)       # rows stay distributions
    # a sequence of another length is only rescaled along T: other changes are refused
    assert not F.rescaled((1, 32, 5), (1, 16, 4)) and F.rescaled((1, 32, 5), (1, 16, 5))
    # where the graph fixes H, W alone scales
    assert F.scaled_inputs(_recognizer(fixed_height=True), 0.5) == {"x": (1, 3, 16, 32)}


def test_text_agreement_reads_ctc_strings():
    from edgenn.scale.measure import ctc_strings, edit_distance, objective, text_agreement

    def scores(*paths):              # one-hot (N, T, 4) scores of the class paths
        return np.stack([np.eye(4, dtype=np.float32)[list(p)] for p in paths])
    # repeats merge, blanks (0) separate and drop: 1 1 0 1 2 2 -> (1, 1, 2)
    assert ctc_strings(scores((1, 1, 0, 1, 2, 2), (0, 0, 0, 0, 0, 3))) == [(1, 1, 2), (3,)]
    assert edit_distance((1, 2, 3), (1, 3)) == 1 and edit_distance((), (2, 2)) == 2
    assert edit_distance((1, 2, 3, 4), (2, 1, 3, 5)) == 3
    ref = [[scores((1, 0, 2, 3))], [scores((3, 3, 0, 3))]]          # "123", "33"
    same_text = [[scores((1, 1, 2, 3, 3, 0))], [scores((3, 0, 3))]]  # other T, same reading
    assert text_agreement(ref, same_text) == 1.0
    one_wrong = [[scores((1, 0, 2, 2))], [scores((3, 0, 3, 0))]]    # "12", "33"
    assert text_agreement(ref, one_wrong) == pytest.approx(1 - 1 / 5)
    assert text_agreement([[np.zeros((1, 4), np.float32)]], one_wrong) is None  # not CTC
    assert objective("text", None, None, 0.5, None, 0.8) == 0.8
    with pytest.raises(ValueError, match="CTC"):
        objective("text", None, None, 0.5)


def test_pareto_and_spread():
    pts = [_cand(1, 0.5), _cand(2, 0.7), _cand(2.5, 0.6), _cand(3, 0.9), _cand(4, 0.9),
           _cand(8, 0.95), _cand(16, 0.99)]
    front = pareto(pts)
    assert [c.m.latency_ms for c in front] == [1, 2, 3, 8, 16]
    for c in pts:      # every point off the front is dominated by one on it
        if c not in front:
            assert any(f.m.latency_ms <= c.m.latency_ms and f.m.fidelity >= c.m.fidelity
                       for f in front)
    three = spread(front, 3, None)
    assert [c.m.latency_ms for c in three] == [1, 3, 16]           # ends + the log-middle
    ranged = spread(front, 6, (2.5, 10))
    assert [c.m.latency_ms for c in ranged] == [2, 3, 8]           # one below lo, then inside
    assert [c.m.latency_ms for c in spread(front, 1, None)] == [16]
    ties = [_cand(2, 0.5 + k / 100) for k in range(5)]               # equal latencies
    assert len(spread(ties, 3, None)) == 2                          # ends only, no hang


@pytest.fixture(scope="module")
def digits_family(tmp_path_factory):
    calib, held, labels = digits()
    d = tmp_path_factory.mktemp("family")
    out = str(d / "digits.ennf")
    result, doc = build(DEMO_MODEL, calib, {"image": held, "labels": labels}, output=out,
                        budget=8, cache_root=str(d / "cache"), rounds=5)
    return out, result, doc, (calib, held, labels), d


def test_search_front_members_and_cache(digits_family):
    out, result, doc, (calib, held, labels), d = digits_family
    assert result.measured == len(result.candidates) and result.cached == 0
    assert 2 <= len(result.candidates) <= 8
    keys = [c.factors.key() for c in result.candidates]
    assert len(set(keys)) == len(keys)                             # none measured twice
    front = pareto(result.candidates)
    assert {id(c) for c in front} == {id(c) for c in result.candidates if c.on_front}
    assert result.members and all(c.on_front for c in result.members)
    assert result.candidates[0].factors == F.Factors()             # the source first
    again, _ = build(DEMO_MODEL, calib, {"image": held, "labels": labels},
                     output=str(d / "again.ennf"), budget=8, cache_root=str(d / "cache"),
                     rounds=5)
    assert again.measured == 0 and again.cached == len(result.candidates)
    assert [c.factors for c in again.members] == [c.factors for c in result.members]
    # nothing rebuilt or re-timed either: the same members, figures and bytes
    first, second = load_family(out), load_family(str(d / "again.ennf"))
    for a, b in zip(first.members, second.members):
        assert (a.latency_ms, a.fidelity, a.probe_ms) == (b.latency_ms, b.fidelity, b.probe_ms)
        assert enn.to_bytes(a.graph) == enn.to_bytes(b.graph)
    assert second.search["measured"] == 0


def test_family_file_members_are_what_was_measured(digits_family):
    out, result, _, (_, held, labels), _ = digits_family
    fam = edgenn.load_family(out)
    assert len(fam.members) == len(result.members)
    assert fam.device["threads"] == 1 and fam.device["cpu"]
    for m, c in zip(fam.members, result.members):
        assert m.factors == c.factors and m.fidelity == c.m.fidelity
        # re-timed with care for the file (build.host_figures), with its probe layers
        assert m.latency_ms == m.profile.latency_ms > 0
        assert set(m.probe_ms) == set(m.profile.probes) | {probe.OVERHEAD}
        sess = m.session()
        assert isinstance(sess, edgenn.InferenceSession)          # onnxruntime's API
        probs = sess.run(None, {"image": held})[0]
        assert abs(float(np.mean(probs.argmax(1) == labels)) - m.accuracy) < 1e-9
        assert m.fidelity == m.accuracy                            # auto: labels given
        assert m.bytes == len(enn.to_bytes(m.graph))               # the size it was measured
    assert "family of" in fam.table() and "search:" in fam.table()


def test_family_file_shares_tensors_and_refuses_damage(tmp_path):
    g = edgenn.load(DEMO_MODEL)
    other = F.apply(g, F.Factors(sparsity="sparse"), Batches([{"image": digits()[0]}]))
    members = [{"name": "a"}, {"name": "b"}]
    data = ennf.to_bytes([g, other], members, {"note": 1})
    assert data == ennf.to_bytes([g, other], members, {"note": 1})   # deterministic
    alone = ennf.to_bytes([g], members[:1], {"note": 1})
    # the sparse member stores only its sparse 1x1 weights anew: the rest is shared
    assert len(data) < len(alone) + len(enn.to_bytes(other)) * 0.8
    doc, blobs = ennf.read(data, "mem")
    back = ennf.member_graph(doc, blobs, 1, "mem")
    for k, v in other.consts.items():
        assert np.array_equal(back.consts[k], v)
    with pytest.raises(ModelFormatError):
        ennf.read(data[:len(data) // 2], "half")
    bad = bytearray(data)
    bad[-5] ^= 0xFF                                  # a tensor byte: its checksum fails
    doc, blobs = ennf.read(bytes(bad), "bad")
    with pytest.raises(ModelFormatError, match="checksum"):
        for i in range(2):
            ennf.member_graph(doc, blobs, i, "bad")
    with pytest.raises(ModelFormatError, match="family"):
        ennf.read(enn.to_bytes(g), "an .enn")       # not a family
    path = tmp_path / "x.ennf"
    path.write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty"):
        load_family(str(path))


def test_probe_layer_computes_what_it_computes_in_its_model():
    g = edgenn.load(DEMO_MODEL)
    sess = edgenn.InferenceSession(g)
    x = digits()[1][:1]
    node = next(n for n in g.nodes if n.op == "Conv" and n.inputs[0] != "image")
    from edgenn.quant.observe import Runner
    r = Runner(g, observe=[node.inputs[0], node.outputs[0]])
    vals = r.run({"image": x})
    one = probe.layer_graph(g, node.name, {"image": (1, 1, 8, 8)})
    assert len(one.nodes) == 1 and set(one.consts) <= set(g.consts)
    y = edgenn.InferenceSession(one).run(None, {node.inputs[0]: vals[node.inputs[0]]})[0]
    np.testing.assert_allclose(y, vals[node.outputs[0]], rtol=1e-5, atol=1e-5)
    prof = probe.profile(sess, {"image": x}, rounds=3)
    assert abs(sum(prof.shares.values()) - 1) < 1e-6 and prof.probes
    assert prof.latency_ms >= prof.steps_ms * 0.5 > 0
    assert all(prof.shares[c] >= probe.MIN_SHARE for c in prof.probes)
    assert probe.time_graph(one, threads=1) > 0


def test_predict_scales_class_by_class():
    # 10 ms a run: 8 ms of steps (A 50%, B 30%, C 20% unprobed), 2 ms of overhead
    prof = probe.Profile(10.0, 8.0, {"A": 0.5, "B": 0.3, "C": 0.2}, {"A": ["a"], "B": ["b"]})
    host = {"A": 1.0, "B": 2.0, probe.OVERHEAD: 0.01}
    same = probe.predict(prof, host, {"A": 1.0, "B": 2.0, probe.OVERHEAD: 0.01})
    assert same == pytest.approx(10.0)
    # A twice as slow, B the same: C at the probed mean ratio (0.5*2 + 0.3*1) / 0.8; the
    # overhead three times as slow
    want = 8.0 * (0.5 * 2 + 0.3 * 1 + 0.2 * (1.3 / 0.8)) + 2.0 * 3
    assert probe.predict(prof, host, {"A": 2.0, "B": 2.0, probe.OVERHEAD: 0.03}) == \
        pytest.approx(want)
    with pytest.raises(ValueError):
        probe.predict(prof, host, {})
    # anchors: measured / predicted ratios, interpolated in log predicted latency, held
    # flat beyond the outermost anchors
    base = [1.0, 2.0, 4.0, 8.0]
    fixed = probe.anchored(base, {0: 1.0, 2: 8.0})
    assert fixed == pytest.approx([1.0, 2.0 * 2 ** 0.5, 8.0, 16.0])
    assert probe.anchored(base, {}) == base
    assert probe.anchor_members([5.0, 1.0, 3.0, 9.0, 2.0]) == [1, 2, 3]
    assert probe.anchor_members([1.0, 1.0]) == [0, 1]


def test_choose_honours_latency_accuracy_and_size(digits_family):
    out = digits_family[0]
    fam = load_family(out)
    n = len(fam.members)
    # a device where member k is predicted at 1 + k ms (probe results injected)
    from edgenn.kernels import isa
    fam.predict = lambda threads=1: [1.0 + k for k in range(n)]
    best = max(fam.members, key=lambda m: m.fidelity)
    assert fam.choose(latency_ms=100, verify=False).index == best.index
    fit = fam.choose(latency_ms=1.5, verify=False)
    assert fit.index == 0
    with pytest.warns(UserWarning, match="no member"):
        assert fam.choose(latency_ms=0.5, verify=False).index == 0  # none fits: the fastest
    low = min(m.fidelity for m in fam.members)
    assert fam.choose(accuracy=low).index == 0                     # the fastest that reaches
    small = min(fam.members, key=lambda m: m.bytes)
    assert fam.choose(size=small.bytes).bytes == small.bytes
    assert isa.active_tier()
    # the real probe on this device: one prediction per member, all positive
    real = load_family(out).predict(1)
    assert len(real) == n and all(p > 0 for p in real)


def test_choose_checks_its_pick_and_compares_measurements(digits_family):
    """verify: a pick measured over the target is replaced; with nothing left that fits,
    the fastest member is measured too, and the fastest measurement wins (a slow moment
    during member 0's run does not hand the pick to a member predicted slower)."""
    from types import SimpleNamespace
    fam = load_family(digits_family[0])
    # two members whatever the digits search found: 0 fast, 1 slower and more faithful
    fam.members = [SimpleNamespace(index=0, fidelity=0.8, bytes=1),
                   SimpleNamespace(index=1, fidelity=0.9, bytes=1)]
    fam.predict = lambda threads=1: [1.0, 2.0]
    runs = []

    def measure(true):
        def run(m, threads=1):
            runs.append(m.index)
            return true[m.index]
        return run
    # member 0 runs 1.6 ms for a 1.5 ms target: still faster than member 1's prediction,
    # so it is named without another run
    fam.measure = measure([1.6, 1.9])
    with pytest.warns(UserWarning, match="no member runs"):
        assert fam.choose(latency_ms=1.5).index == 0
    assert runs == [0]
    # member 0 measured in a slow moment (2.2 ms, over member 1's 2.0 prediction), member
    # 1 really runs 2.6: both measured, member 0 still named (it had been member 1)
    runs.clear()
    fam.measure = measure([2.2, 2.6])
    with pytest.warns(UserWarning, match="no member runs"):
        assert fam.choose(latency_ms=1.5).index == 0
    assert runs == [0, 1]
    # ... and where member 0 is really slower than member 1: member 1
    runs.clear()
    fam.measure = measure([3.5, 2.4])
    with pytest.warns(UserWarning, match="no member runs"):
        assert fam.choose(latency_ms=1.5).index == 1
    # the pick fits: measured once, no second look
    runs.clear()
    fam.measure = measure([1.2, 1.9])
    assert fam.choose(latency_ms=1.5).index == 0 and runs == [0]


def test_cli_scale_and_inspect(tmp_path, capsys):
    calib, held, labels = digits()
    np.savez(tmp_path / "calib.npz", image=calib)
    np.savez(tmp_path / "held.npz", image=held, labels=labels)
    out = str(tmp_path / "f.ennf")
    code, text, _ = run_cli(capsys, "scale", DEMO_MODEL, "--calib", str(tmp_path / "calib.npz"),
                            "--eval", str(tmp_path / "held.npz"), "-o", out, "--budget", "4",
                            "--no-cache")
    assert code == EXIT_OK and "family of" in text and "candidates" in text
    code, text, _ = run_cli(capsys, "inspect", out, "--plan")
    assert code == EXIT_OK and "here ms" in text and "predicted on this device" in text
    png = tmp_path / "pareto.png"
    code, text, _ = run_cli(capsys, "inspect", out, "--target", "1000", "--plot", str(png))
    assert code == EXIT_OK and "for 1000 ms here: member" in text
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = run_cli(capsys, "scale", DEMO_MODEL, "--calib", str(tmp_path / "calib.npz"),
                           "-o", out, "--latency", "50:10")
    assert code != EXIT_OK and "LO < HI" in err
    (tmp_path / "junk.ennf").write_bytes(b"\x10" + b"\0" * 40)
    code, _, err = run_cli(capsys, "inspect", str(tmp_path / "junk.ennf"))
    assert code == EXIT_REJECTED and "error" in err


def test_scalable_one_line(tmp_path):
    calib, held, labels = digits()
    fam = edgenn.scalable(DEMO_MODEL, latency=(0.001, 1000), calib=calib,
                          eval={"image": held, "labels": labels},
                          output=str(tmp_path / "d.ennf"), budget=3, cache_root=None)
    assert fam.members and fam.report.measured == 3
    sess = fam.select(latency_ms=1000)
    assert sess.run(None, {"image": held[:2]})[0].shape == (2, 10)
    json.dumps(fam.search)                                          # a plain record


def test_damaged_family_files_are_named_errors(digits_family, tmp_path):
    """Byte flips anywhere in a family file: it loads and runs, or a ModelFormatError
    says why; never a crash, a hang or another exception."""
    with open(digits_family[0], "rb") as f:
        data = f.read()
    rng = np.random.default_rng(5)
    x = digits()[1][:1]
    outcomes = {"ok": 0, "refused": 0}
    for trial in range(60):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), rng.integers(1, 4)):
            bad[pos] ^= int(rng.integers(1, 256))
        path = tmp_path / f"bad{trial}.ennf"
        path.write_bytes(bytes(bad))
        try:
            fam = load_family(str(path))
            for m in fam.members:
                m.session().run(None, {"image": x})
            outcomes["ok"] += 1
        except ModelFormatError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0
    # hand-made lies in the description: a probe node that is not there, absurd shapes
    doc, blobs = ennf.load(digits_family[0])
    for lie in ({"input_shapes": {"image": [1 << 40, 1, 8, 8]}},
                {"profile": {**doc["members"][0]["profile"], "probes": {"X": ["nowhere"]}}},
                {"factors": {"precision": "int3"}}):
        member = {**doc["members"][0], **lie}
        graphs = [ennf.member_graph(doc, blobs, 0, "x")]
        desc = {k: v for k, v in member.items() if k != "graph"}
        path = tmp_path / "lie.ennf"
        path.write_bytes(ennf.to_bytes(graphs, [desc], {"device": doc["device"]}))
        with pytest.raises(ModelFormatError):
            load_family(str(path)).graph(0)
