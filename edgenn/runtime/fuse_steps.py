"""Plan-time fusion of step pairs, decided by measurement.

A Conv whose output nothing but the next step, a Conv, reads may run with it as one step:
a 1x1 expansion and its depthwise conv as ExpandDepthwise
(kernels/depthwise/expand_depthwise.py), a depthwise conv and its 1x1 projection as
DepthwiseProject (kernels/depthwise/depthwise_project.py). The planner times the fused step like
any kernel and keeps it only where it beat the two layers' own best kernels together, so no
plan gets slower for it. The graph is not changed: the pair exists only in the plan (a saved
.enn, the quantizer and the pruner still see two Convs)."""
from __future__ import annotations

from collections import Counter

from ..graph.ir import Node
from ..graph.shapes.fused import PAIR_KEYS


def conv_pair_candidates(steps_nodes: list[Node], root: dict[str, str],
                         output_names: list[str]) -> dict[int, tuple[Node, Node]]:
    """-> {k: (fused node, the second Conv)} for each step k, a Conv whose only output is
    read by step k + 1 alone, a Conv taking it as its input x: ExpandDepthwise where the
    first is a dense (group 1) Conv, DepthwiseProject where it is grouped. Whether the
    kernels apply (a 1x1 expansion, a 3x3 depthwise conv, ...) is the fused kernels'
    `supports`."""
    readers = Counter(root.get(i, i) for n in steps_nodes for i in n.inputs if i)
    kept = {root.get(o, o) for o in output_names}
    found = {}
    for k in range(len(steps_nodes) - 1):
        a, b = steps_nodes[k], steps_nodes[k + 1]
        if a.op != "Conv" or b.op != "Conv" or len(a.outputs) != 1:
            continue
        t = a.outputs[0]
        if not t or not b.inputs or b.inputs[0] != t or readers[t] != 1 or t in kept:
            continue
        if any(a.inputs[3:]) or any(b.inputs[4:]):   # a residual into the first conv
            continue
        ai, bi = list(a.inputs) + [""] * 3, list(b.inputs) + [""] * 4
        op = "ExpandDepthwise" if int(a.attrs.get("group", 1)) == 1 else "DepthwiseProject"
        first, second = PAIR_KEYS[op]
        fused = Node(op, [ai[0], ai[1], ai[2], bi[1], bi[2], bi[3]], list(b.outputs),
                     {first: dict(a.attrs), second: dict(b.attrs)}, f"{a.name}+{b.name}")
        found[k] = (fused, b)
    return found


def _time(choice):
    return choice.times.get(choice.kernel)


# A tie goes to the fused step: it is kept up to this factor over the pair's time, about
# the tuner's noise between rounds. Each kernel is timed alone, on repeated calls, where
# the pair's intermediate tensor is as warm as it gets; in the model it is not, and the
# pair's write and read of it also evict what the next layers read, so a fused step that
# times level with its pair runs faster in the model. Not more: a fused step that times
# a few percent slower than its pair runs slower in the model too.
FUSED_MARGIN = 1.03


def fusion_pays(first, second, fused) -> bool:
    """The fused step's measured time is below FUSED_MARGIN times the two steps' together
    (each the time of its chosen kernel); unmeasured (tuning off, the budget spent): no."""
    times = [_time(c) for c in (first, second, fused)]
    return (fused.kernel != "reference" and None not in times
            and times[2] < FUSED_MARGIN * (times[0] + times[1]))


def pair_step(pair: tuple[Node, Node], first, choose_step, side_by_side=None):
    """The step after a candidate's first conv (chosen: `first`): -> (node, choice, fused):
    the fused node if its kernel measured faster than both convs' (fusion_pays), else the
    second conv. choose_step(node, **kw): the planner's choice for a node;
    side_by_side(choices) -> the three choices re-timed in the same rounds (or None:
    then the times of their own choices decide)."""
    fused, second = pair
    chosen = choose_step(second)
    together = choose_step(fused, always_time=True)
    timed = side_by_side([first, chosen, together]) if side_by_side else None
    if fusion_pays(*(timed or (first, chosen, together))):
        return fused, together, True
    return second, chosen, False
