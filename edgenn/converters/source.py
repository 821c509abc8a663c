"""Model sources -> Graph: ONNX (path, bytes, ModelProto; converted and optimized), .enn
(memory-mapped) and sealed .enn (decrypted with a key). The one place that knows file
kinds; the session, the quantizer and the CLI all load through it."""
from __future__ import annotations

import os

from ..errors import ModelFormatError, ModelNotFoundError
from . import graph_cache
from ..graph import format as enn
from ..graph import sealed
from ..graph.ir import Graph


def _read_head(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:16])
    try:
        with open(source, "rb") as f:
            return f.read(16)
    except FileNotFoundError as exc:
        raise ModelNotFoundError(f"no such model file: {source!r}") from exc
    except OSError as exc:
        raise ModelFormatError(f"cannot read {source!r}: {exc}") from exc


def is_enn(source) -> bool:
    head = _read_head(source)
    return enn.looks_like_enn(head) or sealed.looks_sealed(head)


def is_tflite(source) -> bool:
    """A TFLite flatbuffer: the file identifier "TFL3" after the root offset."""
    return _read_head(source)[4:8] == b"TFL3"


def _import_tflite(source) -> Graph:
    from .tflite import import_tflite
    if isinstance(source, (bytes, bytearray, memoryview)):
        return import_tflite(bytes(source))
    with open(source, "rb") as f:
        return import_tflite(f.read(), source)


def optimize(graph: Graph) -> Graph:
    """The portable optimization pipeline (saved in .enn files)."""
    from ..graph.passes import optimize as run_pipeline
    run_pipeline(graph)
    return graph


def load(source, optimized: bool = True, key=None) -> Graph:
    """A Graph from a .onnx, .tflite or .enn path, bytes, or an onnx.ModelProto.

    ONNX is converted (and optimized unless `optimized=False`); .enn is memory-mapped; a
    sealed (encrypted) .enn is opened with `key` or $EDGENN_MODEL_KEY (graph/sealed.py)."""
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        graph = _import_onnx(source)  # an onnx.ModelProto
        return optimize(graph) if optimized else graph
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if is_enn(source):
        from ..oplist import load_rules
        load_rules()
        if sealed.looks_sealed(_read_head(source)):
            return _load_sealed(source, key)
        if isinstance(source, str):
            return enn.load(source)
        return enn.from_buffer(bytes(source))
    if optimized and isinstance(source, str):     # converted before: its optimized graph
        graph = graph_cache.lookup(source)
        if graph is not None:
            return graph
    graph = _import_tflite(source) if is_tflite(source) else _import_onnx(source)
    if not optimized:
        return graph
    graph = optimize(graph)
    if isinstance(source, str):
        graph_cache.store(source, graph)
    return graph


def _import_onnx(source) -> Graph:
    """ONNX -> Graph (the importer reads protobuf itself: no onnx package needed)."""
    from .onnx.importer import import_onnx
    return import_onnx(source)


def _load_sealed(source, key) -> Graph:
    name = source if isinstance(source, str) else "<bytes>"
    if isinstance(source, str):
        try:
            with open(source, "rb") as f:
                source = f.read()
        except OSError as exc:
            raise ModelFormatError(f"cannot read {name!r}: {exc}") from exc
    return enn.from_buffer(sealed.unseal(source, key, name), name)
