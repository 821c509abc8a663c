"""Kernel test cases for the elementwise and data-movement kernels: every broadcasting
form (scalar, row, column, both sides, rank change), 0-d and one-element tensors, IEEE
edge values, merged and unmerged transposes, constant and run-time Gather indices."""
import numpy as np

from edgenn.graph.ir import Node

RT = set()            # every input a run-time tensor
F = np.float32

BCAST = [  # (a shape, b shape)
    ((2, 3, 4), (2, 3, 4)), ((2, 3, 4), ()), ((), (2, 3, 4)), ((2, 3, 4), (4,)),
    ((2, 3, 4), (3, 1)), ((2, 1, 4), (1, 3, 1)), ((1,), (5, 1)), ((1, 32, 24, 16), (1,)),
    ((1,), (1, 64, 6, 10)), ((1, 240, 6, 8), (1, 240, 1, 1)), ((7,), (7,)), ((1,), ()),
]


def _rng(seed):
    return np.random.default_rng(seed)


def binary_cases(op):
    def gen():
        rng = _rng(10)
        for sa, sb in BCAST:
            a = rng.standard_normal(sa).astype(F)
            b = rng.standard_normal(sb).astype(F)
            if op == "Pow":
                a = np.abs(a) + F(0.5)
            if op == "Div":
                b = np.where(np.abs(b) < 0.1, F(0.5), b).astype(F)
            yield Node(op, ["a", "b"], ["y"], {}, op.lower()), [a, b], RT
            yield Node(op, ["a", "b"], ["y"], {}, op.lower()), [a, b]  # b constant
        if op == "Pow":
            x = np.abs(_rng(11).standard_normal((3, 5))).astype(F)
            for e in (2.0, 0.5, 3.0, -1.0):
                yield Node(op, ["a", "b"], ["y"], {}, "pow"), [x, np.array(e, F)]
    return gen


def variadic_cases(op):
    def gen():
        rng = _rng(12)
        for shapes in [[(2, 3)], [(2, 3), (3,)], [(4, 1), (1, 5), (4, 5)],
                       [(2, 3, 4), (), (3, 1), (2, 3, 4)]]:
            xs = [rng.standard_normal(s).astype(F) for s in shapes]
            yield Node(op, [f"x{i}" for i in range(len(xs))], ["y"], {}, op.lower()), xs, RT
    return gen


def unary_cases(op, attrs=None, domain=None):
    def gen():
        rng = _rng(13)
        for shape in [(1, 480, 1, 40), (3, 5, 7), (9,), (), (1,), (2, 4097)]:
            x = (rng.standard_normal(shape) * 3).astype(F)
            if domain == "pos":
                x = np.abs(x) + F(0.1)
            yield Node(op, ["x"], ["y"], dict(attrs or {}), op.lower()), [x], RT
        if domain is None:  # IEEE edge values
            x = np.array([0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 100.0, -100.0, 1e30,
                          -1e30, 0.5, -0.5], F)
            if op in ("Exp",):
                x = np.clip(x, -80, 80).astype(F)
            if op in ("Reciprocal",):
                x = x[np.abs(x) > 1e-20]
            yield Node(op, ["x"], ["y"], dict(attrs or {}), op.lower()), [x], RT
    return gen


def clip_cases():
    rng = _rng(14)
    x = (rng.standard_normal((3, 4, 5)) * 4).astype(F)
    for lo, hi in [(0.0, 6.0), (-1.0, None), (None, 2.0), (None, None), (3.0, 1.0)]:
        ins, names = [x], ["x"]
        if lo is not None or hi is not None:
            ins.append(None if lo is None else np.array(lo, F))
            names.append("" if lo is None else "lo")
        if hi is not None:
            ins.append(np.array(hi, F))
            names.append("hi")
        yield Node("Clip", names, ["y"], {}, "clip"), ins


def transpose_cases():
    rng = _rng(15)
    for shape, perm in [((1, 128, 12, 32), [0, 2, 1, 3]), ((1, 128, 12, 32), [0, 2, 3, 1]),
                        ((1, 12, 128, 32), [0, 2, 1, 3]), ((1, 40, 3, 8, 15), [2, 0, 3, 1, 4]),
                        ((1, 8, 40, 15), [0, 1, 3, 2]), ((1, 1, 40, 120), [0, 3, 1, 2]),
                        ((2, 3, 4), None), ((2, 3, 4), [0, 1, 2]), ((5, 1, 7), [2, 1, 0]),
                        ((1,), [0]), ((), []), ((3, 1, 1, 2), [3, 2, 1, 0]),
                        ((2, 3, 4, 5), [1, 2, 3, 0]),
                        # the tiled kernel: sides not multiples of 8, NCHW <-> NHWC, rank 6
                        ((1, 17, 9, 13), [0, 2, 3, 1]), ((1, 9, 13, 17), [0, 3, 1, 2]),
                        ((3, 5, 7, 2, 3, 4), [5, 3, 1, 4, 0, 2]), ((8, 16), [1, 0]),
                        ((2, 0, 3), [2, 1, 0]), ((1, 1, 1, 9), [3, 2, 1, 0])]:
        x = rng.standard_normal(shape).astype(F)
        attrs = {} if perm is None else {"perm": perm}
        yield Node("Transpose", ["x"], ["y"], attrs, "tr"), [x], RT


