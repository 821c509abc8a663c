"""Scalable model families (issue #12): from one model, a latency / fidelity Pareto front
of members built with edgenn's own compression (factors.py), searched on this host
(search.py), saved as one .ennf file (build.py, graph/family.py), and the member that fits
chosen per device (family.py, probe.py)."""
from __future__ import annotations


def scalable(model, latency=None, calib=None, eval=None, *, output: str | None = None,
             budget: int = 24, minutes: float | None = None, members: int = 6,
             threads: int = 1, session_class=None, **options):
    """One line: the family of `model` covering `latency` = (lo, hi) ms on this host,
    calibrated on `calib`, judged on `eval` (held-out; labels give accuracy), written to
    `output` (default: next to the model, .ennf) and loaded. -> Family (its `.report` the
    search result)."""
    import os
    import tempfile

    from .build import build
    from .family import load_family
    if calib is None:
        raise ValueError("scalable() needs calibration data (calib=...)")
    if output is None:
        output = (os.path.splitext(model)[0] if isinstance(model, str)
                  else os.path.join(tempfile.mkdtemp(), "family")) + ".ennf"
    result, _ = build(model, calib, eval, output=output, latency=latency, budget=budget,
                      minutes=minutes, members=members, threads=threads, **options)
    family = load_family(output, session_class)
    family.report = result
    family.path = output
    return family
