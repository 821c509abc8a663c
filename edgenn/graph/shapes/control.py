"""Shape rules of the control-flow ops (ONNX semantics): If, Loop, Scan.

Bodies are Graphs in the node's attributes; the node's last len(attrs["captures"]) inputs
carry the enclosing tensors a body reads (graph/ir.py). The forms:

If(cond, *captured) -> outputs of then_branch or else_branch. A constant cond picks its
    branch (the planner inlines it); a run-time one needs both branches to agree on every
    output's dtype and shape (edgenn plans memory before it runs).
Loop(M, cond, *v_initial, *captured) -> (*v_final, *scan_outputs); body(iter_num,
    cond_in, *v_in, [captured]) -> (cond_out, *v_out, *scan_out). The carried values keep
    their shapes; scan outputs stack one row per iteration, so they need a trip count
    known at plan time (M constant and the condition constant true); a loop without scan
    outputs may stop on a data-dependent condition.
Scan(*state, *scan_inputs, *captured) (opset >= 9) -> (*final_state, *scan_outputs); the
    body sees one slice of every scan input per iteration (along scan_input_axes,
    reversed where scan_input_directions says 1).
"""
from __future__ import annotations

import numpy as np

from ...errors import DataDependentShapeError, GraphError
from ...registry import TensorInfo, shape_rule

OPS = ("If", "Loop", "Scan")
# a Loop with scan outputs plans its trip count (M) and first condition as constants
CONST_INPUTS = {"Loop": (0, 1)}


def where(node) -> str:
    return f"{node.op} node {node.name!r}"


def split_inputs(node, ins: list) -> tuple[list, list]:
    """-> (formal inputs, captured inputs) of a control-flow node."""
    k = len(node.captures)
    return list(ins[:len(ins) - k]), list(ins[len(ins) - k:])


def infer_body(body, bound: dict) -> tuple[dict, DataDependentShapeError | None]:
    """TensorInfo of every tensor of `body` given the infos of its formal inputs and
    captures (`bound`, by inside name). A node whose shape depends on run-time data (a
    Slice by the iteration number, say) leaves its outputs and their dependents out;
    -> (infos, the first such error or None)."""
    from ..infer import infer_node
    infos = {name: TensorInfo.of(v) for name, v in body.consts.items()}
    infos.update(bound)
    unknown: set[str] = set()
    first = None
    for n in body.nodes:
        ins = [infos.get(i) if i else None for i in n.inputs]
        if any(i in unknown for i in n.inputs):
            unknown.update(o for o in n.outputs if o)
            continue
        missing = [i for i, info in zip(n.inputs, ins) if i and info is None]
        if missing:
            raise GraphError(f"{n.op} node {n.name!r} reads {missing[0]!r}, which its "
                             f"body does not define")
        try:
            outs = infer_node(n, ins)
        except DataDependentShapeError as exc:
            first = first or exc
            unknown.update(o for o in n.outputs if o)
            continue
        for name, info in zip(n.outputs, outs):
            if name:
                infos[name] = info
    return infos, first


def body_outputs(body, bound: dict) -> list:
    """The infos of the body's outputs; one that depends on run-time data takes the
    body's declared (static) type, checked when it runs, else the shape error stands."""
    infos, err = infer_body(body, bound)
    out = []
    for v in body.outputs:
        if v.name in infos:
            out.append(infos[v.name])
        elif v.dtype and v.is_static:
            out.append(TensorInfo(v.dtype, tuple(v.shape)))
        else:
            raise err or GraphError(f"body output {v.name!r} is not computed")
    return out


def body_is_static(body, bound: dict) -> bool:
    """True when every tensor of the body has a plan-time shape (it can be planned)."""
    return infer_body(body, bound)[1] is None


def captured(node, caps: list) -> dict:
    return dict(zip(node.captures, caps))


def cond_value(node, info):
    """The constant truth of a condition input, or None (run time / absent)."""
    if info is None or info.value is None:
        return None
    if info.value.size != 1:
        raise GraphError(f"{where(node)}: condition has {info.value.size} elements, not 1")
    return bool(info.value.reshape(-1)[0])


