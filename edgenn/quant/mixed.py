"""Mixed precision: which layers stay fp32 so the int8 model meets a fidelity target.

Sensitivity of a layer = the model's output fidelity on held-out batches when that layer
alone is int8 (its weights, its input activations; everything else fp32), measured as
output cosine (and top-1 agreement for classifier outputs, metrics.py). The search then
starts from the all-int8 model and keeps the k most sensitive layers fp32, k = 0, 1, 2,
..., until the target holds (the most sensitive first: they cost the most fidelity for
the least of the model's compute, on average).

Graphs are evaluated as QDQ (fp32 kernels between Quantize/Dequantize), before fusion.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.ir import Graph
from .data import Batches
from .metrics import compare, fidelity, meets
from .observe import Runner
from .rewrite import QuantPlan, plan_quantization


@dataclass
class MixedResult:
    plan: QuantPlan
    target: float
    fp32_layers: list[str]                 # kept fp32 to meet the target, most sensitive first
    sensitivity: dict[str, dict]           # layer -> {"cosine", "top1"} when alone int8
    steps: list[dict] = field(default_factory=list)  # k -> fidelity of that candidate
    met: bool = False
    bits8_layers: list[str] = field(default_factory=list)  # given 8-bit weights instead

    def layer_bits(self) -> dict[str, int]:
        return {name: 8 for name in self.bits8_layers}

    def summary(self) -> dict:
        return {"target": self.target, "met": self.met, "fp32_layers": self.fp32_layers,
                "bits8_layers": self.bits8_layers,
                "sensitivity": self.sensitivity, "search": self.steps}


def evaluate(graph: Graph, batches: Batches, reference_outputs, threads: int = 1) -> dict:
    """Fidelity summary of `graph`'s outputs against the fp32 ones on `batches`."""
    runner = Runner(graph, threads=threads)
    outs = [runner.outputs(feed) for feed in batches.feeds]
    return fidelity(compare(reference_outputs, outs))


def fp32_outputs(graph: Graph, batches: Batches, threads: int = 1) -> list:
    runner = Runner(graph, threads=threads)
    return [runner.outputs(feed) for feed in batches.feeds]


def sensitivities(graph: Graph, plan: QuantPlan, ranges, opts, batches: Batches,
                  reference_outputs, exclude=(), progress=None, threads: int = 1,
                  means=None) -> dict[str, dict]:
    """Per layer of `plan`: the output fidelity when only that layer is int8."""
    from .quantize import build
    out = {}
    for k, layer in enumerate(plan.layers):
        single = plan_quantization(graph, exclude, only={layer})
        g, _ = build(graph, single, ranges, opts, means)
        out[layer] = evaluate(g, batches, reference_outputs, threads)
        if progress is not None:
            progress("sensitivity: one layer int8 at a time", k + 1, len(plan.layers))
    return out


def _order_key(s: dict):
    """Most sensitive first: lowest top-1 agreement, then lowest cosine."""
    top1 = s.get("top1")
    return (top1 if top1 is not None else 1.0, s["cosine"])


def _weight_bits_of(graph: Graph, plan: QuantPlan, opts) -> dict[str, int]:
    from .rewrite import is_depthwise
    out = {}
    for n in graph.nodes:
        if n.name in plan.layers:
            dw = opts.depthwise_bits and is_depthwise(n, graph.consts[n.inputs[1]])
            out[n.name] = opts.depthwise_bits if dw else opts.weight_bits
    return out


def keep_sensitive_fp32(graph: Graph, plan: QuantPlan, ranges, opts, batches: Batches,
                        target: float, exclude=(), progress=None, threads: int = 1,
                        means=None, bits8_first: bool = False) -> MixedResult:
    """The plan with the fewest most-sensitive layers fp32 that meets `target`.
    bits8_first: before keeping any layer fp32, give the k most sensitive layers with
    7-bit weights 8-bit weights (k = 1, 2, ...); the fp32 search then starts from the
    model with all of them 8-bit."""
    from .quantize import build
    reference = fp32_outputs(graph, batches, threads)
    sens = sensitivities(graph, plan, ranges, opts, batches, reference, exclude, progress,
                         threads, means)
    order = sorted(plan.layers, key=lambda name: _order_key(sens[name]))
    result = MixedResult(plan, target, [], sens)
    total = len(order) + 1
    bits = {}
    if bits8_first:
        seven = [n for n in order if _weight_bits_of(graph, plan, opts).get(n) == 7]
        g, _ = build(graph, plan, ranges, opts, means)
        summary = evaluate(g, batches, reference, threads)
        result.steps.append({"fp32_layers": 0, "bits8_layers": 0, **summary})
        if meets(summary, target):
            result.met = True
            return result
        for k in range(1, len(seven) + 1):
            bits = {n: 8 for n in seven[:k]}
            g, _ = build(graph, plan, ranges, opts, means, bits)
            summary = evaluate(g, batches, reference, threads)
            result.steps.append({"fp32_layers": 0, "bits8_layers": k, **summary})
            if progress is not None:
                progress("mixed precision: 8-bit weights tried", k, len(seven))
            if meets(summary, target):
                result.bits8_layers, result.met = list(bits), True
                return result
        result.bits8_layers = list(bits)
    for k in range(len(order) + 1):
        kept = order[:k]
        candidate = plan_quantization(graph, set(exclude) | set(kept))
        if not candidate.layers:
            result.plan, result.fp32_layers = candidate, kept
            result.steps.append({"fp32_layers": k, "cosine": 1.0, "top1": None})
            result.met = True
            break
        g, _ = build(graph, candidate, ranges, opts, means, bits)
        summary = evaluate(g, batches, reference, threads)
        result.steps.append({"fp32_layers": k, "bits8_layers": len(bits), **summary})
        if progress is not None:
            progress("mixed precision: candidates tried (search ends early when met)",
                     k + 1, total)
        if meets(summary, target):
            result.plan, result.fp32_layers, result.met = candidate, kept, True
            break
    if progress is not None and len(result.steps) < total:
        progress("mixed precision: candidates tried (search ends early when met)",
                 total, total)
    for name in result.fp32_layers:
        result.plan.skipped[name] = "kept fp32 (sensitive)"
    return result
