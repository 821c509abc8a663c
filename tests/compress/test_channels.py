"""Structured channel pruning with least-squares refit (compress/channels.py).

- groups: inverted residuals (1x1 -> depthwise -> 1x1) and conv -> conv chains are found;
  channels that reach a residual Add, a fused residual input, a Concat or a graph output
  never are;
- importance: L1 / L2 / FPGM rank the filters they should;
- the refit is the least-squares solution: on calibration data the refitted consumer
  reproduces its original output at least as well as any other weights over the kept
  channels (checked against a perturbation), and exactly when the dropped channels are
  linear combinations of the kept ones;
- the demo digits CNN: pruned 25% with refit keeps its held-out accuracy within 3 points
  (sliced without refit it falls far), and runs on the ordinary dense kernels.
"""
import json

import numpy as np
import pytest
from support.helpers import helper, make_model
from support.quant_data import digits

import edgenn
from edgenn.compress.channels import (_patches, _refit, config_for, groups, importance,
                                      load_config, prune_channels)
from edgenn.demo import DEMO_MODEL

RNG = np.random.default_rng(3)


def _chain(residual=False, concat=False):
    """x -> Conv a (3x3) -> Relu -> Conv b (3x3) [-> + x] [-> Concat with a]."""
    c = 8
    inits = {"wa": RNG.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3,
             "ba": RNG.standard_normal(c).astype(np.float32),
             "wb": RNG.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3,
             "bb": RNG.standard_normal(c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], pads=[1] * 4, name="a"),
             helper.make_node("Relu", ["a"], ["ra"]),
             helper.make_node("Conv", ["ra", "wb", "bb"], ["b"], pads=[1] * 4, name="b")]
    out = "b"
    if residual:
        nodes.append(helper.make_node("Add", ["b", "x"], ["s"]))
        out = "s"
    if concat:
        nodes.append(helper.make_node("Concat", [out, "ra"], ["cat"], axis=1))
        out = "cat"
    nodes.append(helper.make_node("Relu", [out], ["y"]))
    shape = [2, 2 * c if concat else c, 10, 10]
    return make_model(nodes, [("x", np.float32, [2, c, 10, 10])], [("y", np.float32, shape)],
                      inits)


def test_groups_follow_the_dependencies():
    g = edgenn.load(DEMO_MODEL)
    found = groups(g)
    assert len(found) == 2 and all(x.depthwise is not None for x in found)
    assert [x.producer.name for x in groups(edgenn.load(_chain().SerializeToString()))] == ["a"]
    # b's output meets the residual; a's channels stay free (b's outputs do not change)
    assert [x.producer.name for x in groups(edgenn.load(_chain(residual=True)
                                                        .SerializeToString()))] == ["a"]
    # a's output also reaches the Concat: not prunable
    assert groups(edgenn.load(_chain(concat=True).SerializeToString())) == []


def test_importance_orders_filters():
    w = np.stack([np.full((2, 3, 3), v, np.float32) for v in (0.1, 2.0, -3.0, 0.5)])
    assert np.argsort(importance(w, "l1")).tolist() == [0, 3, 1, 2]
    assert np.argsort(importance(w, "l2")).tolist() == [0, 3, 1, 2]
    f = np.array([[0.0, 0], [1, 0], [0, 1], [5, 5]], np.float32).reshape(4, 2, 1, 1)
    assert np.argmax(importance(f, "fpgm")) == 3          # the outlier is least replaceable
    with pytest.raises(ValueError):
        importance(w, "random")


