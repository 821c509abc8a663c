"""Weight-only int4 / int8 that stays low-bit at run time: each float Gemm with constant
weights becomes a MatMulNBits node (onnxruntime's op, graph/shapes/nbits.py), whose
codes stay packed in memory and in the .enn file and are unpacked in registers by the
nbits kernels, as decoders need (decode reads every weight once per token).

Per output column n and block of `block` values along K: a scale s fitted by ADMM (never
worse than max-abs, quant/calibration.py) and codes q = clip(rint(w / s), -qmax, qmax)
stored as q + 2^(bits-1), MatMulNBits' default zero point, so no zero points are stored.
A tied embedding table read by Gather(table, ids, axis 1) (passes/embedding.py's form)
becomes a QGather over the same codes; other embedding tables become QGathers of their
own (embeddings.py).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..graph.ir import Graph, Node
from ..quant.calibration import admm_scales
from .embeddings import quantize_embeddings

QMAX = {4: 7, 8: 127}
MIN_ELEMENTS = 1024        # smaller weights stay float
# Gemm's fused activations that MatMulNBits (which has none) is followed by as ops
ACTIVATION_OPS = {"": [], "Relu": ["Relu"], "Sigmoid": ["Sigmoid"], "SiLU": ["Sigmoid", "Mul"]}


def quantize_matmuls(graph: Graph, bits: int = 4, block: int = 32, accuracy_level: int = 4,
                     fit: str = "admm", min_elements: int = MIN_ELEMENTS) -> dict:
    """Every eligible Gemm (constant 2-D float32 weights of >= min_elements values, no
    transA, alpha 1, no fused activation or residual, a constant (N,) bias or none) ->
    MatMulNBits, in place. accuracy_level: MatMulNBits' (4 lets kernels quantize the
    activations to int8 per block). -> {"layers", "bytes_before", "bytes_after"}."""
    if bits not in QMAX:
        raise InputError(f"weight bits must be 4 or 8, got {bits}")
    if block < 16 or block & (block - 1):
        raise InputError(f"block must be a power of 2 >= 16, got {block}")
    if fit not in ("admm", "maxabs"):
        raise InputError(f"fit must be admm or maxabs, got {fit!r}")
    coded: dict[str, tuple[np.ndarray, np.ndarray, int, int]] = {}
    nodes, before, after = [], 0, 0
    for node in graph.nodes:
        w = _weights(graph, node, min_elements)
        if w is None:
            nodes.append(node)
            continue
        name = node.inputs[1]
        if name not in coded:
            wt = w if node.attrs.get("transB", 0) else w.T          # (N, K)
            coded[name] = _code(wt, bits, block, fit) + (wt.shape[1], wt.shape[0])
            before += w.nbytes
            after += coded[name][0].nbytes + coded[name][1].nbytes
        b, scales, k, n = coded[name]
        ins = [node.inputs[0], graph.add_const(f"{name}/nbits_b", b),
               graph.add_const(f"{name}/nbits_scales", scales)]
        if len(node.inputs) > 2 and node.inputs[2]:
            ins += ["", "", node.inputs[2]]
        act = node.attrs.get("activation", "")
        y = graph.unique_name(f"{node.name}/linear") if act else node.outputs[0]
        nodes.append(Node("MatMulNBits", ins, [y],
                          {"K": k, "N": n, "bits": bits, "block_size": block,
                           "accuracy_level": accuracy_level}, node.name))
        nodes += _activation(graph, act, y, node.outputs[0], node.name)
    graph.nodes = nodes
    tied = _tied_gathers(graph, coded, bits, block)
    tables = quantize_embeddings(graph, bits, fit=fit)
    for name in (set(coded) | tied) - {i for n in graph.nodes for i in n.inputs}:
        graph.consts.pop(name, None)
    return {"layers": sum(n.op == "MatMulNBits" for n in nodes),
            "tables": len(tied) + len(tables.tables),
            "bytes_before": before + tables.bytes_before,
            "bytes_after": after + tables.bytes_after}


def _activation(graph: Graph, act: str, x: str, y: str, name: str) -> list[Node]:
    """The ops after MatMulNBits for Gemm's fused activation `act`: x -> y."""
    if act == "SiLU":
        s = graph.unique_name(f"{name}/sigmoid")
        return [Node("Sigmoid", [x], [s], {}, f"{name}/sigmoid"),
                Node("Mul", [x, s], [y], {}, f"{name}/silu")]
    return [Node(op, [x], [y], {}, f"{name}/{op.lower()}") for op in ACTIVATION_OPS[act]]


