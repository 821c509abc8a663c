"""Kernel test cases for ExpandDepthwise (the planner's fused 1x1 conv + depthwise conv):
expanded channel tails past 8 / 16 lanes, K = 1 to 40, planes of one pixel to 23 x 20,
strides 1 - 3, 3x3 / 5x5 / 1x3 depthwise windows, dilation, asymmetric pads, both halves'
activations, no bias, a residual, batch 2; planes of 16-40 output rows for the rows split. Inputs 1-4 (the weights, biases) are constant."""
import numpy as np

from edgenn.graph.ir import Node

# n, K, C, h, w, (kh, kw), stride, pads (t, l, b, r), dilation, expand act, depthwise act, z
GEOMS = [(1, 16, 96, 20, 23, (3, 3), 2, (1, 1, 1, 1), 1, "Clip", "Clip", False),
         (2, 5, 37, 9, 7, (3, 3), 1, (1, 1, 1, 1), 1, "Relu", "", True),
         (1, 1, 8, 1, 1, (3, 3), 1, (1, 1, 1, 1), 1, "", "Relu", False),
         (1, 40, 24, 13, 11, (5, 5), 1, (2, 2, 2, 2), 1, "HardSwish", "HardSwish", False),
         (1, 7, 33, 12, 12, (3, 3), 1, (2, 2, 2, 2), 2, "LeakyRelu", "Sigmoid", False),
         (1, 12, 17, 15, 15, (3, 3), 3, (0, 1, 2, 1), 1, "HardSigmoid", "Clip", False),
         (1, 9, 20, 6, 14, (1, 3), 1, (0, 1, 0, 1), 1, "Clip", "", True),
         # tall planes, so each of two threads has a band of >= 8 output rows (the rows
         # split): flat planes (W < 16 / 8 lanes) and row-wise, strides 1 / 2, dilation
         (1, 8, 24, 34, 9, (3, 3), 1, (1, 1, 1, 1), 1, "Clip", "Clip", True),
         (2, 6, 20, 33, 5, (3, 3), 2, (1, 1, 1, 1), 1, "Relu", "", False),
         (1, 4, 17, 40, 3, (5, 5), 1, (2, 2, 2, 2), 1, "", "HardSwish", True),
         (1, 3, 40, 18, 20, (3, 3), 1, (2, 2, 2, 2), 2, "HardSwish", "Relu", False),
         (1, 5, 16, 37, 18, (3, 3), 2, (0, 1, 1, 1), 1, "Clip", "Clip", False)]
PARAMS = {"Clip": [0.0, 6.0], "LeakyRelu": [0.2], "HardSigmoid": [0.2, 0.5]}


def expand_depthwise_cases():
    rng = np.random.default_rng(11)
    for gi, (n, k, c, h, w, (kh, kw), s, pads, d, a1, a2, res) in enumerate(GEOMS):
        x = rng.standard_normal((n, k, h, w)).astype(np.float32)
        w1 = (rng.standard_normal((c, k, 1, 1)) / np.sqrt(k)).astype(np.float32)
        b1 = None if gi == 2 else rng.standard_normal(c).astype(np.float32)
        w2 = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
        b2 = rng.standard_normal(c).astype(np.float32)
        expand = dict(kernel_shape=[1, 1], activation=a1, activation_params=PARAMS.get(a1, []))
        dw = dict(group=c, kernel_shape=[kh, kw], strides=[s, s], pads=list(pads),
                  dilations=[d, d], activation=a2, activation_params=PARAMS.get(a2, []))
        oh = (h + pads[0] + pads[2] - d * (kh - 1) - 1) // s + 1
        ow = (w + pads[1] + pads[3] - d * (kw - 1) - 1) // s + 1
        z = rng.standard_normal((n, c, oh, ow)).astype(np.float32) if res else None
        names = ["x", "w1", "b1" if b1 is not None else "", "w2", "b2", "z" if res else ""]
        yield Node("ExpandDepthwise", names, ["y"], {"expand": expand, "depthwise": dw},
                   "pair"), [x, w1, b1, w2, b2, z], {1, 2, 3, 4}


CASES = {"ExpandDepthwise": expand_depthwise_cases}
