"""Kernel test cases for MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool: odd
sizes (tails past 8 pixels / 8 channels), stride 2 and 3, pads, auto_pad, ceil_mode,
dilations, count_include_pad, 1x1 planes, one channel, batch > 1. Depthwise Conv cases
live in conv_gemm.py (group == C)."""
import itertools

import numpy as np

from edgenn.graph.ir import Node

from .quantize import maxpool_int_cases

# n, c, h, w, kernel, stride, pads (t, l, b, r), dilation, ceil_mode
POOL_GEOMS = [
    (1, 64, 112, 112, 3, 2, (1, 1, 1, 1), 1, 0),   # ResNet stem
    (2, 9, 17, 13, 3, 1, (1, 1, 1, 1), 1, 0),
    (1, 3, 15, 15, 3, 2, (0, 0, 0, 0), 1, 1),      # ceil_mode: last window past the end
    (1, 5, 10, 11, 2, 2, (0, 0, 0, 0), 1, 1),
    (1, 1, 7, 7, 5, 3, (2, 1, 0, 2), 1, 0),        # asymmetric pads
    (1, 8, 12, 9, 3, 1, (2, 2, 2, 2), 2, 0),       # dilation
    (1, 16, 1, 1, 1, 1, (0, 0, 0, 0), 1, 0),       # 1x1 plane
    (1, 11, 6, 20, 2, 2, (1, 0, 0, 1), 1, 1),
    (1, 7, 9, 9, 3, 2, (1, 1, 1, 1), 1, 1),
]


def _window_cases(op):
    rng = np.random.default_rng(3)
    for (n, c, h, w, k, s, pads, d, ceil), extra in itertools.product(POOL_GEOMS, (0, 1)):
        if op == "AveragePool" and d > 1:
            continue                 # dilations: AveragePool opset 19 only
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=list(pads), ceil_mode=ceil,
                     auto_pad="NOTSET")
        if d > 1:
            attrs["dilations"] = [d, d]
        if op == "AveragePool":
            attrs["count_include_pad"] = extra
        elif extra:
            attrs["storage_order"] = 0
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        yield Node(op, ["x"], ["y"], attrs, "pool"), [x], set()
    for auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        attrs = dict(kernel_shape=[3, 2], strides=[2, 1], auto_pad=auto)
        if op == "AveragePool":
            attrs["count_include_pad"] = 0
        x = rng.standard_normal((1, 6, 11, 8)).astype(np.float32)
        yield Node(op, ["x"], ["y"], attrs, "pool"), [x], set()
    # MaxPool with the Indices output: no fast kernel may claim it
    if op == "MaxPool":
        x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
        yield Node(op, ["x"], ["y", "i"], dict(kernel_shape=[2, 2], strides=[2, 2]),
                   "pool"), [x], set()


# non-overlapping windows (kernel == stride, no pads: maxpool_tiles_c): 2x2, 2x1, 4x1,
# 3x3, 1x1; planes that the windows divide and ones with leftover rows / columns (floor),
# widths around the 8-output vector (2 x 8 inputs), one-pixel outputs, batch > 1
TILE_GEOMS = [(3, 32, 32, 256, (2, 2)), (2, 5, 9, 35, (2, 2)), (1, 3, 8, 17, (2, 1)),
              (1, 4, 16, 15, (4, 1)), (1, 2, 7, 10, (3, 3)), (1, 3, 5, 5, (1, 1)),
              (1, 6, 2, 2, (2, 2)), (2, 3, 4, 31, (2, 2)), (1, 1, 6, 16, (2, 2))]


def _tile_cases():
    rng = np.random.default_rng(5)
    for n, c, h, w, k in TILE_GEOMS:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        x.reshape(-1)[::7] = np.float32(-3e38 if n == 1 else 3e38)   # extremes
        yield Node("MaxPool", ["x"], ["y"], dict(kernel_shape=list(k), strides=list(k)),
                   "pool"), [x], set()


def _global_cases(op):
    rng = np.random.default_rng(4)
    for shape in [(1, 1280, 7, 7), (2, 3, 1, 1), (1, 5, 13, 17), (1, 1, 56, 56), (3, 4, 2, 9)]:
        yield Node(op, ["x"], ["y"], {}, "gpool"), [
            rng.standard_normal(shape).astype(np.float32) * 3 + 1], set()


CASES = {
    "MaxPool": lambda: itertools.chain(_window_cases("MaxPool"), _tile_cases(),
                                       maxpool_int_cases()),
    "AveragePool": lambda: _window_cases("AveragePool"),
    "GlobalAveragePool": lambda: _global_cases("GlobalAveragePool"),
    "GlobalMaxPool": lambda: _global_cases("GlobalMaxPool"),
}
