"""Structured channel pruning with least-squares reconstruction (ThiNet / He et al. 2017):
a smaller dense model every kernel runs, no training loop.

Prunable groups (dependency-aware): a group-1 Conv P whose output only one node reads,
  - P -> depthwise Conv -> group-1 Conv D (MobileNet's inverted residual: P's output
    channels, the depthwise channels and D's input channels go together), or
  - P -> group-1 Conv D (ResNet's conv1 -> conv2),
with every weight constant. Channels that reach a residual Add, a Concat, a Gemm after a
Flatten or a graph output are never in a group, so shapes elsewhere never change.

Per group, P's output channels are ranked by importance (L1 or L2 norm of their filters,
or FPGM: distance to the filters' geometric median, the most replaceable lowest) and the
least important `ratio` of them removed. Then D's weights are refitted by least squares
on calibration activations: D's input (original model) restricted to the kept channels
should reproduce D's original pre-activation output (ridge-regularized normal equations,
im2col patches for KxK D). The config (ratio per group, by P's node name) is a JSON file
generated from the model (`config_for`), which a user edits and passes back.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..graph.ir import Graph, Node

IMPORTANCE = ("l1", "l2", "fpgm")
MAX_PIXELS = 20000           # calibration pixels per refit (sampled)


@dataclass
class Group:
    producer: Node
    depthwise: Node | None
    consumer: Node


@dataclass
class ChannelReport:
    groups: dict = field(default_factory=dict)    # producer name -> (channels, kept, refit)

    def table(self) -> str:
        rows = [f"channel-pruned {len(self.groups)} groups"]
        for name, (n, k, refit) in self.groups.items():
            rows.append(f"  {name[:56]:56} {n:>5} -> {k:<5} {refit}")
        return "\n".join(rows)


def _conv_weight(graph: Graph, node: Node, residual_ok: bool = True):
    """Its constant 4-D weight, or None (not a Conv, weights or bias not constant, or a
    fused residual input where residual_ok is False: that tensor's channels are fixed)."""
    if node.op != "Conv" or len(node.inputs) < 2 or node.inputs[1] not in graph.consts:
        return None
    if not residual_ok and len(node.inputs) > 3 and node.inputs[3]:
        return None
    if len(node.inputs) > 2 and node.inputs[2] and node.inputs[2] not in graph.consts:
        return None
    return np.asarray(graph.consts[node.inputs[1]])


def groups(graph: Graph) -> list[Group]:
    """The prunable groups of the graph, in graph order (see the module doc)."""
    readers: dict[str, list[tuple[Node, int]]] = {}
    for n in graph.nodes:
        for i, name in enumerate(n.inputs):
            readers.setdefault(name, []).append((n, i))
    outputs = graph.output_names()

    def only_reader(node):
        uses = readers.get(node.outputs[0], [])
        if len(uses) != 1 or node.outputs[0] in outputs or uses[0][1] != 0:
            return None
        return uses[0][0]

    found = []
    for p in graph.nodes:
        w = _conv_weight(graph, p, residual_ok=False)
        if w is None or p.attrs.get("group", 1) != 1 or w.shape[0] < 2:
            continue
        nxt = only_reader(p)
        if nxt is None or _conv_weight(graph, nxt) is None:
            continue
        dw = None
        wn = _conv_weight(graph, nxt)
        if nxt.attrs.get("group", 1) == w.shape[0] and wn.shape[:2] == (w.shape[0], 1):
            if _conv_weight(graph, nxt, residual_ok=False) is None:
                continue
            dw, nxt = nxt, only_reader(nxt)
            if nxt is None or _conv_weight(graph, nxt) is None:
                continue
            wn = _conv_weight(graph, nxt)
        if nxt.attrs.get("group", 1) == 1 and wn.shape[1] == w.shape[0]:
            found.append(Group(p, dw, nxt))
    return found


def importance(w: np.ndarray, how: str = "l1") -> np.ndarray:
    """(M,) score per output filter of w (M, ...): higher = keep."""
    f = np.asarray(w, np.float64).reshape(w.shape[0], -1)
    if how == "l1":
        return np.abs(f).sum(1)
    if how == "l2":
        return np.sqrt((f * f).sum(1))
    if how == "fpgm":   # filters near the geometric median are replaceable: low score
        sq = (f * f).sum(1)
        d2 = sq[:, None] + sq[None, :] - 2 * (f @ f.T)            # (M, M), no (M, M, D)
        return np.sqrt(np.maximum(d2, 0)).sum(1)
    raise ValueError(f"importance must be one of {IMPORTANCE}, got {how!r}")


def config_for(graph: Graph, ratio: float = 0.3) -> dict:
    """{"ratio": global, "layers": {producer node: ratio}}: edit, save as JSON, pass back."""
    return {"ratio": ratio, "importance": "l1",
            "layers": {g.producer.name: ratio for g in groups(graph)}}


def load_config(path: str) -> dict:
    with open(path) as f:
        cfg = json.load(f)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("layers", {}), dict):
        raise ValueError(f"{path}: expected {{\"ratio\": R, \"layers\": {{node: R}}}}")
    return cfg


