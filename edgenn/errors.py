"""One exception hierarchy. Every message names the node, op, input, shape or file involved.
Each class also derives from onnxruntime's name for the same failure (capi/
onnxruntime_pybind11_state.py), so onnxruntime code catching those names still works."""
from .capi import onnxruntime_pybind11_state as _ort


class EdgennError(_ort.Fail):
    """Base class of every error edgenn raises on purpose."""


class ModelFormatError(EdgennError, _ort.InvalidProtobuf):
    """A model file is corrupt, truncated, of an unknown kind or from a newer format version."""


class ModelNotFoundError(ModelFormatError, _ort.NoSuchFile):
    """The model file does not exist."""


class UnsupportedOpError(EdgennError, _ort.NotImplemented):
    """The model uses ops (or op variants) edgenn does not implement.

    `unsupported` maps op type -> list of node names, so a user sees every gap at once.
    """

    def __init__(self, unsupported: dict[str, list[str]], detail: str = ""):
        self.unsupported = unsupported
        lines = [f"  {op}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
                 for op, names in sorted(unsupported.items())]
        msg = f"{len(unsupported)} unsupported op type(s):\n" + "\n".join(lines)
        if detail:
            msg += "\n" + detail
        super().__init__(msg)


class GraphError(EdgennError, _ort.InvalidGraph):
    """The graph is malformed (dangling input, cycle, bad attribute, shape mismatch)."""


class InputError(EdgennError, _ort.InvalidArgument, ValueError):
    """A run() call got a wrong input name, shape or dtype (a ValueError too, as
    onnxruntime raises for a missing input)."""


class DataDependentShapeError(UnsupportedOpError):
    """An output shape depends on runtime data (e.g. a Reshape whose shape is computed from
    input values, not input shapes). edgenn plans shapes at load, so it refuses these."""

    def __init__(self, op: str, node: str, what: str):
        super().__init__({op: [node]}, f"input {what!r} of {op} node {node!r} must be known "
                         f"when the input shapes are bound; it is computed from runtime "
                         f"data (data-dependent shapes are not supported)")


class ResourceLimitError(EdgennError, _ort.RuntimeException):
    """A model or input asks for more memory than the session allows (max_memory): refused
    before anything of that size is allocated, naming the node and the bytes asked for."""


class ExecutionError(EdgennError, _ort.RuntimeException):
    """A kernel failed while running a node (the message names the node)."""


class MissingDependencyError(EdgennError, ImportError):
    """An optional part of edgenn is used without the package it needs (edgenn.extras
    names the pip extra that installs it)."""
