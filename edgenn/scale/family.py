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
import warnings
from dataclasses import dataclass

from ..graph import family as ennf
from ..graph.ir import Graph
from . import probe
from .factors import Factors


ANCHOR_RUNS = 10     # whole runs of each anchor member in the probe


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
    family: "Family"

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
        try:
            self.members = [self._member(i, m) for i, m in enumerate(doc["members"])]
        except (KeyError, TypeError, ValueError) as exc:
            raise ennf.enn._fail(f"corrupt member description ({type(exc).__name__}: {exc})",
                                 source) from None

    def _member(self, i: int, m: dict) -> Member:
        return Member(i, Factors.from_dict(m["factors"]), float(m["latency_ms"]),
                      float(m["fidelity"]), float(m["cosine"]), m.get("top1"),
                      m.get("accuracy"), int(m["bytes"]),
                      {k: tuple(v) for k, v in m["input_shapes"].items()},
                      probe.Profile.from_json(m["profile"]),
                      {k: float(v) for k, v in m["probe_ms"].items()}, self)

    def graph(self, index: int) -> Graph:
        if index not in self._graphs:
            from ..oplist import load_kernels
            load_kernels()                # the quantized ops' rules, as loading a .enn does
            self._graphs[index] = ennf.member_graph(self.doc, self._blobs, index, self.source)
        return self._graphs[index]

    # -- the device --------------------------------------------------------------------------
    def probe(self, threads: int = 1, again: bool = False) -> dict:
        """This device's probe: {"layers": member index -> {kernel class: ms of its probe
        layer here}, "anchors": member index -> ms of its whole run here (the smallest and
        the largest member), "seconds": what probing took}. Timed once per (threads, tier)
        and kept (`again`: timed anew, as when the machine's load changed); layers of the
        same signature are timed once."""
        import time

        from ..kernels import isa
        key = (int(threads), isa.active_tier())
        if again or key not in self._probes:
            t0 = time.perf_counter()
            timed: dict[str, float] = {}
            overhead = probe.overhead_ms(threads)
            layers = {}
            for m in self.members:
                layers[m.index] = {probe.OVERHEAD: overhead}
                for cls, node in m.profile.probes.items():
                    g = probe.layer_graph(m.graph, node, m.input_shapes)
                    sig = _signature(g)
                    if sig not in timed:
                        timed[sig] = probe.time_graph(g, threads)
                    layers[m.index][cls] = timed[sig]
            anchors = {}
            ends = {min(self.members, key=lambda m: m.bytes).index,
                    max(self.members, key=lambda m: m.bytes).index}
            for m in (self.members[i] for i in sorted(ends)):
                feeds = probe.random_feeds([(v.name, v.dtype, m.input_shapes[v.name])
                                            for v in m.graph.inputs])
                anchors[m.index] = probe.latency_ms(m.session(threads=threads), feeds,
                                                    ANCHOR_RUNS)
            self._probes[key] = {"layers": layers, "anchors": anchors,
                                 "seconds": time.perf_counter() - t0}
        return self._probes[key]

    def predict(self, threads: int = 1, again: bool = False) -> list[float]:
        """Each member's predicted latency (ms) on this device at `threads`: its layers'
        probe ratios (probe.predict), corrected by the anchors' whole runs
        (probe.anchored)."""
        dev = self.probe(threads, again)
        base = [probe.predict(m.profile, m.probe_ms, dev["layers"][m.index])
                for m in self.members]
        return probe.anchored(base, [m.bytes for m in self.members], dev["anchors"])

    def choose(self, latency_ms: float | None = None, accuracy: float | None = None,
               size: float | None = None, threads: int = 1) -> Member:
        """latency_ms: the most faithful member predicted to run within it here (none fits:
        the fastest, with a warning); accuracy: the fastest member whose fidelity reaches
        it; size: the most faithful member of at most this many bytes. Targets combine."""
        pool = list(self.members)
        if size is not None:
            pool = [m for m in pool if m.bytes <= size] or [min(self.members,
                                                                key=lambda m: m.bytes)]
        if accuracy is not None:
            fit = [m for m in pool if m.fidelity >= accuracy]
            if not fit:
                warnings.warn(f"no member reaches fidelity {accuracy}: the most faithful "
                              f"one is chosen", stacklevel=2)
                fit = [max(pool, key=lambda m: m.fidelity)]
            pool = fit
        if latency_ms is None:
            if accuracy is not None:
                pred = self.predict(threads)
                return min(pool, key=lambda m: pred[m.index])
            return max(pool, key=lambda m: m.fidelity)
        pred = self.predict(threads)
        fit = [m for m in pool if pred[m.index] <= latency_ms]
        if not fit:
            fastest = min(pool, key=lambda m: pred[m.index])
            warnings.warn(f"no member is predicted to run within {latency_ms} ms here: the "
                          f"fastest ({pred[fastest.index]:.2f} ms predicted) is chosen",
                          stacklevel=2)
            return fastest
        return max(fit, key=lambda m: (m.fidelity, -pred[m.index]))

    def select(self, latency_ms: float | None = None, accuracy: float | None = None,
               size: float | None = None, threads: int = 1, **options):
        """The session of `choose(...)`'s member (options go to the session)."""
        m = self.choose(latency_ms, accuracy, size, threads)
        return m.session(threads=threads, **options)

    # -- reports ------------------------------------------------------------------------------
    def table(self, predicted: list[float] | None = None) -> str:
        d = self.device
        rows = [f"family of {len(self.members)} members; measured on {d.get('cpu', '?')}, "
                f"kernels {d.get('tier', '?')}, {d.get('threads', '?')} thread(s)",
                f"{'#':>2} {'factors':34} {'latency ms':>10} "
                + (f"{'here ms':>8} " if predicted else "")
                + f"{'fidelity':>9} {'cosine':>8} {'size MB':>8}  input"]
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


def _signature(g: Graph) -> str:
    import numpy as np
    n = g.nodes[0]
    consts = [(v.shape, str(v.dtype), int(np.count_nonzero(v))) for v in g.consts.values()]
    return json.dumps([n.op, repr(sorted(n.attrs.items())), [(v.shape, v.dtype) for v in
                       g.inputs], consts], default=str)


def load_family(path: str, session_class=None) -> Family:
    import os
    doc, blobs = ennf.load(path)
    return Family(doc, blobs, path, session_class, os.path.getsize(path))
