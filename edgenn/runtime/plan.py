"""Load-time planning: specialize the graph to concrete input shapes, pick a kernel per
node, plan memory, and bind everything into a flat list of steps.

`Plan.run` takes an execution context (runtime/context.py) and walks its bound list of
steps, nothing else: no look-ups, no shape checks, no allocation beyond what a kernel
cannot avoid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedOpError
from ..graph.infer import infer, unsupported_ops
from ..graph.ir import Graph, Node
from ..kernels.plan_context import PlanContext, planning
from ..oplist import load_kernels
from ..registry import TensorInfo
from . import limits, memory
from .context import ContextPool, scratch_name
from .fuse_steps import conv_pair_candidates, pair_step
from .select import Choice, Tuner, choose, time_side_by_side

# ops whose output is the input's bytes under another shape: planned as views, no step
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


@dataclass
class Step:
    node: Node
    choice: Choice
    in_refs: list       # per input: ("const", array) | ("tensor", name) | None (omitted)
    out_refs: list      # per output: ("tensor", name) | None (omitted)


@dataclass
class Layout:
    """Where every tensor of one context lives: block capacities, tensor -> block, view
    tensor -> the tensor owning its bytes, and each tensor's (dtype, shape)."""
    capacities: list[int]
    owner: dict[str, int]
    root: dict[str, str]
    tensors: dict[str, tuple[str, tuple[int, ...]]]


class Plan:
    """Bound kernels and the memory layout for one set of input shapes; immutable once
    built and shared by every caller: each run takes an execution context (its own
    activations and scratch) from the plan's pool (runtime/context.py)."""

    def __init__(self, input_names: list[str], input_specs: list[tuple[str, tuple]],
                 steps: list[Step], output_refs: dict, layout: Layout, scratch: list,
                 folded_nodes: int = 0, max_memory: int | None = None):
        self.input_names = input_names
        self.input_specs = input_specs          # (dtype, shape) per input
        self.steps = steps
        self.output_refs = output_refs          # output name -> ref, as Step's
        self.layout = layout
        self.scratch = scratch                  # every kernel's scratch handles, by slot
        self.folded_nodes = folded_nodes
        self.token = object()                   # what the scratch handles resolve against
        self.planned_bytes = sum(layout.capacities)      # activations + transient scratch
        self.persistent_bytes = sum(h.nbytes for h in scratch if h.persistent)
        self.scratch_bytes = sum(h.nbytes for h in scratch if not h.persistent)
        self.pool = "blas"                      # threads > 1: whose thread pool kernels use
        self.variant = "blas"                   # its session.PLAN_VARIANTS key
        self.pool_times: dict = {}              # variant -> s, its fastest timed round
        self.rows_offered = False               # a row-split kernel applied to some step
        self.uses_blas = any(s.choice.pool == "blas" for s in steps)
        self.untimed = 0                        # choices made untimed (select.FIRST)
        # contexts are made while they fit the limit together; past it, callers wait
        self.contexts = ContextPool(self, max_memory)

    @property
    def context_bytes(self) -> int:
        """Memory of one execution context."""
        return self.planned_bytes + self.persistent_bytes

    def run(self, feeds: list[np.ndarray], output_names: list[str],
            timings: list | None = None) -> list[np.ndarray]:
        """One call in a context of the pool (timings: see ExecutionContext.run)."""
        ctx = self.contexts.acquire()
        try:
            return ctx.run(feeds, output_names, timings)
        finally:
            self.contexts.release(ctx)

    def profile(self, feeds: list[np.ndarray], rounds: int = 5) -> list[tuple[Step, float]]:
        """Median seconds of every step over `rounds` runs: where the time goes."""
        import time
        from ..kernels import scratch
        ctx = self.contexts.acquire()
        try:
            times = np.zeros((rounds, len(self.steps)))
            with scratch.active(self.token, ctx.scratch):
                for r in range(rounds):
                    for buf, x in zip(ctx.inputs, feeds):   # buffers are reused: refill
                        np.copyto(buf, x)
                    for k, call in enumerate(ctx.calls):
                        t0 = time.perf_counter()
                        call()
                        times[r, k] = time.perf_counter() - t0
        finally:
            self.contexts.release(ctx)
        return list(zip(self.steps, np.median(times, axis=0)))


