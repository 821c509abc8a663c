"""Accuracy report: an int8 model against its fp32 original on held-out inputs.

    rep = edgenn.quant.report("model.onnx", "model.int8.enn", data)
    print(edgenn.quant.format_report(rep))

Per model output: cosine similarity (mean and worst sample), SQNR in dB, max abs error,
top-1 agreement for classifier-like outputs; accuracy of both models when the data carry
labels. Per quantized layer (for models made by `edgenn.quantize`, which records its
layers in graph.meta["quantization"]): the same metrics of the layer's output inside the
int8 model against the fp32 model's tensor of the same name (the error accumulated up to
that layer), and the layer's sensitivity (model output cosine with that layer alone int8)
when the quantizer measured it (fidelity target given).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..graph.ir import Graph
from .data import ImageSpec, load_batches
from .metrics import Agreement
from .observe import Runner


def _load(model) -> Graph:
    from ..converters.source import load
    return model if isinstance(model, Graph) else load(model)


def _layer_taps(fp32: Graph, int8: Graph) -> list[dict]:
    """Per quantized layer: which tensor of each graph holds its output, and how to read
    the int8 one (uint8 with scale / zero point, or float)."""
    meta = int8.meta.get("quantization") or {}
    fp32_names = {o for n in fp32.nodes for o in n.outputs}
    int8_names = {o for n in int8.nodes for o in n.outputs}
    tensors = meta.get("tensors", {})
    taps = []
    for rec in meta.get("layers", []):
        out = rec.get("output")
        if out not in fp32_names:
            continue
        tap = dict(rec, fp32=out)
        q = rec.get("output_quantized")
        if q and q in int8_names and out in tensors:
            tap.update(int8=q, scale=tensors[out]["scale"], zero_point=tensors[out]["zero_point"])
        elif out in int8_names:
            tap.update(int8=out)
        else:
            continue
        taps.append(tap)
    return taps


def _as_float(x: np.ndarray, tap: dict) -> np.ndarray:
    if "scale" in tap and x.dtype == np.uint8:
        return (x.astype(np.float32) - np.float32(tap["zero_point"])) * np.float32(tap["scale"])
    return x


def report(fp32_model, int8_model, data, *, batch_size: int | None = None,
           image_spec: ImageSpec | None = None, layers: bool = True, threads: int = 1,
           reference: bool = False, progress=None) -> dict:
    """fp32 vs int8 on `data` (any form quant/data.py accepts) -> a JSON-friendly dict:
    {"samples", "outputs": {name: metrics}, "accuracy": {"fp32", "int8"} or None,
     "layers": [per quantized / fp32-kept layer], "quantization": summary of the int8 meta}.
    reference: run the int8 model on the reference kernels (to isolate a kernel bug)."""
    fp32, int8 = _load(fp32_model), _load(int8_model)
    names32 = [v.name for v in fp32.inputs]
    if sorted(names32) != sorted(v.name for v in int8.inputs):
        raise InputError(f"the models have different inputs: fp32 {names32}, int8 "
                         f"{[v.name for v in int8.inputs]}")
    batches = load_batches(data, fp32.inputs, batch_size, image_spec)
    taps = _layer_taps(fp32, int8) if layers else []
    run32 = Runner(fp32, observe=[t["fp32"] for t in taps], threads=threads)
    run8 = Runner(int8, observe=[t["int8"] for t in taps], threads=threads,
                  reference=reference)
    out_names = [v.name for v in fp32.outputs]
    outs = {n: Agreement() for n in out_names}
    per_layer = [Agreement() for _ in taps]
    hits32 = hits8 = labelled = 0
    for k, feed in enumerate(batches.feeds):
        a, b = run32.run(feed), run8.run(feed)
        for n in out_names:
            outs[n].add(a[n], b[n])
        for acc, tap in zip(per_layer, taps):
            acc.add(a[tap["fp32"]], _as_float(b[tap["int8"]], tap))
        labels = batches.labels[k] if batches.labels else None
        if labels is not None:
            y32, y8 = a[out_names[0]], b[out_names[0]]
            if y32.ndim == 2 and len(labels) == y32.shape[0]:
                labels = np.asarray(labels).reshape(-1)
                hits32 += int(np.sum(y32.argmax(1) == labels))
                hits8 += int(np.sum(y8.argmax(1) == labels))
                labelled += len(labels)
        if progress is not None:
            progress("accuracy: batches", k + 1, len(batches))
    meta = int8.meta.get("quantization") or {}
    sens = ((meta.get("mixed_precision") or {}).get("sensitivity") or {})
    rows = []
    for acc, tap in zip(per_layer, taps):
        row = {"node": tap["node"], "op": tap["op"], "precision": "int8",
               "output": "uint8" if "scale" in tap else "float", **acc.result()}
        s = tap.get("sensitivity") or sens.get(tap["node"])
        if s:
            row["alone_cosine"] = s.get("cosine")
            row["alone_top1"] = s.get("top1")
        row["weight_rel_error"] = tap.get("weight_rel_error")
        rows.append(row)
    for name, why in (meta.get("fp32_layers") or {}).items():
        if why in ("not selected",):
            continue
        s = sens.get(name) or {}
        rows.append({"node": name, "op": _op_of(fp32, name), "precision": "fp32",
                     "reason": why, "alone_cosine": s.get("cosine"),
                     "alone_top1": s.get("top1")})
    result = {
        "samples": sum(min(v.shape[0] for v in f.values()) for f in batches.feeds),
        "outputs": {n: a.result() for n, a in outs.items()},
        "accuracy": {"fp32": hits32 / labelled, "int8": hits8 / labelled,
                     "labelled": labelled} if labelled else None,
        "layers": rows,
        "quantization": {k: meta.get(k) for k in ("method", "weight_bits", "per_channel",
                                                   "fused")} if meta else None,
    }
    return result


def _op_of(graph: Graph, name: str) -> str:
    return next((n.op for n in graph.nodes if n.name == name), "?")


def _f(v, fmt: str, width: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    if isinstance(v, float) and math.isinf(v):
        return ("inf" if v > 0 else "-inf").rjust(width)
    return format(v, fmt).rjust(width)


def format_report(rep: dict) -> str:
    """The report as text tables."""
    lines = []
    q = rep.get("quantization")
    if q:
        lines.append(f"int8 model: method {q.get('method')}, {q.get('weight_bits')}-bit "
                     f"weights{' per channel' if q.get('per_channel') else ''}"
                     f"{'' if q.get('fused', True) else ' (QDQ, not fused)'}")
    lines.append(f"{rep['samples']} held-out samples")
    lines.append(f"{'output':36} {'cosine':>9} {'worst':>9} {'SQNR dB':>8} {'max abs':>10} "
                 f"{'top-1 agree':>11}")
    for name, m in rep["outputs"].items():
        lines.append(f"{name[-36:]:36} {_f(m['cosine'], '.5f', 9)} {_f(m['cosine_min'], '.5f', 9)} "
                     f"{_f(m['sqnr_db'], '.1f', 8)} {_f(m['max_abs'], '.4g', 10)} "
                     f"{_f(m.get('top1'), '.2%', 11)}")
    acc = rep.get("accuracy")
    if acc:
        lines.append(f"accuracy on {acc['labelled']} labelled samples: fp32 {acc['fp32']:.2%}, "
                     f"int8 {acc['int8']:.2%} ({(acc['int8'] - acc['fp32']) * 100:+.2f} pt)")
    if rep["layers"]:
        lines.append("")
        lines.append("per layer: the layer's output inside the int8 model vs fp32 "
                     "(error accumulated so far); 'alone': model output cosine with only "
                     "this layer int8")
        lines.append(f"{'layer':40} {'op':5} {'prec':5} {'out':5} {'cosine':>9} "
                     f"{'SQNR dB':>8} {'alone cos':>10} {'w err':>8}")
        for r in rep["layers"]:
            if r["precision"] == "fp32":
                lines.append(f"{r['node'][-40:]:40} {r['op'][:5]:5} {'fp32':5} {'':5} "
                             f"{'':>9} {'':>8} {_f(r.get('alone_cosine'), '.5f', 10)} "
                             f"  ({r.get('reason')})")
                continue
            lines.append(f"{r['node'][-40:]:40} {r['op'][:5]:5} {'int8':5} "
                         f"{r['output'][:5]:5} {_f(r['cosine'], '.5f', 9)} "
                         f"{_f(r['sqnr_db'], '.1f', 8)} {_f(r.get('alone_cosine'), '.5f', 10)} "
                         f"{_f(r.get('weight_rel_error'), '.1e', 8)}")
    return "\n".join(lines)
