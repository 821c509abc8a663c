"""From one model to its family file: search the front (search.py), build the members,
time their probe layers on this host, write the .ennf (graph/family.py)."""
from __future__ import annotations

import json

from ..graph import family as ennf
from ..graph import format as enn
from ..graph.infer import infer
from ..graph.ir import Graph
from ..quant.data import load_batches
from . import probe
from .factors import LEVELS, apply, bind_to_data, scaled_inputs
from .search import Candidate, SearchResult, search

HOST_ROUNDS = 5     # rounds of the members' careful re-measurement for the family file
DISTINCT = 0.05     # a member must be this much faster than every more faithful one


def _member_graph(c: Candidate, result: SearchResult, source: Graph, calib, threads):
    key = c.factors.key()
    if key in result.store:
        return enn.from_buffer(result.store[key])
    cached = result.cache.graph(key) if result.cache else None
    return cached if cached is not None else apply(source, c.factors, calib, threads)


def host_figures(graphs, members, threads: int, rounds: int = HOST_ROUNDS,
                 progress=None) -> list[dict]:
    """Per member, measured again with care for the family file: `rounds` rounds, each
    timing every member whole (probe.profile: a block of runs, medians) and then its probe
    layers and the interpreter overhead, so whole runs and probe layers see the machine
    alike; the fastest round of each figure is kept (a shared machine's speed drops for
    seconds at a time: the fastest round is the machine uncontended, and the device probe
    takes the same statistic). -> [{"profile": Profile JSON, "probe_ms": {class: ms}}]."""
    from ..runtime.session import InferenceSession
    first = [probe.Profile.from_json(c.m.profile) for c in members]
    layers = {}                              # (member, class, node) -> its one-node graph
    for k, (g, c, p) in enumerate(zip(graphs, members, first)):
        infos = infer(g, _shapes(c))
        for cls, nodes in p.probes.items():
            for node in nodes:
                layers[(k, cls, node)] = probe.layer_graph(g, node, _shapes(c), infos)
    planned = probe.Layers(layers, threads)
    sessions = [InferenceSession(g, threads=threads, input_shapes=_shapes(c))
                for g, c in zip(graphs, members)]
    feeds = [probe.random_feeds([(v.name, v.dtype, _shapes(c)[v.name]) for v in g.inputs])
             for g, c in zip(graphs, members)]
    whole = [[] for _ in members]
    steps = [[] for _ in members]
    layer_ms = [{cls: [] for cls in p.probes} for p in first]
    overhead = []
    for r in range(rounds):
        if progress:
            progress("scale: timing the members here", r, rounds)
        overhead.append(probe.overhead_ms(threads))
        for k, (sess, feed) in enumerate(zip(sessions, feeds)):
            p = probe.profile(sess, feed)
            whole[k].append(p.latency_ms)
            steps[k].append(p.steps_ms)
        timed = planned.time()
        for k, p in enumerate(first):
            for cls, nodes in p.probes.items():
                layer_ms[k][cls].append(sum(timed[(k, cls, node)] for node in nodes))
    if progress:
        progress("scale: timing the members here", rounds, rounds)
    out = []
    for k, p in enumerate(first):
        prof = probe.Profile(min(whole[k]), min(steps[k]), p.shares, p.probes)
        ms = {cls: min(v) for cls, v in layer_ms[k].items()}
        ms[probe.OVERHEAD] = min(overhead)
        out.append({"profile": prof.to_json(), "probe_ms": ms})
    return out


def _bound(source: Graph, calib, data) -> Graph:
    """The source with its dynamic image dims bound to the data's (factors.bind_to_data)
    where that is what lets it scale: calibration and held-out data of one shape, and a
    resolution below 1 that the bound graph allows; else the source as it is."""
    bound = bind_to_data(source, calib)
    if bound is source or bind_to_data(source, data).inputs != bound.inputs:
        return source
    if not any(scaled_inputs(bound, s) for s in LEVELS["resolution"][1:]):
        return source
    return bound


def _shapes(c: Candidate) -> dict:
    return {k: tuple(v) for k, v in c.m.input_shapes.items()}


