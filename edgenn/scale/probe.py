"""Latency on another device, predicted from the build host's measurements and a short
probe of the kernel families the members use.

At build time each member is profiled (one sample, its tuned plan): the time of each step,
grouped into kernel classes (op / kernel without its ISA suffix: "Conv/conv_sgemm_12x32",
"QConv/qconv_dw", ...). For the classes that make up most of a member's time, its
costliest nodes of that class become probe layers: each node alone, with its real
weights, as a one-node graph, timed on the build host (a class's time: their sum).

On a device, `probe` times the same one-node graphs there (the device's own tuned kernels,
its threads and ISA tier) and `predict` scales each member's host latency class by class:

    predicted = sum_c host_c * (device_c / host_c)  +  rest * mean ratio
                + overhead * (device_overhead / host_overhead)

host_c: the member's summed step time of class c on the host; the classes without a
probe layer (the small steps, `rest`) scale by the time-weighted mean of the probed
ratios; `overhead` is the rest of the whole run (the interpreter between steps, the feed
checks), scaled by the ratio of a trivial one-node run's overhead. Probe layers are timed
by their step's own time (the plan's step timings), not the session call around it, which
would pull every ratio towards 1. A layer keeps its structure on another CPU while its
kernel, tile and parallel split may change; the ratio of the same layer timed on both
captures that.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from ..graph.infer import infer
from ..graph.ir import Graph, Node, ValueInfo
from ..runtime.threads import wait_blas_idle

COVER = 0.95          # probe the classes making up this share of a member's step time
MIN_SHARE = 0.02      # ... each at least this share
PER_CLASS = 3         # its costliest nodes probed: a class's layers may take different
                      # kernels on another CPU (one BLAS-bound, one not), so one is not enough
PROBE_SECONDS = 0.03  # timing per probe layer (after warm-up)
OVERHEAD = "overhead"  # the pseudo-class of the session call around the steps


def kernel_class(op: str, kernel: str) -> str:
    return f"{op}/{kernel.split('__')[0]}"


@dataclass
class Profile:
    """Where one member's time goes on the host that built it."""
    latency_ms: float                 # whole run, median
    steps_ms: float                   # the steps' medians summed (the rest is overhead)
    shares: dict[str, float]          # kernel class -> share of the summed step time
    probes: dict[str, list[str]]      # probed class -> its costliest nodes in the member

    def to_json(self) -> dict:
        return {"latency_ms": self.latency_ms, "steps_ms": self.steps_ms,
                "shares": self.shares, "probes": self.probes}

    @classmethod
    def from_json(cls, d: dict) -> Profile:
        if not all(isinstance(v, list) for v in d["probes"].values()):
            raise TypeError("probe nodes must be lists")
        return cls(float(d["latency_ms"]), float(d["steps_ms"]),
                   {str(k): float(v) for k, v in d["shares"].items()},
                   {str(k): [str(n) for n in v] for k, v in d["probes"].items()})


def profile(session, feeds: dict, rounds: int = 20, warmup: int = 3) -> Profile:
    """The latency of `session`'s plan on `feeds`, its steps' times by class and the
    nodes to probe, all from the same `rounds` runs (medians)."""
    for _ in range(warmup):
        session.run(None, feeds)
    whole, per_step, steps = [], {}, {}
    for _ in range(rounds):
        timings: list = []
        t0 = time.perf_counter()
        session.run(None, feeds, timings=timings)
        whole.append(time.perf_counter() - t0)
        for k, (step, a, b) in enumerate(timings):
            per_step.setdefault(k, []).append(b - a)
            steps[k] = step
    medians = {k: float(np.median(v)) for k, v in per_step.items()}
    total = sum(medians.values()) or 1.0
    by_class: dict[str, float] = {}
    members: dict[str, list[tuple[float, str]]] = {}
    for k, t in medians.items():
        node, kernel = steps[k].node, steps[k].choice.kernel
        c = kernel_class(node.op, kernel)
        by_class[c] = by_class.get(c, 0.0) + t / total
        members.setdefault(c, []).append((t, node.name))
    probes, covered = {}, 0.0
    for c, share in sorted(by_class.items(), key=lambda kv: -kv[1]):
        if covered >= COVER or share < MIN_SHARE:
            break
        probes[c] = [name for _, name in sorted(members[c], reverse=True)[:PER_CLASS]]
        covered += share
    return Profile(float(np.median(whole)) * 1e3, total * 1e3, by_class, probes)


