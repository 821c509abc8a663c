"""onnxruntime's exception names (onnxruntime.capi.onnxruntime_pybind11_state), so code
that catches them runs unchanged with `import edgenn as ort`. Every edgenn error derives
from the one onnxruntime raises in the same situation (edgenn/errors.py):

    InvalidArgument   wrong input name, shape, dtype; data out of range  (InputError)
    NoSuchFile        the model file does not exist                   (ModelNotFoundError)
    InvalidProtobuf   a corrupt, truncated or foreign model file         (ModelFormatError)
    NotImplemented    ops edgenn does not implement                      (UnsupportedOpError)
    InvalidGraph      a malformed graph                                  (GraphError)
    RuntimeException  memory limits, kernel failures      (ResourceLimitError, ExecutionError)
    Fail              any other edgenn error                             (EdgennError)
"""
# As in onnxruntime, siblings that derive from Exception directly.


class Fail(Exception):
    pass


class InvalidArgument(Exception):
    pass


class NoSuchFile(Exception):
    pass


class NoModel(Exception):
    pass


class EngineError(Exception):
    pass


class RuntimeException(Exception):
    pass


class InvalidProtobuf(Exception):
    pass


class ModelLoaded(Exception):
    pass


class NotImplemented(Exception):  # noqa: A001 - onnxruntime's name
    pass


class InvalidGraph(Exception):
    pass


class EPFail(Exception):
    pass


class NotFound(Exception):
    pass
