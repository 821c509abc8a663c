"""Graph passes: each pattern structurally (op counts) and numerically (the graph before
== the graph after == onnxruntime on the original model), plus negative cases."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.helpers import make_model, ort_run

import edgenn
from edgenn.converters.onnx.importer import import_onnx
from edgenn.graph import passes as P
from edgenn.graph.infer import execute

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


# -- helpers ---------------------------------------------------------------------------------
def model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs/outputs: [(name, shape)] float32 (shape entries may be str: symbolic)."""
    return make_model(nodes, [(n, np.float32, s) for n, s in inputs],
                      [(n, np.float32, s) for n, s in outputs], inits, opset)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_ort(m, feeds):
    return dict(zip([o.name for o in m.graph.output], ort_run(m, feeds)))


def assert_close(a, b, rtol=1e-5, atol=1e-5):
    assert set(a) == set(b)
    for k in a:
        assert a[k].shape == b[k].shape, k
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def check(m, feeds, run=None, rtol=1e-5, atol=1e-5):
    """Apply `run(graph)` (default: optimize all) to the imported model; compare the
    graph before, after and onnxruntime. Returns (graph after, result of run)."""
    before = import_onnx(m)
    after = import_onnx(m)
    result = (run or (lambda g: P.optimize(g, "all")))(after)
    after.validate()
    assert [v.name for v in after.outputs] == [v.name for v in before.outputs]
    want = run_ort(m, feeds)
    got0 = execute(before, feeds)
    got1 = execute(after, feeds)
    assert_close(got0, want, rtol=1e-4, atol=1e-4)
    assert_close(got1, got0, rtol=rtol, atol=atol)
    assert_close(got1, want, rtol=1e-4, atol=1e-4)
    return after, result


def ops(g):
    return dict(g.op_counts())


def only(g, op):
    found = [n for n in g.nodes if n.op == op]
    assert len(found) == 1, ops(g)
    return found[0]


def c(v):
    return np.asarray(v, np.float32)


