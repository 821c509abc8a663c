"""GPTQ: weight-only int4 / int8 codes chosen with the layer's calibration inputs (Frantar
et al., ICLR 2023), so the rounding error of each weight is compensated by the weights not
yet rounded, in the direction the inputs actually excite.

For a layer y = W x with W (N, K) (N output channels, K the reduction axis in the order the
"qblock" codec runs its blocks) and calibration inputs X (K, P), the error to minimise is
||W X - Q X||^2 = tr((W - Q) H (W - Q)^T) with H = X X^T (K, K). The columns k = 0..K-1
are rounded in order; the error e_k / [H^-1]_kk of column k, spread over the columns after
it along row k of the upper Cholesky factor of H^-1, is the least-squares update of the
rest (the Optimal Brain Surgeon step). A block's scale is fitted (ADMM, never worse than
max-abs) from the weights as they stand when the rounding reaches that block, so the
grid follows the compensated weights. Work is done in lazy batches of whole blocks, about 128
columns (the rank-1 updates inside a batch, one GEMM for the columns after it). Weights
already zero (pruned) stay zero, and their error is compensated like any other (SparseGPT).

Calibration cost: one pass of the fp32 model over `calib`, H accumulated in float64
(K^2 values per layer; layers with K > MAX_K keep the data-free ADMM codes). Layers
covered: MatMul / Gemm with a constant weight, and group-1 Conv (H of the im2col patches).
"""
from __future__ import annotations

import numpy as np

from ..graph import codecs
from ..graph.ir import Graph, Node

MAX_K = 8192          # H is K x K float64: 512 MB at this size
MAX_ROWS = 40_000     # calibration rows (tokens / pixels) per layer: enough for a K x K H
DAMP = 0.01           # H += DAMP * mean(diag H) * I: keeps the Cholesky stable
BATCH = 128


def _consumer(graph: Graph, name: str) -> Node | None:
    """The one node that reads weight `name` as its input 1, if it is a GPTQ-able layer."""
    users = [n for n in graph.nodes if name in n.inputs]
    if len(users) != 1 or users[0].inputs[1] != name or users[0].inputs.count(name) != 1:
        return None
    node, w = users[0], graph.consts[name]
    if (node.op == "MatMul" or node.op == "Gemm" and not node.attrs.get("transA", 0)) \
            and w.ndim == 2:                       # a batched MatMul weight has no one H
        return node
    if node.op == "Conv" and node.attrs.get("group", 1) == 1 and w.ndim == 4:
        return node
    return None


def _rows_of(node: Node, x: np.ndarray, w_shape) -> np.ndarray:
    """The layer's input as (P, K) rows in the codec's K order."""
    if node.op == "Conv":
        from .channels import _patches
        return _patches(x, node, w_shape).T
    return np.asarray(x, np.float64).reshape(-1, x.shape[-1])


