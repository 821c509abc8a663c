"""End-to-end model tests over the zoo (tests/support/models.py).

For every model: edgenn's outputs match onnxruntime's (rel_err <= 1e-4 on each output,
same shapes and dtypes), and a model converted to .enn runs bit-identically to the model
loaded from ONNX. Models with symbolic input dims are also run without `input_shapes`, on
two different shapes in turn (models.ALT_FEEDS). `test_import` checks only the ONNX
importer (no kernels run), so the list of ops a model still lacks is one quick command away:

    pytest tests/api/test_models.py -k import
    pytest tests/api/test_models.py                # everything (CI)
    pytest tests/api/test_models.py -m "not slow"  # skip ResNet-50, MiniLM-L6, PP-OCR det

Exported models are cached (see conftest.model_cache_dir); the first run exports them.
"""
from __future__ import annotations

import numpy as np
import pytest

from support.models import (ALT_FEEDS, KEY_OPS, SLOW, ZOO, op_types, ort_outputs,
                            rel_err)

TOL = 1e-4
NAMES = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in ZOO]


def _case(zoo, name):
    return zoo(name)  # a model that cannot be built fails the test: no silent skips


def _session_class():
    from edgenn import InferenceSession
    return InferenceSession


def _run(source, case) -> list[np.ndarray]:
    sess = _session_class()(str(source), threads=1, input_shapes=case.input_shapes)
    before = {k: np.array(v, copy=True) for k, v in case.feeds.items()}
    # copies: a session may hand out its own preallocated output buffers
    outs = [np.array(o, copy=True) for o in sess.run(None, case.feeds)]
    for k, v in before.items():   # the feeds are read in place: never written
        np.testing.assert_array_equal(case.feeds[k], v, err_msg=f"input {k} was written")
    return outs


_edgenn_onnx_outputs: dict[str, list[np.ndarray]] = {}   # per model, reused by round trip


def _onnx_outputs(case) -> list[np.ndarray]:
    if case.name not in _edgenn_onnx_outputs:
        _edgenn_onnx_outputs[case.name] = _run(case.path, case)
    return _edgenn_onnx_outputs[case.name]


@pytest.mark.parametrize("name", sorted(KEY_OPS))
def test_zoo_key_ops(name, zoo):
    """The exported file still has the ops the model is in the zoo for."""
    ops = op_types(_case(zoo, name).path)
    want = {op for op in KEY_OPS[name] if not op.startswith("-")}
    banned = {op[1:] for op in KEY_OPS[name] if op.startswith("-")}
    assert not want - set(ops), f"{name}: missing {sorted(want - set(ops))}; has {ops}"
    assert not banned & set(ops), f"{name}: unexpected {sorted(banned & set(ops))}"


@pytest.mark.parametrize("name", NAMES)
def test_import(name, zoo):
    """The ONNX importer accepts every node of the model (lists all missing ops at once)."""
    from edgenn.converters.onnx.importer import import_onnx
    case = _case(zoo, name)
    graph = import_onnx(str(case.path))
    assert graph.nodes


@pytest.mark.parametrize("name", NAMES)
def test_matches_onnxruntime(name, zoo):
    case = _case(zoo, name)
    expected = case.expected
    got = _onnx_outputs(case)
    assert len(got) == len(expected), f"{name}: {len(got)} outputs, onnxruntime {len(expected)}"
    errors = []
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"{name} output {i}: shape {g.shape}, onnxruntime {e.shape}"
        assert g.dtype == e.dtype, f"{name} output {i}: dtype {g.dtype}, onnxruntime {e.dtype}"
        errors.append(rel_err(g, e))   # inf unless non-finite values match onnxruntime's
    assert max(errors) <= TOL, f"{name}: rel_err per output {['%.2e' % x for x in errors]}"


@pytest.mark.parametrize("name", NAMES)
def test_enn_round_trip(name, zoo, tmp_path):
    """convert(.onnx -> .enn), then the .enn session gives bit-identical outputs."""
    import edgenn
    case = _case(zoo, name)
    _session_class()
    enn = tmp_path / f"{name}.enn"
    edgenn.convert(str(case.path), str(enn))
    assert enn.stat().st_size > 0
    from_onnx = _onnx_outputs(case)
    from_enn = _run(enn, case)
    assert len(from_enn) == len(from_onnx)
    for i, (a, b) in enumerate(zip(from_enn, from_onnx)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{name} output {i}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (
            f"{name} output {i}: .enn differs from .onnx, max |diff| "
            f"{np.max(np.abs(a.astype(np.float64) - b)):.3e}")


@pytest.mark.parametrize("name", sorted(ALT_FEEDS))
def test_dynamic_input_shapes(name, zoo):
    """No input_shapes given: dims bind at the first run, a new shape rebinds, and going
    back to the first shape still gives the right answer."""
    case = _case(zoo, name)
    sess = _session_class()(str(case.path), threads=1)
    alt = ALT_FEEDS[name]()
    for i, feeds in enumerate((case.feeds, alt, case.feeds)):
        expected = case.expected if feeds is case.feeds else ort_outputs(case.path, feeds)
        got = sess.run(None, feeds)
        errors = [rel_err(g, e) for g, e in zip(got, expected)]
        shapes = {k: v.shape for k, v in feeds.items()}
        assert len(got) == len(expected) and max(errors) <= TOL, (
            f"{name} run {i} with {shapes}: rel_err per output {['%.2e' % x for x in errors]}")


def test_rel_err_never_passes_a_non_finite_mismatch():
    """The comparison the zoo tests rest on: NaN / inf must match the reference's."""
    b = np.array([1.0, np.nan, np.inf, -2.0])
    assert rel_err(b.copy(), b) == 0.0
    assert rel_err(np.array([1.0, 0.0, np.inf, -2.0]), b) == np.inf     # lost a NaN
    assert rel_err(np.array([1.0, np.nan, -np.inf, -2.0]), b) == np.inf  # other infinity
    assert rel_err(np.array([np.nan, np.nan, np.inf, -2.0]), b) == np.inf  # new NaN
    assert rel_err(np.array([1.5, np.nan, np.inf, -2.0]), b) == 0.25
