"""onnxruntime's Python API over edgenn, so `import edgenn as ort` runs onnxruntime code.

What maps, and how (docs/ortcompat.md lists what has no meaning in edgenn):
- SessionOptions: intra_op_num_threads -> threads (0 = one per core, as onnxruntime);
  graph_optimization_level ORT_DISABLE_ALL -> the graph as written (no passes), any other
  level -> edgenn's optimizer; add_free_dimension_override_by_name -> input_shapes;
  enable_profiling / profile_file_prefix -> a Chrome-trace JSON (end_profiling);
  optimized_model_filepath -> the optimized model saved as .enn; the rest is accepted and
  kept (get_session_config_entry returns what was set) but changes nothing.
- providers: "CPUExecutionProvider" (edgenn's tuned CPU kernels); any other provider is
  not available here: onnxruntime's behaviour for an unavailable one is kept (a warning,
  then the CPU).
- InferenceSession.run / run_with_iobinding / io_binding; OrtValue over numpy arrays;
  RunOptions (terminate=True refuses the run); get_modelmeta, get_providers, ...
"""
from __future__ import annotations

import enum
import json
import os
import threading
import time
import warnings

import numpy as np

from .errors import InputError
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


class IOBinding:
    """onnxruntime's IOBinding: inputs bound once, outputs written into bound OrtValues
    (the caller's arrays, in place) or returned as new OrtValues."""

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
        raise InputError("bind_input with a raw pointer is not supported by edgenn: use "
                         "bind_cpu_input(name, array) or bind_ortvalue_input")

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type=None, shape=None, buffer_ptr=None) -> None:
        _cpu_only(device_type)
        if buffer_ptr is not None:
            raise InputError("bind_output with a raw pointer is not supported by edgenn: "
                             "use bind_ortvalue_output(name, OrtValue)")
        self._outputs[name] = None

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
    """SessionOptions.optimized_model_filepath: the optimized model, as .enn (edgenn writes
    no ONNX yet: a path not ending in .enn gets .enn appended, with a warning)."""
    from .api import save
    if not path.endswith(".enn"):
        warnings.warn(f"optimized_model_filepath {path!r}: edgenn saves its optimized "
                      f"model as .enn, written to {path + '.enn'!r}", stacklevel=3)
        path += ".enn"
    save(graph, path)
