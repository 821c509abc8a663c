"""Kernel test cases for BatchNormalization (inference): rank 2 to 5, batch > 1, one
channel, 1x1 planes, large/small variances, a non-default epsilon."""
import numpy as np

from edgenn.graph.ir import Node


def _batchnorm_cases():
    rng = np.random.default_rng(21)
    for shape, eps in [((1, 24, 96, 192), 1e-5), ((2, 3, 5, 7), 1e-3), ((1, 1, 1, 1), 1e-5),
                       ((3, 8), 1e-5), ((2, 4, 3, 5, 6), 1e-2), ((1, 16, 13), 1e-5)]:
        c = shape[1]
        x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
        scale = rng.standard_normal(c).astype(np.float32)
        bias = rng.standard_normal(c).astype(np.float32)
        mean = rng.standard_normal(c).astype(np.float32)
        var = (rng.random(c) * 4 + 1e-3).astype(np.float32)
        yield Node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], dict(epsilon=eps),
                   "bn"), [x, scale, bias, mean, var], {1, 2, 3, 4}


CASES = {"BatchNormalization": _batchnorm_cases}
