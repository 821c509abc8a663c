"""fuse_qdq: a quantized graph in QDQ form => integer ops (QConv, QGemm, uint8 data movement).

QDQ form (what onnxruntime's quantize_static and edgenn's quantizer write): a quantized
tensor t_q is read through DequantizeLinear (DQ) and an op's float result is re-quantized
by QuantizeLinear (Q). Activations are uint8 per tensor, weights int8 constants (per
channel, zero point 0), biases int32 at scale x_scale * w_scale.

Rewrites, in this order (names as in the int8 spec):
1. QLinearConv (imported, u8 x, const s8 w with zero point 0) => QConv, the same inputs.
2. Only with graph.meta[LIFT_RESIDUALS] = True: ORT's residual form
   Q(Add(DQ(Q(Conv(...))), DQ(z_q)))  => Conv(..., Z=DQ(z_q)) -> Q, the form the fp32
   passes give our own graphs, so step 3 makes it one QConv with residual z. That drops
   the re-quantization of the conv output before the Add: one rounding fewer than the
   QDQ graph (and onnxruntime) computes, which moves results by up to about half a step
   of the conv's output scale there and more downstream (measured on ORT-quantized
   ResNet / MobileNetV2 blocks: closer to the float model on average, but several steps
   away from onnxruntime on a quarter of the outputs). By default the QDQ arithmetic
   stays exact: QConv -> u8, then QAdd (step 5: DQ, Add, Q in one uint8 pass, bit-exact
   with onnxruntime's literal QDQ run in tests/graph/test_qdq_pass.py).
3. Conv / Gemm / MatMul reading DQ(x_q u8) with DQ(const s8) weights [, bias][, Z = DQ(z_q)]
   (activation as fused by the fp32 passes, or one activation node before the Q; then a
   scalar Mul [+ Add] before the Q: post_affine) => QConv / QGemm; with a following Q (u8,
   per tensor) the output is y_q, otherwise float.
4. DQ -> MaxPool / Reshape / Flatten / Transpose / Squeeze / Unsqueeze / Identity / Concat
   -> Q, all with equal (scale, zero point) => the op on the uint8 tensor.
5. Q([Relu](Add(DQ(a_q), DQ(b_q)))), a and b of one shape => QAdd (uint8, one pass, the
   same float32 arithmetic op for op).
6. Q(DQ(t_q)) with equal parameters => t_q.
Finally DQ / Q nodes left unread are removed. What does not match stays QDQ + float op:
correct, only slower.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node
from ..shapes.quant import QCONV_ACTIVATIONS
from .activation import ACTIVATION_OPS, _ShapeOracle, activation_of
from .util import View, new_node, remove_nodes, replace_chain, rewrite_and_note

DQ, Q = "DequantizeLinear", "QuantizeLinear"
UINT8_OPS = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
             "Identity", "Concat")
INT32_MAX = np.iinfo(np.int32).max
LIFT_RESIDUALS = "qdq_lift_residuals"   # graph.meta key, default False (see step 2)


@dataclass
class QTensor:
    """A per-tensor uint8 quantized tensor as a DQ or Q node sees it."""
    name: str          # the uint8 tensor
    scale: str         # float32 scalar constant
    zero_point: str    # uint8 scalar constant

    def same_params(self, view: View, other: "QTensor") -> bool:
        return _equal(view, self.scale, other.scale) and \
            _equal(view, self.zero_point, other.zero_point)


def _equal(view: View, a: str, b: str) -> bool:
    if a == b:
        return True
    va, vb = view.const(a), view.const(b)
    return va is not None and vb is not None and va.dtype == vb.dtype and \
        va.size == vb.size and np.array_equal(va.reshape(-1), vb.reshape(-1))


def _scalar_const(view: View, name: str, dtype: str) -> bool:
    v = view.const(name)
    return v is not None and v.size == 1 and v.ndim <= 1 and v.dtype == dtype


def _per_tensor(view: View, node: Node) -> QTensor | None:
    """(DQ or Q node) -> its uint8 per-tensor parameters, if it has constant ones."""
    if len(node.inputs) < 3 or not _scalar_const(view, node.inputs[1], "float32") \
            or not _scalar_const(view, node.inputs[2], "uint8"):
        return None
    return QTensor(node.inputs[0] if node.op == DQ else node.outputs[0], node.inputs[1],
                   node.inputs[2])


def dq_activation(view: View, name: str) -> QTensor | None:
    """`name` = DQ(t_q) with t_q uint8 per tensor -> t_q and its parameters."""
    dq = view.prod(name, DQ)
    return None if dq is None else _per_tensor(view, dq)


def q_output(view: View, name: str) -> tuple[Node, QTensor] | None:
    """The Q node that is the only reader of `name` (uint8, per tensor)."""
    q = view.only_use(name)
    if q is None or q.op != Q or q.inputs[0] != name:
        return None
    qt = _per_tensor(view, q)
    return None if qt is None else (q, qt)


@dataclass
class QWeight:
    values: np.ndarray   # int8 (M, ...) for Conv, (K, N) for Gemm
    scale: np.ndarray    # float32 () or (channels,)
    axis: int
    name: str            # the int8 constant


def dq_weight(view: View, name: str) -> QWeight | None:
    """`name` = DQ(w int8 constant, scale float32 (scalar or per axis), zero point 0)."""
    dq = view.prod(name, DQ)
    if dq is None or len(dq.inputs) < 2:
        return None
    w, scale = view.const(dq.inputs[0]), view.const(dq.inputs[1])
    if w is None or w.dtype != np.int8 or scale is None or scale.dtype != np.float32:
        return None
    if len(dq.inputs) > 2 and dq.inputs[2]:
        zp = view.const(dq.inputs[2])
        if zp is None or zp.dtype != np.int8 or np.any(zp):
            return None
    axis = int(dq.attrs.get("axis", 1)) % max(w.ndim, 1)
    if scale.size > 1 and (scale.ndim != 1 or scale.shape[0] != w.shape[axis]):
        return None
    scale = scale.reshape(()) if scale.size == 1 else scale
    return QWeight(w, scale, axis, dq.inputs[0])


def _int32_bias(view: View, name: str, acc_scale: np.ndarray, n: int) -> np.ndarray | None:
    """A bias read as DQ(int32 constant) or a float constant -> int32 (n,) at the scale of
    the accumulators (x_scale * w_scale, per channel); None if it is neither."""
    dq = view.prod(name, DQ)
    if dq is not None:
        b, s = view.const(dq.inputs[0]), view.const(dq.inputs[1])
        zp = view.const(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
        if b is None or b.dtype != np.int32 or s is None or b.size != n or \
                (len(dq.inputs) > 2 and dq.inputs[2] and (zp is None or np.any(zp))):
            return None
        b = b.reshape(n)
        s = np.broadcast_to(s.astype(np.float32).reshape(-1), (n,))
        if np.array_equal(s, np.broadcast_to(acc_scale, (n,))):
            return b  # written at the accumulator scale (what quantizers do)
        value = b.astype(np.float64) * s
    else:
        c = view.const(name)
        if c is None or c.dtype.kind != "f" or c.size != n:
            return None
        value = c.astype(np.float64).reshape(n)
    q = np.rint(value / np.broadcast_to(acc_scale, (n,)).astype(np.float64))
    return np.clip(q, -INT32_MAX, INT32_MAX).astype(np.int32)


# -- 1. QLinearConv => QConv ------------------------------------------------------------------

def _qlinear_conv(graph: Graph, view: View, node: Node) -> bool:
    if node.op != "QLinearConv" or len(node.inputs) < 8:
        return False
    ins = list(node.inputs) + [""] * (9 - len(node.inputs))
    w, w_zp = view.const(ins[3]), view.const(ins[5])
    if w is None or w.dtype != np.int8 or w.ndim != 4 or w_zp is None or np.any(w_zp):
        return False
    if not (_scalar_const(view, ins[1], "float32") and _scalar_const(view, ins[2], "uint8")
            and _scalar_const(view, ins[6], "float32") and _scalar_const(view, ins[7], "uint8")):
        return False
    ws = view.const(ins[4])
    if ws is None or ws.dtype != np.float32:
        return False
    if ins[8] and view.const(ins[8]) is None:
        return False
    attrs = _conv_attrs(node.attrs, "", [])
    if not resolve_auto_pad(graph, node, attrs, w.shape[2:]):
        return False
    qconv = new_node(graph, "QConv", ins[:9], node.outputs[:1], attrs, node.name)
    replace_chain(graph, [node], qconv)
    return True


def _conv_attrs(attrs: dict, activation: str, params) -> dict:
    out = {k: attrs[k] for k in ("kernel_shape", "strides", "pads", "dilations", "group",
                                 "auto_pad") if k in attrs}
    out.update(activation=activation or "", activation_params=[float(p) for p in params])
    return out


# -- 2. ORT's residual form => Conv(x, W, B, Z) ------------------------------------------------

def _lift_residual(oracle: _ShapeOracle):
    def rewrite(graph: Graph, view: View, add: Node) -> bool:
        if add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
            return False
        for c_dq, z in (add.inputs[::-1], add.inputs):  # prefer the later operand
            dq = view.prod(c_dq, DQ)
            q = None if dq is None else view.prod(dq.inputs[0], Q)
            conv = None if q is None else view.prod(q.inputs[0], ("Conv", "Gemm"))
            if conv is None or conv.attrs.get("activation") or \
                    (len(conv.inputs) > 3 and conv.inputs[3]):
                continue
            if view.only_use(conv.outputs[0]) is not q or view.only_use(q.outputs[0]) is not dq \
                    or view.only_use(c_dq) is not add:
                continue
            qin, qout = _per_tensor(view, dq), _per_tensor(view, q)
            if qin is None or qout is None or not qin.same_params(view, qout):
                continue
            if not _fusable_product(view, conv) or dq_activation(view, z) is None \
                    or not oracle.same(c_dq, z):
                continue
            ins = list(conv.inputs) + [""] * (3 - len(conv.inputs))
            conv.inputs = ins[:3] + [z]
            conv.outputs = [add.outputs[0]]
            replace_chain(graph, [conv, q, dq, add], conv)
            return True
        return False
    return rewrite


def _fusable_product(view: View, node: Node) -> bool:
    """Would step 3 turn this Conv / Gemm into QConv / QGemm (ignoring its output)?"""
    return _product_parts(view, node) is not None


# -- 3. Conv / Gemm / MatMul => QConv / QGemm ----------------------------------------------------

@dataclass
class _Parts:
    x: QTensor
    w: np.ndarray        # int8, QConv (M, C/g, KH, KW) or QGemm (K, N)
    w_scale: np.ndarray  # float32 () or (channels,)
    channels: int
    w_name: str = ""     # the stored constant, when `w` is it unchanged


def _product_parts(view: View, node: Node) -> _Parts | None:
    if node.op not in ("Conv", "Gemm", "MatMul") or len(node.inputs) < 2:
        return None
    x = dq_activation(view, node.inputs[0])
    wt = dq_weight(view, node.inputs[1])
    if x is None or wt is None:
        return None
    w = wt.values
    if node.op == "Conv":
        if w.ndim != 4 or (wt.scale.size > 1 and wt.axis != 0):
            return None
        return _Parts(x, w, wt.scale, w.shape[0], wt.name)
    if w.ndim != 2:
        return None
    if node.op == "Gemm":
        a = node.attrs
        if int(a.get("transA", 0)) or float(a.get("alpha", 1.0)) != 1.0 or \
                float(a.get("beta", 1.0)) != 1.0:
            return None
        if int(a.get("transB", 0)):
            if wt.scale.size > 1 and wt.axis != 0:
                return None
            return _Parts(x, np.ascontiguousarray(w.T), wt.scale, w.shape[0])
    if wt.scale.size > 1 and wt.axis != 1:  # (K, N): per column
        return None
    return _Parts(x, w, wt.scale, w.shape[1], wt.name)


def _fuse_product(graph: Graph, view: View, node: Node) -> bool:
    parts = _product_parts(view, node)
    if parts is None:
        return False
    ins = list(node.inputs) + [""] * (4 - len(node.inputs))
    act = node.attrs.get("activation", "") or ""
    params = list(node.attrs.get("activation_params", []) or [])
    if node.op == "Conv":
        op, attrs = "QConv", _conv_attrs(node.attrs, act, params)
        if act not in QCONV_ACTIVATIONS or \
                not resolve_auto_pad(graph, node, attrs, parts.w.shape[2:]):
            return False
    else:
        op, attrs = "QGemm", {"activation": act, "activation_params": [float(p) for p in params]}
    x_scale = view.const(parts.x.scale).astype(np.float32).reshape(())
    acc_scale = x_scale * parts.w_scale                     # float32, () or (channels,)
    bias = None
    if node.op != "MatMul" and ins[2]:
        bias = _int32_bias(view, ins[2], acc_scale, parts.channels)
        if bias is None:
            return False
    z = ["", "", ""]
    if node.op != "MatMul" and ins[3]:
        zt = dq_activation(view, ins[3])
        if zt is None:
            return False
        z = [zt.name, zt.scale, zt.zero_point]
    chain = [node]
    out = node.outputs[0]
    # an activation node the fp32 passes could not fuse (e.g. after a Conv with Z)
    nxt = view.only_use(out)
    if not act and nxt is not None and nxt.op in ACTIVATION_OPS and nxt.inputs[0] == out:
        found = activation_of(view, nxt)
        if found is not None and (found[0] in QCONV_ACTIVATIONS or node.op != "Conv") \
                and q_output(view, nxt.outputs[0]) is not None:
            attrs["activation"], attrs["activation_params"] = found[0], list(found[1])
            chain.append(nxt)
            out = nxt.outputs[0]
    affine = _post_affine(view, out)   # PP-OCR's learnable affine blocks
    if affine is not None and q_output(view, affine[1][-1].outputs[0]) is not None:
        attrs["post_affine"] = affine[0]
        chain.extend(affine[1])
        out = affine[1][-1].outputs[0]
    y = ["", ""]
    found_q = q_output(view, out)
    if found_q is not None:
        q, qt = found_q
        chain.append(q)
        out = q.outputs[0]
        y = [qt.scale, qt.zero_point]
    # everything matched: store the integer operands
    w_name = parts.w_name or graph.add_const(node.name + "_qw", parts.w)
    ws_name = graph.add_const(node.name + "_qw_scale", parts.w_scale.astype(np.float32))
    wz_name = graph.add_const(node.name + "_qw_zero_point",
                              np.zeros(parts.w_scale.shape, np.int8))
    b_name = "" if bias is None else graph.add_const(node.name + "_qbias", bias)
    inputs = [parts.x.name, parts.x.scale, parts.x.zero_point, w_name, ws_name, wz_name,
              *y, b_name, *z]
    while inputs and not inputs[-1]:
        inputs.pop()
    fused = new_node(graph, op, inputs, [out], attrs, node.name)
    replace_chain(graph, chain, fused)
    return True


def _post_affine(view: View, name: str):
    """name -> Mul(., s) [-> Add(., b)] with scalar float constants, each read only by the
    next: ([s, b], [mul, add?]) or None (the affine after an activation that PP-OCR's
    LCNetV3 puts after every conv)."""
    mul = view.only_use(name)
    if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
        return None
    s = view.const(view.other_input(mul, name) or "")
    if s is None or s.size != 1 or s.ndim > 1 or s.dtype != np.float32:
        return None   # (a one-value constant of higher rank would broadcast the rank up)
    nodes, b = [mul], 0.0
    add = view.only_use(mul.outputs[0])
    if add is not None and add.op == "Add" and len(add.inputs) == 2:
        c = view.const(view.other_input(add, mul.outputs[0]) or "")
        if c is not None and c.size == 1 and c.ndim <= 1 and c.dtype == np.float32:
            nodes.append(add)
            b = float(c.reshape(-1)[0])
    return [float(s.reshape(-1)[0]), b], nodes


def resolve_auto_pad(graph: Graph, conv: Node, attrs: dict, kernel) -> bool:
    """QConv has explicit pads: VALID is no padding; SAME_* needs the input's static shape."""
    mode = attrs.pop("auto_pad", "NOTSET") or "NOTSET"
    if mode == "NOTSET":
        return True
    if mode == "VALID":
        attrs["pads"] = [0] * (2 * len(kernel))
        return True
    from ..shapes.nn import window_geometry
    from .util import agreed_shape, sample_bindings
    shape = agreed_shape(sample_bindings(graph), conv.inputs[0])
    if shape is None:
        return False
    _, begin, end, _, _ = window_geometry(conv, dict(conv.attrs), shape[2:], list(kernel))
    attrs["pads"] = [*begin, *end]
    return True


