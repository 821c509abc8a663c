"""QuantizeLinear / DequantizeLinear cases (per tensor, uint8 and int8): sizes around the 32-wide
vector tail, ties that round half to even, saturation at both ends, NaN-free extremes."""
import numpy as np

from edgenn.graph.ir import Node

# the last two past quantize_u8_c_mt's QUANTIZE_MT_MIN, their threads' ranges 64-aligned
# with a tail
SHAPES = [(1,), (7,), (32,), (33,), (2, 3, 5, 7), (1, 16, 9, 9), (0, 4), (32768 + 17,),
          (1, 3, 128, 129)]
PARAMS = [(0.02, 128), (1.0, 0), (0.5, 255), (3.0, 7)]
PARAMS_S8 = [(0.02, 0), (1.0, -128), (0.5, 127), (3.0, -7)]


def _x(rng, shape, scale):
    x = (rng.standard_normal(shape) * 150 * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[: flat.size // 4] = (np.arange(flat.size // 4) - 4.5).astype(np.float32) * scale  # ties
    return x


def quantize_cases():
    rng = np.random.default_rng(11)
    for shape in SHAPES:
        for scale, zp in PARAMS:
            node = Node("QuantizeLinear", ["x", "s", "z"], ["y"], {"axis": 1}, "q")
            yield node, [_x(rng, shape, scale), np.float32(scale), np.uint8(zp)], {1, 2}
        for scale, zp in PARAMS_S8:
            node = Node("QuantizeLinear", ["x", "s", "z"], ["y"], {"axis": 1}, "q")
            yield node, [_x(rng, shape, scale), np.float32(scale), np.int8(zp)], {1, 2}


def dequantize_cases():
    rng = np.random.default_rng(12)
    for shape in SHAPES:
        for scale, zp in PARAMS:
            node = Node("DequantizeLinear", ["x", "s", "z"], ["y"], {"axis": 1}, "dq")
            x = rng.integers(0, 256, shape, dtype=np.uint8)
            yield node, [x, np.float32(scale), np.uint8(zp)], {1, 2}
        for scale, zp in PARAMS_S8:
            node = Node("DequantizeLinear", ["x", "s", "z"], ["y"], {"axis": 1}, "dq")
            x = rng.integers(-128, 128, shape, dtype=np.int8)
            yield node, [x, np.float32(scale), np.int8(zp)], {1, 2}


def qadd_cases():
    """Residual-style adds of two uint8 tensors: tails around 32, ties, saturation, Relu."""
    rng = np.random.default_rng(14)
    params = [(0.02, 128, 0.03, 100, 0.04, 120), (0.1, 0, 0.1, 0, 0.05, 0),
              (0.5, 255, 0.25, 3, 0.2, 250), (0.05, 10, 0.05, 10, 0.1, 10)]
    for shape in [(1,), (31,), (32,), (65,), (1, 16, 9, 9), (2, 24, 56, 57)]:
        for sa, za, sb, zb, sy, zy in params:
            for act in ("", "Relu"):
                a = rng.integers(0, 256, shape, dtype=np.uint8)
                b = rng.integers(0, 256, shape, dtype=np.uint8)
                node = Node("QAdd", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"],
                            {"activation": act}, "qadd")
                yield node, [a, np.float32(sa), np.uint8(za), b, np.float32(sb), np.uint8(zb),
                             np.float32(sy), np.uint8(zy)], {1, 2, 4, 5, 6, 7}


def dynamic_quantize_cases():
    """DynamicQuantizeLinear: ranges on both sides of 0, all-positive / all-negative (the
    range is widened to include 0), all zeros (scale 1/255), ties, tails around 32."""
    rng = np.random.default_rng(15)
    for shape in SHAPES:
        for shift in (0.0, 5.0, -5.0):
            x = _x(rng, shape, 0.02) + np.float32(shift)
            yield Node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], {}, "dql"), [x], set()
    yield Node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], {}, "dql"), \
        [np.zeros((3, 40), np.float32)], set()


CASES = {"QuantizeLinear": quantize_cases, "DequantizeLinear": dequantize_cases,
         "QAdd": qadd_cases, "DynamicQuantizeLinear": dynamic_quantize_cases}


def maxpool_int_cases():
    """MaxPool on uint8 / int8 tensors (quantized graphs): pads, stride 2, dilation, ceil."""
    rng = np.random.default_rng(13)
    for dtype in (np.uint8, np.int8):
        for k, s, p, d, ceil, hw in [(3, 2, 1, 1, 0, 112), (3, 2, 1, 1, 0, 15), (2, 2, 0, 1, 0, 9),
                                     (3, 1, 1, 1, 0, 7), (3, 2, 0, 1, 1, 10), (3, 1, 2, 2, 0, 9),
                                     (1, 1, 0, 1, 0, 5), (5, 3, 2, 1, 1, 11),
                                     # 3-wide stride-2 rows of 16, 17 and 32 outputs (the
                                     # uint8 one-pass path: its last step overlaps)
                                     (3, 2, 0, 1, 0, 33), (3, 2, 1, 1, 1, 32), (3, 2, 1, 1, 0, 63)]:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max, (2, 3, hw, hw + 1), dtype=dtype, endpoint=True)
            node = Node("MaxPool", ["x"], ["y"], {"kernel_shape": [k, k], "strides": [s, s],
                                                  "pads": [p, p, p, p], "dilations": [d, d],
                                                  "ceil_mode": ceil}, "mp")
            yield node, [x], set()
        for kernel, strides, pads, dil, shape in [   # asymmetric, non-square, huge windows
                ([2, 3], [1, 2], [0, 1, 2, 0], [1, 1], (1, 2, 6, 7)),
                ([7, 7], [1, 1], [3, 3, 3, 3], [1, 1], (1, 3, 4, 5)),
                ([3, 1], [2, 1], [1, 0, 1, 0], [2, 1], (2, 1, 9, 1)),
                ([1, 4], [3, 3], [0, 2, 0, 2], [1, 2], (1, 4, 1, 17))]:
            x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
            yield Node("MaxPool", ["x"], ["y"], {"kernel_shape": kernel, "strides": strides,
                                                 "pads": pads, "dilations": dil}, "mp"), [x], set()