def _strip(info: TensorInfo) -> TensorInfo:
    return TensorInfo(info.dtype, tuple(info.shape))


@shape_rule("If")
def if_rule(node, ins):
    formal, caps = split_inputs(node, ins)
    if len(formal) != 1 or formal[0] is None:
        raise GraphError(f"{where(node)}: needs exactly one condition input")
    bound = captured(node, caps)
    pick = cond_value(node, formal[0])
    then_b, else_b = node.attrs["then_branch"], node.attrs["else_branch"]
    if pick is not None:
        return body_outputs(then_b if pick else else_b, bound)
    a, b = _branch(then_b, bound), _branch(else_b, bound)
    if isinstance(a, Exception) and isinstance(b, Exception):
        raise a
    if isinstance(a, Exception) or isinstance(b, Exception):
        # a branch these shapes cannot take (a shape-guarded path of a model exported for
        # several input sizes: silero-vad's 8 kHz branch fed 16 kHz chunks) fails if the
        # condition ever picks it; the If plans by the branch that can run
        return [_strip(x) for x in (b if isinstance(a, Exception) else a)]
    if len(a) != len(b) or any(x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape)
                               for x, y in zip(a, b)):
        raise DataDependentShapeError(node.op, node.name,
                                      "branch outputs of different shapes "
                                      f"({[x.shape for x in a]} vs {[y.shape for y in b]}) "
                                      "under a run-time condition")
    return [_strip(x) for x in a]


def _branch(body, bound):
    """The output infos of a branch, or the GraphError saying it cannot run on them."""
    try:
        return body_outputs(body, bound)
    except DataDependentShapeError:
        raise
    except GraphError as exc:
        return exc


def _scalar(dtype: str, value=None) -> TensorInfo:
    return TensorInfo(dtype, (), None if value is None else np.array(value, dtype))


def loop_plan(node, ins) -> dict:
    """What planning a Loop needs: the trip count M (None: unbounded), the constant
    initial condition, the carried infos, the body's output infos and the number of
    scan outputs. Raises when the body changes a carried value's shape."""
    formal, caps = split_inputs(node, ins)
    if len(formal) < 2:
        raise GraphError(f"{where(node)}: needs M and cond inputs (either may be omitted)")
    m_info, c_info, carried = formal[0], formal[1], formal[2:]
    if any(v is None for v in carried):
        raise GraphError(f"{where(node)}: a loop-carried initial value is missing")
    body = node.attrs["body"]
    if len(body.inputs) != 2 + len(carried):
        raise GraphError(f"{where(node)}: body takes {len(body.inputs)} inputs, the loop "
                         f"carries {len(carried)} values (+ iter_num, cond)")
    trip = None          # unbounded, or known only at run time
    if m_info is not None and m_info.value is not None:
        trip = max(int(m_info.value.reshape(-1)[0]), 0)
    cond0 = cond_value(node, c_info)
    bound = captured(node, caps)
    bound[body.inputs[0].name] = _scalar("int64")
    bound[body.inputs[1].name] = _scalar("bool", True if c_info is None else cond0)
    for v, info in zip(body.inputs[2:], carried):
        bound[v.name] = _strip(info)
    outs = body_outputs(body, bound)
    if len(outs) < 1 + len(carried):
        raise GraphError(f"{where(node)}: body has {len(outs)} outputs, needs cond + "
                         f"{len(carried)} carried")
    for k, (o, i) in enumerate(zip(outs[1:1 + len(carried)], carried)):
        if o.dtype != i.dtype or tuple(o.shape) != tuple(i.shape):
            raise DataDependentShapeError(node.op, node.name,
                                          f"loop-carried value {k} changes from {i.dtype} "
                                          f"{i.shape} to {o.dtype} {o.shape}")
    # the trip count known at plan time: 0 when cond starts false; M when the condition
    # is absent (ignored, as the spec's for-loop) or constant true on every iteration
    # (its output folds to true given a true input: the usual Identity(cond_in))
    cond_out = outs[0].value
    always = cond_out is not None and cond_out.size == 1 and bool(cond_out.reshape(-1)[0])
    if cond0 is False:
        fixed = 0
    elif trip is not None and (c_info is None or (cond0 and always)):  # M known
        fixed = trip
    else:
        fixed = None
    return {"trip": trip, "fixed": fixed, "cond0": cond0, "carried": carried,
            "outs": outs, "n_scan": len(outs) - 1 - len(carried)}