def specialize(graph: Graph, shapes: dict[str, tuple[int, ...]]
               ) -> tuple[list[Node], dict[str, TensorInfo]]:
    """Bind input shapes; fold every node whose outputs become constant; an If whose
    condition became constant is replaced by its branch (runtime/control.py: inline),
    repeatedly, as the branch's own shape-guarded Ifs fold in turn.
    -> (remaining nodes in order, info of every tensor)."""
    from .control import inline_constant_ifs
    infos = infer(graph, shapes)
    nodes = graph.nodes
    for _ in range(64):                       # nesting depth of constant Ifs
        inlined = inline_constant_ifs(nodes, infos, graph)
        if inlined is None:
            break
        nodes = inlined
        infos = infer(Graph(nodes, graph.inputs, graph.outputs, graph.consts, graph.meta),
                      shapes)
    live = [n for n in nodes
            if not all(o == "" or infos[o].value is not None for o in n.outputs)]
    # drop nodes no longer needed by what remains (their work was folded away)
    needed = {v.name for v in graph.outputs}
    kept: list[Node] = []
    for n in reversed(live):
        if any(o in needed for o in n.outputs):
            kept.append(n)
            needed.update(i for i in n.inputs if i)
    return kept[::-1], infos


def _is_view(node: Node, infos: dict[str, TensorInfo]) -> bool:
    if node.op not in VIEW_OPS or not node.inputs or not node.inputs[0]:
        return False
    if len([o for o in node.outputs if o]) != 1 or node.outputs[0] == "":
        return False
    src, dst = infos[node.inputs[0]], infos[node.outputs[0]]
    return src.value is None and src.dtype == dst.dtype and \
        math.prod(src.shape) == math.prod(dst.shape)


def build(graph: Graph, shapes: dict[str, tuple[int, ...]], reference: bool = False,
          tuner: Tuner | None = None, max_memory: int | None = None) -> Plan:
    """The plan of `graph` for input `shapes`; kernels are prepared for the tuner's thread
    count and pool (the plan context of kernels/plan_context.py). Every tensor, and one
    execution context as a whole, must fit in `max_memory` bytes (runtime/limits.py):
    checked before the kernels are prepared and before anything is allocated."""
    ctx = PlanContext(tuner.threads, tuner.pool, tuner.k_split) if tuner is not None \
        else PlanContext()
    with planning(ctx):
        return _build(graph, shapes, reference, tuner, limits.resolve(max_memory))


def _check_sizes(graph: Graph, nodes: list[Node], infos: dict, limit: int) -> None:
    """Every runtime tensor fits the limit (named by the node that writes it) and has a
    numeric or bool dtype (a .enn or graph built by hand may claim anything)."""
    odd = [t for t, i in infos.items() if not _numeric(i.dtype)]
    if odd:
        raise UnsupportedOpError({"non-numeric tensor": odd[:8]},
                                 "tensors must be numeric or bool")
    for v in graph.inputs:
        limits.check_tensor(f"input {v.name!r} {tuple(infos[v.name].shape)}",
                            _nbytes(infos[v.name]), limit)
    for n in nodes:
        for o in n.outputs:
            if o and infos[o].value is None:
                limits.check_tensor(f"{n.op} node {n.name!r}: output {o!r} "
                                    f"{infos[o].dtype}{list(infos[o].shape)}",
                                    _nbytes(infos[o]), limit)


def _numeric(dtype: str) -> bool:
    """Not a Python object or string dtype (ml_dtypes' bfloat16 has kind 'V': allowed)."""
    try:
        return np.dtype(dtype).kind not in "OSUM"
    except TypeError:
        return False


def _check_context(lifetimes, capacities, handles, limit: int) -> None:
    total = sum(capacities) + sum(h.nbytes for h in handles if h.persistent)
    if total > limit:
        big = sorted(lifetimes, key=lambda t: -t.nbytes)[:3]
        names = ", ".join(f"{t.name!r} {limits.fmt(t.nbytes)}" for t in big)
        limits.check_tensor(f"one run of this model (largest tensors: {names})", total,
                            limit)


