"""dtype names used in the IR: numpy's names ('float32', 'int64', 'bool', ...)."""
import numpy as np
from onnx import helper

from ..errors import UnsupportedOpError


def from_onnx(elem_type: int) -> str:
    """ONNX TensorProto elem type -> numpy dtype name."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        raise UnsupportedOpError({f"dtype#{elem_type}": ["<tensor>"]},
                                 "tensor element type not supported") from None


def to_onnx(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
