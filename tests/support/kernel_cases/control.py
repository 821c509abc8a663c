"""Kernel test cases for If, Loop and Scan (bodies as IR graphs): run-time and constant
conditions, captures that are plan-time constants and run-time tensors, bounded loops
with scan outputs, while loops, scans over axes 0 and 1 forwards and backwards."""
import numpy as np

from edgenn.graph.ir import Graph, Node, ValueInfo

f = np.float32


def _g(nodes, inputs, outputs):
    return Graph(nodes, [ValueInfo(*v) for v in inputs], [ValueInfo(*v) for v in outputs], {})


def if_cases():
    rng = np.random.default_rng(0)
    for shape in [(3,), (2, 5), (4, 3, 2), (1, 1)]:
        x, w = rng.standard_normal(shape).astype(f), rng.standard_normal(shape).astype(f)
        then_b = _g([Node("Mul", ["x", "w"], ["t"], {}, "mul"),
                     Node("Relu", ["t"], ["t2"], {}, "relu")], [], [("t2", "float32", shape)])
        else_b = _g([Node("Sub", ["x", "w"], ["e"], {}, "sub")], [], [("e", "float32", shape)])
        node = Node("If", ["c", "xo", "wo"], ["y"],
                    {"then_branch": then_b, "else_branch": else_b, "captures": ["x", "w"]}, "if")
        for cond in (True, False):
            yield node, [np.array(cond), x, w], {2}          # cond and x at run time
            yield node, [np.array(cond), x, w], {0, 2}       # a constant condition


def _loop_body(shape):
    # carried s += x * i ; scan out: s ; cond_out = cond_in
    return _g([Node("Cast", ["i"], ["fi"], {"to": 1}, "cast"),
               Node("Mul", ["x", "fi"], ["xi"], {}, "mul"),
               Node("Add", ["s_in", "xi"], ["s_out"], {}, "add"),
               Node("Identity", ["c_in"], ["c_out"], {}, "id"),
               Node("Identity", ["s_out"], ["row"], {}, "id2")],
              [("i", "int64", ()), ("c_in", "bool", ()), ("s_in", "float32", shape)],
              [("c_out", "bool", ()), ("s_out", "float32", shape), ("row", "float32", shape)])


def _while_body(shape):
    # s = s * 2 while sum(s) < limit
    return _g([Node("Mul", ["s_in", "two"], ["s_out"], {}, "mul"),
               Node("ReduceSum", ["s_out"], ["tot"], {"keepdims": 0}, "sum"),
               Node("Less", ["tot", "lim"], ["c_out"], {}, "less")],
              [("i", "int64", ()), ("c_in", "bool", ()), ("s_in", "float32", shape)],
              [("c_out", "bool", ()), ("s_out", "float32", shape)])


def loop_cases():
    rng = np.random.default_rng(1)
    for shape, m in [((3,), 4), ((2, 3), 1), ((5,), 7), ((1,), 0)]:
        x = rng.standard_normal(shape).astype(f)
        s0 = rng.standard_normal(shape).astype(f)
        node = Node("Loop", ["m", "c", "s0", "xo"], ["s", "rows"],
                    {"body": _loop_body(shape), "captures": ["x"]}, "loop")
        yield node, [np.array(m, np.int64), np.array(True), s0, x], {0, 1}
        wnode = Node("Loop", ["m", "c", "s0", "two", "lim"], ["s"],
                     {"body": _while_body(shape), "captures": ["two", "lim"]}, "while")
        pos = np.abs(s0) + 0.5
        for lim in (1.0, 100.0, 1e6):
            yield wnode, [np.array(50, np.int64), np.array(True), pos, np.array(2, f),
                          np.array(lim, f)], {3}


def scan_cases():
    rng = np.random.default_rng(2)
    for (t, d), axis, rev in [((4, 3), 0, 0), ((5, 2), 1, 1), ((1, 6), 0, 1), ((3, 8), 1, 0)]:
        xs = rng.standard_normal((t, d) if axis == 0 else (d, t)).astype(f)
        ys = rng.standard_normal((t, d) if axis == 0 else (d, t)).astype(f)
        body = _g([Node("Add", ["acc_in", "a"], ["acc_mid"], {}, "add"),
                   Node("Mul", ["acc_mid", "b"], ["acc_out"], {}, "mul"),
                   Node("Mul", ["acc_out", "k"], ["out"], {}, "scale")],
                  [("acc_in", "float32", (d,)), ("a", "float32", (d,)), ("b", "float32", (d,))],
                  [("acc_out", "float32", (d,)), ("out", "float32", (d,))])
        node = Node("Scan", ["acc0", "xs", "ys", "ko"], ["acc", "outs"],
                    {"body": body, "captures": ["k"], "num_scan_inputs": 2,
                     "scan_input_axes": [axis, axis], "scan_input_directions": [rev, 0],
                     "scan_output_axes": [axis], "scan_output_directions": [rev]}, "scan")
        yield node, [np.zeros(d, f), xs, ys, np.array(0.5, f)], {3}


CASES = {"If": if_cases, "Loop": loop_cases, "Scan": scan_cases}
