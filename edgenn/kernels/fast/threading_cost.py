"""Cost hints for the window kernels (depthwise, pooling), read by the autotuner's pruning.

The single-threaded C kernels (8 channels per AVX2 vector) beat the Numba ones at one
thread on every layer measured (MobileNetV2 depthwise: 3.5 vs 8.1 ms); the Numba kernels
would only pay when they can split channels over threads. They are priced out, so tuning
never imports numba or compiles them for nothing (~20 s on first use).
"""


def c_cost(node, ins, outs) -> float:
    return 1.0


def numba_cost(node, ins, outs) -> float:
    # Priced out at every thread count for now: at 2 threads, MobileNetV2 with the parallel
    # Numba depthwise measured 57 ms against 25 ms at 1 thread (Numba's and OpenBLAS's
    # pools contend for the 2 cores); they stay registered, tested and selectable.
    return 10.0


def plan_threads() -> int:
    """The thread count of the plan being built (kernels/plan_context.py)."""
    from ..plan_context import current
    return current().threads


def threaded_only(supports):
    """supports() of a *_mt spec: as `supports`, in a plan of more than one thread only."""
    return lambda node, ins, outs: plan_threads() > 1 and supports(node, ins, outs)
