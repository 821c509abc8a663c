"""Batch scoring with Dask (pip install 'edgenn[dask]'): a model scores a dask array, or
a list of files, on every worker of a cluster, each worker holding one session.

    from dask.distributed import Client
    from edgenn.batch.dask import score_array, score_files
    client = Client("scheduler:8786")                  # or Client() for this machine
    probs = score_array(client, "model.enn", images)   # images: dask array, (N, ...) chunked
    probs.compute()                                     # along the batch axis
    rows = score_files(client, "model.enn", paths, load=read_image).compute()

The model's bytes are shipped to each worker once (scattered, broadcast); a worker makes
one InferenceSession per model and thread count and keeps it for every later block (a
session is safe to share between the worker's threads, runtime/context.py), so a task
pays only for its own inference. Blocks are cut into `batch` rows per run.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

_SESSIONS: dict = {}          # on each worker: (model digest, threads) -> session
_LOCK = threading.Lock()
LOADS = [0]                   # sessions made in this process (tests, reports)


def _session(model_bytes: bytes, threads: int):
    key = (hashlib.sha1(model_bytes).hexdigest(), threads)
    with _LOCK:
        sess = _SESSIONS.get(key)
        if sess is None:
            import edgenn
            sess = _SESSIONS[key] = edgenn.InferenceSession(model_bytes, threads=threads)
            LOADS[0] += 1
    return sess


def _score(block: np.ndarray, model_bytes: bytes, input_name: str, output: int,
           batch: int, threads: int) -> np.ndarray:
    sess = _session(model_bytes, threads)
    name = sess.get_outputs()[output].name
    fixed = sess.get_inputs()[0].shape[0]
    step = fixed if isinstance(fixed, int) and fixed > 0 else batch   # a static batch dim
    parts = [sess.run([name], {input_name: block[i:i + step]})[0]
             for i in range(0, len(block), step)]
    return np.concatenate(parts) if parts else np.zeros((0,), np.float32)


_SHIPPED: dict = {}           # on the client: (client id, model digest) -> scattered future


def _ship(client, data: bytes):
    """The model's bytes on every worker, scattered once per client and kept referenced
    here (a future nobody holds is forgotten by the scheduler before the job runs)."""
    key = (id(client), hashlib.sha1(data).hexdigest())
    if key not in _SHIPPED or _SHIPPED[key].status != "finished":
        _SHIPPED[key] = client.scatter(data, broadcast=True)
    return _SHIPPED[key]


def _read(model) -> bytes:
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    with open(model, "rb") as f:
        return f.read()


def score_array(client, model, x, output: int = 0, batch: int = 64, threads: int = 1):
    """model (path or bytes) over a dask array x (N, ...) chunked along axis 0 only ->
    a dask array of output `output` (N, ...)."""
    import dask.array as da
    if any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk({i: -1 for i in range(1, x.ndim)})
    data = _read(model)
    probe = _session(data, threads)                      # the output's shape and dtype
    inp = probe.get_inputs()[0].name
    sample = np.zeros((1,) + tuple(x.shape[1:]), x.dtype)
    y1 = probe.run([probe.get_outputs()[output].name], {inp: sample})[0]
    shipped = _ship(client, data)                        # the model, once per worker
    return da.map_blocks(_score, x, shipped, inp, output, batch, threads,
                         dtype=y1.dtype, chunks=(x.chunks[0],) + y1.shape[1:],
                         drop_axis=list(range(y1.ndim, x.ndim)) if y1.ndim < x.ndim else None,
                         new_axis=list(range(x.ndim, y1.ndim)) if y1.ndim > x.ndim else None)


def score_files(client, model, paths, load, output: int = 0, batch: int = 64,
                threads: int = 1, partitions: int | None = None):
    """model over files: load(path) -> one input row (without the batch axis); -> a dask
    bag of (path, output row)."""
    import dask.bag as db
    data = _ship(client, _read(model))
    bag = db.from_sequence(list(paths), npartitions=partitions or
                           max(1, len(client.scheduler_info()["workers"]) * 2))

    def part(chunk, model_bytes):
        chunk = list(chunk)
        if not chunk:
            return []
        sess = _session(model_bytes, threads)
        x = np.stack([load(p) for p in chunk])
        y = _score(x, model_bytes, sess.get_inputs()[0].name, output, batch, threads)
        return list(zip(chunk, y))
    return bag.map_partitions(part, data)