def _build(graph: Graph, shapes: dict[str, tuple[int, ...]], reference: bool,
           tuner: Tuner | None, max_memory: int) -> Plan:
    load_kernels()
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedOpError(missing)
    nodes, infos = specialize(graph, shapes)
    _check_sizes(graph, nodes, infos, max_memory)
    output_names = [v.name for v in graph.outputs]

    # 1. views and lifetimes ------------------------------------------------------------
    root: dict[str, str] = {}          # view tensor -> tensor that owns the bytes
    steps_nodes: list[Node] = []
    for n in nodes:
        if _is_view(n, infos):
            root[n.outputs[0]] = root.get(n.inputs[0], n.inputs[0])
        else:
            steps_nodes.append(n)
    first: dict[str, int] = {v.name: -1 for v in graph.inputs}
    last: dict[str, int] = {}
    for s, n in enumerate(steps_nodes):
        for o in n.outputs:
            if o:
                first[o] = s
                last.setdefault(o, s)  # an unread output still needs a place to go
        for i in n.inputs:
            if i and infos[i].value is None:
                r = root.get(i, i)
                last[r] = max(last.get(r, -1), s)
    end = len(steps_nodes)
    for name in output_names:
        r = root.get(name, name)
        if infos[r].value is None:
            last[r] = end
    for v in graph.inputs:
        last.setdefault(v.name, -1)
    # 2. kernels (their scratch is planned with the activations) ----------------------------
    def ref(name: str):
        if not name:
            return None
        if infos[name].value is not None:
            return ("const", infos[name].value)
        return ("tensor", name)

    def info(names):
        return [infos[i] if i else None for i in names]

    steps, handles = [], []
    sizes: dict[str, int] = {}          # transient scratch -> bytes
    pairs = {} if reference else conv_pair_candidates(steps_nodes, root, output_names)
    ahead: dict[int, tuple[Node, object]] = {}   # step -> (node, choice) made a step early
    for k, n in enumerate(steps_nodes):
        if k in ahead:
            n, choice = ahead.pop(k)
        else:
            choice = choose(n, info(n.inputs), info(n.outputs), reference=reference,
                            tuner=tuner)
        if tuner is not None and tuner.progress is not None:
            tuner.progress(k + 1, len(steps_nodes))
        if k in pairs and n is steps_nodes[k]:   # this conv and the next as one step?
            nxt, c2, fused = pair_step(
                pairs[k], choice,
                lambda m, **kw: choose(m, info(m.inputs), info(m.outputs), tuner=tuner, **kw),
                lambda choices: time_side_by_side((n, pairs[k][1]), pairs[k][0], info,
                                                  choices, tuner))
            ahead[k + 1] = (nxt, c2)
            if fused:    # it runs at k + 1: its input is read there, the middle is gone
                del first[n.outputs[0]], last[n.outputs[0]]
                x = root.get(nxt.inputs[0], nxt.inputs[0])
                last[x] = max(last.get(x, -1), k + 1)
                continue
        for h in choice.scratch:
            h.slot = len(handles)
            handles.append(h)
            if not h.persistent:          # transient: alive during its own step only
                first[scratch_name(h.slot)] = last[scratch_name(h.slot)] = k
                sizes[scratch_name(h.slot)] = h.nbytes
        steps.append(Step(n, choice, [ref(i) for i in n.inputs],
                          [("tensor", o) if o else None for o in n.outputs]))
    if tuner is not None:
        tuner.finish()

    # 3. memory: sizes are known before anything is allocated -----------------------------
    lifetimes = [memory.Lifetime(t, sizes[t] if t in sizes else _nbytes(infos[t]),
                                 first[t], last[t]) for t in first]
    owner, capacities = memory.assign(lifetimes)
    _check_context(lifetimes, capacities, handles, max_memory)
    tensors = {t: (infos[t].dtype, tuple(infos[t].shape))
               for t in list(owner) + list(root) if t not in sizes}
    layout = Layout(capacities, owner, root, tensors)
    plan = Plan([v.name for v in graph.inputs],
                [(infos[v.name].dtype, tuple(infos[v.name].shape)) for v in graph.inputs],
                steps, {name: ref(name) for name in output_names}, layout, handles,
                folded_nodes=len(graph.nodes) - len(nodes), max_memory=max_memory)
    for h in handles:
        h.token = plan.token
    return plan


def _nbytes(info: TensorInfo) -> int:
    return math.prod(info.shape) * np.dtype(info.dtype).itemsize   # Python ints: no overflow
