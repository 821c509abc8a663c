"""Load-time planning: specialize the graph to concrete input shapes, pick a kernel per
node, plan memory, and bind everything into a flat list of steps.

`Plan.run` walks that list and does nothing else: no look-ups, no shape checks, no
allocation beyond what a kernel cannot avoid.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from ..errors import UnsupportedOpError
from ..graph.infer import infer, unsupported_ops
from ..graph.ir import Graph, Node
from ..oplist import load_kernels
from ..registry import TensorInfo
from . import memory
from .select import Choice, Tuner, choose

# ops whose output is the input's bytes under another shape: planned as views, no step
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


@dataclass
class Step:
    node: Node
    choice: Choice
    call: callable


@dataclass
class Plan:
    input_names: list[str]
    input_buffers: list[np.ndarray]
    steps: list[Step]
    outputs: dict[str, np.ndarray]         # output name -> buffer view or constant
    planned_bytes: int = 0
    folded_nodes: int = 0
    calls: list = field(default_factory=list)
    pool: str = "blas"                     # threads > 1: whose thread pool the kernels use
    pool_times: dict = field(default_factory=dict)   # pool -> median s, when both were timed

    def run(self, feeds: list[np.ndarray], output_names: list[str]) -> list[np.ndarray]:
        for buf, x in zip(self.input_buffers, feeds):
            np.copyto(buf, x)
        for call in self.calls:
            call()
        return [self.outputs[name].copy() for name in output_names]

    def profile(self, feeds: list[np.ndarray], rounds: int = 5) -> list[tuple[Step, float]]:
        """Median seconds of every step over `rounds` runs: where the time goes."""
        import time
        times = np.zeros((rounds, len(self.steps)))
        for r in range(rounds):
            for buf, x in zip(self.input_buffers, feeds):  # buffers are reused: refill
                np.copyto(buf, x)
            for k, step in enumerate(self.steps):
                t0 = time.perf_counter()
                step.call()
                times[r, k] = time.perf_counter() - t0
        return list(zip(self.steps, np.median(times, axis=0)))


def specialize(graph: Graph, shapes: dict[str, tuple[int, ...]]
               ) -> tuple[list[Node], dict[str, TensorInfo]]:
    """Bind input shapes; fold every node whose outputs become constant.
    -> (remaining nodes in order, info of every tensor)."""
    infos = infer(graph, shapes)
    live = [n for n in graph.nodes
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
        int(np.prod(src.shape)) == int(np.prod(dst.shape))


def build(graph: Graph, shapes: dict[str, tuple[int, ...]], reference: bool = False,
          tuner: Tuner | None = None) -> Plan:
    load_kernels()
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedOpError(missing)
    nodes, infos = specialize(graph, shapes)
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
    lifetimes = [memory.Lifetime(t, _nbytes(infos[t]), first[t], last[t]) for t in first]
    owner, capacities = memory.assign(lifetimes)
    blocks = memory.allocate(capacities)

    # 2. arrays every step will read and write ------------------------------------------
    arrays: dict[str, np.ndarray] = {}
    for t, b in owner.items():
        arrays[t] = memory.view(blocks[b], infos[t].dtype, infos[t].shape)
    for t, r in root.items():
        arrays[t] = arrays[r].reshape(infos[t].shape)

    def array_of(name: str) -> np.ndarray | None:
        if not name:
            return None
        if infos[name].value is not None:
            return infos[name].value
        return arrays[name]

    # 3. kernels --------------------------------------------------------------------------
    steps = []
    for k, n in enumerate(steps_nodes):
        ins = [infos[i] if i else None for i in n.inputs]
        outs = [infos[o] if o else None for o in n.outputs]
        choice = choose(n, ins, outs, reference=reference, tuner=tuner)
        if tuner is not None and tuner.progress is not None:
            tuner.progress(k + 1, len(steps_nodes))
        in_arrays = [array_of(i) for i in n.inputs]
        out_arrays = [arrays[o] if o else None for o in n.outputs]  # None: omitted output
        call = functools.partial(choice.run, in_arrays, out_arrays)
        steps.append(Step(n, choice, call))
    if tuner is not None:
        tuner.finish()
    outputs = {name: array_of(name) for name in output_names}
    plan = Plan([v.name for v in graph.inputs], [arrays[v.name] for v in graph.inputs],
                steps, outputs, planned_bytes=sum(capacities),
                folded_nodes=len(graph.nodes) - len(nodes))
    plan.calls = [s.call for s in steps]
    return plan


def _nbytes(info: TensorInfo) -> int:
    return int(np.prod(info.shape, dtype=np.int64)) * np.dtype(info.dtype).itemsize