def gather_cases():
    rng = _rng(16)
    table = rng.standard_normal((50, 8)).astype(F)
    for idx, axis in [(np.array([[0, 3, 49, 7, -1, -50]]), 0), (np.array(5), 0),
                      (np.array([[1, 0], [2, 2]]), 1), (np.array(-2), 1)]:
        for dt in (np.int64, np.int32):
            i = idx.astype(dt)
            node = Node("Gather", ["x", "i"], ["y"], {"axis": axis}, "gather")
            yield node, [table, i], RT
            yield node, [table, i], {0, 1}  # table and indices constant
            yield node, [table, i], {0}     # embedding: constant table, run-time ids
    x = rng.standard_normal((1, 128, 384)).astype(F)
    yield Node("Gather", ["x", "i"], ["y"], {"axis": 1}, "gather"), [x, np.array(0)]


def cast_cases():
    rng = _rng(17)
    for x in [rng.integers(-5, 5, (1, 1, 128, 128)).astype(np.int64),
              rng.integers(0, 255, (3, 4)).astype(np.uint8), rng.random((2, 5)) < 0.5,
              rng.standard_normal((4, 3)).astype(np.float64),
              rng.standard_normal((4, 3)).astype(F), rng.integers(-9, 9, (6,)).astype(np.int32),
              rng.standard_normal((2, 2)).astype(np.float16)]:
        yield Node("Cast", ["x"], ["y"], {"to": 1}, "cast"), [x], RT
    # to bool (BERT's mask path): zeros, -0.0, NaN and inf among floats; ints; bools
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -3.0, 2.5], F)
    for x in [np.concatenate([special, rng.standard_normal(120).astype(F)]).reshape(1, 1, 2, 64),
              special.astype(np.float64), rng.integers(-2, 3, (4, 5)).astype(np.int64),
              rng.integers(0, 3, (7,)).astype(np.uint8), rng.random((3, 3)) < 0.5,
              rng.integers(-2, 3, (6,)).astype(np.int32),
              rng.integers(-2, 3, (5,)).astype(np.int8)]:
        yield Node("Cast", ["x"], ["y"], {"to": 9}, "cast"), [x], RT


def where_cases():
    rng = _rng(18)
    for sc, sx, sy in [((1, 1, 128, 128), (), (1, 1, 128, 128)), ((3, 4), (3, 4), (3, 4)),
                       ((4,), (3, 1), ()), ((2, 1, 3), (1, 5, 1), (2, 5, 3)), ((), (3,), (3,))]:
        c = rng.random(sc) < 0.5
        x = rng.standard_normal(sx).astype(F)
        y = rng.standard_normal(sy).astype(F)
        yield Node("Where", ["c", "x", "y"], ["o"], {}, "where"), [c, x, y], RT
        yield Node("Where", ["c", "x", "y"], ["o"], {}, "where"), [c, x, y], {1}


def expand_cases():
    rng = _rng(19)
    for sx, shape in [((1, 1), (1, 384)), ((3, 1), (2, 3, 4)), ((4,), (1,)), ((), (2, 2)),
                      ((2, 1, 3), (1, 4, 1)), ((5,), (5,))]:
        x = rng.standard_normal(sx).astype(F)
        yield Node("Expand", ["x", "s"], ["y"], {}, "expand"), [x, np.array(shape, np.int64)], {1}
    # other dtypes (values small enough to compare exactly in the float32 test buffer)
    for dt in (np.int64, np.int32, np.float64, bool):
        x = rng.integers(0, 2, (1, 1, 1, 128)).astype(dt)
        yield (Node("Expand", ["x", "s"], ["y"], {}, "expand"),
               [x, np.array([1, 1, 128, 1], np.int64)], {1})


def pad_cases():
    """Constant Pad: spatial (TF SAME before a stride-2 conv), every axis, zero widths,
    a non-zero value, an omitted value, uint8 and int64 data."""
    rng = _rng(20)
    for shape, pads, value in [((1, 32, 15, 15), [0, 0, 0, 0, 0, 0, 1, 1], None),
                               ((1, 8, 7, 9), [0, 0, 1, 2, 0, 0, 2, 1], 0.0),
                               ((2, 3, 4), [1, 0, 2, 0, 3, 1], -1.5),
                               ((5,), [0, 0], 2.0), ((3, 1), [2, 0, 0, 4], None)]:
        for dt in (F, np.uint8, np.int64):
            x = (rng.standard_normal(shape) * 50).astype(dt)
            ins = [x, np.array(pads, np.int64)]
            names = ["x", "p"]
            if value is not None:
                ins.append(np.array(value).astype(dt))
                names.append("v")
            yield Node("Pad", names, ["y"], {"mode": "constant"}, "pad"), ins, {1, 2}
    # reflect / edge / wrap: audio front ends (silero-vad's STFT), image borders
    for shape, pads in [((1, 576), [0, 64, 0, 64]), ((1, 3, 5, 6), [0, 0, 2, 1, 0, 0, 1, 3]),
                        ((4,), [3, 3]), ((2, 3, 2), [1, 2, 1, 1, 0, 1])]:
        for mode in ("reflect", "edge", "wrap"):
            x = (rng.standard_normal(shape) * 50).astype(F)
            yield Node("Pad", ["x", "p"], ["y"], {"mode": mode}, "pad"), \
                [x, np.array(pads, np.int64)], {1}


