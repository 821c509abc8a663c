"""Cost hints for the window kernels (depthwise, pooling), read by the autotuner's pruning.

The single-threaded C kernels (8 channels per AVX2 vector) beat the Numba ones at one
thread on every layer measured (MobileNetV2 depthwise: 3.5 vs 8.1 ms); the Numba kernels
only pay when they can split channels over threads. At one thread they are priced out, so
tuning never imports numba or compiles them for nothing (~20 s on first use).
"""
from ...runtime import threads


def c_cost(node, ins, outs) -> float:
    return 1.0


def numba_cost(node, ins, outs) -> float:
    n = threads.current() or 1
    return 1.0 / n if n > 1 else 10.0
