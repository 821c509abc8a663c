"""A .tflite flatbuffer as plain Python: tensors (name, dtype, shape, constant data) and
operators (op name, input / output tensor indices, builtin options), read with the
`tflite` package (flatbuffer bindings: nothing in the file is executed).

Only the first subgraph is the model; constant data is copied out of the buffer table
(float16 weights stay float16 here: the DEQUANTIZE that follows them makes them
float32). Every index and size is checked against the file (ModelFormatError).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import ModelFormatError, UnsupportedOpError

DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool",
          7: "int16", 9: "int8", 10: "float64", 12: "uint64", 15: "uint32", 16: "uint16"}
CUSTOM = 32


@dataclass
class TTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray | None = None          # constant value
    scale: np.ndarray | None = None         # quantization (per tensor or per channel)
    zero_point: np.ndarray | None = None
    axis: int = 0


@dataclass
class TOp:
    op: str
    inputs: list[int]                       # -1: omitted
    outputs: list[int]
    options: object = None
    index: int = 0
    extra: dict = field(default_factory=dict)


def _builtin_names() -> dict[int, str]:
    import tflite
    return {v: k for k, v in tflite.BuiltinOperator.__dict__.items() if not k.startswith("_")}


def _options(op, name: str):
    """The op's builtin options table as the tflite class <CamelName>Options, or None."""
    import tflite
    table = op.BuiltinOptions()
    if table is None:
        return None
    camel = "".join(w.capitalize() for w in name.split("_"))
    fixes = {"Conv2d": "Conv2D", "DepthwiseConv2d": "DepthwiseConv2D", "MaxPool2d": "Pool2D",
             "AveragePool2d": "Pool2D", "Logistic": None, "Relu": None, "Mean": "Reducer",
             "Sum": "Reducer", "ReduceMax": "Reducer"}
    for k, v in fixes.items():
        if camel == k:
            camel = v
    if camel is None:
        return None
    cls = getattr(tflite, f"{camel}Options", None)
    if cls is None:
        return None
    opt = cls()
    opt.Init(table.Bytes, table.Pos)
    return opt


def read(data: bytes, source: str = "<tflite>") -> tuple[list[TTensor], list[TOp], list[int],
                                                          list[int]]:
    """-> (tensors, operators, graph input indices, graph output indices)."""
    try:
        import tflite
    except ImportError as exc:
        from ...errors import MissingDependencyError
        raise MissingDependencyError("reading .tflite needs the `tflite` package: pip "
                                     "install tflite (the 'convert' extra)") from exc
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelFormatError(f"{source}: not a TFLite flatbuffer (no TFL3 identifier)")
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        if model.SubgraphsLength() < 1:
            raise ModelFormatError(f"{source}: the model has no subgraph")
        g = model.Subgraphs(0)
        names = _builtin_names()
        tensors = []
        for i in range(g.TensorsLength()):
            t = g.Tensors(i)
            ttype = t.Type()
            if ttype not in DTYPES:
                raise UnsupportedOpError({f"tensor type {ttype}": [t.Name().decode()]},
                                         "only numeric TFLite tensor types are supported")
            shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
            tt = TTensor(t.Name().decode("utf-8", "replace"), DTYPES[ttype], shape)
            if t.Sparsity() is not None:
                raise UnsupportedOpError({"sparse TFLite tensors (DENSIFY)": [tt.name]},
                                         "sparse-encoded weights are not supported")
            b = t.Buffer()
            if not 0 <= b < model.BuffersLength():
                raise ModelFormatError(f"{source}: tensor {tt.name!r} names buffer {b} of "
                                       f"{model.BuffersLength()}")
            buf = model.Buffers(b)
            if buf.DataLength() > 0:
                raw = buf.DataAsNumpy()
                dt = np.dtype(tt.dtype)
                n = int(np.prod(shape)) if shape else 1
                if raw.size != n * dt.itemsize:
                    raise ModelFormatError(f"{source}: tensor {tt.name!r} holds {raw.size} "
                                           f"bytes for shape {shape} {dt}")
                tt.data = np.frombuffer(raw.tobytes(), dt).reshape(shape).copy()
            q = t.Quantization()
            if q is not None and q.ScaleLength():
                tt.scale = q.ScaleAsNumpy().astype(np.float32)
                if not np.all(np.isfinite(tt.scale)) or np.any(tt.scale < 0):
                    raise ModelFormatError(f"{source}: tensor {tt.name!r} has quantization "
                                           f"scales that are not finite and >= 0")
                tt.zero_point = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() \
                    else np.zeros_like(tt.scale, np.int64)
                tt.axis = int(q.QuantizedDimension())
            tensors.append(tt)
        ops = []
        for i in range(g.OperatorsLength()):
            op = g.Operators(i)
            k = op.OpcodeIndex()
            if not 0 <= k < model.OperatorCodesLength():
                raise ModelFormatError(f"{source}: operator {i} has opcode index {k}")
            code = model.OperatorCodes(k)
            b = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            name = f"CUSTOM:{code.CustomCode().decode()}" if b == CUSTOM else \
                names.get(b, f"BUILTIN_{b}")
            ins = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
            outs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
            if any(not -1 <= x < len(tensors) for x in ins + outs):
                raise ModelFormatError(f"{source}: operator {i} ({name}) names a tensor "
                                       f"outside the {len(tensors)} tensors")
            ops.append(TOp(name, ins, outs, None if b == CUSTOM else _options(op, name), i))
        inputs = [int(x) for x in g.InputsAsNumpy()] if g.InputsLength() else []
        outputs = [int(x) for x in g.OutputsAsNumpy()] if g.OutputsLength() else []
        if any(not 0 <= x < len(tensors) for x in inputs + outputs):
            raise ModelFormatError(f"{source}: graph inputs / outputs outside the tensors")
        return tensors, ops, inputs, outputs
    except (ModelFormatError, UnsupportedOpError):
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed flatbuffer, said as one
        raise ModelFormatError(f"{source}: malformed TFLite file ({type(exc).__name__}: "
                               f"{exc})") from None
