"""A scalable model family: its members (each with its factors and the figures measured
on the host that built it), the device probe, and the member chosen per device.

    family = edgenn.load_family("model.ennf")
    for m in family.members: print(m.factors.describe(), m.latency_ms, m.fidelity)
    sess = family.select(latency_ms=20)          # or accuracy=0.9 / size=2e6; threads=2

`select` probes this device once per (threads, tier) (probe.py: the members' costliest
layers of each kernel class timed here), predicts each member's latency, and opens the
most faithful member predicted to fit the target.
"""
from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import ModelFormatError
from ..graph import family as ennf
from ..graph.infer import infer
from ..graph.ir import Graph
from ..runtime.profile import latency_ms
from . import probe
from .factors import Factors

ANCHOR_RUNS = 10     # whole runs of each anchor member in a probe round
MAX_DIM = 1 << 20    # a member's timed input: dims and elements a real model has
MAX_ELEMENTS = 1 << 26
MAX_PROBES = 64      # probe nodes per member (probe.py takes <= PER_CLASS per class)
PROBE_ROUNDS = 2
VERIFY_ROUNDS = 3    # blocks timing a pick in `choose` (a contended moment is one block)


@dataclass
class Member:
    index: int
    factors: Factors
    latency_ms: float          # measured on the build host (doc["device"])
    fidelity: float            # the search objective (measure.py)
    cosine: float
    top1: float | None
    accuracy: float | None
    bytes: int                 # its own .enn size (the family file shares tensors)
    input_shapes: dict
    profile: probe.Profile
    probe_ms: dict             # kernel class -> its probe layer's ms on the build host
    family: Family

    @property
    def graph(self) -> Graph:
        return self.family.graph(self.index)

    def session(self, threads: int = 1, **options):
        return self.family.session_class(self.graph, threads=threads, **options)

    def describe(self) -> str:
        return self.factors.describe()


