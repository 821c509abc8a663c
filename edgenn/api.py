"""Model-level API: load any model source into an optimized Graph, convert, save."""
from __future__ import annotations

import os

from .converters.source import is_enn, load, optimize  # noqa: F401 - the public API
from .graph import format as enn
from .graph import sealed
from .graph.ir import Graph
from .runtime.session import InferenceSession as _GraphSession


class InferenceSession(_GraphSession):
    """edgenn.InferenceSession: runtime/session.py's session over any model source.

    model: path to .onnx or .enn, their bytes, an onnx.ModelProto or an edgenn Graph;
    key: the key of a sealed (encrypted) .enn (else $EDGENN_MODEL_KEY), never stored.
    The other arguments are the runtime session's (threads, input_shapes, reference,
    tune, progress, max_memory)."""

    def __init__(self, model, *args, key=None, **kwargs):
        super().__init__(model if isinstance(model, Graph) else load(model, key=key),
                         *args, **kwargs)


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
