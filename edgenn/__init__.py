"""edgenn: an on-device neural-network inference runtime for Python.

    import edgenn
    sess = edgenn.InferenceSession("model.onnx", threads=1)   # or a .enn file / bytes
    outputs = sess.run(None, {"input": x})

    int8 = edgenn.quantize("model.onnx", calibration_batches, method="kl")
    edgenn.save(int8, "model.int8.enn")

    family = edgenn.scalable("model.onnx", latency=(10, 50), calib=calib, eval=held_out)
    sess = edgenn.load_family("model.ennf").select(latency_ms=20)   # the member that fits

    sess = edgenn.from_torch(module, (x,))       # torch.onnx export, checked vs the module
    pipe = edgenn.compose({"audio": ("float32", (1, 576))})   # models + glue, one graph

    text = edgenn.generate("decoder/model.onnx", "def main(", max_new_tokens=32)
"""
from .errors import (EdgennError, GraphError, InputError, MissingDependencyError,
                     ModelFormatError, UnsupportedOpError)
from .version import __version__

__all__ = ["InferenceSession", "convert", "load", "save", "quantize", "generate_key",
           "load_family", "scalable", "from_torch", "compose", "Pipeline",
           "Generator", "Sampling", "generate",
           "EdgennError", "GraphError",
           "InputError", "MissingDependencyError", "ModelFormatError", "UnsupportedOpError", "__version__"]


# onnxruntime's names (`import edgenn as ort`), from ortcompat.py
_ORT = ("SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "OrtValue",
        "IOBinding", "ModelMetadata", "get_available_providers", "get_all_providers",
        "get_device", "get_version_string", "set_default_logger_severity")


def __getattr__(name):  # keep `import edgenn` light: numba/onnx load on first use
    if name == "InferenceSession":
        from .api import InferenceSession
        return InferenceSession
    if name == "generate_key":
        from .graph.sealed import generate_key
        return generate_key
    if name in _ORT:
        from . import ortcompat
        return getattr(ortcompat, name)
    if name in ("compose", "Pipeline"):
        from . import pipeline
        return getattr(pipeline, name)
    if name in ("Generator", "Sampling", "generate"):
        from . import lm
        return getattr(lm, name)
    if name == "from_torch":
        from .torchexport import from_torch
        return from_torch
    if name in ("convert", "load", "save", "quantize", "load_family", "scalable"):
        from . import api
        return getattr(api, name)
    raise AttributeError(name)
