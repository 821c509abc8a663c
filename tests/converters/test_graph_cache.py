"""Converted graphs kept (converters/graph_cache.py): a file converted twice is kept, and
loading it again skips the conversion and gives the same graph and results; an edited
file, a damaged entry or EDGENN_GRAPH_CACHE=0 converts afresh."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import edgenn
from edgenn.converters import graph_cache, source
from edgenn.demo import DEMO_MODEL, DEMO_SAMPLES


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGENN_GRAPH_CACHE", "1")
    model = tmp_path / "digits.onnx"
    shutil.copy(DEMO_MODEL, model)
    return model


def _convert_refused(monkeypatch):
    def refuse(src):
        raise AssertionError(f"converted again: {src}")
    monkeypatch.setattr(source, "_import_onnx", refuse)


def _run(graph_or_path):
    images = np.load(DEMO_SAMPLES)["images"][:16]
    return edgenn.InferenceSession(graph_or_path, tune="off").run(None, {"image": images})[0]


def _converted_twice(path):
    graph = source.load(str(path))
    assert graph_cache.lookup(str(path)) is None           # once: only marked
    source.load(str(path))
    return graph


def test_third_load_is_the_cached_graph(cache, monkeypatch):
    first = _converted_twice(cache)
    want = _run(first)
    entries = os.listdir(os.path.join(os.environ["EDGENN_CACHE_DIR"], "graphs"))
    assert [e[-4:] for e in entries] == [".enn"]
    _convert_refused(monkeypatch)
    again = source.load(str(cache))
    assert [(n.op, n.inputs, n.outputs) for n in again.nodes] == \
        [(n.op, n.inputs, n.outputs) for n in first.nodes]
    np.testing.assert_array_equal(_run(again), want)
    np.testing.assert_array_equal(_run(str(cache)), want)     # the session's load too


def test_an_edited_model_is_converted_afresh(cache, monkeypatch):
    _converted_twice(cache)
    data = cache.read_bytes()
    cache.write_bytes(data)                      # same bytes, new modification time
    os.utime(cache, ns=(1, 1))
    calls = []
    real = source._import_onnx
    monkeypatch.setattr(source, "_import_onnx", lambda s: calls.append(s) or real(s))
    source.load(str(cache))
    assert calls == [str(cache)]


def test_a_damaged_entry_is_converted_afresh_and_replaced(cache):
    want = _run(_converted_twice(cache))
    (entry,) = [os.path.join(graph_cache._dir(), f) for f in os.listdir(graph_cache._dir())]
    with open(entry, "r+b") as f:
        f.seek(os.path.getsize(entry) // 2)
        f.write(b"\xff" * 64)
    np.testing.assert_array_equal(_run(source.load(str(cache))), want)
    source.load(str(cache))                                  # converted twice again
    assert graph_cache.lookup(str(cache)) is not None       # stored again, whole


def test_off_keeps_nothing(cache, monkeypatch):
    monkeypatch.setenv("EDGENN_GRAPH_CACHE", "0")
    source.load(str(cache))
    assert not os.path.exists(graph_cache._dir())


def test_the_most_recently_used_are_kept(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(graph_cache, "MAX_ENTRIES", 2)
    paths = []
    for i in range(3):
        p = tmp_path / f"m{i}.onnx"
        shutil.copy(DEMO_MODEL, p)
        paths.append(p)
        _converted_twice(p)
        os.utime(graph_cache._entry(str(p)), ns=(i + 10, (i + 10) * 10 ** 9))
    source.load(str(paths[2]))
    assert len(os.listdir(graph_cache._dir())) == 2
    assert graph_cache.lookup(str(paths[0])) is None
    assert graph_cache.lookup(str(paths[2])) is not None
