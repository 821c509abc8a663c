"""Algorithm choice, in one readable place (DESIGN principle 5).

Filter the registered kernels of an op by capability; take the first that fits (issue #3
adds measured timing and a cost model here); fall back to the reference kernel. The
choice is a named, inspectable value kept on each plan step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.ir import Node
from ..registry import KERNELS


@dataclass
class Choice:
    kernel: str                    # name of the bound implementation
    run: callable                  # run(inputs, outputs)
    candidates: list[str] = field(default_factory=list)
    reason: str = ""


def choose(node: Node, ins, outs, reference: bool = False) -> Choice:
    from .plan import reference_runner
    specs = KERNELS.get(node.op, [])
    names = [s.name for s in specs] + ["reference"]
    if not reference:
        for spec in specs:
            if spec.supports(node, ins, outs):
                return Choice(spec.name, spec.prepare(node, ins, outs), names,
                              "first capable kernel")
    why = "reference mode" if reference else "no specialised kernel applies"
    return Choice("reference", reference_runner(node), names, why)