def step_nodes(step_name: str, names: set) -> list[str] | None:
    """The graph nodes (of `names`) a plan step stands for: its node, or the nodes "a+b"
    of a step the planner fused (runtime/fuse_steps.py); None if they are not there."""
    if step_name in names:
        return [step_name]
    parts = step_name.split("+")
    return parts if all(p in names for p in parts) else None


def layer_graph(graph: Graph, node_name: str, input_shapes: dict, infos=None) -> Graph:
    """The node named `node_name` alone (a step the planner fused, "a+b": those nodes,
    runtime/fuse_steps.py): its constant inputs kept, the others graph inputs of the
    shapes they have in `graph` at `input_shapes` (`infos`: infer's result for them, when
    already known)."""
    names = step_nodes(node_name, {n.name for n in graph.nodes})
    if names is None:
        raise KeyError(f"no node {node_name!r} in the graph")
    nodes = [next(n for n in graph.nodes if n.name == name) for name in names]
    infos = infos if infos is not None else infer(graph, input_shapes)
    inner = {o for n in nodes for o in n.outputs}
    reads = [i for n in nodes for i in n.inputs if i and i not in inner]
    inputs = [ValueInfo(i, infos[i].dtype, tuple(infos[i].shape)) for i in reads
              if i not in graph.consts]
    outputs = [ValueInfo(o, infos[o].dtype, tuple(infos[o].shape)) for o in nodes[-1].outputs
               if o]
    consts = {i: graph.consts[i] for i in reads if i in graph.consts}
    return Graph(nodes, list({v.name: v for v in inputs}.values()), outputs, consts,
                 dict(graph.meta))


def random_feeds(specs, seed: int = 0) -> dict:
    """{name: array} for specs [(name, dtype, shape)]: normal floats, any uint8, zeros for
    the rest (indices, shapes: the value that is always in range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, dtype, shape in specs:
        if dtype == "float32":
            out[name] = rng.standard_normal(shape, dtype=np.float32)
        elif dtype.startswith("float"):
            out[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == "uint8":
            out[name] = rng.integers(0, 256, shape).astype(np.uint8)
        else:
            out[name] = np.zeros(shape, dtype)
    return out


class Layers:
    """Probe layers (one-node graphs, by key) planned once, timed as often as asked.

    Their sessions are timed OpenMP kernels first, BLAS-backed ones last: at threads > 1
    the two pools' workers spin for a while after their work (OpenBLAS about 0.1 s), and
    a layer timed while the other pool spins gets half the cores. At threads > 1 each
    round first waits for spinners to stop."""

    def __init__(self, graphs: dict, threads: int):
        from ..runtime.session import InferenceSession
        self.threads = threads
        self.runs = {}
        for key, g in graphs.items():
            feeds = random_feeds([(v.name, v.dtype, v.shape) for v in g.inputs])
            sess = InferenceSession(g, threads=threads,
                                    input_shapes={k: v.shape for k, v in feeds.items()})
            self.runs[key] = (sess, feeds)
        self.order = sorted(self.runs, key=lambda k: bool(self.runs[k][0].plan.uses_blas))

    def time(self, seconds: float = PROBE_SECONDS) -> dict:
        """{key: median ms of its steps' own time over about `seconds`} (class doc; the
        whole runs timed before may have left BLAS spinning too: wait first)."""
        if self.threads > 1:
            wait_blas_idle()
        return {k: step_ms(*self.runs[k], seconds) for k in self.order}



def step_ms(sess, feeds: dict, seconds: float = PROBE_SECONDS) -> float:
    """Median ms of the steps of `sess`'s plan (their own time, from the plan's step
    timings) over runs of about `seconds`, after two warm-up runs."""
    for _ in range(2):
        sess.run(None, feeds)
    times, start = [], time.perf_counter()
    while len(times) < 10 or (time.perf_counter() - start < seconds and len(times) < 200):
        timings: list = []
        sess.run(None, feeds, timings=timings)
        times.append(sum(t1 - t0 for _, t0, t1 in timings))
    return float(np.median(times)) * 1e3


def time_graph(graph: Graph, threads: int, seconds: float = PROBE_SECONDS) -> float:
    """step_ms of `graph` alone, planned (tuned) here."""
    return Layers({0: graph}, threads).time(seconds)[0]


def overhead_ms(threads: int, steps: int = 32, seconds: float = PROBE_SECONDS) -> float:
    """The interpreter's cost per run and step: a chain of `steps` one-element Relus,
    its whole run minus its steps' own time, median ms over about `seconds`."""
    from ..runtime.session import InferenceSession
    names = [f"t{k}" for k in range(steps + 1)]
    g = Graph([Node("Relu", [a], [b], {}, f"relu{k}") for k, (a, b) in
               enumerate(itertools.pairwise(names))], [ValueInfo(names[0], "float32", (1,))],
              [ValueInfo(names[-1], "float32", (1,))], {}, {})
    sess = InferenceSession(g, threads=threads)
    feeds = {names[0]: np.ones(1, np.float32)}
    out, start = [], time.perf_counter()
    while len(out) < 20 or (time.perf_counter() - start < seconds and len(out) < 500):
        timings: list = []
        t0 = time.perf_counter()
        sess.run(None, feeds, timings=timings)
        out.append(time.perf_counter() - t0 - sum(b - a for _, a, b in timings))
    return float(np.median(out)) * 1e3