def device_profile(threads: int) -> dict:
    from ..kernels import isa
    from ..version import __version__
    return {"cpu": isa.cpu_model(), "tier": isa.active_tier(),
            "features": sorted(isa.features()), "threads": threads, "edgenn": __version__}


def build(model, calib, data=None, *, output: str, latency: tuple | None = None,
          budget: int = 24, minutes: float | None = None, members: int = 6,
          threads: int = 1, rounds: int = 20, batch_size: int | None = None,
          image_spec=None,
          levels: dict | None = None, cache_root: str | None = "default", seed: int = 0,
          metric: str = "auto", progress=None) -> tuple[SearchResult, dict]:
    """Search `model`'s front on this host and write the family of its chosen members to
    `output` (.ennf). `data`: held-out data for fidelity (labels give accuracy); without
    it the calibration data. -> (the search result, the family description written)."""
    from ..quant.quantize import load_fp32
    source = load_fp32(model)
    calib_b = load_batches(calib, source.inputs, batch_size, image_spec)
    data_b = load_batches(data if data is not None else calib, source.inputs, batch_size,
                          image_spec)
    source = _bound(source, calib_b, data_b)
    result = search(source, calib_b, data_b, latency=latency, budget=budget,
                    minutes=minutes, members=members, threads=threads, rounds=rounds,
                    levels=levels,
                    seed=seed, metric=metric, cache_root=cache_root, progress=progress)
    if not result.members:
        raise ValueError("no candidate on the front lies in the latency range "
                         f"{latency}: widen it (the front spans "
                         f"{result.front[0].m.latency_ms:.2f}-"
                         f"{result.front[-1].m.latency_ms:.2f} ms here)")
    graphs = []
    for k, c in enumerate(result.members):
        if progress:
            progress("scale: building the members", k, len(result.members))
        graphs.append(_member_graph(c, result, source, calib_b, threads))
    keys = [c.factors.key() for c in result.members]
    entries = [result.cache.entries.get(k, {}) if result.cache else {} for k in keys]
    if all("host" in e for e in entries):
        host = [e["host"] for e in entries]
    else:
        host = host_figures(graphs, result.members, threads, progress=progress)
        if result.cache:
            for key, e, h, g in zip(keys, entries, host, graphs):
                result.cache.put(key, {**e, "host": h})
                result.cache.keep_graph(key, enn.to_bytes(g))
    described = []
    for c, h in zip(result.members, host):
        m = c.m.to_json()
        m["latency_ms"] = h["profile"]["latency_ms"]
        described.append({**m, "factors": json.loads(c.factors.key()),
                          "profile": h["profile"], "probe_ms": h["probe_ms"]})
    # re-timed, a member may turn out no faster (within DISTINCT) than a more faithful
    # one: it leaves the family
    keep = [i for i, d in enumerate(described) if not any(
        o["latency_ms"] <= d["latency_ms"] * (1 + DISTINCT) and o["fidelity"] > d["fidelity"]
        for o in described)]
    keep.sort(key=lambda i: described[i]["latency_ms"])
    for i, c in enumerate(result.members):
        c.member = i in keep
    graphs, described = [graphs[i] for i in keep], [described[i] for i in keep]
    result.members = [result.members[i] for i in keep]
    doc = {"device": device_profile(threads),
           "source": {"inputs": {v.name: list(v.shape) for v in source.inputs}},
           "search": {**_search_summary(result), "metric": metric}}
    enn.write_atomic(output, ennf.to_bytes(graphs, described, doc))
    return result, doc


def _search_summary(r: SearchResult) -> dict:
    return {"budget": r.budget, "seconds": r.seconds, "measured": r.measured,
            "cached": r.cached, "candidates_total": len(r.candidates),
            "latency_range": list(r.latency_range) if r.latency_range else None,
            "levels": {k: list(v) for k, v in r.levels.items()},
            "candidates": [{"factors": json.loads(c.factors.key()), "latency_ms": c.m.latency_ms,
                            "fidelity": c.m.fidelity, "cosine": c.m.cosine,
                            "bytes": c.m.bytes, "front": c.on_front, "member": c.member}
                           for c in r.candidates]}