def _pads(node: Node, x_shape, w_shape) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of a 2-D Conv, auto_pad resolved as ONNX does."""
    a = node.attrs
    auto = a.get("auto_pad", "NOTSET")
    if auto == "VALID":
        return 0, 0, 0, 0
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for d in range(2):
            s = (a.get("strides") or [1, 1])[d]
            dil = (a.get("dilations") or [1, 1])[d]
            size = x_shape[2 + d]
            total = max(0, (-(-size // s) - 1) * s + (w_shape[2 + d] - 1) * dil + 1 - size)
            first = total // 2 if auto == "SAME_UPPER" else total - total // 2
            out.append((first, total - first))
        return out[0][0], out[1][0], out[0][1], out[1][1]
    p = list(a.get("pads") or [0, 0, 0, 0])
    return p[0], p[1], p[2], p[3]


def _patches(x: np.ndarray, node: Node, w_shape) -> np.ndarray:
    """im2col of x (N, C, H, W) for Conv `node` -> (C * KH * KW, N * OH * OW) float64."""
    kh, kw = w_shape[2:]
    n, c, h, wd = x.shape
    sh, sw = node.attrs.get("strides") or [1, 1]
    dh, dw = node.attrs.get("dilations") or [1, 1]
    pt, pl, pb, pr = _pads(node, x.shape, w_shape)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((c, kh, kw, n, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                               j * dw:j * dw + sw * (ow - 1) + 1:sw].transpose(1, 0, 2, 3)
    return cols.reshape(c * kh * kw, -1)


def _refit(cols: np.ndarray, keep: np.ndarray, w: np.ndarray,
           cols_now: np.ndarray | None = None) -> np.ndarray:
    """D's weights over the kept input channels, least squares against D's original
    pre-activation output (bias aside) on the calibration patches cols (C*KH*KW, P) of
    its input in the original model; the regressors are the kept channels' rows of cols,
    or cols_now: the same pixels of its (kept-channel) input in the model pruned so far.
    -> (M, kept, KH, KW) float32."""
    m = w.shape[0]
    target = w.reshape(m, -1).astype(np.float64) @ cols           # (M, P)
    kk = w.shape[2] * w.shape[3]
    rows = (keep[:, None] * kk + np.arange(kk)[None, :]).reshape(-1)
    xk = cols[rows] if cols_now is None else cols_now             # (kept*K, P)
    gram = xk @ xk.T
    lam = 1e-6 * np.trace(gram) / max(len(gram), 1) + 1e-12
    sol = np.linalg.solve(gram + lam * np.eye(len(gram)), xk @ target.T)   # (kept*K, M)
    if not np.all(np.isfinite(sol)):      # activations out of float range: no refit
        return np.ascontiguousarray(w[:, keep], np.float32)
    return sol.T.reshape(m, len(keep), w.shape[2], w.shape[3]).astype(np.float32)


def prune_channels(graph: Graph, ratio: float = 0.3, calib=None, importance_: str = "l1",
                   per_layer: dict | None = None, multiple: int = 1,
                   threads: int = 1) -> ChannelReport:
    """Remove the `ratio` least important channels of every prunable group (per_layer:
    {producer node name: ratio} overrides; multiple: keep a multiple of this many), and,
    with calibration data (any form quant/data.py reads), refit each consumer by least
    squares. Sequential (He et al.): group by group, the consumer's regressors are its
    input in the model pruned so far, its target the original model's output, so each
    refit also absorbs the error of the groups before it. Changes the graph's node list
    and consts in place."""
    per_layer = dict(per_layer or {})
    found = groups(graph)
    unknown = set(per_layer) - {g.producer.name for g in found}
    if unknown:
        raise ValueError(f"not the producer of a prunable group: {sorted(unknown)}")
    consumers = [g.consumer for g in found]
    patches = _consumer_patches(graph, consumers, calib, threads) if calib is not None else {}
    report = ChannelReport()
    replace = {}
    changed = False          # is the graph pruned so far different from the original?
    for g in found:
        r = float(per_layer.get(g.producer.name, ratio))
        if not 0 <= r < 1:
            raise ValueError(f"{g.producer.name}: ratio {r} not in [0, 1)")
        cur = lambda node: replace.get(id(node), node)   # noqa: E731 - chained groups
        wp = np.asarray(graph.consts[cur(g.producer).inputs[1]])
        m = wp.shape[0]
        kept_n = max(1, int(round(m * (1 - r))))
        if multiple > 1 and kept_n > multiple:
            kept_n = min(m, -(-kept_n // multiple) * multiple)
        if kept_n == m:
            continue
        keep = np.sort(np.argsort(-importance(wp, importance_), kind="stable")[:kept_n])
        _slice_out(graph, g.producer, keep, replace)
        if g.depthwise is not None:
            _slice_out(graph, g.depthwise, keep, replace, depthwise=True)
        wd = np.asarray(graph.consts[cur(g.consumer).inputs[1]])
        if g.consumer.name in patches:
            now = None
            if changed:      # the consumer's input in the model as pruned so far
                _set_const(graph, g.consumer, 1, np.ascontiguousarray(wd[:, keep]), replace)
                current = Graph([cur(n) for n in graph.nodes], graph.inputs, graph.outputs,
                                graph.consts, graph.meta)
                now = _consumer_patches(current, [cur(g.consumer)], calib,
                                        threads)[g.consumer.name]
            new_w = _refit(patches[g.consumer.name], keep, wd, now)
            how = "refit (least squares)"
        else:
            new_w, how = wd[:, keep], "sliced"
        _set_const(graph, g.consumer, 1, np.ascontiguousarray(new_w, np.float32), replace)
        report.groups[g.producer.name] = (m, kept_n, how)
        changed = True
    graph.nodes = [replace.get(id(n), n) for n in graph.nodes]
    used = {i for n in graph.nodes for i in n.inputs} | graph.output_names()
    for name in [k for k in graph.consts if k not in used]:   # the unpruned weights
        del graph.consts[name]
    return report


def _consumer_patches(graph, consumers, calib, threads) -> dict:
    """{consumer node name: im2col patches (C*KH*KW, <= MAX_PIXELS) of its input on the
    calibration data}, sampled batch by batch (the activations themselves not kept). The
    sampled pixels depend only on the consumer's name, the batch and the patch count, so
    the original and a pruned model are sampled at the same pixels."""
    from ..quant.data import load_batches
    from ..quant.observe import Runner
    by_name = {c.name: c for c in consumers}
    runner = Runner(graph, observe=[c.inputs[0] for c in by_name.values()], threads=threads)
    feeds = load_batches(calib, graph.inputs).feeds
    per_batch = max(1, MAX_PIXELS // max(len(feeds), 1))
    got: dict[str, list] = {}
    for k, feed in enumerate(feeds):
        out = runner.run(feed)
        for name, node in by_name.items():
            w_shape = graph.consts[node.inputs[1]].shape
            cols = _patches(out[node.inputs[0]], node, w_shape)
            if cols.shape[1] > per_batch:
                rng = np.random.default_rng([zlib.crc32(name.encode()), k])
                cols = cols[:, rng.choice(cols.shape[1], per_batch, replace=False)]
            got.setdefault(name, []).append(cols)
    return {k: np.concatenate(v, axis=1) for k, v in got.items()}


def _set_const(graph, node, i, value, replace):
    """Give `node` input i a new constant (a fresh name: the old one may be shared)."""
    name = graph.unique_name(node.inputs[i] + "_pruned")
    graph.consts[name] = value
    cur = replace.get(id(node), node)
    new = Node(cur.op, list(cur.inputs), list(cur.outputs), dict(cur.attrs), cur.name)
    new.inputs[i] = name
    replace[id(node)] = new


def _slice_out(graph, node, keep, replace, depthwise=False):
    """Keep output channels `keep` of Conv `node` (weights, bias; a depthwise's group)."""
    current = replace.get(id(node), node)
    w = np.asarray(graph.consts[current.inputs[1]])
    _set_const(graph, node, 1, np.ascontiguousarray(w[keep]), replace)
    if len(current.inputs) > 2 and current.inputs[2]:
        b = np.asarray(graph.consts[current.inputs[2]])
        _set_const(graph, node, 2, np.ascontiguousarray(b[keep]), replace)
    if depthwise:
        replace[id(node)].attrs["group"] = len(keep)
