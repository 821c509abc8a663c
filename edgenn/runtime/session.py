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
from .plan import Plan, build
from . import select
from .select import Tuner

_ONNX_TYPE = {"float32": "float", "float64": "double", "int64": "int64", "int32": "int32",
              "int8": "int8", "uint8": "uint8", "bool": "bool", "float16": "float16",
              "int16": "int16", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}
MAX_PLANS = 8  # plans kept for distinct input shapes (least recently used evicted)
# threads > 1: the plans a session times whole (_plan_best_pool): variant -> (the pool its
# threaded kernels run on, whether the 1x1 convs that can split K do, whether the layers
# that can split their output rows do). The threads' caches decide it in a model, not in a
# layer timed alone:
# - a projection whose threads split its output channels reads every channel the
#   depthwise layer before it wrote on the other core, and the next block's depthwise
#   layer then writes into lines both cores hold (8x the cost of lines only the writer
#   holds, AMD EPYC 25/17); split by K, each thread reads only what it wrote. MobileNetV2,
#   2 threads, same CPU: 4.24-4.27 ms against 4.32-4.35 (25th percentiles of 400-600
#   interleaved runs), its projections 4 us slower alone.
# - on the large planes (56x56, 28x28) a projection's threads split the pixels, in the
#   same bands of rows that row-split depthwise layers give their threads: a stage's
#   tensors then stay on the core that wrote them. Alone, each depthwise layer times the
#   same either way (a tie at 56x56, channels faster at 28x28); in MobileNetV2 at 2
#   threads the rows plan ran 0.967-0.975x the K-split one (medians of 500 interleaved
#   runs, three processes, AMD EPYC 25/17).
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
    tune: "off" | "cached" (default) | "full", or EDGENN_TUNE: how kernels are chosen at
        load (runtime/select.py); `progress(done, total)` is called while planning.
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
        self._inputs = {v.name: v for v in self.graph.inputs}
        self._dtypes = {v.name: _np_dtype(v.dtype) for v in self.graph.inputs}
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
        return _run(plan, self.threads, feeds, outputs, timings)

    def _plan(self, key: tuple) -> Plan:
        with self._planning:
            plan = self._plans.get(key)       # another caller may have built it meanwhile
            if plan is not None:
                return plan
            shapes = {v.name: s for v, s in zip(self.graph.inputs, key)}
            thread_control.numba_threads(self.threads)
            if self.threads > 1 and not self.reference:
                plan = self._plan_best_pool(shapes)
            else:
                tuner = Tuner(self.tune, self.threads, progress=self._progress)
                with thread_control.blas(self.threads):
                    plan = build(self.graph, shapes, reference=self.reference, tuner=tuner,
                                 max_memory=self.max_memory)
            plans = dict(self._plans)         # readers see the old dict or the new one
            if len(plans) >= MAX_PLANS:     # evict the least recently used
                plans.pop(min(plans, key=lambda k: getattr(plans[k], "last_use", 0)))
            plans[key] = plan
            self._plans = plans
            return plan

    def _plan_best_pool(self, shapes: dict) -> Plan:
        """threads > 1: one plan on OpenBLAS's thread pool, one on edgenn's OpenMP kernels
        (mixed, each pool's spinning idle workers starve the other's: measured 2-9x slower)
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
        cache = tunecache.load(self.threads) if self.tune != "off" else {}
        known = cache.get(key, {}).get("pool") if self.tune == "cached" else None
        if self.tune == "off" or known in PLAN_VARIANTS:
            return self._plan_on_pool(shapes, known or "blas")
        # the OpenMP plan first: its candidates are timed before any BLAS call has left
        # OpenBLAS's workers spinning on the other cores
        plans = {"omp": self._plan_on_pool(shapes, "omp")}
        if any(getattr(s.choice.run, "can_split_k", False) for s in plans["omp"].steps):
            plans["omp-ksplit"] = self._plan_on_pool(shapes, "omp-ksplit")
        if plans["omp"].rows_offered:
            plans["omp-rows"] = self._plan_on_pool(shapes, "omp-rows")
        plans["blas"] = self._plan_on_pool(shapes, "blas")
        times, free = _time_plans(plans, self.threads)
        best = min(times, key=times.get)
        # a decision timed while the threads shared cores is this session's only
        # (select.CORES_FOR_CACHE)
        if free >= select.CORES_FOR_CACHE:
            cache[key] = {"pool": best, "times": times}
            tunecache.save(self.threads)
        plans[best].pool_times = times
        return plans[best]

    def _plan_on_pool(self, shapes: dict, variant: str) -> Plan:
        """The plan whose threaded kernels all run on the variant's pool (PLAN_VARIANTS).
        An OpenMP plan is built (and its candidates timed) with OpenBLAS at one thread: the
        reference outputs each node's candidates are checked against call BLAS, and at two
        threads its workers then spun on the second core through the first ~0.1 s of
        timing, so the OpenMP candidates were timed sharing a core (AMD EPYC 25/17, 2
        threads: MobileNetV2's stem conv_direct_8x48__avx512f_mt read 586 us for its 143,
        the one-thread kernel kept)."""
        pool, k_split, split_rows = PLAN_VARIANTS[variant]
        tuner = Tuner(self.tune, self.threads, progress=self._progress, pool=pool,
                      k_split=k_split, split_rows=split_rows)
        with thread_control.blas(1 if pool == "omp" else self.threads):
            plan = build(self.graph, shapes, tuner=tuner, max_memory=self.max_memory)
        plan.pool = pool
        plan.variant = variant
        plan.rows_offered = tuner.rows_offered
        return plan

    def _check_outputs(self, output_names) -> list[str]:
        known = [v.name for v in self.graph.outputs]
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
        unknown = [k for k in input_feed if k not in self._inputs]
        missing = [k for k in self._inputs if k not in input_feed]
        if unknown or missing:
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
            self._check_shape(v.name, x.shape)
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


def _np_dtype(name: str):
    """The numpy dtype of an input (compared per run: dtype.name costs ~10 us), or None
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
# the timing has taken less than PLAN_TIMING_S. MobileNetV2's three OpenMP plans at 2
# threads (AMD EPYC 25/17) differ by 1-3%: the fastest of 9 rounds picked each of the
# three in four timings, the fastest of 40 the same one in three.
PLAN_ROUNDS, PLAN_TIMING_S = (9, 40), 2.0