def _weights(graph: Graph, node: Node, min_elements: int) -> np.ndarray | None:
    if node.op != "Gemm" or len(node.inputs) > 3:
        return None
    a = node.attrs
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or \
            a.get("activation", "") not in ACTIVATION_OPS or a.get("activation_params") or \
            a.get("beta", 1.0) != 1.0 and len(node.inputs) > 2 and node.inputs[2]:
        return None
    w = graph.consts.get(node.inputs[1])
    if w is None or w.dtype != np.float32 or w.ndim != 2 or w.size < min_elements:
        return None
    if len(node.inputs) > 2 and node.inputs[2]:
        c = graph.consts.get(node.inputs[2])
        n = w.shape[0] if a.get("transB", 0) else w.shape[1]
        if c is None or c.shape != (n,):
            return None
    return w


def _code(wt: np.ndarray, bits: int, block: int, fit: str):
    """(N, K) float32 -> (B uint8 (N, kb, block * bits / 8), scales float32 (N * kb,))."""
    n, k = wt.shape
    kb = -(-k // block)
    rows = np.zeros((n, kb * block), np.float64)
    rows[:, :k] = wt
    rows = rows.reshape(n * kb, block)
    qmax = QMAX[bits]
    scales = admm_scales(rows, 0, qmax) if fit == "admm" else np.abs(rows).max(1) / qmax
    scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
    q = np.clip(np.rint(rows / scales[:, None]), -qmax, qmax).astype(np.int16)
    codes = (q + (1 << (bits - 1))).astype(np.uint8).reshape(n, kb, block)
    if bits == 4:
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return np.ascontiguousarray(codes), scales


def _tied_gathers(graph: Graph, coded: dict, bits: int, block: int) -> set[str]:
    """Embedding reads of a quantized (K, N) projection table W (rows of the embedding =
    columns of W, coded as the projection's output columns) -> QGather over the same
    codes, signed (graph/shapes/quant.py): Gather(W, ids, axis 1) -> Transpose(perm
    (1, .., r, 0)) (passes/embedding.py's form), or Gather(T, ids) of a constant T equal
    to W^T (the Transpose folded into a copy). -> the tables now read as codes."""
    producers = graph.producers()
    tied = set()
    consumers = graph.consumers()
    by_shape = {}
    for name, (b, scales, k, n) in coded.items():
        by_shape.setdefault((n, k), []).append(name)
    for node in list(graph.nodes):
        if node.op == "Transpose" and node.inputs:
            g = producers.get(node.inputs[0])
            if g is None or g.op != "Gather" or int(g.attrs.get("axis", 0)) != 1 or \
                    g.inputs[0] not in coded or len(consumers.get(g.outputs[0], [])) != 1:
                continue
            perm = list(node.attrs.get("perm") or [])
            if perm != list(range(1, len(perm))) + [0]:
                continue
            _to_qgather(graph, coded[g.inputs[0]], g.inputs[0], g.inputs[1], node.outputs,
                        g.name, bits, block, drop=(g, node))
            tied.add(g.inputs[0])
        elif node.op == "Gather" and int(node.attrs.get("axis", 0)) in (0, -2):
            t = graph.consts.get(node.inputs[0])
            if t is None or t.ndim != 2:
                continue
            for name in by_shape.get(t.shape, []):
                if np.array_equal(t, graph.consts[name].T):
                    _to_qgather(graph, coded[name], name, node.inputs[1], node.outputs,
                                node.name, bits, block, drop=(node,))
                    tied.add(node.inputs[0])
                    break
    return tied


def _to_qgather(graph: Graph, code, table: str, ids: str, outputs, name: str, bits: int,
                block: int, drop) -> None:
    b, scales, k, n = code
    kb = b.shape[1]
    signed = b ^ np.uint8(0x88) if bits == 4 else (b.astype(np.int16) - 128).astype(np.int8)
    codes = graph.add_const(f"{table}/qgather_codes", signed.reshape(n, -1))
    scale = graph.add_const(f"{table}/qgather_scales", scales.reshape(n, kb))
    q = Node("QGather", [codes, scale, ids], list(outputs),
             {"bits": bits, "block": block, "dim": k}, name)
    last = drop[-1]
    graph.nodes = [q if x is last else x for x in graph.nodes if not any(x is d for d in drop[:-1])]
