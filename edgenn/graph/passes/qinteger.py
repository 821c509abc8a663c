"""fuse_integer_matmul: onnxruntime's integer MatMul / Conv forms => QGemm / QConv.

1. quantize_dynamic (the usual transformer recipe; also what it writes for convs):
       a_q, a_scale, a_zp = DynamicQuantizeLinear(x)
       y = [Add(D,] Mul(Cast<float>(MatMulInteger(a_q, W, a_zp[, 0])), Mul(a_scale, W_scale))[)]
   => QGemm(a_q, a_scale, a_zp, W, W_scale, 0, ..., D) with float output: the int32 sums,
   then float(acc) * (a_scale * W_scale) [+ D], the same float32 operations in the same
   order (a_scale is a run-time scalar: the kernel rebuilds its per-column constants per
   call). One DynamicQuantizeLinear usually feeds several products (Q, K, V): it stays.
   ConvInteger the same way => QConv (W_scale and D per output channel, shaped to
   broadcast over (N, M, H, W)).
2. QLinearMatMul (u8 a, constant s8 b with zero point 0, u8 y; the QOperator format)
   => QGemm with y_scale / y_zp: rint(acc * (a_s * b_s / y_s)) + y_zp, as the ONNX op.

W must be a constant int8 (K, N) matrix with zero point 0 (per tensor or per column) and
a uint8; anything else stays as imported (the reference kernels: correct, slower).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .qdq import resolve_auto_pad
from .util import View, new_node, replace_chain, rewrite_and_note

FLOAT = 1   # TensorProto.FLOAT


def _int8_weight(view: View, b: str, b_zp: str, ndim: int, channel_axis: int
                 ) -> np.ndarray | None:
    """A constant int8 weight of rank `ndim` whose zero point (if any) is all zeros."""
    w = view.const(b)
    if w is None or w.dtype != np.int8 or w.ndim != ndim:
        return None
    if b_zp:
        zp = view.const(b_zp)
        if zp is None or zp.dtype != np.int8 or np.any(zp) or \
                zp.size not in (1, w.shape[channel_axis]):
            return None
    return w


def _scalar_const(view: View, name: str, dtype) -> bool:
    v = view.const(name)
    return v is not None and v.size == 1 and v.ndim <= 1 and v.dtype == dtype


def _u8_activation(view: View, a: str, a_zp: str) -> bool:
    """a is uint8 with a per-tensor zero point: DynamicQuantizeLinear's output 0 with its
    output 2, or any tensor with a constant uint8 scalar zero point."""
    dql = view.prod(a, "DynamicQuantizeLinear")
    if dql is not None:
        return dql.outputs[0] == a and len(dql.outputs) > 2 and dql.outputs[2] == a_zp
    return _scalar_const(view, a_zp, np.uint8)


def _activation_scale(view: View, name: str) -> bool:
    """A scalar float32: DynamicQuantizeLinear's output 1, or a constant."""
    dql = view.prod(name, "DynamicQuantizeLinear")
    if dql is not None:
        return len(dql.outputs) > 1 and dql.outputs[1] == name
    return _scalar_const(view, name, np.float32)


def _per_channel(v: np.ndarray, n: int, conv: bool) -> bool:
    """A constant that broadcasts as one value per output channel: over (..., N) for a
    MatMul, over (N, M, H, W) for a conv ((M, 1, 1) or (1, M, 1, 1)); or a scalar."""
    if v.size == 1 and v.ndim <= 1:
        return True
    if v.size != n:
        return False
    if not conv:
        return v.ndim == 1
    return v.ndim in (3, 4) and v.shape[-3] == n and v.shape[-2:] == (1, 1)


def _split_scale(view: View, s: str, n: int, conv: bool) -> tuple[str, np.ndarray] | None:
    """s = Mul(a_scale, w_scale) (either order) -> (a_scale, w_scale values)."""
    mul = view.prod(s, "Mul")
    if mul is None or len(mul.inputs) != 2:
        return None
    for a_scale, w_scale in (mul.inputs, mul.inputs[::-1]):
        ws = view.const(w_scale)
        if ws is None or ws.dtype != np.float32 or not _per_channel(ws, n, conv):
            continue
        if _activation_scale(view, a_scale):
            return a_scale, ws
    return None


