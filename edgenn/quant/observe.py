"""Running a graph over batches while reading intermediate tensors.

The session returns graph outputs only, so `with_outputs` builds a copy of the graph
whose outputs also list the tensors to observe (nodes and constants are shared, never
modified). The planner keeps those tensors alive to the end of the run; calibration models
are small enough for that.
"""
from __future__ import annotations

import copy

import numpy as np

from ..graph.ir import Graph, Node, ValueInfo


def copy_graph(graph: Graph) -> Graph:
    """A structural copy: new node objects and lists, its own meta (the passes write into
    meta's dicts: weight_codecs, quantization, fusions), shared constant arrays."""
    nodes = [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.name)
             for n in graph.nodes]
    meta = copy.deepcopy(graph.meta)
    return Graph(nodes, list(graph.inputs), list(graph.outputs), dict(graph.consts), meta)


def with_outputs(graph: Graph, names) -> Graph:
    """`graph` (shared nodes) whose outputs are its own plus `names` (in that order)."""
    known = {v.name for v in graph.outputs}
    extra = [ValueInfo(n, "float32", ()) for n in dict.fromkeys(names) if n not in known]
    return Graph(graph.nodes, list(graph.inputs), list(graph.outputs) + extra,
                 graph.consts, dict(graph.meta))


class Runner:
    """Runs one graph (and optionally a set of extra tensors) batch after batch."""

    def __init__(self, graph: Graph, observe=(), reference: bool = False, threads: int = 1):
        from ..runtime.session import InferenceSession
        self.graph = with_outputs(graph, observe) if observe else graph
        self.output_names = [v.name for v in graph.outputs]
        self.observe = [n for n in dict.fromkeys(observe)]
        self.session = InferenceSession(self.graph, threads=threads, reference=reference,
                                        tune="off")

    def run(self, feed: dict) -> dict[str, np.ndarray]:
        """{name: array} of the graph outputs and the observed tensors."""
        names = list(dict.fromkeys(self.output_names + self.observe))
        values = self.session.run(names, feed)
        return dict(zip(names, values))

    def outputs(self, feed: dict) -> list[np.ndarray]:
        return self.session.run(self.output_names, feed)


def run_outputs(graph: Graph, batches, reference: bool = False, threads: int = 1
                ) -> list[np.ndarray]:
    """The graph outputs over all batches, concatenated along axis 0 (per output)."""
    runner = Runner(graph, reference=reference, threads=threads)
    per_batch = [runner.outputs(feed) for feed in batches]
    return [np.concatenate([b[k] for b in per_batch]) if per_batch[0][k].ndim else
            np.stack([b[k] for b in per_batch]) for k in range(len(per_batch[0]))]
