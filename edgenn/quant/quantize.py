"""`edgenn.quantize`: post-training int8 quantization with calibration.

    graph = edgenn.quantize("model.onnx", calibration_data, method="kl")
    edgenn.save(graph, "model.int8.enn")

Steps: load + optimize the fp32 model (BN folded, activations fused); equalize the
channel ranges of tensors feeding depthwise convs (equalize.py, function unchanged);
decide the int8 layers and tensors (rewrite.plan_quantization); run the calibration
batches, observing every tensor to quantize (min/max and the per-channel means of layer
inputs, then histograms when the method needs them); pick each tensor's range
(calibration.py); optionally keep the most sensitive layers fp32 until a fidelity target
holds (mixed.py); write QDQ into the IR with bias-corrected int32 biases
(rewrite.write_qdq) and run the `fuse_qdq` pass, which turns the QDQ patterns into fused
QConv / QGemm.

Methods: activations by "minmax", "percentile", "kl" (weights by max-abs), "admm"
(weights by ADMM, activations by min/max), "auto" (weights by ADMM; each activation by
whichever of minmax / percentile / kl gives the lowest quantization MSE on the data).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..graph.ir import Graph
from . import calibration as cal
from .data import Batches, ImageSpec, load_batches
from .observe import Runner, copy_graph
from .rewrite import QuantPlan, group_params, plan_quantization, write_qdq

METHODS = ("minmax", "percentile", "kl", "admm", "auto")


def _activation_method(method: str) -> str:
    return {"admm": "minmax"}.get(method, method)


def _weight_method(method: str) -> str:
    return "admm" if method in ("admm", "auto") else "maxabs"


@dataclass
class Options:
    method: str = "minmax"
    weight_bits: int = 7
    per_channel: bool = True
    percentile: float = 99.99
    percentile_mode: str = "abs"
    depthwise_bits: int | None = 8
    bias_correction: bool = True

    def check(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"unknown quantization method {self.method!r}; "
                             f"choose one of {', '.join(METHODS)}")
        if self.weight_bits not in (7, 8):
            raise InputError(f"weight_bits must be 7 or 8, got {self.weight_bits}")
        if self.depthwise_bits not in (None, 7, 8):
            raise InputError(f"depthwise_bits must be 7, 8 or None, got {self.depthwise_bits}")
        if not 50 < self.percentile <= 100:
            raise InputError(f"percentile must be in (50, 100], got {self.percentile}")
        if self.percentile_mode not in ("abs", "tails"):
            raise InputError(f"percentile_mode must be 'abs' or 'tails', "
                             f"got {self.percentile_mode!r}")


def load_fp32(model) -> Graph:
    """The optimized fp32 graph of `model` (path, bytes, ModelProto or Graph; a Graph is
    copied, never modified)."""
    from ..converters.source import load
    if isinstance(model, Graph):
        return copy_graph(model)
    graph = load(model)
    if any(n.op in ("QuantizeLinear", "DequantizeLinear", "QConv", "QGemm", "QLinearConv",
                    "QLinearMatMul") for n in graph.nodes):
        raise InputError("the model is already quantized; give the fp32 model")
    return graph


def collect(graph: Graph, tensors: list[str], batches: Batches, histograms: bool,
            progress=None, threads: int = 1, channel_axes: dict | None = None
            ) -> dict[str, cal.Observer]:
    """Observers of `tensors` over the batches: min/max and per-channel means along
    `channel_axes[t]` (pass 1) and, if asked, the histograms over [0, max |x|] (pass 2)."""
    channel_axes = channel_axes or {}
    observers = {t: cal.Observer(channel_axes=channel_axes.get(t, ())) for t in tensors}
    runner = Runner(graph, observe=tensors, threads=threads)
    for p in range(2 if histograms else 1):
        stage = "calibrating: min/max" if p == 0 else "calibrating: histograms"
        if p == 1:
            for o in observers.values():
                o.start_histogram()
        for k, feed in enumerate(batches.feeds):
            values = runner.run(feed)
            for t, o in observers.items():
                if p == 0:
                    o.update(values[t])
                else:
                    o.update_histogram(values[t])
            if progress is not None:
                progress(stage, k + 1, len(batches))
    missing = [t for t, o in observers.items() if o.count == 0]
    if missing:
        raise InputError(f"calibration saw no values of tensor(s) {missing[:5]}")
    return observers


def choose_ranges(observers: dict[str, cal.Observer], opts: Options
                  ) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """(lo, hi) and the method used, per tensor."""
    method = _activation_method(opts.method)
    kw = dict(percentile=opts.percentile, percentile_mode=opts.percentile_mode)
    ranges, used = {}, {}
    for t, o in observers.items():
        if method == "auto":
            best, rng, _ = cal.best_activation_range(o, **kw)
            ranges[t], used[t] = rng, best
        else:
            ranges[t], used[t] = cal.activation_range(o, method, **kw), method
    return ranges, used


def layer_input_axes(graph: Graph, plan: QuantPlan) -> dict[str, set[int]]:
    """tensor -> channel axes its int8 readers need the mean along (bias correction)."""
    layers = set(plan.layers)
    axes: dict[str, set[int]] = {}
    for n in graph.nodes:
        if n.name in layers:
            axes.setdefault(n.inputs[0], set()).add(1 if n.op == "Conv" else -1)
    return axes


def input_means(graph: Graph, plan: QuantPlan, observers) -> dict[str, np.ndarray]:
    """layer name -> E[x_c] of its input over the calibration data."""
    out = {}
    layers = set(plan.layers)
    for n in graph.nodes:
        o = observers.get(n.inputs[0]) if n.name in layers else None
        if o is not None:
            m = o.channel_mean(1 if n.op == "Conv" else -1)
            if m is not None:
                out[n.name] = m
    return out


def build(graph: Graph, plan: QuantPlan, ranges: dict, opts: Options,
          means: dict | None = None, layer_bits: dict | None = None) -> tuple[Graph, list]:
    """QDQ graph (not fused) for `plan` with the calibrated ranges; `means` (layer ->
    E[input channel]) turns on bias correction; `layer_bits`: per-layer weight bits."""
    params = group_params(plan, ranges)
    return write_qdq(graph, plan, params, opts.weight_bits, _weight_method(opts.method),
                     opts.per_channel, opts.depthwise_bits,
                     means if opts.bias_correction else None, layer_bits)


def fuse(graph: Graph) -> Graph:
    """Run the `fuse_qdq` pass when it exists (QDQ -> QConv / QGemm); otherwise the QDQ
    graph runs as it is (fp32 kernels between reference Quantize/Dequantize)."""
    try:
        from ..graph.passes.qdq import fuse_qdq
    except ImportError:
        graph.meta.setdefault("quantization", {})["fused"] = False
        return graph
    from ..graph.passes.fold import prune_unused_consts
    fuse_qdq(graph)
    prune_unused_consts(graph)
    graph.validate()
    graph.meta.setdefault("quantization", {})["fused"] = True
    return graph


def quantize(model, calibration_data, method: str = "minmax", weight_bits: int = 7,
             per_channel: bool = True, fidelity: float | None = None, exclude=(),
             progress=None, *, depthwise_bits: int | None = 8,
             percentile: float = 99.99, percentile_mode: str = "abs",
             batch_size: int | None = None, image_spec: ImageSpec | None = None,
             held_out: float = 0.2, fidelity_data=None, equalize: bool = True,
             bias_correction: bool = True, bits8_first: bool = False,
             fuse_qdq: bool = True, threads: int = 1, speed_check: bool = True) -> Graph:
    """Post-training int8 quantization (module doc). Returns the quantized Graph; save it
    with `edgenn.save`, run it with `edgenn.InferenceSession(graph)`.

    model: .onnx/.enn path, bytes, onnx.ModelProto or fp32 Graph.
    calibration_data: feed dicts, arrays, an iterable of them, a .npy/.npz file or a
        folder of them, or a folder of images with `image_spec` (quant/data.py).
    method: "minmax" | "percentile" | "kl" | "admm" | "auto".
    weight_bits: 7 (|q| <= 63: the u8 x s8 kernels never saturate) or 8.
    depthwise_bits: weight bits of depthwise convs, 8 by default (rewrite.write_qdq says
        why); None: weight_bits.
    per_channel: per-output-channel weight scales (else one per layer).
    fidelity: e.g. 0.99: keep the most sensitive layers fp32 until the held-out output
        cosine (and top-1 agreement for classifier outputs) reaches it, measured on
        `fidelity_data` if given (any data form), else on the last `held_out` fraction of
        the calibration batches, which are then kept out of calibration.
    bits8_first: with `fidelity`, first give the most sensitive 7-bit layers 8-bit
        weights (one more at a time) and keep layers fp32 only if that is not enough
        (mixed.keep_sensitive_fp32).
    exclude: node names or op types kept fp32.
    progress: callback(stage: str, done: int, total: int).
    equalize: equalize the channel ranges of tensors that feed depthwise convs
        (equalize.py; the fp32 function is unchanged).
    bias_correction: subtract the mean output shift the weight rounding causes,
        (W_q - W) E[x], from each layer's bias (E[x]: per input channel over the
        calibration data; Nagel et al. 2019, "empirical" variant in spirit).
    speed_check: keep fp32 the layers the tuned int8 plan runs on fp32 kernels anyway,
        when the model is faster that way on this CPU (speed.py; measured, both models
        timed whole; recorded in meta["quantization"]["speed_check"]).
    threads: for calibration and the speed check.
    """
    opts = Options(method, int(weight_bits), bool(per_channel), float(percentile),
                   percentile_mode, depthwise_bits, bool(bias_correction))
    opts.check()
    if fidelity is not None and not 0 < fidelity <= 1:
        raise InputError(f"fidelity must be in (0, 1], got {fidelity}")
    graph = load_fp32(model)
    batches = load_batches(calibration_data, graph.inputs, batch_size, image_spec)
    calib, evaluation = batches, None
    if fidelity is not None:
        if fidelity_data is not None:
            evaluation = load_batches(fidelity_data, graph.inputs, batch_size, image_spec)
        else:
            calib, evaluation = batches.split(held_out)
    equalized = []
    if equalize:
        from .equalize import equalize as run_equalize
        equalized = run_equalize(graph, calib, progress=progress, threads=threads)
    plan = plan_quantization(graph, exclude)
    if not plan.layers:
        raise InputError("nothing to quantize: no Conv/Gemm/MatMul layer with constant "
                         "weights" + (f" ({len(plan.skipped)} skipped: "
                                      f"{_reasons(plan.skipped)})" if plan.skipped else ""))
    observers = collect(graph, plan.tensors, calib,
                        histograms=_activation_method(method) != "minmax",
                        progress=progress, threads=threads,
                        channel_axes=layer_input_axes(graph, plan) if bias_correction else None)
    ranges, used = choose_ranges(observers, opts)
    means = input_means(graph, plan, observers)
    mixed = None
    final_plan = plan
    if fidelity is not None:
        from .mixed import keep_sensitive_fp32
        mixed = keep_sensitive_fp32(graph, plan, ranges, opts, evaluation, fidelity,
                                    exclude, progress=progress, threads=threads, means=means,
                                    bits8_first=bits8_first)
        final_plan = mixed.plan
    bits = mixed.layer_bits() if mixed else None

    def rebuild(plan: QuantPlan) -> tuple[Graph, list]:
        """The QDQ graph of `plan` with its metadata, and its layer records."""
        q, recs = build(graph, plan, ranges, opts, means, bits)
        _note(q, opts, plan, ranges, used, recs, mixed, observers)
        q.meta["quantization"]["equalized"] = equalized
        return q, recs

    qgraph, records = rebuild(final_plan)
    if not fuse_qdq:
        return qgraph
    fused = fuse(qgraph)
    if not speed_check or not fused.meta["quantization"].get("fused"):
        return fused
    try:
        fused = _speed_check(graph, fused, records, calib.feeds[0], final_plan, exclude,
                             rebuild, threads)
    except Exception as e:   # an optimization only: never lose the int8 model to it
        fused.meta["quantization"]["speed_check"] = {"skipped": f"{type(e).__name__}: {e}"}
    return fused


def _speed_check(graph: Graph, fused: Graph, records, feeds: dict, final_plan: QuantPlan,
                 exclude, rebuild, threads: int) -> Graph:
    """speed.py: the int8 layers the tuned plan runs on fp32 kernels, back in fp32 when
    the whole model is faster that way; the choice is recorded in the metadata."""
    from . import speed
    feeds = speed.timing_feeds(graph, feeds)
    slow = speed.fp32_kernel_layers(fused, records, feeds, threads)
    check = {"fp32_kernels": slow, "kept": "int8"}
    alt_plan = plan_quantization(graph, exclude, only=set(final_plan.layers) - set(slow))
    if slow and alt_plan.layers:
        for name in slow:
            alt_plan.skipped[name] = "runs faster in fp32 on this CPU (speed check)"
        alt = fuse(rebuild(alt_plan)[0])
        speed.code_fp32_weights(alt, slow)
        t_int8, t_alt = speed.faster(fused, alt, feeds, threads)
        check.update(int8_ms=t_int8 * 1e3, with_fp32_ms=t_alt * 1e3)
        if t_alt < t_int8 * (1 - speed.MARGIN):
            fused, check["kept"] = alt, "fp32 for fp32_kernels"
    fused.meta["quantization"]["speed_check"] = check
    return fused


def _reasons(skipped: dict) -> str:
    kinds: dict[str, int] = {}
    for why in skipped.values():
        kinds[why] = kinds.get(why, 0) + 1
    return "; ".join(f"{k} x{v}" for k, v in kinds.items())


def _note(g: Graph, opts: Options, plan: QuantPlan, ranges, used, records, mixed,
          observers) -> None:
    """graph.meta["quantization"]: what was done, JSON-friendly (saved in the .enn)."""
    params = group_params(plan, ranges)
    tensors = {}
    for t in plan.tensors:
        p = params[t]
        o = observers.get(t)
        tensors[t] = {"scale": float(p.scale), "zero_point": int(p.zero_point),
                      "range": [_num(p.lo), _num(p.hi)], "method": used.get(t),
                      "observed": [_num(o.min), _num(o.max)] if o else None}
    sens = mixed.sensitivity if mixed else {}
    for r in records:
        if r["node"] in sens:
            r["sensitivity"] = sens[r["node"]]
    g.meta["quantization"] = {
        "method": opts.method, "weight_bits": opts.weight_bits,
        "depthwise_bits": opts.depthwise_bits, "bias_correction": opts.bias_correction,
        "per_channel": opts.per_channel,
        "layers": records, "tensors": tensors,
        "fp32_layers": {name: why for name, why in plan.skipped.items()},
        "mixed_precision": mixed.summary() if mixed else None,
    }


def _num(v: float):
    v = float(v)
    return v if math.isfinite(v) else None
