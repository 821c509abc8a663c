"""Export edgenn's optimized graph back to ONNX (`edgenn export model.enn -o out.onnx`),
to view it in Netron or run it in onnxruntime.

What edgenn fused is written as standard ONNX where ONNX has the ops: a Conv / Gemm that
took its residual and activation becomes Conv / Gemm -> Add -> the activation (Clip with
its bounds as inputs, SiLU as Sigmoid and Mul, Gelu as the opset-20 op); FusedAttention
becomes MatMul -> Mul -> Add (or Where for a boolean mask) -> Softmax -> MatMul;
RMSNormalization (opset 23) the standard ops of its definition. Ops that
exist only inside edgenn (QConv, QGemm, QAdd, QGather) keep their form in the
"ai.edgenn" domain, their attributes as edgenn has them, except a QGather that
onnxruntime's GatherBlockQuantized can express; MatMulNBits and
GatherBlockQuantized (uint8 data) are onnxruntime's ops and go back to "com.microsoft"
(the int8 form of GatherBlockQuantized, widened from int4 / uint4, stays "ai.edgenn").
Control-flow bodies become GraphProto attributes again; a captured tensor whose name
differs inside the body is bound by an Identity at the top of the body. Written at
opset 21 (edgenn's IR keeps every op in its newest signature).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...graph.dtypes import to_onnx
from ...graph.ir import Graph, Node, ValueInfo, fresh_name
from ...graph.shapes.fused import PERM_ATTRS

OPSET = 21
DOMAIN = "ai.edgenn"
INTERNAL = {"QConv", "QGemm", "QAdd", "QGather"}
MS_DOMAIN = "com.microsoft"
MS_OPS = {"MatMulNBits", "GatherBlockQuantized"}


class _Writer:
    def __init__(self, taken: set[str], consts: dict | None = None):
        self.taken = set(taken)
        self.consts = consts or {}     # the graph's constants (weights' ranks)
        self.inits: list = []
        self.uses_domain = False
        self.uses_ms = False

    def name(self, prefix: str) -> str:
        return fresh_name(self.taken, prefix)

    def const(self, prefix: str, value) -> str:
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n


def _attr_ok(op: str, attrs: dict) -> dict:
    """Only the attributes the ONNX schema of `op` has (edgenn's extra ones dropped), and
    no empty lists (their type cannot be told; the schema default is empty anyway)."""
    try:
        known = set(onnx.defs.get_schema(op, OPSET).attributes)
    except onnx.defs.SchemaError:
        known = set(attrs)
    return {k: v for k, v in attrs.items() if k in known and not
            (isinstance(v, (list, tuple)) and len(v) == 0)}


def _value(v):
    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return v


def _activation(w: _Writer, x: str, y: str, act: str, params, base: str,
                spatial: int = 2) -> list:
    p = [float(v) for v in (params or [])]
    if act == "Relu":
        return [helper.make_node("Relu", [x], [y], f"{base}/relu")]
    if act == "Clip":
        lo = w.const(f"{base}/min", np.array(p[0], np.float32))
        hi = w.const(f"{base}/max", np.array(p[1], np.float32))
        return [helper.make_node("Clip", [x, lo, hi], [y], f"{base}/clip")]
    if act == "HardSigmoid":
        a, b = p if p else (0.2, 0.5)
        return [helper.make_node("HardSigmoid", [x], [y], f"{base}/hsig", alpha=a, beta=b)]
    if act == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [x], [y], f"{base}/lrelu",
                                 alpha=p[0] if p else 0.01)]
    if act in ("Sigmoid", "HardSwish", "Gelu"):
        return [helper.make_node(act, [x], [y], f"{base}/{act.lower()}")]
    if act == "PRelu":      # a Conv's per-channel slopes, (M, 1, ...) over its spatial axes
        slope = w.const(f"{base}/slope", np.array(p, np.float32).reshape(
            (-1,) + (1,) * max(spatial, 0)))
        return [helper.make_node("PRelu", [x, slope], [y], f"{base}/prelu")]
    if act == "SiLU":
        s = w.name(f"{base}/sigmoid")
        return [helper.make_node("Sigmoid", [x], [s], f"{base}/sig"),
                helper.make_node("Mul", [x, s], [y], f"{base}/silu")]
    raise ValueError(f"unknown fused activation {act!r}")


def _gemm(w: _Writer, n: Node, y: str) -> list:
    """edgenn's Gemm (A of any rank (..., K), as its MatMul + Add fusion makes it) as ONNX:
    Gemm itself for transA (rank 2 only), else MatMul [-> Mul alpha] [-> Add beta C]."""
    a = n.attrs
    if a.get("transA", 0):
        ins = [i for i in n.inputs[:3] if i]
        return [helper.make_node("Gemm", ins, [y], n.name,
                                 **{k: _value(v) for k, v in _attr_ok("Gemm", a).items()})]
    out, b = [], n.inputs[1]
    if a.get("transB", 0):
        bt = w.name(f"{b}/T")
        out.append(helper.make_node("Transpose", [b], [bt], f"{n.name}/transB", perm=[1, 0]))
        b = bt
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    c = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
    cur = w.name(f"{y}/ab") if (alpha != 1 or c) else y
    out.append(helper.make_node("MatMul", [n.inputs[0], b], [cur], n.name))
    if alpha != 1:
        nxt = w.name(f"{y}/alpha") if c else y
        k = w.const(f"{n.name}/alpha", np.array(alpha, np.float32))
        out.append(helper.make_node("Mul", [cur, k], [nxt], f"{n.name}/alpha"))
        cur = nxt
    if c:
        if beta != 1:
            cb = w.name(f"{c}/beta")
            k = w.const(f"{n.name}/beta", np.array(beta, np.float32))
            out.append(helper.make_node("Mul", [c, k], [cb], f"{n.name}/beta"))
            c = cb
        out.append(helper.make_node("Add", [cur, c], [y], f"{n.name}/bias"))
    return out


def _core(w: _Writer, n: Node, y: str) -> list:
    if n.op == "Gemm":
        return _gemm(w, n, y)
    ins = [i for i in n.inputs[:3]]
    while ins and not ins[-1]:
        ins.pop()
    return [helper.make_node(n.op, ins, [y], n.name,
                             **{k: _value(v) for k, v in _attr_ok(n.op, n.attrs).items()})]


def _epilogue_node(w: _Writer, n: Node) -> list:
    """Conv / Gemm with a fused residual (4th input) and / or activation -> standard ops."""
    act = n.attrs.get("activation", "") or ""
    z = n.inputs[3] if len(n.inputs) > 3 and n.inputs[3] else ""
    if not act and not z:
        return _core(w, n, n.outputs[0])
    y = n.outputs[0]
    core = w.name(f"{y}/pre")
    out = _core(w, n, core)
    if z:
        summed = w.name(f"{y}/sum") if act else y
        out.append(helper.make_node("Add", [core, z], [summed], f"{n.name}/residual"))
        core = summed
    if act:
        weight = w.consts.get(n.inputs[1]) if n.op == "Conv" else None
        spatial = weight.ndim - 2 if weight is not None else 2
        out += _activation(w, core, y, act, n.attrs.get("activation_params"), n.name, spatial)
    return out


def _attention(w: _Writer, n: Node) -> list:
    base = n.name
    out = []
    qkv = []
    for x, key in zip(n.inputs[:3], PERM_ATTRS):
        if n.attrs.get(key) is not None:   # absorbed Transposes written out again
            t = w.name(f"{base}/{key}")
            out.append(helper.make_node("Transpose", [x], [t], f"{base}/{key}",
                                        perm=[int(p) for p in n.attrs[key]]))
            x = t
        qkv.append(x)
    q, kt, v = qkv
    mask = n.inputs[3] if len(n.inputs) > 3 else ""
    scale = n.attrs.get("scale")
    s = w.name(f"{base}/scores")
    out.append(helper.make_node("MatMul", [q, kt], [s], f"{base}/qk"))
    if scale is not None:
        k = w.const(f"{base}/scale", np.array(scale, np.float32))
    else:
        k = None   # 1/sqrt(D): D unknown here unless the shape is; written as Sqrt(Shape)
    if k is None:
        shp, d, df, sq = (w.name(f"{base}/{t}") for t in ("shape", "d", "df", "sqrt"))
        last = w.const(f"{base}/last", np.array([-1], np.int64))
        out += [helper.make_node("Shape", [q], [shp], f"{base}/shape"),
                helper.make_node("Gather", [shp, last], [d], f"{base}/dim", axis=0),
                helper.make_node("Cast", [d], [df], f"{base}/cast", to=onnx.TensorProto.FLOAT),
                helper.make_node("Sqrt", [df], [sq], f"{base}/sqrt")]
        one = w.const(f"{base}/one", np.array(1, np.float32))
        k = w.name(f"{base}/inv")
        out.append(helper.make_node("Div", [one, sq], [k], f"{base}/inv"))
    ss = w.name(f"{base}/scaled")
    out.append(helper.make_node("Mul", [s, k], [ss], f"{base}/scale"))
    if mask:
        sm = w.name(f"{base}/masked")
        if n.attrs.get("mask_kind", "add") == "bool":
            ninf = w.const(f"{base}/ninf", np.array(-np.inf, np.float32))
            out.append(helper.make_node("Where", [mask, ss, ninf], [sm], f"{base}/mask"))
        else:
            out.append(helper.make_node("Add", [ss, mask], [sm], f"{base}/mask"))
        ss = sm
    p = w.name(f"{base}/probs")
    perm_y = n.attrs.get("perm_y")
    y = list(n.outputs) if perm_y is None else [w.name(f"{base}/y")]
    out += [helper.make_node("Softmax", [ss], [p], f"{base}/softmax", axis=-1),
            helper.make_node("MatMul", [p, v], y, f"{base}/pv")]
    if perm_y is not None:
        out.append(helper.make_node("Transpose", y, list(n.outputs), f"{base}/perm_y",
                                    perm=[int(i) for i in perm_y]))
    return out


def _decoder_op(n: Node):
    """GroupQueryAttention / RotaryEmbedding back as onnxruntime's com.microsoft ops (its
    RotaryEmbedding takes position_ids second). Forms those ops cannot say are refused:
    a cache updated in place (the Generator's rewrite), per-token rotary caches."""
    from ...errors import UnsupportedOpError
    attrs = {k: _value(v) for k, v in n.attrs.items() if k != "kv_in_place"}
    ins = list(n.inputs)
    if int(n.attrs.get("kv_in_place", 0)):
        raise UnsupportedOpError({"GroupQueryAttention (kv_in_place: no ONNX form)": [n.name]})
    if n.op == "RotaryEmbedding":
        if len(ins) < 4 or not ins[3]:
            raise UnsupportedOpError({"RotaryEmbedding (caches per token, no position ids: "
                                      "no opset-21 form)": [n.name]})
        ins = [ins[0], ins[3], ins[1], ins[2]]
    return helper.make_node(n.op, ins, n.outputs, n.name, domain=MS_DOMAIN, **attrs)


def _gbq_form(w: _Writer, n: Node):
    """A QGather as onnxruntime's GatherBlockQuantized (unsigned codes at its default zero
    point, float32 scales), where that op can say it: a power-of-2 block of >= 16 values
    (a last block of a row may be short: the padding codes are dropped); else None."""
    codes, scale = w.consts.get(n.inputs[0]), w.consts.get(n.inputs[1])
    bits, block, dim = (int(n.attrs[k]) for k in ("bits", "block", "dim"))
    if codes is None or scale is None or block < 16 or block & (block - 1) or \
            scale.shape[1] != -(-dim // block) or bits == 4 and dim % 2:
        return None
    data = codes[:, :dim // 2] ^ np.uint8(0x88) if bits == 4 else \
        (codes[:, :dim].astype(np.int16) + 128).astype(np.uint8)
    ins = [w.const(f"{n.inputs[0]}/unsigned", data), n.inputs[2],
           w.const(f"{n.inputs[1]}/f32", scale.astype(np.float32))]
    return helper.make_node("GatherBlockQuantized", ins, n.outputs, n.name, domain=MS_DOMAIN,
                            bits=bits, block_size=block, gather_axis=0, quantize_axis=1)


def _rms_norm(w: _Writer, n: Node) -> list:
    """RMSNormalization (opset 23, past OPSET) as its definition's standard ops: Mul(x, x),
    ReduceMean over the dims from `axis` on, Add eps, Sqrt, Div, Mul scale (float32 x:
    stash_type 1's arithmetic). A non-negative axis takes its axes from x's rank."""
    x, scale = n.inputs[:2]
    base = n.name or "rmsnorm"
    t = {k: w.name(f"{base}/{k}") for k in ("sq", "ms", "mse", "rms", "norm")}
    axis = int(n.attrs.get("axis", -1))
    out = []
    if axis < 0:
        axes = w.const(f"{base}/axes", np.arange(axis, 0, dtype=np.int64))
    else:
        shape, rank, axes = w.name(f"{base}/shape"), w.name(f"{base}/rank"), w.name(f"{base}/axes")
        out += [helper.make_node("Shape", [x], [shape], f"{base}/shape"),
                helper.make_node("Size", [shape], [rank], f"{base}/size"),
                helper.make_node("Range", [w.const(f"{base}/axis", np.array(axis, np.int64)),
                                           rank, w.const(f"{base}/one", np.array(1, np.int64))],
                                 [axes], f"{base}/range")]
    eps = w.const(f"{base}/eps", np.array(n.attrs.get("epsilon", 1e-5), np.float32))
    return out + [
        helper.make_node("Mul", [x, x], [t["sq"]], f"{base}/sq"),
        helper.make_node("ReduceMean", [t["sq"], axes], [t["ms"]], f"{base}/mean", keepdims=1),
        helper.make_node("Add", [t["ms"], eps], [t["mse"]], f"{base}/eps_add"),
        helper.make_node("Sqrt", [t["mse"]], [t["rms"]], f"{base}/sqrt"),
        helper.make_node("Div", [x, t["rms"]], [t["norm"]], f"{base}/div"),
        helper.make_node("Mul", [t["norm"], scale], list(n.outputs[:1]), f"{base}/scale")]


def _vi(v: ValueInfo, dtype: str | None = None, shape=None):
    dt = dtype or v.dtype
    if not dt:
        return helper.make_empty_tensor_value_info(v.name)
    dims = v.shape if shape is None else shape
    if dims is None:                                  # a body's value of unknown rank
        return helper.make_tensor_value_info(v.name, to_onnx(dt), None)
    return helper.make_tensor_value_info(v.name, to_onnx(dt),
                                         [d if isinstance(d, (int, str)) else None for d in dims])


def _body(w: _Writer, body: Graph, node: Node) -> onnx.GraphProto:
    outer = node.inputs[len(node.inputs) - len(node.captures):]
    nodes = [helper.make_node("Identity", [o], [inside], f"{node.name}/capture:{inside}")
             for inside, o in zip(node.captures, outer) if inside != o]
    nodes += _nodes(w, body.nodes)
    return helper.make_graph(nodes, f"{node.name}_body", [_vi(v) for v in body.inputs],
                             [_vi(v) for v in body.outputs])


def _nodes(w: _Writer, nodes: list[Node]) -> list:
    out = []
    for n in nodes:
        if n.op in ("Conv", "Gemm"):
            out += _epilogue_node(w, n)
        elif n.op == "FusedAttention":
            out += _attention(w, n)
        elif n.op == "RMSNormalization":
            out += _rms_norm(w, n)
        elif n.op in ("GroupQueryAttention", "RotaryEmbedding"):
            w.uses_ms = True
            out.append(_decoder_op(n))
        elif n.op == "QGather" and _gbq_form(w, n) is not None:
            w.uses_ms = True
            out.append(_gbq_form(w, n))
        elif n.op in INTERNAL or n.op in MS_OPS:
            data = w.consts.get(n.inputs[0]) if n.inputs else None
            ms = n.op in MS_OPS and not (data is not None and data.dtype == np.int8)
            w.uses_ms |= ms
            w.uses_domain |= not ms
            attrs = {k: _value(v) for k, v in n.attrs.items()
                     if not (isinstance(v, (list, tuple)) and len(v) == 0)}
            out.append(helper.make_node(n.op, n.inputs, n.outputs, n.name,
                                        domain=MS_DOMAIN if ms else DOMAIN, **attrs))
        elif n.bodies():
            attrs = {k: _value(v) for k, v in _attr_ok(n.op, n.attrs).items()
                     if not isinstance(v, Graph)}
            for key in ("then_branch", "else_branch", "body"):
                if isinstance(n.attrs.get(key), Graph):
                    attrs[key] = _body(w, n.attrs[key], n)
            formal = n.inputs[:len(n.inputs) - len(n.captures)]
            out.append(helper.make_node(n.op, formal, n.outputs, n.name, **attrs))
        else:
            out.append(helper.make_node(n.op, n.inputs, n.outputs, n.name,
                                        **{k: _value(v) for k, v in
                                           _attr_ok(n.op, n.attrs).items()}))
    return out


def to_model(graph: Graph) -> onnx.ModelProto:
    """The ONNX ModelProto of an edgenn graph (see the module docstring)."""
    taken = set(graph.consts) | {v.name for v in graph.inputs} | \
        {o for n in graph.nodes for o in n.outputs}
    w = _Writer(taken, graph.consts)
    nodes = _nodes(w, graph.nodes)
    inits = [numpy_helper.from_array(np.require(a, requirements="C"), k)   # 0-d stays 0-d
             for k, a in graph.consts.items()] + w.inits
    g = helper.make_graph(nodes, graph.meta.get("graph_name") or "edgenn",
                          [_vi(v) for v in graph.inputs], [_vi(v) for v in graph.outputs],
                          inits)
    opsets = [helper.make_opsetid("", OPSET)] + \
        ([helper.make_opsetid(DOMAIN, 1)] if w.uses_domain else []) + \
        ([helper.make_opsetid(MS_DOMAIN, 1)] if w.uses_ms else [])
    model = helper.make_model(g, opset_imports=opsets, producer_name="edgenn")
    model.ir_version = 10
    return model


def export(source, path: str) -> onnx.ModelProto:
    """Load `source` (a .enn / .onnx path or bytes), write its optimized graph to `path`
    as ONNX; -> the ModelProto."""
    from ...converters.source import load
    from ...graph.format import write_atomic
    graph = source if isinstance(source, Graph) else load(source)
    model = to_model(graph)
    write_atomic(path, model.SerializeToString())
    return model


