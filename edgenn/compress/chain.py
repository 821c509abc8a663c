"""The compression chain: prune -> int8 -> entropy coding, with size, fidelity and latency
measured after every step (`edgenn compress`, `edgenn.compress.chain.compress`).

Steps, each optional except the first:
    fp32      the model as converted (the baseline of every fidelity figure)
    pruned    `channels` of every prunable conv group removed, the next layer refitted by
              least squares on `calib` (channels.py); pointwise convs to `sparse` zeros
              (magnitude; by output-channel `pairs` if asked), MatMul / Gemm weights to
              `sparse_fc` zeros, and/or 3x3 convs
              pattern-pruned (`pattern` taps of 9, `connectivity` of the kernels
              removed): prune.py
    embedded  embedding tables as int8 / int4 QGather (`embeddings` bits): embeddings.py
    int8      post-training quantization on `calib` (quant/quantize.py, its defaults), or
    int4w     weight-only int4 / int8 (`weight_only`) codes by GPTQ on `calib` (gptq.py)
    coded     int8 / int4 blobs zstd-coded in the .enn (graph/entropy.py)
Size is the .enn file's; fidelity is the output cosine and top-1 agreement against the
fp32 model on `data` (held-out; the calibration data when none is given), and accuracy
when the data has labels; latency is edgenn's tuned plan on this CPU, median of `rounds`.
No retraining: where pruning costs more fidelity than the target allows, the honest
answer is fine-tuning with the masks (outside this chain).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import format as enn
from ..graph.ir import Graph
from ..quant.observe import copy_graph
from . import prune


@dataclass
class Step:
    name: str
    bytes: int
    cosine: float | None = None      # worst output cosine against fp32 (None: fp32 itself)
    top1: float | None = None        # top-1 agreement with fp32 on the first output
    accuracy: float | None = None    # when the data has labels
    latency_ms: float | None = None
    detail: str = ""


@dataclass
class ChainReport:
    steps: list[Step] = field(default_factory=list)

    def table(self) -> str:
        base = self.steps[0].bytes
        rows = [f"{'step':8} {'size MB':>9} {'vs fp32':>8} {'cosine':>8} {'top-1 agr':>9} "
                f"{'accuracy':>8} {'latency ms':>10}  detail"]
        for s in self.steps:
            def f(v, fmt):
                return format(v, fmt) if v is not None else "-"
            rows.append(f"{s.name:8} {s.bytes / 1e6:9.3f} {base / s.bytes:7.2f}x "
                        f"{f(s.cosine, '8.5f'):>8} {f(s.top1, '9.2%'):>9} "
                        f"{f(s.accuracy, '8.2%'):>8} {f(s.latency_ms, '10.2f'):>10}  {s.detail}")
        return "\n".join(rows)


def _size(graph: Graph, entropy: bool) -> int:
    g = copy_graph(graph)
    if entropy:
        g.meta["entropy_coding"] = "zstd"
    else:
        g.meta.pop("entropy_coding", None)
    return len(enn.to_bytes(g))


def _latency(graph: Graph, feed: dict, threads: int, rounds: int) -> float:
    from ..runtime.profile import latency_ms
    from ..runtime.session import InferenceSession
    sess = InferenceSession(graph, threads=threads,
                            input_shapes={k: v.shape for k, v in feed.items()})
    return latency_ms(sess, feed, rounds)


def _fidelity(fp32: Graph, test: Graph, data, batch_size, image_spec, threads) -> dict:
    from ..quant.accuracy import report
    rep = report(fp32, test, data, batch_size=batch_size, image_spec=image_spec,
                 layers=False, threads=threads)
    outs = list(rep["outputs"].values())
    acc = rep.get("accuracy") or {}
    return {"cosine": min(o["cosine"] for o in outs), "top1": outs[0].get("top1"),
            "accuracy": acc.get("int8"), "fp32_accuracy": acc.get("fp32")}


def compress(model, calib, *, channels: float | None = None, importance: str = "l1",
             channel_layers: dict | None = None,
             sparse: float | None = None, sparse_fc: float | None = None,
             pairs: bool = False, pattern: int | None = None,
             patterns: int = 8, connectivity: float = 0.5, embeddings: int | None = None,
             int8: bool = True, weight_only: int | None = None, block: int | None = None,
             entropy: bool = True, data=None, batch_size: int | None = None,
             image_spec=None, threads: int = 1, rounds: int = 10,
             progress=None) -> tuple[Graph, ChainReport]:
    """-> (the compressed graph, the chain report). `model`: .onnx / .enn / Graph.
    weight_only 8 / 4: instead of the int8 step, weight-only int8 / int4 codes chosen by
    GPTQ on `calib` (compute stays fp32: for models whose activations must stay float)"""
    from ..converters.source import load
    from ..quant.data import load_batches
    fp32 = model if isinstance(model, Graph) else load(model)
    data = calib if data is None else data
    feed = load_batches(data, fp32.inputs, batch_size, image_spec).feeds[0]
    # latency on one sample where the batch dim is free, else on the model's own batch
    fixed = {v.name: v.shape[0] for v in fp32.inputs if v.shape and isinstance(v.shape[0], int)}
    one = {k: v[:fixed.get(k, 1)] for k, v in feed.items()}
    say = progress or (lambda stage: None)
    rep = ChainReport()

    def measure(name, graph, coded=False, detail="", baseline=False):
        say(name)
        fid = {} if baseline else _fidelity(fp32, graph, data, batch_size, image_spec, threads)
        rep.steps.append(Step(name, _size(graph, coded), fid.get("cosine"), fid.get("top1"),
                              fid.get("accuracy"), _latency(graph, one, threads, rounds),
                              detail))
        if fid.get("fp32_accuracy") is not None:
            rep.steps[0].accuracy = fid["fp32_accuracy"]

    measure("fp32", fp32, baseline=True)
    current = fp32
    if channels or channel_layers or sparse or sparse_fc or pattern:
        current = copy_graph(fp32)
        details = []
        if channels or channel_layers:
            from .channels import prune_channels
            r = prune_channels(current, channels or 0.0, calib=calib, importance_=importance,
                               per_layer=channel_layers, threads=threads)
            details.append(f"{len(r.groups)} conv groups channel-pruned, refit")
        if sparse:
            r = prune.sparsify(current, sparse, pairs=pairs)
            details.append(f"1x1 {r.sparsity:.0%} zeros")
        if sparse_fc:
            r = prune.sparsify(current, sparse_fc, skip_first=False,
                               layers=prune.fully_connected, pairs=pairs)
            details.append(f"{len(r.layers)} fully connected {r.sparsity:.0%} zeros")
        if pattern:
            r = prune.pattern_prune(current, pattern, patterns, connectivity)
            details.append(f"3x3 k={pattern} of 9, {connectivity:.0%} kernels cut: "
                           f"{r.sparsity:.0%} zeros")
        measure("pruned", current, detail="; ".join(details))
    if embeddings:
        from .embeddings import quantize_embeddings
        if current is fp32:
            current = copy_graph(fp32)
        r = quantize_embeddings(current, embeddings)
        measure("embedded", current, detail=f"{len(r.tables)} tables int{embeddings}: "
                                            f"{r.bytes_before / 1e6:.2f} -> "
                                            f"{r.bytes_after / 1e6:.2f} MB")
    if weight_only:
        from .weights import compress_weights
        if current is fp32:
            current = copy_graph(fp32)
        say("GPTQ")
        r = compress_weights(current, weight_only, block=block, calib=calib, threads=threads)
        measure(f"int{weight_only}w", current,
                detail=f"{r['tensors']} weights int{weight_only} weight-only "
                       f"({r['gptq']} by GPTQ)")
    elif int8:
        from ..quant.quantize import quantize
        say("quantizing")
        current = quantize(current, calib, batch_size=batch_size, image_spec=image_spec,
                           threads=threads)
        measure("int8", current, detail=f"{len(current.meta['quantization']['layers'])} "
                                         f"int8 layers")
    if entropy:
        measure("coded", current, coded=True, detail="zstd int8/int4 blobs")
        current.meta["entropy_coding"] = "zstd"
    return current, rep


RATIOS = (0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
# the quantization step of a candidate: int8 quantization, weight-only codes by GPTQ (int8w,
# int4w: compute stays fp32), or none (fp32)
PRECISIONS = ("int8", "int4w")
_PRECISION_OPTIONS = {"int8": {}, "int8w": {"weight_only": 8}, "int4w": {"weight_only": 4},
                      "fp32": {"int8": False}}


def search(model, calib, *, fidelity: float, target_size: float | None = None,
           ratios=RATIOS, precisions=PRECISIONS, progress=None,
           **options) -> tuple[Graph, ChainReport, list]:
    """The smallest chain that keeps `fidelity` (the final step's output cosine against
    fp32 on the held-out data) and, when given, is `target_size` times smaller than fp32.
    Per precision (PRECISIONS' names), channel ratios are tried from the largest down
    until one meets the fidelity: fidelity falls as the ratio grows, so that is the
    precision's smallest file; of those, the smallest is kept.
    -> (graph, its report, [(ratio, precision, size ratio, cosine) per candidate]).
    Refused (ValueError) when no candidate meets the targets: the honest answer is then
    pruning with retraining, or a lower target."""
    from ..converters.source import load
    unknown = [p for p in precisions if p not in _PRECISION_OPTIONS]
    if unknown:
        raise ValueError(f"precisions {unknown}: not among {sorted(_PRECISION_OPTIONS)}")
    fixed = sorted({"int8", "weight_only", "channels"} & set(options))
    if fixed:
        raise ValueError(f"search sets {fixed} per candidate: ask for a precision through "
                         f"precisions={sorted(_PRECISION_OPTIONS)}, not compress's options")
    fp32 = model if isinstance(model, Graph) else load(model)
    tried, best = [], None
    for precision in precisions:
        opts = dict(options, **_PRECISION_OPTIONS[precision])
        for ratio in ratios:
            if progress:
                progress(f"candidate: channels -{ratio:.0%}, {precision}")
            graph, rep = compress(fp32, calib, channels=ratio or None, **opts)
            last = rep.steps[-1]
            shrink = rep.steps[0].bytes / last.bytes
            cos = last.cosine if last.cosine is not None else 1.0
            tried.append((ratio, precision, shrink, cos))
            if cos >= fidelity:      # smaller ratios only make this precision's file larger
                if (target_size is None or shrink >= target_size) and (
                        best is None or last.bytes < best[1].steps[-1].bytes):
                    best = graph, rep
                break
    if best is not None:
        return best[0], best[1], tried
    raise ValueError("no candidate meets fidelity {:.4f}{}: tried {}".format(
        fidelity, f" and {target_size:.1f}x smaller" if target_size else "",
        ", ".join(f"-{r:.0%} {p}: {s:.2f}x cosine {c:.4f}" for r, p, s, c in tried)))
