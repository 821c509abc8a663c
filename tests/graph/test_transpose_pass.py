"""push_transposes on quantized (QDQ) graphs, the form a fully integer TFLite import
writes: transposes sink through per-tensor QuantizeLinear and elementwise ops behind a
DequantizeLinear, move above a per-tensor DequantizeLinear, and sink below an Add or a
Concat whose operands are all DQ(Transpose(.)) alike, until the pairs cancel. Each
graph's outputs are compared exactly (reference interpreter) before and after."""
import numpy as np
import pytest

from edgenn.graph.infer import execute
from edgenn.graph.ir import Graph, Node, ValueInfo
from edgenn.graph.passes.transpose import push_transposes

NCHW, NHWC = [0, 3, 1, 2], [0, 2, 3, 1]
SHAPE = (1, 5, 6, 4)        # NHWC


class _G:
    def __init__(self):
        self.nodes, self.consts, self.n = [], {}, 0

    def c(self, v):
        self.n += 1
        name = f"c{self.n}"
        self.consts[name] = np.asarray(v)
        return name

    def op(self, op, ins, attrs=None):
        self.n += 1
        y = f"v{self.n}"
        self.nodes.append(Node(op, list(ins), [y], attrs or {}, f"n{self.n}"))
        return y

    def dq(self, x, scale=0.05, zp=128):
        return self.op("DequantizeLinear", [x, self.c(np.float32(scale)), self.c(np.uint8(zp))])

    def q(self, x, scale=0.05, zp=128):
        return self.op("QuantizeLinear", [x, self.c(np.float32(scale)), self.c(np.uint8(zp))])

    def t(self, x, perm):
        return self.op("Transpose", [x], {"perm": perm})

    def graph(self, inputs, outputs):
        outs = []
        for o in outputs:                   # name the outputs
            self.nodes.append(Node("Identity", [o], [f"out_{o}"], {}, f"id_{o}"))
            outs.append(ValueInfo(f"out_{o}", "uint8", None))
        return Graph(self.nodes, [ValueInfo(n, "uint8", SHAPE) for n in inputs], outs,
                     self.consts, {"opset": 21})


def _check(g: Graph, inputs, want_left: int):
    rng = np.random.default_rng(0)
    feeds = {n: rng.integers(0, 256, SHAPE, dtype=np.uint8) for n in inputs}
    before = execute(g, feeds)
    push_transposes(g)
    g.validate()
    after = execute(g, feeds)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    assert g.op_counts().get("Transpose", 0) == want_left, [n.op for n in g.nodes]
    return g


def test_transposes_cancel_through_q_dequantize_and_unary_ops():
    b = _G()
    y = b.q(b.op("Tanh", [b.dq(b.t("x", NCHW))]))          # T -> DQ -> Tanh -> Q
    y = b.t(b.q(b.op("Sigmoid", [b.dq(y)])), NHWC)          # ... -> Q -> T^-1
    _check(b.graph(["x"], [y]), ["x"], 0)


def test_transpose_moves_above_a_per_tensor_dequantize():
    b = _G()
    w = b.c(np.ones((3, 4, 1, 1), np.float32))
    y = b.op("Conv", [b.t(b.dq("x"), [0, 3, 1, 2]), w])    # the conv must read DQ(x)
    g = _check(b.graph(["x"], [y]), ["x"], 1)
    conv = next(n for n in g.nodes if n.op == "Conv")
    dq = next(n for n in g.nodes if n.outputs[0] == conv.inputs[0])
    assert dq.op == "DequantizeLinear"
    assert next(n for n in g.nodes if n.outputs[0] == dq.inputs[0]).op == "Transpose"


def test_residual_add_of_dequantized_transposes_sinks_and_cancels():
    b = _G()
    a, c = b.t("x", NCHW), b.t("z", NCHW)
    s = b.q(b.op("Add", [b.dq(a), b.dq(c, 0.1, 3)]), 0.07, 120)
    _check(b.graph(["x", "z"], [b.t(s, NHWC)]), ["x", "z"], 0)


def test_concat_of_dequantized_transposes_maps_its_axis():
    b = _G()
    s = b.q(b.op("Concat", [b.dq(b.t("x", NCHW)), b.dq(b.t("z", NCHW))], {"axis": 1}))
    _check(b.graph(["x", "z"], [b.t(s, NHWC)]), ["x", "z"], 0)


@pytest.mark.parametrize("case", ["per_axis", "fan_out"])
def test_transposes_stay_where_moving_would_be_wrong_or_duplicate_work(case):
    b = _G()
    a = b.t("x", NCHW)
    if case == "per_axis":             # a per-channel DQ is not elementwise under a transpose
        d = b.op("DequantizeLinear", [a, b.c(np.full(4, 0.05, np.float32)),
                                      b.c(np.full(4, 128, np.uint8))], {"axis": 1})
        outs = [b.t(b.q(b.op("Relu", [d])), NHWC)]
        _check(b.graph(["x"], outs), ["x"], 2)
    else:                              # read twice: moving it would copy it
        outs = [b.t(b.q(b.op("Relu", [b.dq(a)])), NHWC), a]
        _check(b.graph(["x"], outs), ["x"], 2)
