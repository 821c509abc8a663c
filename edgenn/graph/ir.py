"""The IR: a Graph of Nodes over named tensors.

Tensors are identified by name. Constant tensors (weights) live in `Graph.consts`;
graph inputs and outputs are `ValueInfo`s whose shapes may hold symbolic dims (str)
that are bound to integers at load. Node attributes are plain Python values (int,
float, str, list) or numpy arrays, so the graph serializes to JSON without pickle.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import GraphError

Dim = int | str  # an int, or a symbolic name bound at load
# control-flow ops: the attributes holding their bodies (Graphs). A body reads tensors of
# the enclosing graph only through the node's trailing inputs, whose names inside the body
# are attrs["captures"] (positionally): renaming a tensor outside never reaches inside.
BODY_ATTRS = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}


def fresh_name(taken: set, prefix: str, sep: str = "_") -> str:
    """`prefix`, or prefix + sep + k for the first k making it new; recorded in `taken`."""
    name, k = prefix, 0
    while name in taken:
        k += 1
        name = f"{prefix}{sep}{k}"
    taken.add(name)
    return name


@dataclass
class ValueInfo:
    name: str
    dtype: str                         # "" only in a body: left to inference
    shape: tuple[Dim, ...] | None      # None only in a body: rank unknown

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) and d >= 0
                                              for d in self.shape)


@dataclass
class Node:
    op: str
    inputs: list[str]          # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:
        return f"{self.op}({self.name})"

    def bodies(self) -> list["Graph"]:
        """The sub-graphs of a control-flow node (If branches, Loop / Scan body)."""
        return [self.attrs[a] for a in BODY_ATTRS.get(self.op, ())
                if isinstance(self.attrs.get(a), Graph)]

    @property
    def captures(self) -> list[str]:
        """Inside-the-body names of the tensors the last len(captures) inputs carry."""
        return list(self.attrs.get("captures") or [])


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    consts: dict[str, np.ndarray]
    meta: dict = field(default_factory=dict)  # opset, producer, "fusions": Counter-like dict

    # -- queries ---------------------------------------------------------------------------
    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    uses.setdefault(i, []).append(n)
        return uses

    def output_names(self) -> set[str]:
        return {v.name for v in self.outputs}

    def op_counts(self) -> Counter:
        return Counter(n.op for n in self.nodes)

    def unique_name(self, prefix: str) -> str:
        taken = self._taken_names()
        for i in itertools.count():
            name = f"{prefix}_{i}" if i else prefix
            if name not in taken:
                taken.add(name)
                return name
        raise AssertionError

    def _taken_names(self) -> set[str]:
        cache = self.__dict__.setdefault("_names", set())
        cache.update(self.consts)
        cache.update(v.name for v in self.inputs)
        for n in self.nodes:
            cache.update(n.outputs)
            cache.add(n.name)
        return cache

    def add_const(self, prefix: str, value: np.ndarray) -> str:
        name = self.unique_name(prefix)
        self.consts[name] = np.require(value, requirements="C")
        return name

    def note_fusion(self, kind: str, count: int = 1) -> None:
        fusions = self.meta.setdefault("fusions", {})
        fusions[kind] = fusions.get(kind, 0) + count

    # -- edits -----------------------------------------------------------------------------
    def replace_uses(self, old: str, new: str) -> None:
        """Point every consumer (and graph output) of tensor `old` at `new`."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        for v in self.outputs:
            if v.name == old:
                # keep the user-visible output name: rename the producer's output instead
                raise GraphError(f"cannot reroute graph output {old!r}")

    def free_names(self) -> list[str]:
        """Tensors the nodes (or outputs) read that this graph does not define: for a
        control-flow body, what it reads from the enclosing scope. In first-use order."""
        defined = set(self.consts) | {v.name for v in self.inputs} | {""}
        for n in self.nodes:
            defined.update(n.outputs)
        free: dict[str, None] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i not in defined:
                    free[i] = None
        for v in self.outputs:
            if v.name not in defined:
                free[v.name] = None
        return list(free)

    def toposort(self, outer: frozenset = frozenset()) -> None:
        """Order nodes so every producer precedes its consumers; raise on cycles. outer:
        names a body may read from its node's captures."""
        available = set(self.consts) | {v.name for v in self.inputs} | {""} | set(outer)
        pending = list(self.nodes)
        ordered: list[Node] = []
        while pending:
            rest = []
            for n in pending:
                if all(i in available for i in n.inputs):
                    ordered.append(n)
                    available.update(n.outputs)
                else:
                    rest.append(n)
            if len(rest) == len(pending):
                missing = sorted({i for n in rest for i in n.inputs if i not in available
                                  and not any(i in m.outputs for m in rest)})
                where = ", ".join(f"{n.op} {n.name!r}" for n in rest[:5])
                if missing:
                    raise GraphError(f"node(s) {where} read undefined tensor(s) {missing[:5]}")
                raise GraphError(f"graph has a cycle through {where}")
            pending = rest
        self.nodes = ordered

    def validate(self, outer: frozenset = frozenset()) -> None:
        """Check names are defined once, inputs exist, outputs are produced; sort nodes.
        Bodies of control-flow nodes too, each reading only its node's captures."""
        defined: dict[str, str] = {name: "captured" for name in outer}
        defined.update({name: "constant" for name in self.consts})
        for v in self.inputs:
            if v.name in defined:
                raise GraphError(f"graph input {v.name!r} is also a constant")
            defined[v.name] = "graph input"
        for n in self.nodes:
            if not n.name:
                raise GraphError(f"a {n.op} node has no name")
            for out in n.outputs:
                if out and out in defined:
                    raise GraphError(f"{n.op} node {n.name!r} writes {out!r}, "
                                     f"already defined by {defined[out]}")
                if out:
                    defined[out] = f"node {n.name!r}"
        for v in self.outputs:
            if v.name not in defined:
                raise GraphError(f"graph output {v.name!r} is produced by no node")
        self.toposort(outer)
        for n in self.nodes:
            bodies = n.bodies()
            if len(bodies) != len(BODY_ATTRS.get(n.op, ())):
                raise GraphError(f"{n.op} node {n.name!r} lacks its body graph(s)")
            caps = n.captures
            if bodies and (not all(isinstance(c, str) and c for c in caps)
                           or len(caps) > len(n.inputs) or len(set(caps)) != len(caps)):
                raise GraphError(f"{n.op} node {n.name!r}: captures {caps!r} do not match "
                                 f"its {len(n.inputs)} inputs")
            for body in bodies:
                body.validate(frozenset(caps))
