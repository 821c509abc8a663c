"""Hostile but well-formed models: files that parse, yet ask for absurd work or memory, or
carry out-of-range data. Each must end in a named edgenn error (an EdgennError subclass
whose message names the node or tensor), within bounded time and memory, and leave the
process able to go on (a good model still runs afterwards).

Each case runs in a child process under an address-space limit (RLIMIT_AS, 3 GiB): an
allocation the runtime failed to refuse shows up as a MemoryError there (a failure), not
as an OOM kill of the test runner.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT
I64 = TensorProto.INT64
BIG = 1 << 40          # elements


def _model(nodes, inputs, outputs, inits=(), opset=17, check=False):
    g = helper.make_graph(nodes, "hostile", inputs, outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m)
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def x_in(shape=(1, 4)):
    return [vi("x", F, list(shape))]


def y_out():
    return [vi("y", F, None)]


def add_x(src):
    """y = x + src (so the bomb is runtime work, not a folded constant)."""
    return helper.make_node("Add", ["x", src], ["y"], name="add")


CASES = {
    # memory bombs through every shape-making op (the product is runtime work)
    "ConstantOfShape": lambda: _model(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], name="bomb"), add_x("c")],
        x_in(), y_out(), [("s", np.array([1 << 38, 4], np.int64))]),
    "Expand": lambda: _model(
        [helper.make_node("Expand", ["x", "s"], ["y"], name="bomb")],
        x_in(), y_out(), [("s", np.array([1 << 20, 1 << 20, 4], np.int64))]),
    "Tile": lambda: _model(
        [helper.make_node("Tile", ["x", "r"], ["y"], name="bomb")],
        x_in(), y_out(), [("r", np.array([1 << 20, 1 << 20], np.int64))]),
    "Resize": lambda: _model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], name="bomb", mode="nearest")],
        x_in((1, 1, 4, 4)), y_out(), [("sc", np.array([1, 1, 1e6, 1e6], np.float32))]),
    "Range": lambda: _model(
        [helper.make_node("Range", ["a", "b", "d"], ["r"], name="bomb"),
         helper.make_node("Cast", ["r"], ["rf"], to=F, name="cast"),
         helper.make_node("Add", ["x", "rf"], ["y"], name="add")],
        [vi("x", F, [1])], y_out(),
        [("a", np.array(0, np.int64)), ("b", np.array(1 << 40, np.int64)),
         ("d", np.array(1, np.int64))]),
    "Pad": lambda: _model(
        [helper.make_node("Pad", ["x", "p"], ["y"], name="bomb")],
        x_in(), y_out(), [("p", np.array([0, 1 << 40, 0, 0], np.int64))]),
    "Reshape-huge": lambda: _model(
        [helper.make_node("Expand", ["x", "s"], ["e"], name="bomb"),
         helper.make_node("Reshape", ["e", "s2"], ["y"], name="reshape")],
        x_in((1, 1)), y_out(),
        [("s", np.array([1 << 16, 1 << 16], np.int64)), ("s2", np.array([-1], np.int64))]),
    "MatMul-many": lambda: _model(       # 40 huge tensors that each fit alone
        [helper.make_node("Expand", ["x", "s"], ["e0"], name="grow")]
        + [helper.make_node("Add", [f"e{k}", "x"], [f"e{k + 1}"], name=f"add{k}")
           for k in range(40)]
        + [helper.make_node("Sum", [f"e{k}" for k in range(41)], ["y"], name="sum")],
        x_in((1, 1)), y_out(), [("s", np.array([1 << 13, 1 << 13], np.int64))]),
    # absurd declared input dims
    "input-dims": lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                                 x_in((1 << 30, 1 << 30)), y_out()),
    # out-of-range data
    "Gather-const-index": lambda: _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=1)],
        x_in(), y_out(), [("i", np.array([0, 99], np.int64))]),
    "GatherElements-index": lambda: _model(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], name="gather_el", axis=1)],
        x_in(), y_out(), [("i", np.array([[0, 7, 1, 2]], np.int64))]),
    "GatherND-index": lambda: _model(
        [helper.make_node("GatherND", ["x", "i"], ["y"], name="gather_nd")],
        x_in(), y_out(), [("i", np.array([[0, 9]], np.int64))]),
    "ScatterElements-index": lambda: _model(
        [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="scatter_el", axis=1)],
        x_in(), y_out(), [("i", np.array([[5]], np.int64)), ("u", np.ones((1, 1), np.float32))]),
    "ScatterND-index": lambda: _model(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="scatter_nd")],
        x_in(), y_out(), [("i", np.array([[0, 8]], np.int64)), ("u", np.ones(1, np.float32))]),
    # malformed graphs the checker lets through or that skip it
    "cycle": lambda: _model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
         helper.make_node("Relu", ["a"], ["b"], name="n2"),
         helper.make_node("Identity", ["a"], ["y"], name="n3")],
        x_in(), y_out(), check=False),
    "duplicate-output": lambda: _model(
        [helper.make_node("Relu", ["x"], ["y"], name="n1"),
         helper.make_node("Neg", ["x"], ["y"], name="n2")],
        x_in(), y_out(), check=False),
    "short-initializer": lambda: _short_initializer(),
    "oversized-initializer": lambda: _short_initializer(extra=64),
    "huge-initializer-dims": lambda: _declared_initializer(),
    "Gather-runtime-index": lambda: _model(
        [helper.make_node("Cast", ["x"], ["i"], to=I64, name="to_index"),
         helper.make_node("Gather", ["t", "i"], ["y"], name="gather", axis=0)],
        [vi("x", F, [1, 4])], y_out(), [("t", np.ones((3, 2), np.float32))]),
    "dangling-input": lambda: _model([helper.make_node("Add", ["x", "ghost"], ["y"], name="n")],
                                     x_in(), y_out(), check=False),
}


def _declared_initializer():
    """An initializer that says (2^20, 2^20) and carries 16 bytes."""
    w = TensorProto(name="w", data_type=F, dims=[1 << 20, 1 << 20], raw_data=b"\0" * 16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                          "hostile", x_in((1, 1 << 20)), y_out(), [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _short_initializer(extra: int = -8):
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.raw_data = w.raw_data[:len(w.raw_data) + extra] if extra < 0 else w.raw_data + b"\0" * extra
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                          "hostile", x_in(), y_out(), [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


CHILD = textwrap.dedent(r"""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import numpy as np
    import edgenn
    from edgenn.errors import EdgennError
    data = open(sys.argv[1], "rb").read()
    t0 = time.perf_counter()
    try:
        sess = edgenn.InferenceSession(data)
        x = np.full([d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape],
                    float(sys.argv[2]) if len(sys.argv) > 2 else 1.0, np.float32)
        sess.run(None, {sess.get_inputs()[0].name: x})
        print("RAN")
    except EdgennError as exc:
        print("EDGENN", type(exc).__name__, str(exc).replace("\n", " | "))
    # the process goes on: a good model still runs
    from edgenn.demo import DEMO_MODEL
    ok = edgenn.InferenceSession(DEMO_MODEL)
    ok.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)})
    print("AFTER-OK", round(time.perf_counter() - t0, 1))
