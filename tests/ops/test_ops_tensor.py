"""Tensor family (shape manipulation, indexing, data movement): shape rules, reference
kernels against onnxruntime, old-opset converters, constant folding. ONNX node cases:
tests/ops/test_node_cases.py."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.helpers import check_against_ort

from edgenn.converters.onnx.importer import import_onnx
from edgenn.errors import DataDependentShapeError, GraphError, UnsupportedOpError
from edgenn.graph.infer import execute, infer

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# -- helpers ---------------------------------------------------------------------------------


def _model(nodes, feeds: dict, consts: dict | None = None, opset: int = 17,
           outputs: list[str] | None = None, dynamic: dict | None = None) -> onnx.ModelProto:
    """A model over `nodes`; graph inputs typed from `feeds` (dims named in `dynamic`
    become symbolic), initializers from `consts`, outputs typed by ONNX shape inference."""
    consts = consts or {}
    inputs = []
    for name, a in feeds.items():
        shape = list(a.shape)
        for axis, sym in (dynamic or {}).get(name, {}).items():
            shape[axis] = sym
        inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), shape))
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    outputs = outputs or [nodes[-1].output[0]]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del model.graph.output[:]
    fallback = helper.np_dtype_to_tensor_dtype(
        next(iter(feeds.values())).dtype) if feeds else TensorProto.FLOAT
    for o in outputs:  # invalid models (error tests): the first input's dtype
        elem = known[o].type.tensor_type.elem_type if o in known else 0
        elem = elem or fallback
        model.graph.output.append(helper.make_tensor_value_info(o, elem, None))
    return model


def _compare(model, feeds, exact=True):
    """Against onnxruntime: bit-equal values if `exact`, else within 1e-6."""
    return check_against_ort(model, feeds, exact=lambda w: exact, rtol=1e-6, atol=1e-6)


def _node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)


# -- reshape family ------------------------------------------------------------------------


@pytest.mark.parametrize("shape,allowzero", [
    ([0, -1], 0), ([2, 0, 20], 0), ([-1], 0), ([6, 20], 0), ([1, 2, 1, 60], 0),
    ([2, 3, 20], 1), ([-1, 5], 1)])
def test_reshape(shape, allowzero):
    m = _model([_node("Reshape", ["x", "s"], allowzero=allowzero)], {"x": X},
               {"s": np.array(shape, np.int64)}, opset=14)
    _compare(m, {"x": X})


def test_reshape_allowzero_zero_dim():
    x = np.zeros((0, 3), np.float32)
    m = _model([_node("Reshape", ["x", "s"], allowzero=1)], {"x": x},
               {"s": np.array([3, 0], np.int64)}, opset=14)
    _compare(m, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 4])
def test_flatten(axis):
    _compare(_model([_node("Flatten", ["x"], axis=axis)], {"x": X}), {"x": X})


@pytest.mark.parametrize("perm", [None, [0, 2, 3, 1], [3, 1, 0, 2]])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.bool_, np.int8])
def test_transpose_dtypes(perm, dtype):
    x = (X * 10).astype(dtype)
    kw = {} if perm is None else {"perm": perm}
    got = _compare(_model([_node("Transpose", ["x"], **kw)], {"x": x}), {"x": x})
    assert got[0].flags.c_contiguous


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset):
    x = rng.standard_normal((1, 3, 1, 5)).astype(np.float32)
    if opset < 13:
        nodes = [_node("Squeeze", ["x"], ["s"], axes=[0, -2]),
                 _node("Unsqueeze", ["s"], ["y"], axes=[-1, 0, 2])]
        consts = {}
    else:
        nodes = [_node("Squeeze", ["x", "a"], ["s"]), _node("Unsqueeze", ["s", "b"], ["y"])]
        consts = {"a": np.array([0, -2], np.int64), "b": np.array([-1, 0, 2], np.int64)}
    g = import_onnx(_model(nodes, {"x": x}, consts, opset=opset))
    assert [len(n.inputs) for n in g.nodes] == [2, 2] and not g.nodes[0].attrs
    _compare(_model(nodes, {"x": x}, consts, opset=opset), {"x": x})


def test_squeeze_all():
    x = rng.standard_normal((1, 3, 1, 5)).astype(np.float32)
    _compare(_model([_node("Squeeze", ["x"])], {"x": x}, opset=13), {"x": x})


def test_squeeze_non_one_axis_is_graph_error():
    m = _model([_node("Squeeze", ["x", "a"])], {"x": X}, {"a": np.array([1], np.int64)})
    with pytest.raises(GraphError, match="Squeeze"):
        infer(import_onnx(m))


# -- concat / split / slice -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.uint8, np.bool_])
def test_concat(dtype):
    a = (X * 3).astype(dtype)
    b = (X[:, :1] * 5).astype(dtype)
    c = np.zeros((2, 0, 4, 5), dtype)
    m = _model([_node("Concat", ["a", "b", "c"], axis=-3)], {"a": a, "b": b, "c": c})
    _compare(m, {"a": a, "b": b, "c": c})


def test_split_old_attr_form():
    x = rng.standard_normal((3, 6)).astype(np.float32)
    m = _model([_node("Split", ["x"], ["p", "q"], axis=1, split=[2, 4])], {"x": x}, opset=11,
               outputs=["p", "q"])
    _compare(m, {"x": x})
    m = _model([_node("Split", ["x"], ["p", "q", "r"])], {"x": x}, opset=11,
               outputs=["p", "q", "r"])
    g = import_onnx(m)
    assert g.nodes[0].attrs["num_outputs"] == 3 and len(g.nodes[0].inputs) == 1
    _compare(m, {"x": x})


def test_split_input_and_num_outputs():
    x = rng.standard_normal((7, 3)).astype(np.float32)
    m = _model([_node("Split", ["x", "s"], ["p", "q"])], {"x": x},
               {"s": np.array([3, 4], np.int64)}, opset=13, outputs=["p", "q"])
    _compare(m, {"x": x})
    m = _model([_node("Split", ["x"], ["p", "q", "r"], num_outputs=3)], {"x": x}, opset=18,
               outputs=["p", "q", "r"])
    got = _compare(m, {"x": x})
    assert [o.shape[0] for o in got] == [3, 3, 1]


SLICES = [
    ([1], [3], [0], [1]),
    ([-1], [INT64_MIN], [1], [-1]),                 # reverse a whole axis
    ([INT64_MAX], [0], [-1], [-2]),                 # start clamps to dim-1
    ([0, 1], [INT64_MAX, -1], [3, 1], [2, 1]),
    ([-100], [100], [2], [1]),                      # clamping both ends
    ([3], [1], [2], [1]),                           # empty
    ([4], [-7], [-1], [-3]),
    ([0, 0, 0, 0], [2, 3, 4, 5], None, None),       # default axes and steps
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts, ends, axes, steps):
    consts = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64)}
    ins = ["x", "st", "en"]
    if axes is not None:
        consts["ax"] = np.array(axes, np.int64)
        ins.append("ax")
    if steps is not None:
        consts["sp"] = np.array(steps, np.int64)
        ins.append("sp")
    _compare(_model([_node("Slice", ins)], {"x": X}, consts), {"x": X})


def test_slice_int32_and_opset9():
    x = np.arange(60, dtype=np.int32).reshape(6, 10)
    m = _model([_node("Slice", ["x", "st", "en", "ax"])], {"x": x},
               {"st": np.array([1, -8], np.int32), "en": np.array([5, 9], np.int32),
                "ax": np.array([0, 1], np.int32)})
    _compare(m, {"x": x})
    m9 = _model([_node("Slice", ["x"], starts=[1, -8], ends=[5, 9], axes=[0, 1])], {"x": x},
                opset=9)
    assert len(import_onnx(m9).nodes[0].inputs) == 4
    _compare(m9, {"x": x})


# -- gather / scatter ---------------------------------------------------------------------------


@pytest.mark.parametrize("axis,indices", [
    (0, np.array(1, np.int64)), (1, np.array([[0, 2], [-1, 1]], np.int64)),
    (-1, np.array([4, 0, -5], np.int32))])
def test_gather(axis, indices):
    m = _model([_node("Gather", ["x", "i"], axis=axis)], {"x": X}, {"i": indices})
    _compare(m, {"x": X})


def test_gather_elements_and_nd():
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    idx = rng.integers(-4, 4, (3, 2, 5)).astype(np.int64)
    _compare(_model([_node("GatherElements", ["x", "i"], axis=1)], {"x": x}, {"i": idx}),
             {"x": x})
    idx = np.array([[[1, -2], [0, 3]], [[2, 2], [1, 0]], [[0, 0], [2, 4]]], np.int64)
    _compare(_model([_node("GatherND", ["x", "i"], batch_dims=1)], {"x": x}, {"i": idx}),
             {"x": x})
    idx = np.array([[2], [0]], np.int64)
    _compare(_model([_node("GatherND", ["x", "i"])], {"x": x}, {"i": idx}), {"x": x})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter(reduction):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([[1, 0, 3], [2, -1, 0]], np.int64)
    upd = rng.standard_normal((2, 3)).astype(np.float32)
    m = _model([_node("ScatterElements", ["x", "i", "u"], axis=1, reduction=reduction)],
               {"x": x, "u": upd}, {"i": idx}, opset=18)
    _compare(m, {"x": x, "u": upd}, exact=False)
    idx = np.array([[[1], [3]], [[-4], [2]]], np.int64)
    upd = rng.standard_normal((2, 2, 5)).astype(np.float32)
    m = _model([_node("ScatterND", ["x", "i", "u"], reduction=reduction)],
               {"x": x, "u": upd}, {"i": idx}, opset=18)
    _compare(m, {"x": x, "u": upd}, exact=False)


def test_scatter_does_not_modify_input():
    x = np.zeros((3, 3), np.float32)
    x.setflags(write=False)
    m = _model([_node("ScatterND", ["x", "i", "u"])], {"x": x},
               {"i": np.array([[1, 1]], np.int64), "u": np.ones(1, np.float32)})
    out = execute(import_onnx(m), {"x": x})["y"]
    assert out[1, 1] == 1 and x[1, 1] == 0


# -- generators and tiling -------------------------------------------------------------------


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (1, -1), (3, 1)])
def test_shape_and_size(start, end):
    kw = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    _compare(_model([_node("Shape", ["x"], **kw)], {"x": X}, opset=15), {"x": X})
    _compare(_model([_node("Size", ["x"])], {"x": X}), {"x": X})


def test_expand_tile():
    x = rng.standard_normal((3, 1)).astype(np.float32)
    _compare(_model([_node("Expand", ["x", "s"])], {"x": x},
                    {"s": np.array([2, 1, 6], np.int64)}), {"x": x})
    _compare(_model([_node("Expand", ["x", "s"])], {"x": x},
                    {"s": np.array([1, 1], np.int64)}), {"x": x})
    _compare(_model([_node("Tile", ["x", "r"])], {"x": x}, {"r": np.array([2, 3], np.int64)}),
             {"x": x})


def test_constant_of_shape_range_eyelike_trilu():
    s = np.array([2, 3], np.int64)
    v = helper.make_tensor("v", TensorProto.INT32, [1], [7])
    _compare(_model([_node("ConstantOfShape", ["s"], value=v)], {"s": s}), {"s": s})
    _compare(_model([_node("ConstantOfShape", ["s"])], {"s": s}), {"s": s})
    for start, limit, delta in [(0, 10, 3), (10, 4, -2), (5, 5, 1)]:
        feeds = {"a": np.array(start, np.int64), "b": np.array(limit, np.int64),
                 "c": np.array(delta, np.int64)}
        m = _model([_node("Range", ["a", "b", "c"])], {}, feeds)
        _compare(m, {})
    feeds = {"a": np.array(0.1, np.float32), "b": np.array(2.3, np.float32),
             "c": np.array(0.3, np.float32)}
    _compare(_model([_node("Range", ["a", "b", "c"])], {}, feeds), {}, exact=False)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    for k in (0, 2, -1):
        _compare(_model([_node("EyeLike", ["x"], k=k, dtype=TensorProto.INT64)], {"x": x}),
                 {"x": x})
    for upper in (0, 1):
        for k in (-1, 0, 3):
            m = _model([_node("Trilu", ["x", "k"], upper=upper)], {"x": X},
                       {"k": np.array(k, np.int64)}, opset=14)
            _compare(m, {"x": X})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    idx = np.array([[0, 3, -1], [9, -10, 2]], np.int64)
    m = _model([_node("OneHot", ["i", "d", "v"], axis=axis)], {"i": idx},
               {"d": np.array(4.0, np.float32), "v": np.array([0.5, 2.0], np.float32)},
               opset=11)
    _compare(m, {"i": idx})


def test_one_hot_opset9_negative_indices_are_off():
    idx = np.array([0, -1, 2], np.int64)
    m = _model([_node("OneHot", ["i", "d", "v"])], {"i": idx},
               {"d": np.array([3], np.int64), "v": np.array([0, 1], np.int64)}, opset=9)
    out = execute(import_onnx(m), {"i": idx})["y"]
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 0], [0, 0, 1]])


# -- TopK ------------------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 1])
def test_topk_ties(largest, axis):
    x = rng.integers(0, 4, (3, 8, 6)).astype(np.float32)  # many ties
    m = _model([_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)], {"x": x},
               {"k": np.array([5], np.int64)}, opset=11, outputs=["v", "i"])
    _compare(m, {"x": x})


def test_topk_int_and_opset9():
    x = rng.integers(-50, 50, (4, 7)).astype(np.int64)
    m = _model([_node("TopK", ["x", "k"], ["v", "i"], largest=0)], {"x": x},
               {"k": np.array([3], np.int64)}, opset=11, outputs=["v", "i"])
    _compare(m, {"x": x})
    xf = x.astype(np.float32)
    m9 = _model([_node("TopK", ["x"], ["v", "i"], k=2, axis=0)], {"x": xf}, opset=9,
                outputs=["v", "i"])
    assert import_onnx(m9).nodes[0].attrs["largest"] == 1
    _compare(m9, {"x": xf})


# -- depth/space, pad ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode):
    x = rng.standard_normal((2, 8, 3, 5)).astype(np.float32)
    _compare(_model([_node("DepthToSpace", ["x"], blocksize=2, mode=mode)], {"x": x}),
             {"x": x})
    # SpaceToDepth's CRD mode (opset 28) is newer than onnxruntime: check it inverts
    m = _model([_node("DepthToSpace", ["x"], ["t"], blocksize=2, mode=mode),
                _node("SpaceToDepth", ["t"], blocksize=2, mode=mode)], {"x": x})
    g = import_onnx(m)
    np.testing.assert_array_equal(execute(g, {"x": x})["y"], x)
    y = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    _compare(_model([_node("SpaceToDepth", ["x"], blocksize=2)], {"x": y}), {"x": y})


PADS = [
    ("constant", [0, 1, 2, 0, 1, 0, 0, 3], 1.5, None),
    ("constant", [0, 0, -1, 2, 0, 1, 1, -2], None, None),  # negative pads crop
    ("reflect", [0, 0, 2, 3, 0, 0, 1, 4], None, None),
    ("edge", [1, 0, 2, 3, 0, 2, 1, 4], None, None),
    ("wrap", [0, 0, 2, 3, 0, 0, 3, 4], None, None),
    ("constant", [1, 2, 0, 3], 2.0, [1, -1]),
    ("reflect", [1, 2, 2, 3], None, [-2, 3]),
]


@pytest.mark.parametrize("mode,pads,value,axes", PADS)
def test_pad(mode, pads, value, axes):
    consts = {"p": np.array(pads, np.int64)}
    ins = ["x", "p"]
    if value is not None or axes is not None:
        ins.append("c" if value is not None else "")
        if value is not None:
            consts["c"] = np.array(value, np.float32)
    if axes is not None:
        ins.append("a")
        consts["a"] = np.array(axes, np.int64)
    _compare(_model([_node("Pad", ins, mode=mode)], {"x": X}, consts, opset=19), {"x": X})


def test_pad_int_and_opset2_attr_form():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    m = _model([_node("Pad", ["x", "p", "c"])], {"x": x},
               {"p": np.array([1, 0, 0, 2], np.int64), "c": np.array(9, np.int32)})
    _compare(m, {"x": x})
    xf = x.astype(np.float32)
    m2 = _model([_node("Pad", ["x"], pads=[1, 0, 0, 2], value=9.0)], {"x": xf}, opset=10)
    g = import_onnx(m2)
    assert len(g.nodes[0].inputs) == 3
    _compare(m2, {"x": xf})


# -- constants and folding -------------------------------------------------------------------


def test_constant_forms():
    nodes = [_node("Constant", [], ["a"], value_float=2.5),
             _node("Constant", [], ["b"], value_ints=[1, 2, 3]),
             _node("Constant", [], ["c"], value=numpy_helper.from_array(
                 np.arange(6, dtype=np.uint8).reshape(2, 3))),
             _node("Constant", [], ["d"], value_int=4),
             _node("Constant", [], ["e"], value_floats=[1.0, 2.0])]
    m = _model(nodes, {}, outputs=list("abcde"), opset=13)
    g = import_onnx(m)
    assert not g.nodes
    assert g.consts["a"].shape == () and g.consts["a"].dtype == np.float32
    assert g.consts["d"].shape == () and g.consts["d"].dtype == np.int64
    _compare(m, {})


def test_torch_shape_chain_folds():
    """x (N, 3, 4, 5): Shape -> Gather(0) -> Unsqueeze -> Concat([n, -1]) -> Reshape, as
    torch exports `x.view(x.size(0), -1)`: folds once N is bound."""
    nodes = [_node("Shape", ["x"], ["s"]),
             _node("Gather", ["s", "zero"], ["n"], axis=0),
             _node("Unsqueeze", ["n", "ax0"], ["n1"]),
             _node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             _node("Reshape", ["x", "shape"], ["y"])]
    consts = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
              "minus1": np.array([-1], np.int64)}
    m = _model(nodes, {"x": X}, consts, opset=13, dynamic={"x": {0: "N"}})
    g = import_onnx(m)
    infos = infer(g, {"x": (2, 3, 4, 5)})
    np.testing.assert_array_equal(infos["shape"].value, [2, -1])
    assert infos["shape"].dtype == "int64"
    assert infos["y"].shape == (2, 60) and infos["y"].value is None
    assert "y" not in infer(g)  # N unbound: unknown, no error
    _compare(m, {"x": X})


def test_non_constant_shape_input_is_data_dependent_error():
    m = _model([_node("Reshape", ["x", "s"])], {"x": X, "s": np.array([6, 20], np.int64)})
    with pytest.raises(DataDependentShapeError, match="'shape' of Reshape node"):
        infer(import_onnx(m))


def test_bad_reshape_is_graph_error():
    m = _model([_node("Reshape", ["x", "s"])], {"x": X}, {"s": np.array([7, -1], np.int64)})
    with pytest.raises(GraphError, match="Reshape"):
        infer(import_onnx(m))


def test_nonzero_only_when_folded():
    c = np.array([[0, 2, 0], [1, 0, 3]], np.float32)
    m = _model([_node("NonZero", ["c"], ["nz"]), _node("Transpose", ["nz"])], {}, {"c": c})
    g = import_onnx(m)
    infos = infer(g)
    np.testing.assert_array_equal(infos["nz"].value, np.array(np.nonzero(c)))
    _compare(m, {})
    m = _model([_node("NonZero", ["x"])], {"x": X})
    with pytest.raises(UnsupportedOpError, match="NonZero"):
        infer(import_onnx(m))


def test_shape_rules_match_reference_dtypes():
    """Every node of the ORT-checked models: rule dtype/shape == reference output."""
    x = (X * 4).astype(np.int8)
    nodes = [_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]),
             _node("Slice", ["t", "st", "en"], ["s"]),
             _node("Pad", ["s", "p"], ["pd"], mode="edge"),
             _node("TopK", ["pd", "k"], ["v", "i"]),
             _node("Tile", ["i", "r"], ["y"])]
    consts = {"st": np.array([1], np.int64), "en": np.array([3], np.int64),
              "p": np.array([0, 0, 1, 0, 0, 0, 0, 2], np.int64),
              "k": np.array([2], np.int64), "r": np.array([1, 2, 1, 1], np.int64)}
    m = _model(nodes, {"x": x}, consts, outputs=["v", "y"])
    g = import_onnx(m)
    infos = infer(g, fold=False)
    env = dict(g.consts, x=x)
    from edgenn.graph.infer import evaluate
    for n in g.nodes:
        outs = evaluate(n, [env[i] if i else None for i in n.inputs])
        for name, v in zip(n.outputs, outs):
            env[name] = v
            assert (infos[name].dtype, infos[name].shape) == (v.dtype.name, v.shape), n
    _compare(m, {"x": x})
