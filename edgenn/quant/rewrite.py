"""Writing QDQ into the fp32-optimized IR (the int8 spec's "Quantized graph form").

`plan_quantization` decides what becomes int8:
  - layers: Conv (2-D, depthwise included) and Gemm / MatMul with constant weights whose
    fused activation the int8 kernels implement, minus `exclude`;
  - tensors: every float tensor a quantized layer reads (its input x and residual z), and,
    walking back through pass-through ops (MaxPool, Reshape, Flatten, Transpose, Squeeze,
    Unsqueeze, Concat) whose output is quantized, their data inputs too. A pass-through's
    inputs and output form one *parameter group* (the same scale and zero point), so the
    op can run on uint8 as it is. A layer output that no int8 consumer reads stays float
    (the fused QConv/QGemm then writes float: no Quantize/Dequantize pair at all).

`write_qdq` then rewrites a copy of the graph: for a quantized tensor t,
    t_q = QuantizeLinear(t, s, z);  t_dq = DequantizeLinear(t_q, s, z)
and every reader of t reads t_dq (graph outputs stay float, under their names); weights
become DequantizeLinear(w_int8, w_scale (M,), zeros, axis) and biases
DequantizeLinear(b_int32, s_x * s_w, zeros). Gemm weights are written (K, N) with
transB = 0 and alpha / beta folded, the layout QGemm takes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..graph.ir import Graph, Node
from ..graph.passes.util import View, probe_infos
from .calibration import qmax_of, quantize_weights, uint8_params
from .observe import copy_graph

# activations the fused int8 kernels implement (int8 spec: QConv / QGemm attrs)
QCONV_ACTIVATIONS = ("", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "SiLU",
                     "LeakyRelu")
QGEMM_ACTIVATIONS = QCONV_ACTIVATIONS + ("Gelu",)
# op -> indices of its data inputs (None: all) for ops that can run on uint8 unchanged
PASS_THROUGH = {"MaxPool": (0,), "Reshape": (0,), "Flatten": (0,), "Transpose": (0,),
                "Squeeze": (0,), "Unsqueeze": (0,), "Concat": None}
INT32_MAX = 2 ** 31 - 1


@dataclass
class QuantPlan:
    layers: list[str]                    # node names, graph order
    tensors: list[str]                   # float tensors quantized to uint8, graph order
    groups: dict[str, str]               # tensor -> representative of its parameter group
    skipped: dict[str, str] = field(default_factory=dict)  # layer name -> why it stays fp32

    def group_members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in self.tensors:
            out.setdefault(self.groups[t], []).append(t)
        return out


def _float32(infos, name: str) -> bool:
    info = infos.get(name)
    return info is not None and info.dtype == "float32"


def layer_problem(view: View, node: Node, infos) -> str | None:
    """None if `node` can become an int8 layer, else the reason it cannot."""
    if node.op not in ("Conv", "Gemm", "MatMul"):
        return f"{node.op} has no int8 kernel"
    if len(node.inputs) < 2 or not node.inputs[0]:
        return "no input"
    x, w_name = node.inputs[0], node.inputs[1]
    w = view.const(w_name)
    if w is None:
        return "weights are not constant"
    if w.dtype != np.float32:
        return f"weights are {w.dtype}, not float32"
    if not _float32(infos, x) or view.is_const(x):
        return "input is not a float32 tensor"
    act = node.attrs.get("activation", "") or ""
    if node.op == "Conv":
        if w.ndim != 4:
            return f"{w.ndim - 2}-D convolution (int8 kernels are 2-D)"
        if act not in QCONV_ACTIVATIONS:
            return f"fused activation {act} has no int8 epilogue"
        if len(node.inputs) > 2 and node.inputs[2] and view.const(node.inputs[2]) is None:
            return "bias is not constant"
    elif node.op == "Gemm":
        if w.ndim != 2 or node.attrs.get("transA", 0):
            return "Gemm with transA or non-2-D weights"
        if act not in QGEMM_ACTIVATIONS:
            return f"fused activation {act} has no int8 epilogue"
        if len(node.inputs) > 2 and node.inputs[2]:
            c = view.const(node.inputs[2])
            n = w.shape[0] if node.attrs.get("transB", 0) else w.shape[1]
            if c is None or c.size not in (1, n) or (c.ndim and c.shape[-1] not in (1, n)):
                return "bias C is not a constant (N,) vector"
    else:  # MatMul
        if w.ndim != 2:
            return "MatMul weights are not 2-D"
        if len(node.inputs) > 2:
            return "unexpected inputs"
    if len(node.inputs) > 3 and node.inputs[3]:
        z = node.inputs[3]
        if not _float32(infos, z) or view.is_const(z):
            return "residual input is not a float32 tensor"
    return None


def _matches(node: Node, exclude) -> bool:
    return node.name in exclude or node.op in exclude


def plan_quantization(graph: Graph, exclude=(), only=None) -> QuantPlan:
    """Layers and tensors to quantize (module doc). `exclude`: node names or op types kept
    fp32; `only`: if given, the node names allowed to be int8 (sensitivity runs)."""
    infos = probe_infos(graph)
    view = View(graph)
    exclude = set(exclude or ())
    layers, skipped = [], {}
    for node in graph.nodes:
        if node.op not in ("Conv", "Gemm", "MatMul"):
            continue
        problem = layer_problem(view, node, infos)
        if problem is None and _matches(node, exclude):
            problem = "excluded"
        if problem is None and only is not None and node.name not in only:
            problem = "not selected"
        if problem is None:
            layers.append(node.name)
        else:
            skipped[node.name] = problem
    chosen = set(layers)

    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.setdefault(t, t) != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    wanted: set[str] = set()
    for node in reversed(graph.nodes):
        if node.name in chosen:
            wanted.add(node.inputs[0])
            if len(node.inputs) > 3 and node.inputs[3]:
                wanted.add(node.inputs[3])
        elif node.op in PASS_THROUGH and len([o for o in node.outputs if o]) == 1 \
                and node.outputs[0] in wanted:
            idx = PASS_THROUGH[node.op]
            data = [node.inputs[k] for k in (idx if idx is not None else range(len(node.inputs)))
                    if k < len(node.inputs) and node.inputs[k]]
            if data and all(_float32(infos, t) and not view.is_const(t) for t in data):
                for t in data:
                    wanted.add(t)
                    parent[find(t)] = find(node.outputs[0])
    order = [v.name for v in graph.inputs] + [o for n in graph.nodes for o in n.outputs]
    tensors = [t for t in order if t in wanted]
    return QuantPlan(layers, tensors, {t: find(t) for t in tensors}, skipped)


# -- the rewrite ------------------------------------------------------------------------------
@dataclass
class TensorParams:
    scale: np.float32
    zero_point: np.uint8
    lo: float
    hi: float


def group_params(plan: QuantPlan, ranges: dict[str, tuple[float, float]]
                 ) -> dict[str, TensorParams]:
    """uint8 params per quantized tensor; a group takes the union of its members' ranges."""
    out = {}
    for members in plan.group_members().values():
        known = [ranges[t] for t in members if t in ranges and all(map(math.isfinite, ranges[t]))]
        lo = min((r[0] for r in known), default=0.0)
        hi = max((r[1] for r in known), default=0.0)
        scale, zp = uint8_params(lo, hi)
        for t in members:
            out[t] = TensorParams(scale, zp, lo, hi)
    return out


