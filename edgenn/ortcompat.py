"""onnxruntime's Python API over edgenn, so `import edgenn as ort` runs onnxruntime code.

What maps, and how (docs/ortcompat.md lists what has no meaning in edgenn):
- SessionOptions: intra_op_num_threads -> threads (0 = one per core, as onnxruntime);
  graph_optimization_level ORT_DISABLE_ALL -> the graph as written (no passes), any other
  level -> edgenn's optimizer; add_free_dimension_override_by_name -> input_shapes;
  enable_profiling / profile_file_prefix -> a Chrome-trace JSON (end_profiling);
  optimized_model_filepath -> the optimized model saved as ONNX at that path (edgenn's
  exporter), or as .enn for a path ending in .enn; the rest is accepted and kept
  (get_session_config_entry returns what was set) but changes nothing.
- providers: "CPUExecutionProvider" (edgenn's tuned CPU kernels); any other provider is
  not available here: onnxruntime's behaviour for an unavailable one is kept (a warning,
  then the CPU).
- InferenceSession.run / run_with_ort_values / run_with_iobinding / io_binding; OrtValue
  over numpy arrays; IOBinding's raw-pointer binds over the caller's memory (numpy views,
  not copies); RunOptions (terminate=True refuses the run); get_modelmeta, ...
"""
from __future__ import annotations

import ctypes
import enum
import json
import os
import threading
import time
import warnings

import numpy as np

from .errors import InputError, UnsupportedOpError
from .graph.ir import Graph

CPU = "CPUExecutionProvider"


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """onnxruntime.SessionOptions (see the module docstring for what each field does)."""

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self._config: dict[str, str] = {}
        self._free_dims: dict[str, int] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InputError(f"session config entry {key!r} is not set")
        return self._config[key]

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self._free_dims[str(name)] = int(value)

    @property
    def threads(self) -> int:
        n = int(self.intra_op_num_threads)
        return n if n > 0 else max(1, os.cpu_count() or 1)


