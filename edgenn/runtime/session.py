"""InferenceSession: onnxruntime's calling convention over edgenn's planned runtime."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..graph.ir import Graph
from . import limits
from . import threads as thread_control
from . import background
from .background import Activity, BackgroundTuning
from .context import BoundCall
from .plan import Plan, build
from . import select
from .select import FIRST, Tuner

_ONNX_TYPE = {"float32": "float", "float64": "double", "int64": "int64", "int32": "int32",
              "int8": "int8", "uint8": "uint8", "bool": "bool", "float16": "float16",
              "int16": "int16", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}
MAX_PLANS = 8  # plans kept for distinct input shapes (least recently used evicted)
# threads > 1: the plans a session times whole (_plan_best_pool): variant -> (the pool its
# threaded kernels run on, whether the 1x1 convs that can split K do, whether the layers
# that can split their output rows do). Which is fastest depends on where each thread's
# tensors live in the caches, which a layer timed alone does not show:
# - a projection whose threads split its output channels reads every channel the layer
#   before it wrote on the other core; split by K, each thread reads what it wrote;
# - on large planes, a projection whose threads split the pixels in the same bands of rows
#   as a row-split depthwise layer keeps a stage's tensors on the core that wrote them.
PLAN_VARIANTS = {"blas": ("blas", False, False), "omp": ("omp", False, False),
                 "omp-ksplit": ("omp", True, False), "omp-rows": ("omp", True, True)}


@dataclass
class NodeArg:
    name: str
    shape: list
    type: str
    dtype: str


class InferenceSession:
    """Run a model in-process. `run` may be called from any number of threads at once:
    the plans are shared, each call runs in its own execution context (runtime/context.py).

    graph: an edgenn Graph (edgenn.InferenceSession, in api.py, also takes paths, bytes
        and ModelProtos: loading lives there).
    threads: Numba and BLAS threads together (1 is the edge default).
    input_shapes: {name: shape} binds dynamic dims now (otherwise at the first run).
    reference: run every node on its plain NumPy reference kernel (or EDGENN_REFERENCE=1).
    tune: "background" (default) | "off" | "cached" | "full", or EDGENN_TUNE: how kernels
        are chosen (runtime/select.py). "background": ready at once on cached choices
        or the cost model's, those timed in the session's idle time and the tuned plan
        swapped in between calls (`wait_tuned()` waits for it). `progress(done, total)`
        is called while planning.
    max_memory: bytes (or "2G") a plan may use: every tensor and one run's memory are
        checked before allocation (runtime/limits.py; default half the machine's memory).
    """

    def __init__(self, graph: Graph, threads: int = 1, input_shapes: dict | None = None,
                 reference: bool | None = None, tune: str | None = None,
                 progress=None, max_memory=None):
        if not isinstance(graph, Graph):
            raise TypeError("runtime.session.InferenceSession takes a Graph; for paths, "
                            "bytes or ModelProtos use edgenn.InferenceSession")
        self.graph = graph
        self.threads = int(threads)
        if self.threads < 1:
            raise ValueError("threads must be >= 1")
        if reference is None:
            reference = os.environ.get("EDGENN_REFERENCE", "") not in ("", "0")
        self.reference = reference
        self.tune = Tuner.resolve_mode(tune)
        self.max_memory = limits.resolve(max_memory)
        self._progress = progress
        self._plans: dict[tuple, Plan] = {}
        self._uses = 0
        self._planning = threading.Lock()     # one plan per input shapes, built once
        self._activity = Activity()           # calls in flight (the background tuner's)
        self._background = BackgroundTuning(self)
        self._inputs = {v.name: v for v in self.graph.inputs}
        self._dtypes = {v.name: _np_dtype(v.dtype) for v in self.graph.inputs}
        self._output_names = [v.name for v in self.graph.outputs]
        self._checked_shapes: dict[str, tuple] = {}   # input -> last shape found valid
        shapes = {v.name: tuple(v.shape) for v in self.graph.inputs}
        for name, shape in (input_shapes or {}).items():
            shapes[name] = self._check_shape(name, tuple(int(d) for d in shape))
        if all(_static(s) for s in shapes.values()):
            self._plan(tuple(shapes[v.name] for v in self.graph.inputs))

    # -- metadata (onnxruntime names) -------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return [_arg(v) for v in self.graph.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_arg(v) for v in self.graph.outputs]

    @property
    def plan(self) -> Plan | None:
        """The most recently built plan (for inspection)."""
        return next(reversed(self._plans.values()), None)

    # -- running ---------------------------------------------------------------------------
    def run(self, output_names, input_feed: dict, timings: list | None = None
            ) -> list[np.ndarray]:
        """onnxruntime's run: output names (None = all), {input name: array}. timings: a
        list that receives (step, start, end) of every step (profiling)."""
        feeds = self._check_feeds(input_feed)
        outputs = self._check_outputs(output_names)
        key = tuple(x.shape for x in feeds)
        plan = self._plans.get(key) or self._plan(key)
        self._uses += 1
        plan.last_use = self._uses            # for the LRU (a plain store: no lock needed)
        # BLAS's thread count is taken before the call counts as activity: the background
        # tuner may hold BLAS at another count while it waits for the session to be idle
        if plan.uses_blas:
            with thread_control.blas(self.threads):
                return self._run_active(plan, feeds, outputs, timings)
        return self._run_active(plan, feeds, outputs, timings)

    def _run_active(self, plan: Plan, feeds, outputs, timings) -> list[np.ndarray]:
        thread_control.numba_threads(self.threads)
        self._activity.enter()
        try:
            return plan.run(feeds, outputs, timings)
        finally:
            self._activity.exit()

    def bind(self, output_names, input_feed: dict) -> "BoundCall":
        """A call of the plan for these inputs' shapes with the arrays bound for good
        (runtime/context.py BoundCall): call() runs it, reading the arrays as they are
        then, and returns the outputs as views; close() ends it. For a loop that writes
        its inputs in place between calls."""
        feeds = self._check_feeds(input_feed)
        outputs = self._check_outputs(output_names)
        key = tuple(x.shape for x in feeds)
        plan = self._plans.get(key) or self._plan(key)
        thread_control.numba_threads(self.threads)
        return _Bound(BoundCall(plan, feeds, outputs), self._activity,
                      self.threads if plan.uses_blas else 0)

    def wait_tuned(self, timeout: float | None = None) -> bool:
        """Wait until the background tuner has swapped in every plan it was timing (tune=
        "background"); -> False when `timeout` seconds passed first."""
        return self._background.wait(timeout)

    def _plan(self, key: tuple) -> Plan:
        with self._planning:
            plan = self._plans.get(key)       # another caller may have built it meanwhile
            if plan is not None:
                return plan
            shapes = {v.name: s for v, s in zip(self.graph.inputs, key)}
            background = self.tune == "background" and not self.reference
            plan = self._build(shapes, FIRST if background else self.tune, self._progress)
            plans = dict(self._plans)         # readers see the old dict or the new one
            if len(plans) >= MAX_PLANS:     # evict the least recently used
                plans.pop(min(plans, key=lambda k: getattr(plans[k], "last_use", 0)))
            plans[key] = plan
            self._plans = plans
            if background and plan.untimed:
                self._background.submit(key, lambda gate: self._build(shapes, "cached",
                                                                      gate=gate))
            return plan

    def _swap(self, key: tuple, plan: Plan) -> None:
        """The tuned plan for `key` in place of its first one (if still kept): a new
        table, so a call that has read the old one runs the old plan to its end."""
        with self._planning:
            old = self._plans.get(key)
            if old is not None:
                plan.last_use = getattr(old, "last_use", 0)
                self._plans = {**self._plans, key: plan}

    def _build(self, shapes: dict, mode: str, progress=None, gate=None) -> Plan:
        """The plan for `shapes`, its kernels chosen in tuner mode `mode`; plan.untimed
        counts the choices mode FIRST made without timing them."""
        thread_control.numba_threads(self.threads)
        if self.threads > 1 and not self.reference:
            return self._plan_best_pool(shapes, mode, progress, gate)
        tuner = Tuner(mode, self.threads, progress=progress, gate=gate)
        with thread_control.blas(self.threads):
            plan = build(self.graph, shapes, reference=self.reference, tuner=tuner,
                         max_memory=self.max_memory)
        plan.untimed = tuner.untimed
        return plan

    def _plan_best_pool(self, shapes: dict, mode: str, progress, gate) -> Plan:
        """threads > 1: one plan on OpenBLAS's thread pool, one on edgenn's OpenMP kernels
        (never mixed: each pool's spinning idle workers starve the other's)
        and, where its 1x1 convs can split K (conv_sgemm), the OpenMP plan with them split,
        and where some layers can split their output rows, the OpenMP plan with them split
        so (PLAN_VARIANTS): timed whole, the fastest is kept, the decision cached per CPU."""
        from . import tunecache
        # decided by _time_plans' fastest rounds and cached only when the threads had their
        # cores at every probe between its rounds (below); the older "pool|",
        # "pool-steady|", "pool-fastest|", "pool-checked|" (probed before and after only)
        # and "pool-ksplit|" entries could keep a one-thread plan timed under load, and
        # "pool-probed|" ones were chosen without the "omp-rows" plan
        key = "plan-variant|" + tunecache.graph_key(self.graph, shapes)
        cache = tunecache.load(self.threads) if mode != "off" else {}
        known = cache.get(key, {}).get("pool") if mode in ("cached", FIRST) else None
        if mode in ("off", FIRST) or known in PLAN_VARIANTS:
            plan = self._plan_on_pool(shapes, known or "blas", mode, progress, gate)
            plan.untimed += mode == FIRST and known not in PLAN_VARIANTS
            return plan
        # the OpenMP plan first: its candidates are timed before any BLAS call has left
        # OpenBLAS's workers spinning on the other cores
        args = (mode, progress, gate)
        plans = {"omp": self._plan_on_pool(shapes, "omp", *args)}
        if any(getattr(s.choice.run, "can_split_k", False) for s in plans["omp"].steps):
            plans["omp-ksplit"] = self._plan_on_pool(shapes, "omp-ksplit", *args)
        if plans["omp"].rows_offered:
            plans["omp-rows"] = self._plan_on_pool(shapes, "omp-rows", *args)
        plans["blas"] = self._plan_on_pool(shapes, "blas", *args)
        timing = lambda: _time_plans(plans, self.threads)   # noqa: E731
        times, free = gate.measure(timing) if gate is not None else timing()
        best = min(times, key=times.get)
        # a decision timed while the threads shared cores is this session's only
        # (select.CORES_FOR_CACHE)
        if free >= select.CORES_FOR_CACHE:
            cache[key] = {"pool": best, "times": times}
            tunecache.save(self.threads)
        plans[best].pool_times = times
        return plans[best]

    def _plan_on_pool(self, shapes: dict, variant: str, mode: str, progress, gate) -> Plan:
        """The plan whose threaded kernels all run on the variant's pool (PLAN_VARIANTS).
        An OpenMP plan is built (and its candidates timed) with OpenBLAS at one thread: the
        reference outputs the candidates are checked against call BLAS, whose workers
        would otherwise spin on the other cores while the OpenMP candidates are timed."""
        pool, k_split, split_rows = PLAN_VARIANTS[variant]
        tuner = Tuner(mode, self.threads, progress=progress, pool=pool, k_split=k_split,
                      split_rows=split_rows, gate=gate)
        with thread_control.blas(1 if pool == "omp" else self.threads):
            plan = build(self.graph, shapes, tuner=tuner, max_memory=self.max_memory)
        plan.untimed = tuner.untimed
        plan.pool = pool
        plan.variant = variant
        plan.rows_offered = tuner.rows_offered
        return plan

    def _check_outputs(self, output_names) -> list[str]:
        known = self._output_names
        if output_names is None:
            return known
        if isinstance(output_names, str):
            output_names = [output_names]
        bad = [n for n in output_names if n not in known]
        if bad:
            raise InputError(f"unknown output name(s) {bad}; the model's outputs are {known}")
        return list(output_names)

    def _check_feeds(self, input_feed: dict) -> list[np.ndarray]:
        if not isinstance(input_feed, dict):
            raise InputError("inputs must be a dict {input name: array}")
        if input_feed.keys() != self._inputs.keys():
            unknown = [k for k in input_feed if k not in self._inputs]
            missing = [k for k in self._inputs if k not in input_feed]
            expected = ", ".join(f"{v.name} {v.dtype}{list(v.shape)}" for v in self.graph.inputs)
            raise InputError(f"unknown input(s) {unknown}, missing input(s) {missing}; "
                             f"the model expects: {expected}")
        feeds = []
        for v in self.graph.inputs:
            x = input_feed[v.name]
            if not isinstance(x, np.ndarray):
                x = np.asarray(x)
            want = self._dtypes[v.name]
            if x.dtype != want if want is not None else x.dtype.name != v.dtype:
                raise InputError(f"input {v.name!r} must be {v.dtype}, got {x.dtype.name}")
            if self._checked_shapes.get(v.name) != x.shape:     # the same shape as last time
                self._checked_shapes[v.name] = self._check_shape(v.name, x.shape)
            feeds.append(x)
        return feeds

    def _check_shape(self, name: str, shape: tuple) -> tuple:
        want = self._inputs[name].shape if name in self._inputs else None
        if want is None:
            raise InputError(f"unknown input {name!r}; inputs are {list(self._inputs)}")
        ok = len(shape) == len(want) and all(
            not isinstance(w, int) or w < 0 or w == s for w, s in zip(want, shape))
        if not ok or any(s < 0 for s in shape):
            raise InputError(f"input {name!r} has shape {tuple(shape)}, the model expects "
                             f"{tuple(want)} (str = any size)")
        return tuple(shape)


class _Bound:
    """A BoundCall whose calls count as the session's activity (the background tuner
    times only while no call is in flight)."""

    def __init__(self, call, activity, blas_threads: int):
        self._call, self._activity, self._blas = call, activity, blas_threads

    def __call__(self) -> list[np.ndarray]:
        if self._blas:         # before the activity: see InferenceSession.run
            with thread_control.blas(self._blas):
                return self._active()
        return self._active()

    def _active(self) -> list[np.ndarray]:
        self._activity.enter()
        try:
            return self._call()
        finally:
            self._activity.exit()

    def close(self) -> None:
        self._call.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _np_dtype(name: str):
    """The numpy dtype of an input (compared per run, cheaper than dtype.name), or None
    for a name numpy does not know by itself (bfloat16 before ml_dtypes is imported)."""
    try:
        return np.dtype(name)
    except TypeError:
        return None


def _static(shape) -> bool:
    return all(isinstance(d, int) and d >= 0 for d in shape)


def _arg(v) -> NodeArg:
    return NodeArg(v.name, list(v.shape), f"tensor({_ONNX_TYPE.get(v.dtype, v.dtype)})", v.dtype)


def _run(plan: Plan, threads: int, feeds, outputs, timings=None) -> list[np.ndarray]:
    """One call of `plan` with the session's thread counts (runtime/threads.py); with a
    `timings` list, each step's (step, start, end) is appended to it."""
    thread_control.numba_threads(threads)
    if plan.uses_blas:
        with thread_control.blas(threads):
            return plan.run(feeds, outputs, timings)
    return plan.run(feeds, outputs, timings)


