"""Small builders shared by tests: one-node and few-node ONNX models."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    """inputs/outputs: [(name, np dtype, shape)]; initializers: {name: array}."""
    def vi(name, dtype, shape):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
    graph = helper.make_graph(
        nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_run(model, feeds, literal=False):
    """onnxruntime's outputs, 1 thread; model: a ModelProto or a path. literal: its graph
    optimizations off (every node as written: DQ, float op, Q)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if literal:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_against_ort(model, feeds, exact, rtol, atol, equal_nan=False):
    """Run `model` with onnxruntime and with edgenn's reference interpreter and assert the
    same number of outputs, dtypes and shapes; then values: bit-equal where exact(ort
    output) is true, else within rtol/atol. Returns edgenn's outputs (a list)."""
    from edgenn.converters.onnx.importer import import_onnx
    from edgenn.graph.infer import execute
    want = ort_run(model, feeds)
    got = list(execute(import_onnx(model), feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if exact(w):
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return got


def rel_err(a, b):
    from edgenn.tools import rel_err as r
    return r(a, b)


__all__ = ["make_model", "ort_run", "check_against_ort", "rel_err", "TensorProto", "helper",
           "numpy_helper"]
