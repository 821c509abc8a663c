"""The optimized graphs of model files converted before, kept as .enn: loading the same
.onnx / .tflite again skips reading, converting and optimizing it.

An entry's key is the file (absolute path, size, modification time), edgenn's version
and the converters' and passes' own files (names, sizes, times), so an edited model or an
edited pipeline is converted afresh. A graph is kept the second time its file is
converted (the first leaves a marker): writing it costs about what converting does, which
a process that loads a model once should not pay. Entries live under
$EDGENN_CACHE_DIR/graphs (default ~/.cache/edgenn/graphs), the MAX_ENTRIES most recently
used are kept, and a model past MAX_BYTES is not kept. EDGENN_GRAPH_CACHE=0 turns it
off. An entry that does not load (a damaged file) is converted afresh and replaced; the
cache never fails a load.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import os

from .. import cachedir
from ..errors import EdgennError
from ..graph import format as enn
from ..graph.ir import Graph

MAX_ENTRIES = 32
MAX_BYTES = 1 << 30


def enabled() -> bool:
    return os.environ.get("EDGENN_GRAPH_CACHE", "1") not in ("0", "", "off")


def _dir() -> str:
    return os.path.join(cachedir.base(), "graphs")


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """edgenn's version and the import pipeline's files: what a converted graph depends on."""
    from ..version import __version__
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha1(__version__.encode())
    for sub in ("converters", "graph"):
        for path in sorted(glob.glob(os.path.join(here, sub, "**", "*.py"), recursive=True)):
            st = os.stat(path)
            h.update(f"{os.path.relpath(path, here)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _entry(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_size > MAX_BYTES:
        return None
    key = f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}|{_code_digest()}"
    return os.path.join(_dir(), hashlib.sha1(key.encode()).hexdigest() + ".enn")


def lookup(path: str) -> Graph | None:
    """The graph converted from `path` before, or None."""
    if not enabled():
        return None
    entry = _entry(path)
    if entry is None or not os.path.exists(entry):
        return None
    try:
        graph = enn.load(entry)
    except EdgennError:
        return None               # damaged: converted afresh and stored again
    try:
        os.utime(entry)           # most recently used
    except OSError:
        pass
    return graph


def store(path: str, graph: Graph) -> None:
    """Keep the optimized graph of `path` if it was converted before, else mark it as
    converted once (best effort: a read-only disk keeps nothing)."""
    if not enabled():
        return
    entry = _entry(path)
    if entry is None:
        return
    marker = entry[:-len(".enn")] + ".seen"
    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        if not os.path.exists(marker):
            open(marker, "wb").close()
            _prune()
            return
        enn.save(graph, entry)
        os.remove(marker)
        _prune()
    except Exception:  # noqa: BLE001 - a graph the cache cannot keep is simply not kept
        pass


def _prune() -> None:
    for kind in ("*.enn", "*.seen"):
        entries = sorted(glob.glob(os.path.join(_dir(), kind)), key=os.path.getmtime)
        for old in entries[:-MAX_ENTRIES]:
            try:
                os.remove(old)
            except OSError:
                pass
