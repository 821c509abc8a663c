"""Planned If, Loop and Scan: each body becomes a plan of its own (runtime/plan.py), built
once when the enclosing plan is, and run by the node's step.

A body is closed over what it reads: captured tensors that are constants of the plan
(weights, and everything folded from the bound shapes) become the body plan's constants,
so its kernels pack them and its shape-guarded nested Ifs fold to one branch; the rest
are its inputs. The body graph is optimized (graph/passes) before it is planned. Each body
plan has its own execution contexts, so callers sharing a session stay apart.

- If: a constant condition plans only its branch; a run-time one plans both (a branch
  these shapes cannot take fails, naming it, if the condition ever picks it).
- Loop: the body plan runs once per iteration with (iter_num, cond, carried values,
  captures); carried values are handed from one run to the next; scan outputs are
  written row by row into the planned outputs (their trip count is known then).
- Scan: one body run per slice of the scan inputs.
Bodies whose shapes depend on run-time data (a Slice by the iteration number) are not
planned: the reference kernel interprets them (kernels/reference/control.py).
"""
from __future__ import annotations

import copy

import numpy as np

from ..errors import DataDependentShapeError, EdgennError, GraphError
from ..graph.ir import Graph, ValueInfo
from ..graph.shapes.control import (body_is_static, captured, cond_value, loop_plan,
                                    scan_plan, split_inputs, where)
from ..kernels.reference.control import MAX_ITERATIONS
from ..registry import TensorInfo, kernel


class BodyPlan:
    """One body as a plan: feeds in body-input order (constants left out), outputs in
    the body's output order."""

    def __init__(self, body: Graph, bound: list[tuple[str, TensorInfo]]):
        from ..graph.passes.pipeline import optimize
        from ..kernels.plan_context import current
        from .plan import build
        from .select import Tuner
        consts, inputs = {}, []
        self.feed_index = []           # position in `bound` of each plan input
        for k, (name, info) in enumerate(bound):
            if info.value is not None:
                consts[name] = np.asarray(info.value)
            else:
                inputs.append(ValueInfo(name, info.dtype, tuple(info.shape)))
                self.feed_index.append(k)
        closed = Graph(copy.deepcopy(body.nodes), inputs,
                       [ValueInfo(v.name, v.dtype, v.shape) for v in body.outputs],
                       consts, {"opset": 21})
        optimize(closed)
        ctx = current()
        shapes = {v.name: tuple(v.shape) for v in inputs}
        self.plan = build(closed, shapes, tuner=Tuner(threads=ctx.threads, pool=ctx.pool))
        self.outputs = [v.name for v in body.outputs]

    def run(self, values: list) -> list[np.ndarray]:
        return self.plan.run([values[k] for k in self.feed_index], self.outputs)


def _static(node, ins, outs=None) -> bool:
    """Every body the node can run has plan-time shapes (an If branch these shapes cannot
    take at all does not count: it fails by name if picked)."""
    ok = []
    for b in node.bodies():
        try:
            ok.append(body_is_static(b, _bound_for(node, ins, b)))
        except DataDependentShapeError:
            return False
        except EdgennError:
            if node.op != "If":
                return False
    return bool(ok) and all(ok)


def _bound_for(node, ins, body) -> dict:
    """The infos a body is planned with (by inside name)."""
    formal, caps = split_inputs(node, ins)
    bound = captured(node, caps)
    if node.op == "Loop":
        p = loop_plan(node, ins)
        bound[body.inputs[0].name] = TensorInfo("int64", ())
        bound[body.inputs[1].name] = TensorInfo("bool", ())
        for v, info in zip(body.inputs[2:], p["carried"]):
            bound[v.name] = TensorInfo(info.dtype, tuple(info.shape))
    elif node.op == "Scan":
        p = scan_plan(node, ins)
        n = p["n_state"]
        for v, info in zip(body.inputs[:n], formal[:n]):
            bound[v.name] = TensorInfo(info.dtype, tuple(info.shape))
        for v, info, ax in zip(body.inputs[n:], formal[n:], p["axes"]):
            bound[v.name] = TensorInfo(info.dtype, tuple(d for k, d in enumerate(info.shape)
                                                         if k != ax))
    return bound


def _body_plan(node, ins, body) -> BodyPlan:
    bound = _bound_for(node, ins, body)
    names = [v.name for v in body.inputs] + node.captures
    return BodyPlan(body, [(name, bound[name]) for name in names])


def _copy_out(outputs, values) -> None:
    for out, v in zip(outputs, values):
        if out is not None:
            if out.shape != np.shape(v):
                raise GraphError(f"a body output of shape {np.shape(v)} where {out.shape} "
                                 "was planned")
            np.copyto(out, v, casting="unsafe")


# -- If ---------------------------------------------------------------------------------------

