"""Model-level API: load any model source into an optimized Graph, convert, save."""
from __future__ import annotations

import os

from .errors import ModelFormatError
from .graph import format as enn
from .graph import sealed
from .graph.ir import Graph


def _read_head(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:16])
    try:
        with open(source, "rb") as f:
            return f.read(16)
    except OSError as exc:
        raise ModelFormatError(f"cannot read {source!r}: {exc}") from exc


def is_enn(source) -> bool:
    head = _read_head(source)
    return enn.looks_like_enn(head) or sealed.looks_sealed(head)


def optimize(graph: Graph) -> Graph:
    """The portable optimization pipeline (saved in .enn files)."""
    from .graph.passes import optimize as run_pipeline
    run_pipeline(graph)
    return graph


def load(source, optimized: bool = True, key=None) -> Graph:
    """A Graph from a .onnx or .enn path, bytes, or an onnx.ModelProto.

    ONNX is converted (and optimized unless `optimized=False`); .enn is memory-mapped; a
    sealed (encrypted) .enn is opened with `key` or $EDGENN_MODEL_KEY (graph/sealed.py)."""
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        from .converters.onnx.importer import import_onnx
        graph = import_onnx(source)  # an onnx.ModelProto
        return optimize(graph) if optimized else graph
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if is_enn(source):
        from .oplist import load_kernels
        load_kernels()
        if sealed.looks_sealed(_read_head(source)):
            return _load_sealed(source, key)
        if isinstance(source, str):
            return enn.load(source)
        return enn.from_buffer(bytes(source))
    from .converters.onnx.importer import import_onnx
    graph = import_onnx(source)
    return optimize(graph) if optimized else graph


def _load_sealed(source, key) -> Graph:
    name = source if isinstance(source, str) else "<bytes>"
    if isinstance(source, str):
        try:
            with open(source, "rb") as f:
                source = f.read()
        except OSError as exc:
            raise ModelFormatError(f"cannot read {name!r}: {exc}") from exc
    return enn.from_buffer(sealed.unseal(source, key, name), name)


def save(graph: Graph, path: str, key=None, encrypt: bool = False) -> None:
    """Write `graph` as .enn; with `key` (or encrypt=True and $EDGENN_MODEL_KEY) sealed:
    encrypted and authenticated (AES-256-GCM, graph/sealed.py)."""
    if key is None and not encrypt:
        enn.save(graph, path)
        return
    data = sealed.seal(enn.to_bytes(graph), key)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def convert(source, output_path: str | None = None, optimized: bool = True, key=None,
            encrypt: bool = False) -> Graph:
    """ONNX (path, bytes or ModelProto) -> optimized Graph, written to `output_path` if
    given (sealed with `key`, as save)."""
    graph = load(source, optimized=optimized)
    if output_path:
        save(graph, output_path, key=key, encrypt=encrypt)
    return graph


def quantize(model, calibration_data, method: str = "minmax", weight_bits: int = 7,
             per_channel: bool = True, fidelity: float | None = None, exclude=(),
             progress=None, **options) -> Graph:
    """Post-training int8 quantization of an fp32 model -> Graph (see quant/quantize.py)."""
    from .quant.quantize import quantize as run
    return run(model, calibration_data, method=method, weight_bits=weight_bits,
               per_channel=per_channel, fidelity=fidelity, exclude=exclude,
               progress=progress, **options)
