"""On-disk cache of autotuning results, one JSON file per CPU + edgenn version + kernel
build + threads.

Key of one entry: op, the attributes that change the work, input shapes/dtypes and which
inputs are constant. The file name carries what must never mix: CPU name and features
(edgenn's own probe, kernels/isa.py), edgenn version, the compiled kernels' build
(build_digest), thread count. A second load of the
same model does no timing.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import threading
import weakref
from contextlib import contextmanager

import numpy as np

from .. import cachedir

_lock = threading.Lock()
_loaded: dict[str, dict] = {}


def cache_dir() -> str:
    return os.path.join(cachedir.base(), "tune")


@functools.lru_cache(maxsize=1)
def cpu_signature() -> str:
    from ..kernels import isa
    model = isa.cpu_model()
    name = "".join(c if c.isalnum() else "_" for c in model.split(" (")[0]).strip("_")[:40]
    digest = hashlib.sha1(f"{model}|{','.join(sorted(isa.features()))}".encode())
    # the tier in force is part of the key: a run under EDGENN_MAX_ISA=avx2 times (and
    # caches) other kernels than an uncapped one on the same CPU
    return f"{name}-{digest.hexdigest()[:10]}-{isa.active_tier()}"


def files_digest(paths) -> str:
    """A short digest of files' names, sizes and modification times (missing ones skipped)."""
    h = hashlib.sha1()
    for p in sorted(paths):
        try:
            st = os.stat(p)
        except OSError:
            continue
        h.update(f"{os.path.basename(p)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:8]


@functools.lru_cache(maxsize=1)
def build_digest() -> str:
    """The compiled kernels' identity: a rebuilt extension module (a new kernel body under
    an unchanged version number, as every source build between releases is) is timed
    afresh instead of inheriting choices measured on the old build."""
    from .. import kernels
    here = os.path.dirname(kernels.__file__)   # the extensions: kernels/<family>/*.so
    return files_digest(glob.glob(os.path.join(here, "*", "*.so")) +
                        glob.glob(os.path.join(here, "*", "*.pyd")))


def _path(threads: int) -> str:
    from ..version import __version__
    return os.path.join(cache_dir(), f"{cpu_signature()}-v{__version__}-b{build_digest()}"
                                     f"-t{threads}.json")


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):     # a fused step's attributes per half
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


# id(weight array) -> its _zeros, while the array lives: a weight is keyed once per
# candidate and per fused pair, and counting its zeros reads all of it
_ZEROS: dict[int, float] = {}


def _zeros(value) -> float | None:
    """Zero fraction of a constant weight in 5% steps (None for small or absent ones): the
    sparse kernels' speed depends on it, so pruned layers of one shape are timed apart."""
    if value is None or np.size(value) < 64:
        return None
    known = _ZEROS.get(id(value))
    if known is None:
        known = round(20 * (1 - np.count_nonzero(value) / np.size(value))) / 20
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            _ZEROS[id(value)] = known      # read-only (a loaded model's): cannot change
            weakref.finalize(value, _ZEROS.pop, id(value), None)
    return known


def node_key(node, ins) -> str:
    """What decides which algorithm wins: op, attributes, shapes, dtypes, constness, and
    how sparse the constant weights are."""
    sig = {"op": node.op, "attrs": {k: _plain(v) for k, v in sorted(node.attrs.items())},
           "ins": [None if i is None else [i.dtype, list(i.shape), i.value is not None,
                                           _zeros(i.value)]
                   for i in ins]}
    return hashlib.sha1(json.dumps(sig, sort_keys=True).encode()).hexdigest()


def names_key(names) -> str:
    """A short digest of a set of kernel names."""
    return hashlib.sha1(",".join(sorted(names)).encode()).hexdigest()[:8]


def graph_key(graph, shapes: dict) -> str:
    """A whole plan's identity: every node (op, attributes, wiring) and the input shapes."""
    h = hashlib.sha1(json.dumps({k: list(v) for k, v in sorted(shapes.items())}).encode())
    for n in graph.nodes:
        h.update(json.dumps([n.op, n.inputs, n.outputs,
                             {k: _plain(v) for k, v in sorted(n.attrs.items())}],
                            default=str).encode())
    return h.hexdigest()


def load(threads: int) -> dict:
    path = _path(threads)
    with _lock:
        if path not in _loaded:
            _loaded[path] = _read(path)
        return _loaded[path]


def save(threads: int) -> None:
    """Write this process's entries, merged with what other processes wrote meanwhile
    (under a file lock), through a temporary file renamed over the cache: a reader or a
    crash never sees a half-written file, and concurrent writers lose no entry."""
    path = _path(threads)
    with _lock:
        data = _loaded.get(path)
        if data is None:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with _file_lock(path + ".lock"):
                for key, value in _read(path).items():
                    data.setdefault(key, value)       # ours win, theirs are kept
                tmp = f"{path}.tmp{os.getpid()}-{threading.get_ident()}"
                with open(tmp, "w") as f:   # a copy: planners may add entries meanwhile
                    json.dump(dict(data), f, indent=0, sort_keys=True)
                os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: tuning still works, it just is not remembered


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or corrupt cache: retune


@contextmanager
def _file_lock(path: str):
    """An exclusive advisory lock between processes (none where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def export_bundle() -> dict:
    """This CPU's cached choices (every thread count) as one JSON-able bundle, for an app
    to ship and `import_bundle` on machines of the same CPU and edgenn build."""
    from ..version import __version__
    prefix = f"{cpu_signature()}-v{__version__}-b{build_digest()}-t"
    entries = {}
    for path in glob.glob(os.path.join(cache_dir(), prefix + "*.json")):
        threads = path[len(os.path.join(cache_dir(), prefix)):-len(".json")]
        if threads.isdigit():
            entries[threads] = {**_read(path), **_loaded.get(path, {})}
    return {"cpu": cpu_signature(), "version": __version__, "build": build_digest(),
            "entries": entries}


def import_bundle(bundle: dict) -> int:
    """Merge an exported bundle into this machine's cache (entries already here win);
    -> the entries added. ValueError when it was made on another CPU or build (its
    timings would not hold here, and its kernel names may not exist)."""
    from ..version import __version__
    mine = {"cpu": cpu_signature(), "version": __version__, "build": build_digest()}
    theirs = {k: bundle.get(k) for k in mine}
    if theirs != mine:
        raise ValueError(f"the tuning bundle is for {theirs}, this machine is {mine}")
    added = 0
    for threads, entries in bundle.get("entries", {}).items():
        data = load(int(threads))
        with _lock:
            for key, value in entries.items():
                if key not in data:
                    data[key] = value
                    added += 1
        save(int(threads))
    return added