def anchor_members(host_ms: list[float]) -> list[int]:
    """The members whose whole runs anchor the prediction (`anchored`): the fastest, the
    middle and the slowest on the build host (fewer when members tie)."""
    order = sorted(range(len(host_ms)), key=lambda i: host_ms[i])
    return sorted({order[0], order[len(order) // 2], order[-1]}) if order else []


def anchored(base: list[float], anchors: dict[int, float]) -> list[float]:
    """Layer-based predictions `base` corrected by the anchors (member index -> its whole
    run measured on the device): each anchor's measured / predicted ratio, interpolated
    between the anchors in log predicted latency. The layer probes run each layer alone,
    its weights in cache and its threads started; a whole model streams all its weights,
    syncs its threads once per layer and meets the machine's load of the moment, which
    shifts small and large members differently. Anchors at the fastest, middle and
    slowest member in log predicted latency track whole runs much more closely than the
    layer probes alone, or than anchors at the two ends in log weight bytes (an int8 and
    an fp32 member of one geometry are far apart there, yet scale alike); a machine whose
    multi-thread speed drifts between runs still moves single members."""
    pts = sorted((np.log(base[i]), np.log(ms / base[i]))
                 for i, ms in anchors.items() if base[i] > 0 and ms > 0)
    if not pts:
        return list(base)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return [b * float(np.exp(np.interp(np.log(b), xs, ys))) if b > 0 else b for b in base]


def predict(host: Profile, host_ms: dict[str, float], device_ms: dict[str, float]) -> float:
    """A member's latency on the device (module doc); host_ms / device_ms: probe class ->
    ms of its probe layer on the build host / on the device, OVERHEAD -> overhead_ms."""
    ratios = {c: device_ms[c] / host_ms[c] for c in host.probes
              if host_ms.get(c) and c in device_ms}
    if not ratios:
        raise ValueError("no probe layer of this member was timed on the device")
    probed = sum(host.shares[c] for c in ratios)
    mean = sum(host.shares[c] * r for c, r in ratios.items()) / probed
    steps = host.steps_ms * (sum(host.shares[c] * r for c, r in ratios.items())
                             + (1.0 - probed) * mean)
    rest = max(0.0, host.latency_ms - host.steps_ms)
    if host_ms.get(OVERHEAD) and device_ms.get(OVERHEAD):
        rest *= device_ms[OVERHEAD] / host_ms[OVERHEAD]
    return steps + rest