""")

# what each message must name (the node or tensor at fault)
NAMES = {"ConstantOfShape": "bomb", "Expand": "bomb", "Tile": "bomb", "Resize": "bomb",
         "Range": "bomb", "Pad": "bomb", "Reshape-huge": "bomb", "MatMul-many": "e0",
         "input-dims": "x", "Gather-const-index": "gather",
         "GatherElements-index": "gather_el", "GatherND-index": "gather_nd",
         "ScatterElements-index": "scatter_el", "ScatterND-index": "scatter_nd",
         "cycle": "n", "duplicate-output": "y", "short-initializer": "w",
         "oversized-initializer": "w", "dangling-input": "ghost",
         "huge-initializer-dims": "w", "Gather-runtime-index": "gather"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_model_ends_in_a_named_error(case, tmp_path):
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(CASES[case]().SerializeToString())
    fill = "7" if case == "Gather-runtime-index" else "1"     # index 7 of a dim of 3
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), fill], capture_output=True,
                       text=True, timeout=120, cwd=HERE)
    out = r.stdout
    assert r.returncode == 0, f"{case}: exit {r.returncode}\n{r.stderr[-2000:]}"
    assert "EDGENN" in out, f"{case}: no edgenn error: {out}"
    line = next(l for l in out.splitlines() if l.startswith("EDGENN"))
    assert NAMES[case] in line, f"{case}: message does not name {NAMES[case]!r}: {line}"
    assert "AFTER-OK" in out


# models that are legal, only unusual: they must run (in bounded time), not fail
def _chain(depth: int):
    nodes = [helper.make_node("Relu" if k % 2 else "Neg", [f"t{k}"], [f"t{k + 1}"], name=f"n{k}")
             for k in range(depth)]
    nodes.append(helper.make_node("Identity", [f"t{depth}"], ["y"], name="out"))
    return _model(nodes, [vi("t0", F, [1, 4])], y_out())


RUNNABLE = {
    "nan-inf-constants": lambda: _model(
        [helper.make_node("Add", ["x", "c"], ["y"], name="add")], x_in(), y_out(),
        [("c", np.array([[np.nan, np.inf, -np.inf, 1.0]], np.float32))]),
    "deep-10k": lambda: _chain(10_000),
    "wide-20k": lambda: _model(
        [helper.make_node("Relu", ["x"], [f"r{k}"], name=f"r{k}") for k in range(20_000)]
        + [helper.make_node("Sum", [f"r{k}" for k in range(20_000)], ["y"], name="sum")],
        x_in(), y_out()),
}


@pytest.mark.parametrize("case", sorted(RUNNABLE))
def test_unusual_but_legal_model_runs(case, tmp_path):
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(RUNNABLE[case]().SerializeToString())
    r = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                       text=True, timeout=300, cwd=HERE)
    assert r.returncode == 0 and "RAN" in r.stdout and "AFTER-OK" in r.stdout, (
        f"{case}: {r.stdout}\n{r.stderr[-2000:]}")