def test_refit_is_the_least_squares_solution():
    node = edgenn.load(_chain().SerializeToString()).nodes[-2]          # conv b
    x = RNG.standard_normal((3, 8, 6, 6))
    x[:, 5] = 0.5 * x[:, 1] - x[:, 2]          # a channel that the others explain
    w = RNG.standard_normal((4, 8, 3, 3)).astype(np.float32)
    cols = _patches(x, node, w.shape)
    keep = np.array([0, 1, 2, 3, 4, 6, 7])      # channel 5 dropped: exactly recoverable
    fit = _refit(cols, keep, w)
    target = w.reshape(4, -1).astype(np.float64) @ cols
    rows = (keep[:, None] * 9 + np.arange(9)).reshape(-1)

    def err(wk):
        return float(np.sum((wk.reshape(4, -1).astype(np.float64) @ cols[rows] - target) ** 2))
    assert err(fit) <= 1e-6 * float(np.sum(target ** 2))
    sliced = w[:, keep]
    assert err(fit) < err(sliced)
    keep2 = np.array([0, 2, 4, 6])              # not recoverable: still the best fit
    fit2 = _refit(cols, keep2, w)
    rows = (keep2[:, None] * 9 + np.arange(9)).reshape(-1)
    for _ in range(5):
        assert err(fit2) <= err(fit2 + 1e-3 * RNG.standard_normal(fit2.shape).astype(np.float32))


def test_digits_pruned_with_refit_keeps_its_accuracy(tmp_path):
    calib, held, labels = digits()
    base = np.mean(edgenn.InferenceSession(DEMO_MODEL).run(None, {"image": held})[0]
                   .argmax(1) == labels)
    accs = {}
    for refit in (False, True):
        g = edgenn.load(DEMO_MODEL)
        rep = prune_channels(g, 0.25, calib={"image": calib} if refit else None)
        assert all(k == round(0.75 * n) for n, k, _ in rep.groups.values())
        path = tmp_path / f"p{refit}.enn"
        edgenn.save(g, str(path))
        probs = edgenn.InferenceSession(str(path)).run(None, {"image": held})[0]
        accs[refit] = np.mean(probs.argmax(1) == labels)
    assert accs[True] >= base - 0.03, (base, accs)
    assert accs[True] > accs[False] + 0.2, accs        # the refit is what keeps it
    edgenn.convert(DEMO_MODEL, str(tmp_path / "dense.enn"))
    assert (tmp_path / "pTrue.enn").stat().st_size < (tmp_path / "dense.enn").stat().st_size


def test_config_round_trip_and_overrides(tmp_path):
    g = edgenn.load(DEMO_MODEL)
    cfg = config_for(g, 0.25)
    first, second = list(cfg["layers"])
    cfg["layers"][first] = 0.5
    cfg["layers"][second] = 0.0
    path = tmp_path / "prune.json"
    path.write_text(json.dumps(cfg))
    cfg = load_config(str(path))
    rep = prune_channels(g, cfg["ratio"], per_layer=cfg["layers"], multiple=8)
    assert rep.groups[first][:2] == (32, 16) and second not in rep.groups
    with pytest.raises(ValueError, match="not the producer"):
        prune_channels(edgenn.load(DEMO_MODEL), 0.2, per_layer={"nope": 0.1})


def test_chained_groups_prune_both_sides_of_a_middle_conv():
    """a -> b -> c: b loses input channels (group a) and output channels (group b)."""
    c = 8
    inits = {f"w{k}": RNG.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
             for k in "abc"}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1] * 4, name="a"),
             helper.make_node("Relu", ["a"], ["ra"]),
             helper.make_node("Conv", ["ra", "wb"], ["b"], pads=[1] * 4, name="b"),
             helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Conv", ["rb", "wc"], ["y"], pads=[1] * 4, name="c")]
    model = make_model(nodes, [("x", np.float32, [1, c, 9, 9])], [("y", np.float32, [1, c, 9, 9])],
                       inits)
    g = edgenn.load(model.SerializeToString())
    assert [x.producer.name for x in groups(g)] == ["a", "b"]
    calib = {"x": RNG.standard_normal((4, c, 9, 9)).astype(np.float32)}
    rep = prune_channels(g, 0.5, calib=calib)
    shapes = {n.name: g.consts[n.inputs[1]].shape for n in g.nodes if n.op == "Conv"}
    assert shapes == {"a": (4, 8, 3, 3), "b": (4, 4, 3, 3), "c": (8, 4, 3, 3)}, shapes
    assert len(g.consts) == 3                                       # the old weights gone
    y = edgenn.InferenceSession(g).run(None, {"x": calib["x"][:1]})[0]
    assert y.shape == (1, c, 9, 9) and np.all(np.isfinite(y))
    assert set(rep.groups) == {"a", "b"}