@shape_rule("Loop")
def loop_rule(node, ins):
    p = loop_plan(node, ins)
    scans = p["outs"][1 + len(p["carried"]):]
    if scans and p["fixed"] is None:
        raise DataDependentShapeError(node.op, node.name,
                                      "scan outputs of a loop whose trip count is only known "
                                      "at run time")
    return [_strip(c) for c in p["carried"]] + \
        [TensorInfo(s.dtype, (p["fixed"],) + tuple(s.shape)) for s in scans]


def scan_plan(node, ins) -> dict:
    formal, caps = split_inputs(node, ins)
    a = node.attrs
    n_in = int(a.get("num_scan_inputs", 0))
    n_state = len(formal) - n_in
    if n_in < 1 or n_state < 0 or any(v is None for v in formal):
        raise GraphError(f"{where(node)}: num_scan_inputs {n_in} with {len(formal)} inputs")
    state, scans = formal[:n_state], formal[n_state:]
    in_axes = list(a.get("scan_input_axes") or [0] * n_in)
    in_dirs = list(a.get("scan_input_directions") or [0] * n_in)
    if len(in_axes) != n_in or len(in_dirs) != n_in:
        raise GraphError(f"{where(node)}: scan_input_axes / directions need {n_in} values")
    axes, length = [], None
    for info, ax in zip(scans, in_axes):
        r = len(info.shape)
        ax = int(ax) + r if int(ax) < 0 else int(ax)
        if not 0 <= ax < r:
            raise GraphError(f"{where(node)}: scan axis {ax} of a rank-{r} input")
        if length is not None and info.shape[ax] != length:
            raise GraphError(f"{where(node)}: scan inputs of different lengths")
        length = info.shape[ax]
        axes.append(ax)
    body = node.attrs["body"]
    if len(body.inputs) != len(formal):
        raise GraphError(f"{where(node)}: body takes {len(body.inputs)} inputs, the scan "
                         f"has {len(formal)}")
    bound = captured(node, caps)
    for v, info in zip(body.inputs[:n_state], state):
        bound[v.name] = _strip(info)
    for v, info, ax in zip(body.inputs[n_state:], scans, axes):
        bound[v.name] = TensorInfo(info.dtype, tuple(d for k, d in enumerate(info.shape)
                                                     if k != ax))
    outs = body_outputs(body, bound)
    if len(outs) < n_state:
        raise GraphError(f"{where(node)}: body has fewer outputs than state values")
    for k, (o, i) in enumerate(zip(outs[:n_state], state)):
        if o.dtype != i.dtype or tuple(o.shape) != tuple(i.shape):
            raise DataDependentShapeError(node.op, node.name,
                                          f"state {k} changes from {i.shape} to {o.shape}")
    n_out = len(outs) - n_state
    out_axes = list(a.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(a.get("scan_output_directions") or [0] * n_out)
    if len(out_axes) != n_out or len(out_dirs) != n_out:
        raise GraphError(f"{where(node)}: scan_output_axes / directions need {n_out} values")
    oaxes = []
    for o, ax in zip(outs[n_state:], out_axes):
        r = len(o.shape) + 1
        ax = int(ax) + r if int(ax) < 0 else int(ax)
        if not 0 <= ax < r:
            raise GraphError(f"{where(node)}: scan output axis {ax} of rank {r}")
        oaxes.append(ax)
    return {"n_state": n_state, "axes": axes, "dirs": [int(d) for d in in_dirs],
            "length": length, "outs": outs, "out_axes": oaxes,
            "out_dirs": [int(d) for d in out_dirs]}


@shape_rule("Scan")
def scan_rule(node, ins):
    p = scan_plan(node, ins)
    res = [_strip(o) for o in p["outs"][:p["n_state"]]]
    for o, ax in zip(p["outs"][p["n_state"]:], p["out_axes"]):
        shape = list(o.shape)
        shape.insert(ax, p["length"])
        res.append(TensorInfo(o.dtype, tuple(shape)))
    return res
