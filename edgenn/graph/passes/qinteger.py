"""fuse_integer_matmul: onnxruntime's integer MatMul forms => QGemm.

1. quantize_dynamic (the usual transformer recipe):
       a_q, a_scale, a_zp = DynamicQuantizeLinear(x)
       y = [Add(D,] Mul(Cast<float>(MatMulInteger(a_q, W, a_zp[, 0])), Mul(a_scale, W_scale))[)]
   => QGemm(a_q, a_scale, a_zp, W, W_scale, 0, ..., D) with float output: the int32 sums,
   then float(acc) * (a_scale * W_scale) [+ D], the same float32 operations in the same
   order (a_scale is a run-time scalar: the kernel rebuilds its per-column constants per
   call). One DynamicQuantizeLinear usually feeds several products (Q, K, V): it stays.
2. QLinearMatMul (u8 a, constant s8 b with zero point 0, u8 y; the QOperator format)
   => QGemm with y_scale / y_zp: rint(acc * (a_s * b_s / y_s)) + y_zp, as the ONNX op.

W must be a constant int8 (K, N) matrix with zero point 0 (per tensor or per column) and
a uint8; anything else stays as imported (the reference kernels: correct, slower).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .util import View, new_node, replace_chain, rewrite_and_note

FLOAT = 1   # TensorProto.FLOAT


def _int8_weight(view: View, b: str, b_zp: str) -> np.ndarray | None:
    """A constant int8 (K, N) matrix whose zero point (if any) is all zeros."""
    w = view.const(b)
    if w is None or w.dtype != np.int8 or w.ndim != 2:
        return None
    if b_zp:
        zp = view.const(b_zp)
        if zp is None or zp.dtype != np.int8 or np.any(zp) or zp.size not in (1, w.shape[1]):
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


def _split_scale(view: View, s: str, n: int) -> tuple[str, str] | None:
    """s = Mul(a_scale, w_scale) (either order) -> (a_scale, w_scale)."""
    mul = view.prod(s, "Mul")
    if mul is None or len(mul.inputs) != 2:
        return None
    for a_scale, w_scale in (mul.inputs, mul.inputs[::-1]):
        ws = view.const(w_scale)
        if ws is None or ws.dtype != np.float32 or ws.size not in (1, n) or ws.ndim > 1:
            continue
        if _activation_scale(view, a_scale):
            return a_scale, w_scale
    return None


# -- 1. DynamicQuantizeLinear + MatMulInteger + Cast + Mul [+ Add] -------------------------------

def _dynamic_product(graph: Graph, view: View, node: Node) -> bool:
    if node.op != "MatMulInteger" or len(node.inputs) < 3:
        return False
    a, b, a_zp = node.inputs[:3]
    b_zp = node.inputs[3] if len(node.inputs) > 3 else ""
    w = _int8_weight(view, b, b_zp)
    if w is None or not a_zp or not _u8_activation(view, a, a_zp):
        return False
    n = w.shape[1]
    cast = view.only_use(node.outputs[0])
    if cast is None or cast.op != "Cast" or int(cast.attrs.get("to", 0)) != FLOAT:
        return False
    mul = view.only_use(cast.outputs[0])
    if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
        return False
    s = view.other_input(mul, cast.outputs[0])
    scales = None if s is None else _split_scale(view, s, n)
    if scales is None:
        return False
    chain, out, d = [node, cast, mul], mul.outputs[0], ""
    add = view.only_use(out)
    if add is not None and add.op == "Add" and len(add.inputs) == 2:
        bias = view.const(view.other_input(add, out) or "")
        if bias is not None and bias.dtype == np.float32 and bias.ndim == 1 and bias.size == n:
            chain.append(add)
            out, d = add.outputs[0], view.other_input(add, out)
    a_scale, w_scale = scales
    if b_zp and view.const(b_zp).shape == view.const(w_scale).shape:
        w_zp = b_zp
    else:
        w_zp = graph.add_const(node.name + "_qw_zero_point",
                               np.zeros(view.const(w_scale).shape, np.int8))
    inputs = [a, a_scale, a_zp, b, w_scale, w_zp, "", "", "", "", "", ""] + ([d] if d else [])
    while inputs and not inputs[-1]:
        inputs.pop()
    fused = new_node(graph, "QGemm", inputs, [out], {"activation": "", "activation_params": []},
                     node.name)
    replace_chain(graph, chain, fused)
    return True


# -- 2. QLinearMatMul => QGemm ----------------------------------------------------------------------

def _qlinear_matmul(graph: Graph, view: View, node: Node) -> bool:
    if node.op != "QLinearMatMul" or len(node.inputs) != 8:
        return False
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = node.inputs
    w = _int8_weight(view, b, b_zp)
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
    if "MatMulInteger" in ops:
        changed |= rewrite_and_note(graph, _dynamic_product, "matmulinteger_to_qgemm")
    if "QLinearMatMul" in ops:
        changed |= rewrite_and_note(graph, _qlinear_matmul, "qlinearmatmul_to_qgemm")
    return changed
