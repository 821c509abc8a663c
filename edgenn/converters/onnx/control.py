"""ONNX converters of the control-flow ops If, Loop and Scan (graph/shapes/control.py).

Each body is converted by the same converters (importer.subgraph). What a body reads from
the enclosing scopes becomes explicit: those tensors are appended to the node's inputs
and their names inside the body listed in attrs["captures"] (graph/ir.py), and a body's
own constants are moved out to the enclosing graph and captured the same way, so every
constant of a model lives in the top graph's table (one .enn tensor table, one place for
the passes and codecs to see it).
"""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...graph.ir import Graph
from ...registry import converter
from . import proto
from .importer import attribute_values, subgraph


def _body(onode, name: str, ctx, missing) -> Graph:
    for a in onode.attribute:
        if a.name == name and a.type == proto.GRAPH:
            return subgraph(a.g, ctx, missing)
    raise UnsupportedOpError({onode.op_type: [onode.name]},
                             f"{onode.op_type} {onode.name!r} has no {name} graph")


def _close(bodies: list[Graph], ctx) -> tuple[list[str], list[str]]:
    """Hoist the bodies' constants into ctx.graph; -> (captured names inside the bodies,
    the enclosing tensors they stand for), the union over the bodies, first use first."""
    inside: dict[str, str] = {}
    for body in bodies:
        for name, value in list(body.consts.items()):
            if name not in inside:
                outer = name if name not in ctx.graph._taken_names() else \
                    ctx.graph.unique_name(name)
                ctx.graph.consts[outer] = value
                ctx.graph._taken_names().add(outer)
                inside[name] = outer
            del body.consts[name]
    for body in bodies:
        for name in body.free_names():
            inside.setdefault(name, name)
    return list(inside), list(inside.values())


def _convert(onode, ctx, names: tuple[str, ...], formal: list[str], attrs: dict) -> None:
    missing: dict[str, list[str]] = {}
    bodies = [_body(onode, n, ctx, missing) for n in names]
    if missing:
        raise UnsupportedOpError(missing)
    caps, outer = _close(bodies, ctx)
    attrs = dict(attrs, captures=caps, **dict(zip(names, bodies)))
    ctx.emit(onode.op_type, formal + outer, list(onode.output), attrs, onode.name)


@converter("If")
def if_(onode, ctx):
    _convert(onode, ctx, ("then_branch", "else_branch"), list(onode.input[:1]), {})


@converter("Loop")
def loop(onode, ctx):
    formal = list(onode.input) + [""] * max(0, 2 - len(onode.input))   # M, cond optional
    _convert(onode, ctx, ("body",), formal, {})


@converter("Scan")
def scan(onode, ctx):
    attrs = attribute_values(onode)
    if ctx.opset < 9:
        raise UnsupportedOpError({"Scan (version 8)": [onode.name]},
                                 "Scan-8 (with sequence_lens and a batch axis) is not "
                                 "supported")
    n_in = int(attrs.get("num_scan_inputs", 0))
    if not 0 < n_in <= len(onode.input):
        raise UnsupportedOpError({onode.op_type: [onode.name]},
                                 f"Scan {onode.name!r}: num_scan_inputs {n_in} with "
                                 f"{len(onode.input)} inputs")
    _convert(onode, ctx, ("body",), list(onode.input), attrs)
