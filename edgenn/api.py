"""Model-level API: load any model source into an optimized Graph, convert, save."""
from __future__ import annotations

import os

from . import ortcompat as oc
from .converters.source import is_enn, load, optimize  # noqa: F401 - the public API
from .errors import EdgennError
from .graph import format as enn
from .graph import sealed
from .graph.ir import Graph
from .runtime.session import InferenceSession as _GraphSession


class InferenceSession(_GraphSession):
    """edgenn.InferenceSession: runtime/session.py's session over any model source, with
    onnxruntime's signature and methods (ortcompat.py).

    model: path to .onnx or .enn, their bytes, an onnx.ModelProto or an edgenn Graph;
    sess_options / providers / provider_options: onnxruntime's (SessionOptions;
    "CPUExecutionProvider"); key: the key of a sealed (encrypted) .enn (else
    $EDGENN_MODEL_KEY), never stored. The keywords threads, input_shapes, reference, tune,
    progress, max_memory are the runtime session's (threads wins over the options')."""

    def __init__(self, model, sess_options=None, providers=None, provider_options=None,
                 *, key=None, threads=None, input_shapes=None, **kwargs):
        if isinstance(sess_options, int) and not isinstance(sess_options, bool):
            threads, sess_options = sess_options, None       # InferenceSession(path, 2)
        opts = sess_options or oc.SessionOptions()
        self._sess_options = opts
        self._providers = oc.session_providers(providers, provider_options)
        optimized = opts.graph_optimization_level != oc.GraphOptimizationLevel.ORT_DISABLE_ALL
        graph = model if isinstance(model, Graph) else load(model, optimized=optimized,
                                                            key=key)
        if input_shapes is None and opts._free_dims:
            input_shapes = oc.free_dim_shapes(graph, opts._free_dims)
        if threads is None:     # edgenn's default is 1; onnxruntime's options say their own
            threads = opts.threads if sess_options is not None else 1
        super().__init__(graph, threads=threads, input_shapes=input_shapes, **kwargs)
        if opts.optimized_model_filepath:
            oc.save_optimized(graph, opts.optimized_model_filepath)
        self._profiler = oc.Profiler(opts.profile_file_prefix) if opts.enable_profiling \
            else None

    # -- onnxruntime's methods ------------------------------------------------------------
    def run(self, output_names, input_feed: dict, run_options=None, timings=None):
        if run_options is not None and run_options.terminate:
            raise EdgennError("run refused: RunOptions.terminate is set")
        if self._profiler is None:
            return super().run(output_names, input_feed, timings)
        import time
        mine = [] if timings is None else timings
        t0 = time.perf_counter()
        out = super().run(output_names, input_feed, mine)
        self._profiler.record(mine, t0, time.perf_counter())
        return out

    def get_modelmeta(self):
        return oc.ModelMetadata(self.graph)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {p: {} for p in self._providers}

    def get_session_options(self):
        return self._sess_options

    def get_overridable_initializers(self) -> list:
        return []

    def set_providers(self, providers=None, provider_options=None) -> None:
        self._providers = oc.session_providers(providers, provider_options)

    def io_binding(self):
        return oc.IOBinding(self)

    def run_with_iobinding(self, binding, run_options=None) -> None:
        """Run on the binding's inputs; bound outputs (OrtValues, callers' buffers) are
        written in place, the rest kept as new OrtValues (binding.get_outputs())."""
        names = list(binding._outputs) or [v.name for v in self.graph.outputs]
        values = self.run(names, binding._inputs, run_options)
        binding._results = oc.bound_results(binding._outputs, names, values)

    def run_with_ort_values(self, output_names, input_dict_ort_values: dict,
                            run_options=None) -> list:
        """onnxruntime's run over OrtValues: {name: OrtValue} in, a list of OrtValues out
        (None or [] = every output, as onnxruntime)."""
        values = self.run(output_names or None, oc.ortvalue_feed(input_dict_ort_values),
                          run_options)
        return [oc.OrtValue(v) for v in values]

    def end_profiling(self) -> str:
        """Write the Chrome-trace JSON of the runs so far; -> its file name ("" if off)."""
        if self._profiler is None:
            return ""
        path = self._profiler.write()
        self._profiler = oc.Profiler(self._sess_options.profile_file_prefix)
        return path


def save(graph: Graph, path: str, key=None, encrypt: bool = False,
         entropy: bool | None = None) -> None:
    """Write `graph` as .enn; with `key` (or encrypt=True and $EDGENN_MODEL_KEY) sealed:
    encrypted and authenticated (AES-256-GCM, graph/sealed.py). entropy=True stores the
    int8 / int4 weights zstd-coded (graph/entropy.py), False raw, None as the graph was
    loaded (a coded file re-saves coded)."""
    if entropy is not None:
        if entropy:
            graph.meta["entropy_coding"] = "zstd"
        else:
            graph.meta.pop("entropy_coding", None)
    if key is None and not encrypt:
        enn.save(graph, path)
        return
    data = sealed.seal(enn.to_bytes(graph), key)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def convert(source, output_path: str | None = None, optimized: bool = True, key=None,
            encrypt: bool = False, entropy: bool | None = None) -> Graph:
    """ONNX (path, bytes or ModelProto) -> optimized Graph, written to `output_path` if
    given (sealed with `key`, entropy-coded with entropy=True: as save)."""
    graph = load(source, optimized=optimized)
    if output_path:
        save(graph, output_path, key=key, encrypt=encrypt, entropy=entropy)
    return graph


def quantize(model, calibration_data, method: str = "minmax", weight_bits: int = 7,
             per_channel: bool = True, fidelity: float | None = None, exclude=(),
             progress=None, **options) -> Graph:
    """Post-training int8 quantization of an fp32 model -> Graph (see quant/quantize.py)."""
    from .quant.quantize import quantize as run
    return run(model, calibration_data, method=method, weight_bits=weight_bits,
               per_channel=per_channel, fidelity=fidelity, exclude=exclude,
               progress=progress, **options)


def load_family(path: str):
    """A scalable model family (.ennf, `edgenn scale`): `.members`, `.select(latency_ms=...)`
    (sessions of this module's InferenceSession, onnxruntime's API)."""
    from .scale.family import load_family as _load
    return _load(path, InferenceSession)


def scalable(model, latency=None, calib=None, eval=None, **options):
    """One line: search `model`'s family over `latency` = (lo, hi) ms on this host and
    load it (scale/__init__.py: output=, budget=, minutes=, members=, threads=, metric=)."""
    from .scale import scalable as _scalable
    return _scalable(model, latency, calib, eval, session_class=InferenceSession, **options)
