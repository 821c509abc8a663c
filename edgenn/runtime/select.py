"""Algorithm choice, in one readable place (DESIGN principles 5 and 6).

For each node: the registered kernels of its op are filtered by capability (`supports`);
a cost model, where a kernel has one, prunes hopeless candidates; then, with more than one
left, the choice is measured on this CPU: every candidate is first checked against the
reference kernel on the real shapes (a wrong one is never timed), then timed (warm-up,
median), and the fastest is bound. Results are cached per CPU (runtime/tunecache.py).

tune modes (InferenceSession(tune=...) or EDGENN_TUNE): "background" (default) = a first
plan at once (cached choices, else untimed ones), what it guessed timed in the background
and swapped in (runtime/background.py); "off" = no timing, cost model else registry
order; "cached" = time what the cache lacks before the session is ready; "full" = retime.
The choice is a named, inspectable value kept on each plan step.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import EdgennError, GraphError, ResourceLimitError
from ..graph.ir import Node
from ..extras import have
from ..registry import KERNELS, REFERENCE
from ..kernels import isa, scratch
from . import background, costmodel, tunecache

TUNE_MODES = ("background", "off", "cached", "full")
# the Tuner's mode for a background session's first plan: cached choices where the cache
# has them, else untimed ones (counted in Tuner.untimed for the background tuner)
FIRST = "first"
CHECK_RTOL = 1e-4          # a candidate must match the reference this closely to be timed
COST_PRUNE = 4.0           # drop candidates the cost model says are 4x worse than the best
MIN_REPEATS, MAX_REPEATS, TIME_PER_CANDIDATE = 3, 15, 0.05  # seconds
ROUND_ATTEMPTS = 4         # background tuning: rounds tried per round kept, at most
# an approximate candidate (lsb_tolerance > 0: an int8 layer computed in fp32) is bound only
# when it is this much faster than the fastest exact one: it may land outputs a step away
# (steps that add up over a model), and its timing alone, in a warm loop, hides what its
# fp32 copies of the input and output (4x the bytes) cost inside the model
APPROX_MARGIN = 1.25


@dataclass
class Choice:
    kernel: str                    # name of the bound implementation
    run: callable                  # run(inputs, outputs)
    candidates: list[str] = field(default_factory=list)
    reason: str = ""
    times: dict = field(default_factory=dict)   # kernel -> median seconds (when timed)
    scratch: list = field(default_factory=list)  # the kernel's scratch handles (per context)
    pool: str = "own"              # whose threads it runs on (KernelSpec.pool)


@dataclass
class Tuner:
    """State of the choices for one plan: mode, cache, the timing budget left."""
    mode: str = "cached"
    threads: int = 1
    budget_s: float = 20.0
    progress: callable = None      # progress(done, total) during timing
    spent_s: float = 0.0
    changed: bool = False
    pool: str = "blas"             # threads > 1: "blas" or "omp" kernels (never both)
    k_split: bool = False          # threads > 1: kernels that can split K do (PlanContext)
    # threads > 1: where a kernel whose threads split the output rows applies, only such
    # kernels are candidates (KernelSpec.thread_split); rows_offered: one applied
    split_rows: bool = False
    rows_offered: bool = False
    untimed: int = 0               # mode FIRST: choices made without the timing they need
    gate: object = None            # background tuning: measurements go through gate.measure

    @staticmethod
    def resolve_mode(mode: str | None) -> str:
        mode = mode or os.environ.get("EDGENN_TUNE", "") or "background"
        if mode not in TUNE_MODES:
            raise ValueError(f"tune must be one of {TUNE_MODES}, got {mode!r}")
        return mode

    def finish(self) -> None:
        if self.changed:
            tunecache.save(self.threads)

    def measured(self, cache: dict, key: str, measure, entry):
        """measure(), its time counted against the budget; entry(result) cached under key
        only when the threads had their cores before and after it (CORES_FOR_CACHE)."""
        t0 = time.perf_counter()
        free = cores_free(self.threads)
        result = self.gate.measure(measure) if self.gate is not None else measure()
        clean = self.gate is None or self.gate.clean
        if clean and min(free, cores_free(self.threads)) >= CORES_FOR_CACHE:
            cache[key] = entry(result)
            self.changed = True
            if self.gate is not None:       # a background tuner may not live to finish()
                tunecache.save(self.threads)
        # the budget is of timing: a background tuner's waits for a free core are not spent
        self.spent_s += self.gate.measuring_s if self.gate is not None else \
            time.perf_counter() - t0
        return result


def reference_runner(node: Node):
    """Wrap a reference kernel as a step callable: compute, then copy into the outputs."""
    ref, attrs = REFERENCE[node.op], node.attrs

    def run(inputs, outputs):
        for out, value in zip(outputs, ref(attrs, inputs)):
            if out is not None:
                np.copyto(out, value, casting="unsafe")
    return run


def _prepared(spec, node, ins, outs, names, reason, times=None) -> Choice:
    """Choice of `spec`, prepared now, with the scratch its prepare asked for. A prepare
    that trips on the model's data (constant indices out of range, ...) is a GraphError
    naming the node."""
    try:
        with scratch.collect() as handles:
            run = spec.prepare(node, ins, outs)
    except EdgennError:
        raise
    except MemoryError as exc:
        raise ResourceLimitError(f"{node.op} node {node.name!r}: out of memory preparing "
                                 f"kernel {spec.name}") from exc
    except Exception as exc:  # noqa: BLE001
        raise GraphError(f"{node.op} node {node.name!r}: {exc}") from exc
    return Choice(spec.name, run, names, reason, dict(times or {}), handles, spec.pool)


# A choice timed while the OpenMP threads got less than this share of their cores (a
# shared machine's second vCPU taken) is used, not cached: cached, it would outlive the
# moment
CORES_FOR_CACHE = 0.75


def cores_free(threads: int) -> float:
    """The share of `threads` cores the OpenMP threads get right now (_sgemm's short
    probe); 1.0 at one thread."""
    if threads <= 1:
        return 1.0
    from ..kernels.gemm import _sgemm
    return _sgemm.cores_available(threads)


def choose(node: Node, ins, outs, reference: bool = False, tuner: Tuner | None = None,
           always_time: bool = False) -> Choice:
    """The kernel for `node`: by the tuner's measurement (or its cache) where several
    apply; always_time: measured even when one kernel alone applies (the planner compares
    its time with other steps', runtime/fuse_steps.py)."""
    specs = KERNELS.get(node.op, [])
    names = [s.name for s in specs] + ["reference"]
    if reference:
        return Choice("reference", reference_runner(node), names, "reference mode")
    if all(o is None or math.prod(o.shape) == 0 for o in outs):
        return Choice("empty", _nothing, names, "every output is empty: nothing to compute")
    capable = _same_pool([s for s in specs if _runnable(s) and s.supports(node, ins, outs)],
                         tuner.pool if tuner else "blas")
    capable.sort(key=lambda s: -s.priority)   # stable: registration order within a priority
    if not capable:
        return Choice("reference", reference_runner(node), names, "no specialised kernel applies")
    if tuner is not None:
        capable = _rows_split_only(capable, tuner)
    capable = _prune_by_cost(capable, node, ins, outs)
    if len(capable) == 1 and not always_time:
        return _prepared(capable[0], node, ins, outs, names, "only capable kernel")
    tuner = tuner or Tuner(mode="off")
    # the candidate set is part of the key: a new kernel (or tier) gets timed, not skipped
    # because an old winner is still cached
    key = tunecache.node_key(node, ins) + ("" if tuner.pool == "blas" else f"|{tuner.pool}") \
        + "|" + tunecache.names_key(s.name for s in capable)
    cache = tunecache.load(tuner.threads) if tuner.mode != "off" else {}
    hit = cache.get(key)
    by_name = {s.name: s for s in capable}
    if tuner.mode in ("cached", FIRST) and hit and hit.get("kernel") in by_name:
        return _prepared(by_name[hit["kernel"]], node, ins, outs, names, "cached timing",
                         hit.get("times"))
    if tuner.mode == "off":
        return _prepared(capable[0], node, ins, outs, names, "tuning off: first capable")
    if tuner.mode == FIRST or tuner.spent_s >= tuner.budget_s:
        tuner.untimed += tuner.mode == FIRST
        why = "first plan" if tuner.mode == FIRST else "tuning budget spent"
        best, predicted = costmodel.pick(node, ins, outs, list(by_name), tuner.threads)
        if best is not None:
            return _prepared(by_name[best], node, ins, outs, names,
                             f"{why}: predicted by the cost model", predicted)
        return _prepared(capable[0], node, ins, outs, names, f"{why}: untimed, first capable")
    return tuner.measured(cache, key,
                          lambda: _measure(node, ins, outs, capable, names, tuner.threads),
                          lambda choice: {"kernel": choice.kernel, "times": choice.times,
                                          "op": node.op,
                                          "features": costmodel.features(node, ins, outs)})


def time_side_by_side(pair: tuple[Node, Node], fused: Node, infos, choices: list,
                      tuner: Tuner | None) -> list | None:
    """The two steps of a conv pair and their fused step, timed again in the same rounds:
    -> [first, second, fused] with only those times, or None (tuning off, budget spent,
    a reference or empty step). Each was timed in its own choose(), seconds apart, and on
    a shared machine a burst of load in one of them would decide the fusion. Round after
    round the first step writes the middle tensor, the second reads it, then the fused
    step runs, each timed apart. The result is cached per CPU. A step that had one
    capable kernel (not timed by choose()) is timed here too, so such pairs can fuse."""
    if tuner is None or tuner.mode == "off" or \
            any(c.kernel in ("reference", "empty") for c in choices):
        return None
    roles = ("first", "second", "fused")
    key = tunecache.node_key(fused, infos(fused.inputs)) + f"|{tuner.pool}|side-by-side|" \
        + "+".join(c.kernel for c in choices)
    cache = tunecache.load(tuner.threads)
    hit = cache.get(key)
    if tuner.mode == "full" or not (hit and set(hit.get("times", {})) == set(roles)):
        tuner.untimed += tuner.mode == FIRST
        if tuner.mode == FIRST or tuner.spent_s >= tuner.budget_s:
            return None
        hit = tuner.measured(cache, key, lambda: {"times": _time_pair(
            pair, fused, infos, choices, tuner.threads)}, lambda entry: entry)
    return [replace(c, times={c.kernel: hit["times"][r]}) for c, r in zip(choices, roles)]


def _time_pair(pair, fused: Node, infos, choices, threads: int) -> dict:
    """{"first", "second", "fused": median seconds}, from rounds of the three calls.
    fused's inputs: x, w1, b1 of the first conv, w2, b2, z of the second."""
    a, b = pair
    sample = _sample_inputs(infos(fused.inputs), np.random.default_rng(0))
    mid = infos(a.outputs)[0]
    middle = np.empty(mid.shape, mid.dtype)
    y = np.empty(infos(fused.outputs)[0].shape, infos(fused.outputs)[0].dtype)
    first_in = sample[:len(a.inputs)]
    second_in = [middle] + sample[3:2 + len(b.inputs)]
    first, second, together = choices
    runs = {"first": lambda i, o: first.run(first_in, [middle]),
            "second": lambda i, o: second.run(second_in, [y]),
            "fused": lambda i, o: together.run(sample, [y])}
    try:
        return _time_round_robin(runs, None, None, threads)
    finally:
        for c in choices:
            for h in c.scratch:
                h.release_own()     # the plan's context holds them from now on


def _nothing(inputs, outputs) -> None:
    """The step of a node whose outputs have no elements."""


def _runnable(spec) -> bool:
    """The spec's tier runs on this CPU under EDGENN_MAX_ISA, the optional packages it
    imports are installed, and, for a table's fallback row, no other row of its family
    runs here."""
    if spec.fallback and any(o.family == spec.family and not o.fallback and _runnable(o)
                             for o in KERNELS.get(spec.op, ())):
        return False
    return (not spec.isa or isa.usable(spec.isa)) and all(map(have, spec.requires))


def _same_pool(specs, pool: str):
    """Drop the kernels of the other thread pool (a BLAS-only op keeps its BLAS kernels)."""
    other = "omp" if pool == "blas" else "blas"
    kept = [s for s in specs if s.pool != other]
    return kept if kept or pool == "blas" else specs


def _rows_split_only(specs, tuner: Tuner):
    """tuner.split_rows: the kernels whose threads split the output rows where one
    applies, else all of them; whether one applied is noted on the tuner."""
    rows = [s for s in specs if s.thread_split == "rows"]
    tuner.rows_offered = tuner.rows_offered or bool(rows)
    return rows if rows and tuner.split_rows else specs


def _prune_by_cost(specs, node, ins, outs):
    costs = {}
    for s in specs:
        try:
            costs[s.name] = s.cost(node, ins, outs) if s.cost is not None else None
        except (ArithmeticError, ValueError):   # a model outside its range: no estimate
            costs[s.name] = None
    costs = {k: v for k, v in costs.items() if v is not None}
    if len(costs) < 2:
        return specs
    best = min(costs.values())
    return [s for s in specs if costs.get(s.name) is None or costs[s.name] <= COST_PRUNE * best]


def _sample_inputs(ins, rng) -> list:
    """Constants as they are; runtime inputs random (floats ~N(0,1), ints small)."""
    arrays = []
    for info in ins:
        if info is None:
            arrays.append(None)
        elif info.value is not None:
            arrays.append(info.value)
        elif info.dtype.startswith("float"):
            arrays.append(rng.standard_normal(info.shape).astype(info.dtype))
        elif info.dtype == "bool":
            arrays.append(rng.random(info.shape) < 0.5)
        elif info.dtype in ("uint8", "int8"):   # quantized activations: the full range
            lim = np.iinfo(info.dtype)
            arrays.append(rng.integers(lim.min, lim.max, info.shape, endpoint=True,
                                       dtype=info.dtype))
        else:
            arrays.append(np.zeros(info.shape, info.dtype))
    return arrays


def _measure(node, ins, outs, specs, names, threads: int = 1) -> Choice:
    rng = np.random.default_rng(0)
    inputs = _sample_inputs(ins, rng)
    want = REFERENCE[node.op](node.attrs, inputs)
    outputs = [None if o is None else np.empty(o.shape, o.dtype) for o in outs]
    runs, handles, rejected = {}, {}, []
    for spec in specs:
        try:
            with scratch.collect() as handles[spec.name]:
                run = spec.prepare(node, ins, outs)
            run(inputs, outputs)
        except Exception as exc:  # noqa: BLE001 - a broken candidate is dropped, not fatal
            rejected.append(f"{spec.name} raised {type(exc).__name__}")
            continue
        bound = spec.error_bound(node, inputs) if spec.error_bound else None
        if not _matches(outputs, want, spec.lsb_tolerance, bound):
            rejected.append(f"{spec.name} disagrees with the reference")
            continue
        runs[spec.name] = run
    times = _time_round_robin(runs, inputs, outputs, threads)
    if not runs:
        return Choice("reference", reference_runner(node), names,
                      "every candidate failed its check: " + "; ".join(rejected))
    best = min(times, key=times.get)
    why = "fastest measured"
    lsb = {s.name: s.lsb_tolerance for s in specs}
    exact = [n for n in times if not lsb[n]]
    if lsb[best] and exact:
        fastest_exact = min(exact, key=times.get)
        if times[best] * APPROX_MARGIN > times[fastest_exact]:
            best, why = fastest_exact, f"fastest exact (approximate ones need {APPROX_MARGIN}x)"
    why += f" ({'; '.join(rejected)})" if rejected else ""
    for h in handles[best]:
        h.release_own()            # timed outside a plan: the context's memory from now on
    pool = next(s.pool for s in specs if s.name == best)
    return Choice(best, runs[best], names, why, times, handles[best], pool)


def _time_round_robin(runs: dict, inputs, outputs, threads: int = 1) -> dict:
    """Median seconds of each candidate, the samples taken in rounds (each candidate once
    per round) rather than candidate after candidate: a burst of load on a shared machine
    then slows every candidate alike instead of some only. Each run follows another
    candidate's, as a layer's follows another layer's in a model, so no candidate is
    timed with its input and weights hot from its own previous run.

    threads > 1: the OpenMP workers are woken before each timed run, as they are awake
    between a model's threaded layers; otherwise waking them would be timed with the
    candidate that follows a single-threaded one."""
    wake = None
    if threads > 1:
        from ..kernels.gemm import _sgemm
        wake = _sgemm.wake_threads
    samples = {name: [] for name in runs}
    deadline = time.perf_counter() + TIME_PER_CANDIDATE * len(runs)
    rounds, this = 0, {}
    for _attempt in range(ROUND_ATTEMPTS * MAX_REPEATS):  # background: disturbed rounds dropped
        if rounds >= MAX_REPEATS or rounds >= MIN_REPEATS and time.perf_counter() > deadline:
            break
        token = background.round_start()
        this = {}
        for name, run in runs.items():
            if wake is not None:
                wake(threads)
            t0 = time.perf_counter()
            run(inputs, outputs)
            this[name] = time.perf_counter() - t0
        if background.round_clean(token):
            rounds += 1
            for name, t in this.items():
                samples[name].append(t)
    if rounds < MIN_REPEATS:
        background.not_enough_clean_rounds()
        for name, t in this.items():      # at least one sample each, disturbed or not
            samples[name] = samples[name] or [t]
    return {name: float(np.median(s)) for name, s in samples.items()}


def _matches(outputs, want, lsb_tolerance: int = 0, bound=None) -> bool:
    """Outputs as the reference's: float within CHECK_RTOL of its largest magnitude (or,
    for an approximate kernel, within its own error bound, KernelSpec.error_bound);
    integers equal, or at most lsb_tolerance steps off on at most 1% of them."""
    for got, ref in zip(outputs, want):
        if got is None:
            continue
        ref = np.asarray(ref)
        if got.shape != ref.shape:
            return False
        if bound is not None and ref.dtype.kind == "f":
            scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-6)
            with np.errstate(invalid="ignore"):
                err = np.abs(got.astype(np.float64) - ref)
            if not np.all(np.isfinite(got) == np.isfinite(ref)) or \
                    np.any(err > bound + CHECK_RTOL * scale):
                return False
        elif ref.dtype.kind in "fc":
            scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-6)
            if not np.all(np.isfinite(got) == np.isfinite(ref)) or \
                    float(np.nanmax(np.abs(got - ref), initial=0.0)) > CHECK_RTOL * scale:
                return False
        elif lsb_tolerance:   # at most one step off, on at most 1% of the elements
            diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
            if diff.max(initial=0) > lsb_tolerance or np.mean(diff > 0) > 0.01:
                return False
        elif not np.array_equal(got, ref):
            return False
    return True
