"""Cost hints for the window kernels (depthwise, pooling), read by the autotuner's pruning.

The single-threaded C kernels (8 channels per AVX2 vector) beat the Numba ones at one
thread on every layer; the Numba kernels
would only pay when they can split channels over threads. They are priced out, so tuning
never imports numba or compiles them for nothing (a long compile on first use).
"""


def c_cost(node, ins, outs) -> float:
    return 1.0


def numba_cost(node, ins, outs) -> float:
    # Priced out at every thread count for now: with more than one thread, the parallel
    # Numba depthwise makes a model slower than one thread does (Numba's and OpenBLAS's
    # pools contend for the cores); they stay registered, tested and selectable.
    return 10.0


def plan_threads() -> int:
    """The thread count of the plan being built (kernels/plan_context.py)."""
    from ..plan_context import current
    return current().threads


def threaded_only(supports):
    """supports() of a *_mt spec: as `supports`, in a plan of more than one thread only."""
    return lambda node, ins, outs: plan_threads() > 1 and supports(node, ins, outs)