class Family:
    def __init__(self, doc: dict, blobs: dict, source: str = "<family>",
                 session_class=None, file_bytes: int | None = None):
        from ..runtime.session import InferenceSession
        self.doc, self._blobs, self.source = doc, blobs, source
        self.session_class = session_class or InferenceSession
        self.device = doc.get("device", {})
        self.search = doc.get("search", {})
        self.file_bytes = file_bytes
        self._graphs: dict[int, Graph] = {}
        self._probes: dict[tuple, dict] = {}
        self._sessions: dict[tuple, object] = {}
        try:
            if not isinstance(self.device, dict) or not isinstance(self.search, dict):
                raise TypeError("device and search records must be objects")
            self.members = [self._member(i, m) for i, m in enumerate(doc["members"])]
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ModelFormatError(f"{source}: corrupt member description "
                                   f"({type(exc).__name__}: {exc})") from None

    def _member(self, i: int, m: dict) -> Member:
        """A member record of the file, every field checked (ValueError / TypeError)."""
        prof = probe.Profile.from_json(_obj(m["profile"]))
        probe_ms = {str(k): _num(v, positive=True) for k, v in _obj(m["probe_ms"]).items()}
        shapes = {str(k): tuple(int(d) for d in _list(v))
                  for k, v in _obj(m["input_shapes"]).items()}
        nodes = sum(len(_list(v)) for v in prof.probes.values())
        if not prof.probes or nodes > MAX_PROBES or not set(prof.probes) <= set(prof.shares) \
                or not set(prof.probes) <= set(probe_ms) or not 0 < sum(prof.shares.values()) \
                or not all(0 <= v <= 1 for v in prof.shares.values()) \
                or not (_num(prof.latency_ms, True) and _num(prof.steps_ms, True)):
            raise ValueError(f"member {i}: an inconsistent profile")
        top1, acc = m.get("top1"), m.get("accuracy")
        return Member(i, Factors.from_dict(_obj(m["factors"])), _num(m["latency_ms"], True),
                      _num(m["fidelity"]), _num(m["cosine"]),
                      None if top1 is None else _num(top1), None if acc is None else _num(acc),
                      int(m["bytes"]), shapes, prof, probe_ms, self)

    def graph(self, index: int) -> Graph:
        if index not in self._graphs:
            from ..oplist import load_kernels
            load_kernels()                # the quantized ops' rules, as loading a .enn does
            g = ennf.member_graph(self.doc, self._blobs, index, self.source)
            self._check_member(self.members[index], g)
            self._graphs[index] = g
        return self._graphs[index]

    def _check_member(self, m: Member, g: Graph) -> None:
        """The file's description of a member against its graph: input shapes that fit
        the graph's inputs (and a sane size), probe nodes that exist."""
        bad, total = None, 0
        want = {v.name: v.shape for v in g.inputs}
        if set(m.input_shapes) != set(want):
            bad = f"input shapes for {sorted(m.input_shapes)}, inputs {sorted(want)}"
        for name, shape in m.input_shapes.items():
            ok = bad is None and len(shape) == len(want[name]) and all(
                isinstance(d, int) and 0 < d <= MAX_DIM and (not isinstance(w, int) or w == d)
                for d, w in zip(shape, want[name]))
            total += math.prod(shape) if ok else 0
            ok = ok and total <= MAX_ELEMENTS
            if not ok and bad is None:
                bad = f"input {name!r}: shape {list(shape)} for {list(want[name])}"
        nodes = {n.name for n in g.nodes}
        missing = [n for group in m.profile.probes.values() for n in group
                   if probe.step_nodes(n, nodes) is None]
        if missing and bad is None:
            bad = f"probe nodes {missing} are not in its graph"
        if bad:
            raise ModelFormatError(f"{self.source}: member {m.index}: {bad} (corrupt family "
                                   f"file)")

    # -- the device --------------------------------------------------------------------------
    def probe(self, threads: int = 1, again: bool = False) -> dict:
        """This device's probe: {"layers": member index -> {kernel class: ms of its probe
        layer here}, "anchors": member index -> ms of its whole run here (the fastest,
        middle and slowest member on the build host), "seconds": what probing took}. Timed once per (threads, tier)
        and kept (`again`: timed anew, as when the machine's load changed); layers of the
        same signature are timed once. Each figure is the fastest of PROBE_ROUNDS rounds
        (each a median), as the build host's are (build.host_figures): on a shared
        machine whose speed halves for seconds at a time, that is the machine itself."""
        from ..kernels import isa
        key = (int(threads), isa.active_tier())
        if again or key not in self._probes:
            t0 = time.perf_counter()
            graphs, sig_of = self.probe_graphs()
            ends = probe.anchor_members([m.profile.latency_ms for m in self.members])
            whole = {i: (self._session(self.members[i], threads), probe.random_feeds(
                [(v.name, v.dtype, self.members[i].input_shapes[v.name])
                 for v in self.members[i].graph.inputs])) for i in ends}
            # the fastest of a few rounds: the machine's speed when nothing contends for it
            planned = probe.Layers(graphs, threads)
            timed = {sig: float("inf") for sig in graphs}
            overhead = anchor = None
            for _ in range(PROBE_ROUNDS):
                for sig, ms in planned.time().items():
                    timed[sig] = min(timed[sig], ms)
                o = probe.overhead_ms(threads)
                overhead = o if overhead is None else min(overhead, o)
                a = {i: latency_ms(sess, feeds, ANCHOR_RUNS)
                     for i, (sess, feeds) in whole.items()}
                anchor = a if anchor is None else {i: min(anchor[i], a[i]) for i in a}
            layers = {m.index: {probe.OVERHEAD: overhead, **{
                cls: sum(timed[sig] for sig in sig_of[(m.index, cls)])
                for cls in m.profile.probes}}
                for m in self.members}
            self._probes[key] = {"layers": layers, "anchors": anchor,
                                 "seconds": time.perf_counter() - t0}
        return self._probes[key]

    def probe_graphs(self) -> tuple[dict, dict]:
        """The members' probe layers as one-node graphs: ({signature: graph}, {(member,
        class): [signatures]}); layers of one signature (same op, attributes, shapes,
        weight sizes and zeros) appear once."""
        graphs, sig_of = {}, {}
        for m in self.members:
            infos = infer(m.graph, m.input_shapes)
            for cls, nodes in m.profile.probes.items():
                sig_of[(m.index, cls)] = []
                for node in nodes:
                    g = probe.layer_graph(m.graph, node, m.input_shapes, infos)
                    sig = _signature(g)
                    sig_of[(m.index, cls)].append(sig)
                    graphs.setdefault(sig, g)
        return graphs, sig_of

    def predict(self, threads: int = 1, again: bool = False) -> list[float]:
        """Each member's predicted latency (ms) on this device at `threads`: its layers'
        probe ratios (probe.predict), corrected by the anchors' whole runs
        (probe.anchored)."""
        dev = self.probe(threads, again)
        base = [probe.predict(m.profile, m.probe_ms, dev["layers"][m.index])
                for m in self.members]
        return probe.anchored(base, dev["anchors"])

    def choose(self, latency_ms: float | None = None, accuracy: float | None = None,
               size: float | None = None, threads: int = 1,
               predicted: list[float] | None = None, verify: bool = True) -> Member:
        """latency_ms: the most faithful member predicted to run within it here (none fits:
        the fastest, with a warning); accuracy: the fastest member whose fidelity (the
        family's metric: accuracy when it was built with labelled data, else top-1
        agreement, cosine or a detector's mask IoU with the source) reaches it; size:
        the most faithful member of at most this many bytes (none: the smallest, with a
        warning). Targets combine.
        predicted: the members' latencies here if already known (else `predict`).
        verify (with latency_ms): the pick is then run here (its session is opened anyway
        to be returned by `select`); if it is slower than the target, its measured time
        replaces its prediction and the choice is made again, so a prediction that was
        wrong for one member costs a second look, not a missed target. When no member is
        left that fits, the fastest is measured too before it is named, so the fallback
        compares measurements with measurements (one run of a member during a slow moment
        of a shared host no longer hands the pick to a member predicted slower still)."""
        pool = list(self.members)
        if size is not None:
            pool = [m for m in pool if m.bytes <= size]
            if not pool:
                pool = [min(self.members, key=lambda m: m.bytes)]
                warnings.warn(f"no member is {size:.0f} bytes or smaller: the smallest "
                              f"({pool[0].bytes} bytes) is chosen", stacklevel=2)
        if accuracy is not None:
            fit = [m for m in pool if m.fidelity >= accuracy]
            if not fit:
                warnings.warn(f"no member reaches fidelity {accuracy}: the most faithful "
                              f"one is chosen", stacklevel=2)
                fit = [max(pool, key=lambda m: m.fidelity)]
            pool = fit
        if latency_ms is None and accuracy is None:
            return max(pool, key=lambda m: m.fidelity)
        pred = list(predicted if predicted is not None else self.predict(threads))
        if latency_ms is None:
            return min(pool, key=lambda m: pred[m.index])
        measured: set[int] = set()
        while True:
            fit = [m for m in pool if pred[m.index] <= latency_ms]
            if not fit:
                fastest = min(pool, key=lambda m: pred[m.index])
                if verify and fastest.index not in measured:
                    pred[fastest.index] = self.measure(fastest, threads)
                    measured.add(fastest.index)
                    continue
                warnings.warn(f"no member {'runs' if measured else 'is predicted to run'} "
                              f"within {latency_ms} ms here: the fastest "
                              f"({pred[fastest.index]:.2f} ms) is chosen", stacklevel=2)
                return fastest
            pick = max(fit, key=lambda m: (m.fidelity, -pred[m.index]))
            if not verify or pick.index in measured:
                return pick
            pred[pick.index] = self.measure(pick, threads)
            measured.add(pick.index)

    def measure(self, m: Member, threads: int = 1) -> float:
        """`m`'s latency here: its session (kept for `select`), the fastest of
        VERIFY_ROUNDS blocks of ANCHOR_RUNS runs (medians)."""
        sess = self._session(m, threads)
        feeds = probe.random_feeds([(v.name, v.dtype, m.input_shapes[v.name])
                                    for v in m.graph.inputs])
        return min(latency_ms(sess, feeds, ANCHOR_RUNS) for _ in range(VERIFY_ROUNDS))

    def _session(self, m: Member, threads: int, **options):
        if options:
            return m.session(threads=threads, **options)
        key = (m.index, int(threads))
        if key not in self._sessions:
            self._sessions[key] = m.session(threads=threads)
        return self._sessions[key]

    def select(self, latency_ms: float | None = None, accuracy: float | None = None,
               size: float | None = None, threads: int = 1, **options):
        """The session of `choose(...)`'s member (options go to the session)."""
        m = self.choose(latency_ms, accuracy, size, threads)
        return self._session(m, threads, **options)

    # -- reports ------------------------------------------------------------------------------
    def table(self, predicted: list[float] | None = None) -> str:
        d = self.device
        n = len(self.members)
        here = f"{'here ms':>8} " if predicted else ""
        rows = [(f"family of {n} member{'s' * (n != 1)}; measured on {d.get('cpu', '?')}, "
                 f"kernels {d.get('tier', '?')}, {d.get('threads', '?')} thread(s)"),
                (f"{'#':>2} {'factors':34} {'latency ms':>10} {here}"
                 f"{'fidelity':>9} {'cosine':>8} {'size MB':>8}  input")]
        for m in self.members:
            here = f"{predicted[m.index]:8.3f} " if predicted else ""
            shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in m.input_shapes.items())
            rows.append(f"{m.index:2} {m.describe()[:34]:34} {m.latency_ms:10.3f} {here}"
                        f"{m.fidelity:9.4f} {m.cosine:8.5f} {m.bytes / 1e6:8.3f}  {shapes}")
        s = self.search
        if s:
            rows.append(f"search: {s.get('candidates_total')} candidates "
                        f"({s.get('measured')} measured, {s.get('cached')} cached) in "
                        f"{s.get('seconds', 0):.1f} s, budget {s.get('budget')}")
        if self.file_bytes:
            rows.append(f"file {self.file_bytes / 1e6:.3f} MB for "
                        f"{sum(m.bytes for m in self.members) / 1e6:.3f} MB of members "
                        f"(shared tensors stored once)")
        return "\n".join(rows)


def _obj(v) -> dict:
    if not isinstance(v, dict):
        raise TypeError(f"expected an object, got {type(v).__name__}")
    return v


def _list(v) -> list:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v


def _num(v, positive: bool = False) -> float:
    """A finite number (positive when asked) from a JSON field."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"expected a number, got {type(v).__name__}")
    x = float(v)
    if not math.isfinite(x) or (positive and x <= 0):
        raise ValueError(f"{v!r} out of range")
    return x


def _signature(g: Graph) -> str:
    n = g.nodes[0]
    consts = [(v.shape, str(v.dtype), int(np.count_nonzero(v))) for v in g.consts.values()]
    return json.dumps([n.op, repr(sorted(n.attrs.items())), [(v.shape, v.dtype) for v in
                       g.inputs], consts], default=str)


def load_family(path: str, session_class=None) -> Family:
    import os
    doc, blobs = ennf.load(path)
    return Family(doc, blobs, path, session_class, os.path.getsize(path))
