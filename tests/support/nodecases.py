"""Run ONNX backend node test cases (onnx.backend.test.case.node) through edgenn.

`supported_cases()` are the collected cases whose ops edgenn claims; `run_case(case)` runs
each data set through `InferenceSession` and returns ("passed" | "refused" | "failed",
details). A case edgenn refuses cleanly (UnsupportedOpError) is "refused", never passed;
a wrong answer or a crash is "failed".

Node cases feed everything as graph inputs, including Reshape's shape or Reduce axes.
edgenn plans by input shapes before it sees data, so those inputs (`const_inputs()`, as
they are in real models) become initializers, one model per data set.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases

from edgenn.errors import UnsupportedOpError
from edgenn.oplist import all_ops, const_inputs, load_all

load_all()
IMPORT_ONLY_OPS = {"Constant", "Scatter", "Upsample"}  # converted into other ops


@functools.lru_cache(maxsize=1)
def all_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.model is not None]


def case_ops(case) -> set[str]:
    return {n.op_type for n in case.model.graph.node}


def supported_cases() -> list:
    ops = set(all_ops()) | IMPORT_ONLY_OPS
    return [c for c in all_cases() if case_ops(c) and case_ops(c) <= ops]


def _array(v):
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def _freeze(model: onnx.ModelProto, inputs: list) -> tuple[bytes, dict]:
    """-> (model bytes with plan-deciding inputs as initializers, remaining feeds)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    values = dict(zip([i.name for i in g.input], inputs))
    table = const_inputs()
    frozen = {n.input[i] for n in g.node for i in table.get(n.op_type, ())
              if i < len(n.input) and n.input[i] in values}
    for name in frozen:
        g.initializer.append(numpy_helper.from_array(values[name], name))
    kept = [i for i in g.input if i.name not in frozen]
    del g.input[:]
    g.input.extend(kept)
    return model.SerializeToString(), {i.name: values[i.name] for i in kept}


def compare(got, expected, rtol, atol) -> list[str]:
    failures = []
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            failures.append(f"output {i}: shape {g.shape} != {e.shape}")
        elif g.dtype != e.dtype:
            failures.append(f"output {i}: dtype {g.dtype} != {e.dtype}")
        elif e.dtype.kind in "fc":
            if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
                err = np.max(np.abs(g.astype(np.float64) - e))
                failures.append(f"output {i}: max abs err {err:g}")
        elif not np.array_equal(g, e):
            failures.append(f"output {i}: values differ")
    return failures


def run_case(case, rtol=1e-4, atol=1e-5) -> tuple[str, list[str]]:
    from edgenn import InferenceSession
    rtol, atol = max(rtol, case.rtol or 0), max(atol, case.atol or 0)
    failures = []
    for inputs, expected in case.data_sets:
        model_bytes, feeds = _freeze(case.model, [_array(v) for v in inputs])
        try:
            got = InferenceSession(model_bytes).run(None, feeds)
        except UnsupportedOpError as exc:
            return "refused", [str(exc)]
        except Exception as exc:  # noqa: BLE001 - any other error is a failure
            failures.append(f"{type(exc).__name__}: {exc}")
            continue
        failures += compare(got, [_array(e) for e in expected], rtol, atol)
    return ("failed" if failures else "passed"), failures