# -- fold_constants ---------------------------------------------------------------------------
def shape_chain_model(x_shape):
    """torch's flatten-by-shape: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Add", ["a", "b"], ["ab"]),        # constant subgraph
        helper.make_node("Mul", ["r", "ab"], ["y"]),
    ]
    inits = {"i0": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "m1": np.array([-1], np.int64), "a": c([2.0]), "b": c([0.5])}
    return model(nodes, [("x", x_shape)], [("y", [x_shape[0], 12])], inits)


def test_fold_constants_static_shape_chain():
    m = shape_chain_model([2, 3, 4])
    g, changed = check(m, {"x": rand(2, 3, 4)}, P.fold_constants)
    assert changed
    assert ops(g) == {"Reshape": 1, "Mul": 1}
    assert g.meta["fusions"]["constant_fold"] >= 5
    assert set(g.consts) == {n.inputs[1] for n in g.nodes}  # unused constants pruned


def test_fold_constants_dynamic_shape_keeps_shape_chain():
    m = shape_chain_model(["N", 3, 4])
    g, changed = check(m, {"x": rand(5, 3, 4)}, P.fold_constants)
    assert changed  # only the constant Add folds
    assert "Add" not in ops(g) and ops(g)["Shape"] == 1 and ops(g)["Concat"] == 1


def test_fold_keeps_node_writing_graph_output():
    m = model([helper.make_node("Add", ["a", "b"], ["y"]),
               helper.make_node("Relu", ["x"], ["z"])],
              [("x", [2])], [("y", [1]), ("z", [2])], {"a": c([1.0]), "b": c([2.0])})
    g, _ = check(m, {"x": rand(2)}, P.fold_constants)
    assert ops(g) == {"Add": 1, "Relu": 1}


# -- eliminate_dead_code --------------------------------------------------------------------
def test_eliminate_dead_code():
    m = model([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("Mul", ["r", "w"], ["dead1"]),
               helper.make_node("Sigmoid", ["dead1"], ["dead2"]),
               helper.make_node("Neg", ["r"], ["y"])],
              [("x", [3, 4])], [("y", [3, 4])], {"w": rand(3, 4)})
    g, changed = check(m, {"x": rand(3, 4)}, P.eliminate_dead_code)
    assert changed and ops(g) == {"Relu": 1, "Neg": 1}
    assert g.consts == {}


# -- remove_identity ------------------------------------------------------------------------
def test_remove_identity_dropout_cast_reshape():
    m = model([helper.make_node("Identity", ["x"], ["a"]),
               helper.make_node("Dropout", ["a"], ["b"]),
               helper.make_node("Cast", ["b"], ["c"], to=F),
               helper.make_node("Reshape", ["c", "shp"], ["d"]),
               helper.make_node("Relu", ["d"], ["e"]),
               helper.make_node("Identity", ["e"], ["y"])],   # graph output: renamed
              [("x", [2, 3])], [("y", [2, 3])], {"shp": np.array([2, -1], np.int64)})
    g, changed = check(m, {"x": rand(2, 3)}, P.remove_identity)
    assert changed and ops(g) == {"Relu": 1}
    assert only(g, "Relu").outputs == ["y"]


def test_remove_identity_keeps_input_to_output_and_real_casts():
    m = model([helper.make_node("Identity", ["x"], ["y"]),
               helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
               helper.make_node("Cast", ["i"], ["z"], to=F),
               helper.make_node("Reshape", ["x", "shp"], ["w"])],
              [("x", [2, 3])], [("y", [2, 3]), ("z", [2, 3]), ("w", [3, 2])],
              {"shp": np.array([3, 2], np.int64)})
    g, changed = check(m, {"x": rand(2, 3)}, P.remove_identity)
    assert not changed and ops(g) == {"Identity": 1, "Cast": 2, "Reshape": 1}


def test_remove_identity_keeps_dropout_with_mask_used():
    m = model([helper.make_node("Dropout", ["x"], ["y", "mask"]),
               helper.make_node("Cast", ["mask"], ["z"], to=F)],
              [("x", [2, 3])], [("y", [2, 3]), ("z", [2, 3])])
    g = import_onnx(m)
    assert not P.remove_identity(g)


# -- fold_conv_batchnorm --------------------------------------------------------------------
def conv_bn_nodes(x="x", out="y", with_bias=True):
    conv_in = [x, "W", "B"] if with_bias else [x, "W"]
    return [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "t", "mu", "var"], [out],
                             epsilon=1e-3)]


def bn_params(ch):
    return {"s": rand(ch), "t": rand(ch), "mu": rand(ch),
            "var": np.abs(rand(ch)).astype(np.float32) + 0.5}


@pytest.mark.parametrize("with_bias", [True, False])
def test_fold_conv_batchnorm(with_bias):
    inits = {"W": rand(6, 3, 3, 3), "B": rand(6), **bn_params(6)}
    if not with_bias:
        del inits["B"]
    m = model(conv_bn_nodes(with_bias=with_bias), [("x", [1, 3, 8, 8])],
              [("y", [1, 6, 8, 8])], inits)
    g, changed = check(m, {"x": rand(1, 3, 8, 8)}, P.fold_conv_batchnorm, rtol=1e-4)
    assert changed and ops(g) == {"Conv": 1}
    assert only(g, "Conv").outputs == ["y"]
    assert g.meta["fusions"]["batchnorm_folded"] == 1


def test_fold_conv_batchnorm_not_when_conv_output_shared():
    nodes = conv_bn_nodes() + [helper.make_node("Relu", ["c"], ["z"])]
    m = model(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 6, 8, 8]), ("z", [1, 6, 8, 8])],
              {"W": rand(6, 3, 3, 3), "B": rand(6), **bn_params(6)})
    g, changed = check(m, {"x": rand(1, 3, 8, 8)}, P.fold_conv_batchnorm)
    assert not changed and ops(g) == {"Conv": 1, "BatchNormalization": 1, "Relu": 1}


def test_standalone_batchnorm_left_alone():
    m = model([helper.make_node("BatchNormalization", ["x", "s", "t", "mu", "var"], ["y"])],
              [("x", [2, 4, 3, 3])], [("y", [2, 4, 3, 3])], bn_params(4))
    g, changed = check(m, {"x": rand(2, 4, 3, 3)})
    assert ops(g) == {"BatchNormalization": 1}


def test_fold_gemm_batchnorm():
    m = model([helper.make_node("Flatten", ["x"], ["f"]),
               helper.make_node("Gemm", ["f", "W", "C"], ["g"], transB=1, alpha=0.5),
               helper.make_node("BatchNormalization", ["g", "s", "t", "mu", "var"], ["y"])],
              [("x", ["N", 2, 3])], [("y", ["N", 5])],
              {"W": rand(5, 6), "C": rand(5), **bn_params(5)})
    g, changed = check(m, {"x": rand(4, 2, 3)}, P.fold_conv_batchnorm, rtol=1e-4)
    assert changed and ops(g) == {"Flatten": 1, "Gemm": 1}


# -- fuse_residual_add ------------------------------------------------------------------------
def test_fuse_residual_add_then_relu():
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["x", "c"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    m = model(nodes, [("x", [1, 4, 6, 6])], [("y", [1, 4, 6, 6])],
              {"W": rand(4, 4, 3, 3), "B": rand(4)})
    g, report = check(m, {"x": rand(1, 4, 6, 6)})
    assert ops(g) == {"Conv": 1}
    conv = only(g, "Conv")
    assert conv.inputs[3] == "x" and conv.attrs["activation"] == "Relu"
    assert conv.outputs == ["y"]
    assert report["fusions"] == {"residual_add_fused": 1, "activation_fused": 1}


def test_fuse_residual_add_dynamic_batch():
    # ResNet-style block with a symbolic batch: both Add operands come from convs
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["x", "W2"], ["b"], strides=[2, 2]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    m = model(nodes, [("x", ["N", 4, 7, 7])], [("y", ["N", 4, 4, 4])],
              {"W1": rand(4, 4, 3, 3), "W2": rand(4, 4, 1, 1)})
    g, changed = check(m, {"x": rand(2, 4, 7, 7)}, P.fuse_residual_add)
    assert changed and ops(g) == {"Conv": 2}


def test_fuse_residual_add_not_on_broadcast():
    # Z of shape (1, C, 1, 1) (not a constant): broadcasting Add, not a residual
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("Add", ["c", "z"], ["y"])]
    m = model(nodes, [("x", [1, 4, 5, 5]), ("z", [1, 4, 1, 1])], [("y", [1, 4, 5, 5])],
              {"W": rand(4, 4, 1, 1)})
    g, changed = check(m, {"x": rand(1, 4, 5, 5), "z": rand(1, 4, 1, 1)},
                       P.fuse_residual_add)
    assert not changed and ops(g) == {"Conv": 1, "Add": 1}


def test_fuse_residual_add_not_when_conv_output_shared():
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("Add", ["c", "x"], ["y"]),
             helper.make_node("Sigmoid", ["c"], ["z"])]
    m = model(nodes, [("x", [1, 4, 5, 5])], [("y", [1, 4, 5, 5]), ("z", [1, 4, 5, 5])],
              {"W": rand(4, 4, 1, 1)})
    g, changed = check(m, {"x": rand(1, 4, 5, 5)}, P.fuse_residual_add)
    assert not changed


# -- fuse_activation --------------------------------------------------------------------------
ACT_CASES = {
    "relu": ([helper.make_node("Relu", ["c"], ["y"])], {}, "Relu", []),
    "relu6": ([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
              {"lo": c(0.0), "hi": c(6.0)}, "Clip", [0.0, 6.0]),
    "clip_min_only": ([helper.make_node("Clip", ["c", "lo"], ["y"])], {"lo": c(0.0)},
                      "Relu", []),
    "leaky": ([helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)], {}, "LeakyRelu",
              [0.2]),
    "hardsigmoid": ([helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.4)], {},
                    "HardSigmoid", [0.3, 0.4]),
    "sigmoid": ([helper.make_node("Sigmoid", ["c"], ["y"])], {}, "Sigmoid", []),
    "hardswish": ([helper.make_node("HardSwish", ["c"], ["y"])], {}, "HardSwish", []),
    "silu": ([helper.make_node("Sigmoid", ["c"], ["sg"]),
              helper.make_node("Mul", ["c", "sg"], ["y"])], {}, "SiLU", []),
    "silu_swapped": ([helper.make_node("Sigmoid", ["c"], ["sg"]),
                      helper.make_node("Mul", ["sg", "c"], ["y"])], {}, "SiLU", []),
    # HardSwish spellings: x * HardSigmoid(x) (torch, opset < 14) and x * Relu6(x + 3) / 6
    "hs_hardsigmoid": ([helper.make_node("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5),
                        helper.make_node("Mul", ["c", "h"], ["y"])], {}, "HardSwish", []),
    "hs_div6": ([helper.make_node("Add", ["c", "three"], ["p"]),
                 helper.make_node("Clip", ["p", "lo", "hi"], ["r"]),
                 helper.make_node("Mul", ["c", "r"], ["m"]),
                 helper.make_node("Div", ["m", "six"], ["y"])],
                {"three": c(3.0), "lo": c(0.0), "hi": c(6.0), "six": c(6.0)}, "HardSwish", []),
    "hs_mul_sixth_inner": ([helper.make_node("Add", ["three", "c"], ["p"]),
                            helper.make_node("Clip", ["p", "lo", "hi"], ["r"]),
                            helper.make_node("Mul", ["r", "sixth"], ["q"]),
                            helper.make_node("Mul", ["q", "c"], ["y"])],
                           {"three": c(3.0), "lo": c(0.0), "hi": c(6.0),
                            "sixth": c(1 / 6)}, "HardSwish", []),
}


@pytest.mark.parametrize("case", sorted(ACT_CASES))
def test_fuse_activation_conv(case):
    act_nodes, inits, act, params = ACT_CASES[case]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1])] + act_nodes
    m = model(nodes, [("x", [1, 3, 6, 6])], [("y", [1, 4, 6, 6])],
              {"W": rand(4, 3, 3, 3), "B": rand(4), **inits})
    g, report = check(m, {"x": 3 * rand(1, 3, 6, 6)})
    assert ops(g) == {"Conv": 1}, ops(g)
    conv = only(g, "Conv")
    assert conv.attrs["activation"] == act
    np.testing.assert_allclose(conv.attrs["activation_params"], params, rtol=1e-6)
    assert conv.outputs == ["y"] and g.consts.keys() == {"W", "B"}


def test_fuse_activation_gemm_and_matmul():
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["g"], transB=1),
             helper.make_node("LeakyRelu", ["g"], ["y"], alpha=0.1),
             helper.make_node("MatMul", ["x", "W2"], ["m"]),
             helper.make_node("Relu", ["m"], ["z"])]
    m = model(nodes, [("x", [3, 4])], [("y", [3, 5]), ("z", [3, 2])],
              {"W": rand(5, 4), "C": rand(5), "W2": rand(4, 2)})
    g, _ = check(m, {"x": rand(3, 4)})
    assert ops(g) == {"Gemm": 2}
    assert sorted(n.attrs["activation"] for n in g.nodes) == ["LeakyRelu", "Relu"]


@pytest.mark.parametrize("case", ["pointwise", "stem", "scalar_slope", "wide_3x3",
                                  "last_axis_slope"])
def test_prelu_fuses_where_the_kernels_carry_it(case):
    """Per-channel PRelu joins a group-1 Conv that is pointwise or reads <= 8 channels
    (sgemm / conv_direct epilogues); one slope is LeakyRelu anywhere; a 3x3 Conv on many
    channels keeps Winograd (PRelu stays); a (W,)-shaped slope broadcasts over the last
    axis, not the channels, and stays."""
    c, k, m = {"pointwise": (16, 1, 12), "stem": (3, 3, 8), "scalar_slope": (16, 3, 8),
               "wide_3x3": (16, 3, 8), "last_axis_slope": (16, 1, 7)}[case]
    slope = {"scalar_slope": np.float32([[[0.2]]]), "last_axis_slope": rand(7)}.get(
        case, rand(m, 1, 1))
    mdl = model([helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[k // 2] * 4),
                 helper.make_node("PRelu", ["c", "s"], ["y"])],
                [("x", [1, c, 7, 7])], [("y", [1, m, 7, 7])],
                {"W": rand(m, c, k, k), "B": rand(m), "s": slope})
    g, _ = check(mdl, {"x": rand(1, c, 7, 7)})
    conv = only(g, "Conv")
    fused = {"pointwise": "PRelu", "stem": "PRelu", "scalar_slope": "LeakyRelu"}.get(case, "")
    assert conv.attrs.get("activation", "") == fused, conv.attrs
    assert ("PRelu" in ops(g)) == (fused == "")


def test_fuse_activation_not_when_conv_output_shared():
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("Sigmoid", ["c"], ["sg"]),
             helper.make_node("Mul", ["c", "sg"], ["z"]),
             helper.make_node("Neg", ["c"], ["w"])]
    m = model(nodes, [("x", [1, 3, 4, 4])],
              [("y", [1, 2, 4, 4]), ("z", [1, 2, 4, 4]), ("w", [1, 2, 4, 4])],
              {"W": rand(2, 3, 1, 1)})
    g, _ = check(m, {"x": rand(1, 3, 4, 4)})
    assert only(g, "Conv").attrs.get("activation", "") == ""
    assert ops(g) == {"Conv": 1, "Relu": 1, "Sigmoid": 1, "Mul": 1, "Neg": 1}


def test_clip_with_dynamic_bound_not_fused():
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    m = model(nodes, [("x", [1, 3, 4, 4]), ("hi", [])], [("y", [1, 2, 4, 4])],
              {"W": rand(2, 3, 1, 1), "lo": c(0.0)})
    g, _ = check(m, {"x": rand(1, 3, 4, 4), "hi": c(0.5)})
    assert ops(g) == {"Conv": 1, "Clip": 1}


def test_hardswish_spelling_without_conv():
    nodes = [helper.make_node("Add", ["x", "three"], ["p"]),
             helper.make_node("Clip", ["p", "lo", "hi"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["m"]),
             helper.make_node("Mul", ["m", "sixth"], ["y"])]
    m = model(nodes, [("x", [2, 8])], [("y", [2, 8])],
              {"three": c(3.0), "lo": c(0.0), "hi": c(6.0), "sixth": c(1 / 6)})
    g, _ = check(m, {"x": 4 * rand(2, 8)})
    assert ops(g) == {"HardSwish": 1}


def test_hardswish_wrong_constant_not_rewritten():
    nodes = [helper.make_node("Add", ["x", "three"], ["p"]),
             helper.make_node("Clip", ["p", "lo", "hi"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["m"]),
             helper.make_node("Div", ["m", "six"], ["y"])]
    m = model(nodes, [("x", [2, 8])], [("y", [2, 8])],
              {"three": c(2.0), "lo": c(0.0), "hi": c(6.0), "six": c(6.0)})
    g, _ = check(m, {"x": 4 * rand(2, 8)})
    assert "HardSwish" not in ops(g)


# -- matmul_add_to_gemm -----------------------------------------------------------------------
@pytest.mark.parametrize("bias_first", [False, True])
def test_matmul_add_to_gemm_rank3(bias_first):
    add_in = ["bias", "m"] if bias_first else ["m", "bias"]
    m = model([helper.make_node("MatMul", ["x", "W"], ["m"]),
               helper.make_node("Add", add_in, ["y"])],
              [("x", ["B", 5, 8])], [("y", ["B", 5, 3])], {"W": rand(8, 3), "bias": rand(3)})
    g, _ = check(m, {"x": rand(2, 5, 8)}, P.matmul_add_to_gemm)
    assert ops(g) == {"Gemm": 1}
    gemm = only(g, "Gemm")
    assert len(gemm.inputs) == 3 and gemm.outputs == ["y"]


def test_bias_after_a_residual_keeps_the_residual():
    """MatMul + skip + bias, the order onnxruntime's optimizer writes (SkipLayerNorm's
    input): the residual fuses first, then the bias Add joins the Gemm as C and the
    residual must stay (it was dropped once: BERT outputs off by the whole skip path)."""
    m = model([helper.make_node("MatMul", ["x", "W"], ["m"]),
               helper.make_node("Add", ["m", "skip"], ["s"]),
               helper.make_node("Add", ["s", "bias"], ["y"])],
              [("x", [2, 5, 8]), ("skip", [2, 5, 3])], [("y", [2, 5, 3])],
              {"W": rand(8, 3), "bias": rand(3)})
    g, _ = check(m, {"x": rand(2, 5, 8), "skip": rand(2, 5, 3)})
    assert ops(g) == {"Gemm": 1}
    gemm = only(g, "Gemm")
    assert len(gemm.inputs) == 4 and gemm.inputs[3] == "skip" and gemm.inputs[2]


def test_matmul_to_gemm_not_for_dynamic_weights_or_growing_bias():
    m = model([helper.make_node("MatMul", ["x", "w"], ["a"]),
               helper.make_node("MatMul", ["x", "W"], ["m"]),
               helper.make_node("Add", ["m", "bias"], ["y"])],   # bias (2, 1, 3) adds an axis
              [("x", [4, 8]), ("w", [8, 3])], [("a", [4, 3]), ("y", [2, 4, 3])],
              {"W": rand(8, 3), "bias": rand(2, 1, 3)})
    g, _ = check(m, {"x": rand(4, 8), "w": rand(8, 3)}, P.matmul_add_to_gemm)
    assert ops(g) == {"MatMul": 1, "Gemm": 1, "Add": 1}


# -- fuse_layernorm ---------------------------------------------------------------------------
def layernorm_nodes(variant, gamma=True, beta=True):
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"]),
             helper.make_node("Sub", ["x", "m"], ["d"])]
    if variant == "pow_div":
        nodes += [helper.make_node("Pow", ["d", "two"], ["p"])]
    else:
        nodes += [helper.make_node("Mul", ["d", "d"], ["p"])]
    nodes += [helper.make_node("ReduceMean", ["p", "axes"], ["v"]),
              helper.make_node("Add", ["v", "eps"], ["e"]),
              helper.make_node("Sqrt", ["e"], ["s"])]
    if variant == "pow_div":
        nodes += [helper.make_node("Div", ["d", "s"], ["n"])]
    else:
        nodes += [helper.make_node("Reciprocal", ["s"], ["rs"]),
                  helper.make_node("Mul", ["d", "rs"], ["n"])]
    last = "n"
    if gamma:
        nodes.append(helper.make_node("Mul", [last, "gamma"], ["g"]))
        last = "g"
    if beta:
        nodes.append(helper.make_node("Add", ["beta", last], ["b"]))
        last = "b"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return nodes


@pytest.mark.parametrize("variant,gamma,beta,opset", [
    ("pow_div", True, True, 18), ("mul_recip", True, True, 18), ("pow_div", False, True, 18),
    ("pow_div", True, False, 18), ("pow_div", False, False, 18), ("pow_div", True, True, 13)])
def test_fuse_layernorm(variant, gamma, beta, opset):
    nodes = layernorm_nodes(variant, gamma, beta)
    inits = {"two": c(2.0), "eps": c(1e-5), "gamma": rand(16), "beta": rand(16)}
    if opset >= 18:
        inits["axes"] = np.array([-1], np.int64)
    else:  # old opsets: axes is an attribute; the converter turns it into an input
        for n in nodes:
            if n.op_type == "ReduceMean":
                del n.input[1:]
                n.attribute.append(helper.make_attribute("axes", [-1]))
    m = model(nodes, [("x", [2, 5, 16])], [("y", [2, 5, 16])], inits, opset=opset)
    g, report = check(m, {"x": rand(2, 5, 16) + 1})
    assert ops(g) == {"LayerNormalization": 1}, ops(g)
    ln = only(g, "LayerNormalization")
    assert ln.attrs["axis"] == -1 and abs(ln.attrs["epsilon"] - 1e-5) < 1e-9
    assert ln.outputs == ["y"] and len(ln.inputs) == (3 if beta else 2)


def test_layernorm_dynamic_without_gamma_needs_static_width():
    nodes = layernorm_nodes("pow_div", gamma=False, beta=True)
    inits = {"two": c(2.0), "eps": c(1e-5), "beta": rand(16), "axes": np.array([-1], np.int64)}
    m = model(nodes, [("x", ["B", "S", 16])], [("y", ["B", "S", 16])], inits, opset=18)
    g, _ = check(m, {"x": rand(3, 4, 16)})
    assert ops(g) == {"LayerNormalization": 1}


def test_layernorm_not_fused_when_intermediate_shared():
    nodes = layernorm_nodes("pow_div")
    nodes.append(helper.make_node("Neg", ["v"], ["z"]))
    inits = {"two": c(2.0), "eps": c(1e-5), "gamma": rand(16), "beta": rand(16),
             "axes": np.array([-1], np.int64)}
    m = model(nodes, [("x", [2, 5, 16])], [("y", [2, 5, 16]), ("z", [2, 5, 1])], inits,
              opset=18)
    g, _ = check(m, {"x": rand(2, 5, 16)})
    assert "LayerNormalization" not in ops(g)


def test_layernorm_not_fused_over_a_leading_axis():
    nodes = layernorm_nodes("pow_div", gamma=False, beta=False)
    inits = {"two": c(2.0), "eps": c(1e-5), "axes": np.array([1], np.int64)}
    m = model(nodes, [("x", [2, 5, 16])], [("y", [2, 5, 16])], inits, opset=18)
    g, _ = check(m, {"x": rand(2, 5, 16)})
    assert "LayerNormalization" not in ops(g)


# -- fuse_gelu -----------------------------------------------------------------------------------
def gelu_nodes(order, scale_op="Div"):
    if scale_op == "Div":
        nodes = [helper.make_node("Div", ["x", "sqrt2"], ["t"])]
    else:
        nodes = [helper.make_node("Mul", ["x", "rsqrt2"], ["t"])]
    nodes += [helper.make_node("Erf", ["t"], ["e"]),
              helper.make_node("Add", ["e", "one"], ["a"])]
    if order == "half_last":    # (x * a) * 0.5 -- torch
        nodes += [helper.make_node("Mul", ["x", "a"], ["h"]),
                  helper.make_node("Mul", ["h", "half"], ["y"])]
    elif order == "half_on_erf":  # x * (a * 0.5)
        nodes += [helper.make_node("Mul", ["a", "half"], ["h"]),
                  helper.make_node("Mul", ["x", "h"], ["y"])]
    else:                       # (x * 0.5) * a
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]),
                  helper.make_node("Mul", ["h", "a"], ["y"])]
    return nodes


GELU_INITS = {"sqrt2": c(math.sqrt(2)), "rsqrt2": c(1 / math.sqrt(2)), "one": c(1.0),
              "half": c(0.5)}


@pytest.mark.parametrize("order", ["half_last", "half_on_erf", "half_first"])
@pytest.mark.parametrize("scale_op", ["Div", "Mul"])
def test_fuse_gelu(order, scale_op):
    nodes = gelu_nodes(order, scale_op)
    inits = {k: v for k, v in GELU_INITS.items()
             if k in {i for n in nodes for i in n.input}}
    m = model(nodes, [("x", [3, 10])], [("y", [3, 10])], inits)
    g, _ = check(m, {"x": 2 * rand(3, 10)}, P.fuse_gelu)
    assert ops(g) == {"Gelu": 1}
    assert only(g, "Gelu").attrs["approximate"] == "none"


def test_fuse_gelu_tanh():
    nodes = [helper.make_node("Pow", ["x", "three"], ["x3"]),
             helper.make_node("Mul", ["x3", "k"], ["kx3"]),
             helper.make_node("Add", ["x", "kx3"], ["s"]),
             helper.make_node("Mul", ["s", "c"], ["u"]),
             helper.make_node("Tanh", ["u"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["a"]),
             helper.make_node("Mul", ["x", "half"], ["h"]),
             helper.make_node("Mul", ["h", "a"], ["y"])]
    m = model(nodes, [("x", [3, 10])], [("y", [3, 10])],
              {"three": c(3.0), "k": c(0.044715), "c": c(math.sqrt(2 / math.pi)),
               "one": c(1.0), "half": c(0.5)})
    g, _ = check(m, {"x": 2 * rand(3, 10)}, P.fuse_gelu)
    assert ops(g) == {"Gelu": 1} and only(g, "Gelu").attrs["approximate"] == "tanh"


def test_gelu_fused_into_gemm():
    nodes = [helper.make_node("MatMul", ["inp", "W"], ["x"]),
             helper.make_node("Add", ["x", "bias"], ["xb"])]
    nodes += [helper.make_node(n.op_type, [("xb" if i == "x" else i) for i in n.input],
                               n.output) for n in gelu_nodes("half_last")]
    m = model(nodes, [("inp", [2, 3, 8])], [("y", [2, 3, 6])],
              {"W": rand(8, 6), "bias": rand(6), "sqrt2": c(math.sqrt(2)), "one": c(1.0),
               "half": c(0.5)})
    g, _ = check(m, {"inp": rand(2, 3, 8)})
    assert ops(g) == {"Gemm": 1} and only(g, "Gemm").attrs["activation"] == "Gelu"


def test_gelu_not_fused_with_wrong_constant_or_shared_erf():
    nodes = gelu_nodes("half_last") + [helper.make_node("Neg", ["e"], ["z"])]
    m = model(nodes, [("x", [3, 10])], [("y", [3, 10]), ("z", [3, 10])], GELU_INITS)
    g, _ = check(m, {"x": rand(3, 10)}, P.fuse_gelu)
    assert "Gelu" not in ops(g)
    inits = dict(GELU_INITS, half=c(0.25))
    m = model(gelu_nodes("half_last"), [("x", [3, 10])], [("y", [3, 10])], inits)
    g, _ = check(m, {"x": rand(3, 10)}, P.fuse_gelu)
    assert "Gelu" not in ops(g)


# -- fuse_attention -----------------------------------------------------------------------------
def attention_nodes(scale_op="Div", mask=True):
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"])]
    last = "s0"
    if scale_op:
        nodes.append(helper.make_node(scale_op, [last, "scale"], ["s1"]))
        last = "s1"
    if mask:
        nodes.append(helper.make_node("Add", [last, "mask"], ["s2"]))
        last = "s2"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    return nodes


@pytest.mark.parametrize("scale_op,mask", [("Div", True), ("Mul", True), (None, True),
                                           ("Div", False)])
def test_fuse_attention(scale_op, mask):
    b, h, s, d = 2, 3, 5, 4
    inputs = [("q", [b, h, s, d]), ("k", [b, h, s, d]), ("v", [b, h, s, d])]
    feeds = {"q": rand(b, h, s, d), "k": rand(b, h, s, d), "v": rand(b, h, s, d)}
    if mask:
        inputs.append(("mask", [b, 1, 1, s]))
        feeds["mask"] = np.where(rand(b, 1, 1, s) > 0, 0, -1e4).astype(np.float32)
    scale = {"Div": math.sqrt(d), "Mul": 1 / math.sqrt(d)}.get(scale_op)
    inits = {"scale": c(scale)} if scale_op else {}
    m = model(attention_nodes(scale_op, mask), inputs, [("y", [b, h, s, d])], inits)
    g, _ = check(m, feeds, P.fuse_attention)
    assert ops(g) == {"Transpose": 1, "FusedAttention": 1}
    fa = only(g, "FusedAttention")
    assert fa.inputs[:3] == ["q", "kt", "v"] and (fa.inputs[3:] == ["mask"]) == mask
    assert abs(fa.attrs["scale"] - (1 / math.sqrt(d) if scale_op else 1.0)) < 1e-6


def test_attention_reads_split_heads_in_place():
    """BERT's head split: (B, S, H*D) -> Reshape (B, S, H, D) -> Transpose -> attention ->
    Transpose -> Reshape. The q / v / output Transposes become perms of the FusedAttention
    (no copies); K's, read transposed, stays a Transpose (a copy runs faster)."""
    b, s, h, d = 2, 5, 3, 4
    shape4 = np.array([b, s, h, d], np.int64)
    nodes = []
    for x in "qkv":
        nodes.append(helper.make_node("Reshape", [x, "shape4"], [f"{x}4"]))
    nodes += [helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
              helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
              helper.make_node("MatMul", ["qh", "kt"], ["s0"]),
              helper.make_node("Div", ["s0", "scale"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vh"], ["yh"]),
              helper.make_node("Transpose", ["yh"], ["y4"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["y4", "shape3"], ["y"])]
    inputs = [(x, [b, s, h * d]) for x in "qkv"]
    feeds = {x: rand(b, s, h * d) for x in "qkv"}
    m = model(nodes, inputs, [("y", [b, s, h * d])],
              {"shape4": shape4, "shape3": np.array([b, s, h * d], np.int64),
               "scale": c(math.sqrt(d))})
    g, _ = check(m, feeds)
    assert ops(g).get("Transpose") == 1, ops(g)
    fa = only(g, "FusedAttention")
    assert fa.attrs["perm_q"] == fa.attrs["perm_v"] == fa.attrs["perm_y"] == [0, 2, 1, 3]
    assert "perm_k" not in fa.attrs
    sess = edgenn.InferenceSession(g, threads=1)
    got = sess.run(None, feeds)[0]
    np.testing.assert_allclose(got, run_ort(m, feeds)["y"], rtol=1e-4, atol=1e-5)


def test_attention_not_fused_when_probs_shared():
    b, h, s, d = 1, 2, 4, 4
    nodes = attention_nodes("Div", False) + [helper.make_node("Neg", ["p"], ["z"])]
    m = model(nodes, [("q", [b, h, s, d]), ("k", [b, h, s, d]), ("v", [b, h, s, d])],
              [("y", [b, h, s, d]), ("z", [b, h, s, s])], {"scale": c(2.0)})
    feeds = {"q": rand(b, h, s, d), "k": rand(b, h, s, d), "v": rand(b, h, s, d)}
    g, _ = check(m, feeds, P.fuse_attention)
    assert "FusedAttention" not in ops(g)


def test_attention_not_fused_on_other_softmax_axis():
    b, h, s, d = 1, 2, 4, 4
    nodes = attention_nodes(None, False)
    nodes[2] = helper.make_node("Softmax", ["s0"], ["p"], axis=2)
    m = model(nodes, [("q", [b, h, s, d]), ("k", [b, h, s, d]), ("v", [b, h, s, d])],
              [("y", [b, h, s, d])])
    feeds = {"q": rand(b, h, s, d), "k": rand(b, h, s, d), "v": rand(b, h, s, d)}
    g, _ = check(m, feeds, P.fuse_attention)
    assert "FusedAttention" not in ops(g)


# -- pipelines ----------------------------------------------------------------------------------
def test_optimize_report_and_levels():
    m = model(conv_bn_nodes() + [helper.make_node("Relu", ["y"], ["z"])],
              [("x", [1, 3, 8, 8])], [("z", [1, 6, 8, 8])],
              {"W": rand(6, 3, 3, 3), "B": rand(6), **bn_params(6)})
    g = import_onnx(m)
    report = P.optimize(g, "declutter")
    assert report["fusions"] == {} and ops(g) == {"Conv": 1, "BatchNormalization": 1,
                                                    "Relu": 1}
    g, report = check(m, {"x": rand(1, 3, 8, 8)}, rtol=1e-4)
    assert ops(g) == {"Conv": 1}
    assert report["fusions"] == {"batchnorm_folded": 1, "activation_fused": 1}
    assert report["nodes_before"] == 3 and report["nodes_after"] == 1
    assert report["ops_after"] == {"Conv": 1}
    assert report["rounds"] >= 2  # the last round changes nothing
    with pytest.raises(ValueError):
        P.optimize(g, "turbo")


def test_every_pass_has_a_prefilter_and_name():
    for name, passes in P.PIPELINES.items():
        for p in passes:
            empty = import_onnx(model([helper.make_node("Relu", ["x"], ["y"])],
                                      [("x", [2])], [("y", [2])]))
            assert p(empty) is False, p.__name__


# -- a torch-exported BERT layer ----------------------------------------------------------------
def _torch_bert_layer(path, dynamic):
    import torch  # a test dependency: its absence must fail, not skip
    torch.manual_seed(0)

    class Layer(torch.nn.Module):
        def __init__(self, d=32, heads=4, ff=64):
            super().__init__()
            self.h, self.dh = heads, d // heads
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.f1, self.f2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

        def split(self, t):
            b, s, _ = t.shape
            return t.view(b, s, self.h, self.dh).transpose(1, 2)

        def forward(self, x, mask):
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            att = q @ k.transpose(-1, -2) / math.sqrt(self.dh) + mask
            ctx = (att.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
            h = self.ln1(x + self.o(ctx))
            return self.ln2(h + self.f2(torch.nn.functional.gelu(self.f1(h))))

    layer = Layer().eval()
    x = torch.randn(2, 7, 32)
    mask = torch.zeros(2, 1, 1, 7)
    mask[1, ..., 5:] = -10000.0
    kwargs = {}
    if dynamic:
        kwargs["dynamic_axes"] = {"x": {0: "B", 1: "S"}, "mask": {0: "B", 3: "S"}}
    torch.onnx.export(layer, (x, mask), path, dynamo=False, opset_version=14,
                      input_names=["x", "mask"], output_names=["y"], **kwargs)
    return onnx.load(path), {"x": x.numpy(), "mask": mask.numpy()}


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_bert_layer(tmp_path, dynamic):
    m, feeds = _torch_bert_layer(str(tmp_path / "bert.onnx"), dynamic)
    g, report = check(m, feeds, rtol=1e-4, atol=1e-4)
    counts = ops(g)
    assert counts.get("LayerNormalization") == 2, counts
    assert counts.get("FusedAttention") == 1, counts
    assert "MatMul" not in counts and "Erf" not in counts and "Softmax" not in counts
    gemms = [n for n in g.nodes if n.op == "Gemm"]
    assert len(gemms) == 6
    assert [n.attrs["activation"] for n in gemms].count("Gelu") == 1
    # both residual Adds become the Z input of the projection Gemms
    assert sum(len(n.inputs) > 3 and bool(n.inputs[3]) for n in gemms) == 2
    if not dynamic:
        assert not {"Shape", "Gather", "Concat", "Unsqueeze"} & set(counts), counts


# -- eliminate_common_subexpressions ------------------------------------------------------------
def test_cse_merges_shape_chains_and_constants():
    nodes = []
    for i in range(3):
        nodes += [helper.make_node("Shape", ["x"], [f"s{i}"]),
                  helper.make_node("Gather", [f"s{i}", f"i{i}"], [f"d{i}"], axis=0)]
    nodes += [helper.make_node("Concat", ["d0", "d1", "d2"], ["shp"], axis=0),
              helper.make_node("Unsqueeze", ["shp", "ax"], ["y"]),
              helper.make_node("Relu", ["x"], ["r1"]),
              helper.make_node("Relu", ["x"], ["r2"]),       # writes a graph output: kept
              helper.make_node("LeakyRelu", ["x"], ["l1"], alpha=0.1),
              helper.make_node("LeakyRelu", ["x"], ["l2"], alpha=0.2),  # other attrs: kept
              helper.make_node("Add", ["r1", "l1"], ["a"]),
              helper.make_node("Add", ["a", "l2"], ["z"])]
    inits = {f"i{i}": np.array([0], np.int64) for i in range(3)}
    inits["ax"] = np.array([0], np.int64)
    m = model(nodes, [("x", ["N", 4])], [("y", [3, 1]), ("z", ["N", 4]), ("r2", ["N", 4])],
              inits)
    # y has int64 dtype
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    g, changed = check(m, {"x": rand(5, 4)}, P.eliminate_common_subexpressions)
    assert changed
    assert ops(g) == {"Shape": 1, "Gather": 1, "Concat": 1, "Unsqueeze": 1, "Relu": 2,
                      "LeakyRelu": 2, "Add": 2}
    assert len(g.consts) == 1


# -- fold_conv_affine -----------------------------------------------------------------------------
def test_fold_conv_affine_paddle_style():
    # paddle: Conv without bias, then Add(bias (1, M, 1, 1)), Mul(scalar), Add(scalar), Relu
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "b"], ["cb"]),
             helper.make_node("Mul", ["s", "cb"], ["cs"]),
             helper.make_node("Add", ["cs", "t"], ["ct"]),
             helper.make_node("Relu", ["ct"], ["y"])]
    m = model(nodes, [("x", [1, 3, 6, 6])], [("y", [1, 4, 6, 6])],
              {"W": rand(4, 3, 3, 3), "b": rand(1, 4, 1, 1), "s": c([1.7]), "t": c(0.3)})
    g, report = check(m, {"x": rand(1, 3, 6, 6)}, rtol=1e-4)
    assert ops(g) == {"Conv": 1}
    assert only(g, "Conv").attrs["activation"] == "Relu"
    assert report["fusions"]["affine_folded"] == 3


def test_fold_gemm_affine():
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["g"], transB=1, beta=0.5),
             helper.make_node("Mul", ["g", "s"], ["gs"]),
             helper.make_node("Add", ["t", "gs"], ["y"])]
    m = model(nodes, [("x", [3, 4])], [("y", [3, 5])],
              {"W": rand(5, 4), "C": rand(5), "s": rand(5), "t": rand(1, 5)})
    g, _ = check(m, {"x": rand(3, 4)}, P.fold_conv_affine, rtol=1e-4)
    assert ops(g) == {"Gemm": 1}