class RunOptions:
    """onnxruntime.RunOptions: terminate=True makes run() refuse (as onnxruntime's)."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        return self._config[key]


class OrtValue:
    """A CPU tensor: a numpy array, shared (never copied) with the one it was made from."""

    def __init__(self, array: np.ndarray):
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(array, device_type: str = "cpu", device_id: int = 0) -> "OrtValue":
        _cpu_only(device_type)
        return OrtValue(np.ascontiguousarray(array))

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type: str = "cpu",
                                     device_id: int = 0) -> "OrtValue":
        _cpu_only(device_type)
        return OrtValue(np.empty(tuple(shape), np.dtype(element_type)))

    def numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def data_type(self) -> str:
        from .runtime.session import _ONNX_TYPE
        name = self._array.dtype.name
        return f"tensor({_ONNX_TYPE.get(name, name)})"

    def element_type(self):
        return self._array.dtype.type

    def device_name(self) -> str:
        return "cpu"

    def is_tensor(self) -> bool:
        return True

    def has_value(self) -> bool:
        return True

    def data_ptr(self) -> int:
        return self._array.ctypes.data

    def update_inplace(self, array) -> None:
        np.copyto(self._array, array)


def _cpu_only(device_type: str) -> None:
    if str(device_type).lower() != "cpu":
        raise InputError(f"device {device_type!r}: edgenn runs on the CPU only")


def element_dtype(element_type) -> np.dtype:
    """onnxruntime's element_type -> a numpy dtype. onnxruntime takes a numpy type or dtype
    (np.float32), its name, or an ONNX TensorProto element type (onnx.TensorProto.FLOAT)."""
    try:
        if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
            from .graph.dtypes import from_onnx
            dtype = np.dtype(from_onnx(int(element_type)))
        else:
            dtype = np.dtype(element_type)
    except (TypeError, UnsupportedOpError):
        dtype = None
    if dtype is None or dtype.hasobject or dtype.kind in "SU" or dtype.itemsize == 0:
        # strings and objects have no fixed-size raw memory to view
        raise InputError(f"element_type {element_type!r}: not a numeric numpy type or ONNX "
                         f"tensor element type")
    return dtype


def buffer_array(element_type, shape, buffer_ptr) -> np.ndarray:
    """The caller's memory at `buffer_ptr` as an array of `element_type` and `shape`, not
    copied (writes land in the caller's buffer): onnxruntime's raw-pointer binds, whose
    caller keeps the buffer alive while it is bound."""
    dtype = element_dtype(element_type)
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise InputError(f"buffer shape {list(dims)}: dims must be >= 0")
    address = int(buffer_ptr)
    if address == 0:
        raise InputError("buffer_ptr is null: pass the address of the buffer's data "
                         "(array.ctypes.data)")
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    raw = np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(address))
    return raw.view(dtype).reshape(dims)


def check_output_buffer(graph: Graph, name: str, array: np.ndarray) -> None:
    """A caller's buffer bound to output `name` must be of its dtype and shape as far as
    the model declares them (dims the model leaves open are checked at each run)."""
    value = next((v for v in graph.outputs if v.name == name), None)
    if value is None:
        raise InputError(f"bind_output: the model has no output {name!r} (outputs: "
                         f"{[v.name for v in graph.outputs]})")
    want = value.shape
    shape_ok = want is None or (len(want) == array.ndim and all(
        not isinstance(w, int) or w < 0 or w == d for w, d in zip(want, array.shape)))
    if (value.dtype and array.dtype.name != value.dtype) or not shape_ok:
        raise InputError(f"bound output {name!r} is {array.dtype.name}{list(array.shape)}, "
                         f"the model gives {value.dtype}{list(want or [])} "
                         f"(str = any size)")


def bound_results(bound: dict, names: list[str], values: list[np.ndarray]) -> list[OrtValue]:
    """A run's outputs as IOBinding.get_outputs() gives them: an output bound to an OrtValue
    or a caller's buffer is written into it in place; the others become new OrtValues.
    Every bound one is checked first, so a mismatch leaves all the caller's buffers as
    they were."""
    for name, value in zip(names, values):
        target = bound.get(name)
        if target is not None and (target.numpy().shape != value.shape or
                                   target.numpy().dtype != value.dtype):
            raise InputError(f"bound output {name!r} is {target.numpy().dtype}"
                             f"{list(target.numpy().shape)}, the model gives "
                             f"{value.dtype}{list(value.shape)}")
    results = []
    for name, value in zip(names, values):
        target = bound.get(name)
        if target is None:
            results.append(OrtValue(value))
        else:
            np.copyto(target.numpy(), value)
            results.append(target)
    return results


def ortvalue_feed(values: dict) -> dict[str, np.ndarray]:
    """run_with_ort_values' {name: OrtValue} -> run's {name: array} (the same memory)."""
    feed = {}
    for name, value in values.items():
        if not isinstance(value, OrtValue):
            raise InputError(f"run_with_ort_values: input {name!r} is a "
                             f"{type(value).__name__}, not an OrtValue (make one with "
                             f"OrtValue.ortvalue_from_numpy)")
        feed[name] = value.numpy()
    return feed


class IOBinding:
    """onnxruntime's IOBinding: inputs bound once (arrays, OrtValues or the caller's memory
    at a pointer), outputs written into bound OrtValues or the caller's memory at a
    pointer (in place) or returned as new OrtValues."""

    def __init__(self, session: "InferenceSession"):
        self._session = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, OrtValue | None] = {}
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, array) -> None:
        self._inputs[name] = np.asarray(array)

    def bind_ortvalue_input(self, name: str, value: OrtValue) -> None:
        self._inputs[name] = value.numpy()

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        """The input read from the caller's memory at `buffer_ptr` (element_type, shape):
        a view, read at each run, as onnxruntime reads it (run checks its dtype / shape)."""
        _cpu_only(device_type)
        self._inputs[name] = buffer_array(element_type, shape, buffer_ptr)

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type=None, shape=None, buffer_ptr=None) -> None:
        """Without buffer_ptr: a new OrtValue at each run. With it: the output written into
        the caller's memory there, which must hold the model's output (element_type and
        shape checked against the model's now, and against the run's at each run)."""
        _cpu_only(device_type)
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        if element_type is None or shape is None:
            raise InputError(f"bind_output({name!r}) with a buffer_ptr needs its "
                             f"element_type and shape")
        array = buffer_array(element_type, shape, buffer_ptr)
        check_output_buffer(self._session.graph, name, array)
        self._outputs[name] = OrtValue(array)

    def bind_ortvalue_output(self, name: str, value: OrtValue) -> None:
        self._outputs[name] = value

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        pass

    def synchronize_outputs(self) -> None:
        pass

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [v.numpy().copy() for v in self._results]


class ModelMetadata:
    def __init__(self, graph: Graph):
        meta = graph.meta
        self.producer_name = meta.get("producer", "")
        self.graph_name = meta.get("graph_name", "")
        self.domain = meta.get("domain", "")
        self.description = meta.get("doc_string", "")
        self.graph_description = meta.get("graph_doc_string", "")
        self.version = int(meta.get("model_version", 0) or 0)
        self.custom_metadata_map = dict(meta.get("metadata_props", {}))


def get_available_providers() -> list[str]:
    return [CPU]


def get_all_providers() -> list[str]:
    return [CPU]


def get_device() -> str:
    return "CPU"


def get_version_string() -> str:
    from .version import __version__
    return __version__


def set_default_logger_severity(level: int) -> None:
    pass   # edgenn writes no log lines


def _provider_names(providers) -> list[str]:
    names = []
    for p in providers or [CPU]:
        names.append(p[0] if isinstance(p, (tuple, list)) else str(p))
    return names


class Profiler:
    """Chrome-trace events of every run (onnxruntime's profile format): one "model_run"
    event per run and one "<node>_kernel_time" event per step, in microseconds."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.t0 = time.perf_counter()
        self.events: list[dict] = []
        self.lock = threading.Lock()

    def record(self, steps_times, start: float, end: float) -> None:
        pid, tid = os.getpid(), threading.get_ident() % (1 << 31)
        us = lambda t: round((t - self.t0) * 1e6, 3)   # noqa: E731
        ev = [{"cat": "Session", "name": "model_run", "ph": "X", "pid": pid, "tid": tid,
               "ts": us(start), "dur": round((end - start) * 1e6, 3), "args": {}}]
        for step, t_begin, t_end in steps_times:
            ev.append({"cat": "Node", "name": f"{step.node.name}_kernel_time", "ph": "X",
                       "pid": pid, "tid": tid, "ts": us(t_begin),
                       "dur": round((t_end - t_begin) * 1e6, 3),
                       "args": {"op_name": step.node.op, "provider": CPU,
                                "kernel": step.choice.kernel}})
        with self.lock:
            self.events.extend(ev)

    def write(self) -> str:
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self.prefix}{stamp}.json"
        with open(path, "w") as f:
            json.dump(self.events, f)
        return path