def slice_cases():
    """Constant Slice: channel halves (ShuffleNet), negative and out-of-range bounds,
    steps (negative too), omitted axes / steps, int64 data."""
    rng = _rng(21)
    x = rng.standard_normal((1, 116, 14, 14)).astype(F)
    for starts, ends, axes, steps in [([0], [58], [1], None), ([58], [116], [1], [1]),
                                      ([-3, 1], [1000, -1], [2, 3], None),
                                      ([13], [-100], [2], [-2]), ([0, 0, 2], [1, 116, 14], None, None),
                                      ([5], [1], [-1], [-1])]:
        ins = [x, np.array(starts, np.int64), np.array(ends, np.int64)]
        if axes is not None:
            ins.append(np.array(axes, np.int64))
        if steps is not None:
            ins.append(np.array(steps, np.int64))
        names = ["x", "s", "e", "a", "t"][:len(ins)]
        yield Node("Slice", names, ["y"], {}, "slice"), ins, set(range(1, len(ins)))
    yield (Node("Slice", ["x", "s", "e"], ["y"], {}, "slice"),
           [np.arange(24, dtype=np.int64).reshape(4, 6), np.array([1]), np.array([3])], {1, 2})


def split_cases():
    """Constant Split: explicit sizes, equal parts (num_outputs), the last part smaller,
    a middle axis, negative axis, uint8."""
    rng = _rng(22)
    for shape, axis, sizes, n in [((1, 255, 13, 13), 1, [85, 85, 85], 3),
                                  ((2, 10, 7), -1, [2, 5], 2), ((4, 9), 1, None, 3),
                                  ((4, 10), 1, None, 3), ((6, 3, 2), 0, [1, 0, 5], 3)]:
        for dt in (F, np.uint8):
            x = (rng.standard_normal(shape) * 40).astype(dt)
            attrs = {"axis": axis} if sizes is not None else {"axis": axis, "num_outputs": n}
            ins, names = [x], ["x"]
            if sizes is not None:
                ins.append(np.array(sizes, np.int64))
                names.append("s")
            yield Node("Split", names, [f"y{i}" for i in range(n)], attrs, "split"), ins, {1}


def prelu_cases():
    """PRelu with constant slopes: per channel NCHW (a TFLite model after its layout
    pass), per channel NHWC, scalar; slopes in [0, 1] (the fast kernel's range), at its
    ends, and outside it (the kernel must decline those)."""
    rng = _rng(30)
    for x_shape, s_shape in [((1, 16, 8, 8), (1, 16, 1, 1)), ((2, 5, 7, 3), (1, 1, 3)),
                             ((4, 9), ()), ((1, 32, 3, 5), (32, 1, 1))]:
        x = (rng.standard_normal(x_shape) * 3).astype(F)
        for lo, hi in ((0.0, 1.0), (0.0, 0.0), (1.0, 1.0), (-0.5, 2.0)):
            slope = rng.uniform(lo, hi, s_shape).astype(F)
            yield Node("PRelu", ["x", "s"], ["y"], {}, "prelu"), [x, slope], {1}


CASES = {op: binary_cases(op) for op in ("Add", "Sub", "Mul", "Div", "Pow")}
CASES["PRelu"] = prelu_cases
CASES.update({op: variadic_cases(op) for op in ("Max", "Min", "Sum")})
CASES.update({op: unary_cases(op) for op in ("Relu", "Tanh", "Neg", "Abs", "Floor", "Ceil",
                                             "Sin", "Cos", "Sigmoid", "Erf", "HardSwish")})
CASES.update({"Exp": unary_cases("Exp"), "Log": unary_cases("Log", domain="pos"),
              "Sqrt": unary_cases("Sqrt", domain="pos"), "Reciprocal": unary_cases("Reciprocal"),
              "LeakyRelu": lambda: (c for a in (0.1, 0.0, 1.0, 3.0, -0.5)
                                    for c in unary_cases("LeakyRelu", {"alpha": a})()),
              "HardSigmoid": unary_cases("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
              "Clip": clip_cases, "Transpose": transpose_cases, "Gather": gather_cases,
              "Cast": cast_cases, "Where": where_cases, "Expand": expand_cases,
              "Pad": pad_cases, "Slice": slice_cases, "Split": split_cases})