def test_fold_conv_affine_not_for_spatial_or_shared():
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("Add", ["c", "sp"], ["y"]),          # varies over W: no
             helper.make_node("Conv", ["x", "W"], ["d"]),
             helper.make_node("Mul", ["d", "s"], ["z"]),
             helper.make_node("Neg", ["d"], ["n"])]                # d shared: no
    m = model(nodes, [("x", [1, 3, 5, 5])],
              [("y", [1, 2, 5, 5]), ("z", [1, 2, 5, 5]), ("n", [1, 2, 5, 5])],
              {"W": rand(2, 3, 1, 1), "sp": rand(1, 1, 1, 5), "s": c(2.0)})
    g, changed = check(m, {"x": rand(1, 3, 5, 5)}, P.fold_conv_affine)
    assert not changed


# -- fold_input_affine ----------------------------------------------------------------------------
@pytest.mark.parametrize("group", [1, 2])
def test_fold_input_affine_into_unpadded_conv(group):
    nodes = [helper.make_node("HardSwish", ["x"], ["h"]),
             helper.make_node("Mul", ["a", "h"], ["ha"]),
             helper.make_node("Add", ["ha", "b"], ["hb"]),
             helper.make_node("Conv", ["hb", "W", "B"], ["y"], group=group)]
    m = model(nodes, [("x", [1, 4, 5, 5])], [("y", [1, 6, 5, 5])],
              {"a": c([0.7]), "b": c([-0.4]), "W": rand(6, 4 // group, 1, 1), "B": rand(6)})
    g, _ = check(m, {"x": rand(1, 4, 5, 5)}, P.fold_input_affine, rtol=1e-4)
    assert ops(g) == {"HardSwish": 1, "Conv": 1}


def test_fold_input_affine_not_into_padded_conv():
    nodes = [helper.make_node("Add", ["x", "b"], ["xb"]),
             helper.make_node("Conv", ["xb", "W"], ["y"], pads=[1, 1, 1, 1])]
    m = model(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 3, 4, 4])],
              {"b": c(0.5), "W": rand(3, 2, 3, 3)})
    g, changed = check(m, {"x": rand(1, 2, 4, 4)}, P.fold_input_affine)
    assert not changed


