"""The scaling factors of a model family and how one set of them turns the source model
into a member, each with edgenn's own tools (issue #12, xNN's "scalable modeling"):

    resolution  input H and W scaled (CNNs whose outputs keep their shape, as a classifier
                head after global pooling, or are dense maps at the input's resolution,
                as a detector's, or sequences whose length follows the input's width, as
                a CTC text recognizer's: those are resized back for fidelity); W alone
                where the graph fixes H; calibration and evaluation data resized;
                dynamic dims bound to the data's first
    width       channel pruning ratio (compress/channels.py, least-squares refit on the
                calibration data), globally, and `width_late` for the later half of the
                prunable groups (per stage)
    sparsity    "none", "sparse" (1x1 convs to 70% zeros, the sparse kernels' range) or
                "pattern" (3x3 convs keep 4 of 9 taps, half the kernels cut): prune.py
    precision   "fp32", "int8" (post-training, quant/quantize.py with its speed check:
                int8 only where it pays on this CPU) or "mixed" (the most sensitive layers
                kept fp32 until the held-out output cosine reaches MIXED_FIDELITY)
Members are saved zstd-coded. Applied in that order (the order of `edgenn compress`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from ..graph.infer import infer
from ..graph.ir import Graph, ValueInfo
from ..quant.data import Batches, resize_bilinear

SPARSE_RATIO = 0.7
PATTERN_TAPS = 4
MIXED_FIDELITY = 0.995

# the search space: every level of every factor (the first level is the source model's)
LEVELS = {
    "resolution": (1.0, 0.857, 0.714, 0.571),
    "width": (0.0, 0.125, 0.25, 0.375, 0.5),
    "width_late": (None, 0.0, 0.25, 0.5),
    "sparsity": ("none", "sparse", "pattern"),
    "precision": ("fp32", "int8", "mixed"),
}


@dataclass(frozen=True)
class Factors:
    resolution: float = 1.0
    width: float = 0.0
    width_late: float | None = None     # None: the later stages as `width`
    sparsity: str = "none"
    precision: str = "fp32"

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> Factors:
        """The factors of a JSON record (a family file's), checked: ValueError if not."""
        f = cls(**{k: d[k] for k in asdict(cls()) if k in d})
        nums = [f.resolution, f.width] + ([] if f.width_late is None else [f.width_late])
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in nums) \
                or f.sparsity not in LEVELS["sparsity"] \
                or f.precision not in LEVELS["precision"]:
            raise ValueError(f"not a set of factors: {d!r}")
        return f

    def describe(self) -> str:
        parts = []
        if self.resolution != 1.0:
            parts.append(f"res x{self.resolution:.3g}")
        late = self.width if self.width_late is None else self.width_late
        if self.width or late:
            parts.append(f"width -{self.width:.0%}" + (f"/-{late:.0%}" if late != self.width
                                                         else ""))
        if self.sparsity != "none":
            parts.append(self.sparsity)
        parts.append(self.precision)
        return " ".join(parts)


MIN_SIDE = 16     # images smaller than this are not scaled down


def image_axes(v: ValueInfo) -> tuple[int, int] | None:
    """The (H, W) axes of an image input (NCHW or NHWC, <= 4 channels, sides of at least
    MIN_SIDE), else None."""
    s = v.shape
    if len(s) != 4 or not all(isinstance(d, int) for d in s[1:]):
        return None
    if s[1] <= 4 and min(s[2], s[3]) >= MIN_SIDE:
        return 2, 3
    if s[3] <= 4 and min(s[1], s[2]) >= MIN_SIDE:
        return 1, 2
    return None


