"""Run ONNX backend node test cases (onnx.backend.test.case.node) through edgenn.

`cases_for(ops)` yields the collected cases whose node op type is in `ops`;
`run_case(case)` runs each of its data sets and returns a list of failure strings.
A case edgenn refuses cleanly (UnsupportedOpError at load) is reported as refused, never
as passed; a wrong answer is a failure.
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx.backend.test.case.node import collect_testcases

from edgenn.errors import UnsupportedOpError


@functools.lru_cache(maxsize=1)
def all_cases():
    return [c for c in collect_testcases() if c.model is not None]


def case_ops(case) -> set[str]:
    return {n.op_type for n in case.model.graph.node}


def cases_for(ops) -> list:
    ops = set(ops)
    return [c for c in all_cases() if case_ops(c) and case_ops(c) <= ops]


def _session(model_bytes):
    try:
        from edgenn.runtime.session import InferenceSession
    except ImportError:  # runtime not written yet: plain reference interpreter
        return None
    return InferenceSession(model_bytes)


def run_case(case, rtol=1e-4, atol=1e-5) -> tuple[str, list[str]]:
    """-> ("passed" | "refused" | "failed", failures)."""
    from edgenn.converters.onnx.importer import import_onnx
    from edgenn.graph.infer import execute
    model_bytes = case.model.SerializeToString()
    failures = []
    try:
        sess = _session(model_bytes)
        graph = import_onnx(case.model) if sess is None else None
    except UnsupportedOpError as exc:
        return "refused", [str(exc)]
    for inputs, expected in case.data_sets:
        names = [i.name for i in case.model.graph.input][:len(inputs)]
        feeds = dict(zip(names, inputs))
        try:
            if sess is None:
                got = list(execute(graph, feeds).values())
            else:
                got = sess.run(None, feeds)
        except UnsupportedOpError as exc:
            return "refused", [str(exc)]
        except Exception as exc:  # noqa: BLE001 - report, the test asserts
            failures.append(f"{type(exc).__name__}: {exc}")
            continue
        for i, (g, e) in enumerate(zip(got, expected)):
            e = np.asarray(e)
            if g.shape != e.shape:
                failures.append(f"output {i}: shape {g.shape} != {e.shape}")
            elif e.dtype.kind in "fc":
                if g.dtype != e.dtype:
                    failures.append(f"output {i}: dtype {g.dtype} != {e.dtype}")
                elif not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
                    err = np.max(np.abs(g.astype(np.float64) - e))
                    failures.append(f"output {i}: max abs err {err:g}")
            elif g.dtype != e.dtype or not np.array_equal(g, e):
                failures.append(f"output {i}: values/dtype differ ({g.dtype} vs {e.dtype})")
    return ("failed" if failures else "passed"), failures