# -- 1. DynamicQuantizeLinear + MatMulInteger + Cast + Mul [+ Add] -------------------------------

def _dynamic_product(graph: Graph, view: View, node: Node) -> bool:
    if node.op not in ("MatMulInteger", "ConvInteger") or len(node.inputs) < 3:
        return False
    conv = node.op == "ConvInteger"
    a, b, a_zp = node.inputs[:3]
    b_zp = node.inputs[3] if len(node.inputs) > 3 else ""
    w = _int8_weight(view, b, b_zp, 4 if conv else 2, 0 if conv else 1)
    if w is None or not a_zp or not _u8_activation(view, a, a_zp):
        return False
    n = w.shape[0 if conv else 1]
    cast = view.only_use(node.outputs[0])
    if cast is None or cast.op != "Cast" or int(cast.attrs.get("to", 0)) != FLOAT:
        return False
    mul = view.only_use(cast.outputs[0])
    if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
        return False
    s = view.other_input(mul, cast.outputs[0])
    scales = None if s is None else _split_scale(view, s, n, conv)
    if scales is None:
        return False
    chain, out, d = [node, cast, mul], mul.outputs[0], None
    add = view.only_use(out)
    if add is not None and add.op == "Add" and len(add.inputs) == 2:
        bias = view.const(view.other_input(add, out) or "")
        if bias is not None and bias.dtype == np.float32 and bias.size == n and \
                _per_channel(bias, n, conv):
            chain.append(add)
            out, d = add.outputs[0], bias.reshape(n)
    attrs = {"activation": "", "activation_params": []}
    if conv:
        attrs.update({k: node.attrs[k] for k in ("kernel_shape", "strides", "pads",
                                                  "dilations", "group", "auto_pad")
                      if k in node.attrs})
        if not resolve_auto_pad(graph, node, attrs, w.shape[2:]):
            return False
    a_scale, w_scale = scales
    w_scale = w_scale.reshape(() if w_scale.size == 1 else (n,))
    inputs = [a, a_scale, a_zp, b,
              graph.add_const(node.name + "_qw_scale", w_scale),
              graph.add_const(node.name + "_qw_zero_point", np.zeros(w_scale.shape, np.int8)),
              "", "", "", "", "", "",
              "" if d is None else graph.add_const(node.name + "_qbias_float", d)]
    while inputs and not inputs[-1]:
        inputs.pop()
    fused = new_node(graph, "QConv" if conv else "QGemm", inputs, [out], attrs, node.name)
    replace_chain(graph, chain, fused)
    return True


# -- 2. QLinearMatMul => QGemm ----------------------------------------------------------------------

def _qlinear_matmul(graph: Graph, view: View, node: Node) -> bool:
    if node.op != "QLinearMatMul" or len(node.inputs) != 8:
        return False
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = node.inputs
    w = _int8_weight(view, b, b_zp, 2, 1)
    ws = view.const(b_scale)
    if w is None or ws is None or ws.dtype != np.float32 or ws.size not in (1, w.shape[1]) \
            or ws.ndim > 1:
        return False
    if not (_scalar_const(view, a_scale, np.float32) and _scalar_const(view, a_zp, np.uint8)
            and _scalar_const(view, y_scale, np.float32) and _scalar_const(view, y_zp, np.uint8)):
        return False
    if not b_zp or view.const(b_zp).shape != ws.shape:
        b_zp = graph.add_const(node.name + "_qw_zero_point", np.zeros(ws.shape, np.int8))
    fused = new_node(graph, "QGemm", [a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp],
                     node.outputs[:1], {"activation": "", "activation_params": []}, node.name)
    replace_chain(graph, [node], fused)
    return True


def fuse_integer_matmul(graph: Graph) -> bool:
    """The rewrites of the module docstring; True if anything changed."""
    ops = graph.op_counts()
    changed = False
    if "MatMulInteger" in ops or "ConvInteger" in ops:
        changed |= rewrite_and_note(graph, _dynamic_product, "integer_product_fused")
    if "QLinearMatMul" in ops:
        changed |= rewrite_and_note(graph, _qlinear_matmul, "qlinearmatmul_to_qgemm")
    return changed