def _snap(n: int, scale: float) -> int:
    """n * scale rounded to the input's own granularity: the largest of 32, 16, 8 that
    divides n at least 4 times (a CNN's total stride), else 1."""
    step = next((s for s in (32, 16, 8) if n % s == 0 and n // s >= 4), 1)
    return max(step, round(n * scale / step) * step)


def bind_to_data(graph: Graph, batches: Batches) -> Graph:
    """`graph` with the dynamic non-batch dims of its inputs bound to the data's (one shape
    across the batches): the resolution a family is built for. Unchanged if none."""
    inputs = []
    for v in graph.inputs:
        shapes = {tuple(np.shape(f[v.name]))[1:] for f in batches.feeds if v.name in f}
        if len(shapes) == 1 and any(not isinstance(d, int) for d in v.shape[1:]):
            (rest,) = shapes
            if len(rest) == len(v.shape) - 1:
                v = ValueInfo(v.name, v.dtype, (v.shape[0], *rest))
        inputs.append(v)
    if inputs == list(graph.inputs):
        return graph
    return Graph(graph.nodes, inputs, graph.outputs, graph.consts, dict(graph.meta))


def dense_match(ref_shape: tuple, shape: tuple) -> bool:
    """An output of `shape` that is `ref_shape` at another resolution: 4-D, the same
    batch and channels (NCHW), other spatial dims (a detector's or segmenter's map)."""
    return len(shape) == len(ref_shape) == 4 and shape[:2] == ref_shape[:2] \
        and shape[2:] != ref_shape[2:]


def sequence_match(ref_shape: tuple, shape: tuple) -> bool:
    """An output of `shape` that is `ref_shape` at another input width: 3-D (N, T,
    classes), the same batch and classes, another length (a CTC recognizer's scores)."""
    return len(shape) == len(ref_shape) == 3 and shape[0] == ref_shape[0] \
        and shape[2] == ref_shape[2] and shape[1] != ref_shape[1]


def rescaled(ref_shape: tuple, shape: tuple) -> bool:
    """An output that another resolution reshapes in a way fidelity can undo."""
    return dense_match(ref_shape, shape) or sequence_match(ref_shape, shape)


def scaled_inputs(graph: Graph, scale: float) -> dict[str, tuple] | None:
    """{input: new shape} at `scale`, or None when the model does not allow it: no image
    input, or an output whose shape would change other than as a dense map at the new
    resolution or a sequence of another length (rescaled; fidelity resizes them back).
    H and W are scaled, else W alone where the graph fixes H (a text recognizer's
    height). Checked by shape inference."""
    if scale == 1.0:
        return {}
    axes = {v.name: image_axes(v) for v in graph.inputs}
    if any(a is None for a in axes.values()):
        return None                   # not an image, or too small to scale
    for pick in (slice(None), slice(1, 2)):          # (H, W), else (W,)
        new = {}
        for v in graph.inputs:
            shape = list(v.shape)
            for a in axes[v.name][pick]:
                shape[a] = _snap(shape[a], scale)
            new[v.name] = tuple(shape)
        allowed = _allowed(graph, new)
        if allowed is not None:
            return allowed
    return None


def _allowed(graph: Graph, new: dict[str, tuple]) -> dict[str, tuple] | None:
    """`new` if shape inference takes it with every output kept or rescaled, {} if it is
    the source's own shape (too small to scale at this step), else None."""
    if all(new[v.name] == tuple(v.shape) for v in graph.inputs):
        return {}
    batch = {v.name: tuple(1 if not isinstance(d, int) else d for d in v.shape)
             for v in graph.inputs}
    try:
        before = infer(graph, batch)
        after = infer(graph, {k: (batch[k][0],) + tuple(s[1:]) for k, s in new.items()})
    except Exception:       # noqa: BLE001 - a shape rule refusing the new size: not allowed
        return None
    if any(o.name not in after or (before[o.name].shape != after[o.name].shape and not
           rescaled(tuple(before[o.name].shape), tuple(after[o.name].shape)))
           for o in graph.outputs):
        return None
    return new


def resize_outputs(outs: list, ref: list) -> list:
    """Each output of a member at another resolution resized to the source's shape: a
    dense map bilinear over (H, W), a sequence linearly over T; the rest as they are."""
    out = []
    for o, r in zip(outs, ref):
        if dense_match(tuple(r.shape), tuple(o.shape)):
            o = _resize_hw(o, (2, 3), r.shape[2], r.shape[3])
        elif sequence_match(tuple(r.shape), tuple(o.shape)):
            o = _resize_hw(o[:, :, None], (1, 2), r.shape[1], 1)[:, :, 0]   # (N, T, 1, C)
        out.append(o)
    return out


def _resize_hw(x, axes: tuple[int, int], h: int, w: int) -> np.ndarray:
    """`x` with its `axes` (H, W) resized to (h, w), bilinear; float32, contiguous."""
    hwc = np.moveaxis(np.asarray(x, np.float32), axes, (0, 1))      # (H, W, ...)
    flat = hwc.reshape(hwc.shape[0], hwc.shape[1], -1)
    r = resize_bilinear(flat, h, w).reshape((h, w) + hwc.shape[2:])
    return np.ascontiguousarray(np.moveaxis(r, (0, 1), axes), np.float32)


def resize_feeds(batches: Batches, shapes: dict, inputs) -> Batches:
    """The image inputs of every batch resized (bilinear) to `shapes`' H, W."""
    if not shapes:
        return batches
    axes = {v.name: image_axes(v) for v in inputs}
    feeds = []
    for feed in batches.feeds:
        out = dict(feed)
        for name, shape in shapes.items():
            ha, wa = axes[name]
            out[name] = _resize_hw(feed[name], (ha, wa), shape[ha], shape[wa])
        feeds.append(out)
    return Batches(feeds, batches.labels)


def applicable(graph: Graph) -> dict[str, tuple]:
    """The levels of each factor this model allows (resolution only where the graph
    keeps its outputs' shapes; width only with prunable channel groups; ...)."""
    from ..compress import channels, prune
    levels = dict(LEVELS)
    shapes = {}                      # distinct input shapes only (small inputs snap alike)
    for s in LEVELS["resolution"]:
        new = scaled_inputs(graph, s)
        if new is not None:
            shapes.setdefault(json.dumps(sorted(new.items()) or [1.0]), s)
    levels["resolution"] = tuple(shapes.values())
    if not channels.groups(graph):
        levels["width"], levels["width_late"] = (0.0,), (None,)
    sparsity = ["none"]
    if list(prune.pointwise_convs(graph))[1:]:
        sparsity.append("sparse")
    if any(graph.consts[n.inputs[1]].shape[1] > prune.IMAGE_CHANNELS
           for n in prune.pattern_convs(graph)):
        sparsity.append("pattern")
    levels["sparsity"] = tuple(sparsity)
    return levels


def apply(source: Graph, f: Factors, calib: Batches, threads: int = 1) -> Graph:
    """The member of `source` (fp32, optimized; left unchanged) with factors `f`;
    `calib` at the source's resolution (resized here as needed)."""
    from ..compress import channels, prune
    from ..quant.observe import copy_graph
    g = copy_graph(source)
    shapes = scaled_inputs(source, f.resolution)
    if shapes is None:
        raise ValueError(f"resolution x{f.resolution} does not keep the outputs' shapes")
    if shapes:
        g.inputs = [ValueInfo(v.name, v.dtype, shapes.get(v.name, v.shape)) for v in g.inputs]
        calib = resize_feeds(calib, shapes, source.inputs)
        infos = infer(g, {v.name: tuple(d if isinstance(d, int) else 1 for d in v.shape)
                          for v in g.inputs})
        g.outputs = [ValueInfo(o.name, o.dtype, tuple(
            d if not isinstance(d, int) else infos[o.name].shape[k]
            for k, d in enumerate(o.shape))) if rescaled(tuple(o.shape),
                                                         tuple(infos[o.name].shape))
            else o for o in g.outputs]     # a dense map's or sequence's declared size follows
    late = f.width if f.width_late is None else f.width_late
    if f.width or late:
        found = channels.groups(g)
        per_layer = {grp.producer.name: late for grp in found[len(found) // 2:]}
        channels.prune_channels(g, f.width, calib=calib.feeds, per_layer=per_layer,
                                threads=threads)
    if f.sparsity == "sparse":
        prune.sparsify(g, SPARSE_RATIO)
    elif f.sparsity == "pattern":
        prune.pattern_prune(g, PATTERN_TAPS)
    elif f.sparsity != "none":
        raise ValueError(f"unknown sparsity {f.sparsity!r}")
    if f.precision in ("int8", "mixed"):
        from ..quant.quantize import quantize
        g = quantize(g, calib.feeds, threads=threads,
                     fidelity=MIXED_FIDELITY if f.precision == "mixed" else None)
    elif f.precision != "fp32":
        raise ValueError(f"unknown precision {f.precision!r}")
    g.meta["entropy_coding"] = "zstd"
    g.meta["scale_factors"] = json.loads(f.key())
    return g
