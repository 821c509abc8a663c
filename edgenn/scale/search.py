"""The black-box search over the scaling factors (factors.py) for the latency / fidelity
Pareto front of one model on this host.

optuna's multi-objective TPE sampler (seeded, so the same inputs give the same sequence of
candidates) proposes factor levels; each candidate is built (factors.apply) and measured
(measure.py: its tuned plan's latency here, fidelity on the held-out data, size). Anchors
go first: the source model, int8 alone, and the fastest corner, so the front has its ends.
A candidate proposed twice is told its first figures. The budget is a number of distinct
candidates and/or minutes.

Every measurement is cached on disk (EDGENN_CACHE_DIR, under "scale/"), keyed by the
source model's bytes, the data, this CPU and tier, the threads and edgenn's version: a
second run over the same inputs measures nothing. The members' .enn files are kept there
too, so a second run builds nothing either.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..graph import format as enn
from ..graph.ir import Graph
from ..quant.data import Batches
from .factors import Factors, applicable, apply
from .measure import VERSION, Measurement, Reference, measure


@dataclass
class Candidate:
    factors: Factors
    m: Measurement
    cached: bool = False
    on_front: bool = False
    member: bool = False


@dataclass
class SearchResult:
    candidates: list[Candidate]
    members: list[Candidate]
    levels: dict
    measured: int
    cached: int
    seconds: float
    budget: str
    latency_range: tuple | None = None
    store: dict = field(default_factory=dict)     # factors key -> .enn bytes (front only)
    cache: Cache | None = None

    @property
    def front(self) -> list[Candidate]:
        return [c for c in self.candidates if c.on_front]

    def table(self) -> str:
        rows = [(f"{'':2}{'factors':34} {'latency ms':>10} {'fidelity':>9} {'cosine':>8} "
                 f"{'size MB':>8}")]
        for c in sorted(self.candidates, key=lambda c: c.m.latency_ms):
            mark = "M" if c.member else "*" if c.on_front else " "
            rows.append(f"{mark:2}{c.factors.describe()[:34]:34} {c.m.latency_ms:10.3f} "
                        f"{c.m.fidelity:9.4f} {c.m.cosine:8.5f} {c.m.bytes / 1e6:8.3f}")
        rows.append(f"{len(self.candidates)} candidates ({self.measured} measured, "
                    f"{self.cached} from the cache) in {self.seconds:.1f} s; budget "
                    f"{self.budget}; * on the Pareto front, M a family member")
        return "\n".join(rows)


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """The candidates no other is at least as fast and as faithful as (and better in one)."""
    out = []
    for c in cands:
        dominated = any(o.m.latency_ms <= c.m.latency_ms and o.m.fidelity >= c.m.fidelity
                        and (o.m.latency_ms < c.m.latency_ms or o.m.fidelity > c.m.fidelity)
                        for o in cands)
        if not dominated:
            out.append(c)
    return sorted(out, key=lambda c: c.m.latency_ms)


def spread(front: list[Candidate], count: int, latency: tuple | None) -> list[Candidate]:
    """Up to `count` front points spread evenly in log-latency over `latency` (lo, hi ms;
    the whole front when None), the fastest and the most faithful in range included."""
    pts = front
    if latency is not None:
        lo, hi = latency
        inside = [c for c in front if lo <= c.m.latency_ms <= hi]
        below = [c for c in front if c.m.latency_ms < lo]
        pts = ([below[-1]] if below and (not inside or inside[0].m.latency_ms > lo * 1.1)
               else []) + inside
    if len(pts) <= count:
        return pts
    if count < 2:
        return pts[-1:] if count == 1 else []      # the most faithful in range
    logs = np.log([c.m.latency_ms for c in pts])
    chosen = [0, len(pts) - 1]
    while len(chosen) < count:
        dist = [min(abs(logs[i] - logs[j]) for j in chosen) if i not in chosen else -1.0
                for i in range(len(pts))]
        best = int(np.argmax(dist))
        if dist[best] <= 0:
            break                                  # the rest tie with a chosen point
        chosen.append(best)
    return [pts[i] for i in sorted(chosen)]


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _data_digest(b: Batches) -> str:
    h = hashlib.sha256()
    for feed in b.feeds:
        for k in sorted(feed):
            h.update(k.encode())
            h.update(np.ascontiguousarray(feed[k]).tobytes())
    if b.all_labels is not None:
        h.update(np.ascontiguousarray(b.all_labels).tobytes())
    return h.hexdigest()[:24]


class Cache:
    """Measurements (JSON) and member .enn files of one (model, data, host) key."""

    def __init__(self, root: str | None, key: str):
        self.dir = os.path.join(root, key) if root else None
        self.entries: dict[str, dict] = {}
        if self.dir and os.path.exists(self._index()):
            try:
                with open(self._index()) as f:
                    self.entries = json.load(f)
            except (OSError, ValueError):
                self.entries = {}           # a damaged cache is re-measured, not trusted

    def _index(self) -> str:
        return os.path.join(self.dir, "measured.json")

    def _enn(self, fkey: str) -> str:
        return os.path.join(self.dir, _digest(fkey) + ".enn")

    def put(self, fkey: str, entry: dict) -> None:
        self.entries[fkey] = entry
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)
            enn.write_atomic(self._index(), json.dumps(self.entries, sort_keys=True).encode())

    def graph(self, fkey: str) -> Graph | None:
        if self.dir and os.path.exists(self._enn(fkey)):
            try:
                return enn.load(self._enn(fkey))
            except Exception:               # noqa: BLE001 - damaged: rebuilt instead
                return None
        return None

    def keep_graph(self, fkey: str, data: bytes) -> None:
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)
            enn.write_atomic(self._enn(fkey), data)


def default_cache_root() -> str:
    base = os.environ.get("EDGENN_CACHE_DIR",
                          os.path.join(os.path.expanduser("~"), ".cache", "edgenn"))
    return os.path.join(base, "scale")


def host_key(threads: int) -> str:
    """Where measured latencies may be reused: this CPU and tier, threads, edgenn version
    and kernel build (a rebuilt kernel's latencies are measured again)."""
    from ..runtime.tunecache import build_digest, cpu_signature
    from ..version import __version__
    return f"{cpu_signature()}-t{threads}-v{__version__}-b{build_digest()}"


def search(source: Graph, calib: Batches, data: Batches, *, latency: tuple | None = None,
           budget: int = 24, minutes: float | None = None, members: int = 6,
           threads: int = 1, rounds: int = 20, levels: dict | None = None, seed: int = 0,
           metric: str = "auto", cache_root: str | None = "default",
           progress=None) -> SearchResult:
    """The front of `source` (fp32, optimized) over `levels` (default: factors.applicable)
    and the members chosen from it (spread, up to `members`, over `latency` when given)."""
    from ..extras import require
    require("optuna", "the family search (edgenn scale)")
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    levels = levels or applicable(source)
    root = default_cache_root() if cache_root == "default" else cache_root
    cache = Cache(root, _digest(enn.to_bytes(source), _data_digest(calib),
                                _data_digest(data), host_key(threads), rounds, metric, VERSION))
    ref = Reference(source, data, threads)
    study = optuna.create_study(directions=["minimize", "maximize"],
                                sampler=optuna.samplers.TPESampler(seed=seed))
    for anchor in _anchors(levels):
        study.enqueue_trial(anchor)
    say = progress or (lambda stage, done, total: None)
    seen: dict[str, Candidate] = {}
    store: dict[str, bytes] = {}
    measured = cached = 0
    start = time.perf_counter()
    space = int(np.prod([len(v) for v in levels.values()]))
    for _ in range(budget * 4):            # proposals (repeats are told, not re-measured)
        if len(seen) >= min(budget, space) or (
                minutes is not None and time.perf_counter() - start > minutes * 60):
            break
        trial = study.ask()
        f = _normal(Factors(**{k: trial.suggest_categorical(k, list(v))
                               for k, v in levels.items()}))
        key = f.key()
        if key not in seen:
            entry = cache.entries.get(key)
            if entry is None:
                say("scale: measuring candidates", len(seen), min(budget, space))
                graph = apply(source, f, calib, threads)
                data_ = enn.to_bytes(graph)
                m = measure(graph, f.resolution, ref, threads, rounds, metric, len(data_))
                cache.put(key, {"measurement": m.to_json()})
                store[key] = data_
                measured += 1
            else:
                m = Measurement(**entry["measurement"])
                cached += 1
            seen[key] = Candidate(f, m, cached=entry is not None)
            _keep_front(seen, store)
        study.tell(trial, [seen[key].m.latency_ms, seen[key].m.fidelity])
    say("scale: measuring candidates", len(seen), len(seen))
    cands = list(seen.values())
    chosen = spread(pareto(cands), members, latency)
    for c in chosen:
        c.member = True
    budget_text = f"{budget} candidates" + (f" or {minutes:g} min" if minutes else "")
    return SearchResult(cands, chosen, levels, measured, cached, time.perf_counter() - start,
                        budget_text, latency, store, cache)


def _keep_front(seen: dict, store: dict) -> None:
    front = {id(c) for c in pareto(list(seen.values()))}
    for key, c in seen.items():
        c.on_front = id(c) in front
        if not c.on_front:
            store.pop(key, None)             # only front candidates may become members


def _normal(f: Factors) -> Factors:
    """One spelling per distinct member: width_late equal to width is the global ratio."""
    if f.width_late is not None and f.width_late == f.width:
        return Factors(f.resolution, f.width, None, f.sparsity, f.precision)
    return f


def _anchors(levels: dict) -> list[dict]:
    first = {k: v[0] for k, v in levels.items()}
    out = [first]
    if "int8" in levels["precision"]:
        out.append({**first, "precision": "int8"})
    fastest = {"resolution": min(levels["resolution"]), "width": max(levels["width"]),
               "width_late": levels["width_late"][0], "sparsity": levels["sparsity"][0],
               "precision": "int8" if "int8" in levels["precision"] else "fp32"}
    if fastest not in out:
        out.append(fastest)
    return out