def session_providers(providers, provider_options=None) -> list[str]:
    """The providers a session runs on: the CPU one. Others asked for are not available
    in edgenn: as onnxruntime does for an unavailable provider, warn and use the CPU."""
    names = _provider_names(providers)
    other = [p for p in names if p != CPU]
    if other:
        warnings.warn(f"edgenn runs on the CPU only: {other} not available, using "
                      f"{CPU} (available: {get_available_providers()})", stacklevel=3)
    return [CPU]


def free_dim_shapes(graph: Graph, free_dims: dict) -> dict | None:
    """SessionOptions.add_free_dimension_override_by_name -> input_shapes (inputs whose
    every dim is then known)."""
    shapes = {}
    for v in graph.inputs:
        dims = [free_dims.get(d, d) if isinstance(d, str) else d for d in v.shape]
        if all(isinstance(d, int) and d >= 0 for d in dims):
            shapes[v.name] = tuple(dims)
    return shapes or None


def save_optimized(graph: Graph, path: str) -> None:
    """SessionOptions.optimized_model_filepath: the optimized model where onnxruntime users
    look for it, an ONNX file at `path` (edgenn's exporter: its fused ops written as
    standard ONNX; int8 ops keep the ai.edgenn domain), or .enn for a path ending in
    .enn. A path ending in .ort asks for onnxruntime's own format, which edgenn does not
    write: .enn is appended, with a warning."""
    from .api import save
    if path.endswith(".ort"):
        warnings.warn(f"optimized_model_filepath {path!r}: edgenn does not write "
                      f"onnxruntime's .ort format; its optimized model is written to "
                      f"{path + '.enn'!r}", stacklevel=3)
        path += ".enn"
    if path.endswith(".enn"):
        save(graph, path)
        return
    from .extras import require
    require("onnx", f"optimized_model_filepath {path!r} (an ONNX file)")
    from .converters.onnx.exporter import export
    export(graph, path)