# -- 4. data movement on uint8 -------------------------------------------------------------------

def _op_on_uint8(graph: Graph, view: View, q: Node) -> bool:
    if q.op != Q:
        return False
    qt = _per_tensor(view, q)
    op = view.prod(q.inputs[0], UINT8_OPS)
    if qt is None or op is None or view.only_use(q.inputs[0]) is not q:
        return False
    if op.op == "MaxPool" and any(o for o in op.outputs[1:]):
        return False
    data = range(len(op.inputs)) if op.op == "Concat" else [0]
    inputs = list(op.inputs)
    for i in data:
        src = dq_activation(view, op.inputs[i])
        if src is None or not src.same_params(view, qt):
            return False
        inputs[i] = src.name
    moved = new_node(graph, op.op, inputs, [q.outputs[0]], dict(op.attrs), op.name)
    replace_chain(graph, [op, q], moved)
    return True


# -- 4b. Q([Relu](Add(DQ(a_q), DQ(b_q)))) => QAdd(a_q, b_q) ----------------------------------------

def _qadd(oracle: _ShapeOracle):
    """The uint8 residual Add (ORT's QDQ form, and ours where an Add is not a conv's
    residual): one pass instead of DQ, DQ, Add, [Relu,] Q; same arithmetic, op for op."""
    def rewrite(graph: Graph, view: View, q: Node) -> bool:
        if q.op != Q:
            return False
        qt = _per_tensor(view, q)
        chain, relu = [q], view.prod(q.inputs[0], "Relu")
        if relu is not None:
            if view.only_use(relu.outputs[0]) is not q:
                return False
            chain.insert(0, relu)
        add = view.prod(chain[0].inputs[0], "Add")
        if qt is None or add is None or view.only_use(add.outputs[0]) is not chain[0] \
                or len(add.inputs) != 2:
            return False
        a, b = (dq_activation(view, name) for name in add.inputs)
        if a is None or b is None or not oracle.same(add.inputs[0], add.inputs[1]):
            return False
        fused = new_node(graph, "QAdd", [a.name, a.scale, a.zero_point, b.name, b.scale,
                                         b.zero_point, q.inputs[1], q.inputs[2]],
                         [q.outputs[0]], {"activation": "Relu" if relu else ""}, add.name)
        replace_chain(graph, [add] + chain, fused)
        return True
    return rewrite


