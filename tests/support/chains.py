"""Chains of tiny nodes: models whose run time is the runtime's per-call and per-node cost,
not arithmetic (#44: small streaming models are dominated by it)."""
from __future__ import annotations

import numpy as np

# the chain's ops in turn: binary ops take a constant of the input's shape
CHAIN_OPS = ("Add", "Relu", "Mul", "Sigmoid", "Sub", "Tanh")


def chain_model(nodes: int, width: int = 64, opset: int = 17):
    """An ONNX model x (1, width) -> y: `nodes` elementwise nodes in a row."""
    from onnx import TensorProto, helper, numpy_helper
    made, consts, prev = [], [], "x"
    for i in range(nodes):
        op = CHAIN_OPS[i % len(CHAIN_OPS)]
        out = f"t{i}" if i < nodes - 1 else "y"
        if op in ("Add", "Mul", "Sub"):
            c = np.full((1, width), 0.5 + 0.01 * i, np.float32)
            consts.append(numpy_helper.from_array(c, f"c{i}"))
            made.append(helper.make_node(op, [prev, f"c{i}"], [out], name=f"n{i}"))
        else:
            made.append(helper.make_node(op, [prev], [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(
        made, f"chain{nodes}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def chain_feeds(width: int = 64) -> dict:
    return {"x": np.random.default_rng(0).standard_normal((1, width)).astype(np.float32)}
