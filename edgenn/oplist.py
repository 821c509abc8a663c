"""The one list of ops edgenn implements, gathered from the op families.

Each family `F` has graph/shapes/F.py (declares `OPS` and the shape rules),
kernels/reference/F.py (reference kernels) and converters/onnx/F.py (ONNX converters).
`load_all()` imports all of them so the registries are complete.
"""
from __future__ import annotations

import importlib

FAMILIES = ("elementwise", "reduce", "nn", "tensor", "fused", "quant", "recurrent",
            "control", "nbits", "decoder")
# ops that exist only inside edgenn (produced by passes), so they need no ONNX converter
INTERNAL_OPS = ("FusedAttention", "QConv", "QGemm", "QAdd", "QGather", "AttentionMaskBias",
                "ExpandDepthwise", "DepthwiseProject")
_loaded: set[str] = set()


def load_rules() -> None:
    """Shape rules and reference kernels: what shape inference, constant folding and the
    passes need (no compiled kernel, no runtime)."""
    if "rules" not in _loaded:
        for family in FAMILIES:
            for package in ("graph.shapes", "kernels.reference"):
                importlib.import_module(f"edgenn.{package}.{family}")
        _loaded.add("rules")


def load_kernels() -> None:
    """Shape rules, reference and fast kernels: what running a model needs."""
    if "kernels" not in _loaded:
        load_rules()
        importlib.import_module("edgenn.kernels.fast")
        importlib.import_module("edgenn.runtime.control")   # planned If / Loop / Scan
        _loaded.add("kernels")


def load_converters() -> None:
    """Shape rules, reference kernels and the ONNX converters: what importing needs."""
    load_rules()
    if "converters" not in _loaded:
        for family in FAMILIES:
            importlib.import_module(f"edgenn.converters.onnx.{family}")
        importlib.import_module("edgenn.converters.onnx.contrib")   # com.microsoft ops
        importlib.import_module("edgenn.converters.onnx.contrib_transformer")
        _loaded.add("converters")


def load_all() -> None:
    """Everything: rules, reference and fast kernels, converters."""
    load_kernels()
    load_converters()


def all_ops() -> list[str]:
    ops: list[str] = []
    for family in FAMILIES:
        ops.extend(importlib.import_module(f"edgenn.graph.shapes.{family}").OPS)
    return ops


def const_inputs() -> dict[str, tuple[int, ...]]:
    """op -> indices of the inputs whose values decide output shapes (Reshape's shape,
    Reduce axes, Resize sizes...): the planner needs them constant, as real models have."""
    out: dict[str, tuple[int, ...]] = {}
    for family in FAMILIES:
        out.update(importlib.import_module(f"edgenn.graph.shapes.{family}").CONST_INPUTS)
    return out