def _time_plans(plans: dict[str, Plan], threads: int,
                rounds: tuple[int, int] = PLAN_ROUNDS) -> tuple[dict[str, float], float]:
    """-> (seconds of a whole run of each plan, the least share of their cores the threads
    had at a probe before, between or after the rounds: select.cores_free).

    Each plan's time is the fastest of its whole runs on zero inputs (rounds: PLAN_ROUNDS,
    PLAN_TIMING_S) in the steady state of back-to-back calls, the rounds interleaved across the plans: a burst
    of load on a shared machine then slows every plan alike instead of deciding (and caching) the
    choice. Seen on a 2-core guest timing the pools one after the other: the OpenMP plan
    measured 1.3x slower while the second core was busy, and MobileNetV2 ran 10 ms
    instead of 7.5.

    Each sample is the second of two runs in a row: after the pause for OpenBLAS's
    spinning workers (_let_blas_idle) the other core's vCPU is asleep, and the first run
    after it pays for waking it (and for cold caches). Timed alone, that first run made a
    one-layer 1x1 conv's OpenMP plan read 1.5-5.7 ms for its 0.15 ms steady state (the
    one-thread plan: 0.26 -> 0.53; AMD EPYC 26/2 (Zen 5), 2 threads), so every small graph
    was given the one-thread plan, and a family's 2-thread probe layers ran on one core."""
    import time
    args = {}
    for pool, plan in plans.items():
        feeds = [np.zeros(shape, dtype) for dtype, shape in plan.input_specs]
        args[pool] = (plan, feeds, list(plan.output_refs))
    samples = {pool: [] for pool in plans}
    # probed at every round: probes before and after only had let MobileNetV2's one-thread
    # plan be cached at 2 threads from a timing with the second vCPU taken in between
    # (every plan ~7 ms; its OpenMP plans run 3.8; AMD EPYC 25/17)
    free = [select.cores_free(threads)]
    start = time.perf_counter()
    for r in range(rounds[1]):
        if r >= rounds[0] and time.perf_counter() - start > PLAN_TIMING_S:
            break
        for pool, (plan, feeds, names) in args.items():
            _run(plan, threads, feeds, names)
            t0 = time.perf_counter()
            _run(plan, threads, feeds, names)
            samples[pool].append(time.perf_counter() - t0)
            _let_blas_idle(plan)
        free.append(select.cores_free(threads))
    # the fastest round, not the median: a shared machine's load only ever slows a run, and
    # it slows the plan that uses both cores most; the median of 7 rounds had a burst of it
    # choose (and cache) the one-thread kernels of the BLAS plan for MobileNetV2 int8, 3.0
    # ms at 2 threads where its OpenMP plan runs 2.0 (AMD EPYC 25/17)
    return {pool: float(np.min(s)) for pool, s in samples.items()}, min(free)


def _let_blas_idle(plan: Plan) -> None:
    """After a run of a plan that called BLAS, wait until OpenBLAS's workers sleep (threads.
    wait_blas_idle), so the next plan timed runs on free cores: alternating the plans had
    ResNet-18's OpenMP plan timed at 31.9 ms (12.6 alone) on Zen 5 at 2 threads, the BLAS
    plan chosen and cached. Steady state never mixes the pools."""
    if plan.uses_blas:
        thread_control.wait_blas_idle()
