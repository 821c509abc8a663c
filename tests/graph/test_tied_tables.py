"""A decoder's tied table, (hidden, vocabulary), read both as the output projection and,
transposed, as the embedding: neither read may transpose the whole table per call."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from edgenn.graph import passes as P
from graph.test_passes import check, model, ops, rand


@pytest.mark.parametrize("ids_shape", [(1,), (2, 5), (1, 1)])
def test_gather_from_a_transposed_table_gathers_columns(ids_shape):
    table = rand(6, 40)                                     # (hidden, vocabulary)
    ids = np.random.default_rng(1).integers(-40, 40, ids_shape).astype(np.int64)
    m = model([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
               helper.make_node("Gather", ["wt", "ids"], ["y"]),
               helper.make_node("Relu", ["y"], ["out"])],
              [], [("out", list(ids_shape) + [6])], {"w": table, "ids": ids})
    m.graph.initializer.pop()                               # ids: an input, not a constant
    m.graph.input.append(helper.make_tensor_value_info("ids", 7, list(ids_shape)))
    after, changed = check(m, {"ids": ids}, run=P.gather_from_transposed_table, rtol=0,
                           atol=0)
    assert changed
    gather = next(n for n in after.nodes if n.op == "Gather")
    assert gather.inputs[0] == "w" and gather.attrs["axis"] == 1


def test_matmul_by_a_transposed_table_reads_it_as_gemm_trans_b():
    table = rand(40, 6)                                     # (vocabulary, hidden)
    m = model([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
               helper.make_node("MatMul", ["x", "wt"], ["y"])],
              [("x", [2, 3, 6])], [("y", [2, 3, 40])], {"w": table})
    after, _ = check(m, {"x": rand(2, 3, 6)}, run=P.matmul_add_to_gemm, rtol=1e-6,
                     atol=1e-6)
    gemm = next(n for n in after.nodes if n.op == "Gemm")
    assert gemm.inputs[1] == "w" and gemm.attrs["transB"] == 1
    P.eliminate_dead_code(after)
    assert "Transpose" not in ops(after)