def test_optimize_is_idempotent_on_bert_layer(tmp_path):
    m, feeds = _torch_bert_layer(str(tmp_path / "bert.onnx"), dynamic=True)
    g = import_onnx(m)
    P.optimize(g)
    again = P.optimize(g)
    assert again["fusions"] == {} and again["rounds"] == 1
    assert again["nodes_before"] == again["nodes_after"]


# -- fold_pad_into_conv -----------------------------------------------------------------------
def _pad_conv(pads, value=None, mode="constant", conv_pads=(1, 1, 1, 1), auto_pad=None,
              extra_use=False):
    pad_in = ["x", "pads"] + (["v"] if value is not None else [])
    conv_attrs = {"strides": [2, 2]}
    if auto_pad:
        conv_attrs["auto_pad"] = auto_pad
    else:
        conv_attrs["pads"] = list(conv_pads)
    nodes = [helper.make_node("Pad", pad_in, ["p"], mode=mode),
             helper.make_node("Conv", ["p", "W", "B"], ["y"], **conv_attrs)]
    outputs = [("y", ["n", "m", "h", "w"])]
    if extra_use:
        nodes.append(helper.make_node("Relu", ["p"], ["z"]))
        outputs.append(("z", ["n", "c", "h2", "w2"]))
    cin = 3 + pads[1] + pads[5]
    inits = {"W": rand(4, cin, 3, 3), "B": rand(4), "pads": np.array(pads, np.int64)}
    if value is not None:
        inits["v"] = c(value)
    return model(nodes, [("x", [1, 3, 9, 10])], outputs, inits)


