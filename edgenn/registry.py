"""Explicit registries: op type -> shape rule, reference kernel, ONNX converter, fast kernels.

Each concern lives in its own small files (graph/shapes/*, kernels/reference/*,
converters/onnx/*, kernels/<family>/*); they register here through the decorators below.
`edgenn.oplist.load_all()` imports every one of those files; `tests/ops/test_registry.py`
asserts that every op in `edgenn.oplist.OPS` has a shape rule, a reference kernel and
(for ONNX ops) a converter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

# op type -> rule(node, ins: list[TensorInfo | None]) -> list[TensorInfo]
SHAPE_RULES: dict[str, Callable] = {}
# op type -> ref(attrs: dict, inputs: list[np.ndarray | None]) -> list[np.ndarray]
REFERENCE: dict[str, Callable] = {}
# ONNX op type -> convert(onode: onnx.NodeProto, ctx: ConvertContext) -> None (adds IR nodes)
CONVERTERS: dict[str, Callable] = {}
# op type -> kernel specs, best first (filled by kernels/<family>/*)
KERNELS: dict[str, list["KernelSpec"]] = {}


@dataclass
class TensorInfo:
    """What is known of one tensor at plan time: dtype, concrete shape, value if constant."""
    dtype: str
    shape: tuple[int, ...]
    value: np.ndarray | None = None

    @staticmethod
    def of(array: np.ndarray) -> "TensorInfo":
        return TensorInfo(array.dtype.name, tuple(int(d) for d in array.shape), array)


@dataclass
class KernelSpec:
    """One implementation of an op.

    supports(node, ins, outs) -> bool: capability filter (dtypes, attrs, shapes).
    prepare(node, ins, outs) -> run(inputs, outputs): packs weights and picks tiles once;
    the returned callable writes into the preallocated `outputs` arrays and allocates nothing
    it can avoid. `ins` carry constant values (weights) where known.
    """
    op: str
    name: str
    prepare: Callable
    supports: Callable = lambda node, ins, outs: True
    cost: Callable | None = None   # cost(node, ins, outs) -> relative cost or None
    # integer outputs may differ from the reference by this many steps (0: bit-exact); for
    # kernels that compute a quantized op through float32 (rounding may flip one step)
    lsb_tolerance: int = 0
    # whose threads it runs on when the session has several: "blas" (OpenBLAS's pool),
    # "omp" (edgenn's OpenMP split, the *_mt kernels) or "own" (one thread, the caller's).
    # A plan never mixes "blas" and "omp": each pool's idle workers spin and starve the
    # other's (runtime/session.py measures both pools and keeps the faster plan).
    pool: str = "own"
    # the instruction-set tier it needs (edgenn.kernels.isa: "avx2", "avx512vnni", ...);
    # "" = runs anywhere (portable code, or its own run-time dispatch). The planner offers
    # a spec only where isa.usable(spec.isa), so EDGENN_MAX_ISA caps it too.
    isa: str = ""
    # higher first among the capable specs when nothing is timed (tune="off", budget
    # spent); the tuner times all of them regardless
    priority: int = 0
    # optional packages it imports (edgenn.extras: e.g. ("numba",)); the planner offers the
    # spec only where they are installed, so a runtime-only install never imports them
    requires: tuple[str, ...] = ()
    # how its threads share the work, where a plan may prefer one way throughout
    # (runtime/session.py's "omp-rows" plan): "rows" = bands of output rows, all channels
    # each; "" = any other way, or one thread
    thread_split: str = ""
    # the kernel table it was made from (a row of `family`, e.g. "sgemm"); a `fallback`
    # spec (the table's portable row) is offered only where no other spec of its op and
    # family runs: it is never faster than a SIMD row, so the tuner need not time it
    family: str = ""
    fallback: bool = False
    # an approximate float kernel (e.g. activations quantized to int8 where the op allows
    # it, MatMulNBits' accuracy_level 4): error_bound(node, inputs) -> the largest absolute
    # difference from the reference its arithmetic allows (broadcast to the output); the
    # tuner and the tests check it against that instead of float rounding alone
    error_bound: Callable | None = None


def _register(table: dict, ops: tuple[str, ...], fn: Callable) -> Callable:
    for op in ops:
        if op in table:
            raise RuntimeError(f"{op} registered twice in {fn.__module__}")
        table[op] = fn
    return fn


def shape_rule(*ops: str):
    return lambda fn: _register(SHAPE_RULES, ops, fn)


def reference(*ops: str):
    return lambda fn: _register(REFERENCE, ops, fn)


def converter(*ops: str):
    return lambda fn: _register(CONVERTERS, ops, fn)


def kernel(op: str, name: str, supports: Callable | None = None, cost: Callable | None = None,
           lsb_tolerance: int = 0, pool: str | None = None, isa: str = "", priority: int = 0,
           requires: tuple[str, ...] = (), thread_split: str = "", family: str = "",
           fallback: bool = False, error_bound: Callable | None = None):
    """Register `prepare` as one implementation of `op` (see KernelSpec); pool defaults to
    "omp" for a name ending in _mt, else "own"."""
    def deco(prepare: Callable) -> Callable:
        spec = KernelSpec(op, name, prepare, supports or (lambda node, ins, outs: True), cost,
                          lsb_tolerance, pool or ("omp" if name.endswith("_mt") else "own"),
                          isa, priority, tuple(requires), thread_split, family, fallback,
                          error_bound)
        KERNELS.setdefault(op, []).append(spec)
        return prepare
    return deco


def attr(node: Any, key: str, default=None):
    return node.attrs.get(key, default)


def const_value(node: Any, info: "TensorInfo | None", what: str):
    """The value of a shape-deciding input (Reshape's shape, Reduce axes, Resize sizes...).
    -> None if the input is omitted; DataDependentShapeError if it is not constant."""
    if info is None:
        return None
    if info.value is None:
        from .errors import DataDependentShapeError
        raise DataDependentShapeError(node.op, node.name, what)
    return info.value
