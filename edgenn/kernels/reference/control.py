"""Reference kernels of If, Loop and Scan (graph/shapes/control.py): each body run by the
plain interpreter (graph.infer.execute) with its formal inputs and captures fed by name."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ...graph.ir import Node
from ...graph.shapes.control import split_inputs
from ...registry import reference

MAX_ITERATIONS = 1 << 20   # an unbounded Loop stops here (a hostile model never hangs)


def run_body(body, bound: dict) -> list[np.ndarray]:
    from ...graph.infer import execute
    out = execute(body, bound)
    return [out[v.name] for v in body.outputs]


@reference("If")
def if_(attrs, inputs):
    node = Node("If", [], [], attrs)
    formal, caps = split_inputs(node, inputs)
    cond = np.asarray(formal[0])
    if cond.size != 1:
        raise GraphError(f"If: condition has {cond.size} elements, not 1")
    branch = attrs["then_branch"] if bool(cond.reshape(-1)[0]) else attrs["else_branch"]
    return run_body(branch, dict(zip(node.captures, caps)))


@reference("Loop")
def loop(attrs, inputs):
    node = Node("Loop", [], [], attrs)
    formal, caps = split_inputs(node, inputs)
    m, cond, carried = formal[0], formal[1], list(formal[2:])
    body = attrs["body"]
    trip = MAX_ITERATIONS if m is None else min(max(int(np.asarray(m).reshape(-1)[0]), 0),
                                                MAX_ITERATIONS)
    go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    bound = dict(zip(node.captures, caps))
    names = [v.name for v in body.inputs]
    scans: list[list[np.ndarray]] = []
    i = 0
    while i < trip and go:
        bound.update(zip(names, [np.array(i, np.int64), np.array(go)] + carried))
        outs = run_body(body, bound)
        if cond is not None:
            go = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = outs[1:1 + len(carried)]
        scans.append(outs[1 + len(carried):])
        i += 1
    n_scan = len(body.outputs) - 1 - len(carried)
    if not scans and n_scan:          # zero rows: their shape from the body's inference
        from ...graph.shapes.control import body_outputs
        from ...registry import TensorInfo
        infos = {name: TensorInfo(np.asarray(v).dtype.name, np.shape(v)) for name, v in
                 zip(names, [np.array(0, np.int64), np.array(go)] + carried)}
        infos.update({c: TensorInfo.of(np.asarray(v)) for c, v in bound.items()
                      if c not in infos})
        rows = body_outputs(body, infos)[1 + len(carried):]
        return carried + [np.zeros((0,) + tuple(r.shape), r.dtype) for r in rows]
    stacked = [np.stack([s[k] for s in scans]) for k in range(n_scan)]
    return carried + stacked


@reference("Scan")
def scan(attrs, inputs):
    node = Node("Scan", [], [], attrs)
    formal, caps = split_inputs(node, inputs)
    n_in = int(attrs.get("num_scan_inputs", 0))
    n_state = len(formal) - n_in
    state, xs = list(formal[:n_state]), formal[n_state:]
    axes = [int(a) + x.ndim if int(a) < 0 else int(a)
            for a, x in zip(attrs.get("scan_input_axes") or [0] * n_in, xs)]
    dirs = list(attrs.get("scan_input_directions") or [0] * n_in)
    body = attrs["body"]
    names = [v.name for v in body.inputs]
    bound = dict(zip(node.captures, caps))
    length = xs[0].shape[axes[0]]
    rows: list[list[np.ndarray]] = []
    for t in range(length):
        slices = [np.take(x, length - 1 - t if d else t, axis=ax)
                  for x, ax, d in zip(xs, axes, dirs)]
        bound.update(zip(names, state + slices))
        outs = run_body(body, bound)
        state = outs[:n_state]
        rows.append(outs[n_state:])
    n_out = len(body.outputs) - n_state
    out_axes = list(attrs.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(attrs.get("scan_output_directions") or [0] * n_out)
    res = []
    for k in range(n_out):
        seq = [r[k] for r in rows]
        if out_dirs[k]:
            seq = seq[::-1]
        ax = int(out_axes[k])
        ax = ax + seq[0].ndim + 1 if ax < 0 else ax
        res.append(np.stack(seq, axis=ax))
    return state + res