def is_depthwise(node: Node, w: np.ndarray) -> bool:
    """A Conv with one input channel per group and one output channel per group."""
    group = int(node.attrs.get("group", 1) or 1)
    return node.op == "Conv" and group > 1 and w.shape[1] == 1 and w.shape[0] == group


def write_qdq(graph: Graph, plan: QuantPlan, params: dict[str, TensorParams],
              weight_bits: int = 7, weight_method="maxabs", per_channel: bool = True,
              depthwise_bits: int | None = 8, input_means: dict | None = None,
              layer_bits: dict | None = None) -> tuple[Graph, list[dict]]:
    """A copy of `graph` with QDQ written for `plan` (module doc).

    weight_method: "maxabs" | "admm", or a dict {layer name: method}.
    depthwise_bits: weight bits of depthwise convs (None: weight_bits). 8 by default: a
    depthwise output sums only KH*KW products, so weight rounding does not average out
    (7-bit weights in a single depthwise conv visibly lower a classifier's top-1
    agreement), and these layers are a small part of the compute.
    input_means: {layer: E[x_c] of its input}: bias correction, b -= (W_q - W) E[x]
    (Conv and Gemm; a Conv without bias gets one).
    layer_bits: {layer: weight bits} overriding the two above (mixed precision gives
    sensitive layers 8-bit weights before it keeps them fp32).
    -> (graph, one record per quantized layer: node, op, input, output, quantized output
    tensor (or None when the output stays float), weight method and weight error)."""
    qmax_of(weight_bits)
    g = copy_graph(graph)
    layers = set(plan.layers)
    by_tensor: dict[str, tuple[str, str, str]] = {}   # t -> (t_dq, scale const, zp const)
    group_consts: dict[str, tuple[str, str]] = {}
    qdq_after: dict[str, list[Node]] = {}             # t -> its Q and DQ nodes
    for t in plan.tensors:
        p = params[t]
        root = plan.groups[t]
        if root not in group_consts:
            group_consts[root] = (g.add_const(f"{root}_scale", np.asarray(p.scale, np.float32)),
                                  g.add_const(f"{root}_zero_point", np.asarray(p.zero_point,
                                                                               np.uint8)))
        s, z = group_consts[root]
        t_q, t_dq = g.unique_name(f"{t}_quantized"), g.unique_name(f"{t}_dequantized")
        q = Node("QuantizeLinear", [t, s, z], [t_q], {}, g.unique_name(f"{t}_QuantizeLinear"))
        dq = Node("DequantizeLinear", [t_q, s, z], [t_dq], {},
                  g.unique_name(f"{t}_DequantizeLinear"))
        by_tensor[t] = (t_dq, s, z)
        qdq_after[t] = [q, dq]
    # every original reader of a quantized tensor reads its dequantized copy
    for node in g.nodes:
        node.inputs = [by_tensor[i][0] if i in by_tensor else i for i in node.inputs]

    source_of = {dq: t for t, (dq, _, _) in by_tensor.items()}
    records = []
    nodes: list[Node] = []
    for v in g.inputs:
        nodes += qdq_after.get(v.name, [])
    for node in g.nodes:
        if node.name in layers:
            method = weight_method.get(node.name, "maxabs") if isinstance(weight_method, dict) \
                else weight_method
            bits = weight_bits
            if depthwise_bits and is_depthwise(node, g.consts[node.inputs[1]]):
                bits = depthwise_bits
            bits = (layer_bits or {}).get(node.name, bits)
            mean = (input_means or {}).get(node.name)
            pre, record = _quantize_layer(g, node, params, source_of, bits, method,
                                          per_channel, mean)
            nodes += pre
            records.append(record)
        nodes.append(node)
        for o in node.outputs:
            nodes += qdq_after.get(o, [])
    g.nodes = nodes
    q_of = {t: qdq[0].outputs[0] for t, qdq in qdq_after.items()}
    for r in records:
        r["output_quantized"] = q_of.get(r["output"])
    g.validate()
    return g, records


