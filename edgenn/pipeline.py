"""Model chaining: several models and the logic between them as one graph, one .enn, one
session (xNN's model chaining).

    p = edgenn.compose({"audio": ("float32", (1, 576)), "state": ("float32", (2, 1, 128))})
    vad = p.call("silero_vad.onnx", input=p["audio"], state=p["state"], sr=p.const(16000))
    speech = p.op("Greater", vad["output"], p.const(0.5, "float32"))
    words = p.if_(speech, lambda b: [b.call("asr.onnx", x=p["audio"])["logits"]],
                          lambda b: [b.const(np.zeros((1, 20, 30), np.float32))])
    graph = p.build(prob=vad["output"], state=vad["stateN"], logits=words[0])
    edgenn.save(graph, "pipeline.enn")          # or edgenn.InferenceSession(graph)

`call` splices a model's optimized graph in (its tensors renamed apart under the call's
name, its inputs bound to the given tensors); `op` adds one ONNX op (edgenn's IR forms:
opset 21 signatures); `if_` / `loop` add control flow whose bodies are built by the given
functions on a body builder that reads the enclosing tensors directly (they become the
body's captures, graph/ir.py). Every constant lives in the top graph.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .errors import GraphError, InputError
from .graph.ir import Graph, Node, ValueInfo


@dataclass(frozen=True)
class Tensor:
    """A tensor of the pipeline under construction (by its name in the composed graph)."""
    name: str


class _Scope:
    """Nodes of the top graph or of one body; constants always go to the top."""

    def __init__(self, top: "Pipeline | None"):
        self.top = top if top is not None else self
        self.nodes: list[Node] = []

    # -- building blocks --------------------------------------------------------------------
    def _name(self, prefix: str) -> str:
        return self.top._fresh(prefix)

    def const(self, value, dtype=None) -> Tensor:
        """A constant tensor (numpy array or scalar; dtype defaults to numpy's)."""
        arr = np.asarray(value, dtype=dtype)
        name = self._name("const")
        self.top.consts[name] = np.require(arr, requirements="C")
        return Tensor(name)

    def op(self, op_type: str, *inputs, outputs: int = 1, **attrs):
        """One op on tensors (None: an omitted optional input); -> its output tensor, or a
        list when outputs > 1."""
        names = [self._ref(i) for i in inputs]
        outs = [self._name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(Node(op_type, names, outs, dict(attrs), self._name(op_type)))
        result = [Tensor(o) for o in outs]
        return result[0] if outputs == 1 else result

    def call(self, model, name: str | None = None, **inputs) -> dict[str, Tensor]:
        """Splice `model` (path, bytes, ModelProto or Graph) in with its inputs bound to
        `inputs` (by the model's input names); -> {its output name: tensor}."""
        from .converters.source import load
        graph = model if isinstance(model, Graph) else load(model)
        prefix = self._name(name or graph.meta.get("graph_name") or "model")
        want = [v.name for v in graph.inputs]
        missing = [n for n in want if n not in inputs]
        unknown = [n for n in inputs if n not in want]
        if missing or unknown:
            raise InputError(f"call of {prefix!r}: missing inputs {missing}, unknown "
                             f"{unknown}; the model takes {want}")
        rename = {n: self._ref(inputs[n]) for n in want}
        for c, value in graph.consts.items():
            rename[c] = self.top._fresh(f"{prefix}/{c}")
            self.top.consts[rename[c]] = value
        for n in graph.nodes:
            for o in n.outputs:
                if o:
                    rename[o] = f"{prefix}/{o}"
        for n in graph.nodes:
            self.nodes.append(Node(n.op, [rename.get(i, i) if i else "" for i in n.inputs],
                                   [rename.get(o, o) if o else "" for o in n.outputs],
                                   dict(n.attrs), f"{prefix}/{n.name}"))
        self.top._taken.update(rename.values())
        return {v.name: Tensor(rename[v.name]) for v in graph.outputs}

    def if_(self, cond, then_fn, else_fn) -> list[Tensor]:
        """If(cond): then_fn(body) / else_fn(body) each return the list of branch output
        tensors (the same count, dtypes and shapes); -> the If's outputs."""
        branches = [self._body(fn, []) for fn in (then_fn, else_fn)]
        if len(branches[0].outputs) != len(branches[1].outputs):
            raise GraphError("if_: the branches return different numbers of outputs")
        caps = list(dict.fromkeys(c for b in branches for c in b.free_names()))
        outs = [self._name("if_out") for _ in branches[0].outputs]
        self.nodes.append(Node("If", [self._ref(cond)] + caps, outs,
                               {"then_branch": branches[0], "else_branch": branches[1],
                                "captures": caps}, self._name("If")))
        return [Tensor(o) for o in outs]

    def loop(self, trip_count, cond, carried: list, body_fn) -> list[Tensor]:
        """Loop: body_fn(body, i, cond_in, *carried_in) returns [cond_out, *carried_out,
        *scan_outputs]; trip_count / cond tensors or None; -> final carried + scans."""
        names = [self._name("iter"), self._name("cond_in")] + \
            [self._name("carried") for _ in carried]
        body = self._body(lambda b: body_fn(b, *[Tensor(n) for n in names]), names)
        caps = body.free_names()
        n_out = len(body.outputs) - 1
        outs = [self._name("loop_out") for _ in range(n_out)]
        ins = [self._ref(trip_count) if trip_count is not None else "",
               self._ref(cond) if cond is not None else ""] + [self._ref(c) for c in carried]
        self.nodes.append(Node("Loop", ins + caps, outs, {"body": body, "captures": caps},
                               self._name("Loop")))
        return [Tensor(o) for o in outs]

    # -- internals --------------------------------------------------------------------------
    def _ref(self, t) -> str:
        if t is None:
            return ""
        if not isinstance(t, Tensor):
            raise InputError(f"expected a pipeline tensor, got {type(t).__name__}")
        return t.name

    def _body(self, fn, formal: list[str]) -> Graph:
        body = _Scope(self.top)
        result = fn(body)
        if not isinstance(result, (list, tuple)) or not all(isinstance(r, Tensor)
                                                          for r in result):
            raise InputError("a body function must return a list of pipeline tensors")
        # a body output that is a tensor of an enclosing scope: pass it through
        outs = []
        for r in result:
            if not any(r.name in n.outputs for n in body.nodes) and r.name not in formal:
                r = body.op("Identity", r)
            outs.append(r.name)
        return Graph(body.nodes, [ValueInfo(n, "", None) for n in formal],
                     [ValueInfo(o, "", None) for o in outs], {})


class Pipeline(_Scope):
    """The composed model's top graph (see the module docstring). inputs: {name: (dtype,
    shape)} (str dims are dynamic)."""

    def __init__(self, inputs: dict):
        self.consts: dict[str, np.ndarray] = {}
        self._taken: set[str] = set(inputs)
        self._counter = itertools.count()
        super().__init__(None)
        self.inputs = [ValueInfo(n, str(np.dtype(d)), tuple(s)) for n, (d, s) in inputs.items()]

    def __getitem__(self, name: str) -> Tensor:
        if name not in {v.name for v in self.inputs}:
            raise InputError(f"no pipeline input {name!r}")
        return Tensor(name)

    def _fresh(self, prefix: str) -> str:
        name = prefix
        while name in self._taken:
            name = f"{prefix}_{next(self._counter)}"
        self._taken.add(name)
        return name

    def build(self, **outputs: Tensor) -> Graph:
        """The composed Graph with `outputs` (name -> tensor), checked; its outputs are
        named as given (an Identity each)."""
        if not outputs:
            raise InputError("build needs at least one output")
        nodes = list(self.nodes)
        for name, t in outputs.items():
            if name in self._taken and name != t.name:
                raise InputError(f"output name {name!r} is already a tensor of the pipeline")
            nodes.append(Node("Identity", [self._ref(t)], [name], {}, f"output/{name}"))
        from .graph.passes.util import known_infos
        graph = Graph(nodes, list(self.inputs), [], dict(self.consts),
                      {"opset": 21, "producer": "edgenn.compose"})
        graph.outputs = [ValueInfo(n, "float32", ()) for n in outputs]
        graph.validate()
        infos = known_infos(graph)          # dtypes / shapes where the inputs fix them
        graph.outputs = [ValueInfo(n, infos[n].dtype, tuple(infos[n].shape)) if n in infos
                         else ValueInfo(n, "float32", (f"{n}:?",)) for n in outputs]
        from .graph.passes import optimize
        optimize(graph)
        return graph


def compose(inputs: dict) -> Pipeline:
    """A new Pipeline over `inputs` ({name: (dtype, shape)})."""
    return Pipeline(inputs)
