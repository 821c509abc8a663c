"""Kernel test cases for DepthwiseProject (the planner's fused 3x3 depthwise conv + 1x1
conv): rows of one pixel to 2 vectors and a tail, one row, 1 to 33 channels, 1 to 24
output channels (ragged blocks of 8), each activation of both halves, no bias, batch 2;
and what the fused kernel refuses (stride 2, a 5x5 window, a residual): the reference
alone. Inputs 1-4 (the weights, biases) are constant."""
import numpy as np

from edgenn.graph.ir import Node

# n, C, h, w, M, (k, stride, pad), depthwise act, 1x1 act, bias, z
GEOMS = [(1, 32, 20, 23, 16, (3, 1, 1), "Clip", "", True, False),
         (2, 5, 9, 7, 11, (3, 1, 1), "Relu", "Relu", True, False),
         (1, 1, 1, 1, 1, (3, 1, 1), "", "Clip", False, False),
         (1, 33, 1, 40, 24, (3, 1, 1), "Clip", "Clip", True, False),
         (1, 8, 6, 17, 9, (3, 2, 1), "Relu", "", True, False),
         (1, 6, 9, 9, 5, (5, 1, 2), "", "", True, False),
         (1, 4, 5, 18, 7, (3, 1, 1), "", "", True, True)]
PARAMS = {"Clip": [0.0, 6.0]}


def depthwise_project_cases():
    rng = np.random.default_rng(12)
    for n, c, h, w, m, (k, s, p), a1, a2, has_b, res in GEOMS:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wd = rng.standard_normal((c, 1, k, k)).astype(np.float32)
        bd = rng.standard_normal(c).astype(np.float32) if has_b else None
        wp = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        bp = rng.standard_normal(m).astype(np.float32) if has_b else None
        dw = dict(group=c, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, activation=a1,
                  activation_params=PARAMS.get(a1, []))
        project = dict(kernel_shape=[1, 1], activation=a2, activation_params=PARAMS.get(a2, []))
        oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        z = rng.standard_normal((n, m, oh, ow)).astype(np.float32) if res else None
        names = ["x", "wd", "bd" if has_b else "", "wp", "bp" if has_b else "",
                 "z" if res else ""]
        yield Node("DepthwiseProject", names, ["y"], {"depthwise": dw, "project": project},
                   "pair"), [x, wd, bd, wp, bp, z], {1, 2, 3, 4}


CASES = {"DepthwiseProject": depthwise_project_cases}