@pytest.mark.parametrize("pads,conv_pads,auto_pad", [
    ([0, 0, 0, 0, 0, 0, 1, 1], (0, 0, 0, 0), None),        # TF SAME before stride 2
    ([0, 0, 1, 2, 0, 0, 2, 1], (1, 1, 1, 1), None),        # added to the conv's own pads
    ([0, 0, 1, 1, 0, 0, 1, 1], None, "VALID")])
def test_fold_pad_into_conv(pads, conv_pads, auto_pad):
    m = _pad_conv(pads, value=0.0, conv_pads=conv_pads or (0, 0, 0, 0), auto_pad=auto_pad)
    g, changed = check(m, {"x": rand(1, 3, 9, 10)}, P.fold_pad_into_conv)
    assert changed and ops(g) == {"Conv": 1}
    conv = only(g, "Conv")
    own = list(conv_pads or (0, 0, 0, 0))
    assert conv.inputs[0] == "x" and conv.attrs["pads"] == [
        own[0] + pads[2], own[1] + pads[3], own[2] + pads[6], own[3] + pads[7]]


@pytest.mark.parametrize("case", ["value", "channels", "crop", "reflect", "shared", "same"])
def test_pad_not_folded(case):
    """Only zero-valued, spatial, non-negative constant Pads read by nothing but the Conv."""
    kw = {"pads": [0, 0, 1, 1, 0, 0, 1, 1]}
    if case == "value":
        kw["value"] = 0.5
    elif case == "channels":
        kw["pads"] = [0, 1, 1, 1, 0, 0, 1, 1]
    elif case == "crop":
        kw["pads"] = [0, 0, -1, 1, 0, 0, 1, 1]
    elif case == "reflect":
        kw["mode"] = "reflect"
    elif case == "shared":
        kw["extra_use"] = True
    else:
        kw["auto_pad"] = "SAME_UPPER"
    m = _pad_conv(**kw)
    g, changed = check(m, {"x": rand(1, 3, 9, 10)}, P.fold_pad_into_conv)
    assert not changed and ops(g).get("Pad") == 1