def _weight_shift(node: Node, err: np.ndarray, mean: np.ndarray) -> np.ndarray | None:
    """(W_q - W) E[x]: the mean output shift per output channel, or None if the mean does
    not fit the layer. Conv err (M, C/g, KH, KW), mean (C,); Gemm err (K, N), mean (K,)."""
    mean = np.asarray(mean, np.float64).reshape(-1)
    if node.op == "Conv":
        m, cg = err.shape[:2]
        groups = int(node.attrs.get("group", 1) or 1)
        if mean.size != cg * groups or m % groups:
            return None
        e = err.reshape(groups, m // groups, cg, -1).sum(axis=3)     # (g, M/g, C/g)
        return np.einsum("gmc,gc->gm", e, mean.reshape(groups, cg)).reshape(m)
    if mean.size != err.shape[0]:
        return None
    return mean @ err


def _quantize_layer(g: Graph, node: Node, params, source_of: dict[str, str], bits: int,
                    method: str, per_channel: bool, mean: np.ndarray | None = None
                    ) -> tuple[list[Node], dict]:
    """Weight and bias DequantizeLinear nodes for one layer (they go right before it)."""
    w = g.consts[node.inputs[1]]
    bias = None
    if node.op == "Conv":
        axis = 0
        if len(node.inputs) > 2 and node.inputs[2]:
            bias = g.consts[node.inputs[2]].astype(np.float64).reshape(-1)
    elif node.op == "Gemm":
        alpha = float(node.attrs.get("alpha", 1.0))
        w = (w.T if node.attrs.get("transB", 0) else w) * np.float32(alpha)
        w = np.ascontiguousarray(w, dtype=np.float32)
        axis = 1
        if len(node.inputs) > 2 and node.inputs[2]:
            c = g.consts[node.inputs[2]].astype(np.float64) * float(node.attrs.get("beta", 1.0))
            bias = np.broadcast_to(c.reshape(-1), (w.shape[1],)).copy()
        node.attrs.update(transB=0, alpha=1.0, beta=1.0)
    else:  # MatMul (K, N)
        axis = 1
    x_name = source_of[node.inputs[0]]   # the layer input before the reroute to t_dq
    s_x = np.float32(params[x_name].scale)
    m = w.shape[axis]
    min_scale = 0.0
    if bias is not None:  # keep |b / (s_x * s_w)| inside int32
        min_scale = np.abs(bias) / (float(s_x) * (INT32_MAX - 1)) * 1.000001
    if per_channel:
        q, s_w = quantize_weights(w, axis, bits, method, min_scale)
    else:
        flat = np.moveaxis(w, axis, 0).reshape(1, -1)
        _, s1 = quantize_weights(flat, 0, bits, method, np.max(min_scale))
        s_w = np.full(m, s1[0], np.float32)
        q = np.clip(np.rint(w / s1[0]), -qmax_of(bits), qmax_of(bits)).astype(np.int8)
    wq = q.astype(np.float64) * np.expand_dims(s_w, [d for d in range(w.ndim) if d != axis])
    shift = None
    if mean is not None and node.op in ("Conv", "Gemm"):
        shift = _weight_shift(node, wq - np.asarray(w, np.float64), mean)
    if shift is not None:
        bias = (np.zeros(m) if bias is None else bias) - shift
        if len(node.inputs) < 3:
            node.inputs = list(node.inputs) + [""]
    base = node.name
    pre = []
    scale_arr = s_w if per_channel else np.asarray(s_w[0], np.float32)
    w_ins = [g.add_const(f"{base}_weight_quantized", q),
             g.add_const(f"{base}_weight_scale", scale_arr),
             g.add_const(f"{base}_weight_zero_point", np.zeros(scale_arr.shape, np.int8))]
    w_dq = g.unique_name(f"{base}_weight_dequantized")
    attrs = {"axis": axis} if per_channel else {}
    pre.append(Node("DequantizeLinear", w_ins, [w_dq], attrs,
                    g.unique_name(f"{base}_weight_DequantizeLinear")))
    ins = list(node.inputs)
    ins[1] = w_dq
    if bias is not None:
        s_b = (s_x * s_w).astype(np.float32)
        b_q = np.clip(np.rint(bias / s_b.astype(np.float64)), -INT32_MAX, INT32_MAX)
        b_scale = s_b if per_channel else np.asarray(s_b[0], np.float32)
        b_ins = [g.add_const(f"{base}_bias_quantized", b_q.astype(np.int32)),
                 g.add_const(f"{base}_bias_scale", b_scale),
                 g.add_const(f"{base}_bias_zero_point", np.zeros(b_scale.shape, np.int32))]
        b_dq = g.unique_name(f"{base}_bias_dequantized")
        pre.append(Node("DequantizeLinear", b_ins, [b_dq], {"axis": 0} if per_channel else {},
                        g.unique_name(f"{base}_bias_DequantizeLinear")))
        ins[2] = b_dq
    node.inputs = ins
    rel = float(np.sum((wq - w) ** 2) / max(float(np.sum(np.asarray(w, np.float64) ** 2)), 1e-30))
    record = {"node": node.name, "op": node.op, "input": x_name,
              "output": node.outputs[0], "weight": w_ins[0], "weight_method": method,
              "weight_bits": bits, "weight_rel_error": rel, "weight_scales": int(m),
              "bias_shift": None if shift is None else float(np.max(np.abs(shift)))}
    return pre, record