def hessians(graph: Graph, names, calib, threads: int = 1) -> dict[str, np.ndarray]:
    """{weight name: H = X^T X (K, K) float64} over the calibration data, for the weights
    of `names` that a GPTQ-able layer reads (others are left out)."""
    from ..quant.data import load_batches
    from ..quant.observe import Runner
    from .weights import output_axis
    layers = {}
    for name in names:
        node, axis = _consumer(graph, name), output_axis(graph, name)
        w = graph.consts[name]
        if node is not None and axis is not None and w.size // w.shape[axis] <= MAX_K:
            layers[name] = node                  # K, the reduction size, within MAX_K
    if not layers:
        return {}
    runner = Runner(graph, observe=[n.inputs[0] for n in layers.values()], threads=threads)
    feeds = load_batches(calib, graph.inputs).feeds
    budget = max(1, MAX_ROWS // max(len(feeds), 1))
    out: dict[str, np.ndarray] = {}
    for b, feed in enumerate(feeds):
        got = runner.run(feed)
        for name, node in layers.items():
            rows = _rows_of(node, got[node.inputs[0]], graph.consts[name].shape)
            if len(rows) > budget:
                pick = np.random.default_rng([b, len(rows)]).choice(len(rows), budget, False)
                rows = rows[np.sort(pick)]
            h = rows.T @ rows
            out[name] = h if name not in out else out[name] + h
    return out


def _fit_block(cols: np.ndarray, bits: int) -> np.ndarray:
    """Per-row scales of one block (N, block) float64 -> (N,), as they will be stored."""
    fit, qmax = codecs.FIT_SCALES, codecs.QMAX[bits]
    s = fit(cols, qmax) if fit is not None else np.max(np.abs(cols), axis=1) / qmax
    return codecs.stored_scales(np.where(s > 0, s, 1.0), bits).astype(np.float64)


def _batch(block: int) -> int:
    """Columns per lazy batch: whole blocks, so a block's scales are fitted after every
    earlier column's update has reached its weights."""
    return block * max(1, BATCH // block)


def quantize(w2d: np.ndarray, h: np.ndarray, bits: int, block: int,
             damp: float = DAMP) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ codes of W (N, K) float64 against H (K, K) -> (codes int8 (N, Kp), scales
    float32 (N, Kp // block)), K padded to whole blocks with zero columns (code 0).
    Weights that are exactly zero (pruned) keep code 0, their would-be update passed on to
    the weights after them as SparseGPT does, so coding never refills a pruned model.
    Raises numpy.linalg.LinAlgError when H is not usable (non-finite, not positive)."""
    n, k = w2d.shape
    qmax = codecs.QMAX[bits]
    kp = -(-k // block) * block
    w = np.zeros((n, kp))
    w[:, :k] = w2d
    pruned = w == 0                                      # (N, Kp), the padding included
    hp = np.zeros((kp, kp))
    hp[:k, :k] = h
    if not np.all(np.isfinite(hp)):
        raise np.linalg.LinAlgError("the calibration Hessian is not finite")
    dead = np.diag(hp) <= 0
    hp[dead, dead] = 1.0        # inputs never excited (and the padding): plain rounding
    hp[np.diag_indices(kp)] += damp * np.mean(np.diag(hp))
    u = np.linalg.cholesky(np.linalg.inv(hp)).T          # upper factor of H^-1
    if not np.all(np.isfinite(u)):
        raise np.linalg.LinAlgError("the inverse Hessian is not finite")
    codes = np.zeros((n, kp), np.int8)
    scales = np.zeros((n, kp // block))
    step = _batch(block)
    for b0 in range(0, kp, step):
        b1 = min(b0 + step, kp)
        wb = w[:, b0:b1].copy()
        keep = ~pruned[:, b0:b1]
        err = np.zeros_like(wb)
        for j in range(b1 - b0):
            col = b0 + j
            if col % block == 0:                        # this block's grid, from the
                s = _fit_block(np.where(keep[:, j:j + block],  # compensated weights
                                        wb[:, j:j + block], 0.0), bits)
                scales[:, col // block] = s
            s = scales[:, col // block]
            q = np.where(keep[:, j], np.clip(np.rint(wb[:, j] / s), -qmax, qmax), 0.0)
            codes[:, col] = q
            e = (wb[:, j] - q * s) / u[col, col]
            wb[:, j:] -= np.outer(e, u[col, col:b1])
            err[:, j] = e
        w[:, b1:] -= err @ u[b0:b1, b1:]
    return codes, scales.astype(np.float32)


def coded(w: np.ndarray, axis: int, h: np.ndarray, bits: int, block: int) -> dict:
    """The "qblock" codes of weight `w` (channel axis `axis`) by GPTQ against H (the
data-free codes of codecs.encode when H is not finite or not positive definite)."""
    w2d = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    try:
        q, scales = quantize(w2d, h, bits, block)
    except np.linalg.LinAlgError:         # inf / NaN activations on the calibration data:
        return codecs.encode(w, axis, bits, block=block)      # the data-free codes
    return codecs.pack(q, scales, axis % w.ndim, bits, block, w.shape)