# rounds of _time_plans: at least PLAN_ROUNDS[0], then more up to PLAN_ROUNDS[1] while
# the timing has taken less than PLAN_TIMING_S: plan variants often differ by a few
# percent, less than a few rounds' noise.
PLAN_ROUNDS, PLAN_TIMING_S = (9, 40), 2.0


def _time_plans(plans: dict[str, Plan], threads: int,
                rounds: tuple[int, int] = PLAN_ROUNDS) -> tuple[dict[str, float], float]:
    """-> (seconds of a whole run of each plan, the least share of their cores the threads
    had at a probe before, between or after the rounds: select.cores_free).

    Each plan's time is the fastest of its whole runs on zero inputs (rounds: PLAN_ROUNDS,
    PLAN_TIMING_S) in the steady state of back-to-back calls, the rounds interleaved
    across the plans, so a burst of load on a shared machine slows every plan alike
    instead of deciding (and caching) the choice.

    Each sample is the second of two runs in a row: after the pause for OpenBLAS's
    spinning workers (_let_blas_idle) the other core may be asleep, and the first run
    after it pays for waking it (and for cold caches), which would favour one-thread
    plans."""
    import time
    args = {}
    for pool, plan in plans.items():
        feeds = [np.zeros(shape, dtype) for dtype, shape in plan.input_specs]
        args[pool] = (plan, feeds, list(plan.output_refs))
    samples = {pool: [] for pool in plans}
    # probed at every round, not only before and after: the second core may be taken for
    # part of the timing only
    free = [select.cores_free(threads)]
    start = time.perf_counter()
    for r in range(rounds[1]):
        if r >= rounds[0] and time.perf_counter() - start > PLAN_TIMING_S:
            break
        background.round_start()   # a background tuner's round waits for an idle session
        for pool, (plan, feeds, names) in args.items():
            _run(plan, threads, feeds, names)
            t0 = time.perf_counter()
            _run(plan, threads, feeds, names)
            samples[pool].append(time.perf_counter() - t0)
            _let_blas_idle(plan)
        free.append(select.cores_free(threads))
    # the fastest round, not the median: a shared machine's load only ever slows a run,
    # and it slows most the plan that uses both cores most
    return {pool: float(np.min(s)) for pool, s in samples.items()}, min(free)


def _let_blas_idle(plan: Plan) -> None:
    """After a run of a plan that called BLAS, wait until OpenBLAS's workers sleep (threads.
    wait_blas_idle), so the next plan timed runs on free cores. Steady state never mixes
    the pools."""
    if plan.uses_blas:
        thread_control.wait_blas_idle()