# -- 5. Q(DQ(t_q)) => t_q ------------------------------------------------------------------------

def _requantize_pair(graph: Graph, view: View, q: Node) -> bool:
    if q.op != Q:
        return False
    dq = view.prod(q.inputs[0], DQ)
    qt = _per_tensor(view, q)
    src = None if dq is None else _per_tensor(view, dq)
    if qt is None or src is None or not src.same_params(view, qt):
        return False
    from .util import bypass
    return bypass(graph, view, q, q.outputs[0], src.name)


def _remove_unread(graph: Graph) -> int:
    """DQ / Q nodes whose outputs nobody reads any more."""
    removed = 0
    while True:
        view = View(graph)
        dead = [n for n in graph.nodes if n.op in (DQ, Q)
                and not view.uses(n.outputs[0]) and n.outputs[0] not in view.outputs]
        if not dead:
            return removed
        remove_nodes(graph, dead)
        removed += len(dead)


def fuse_qdq(graph: Graph) -> bool:
    """The rewrites of the module docstring; True if anything changed."""
    ops = graph.op_counts()
    lift = bool(graph.meta.get(LIFT_RESIDUALS, False))
    if DQ not in ops and "QLinearConv" not in ops:
        return False
    changed = False
    if "QLinearConv" in ops:
        changed |= rewrite_and_note(graph, _qlinear_conv, "qlinearconv_to_qconv")
    if DQ in ops:
        if "Add" in ops and lift:
            changed |= rewrite_and_note(graph, _lift_residual(_ShapeOracle(graph)),
                                        "qdq_residual_lifted")
        changed |= rewrite_and_note(graph, _fuse_product, "qdq_product_fused")
        changed |= rewrite_and_note(graph, _op_on_uint8, "qdq_op_on_uint8")
        if "Add" in ops:
            changed |= rewrite_and_note(graph, _qadd(_ShapeOracle(graph)), "qdq_add_fused")
        changed |= rewrite_and_note(graph, _requantize_pair, "qdq_pair_removed")
    if changed:
        _remove_unread(graph)
    return changed
