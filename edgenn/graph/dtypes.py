"""dtype names used in the IR: numpy's names ('float32', 'int64', 'bool', ...).

The common ONNX element types are a static table, so loading a .enn never imports onnx;
rarer ones (bfloat16 via ml_dtypes, ...) go through onnx.helper."""
import numpy as np

from ..errors import UnsupportedOpError
from ..extras import have

_FROM_ONNX = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
              7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
              13: "uint64", 14: "complex64", 15: "complex128"}
_TO_ONNX = {v: k for k, v in _FROM_ONNX.items()}


def from_onnx(elem_type: int) -> str:
    """ONNX TensorProto elem type -> numpy dtype name."""
    if elem_type in _FROM_ONNX:
        return _FROM_ONNX[elem_type]
    if not have("onnx"):      # the rarer types need onnx's table (a lean install has none)
        raise UnsupportedOpError({f"dtype#{elem_type}": ["<tensor>"]},
                                 "tensor element type not supported without onnx")
    from onnx import helper
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        raise UnsupportedOpError({f"dtype#{elem_type}": ["<tensor>"]},
                                 "tensor element type not supported") from None


def to_onnx(dtype: str) -> int:
    if dtype in _TO_ONNX:
        return _TO_ONNX[dtype]
    if not have("onnx"):
        raise UnsupportedOpError({f"dtype {dtype}": ["<tensor>"]},
                                 "tensor element type not supported without onnx")
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
