"""Shape rules of the elementwise family: unary maps, broadcasting binary and variadic ops,
comparisons, logic, Where, Clip, Cast/CastLike, Dropout (inference).

Broadcasting follows numpy / ONNX multidirectional rules; PRelu's slope broadcasts one way
(onto X). Every rule checks what the reference kernel would trip on (mismatched dtypes,
shapes that do not broadcast) and raises GraphError naming the node.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...registry import TensorInfo, shape_rule
from ..dtypes import from_onnx

# ops whose output has X's dtype and shape
UNARY_SAME = (
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
    "Tanh", "Softplus", "Softsign", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs",
    "Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Identity", "Gelu", "Mish", "ThresholdedRelu",
    "Shrink",
)
UNARY_BOOL = ("IsNaN", "IsInf", "Not")
# two inputs of one dtype -> that dtype
BINARY_SAME = ("Add", "Sub", "Mul", "Div", "Mod", "BitShift", "And", "Or", "Xor")
VARIADIC = ("Max", "Min", "Sum", "Mean")
COMPARE = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")

OPS = UNARY_SAME + UNARY_BOOL + BINARY_SAME + VARIADIC + COMPARE + (
    "Pow", "Where", "PRelu", "Clip", "Cast", "CastLike", "Dropout")

# element types the kernels handle; string, bfloat16, float8, int4, float4 ... are refused
NUMERIC_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                            "uint32", "uint64", "float16", "float32", "float64"})


def _where(node) -> str:
    return f"{node.op} node {node.name!r}"


def broadcast(node, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Multidirectional (numpy) broadcast of `shapes`, or GraphError naming the node."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise GraphError(f"{_where(node)}: input shapes {[tuple(s) for s in shapes]} "
                             f"do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _need(node, ins, n: int) -> None:
    if len(ins) < n or any(i is None for i in ins[:n]):
        raise GraphError(f"{_where(node)} needs {n} input(s), got {len(ins)}")


def _same_dtype(node, ins) -> str:
    dtypes = {i.dtype for i in ins if i is not None}
    if len(dtypes) != 1:
        raise GraphError(f"{_where(node)}: inputs must share one dtype, got "
                         f"{[i.dtype for i in ins if i is not None]}")
    return dtypes.pop()


@shape_rule(*UNARY_SAME)
def unary_same(node, ins):
    _need(node, ins, 1)
    return [TensorInfo(ins[0].dtype, ins[0].shape)]


@shape_rule(*UNARY_BOOL)
def unary_bool(node, ins):
    _need(node, ins, 1)
    return [TensorInfo("bool", ins[0].shape)]


@shape_rule(*BINARY_SAME)
def binary_same(node, ins):
    _need(node, ins, 2)
    dtype = _same_dtype(node, ins[:2])
    return [TensorInfo(dtype, broadcast(node, [ins[0].shape, ins[1].shape]))]


@shape_rule(*VARIADIC)
def variadic(node, ins):
    _need(node, ins, 1)
    dtype = _same_dtype(node, ins)
    return [TensorInfo(dtype, broadcast(node, [i.shape for i in ins]))]


@shape_rule(*COMPARE)
def compare(node, ins):
    _need(node, ins, 2)
    if _same_dtype(node, ins[:2]) not in NUMERIC_DTYPES:
        raise UnsupportedOpError({node.op: [node.name]},
                                 f"{node.op} on {ins[0].dtype} tensors is not supported")
    return [TensorInfo("bool", broadcast(node, [ins[0].shape, ins[1].shape]))]


@shape_rule("Pow")
def pow_rule(node, ins):
    _need(node, ins, 2)  # base and exponent may differ in type; the result has the base's
    return [TensorInfo(ins[0].dtype, broadcast(node, [ins[0].shape, ins[1].shape]))]


@shape_rule("Where")
def where_rule(node, ins):
    _need(node, ins, 3)
    if ins[0].dtype != "bool":
        raise GraphError(f"{_where(node)}: condition must be bool, got {ins[0].dtype}")
    dtype = _same_dtype(node, ins[1:3])
    return [TensorInfo(dtype, broadcast(node, [i.shape for i in ins[:3]]))]


@shape_rule("PRelu")
def prelu_rule(node, ins):
    _need(node, ins, 2)
    x, slope = ins[0], ins[1]
    _same_dtype(node, ins[:2])
    if broadcast(node, [x.shape, slope.shape]) != tuple(x.shape):
        raise GraphError(f"{_where(node)}: slope shape {slope.shape} does not broadcast "
                         f"onto X shape {x.shape}")
    return [TensorInfo(x.dtype, x.shape)]


@shape_rule("Clip")
def clip_rule(node, ins):
    _need(node, ins, 1)
    for bound in ins[1:3]:
        if bound is not None and int(np.prod(bound.shape)) != 1:
            raise GraphError(f"{_where(node)}: min/max must be scalars, got shape {bound.shape}")
    return [TensorInfo(ins[0].dtype, ins[0].shape)]


def check_cast_dtype(node, dtype: str) -> None:
    if dtype not in NUMERIC_DTYPES:
        raise UnsupportedOpError({node.op: [node.name]},
                                 f"casts from or to {dtype} are not supported")


@shape_rule("Cast")
def cast_rule(node, ins):
    _need(node, ins, 1)
    if "to" not in node.attrs:
        raise GraphError(f"{_where(node)} has no 'to' attribute")
    to = from_onnx(int(node.attrs["to"]))
    check_cast_dtype(node, ins[0].dtype)
    check_cast_dtype(node, to)
    return [TensorInfo(to, ins[0].shape)]


@shape_rule("CastLike")
def castlike_rule(node, ins):
    _need(node, ins, 2)
    check_cast_dtype(node, ins[0].dtype)
    check_cast_dtype(node, ins[1].dtype)
    return [TensorInfo(ins[1].dtype, ins[0].shape)]


@shape_rule("Dropout")
def dropout_rule(node, ins):
    """Inference Dropout: output = data; mask = all True (bool)."""
    _need(node, ins, 1)
    for extra in ins[1:3]:
        if extra is not None and int(np.prod(extra.shape)) != 1:
            raise GraphError(f"{_where(node)}: ratio/training_mode must be scalars")
    ratio, training = (list(ins) + [None, None])[1:3]
    if training is not None:
        # inference only: a training flag must be a constant, and if true, ratio must be 0
        if training.value is None:
            raise UnsupportedOpError({node.op: [node.name]},
                                     "Dropout with a runtime training_mode input is not "
                                     "supported (inference only: make it a constant)")
        if bool(np.asarray(training.value).reshape(())) and (
                ratio is None or ratio.value is None or
                float(np.asarray(ratio.value).reshape(())) != 0.0):
            raise UnsupportedOpError({node.op: [node.name]},
                                     "training-mode Dropout (random masks) is not supported")
    x = ins[0]
    return [TensorInfo(x.dtype, x.shape), TensorInfo("bool", x.shape)]

# inputs that must be constants to plan a node (Dropout's flags decide inference vs training)
CONST_INPUTS = {"Dropout": (1, 2)}
