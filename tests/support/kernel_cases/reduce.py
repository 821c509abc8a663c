"""Kernel test cases for ReduceMean / Sum / Max / Min / SumSquare / L2: axes as attribute
(opset < 18) and as input, negative axes, keepdims both ways, every axis, a single axis of
length 1, long rows with tails (the row-sum kernels' eight lanes)."""
import numpy as np

from edgenn.graph.ir import Node

OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2")


def reduce_cases(op):
    def gen():
        rng = np.random.default_rng(len(op))
        for shape, axes, keep in [((2, 64), [1], 0), ((1, 8, 5, 5), [2, 3], 1),
                                  ((3, 4, 5), [-1], 1), ((3, 4, 5), [0, 2], 0),
                                  ((6,), [0], 0), ((2, 1, 3), [1], 1), ((4, 7), None, 1),
                                  ((2, 3, 37), [-1], 0), ((1, 3, 1000), [2], 1)]:
            x = (rng.standard_normal(shape) * 10).astype(np.float32)
            attrs = {"keepdims": keep}
            if axes is None:
                yield Node(op, ["x"], ["y"], attrs, "r"), [x], set()
            else:
                yield Node(op, ["x", "a"], ["y"], attrs, "r"), [x, np.array(axes, np.int64)], {1}
    return gen


CASES = {op: reduce_cases(op) for op in OPS}