def inline_constant_ifs(nodes: list, infos: dict, graph: Graph) -> list | None:
    """`nodes` with every If whose condition is a plan-time constant replaced by the
    nodes of its branch (tensors renamed apart, captures mapped to the If's inputs, an
    Identity per output), or None when there is none. The graph is not modified."""
    taken = set(infos) | {o for n in nodes for o in n.outputs} | set(graph.consts)
    out, changed = [], False
    for n in nodes:
        cond = infos.get(n.inputs[0]) if n.op == "If" and n.inputs else None
        if cond is None or cond.value is None or cond.value.size != 1:
            out.append(n)
            continue
        branch = n.attrs["then_branch" if bool(cond.value.reshape(-1)[0]) else "else_branch"]
        rename = dict(zip(n.captures, n.inputs[len(n.inputs) - len(n.captures):]))
        for b in branch.nodes:
            for o in b.outputs:
                if o:
                    new, k = f"{n.name}/{o}", 0
                    while new in taken:
                        k += 1
                        new = f"{n.name}/{o}~{k}"
                    taken.add(new)
                    rename[o] = new
        for b in branch.nodes:
            out.append(type(b)(b.op, [rename.get(i, i) for i in b.inputs],
                               [rename.get(o, o) for o in b.outputs], dict(b.attrs),
                               f"{n.name}/{b.name}"))
        for v, o in zip(branch.outputs, n.outputs):
            if o:
                out.append(type(n)("Identity", [rename.get(v.name, v.name)], [o], {},
                                   f"{n.name}/out:{o}"))
        changed = True
    return out if changed else None


@kernel("If", "if_planned_branches", supports=_static)
def prepare_if(node, ins, outs):
    formal, _ = split_inputs(node, ins)
    pick = cond_value(node, formal[0])
    plans, errors = [], []
    for taken, branch in ((True, node.attrs["then_branch"]),
                          (False, node.attrs["else_branch"])):
        plan = err = None
        if pick is None or pick == taken:
            try:
                plan = _body_plan(node, ins, branch)
            except GraphError as exc:      # shapes this branch cannot take
                err = exc
        plans.append(plan)
        errors.append(err)
    if pick is not None and plans[0 if pick else 1] is None:
        raise errors[0 if pick else 1]
    n_formal = len(ins) - len(node.captures)

    def run(inputs, outputs):
        cond = bool(np.asarray(inputs[0]).reshape(-1)[0])
        plan = plans[0 if cond else 1]
        if plan is None:
            raise GraphError(f"{where(node)}: the {'then' if cond else 'else'} branch cannot "
                             f"run on these input shapes ({errors[0 if cond else 1]})")
        _copy_out(outputs, plan.run(list(inputs[n_formal:])))
    run.branch_plans = plans          # (then, else) BodyPlans or None: for inspection
    return run


# -- Loop -------------------------------------------------------------------------------------

@kernel("Loop", "loop_planned_body", supports=_static)
def prepare_loop(node, ins, outs):
    p = loop_plan(node, ins)
    body = _body_plan(node, ins, node.attrs["body"])
    n_carried = len(p["carried"])
    n_formal = len(ins) - len(node.captures)
    has_cond = ins[1] is not None

    def run(inputs, outputs):
        m = inputs[0]
        trip = MAX_ITERATIONS if m is None else \
            min(max(int(np.asarray(m).reshape(-1)[0]), 0), MAX_ITERATIONS)
        go = True if not has_cond else bool(np.asarray(inputs[1]).reshape(-1)[0])
        carried = [np.array(v) for v in inputs[2:n_formal]]
        caps = list(inputs[n_formal:])
        i = 0
        while i < trip and go:
            res = body.run([np.array(i, np.int64), np.array(go)] + carried + caps)
            if has_cond:
                go = bool(np.asarray(res[0]).reshape(-1)[0])
            carried = res[1:1 + n_carried]
            for k, row in enumerate(res[1 + n_carried:]):
                outputs[n_carried + k][i] = row
            i += 1
        if p["n_scan"] and i != outputs[n_carried].shape[0]:
            raise GraphError(f"{where(node)}: ran {i} iterations, {outputs[n_carried].shape[0]}"
                             f" were planned for its scan outputs")
        _copy_out(outputs[:n_carried], carried)
    return run


# -- Scan -------------------------------------------------------------------------------------

@kernel("Scan", "scan_planned_body", supports=_static)
def prepare_scan(node, ins, outs):
    p = scan_plan(node, ins)
    body = _body_plan(node, ins, node.attrs["body"])
    n_state, n_formal = p["n_state"], len(ins) - len(node.captures)
    length, axes, dirs = p["length"], p["axes"], p["dirs"]
    out_axes, out_dirs = p["out_axes"], p["out_dirs"]

    def run(inputs, outputs):
        state = [np.array(v) for v in inputs[:n_state]]
        xs, caps = inputs[n_state:n_formal], list(inputs[n_formal:])
        for t in range(length):
            slices = [np.take(x, length - 1 - t if d else t, axis=ax)
                      for x, ax, d in zip(xs, axes, dirs)]
            res = body.run(state + slices + caps)
            state = res[:n_state]
            for k, row in enumerate(res[n_state:]):
                out = outputs[n_state + k]
                if out is not None:
                    idx = [slice(None)] * out.ndim
                    idx[out_axes[k]] = length - 1 - t if out_dirs[k] else t
                    out[tuple(idx)] = row
        _copy_out(outputs[:n_state], state)
    return run
