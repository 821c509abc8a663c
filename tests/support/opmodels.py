"""ONNX model builders of the op-family tests (tests/ops/test_ops_elementwise.py,
test_ops_reduce.py): a model over a few nodes typed from its feeds, run against
onnxruntime by edgenn's reference interpreter."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .helpers import check_against_ort


def make_model(nodes, feeds: dict, consts: dict | None = None, opset: int = 17,
               outputs: list[str] | None = None, out_types: dict | None = None
               ) -> onnx.ModelProto:
    """A model over `nodes`; inputs typed from `feeds`, initializers from `consts`,
    output types from ONNX shape inference."""
    consts = consts or {}
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                            list(v.shape)) for k, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    outputs = outputs or [o for o in nodes[-1].output if o]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del model.graph.output[:]
    for o in outputs:
        elem = (out_types or {}).get(o) or known[o].type.tensor_type.elem_type
        model.graph.output.append(helper.make_tensor_value_info(o, elem, None))
    return model


def compare_ort(model, feeds, rtol=1e-5, atol=1e-6):
    """Run with onnxruntime and edgenn's reference interpreter; dtypes, shapes, values
    (floats within rtol/atol, NaN where ORT has NaN; other dtypes exact)."""
    return check_against_ort(model, feeds, exact=lambda w: w.dtype.kind != "f",
                             rtol=rtol, atol=atol, equal_nan=True)


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)
