"""Converters of the com.microsoft ops that onnxruntime's transformer optimizer
(onnxruntime.transformers.optimizer, the usual way BERT-family models are prepared for
deployment) writes, each spelled in standard ops that edgenn's passes fuse back into its
own kernels (LayerNormalization, Gelu, FusedAttention), the RMS norms as the standard op
RMSNormalization (opset 23) itself:

- Gelu, BiasGelu (Gelu(A + B)), FastGelu (tanh approximation, optional bias), QuickGelu
  (x sigmoid(alpha x)), BiasAdd (X + bias + skip);
- SkipLayerNormalization (LayerNorm(input + skip [+ bias]), its optional sum output),
  com.microsoft LayerNormalization, SimplifiedLayerNormalization and
  SkipSimplifiedLayerNormalization (RMS norm: x / sqrt(mean(x^2) + eps) * gamma);
- FusedMatMul (alpha, transposes of the last two axes of a constant B);
- EmbedLayerNormalization: LayerNorm(word[ids] + position[0..S) or [position_ids] +
  segment[segment_ids]), and the mask_index (valid lengths per batch) from the mask;
- Attention: input (B, S, H_in) @ weights + bias -> Q, K, V (qkv_hidden_sizes), heads
  split, softmax(Q K^T scale + mask) V, heads merged; masks as AttentionMaskBias
  (graph/shapes/fused.py) spells them: (B,) lengths, (2B,) end / start, (B, T), (B, S, T);
  unidirectional adds the causal mask. Past / present key-value state, relative position
  bias and rotary embeddings are refused by name.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...registry import converter
from .importer import attribute_values


class _Emit:
    """Fresh names and small constants for one node's expansion."""

    def __init__(self, ctx, onode):
        self.ctx, self.onode = ctx, onode
        self.base = onode.name or onode.op_type
        self.inputs = list(onode.input) + [""] * 10
        self.attrs = attribute_values(onode)

    def t(self, tag: str) -> str:
        return self.ctx.graph.unique_name(f"{self.base}/{tag}")

    def c(self, tag: str, value) -> str:
        return self.ctx.add_const(f"{self.base}/{tag}", np.asarray(value))

    def op(self, op: str, ins: list[str], tag: str, attrs: dict | None = None,
           out: str | None = None) -> str:
        y = out or self.t(tag)
        self.ctx.emit(op, ins, [y], attrs or {}, self.t(f"{tag}_node"))
        return y

    def refuse(self, why: str):
        raise UnsupportedOpError({f"com.microsoft.{self.onode.op_type} ({why})":
                                  [self.onode.name]})


def _outputs(onode) -> list[str]:
    return list(onode.output) + [""] * 4


@converter("com.microsoft.Gelu")
def gelu(onode, ctx):
    e = _Emit(ctx, onode)
    e.op("Gelu", [e.inputs[0]], "gelu", {"approximate": "none"}, out=onode.output[0])


@converter("com.microsoft.BiasGelu")
def bias_gelu(onode, ctx):
    e = _Emit(ctx, onode)
    s = e.op("Add", e.inputs[:2], "sum")
    e.op("Gelu", [s], "gelu", {"approximate": "none"}, out=onode.output[0])


@converter("com.microsoft.FastGelu")
def fast_gelu(onode, ctx):
    e = _Emit(ctx, onode)
    x = e.op("Add", e.inputs[:2], "sum") if e.inputs[1] else e.inputs[0]
    e.op("Gelu", [x], "gelu", {"approximate": "tanh"}, out=onode.output[0])


@converter("com.microsoft.QuickGelu")
def quick_gelu(onode, ctx):
    e = _Emit(ctx, onode)
    alpha = float(e.attrs.get("alpha", 1.702))
    s = e.op("Sigmoid", [e.op("Mul", [e.inputs[0], e.c("alpha", np.float32(alpha))], "ax")],
             "sig")
    e.op("Mul", [e.inputs[0], s], "y", out=onode.output[0])


@converter("com.microsoft.BiasAdd")
def bias_add(onode, ctx):
    e = _Emit(ctx, onode)
    s = e.op("Add", e.inputs[:2], "sum")
    e.op("Add", [s, e.inputs[2]], "y", out=onode.output[0])


def _layer_norm(e: _Emit, x: str, gamma: str, beta: str, out: str) -> None:
    eps = float(e.attrs.get("epsilon", 1e-12))
    ins = [x, gamma] + ([beta] if beta else [])
    e.op("LayerNormalization", ins, "ln", {"axis": -1, "epsilon": eps, "stash_type": 1},
         out=out)


def _rms_norm(e: _Emit, x: str, gamma: str, out: str, eps_default: float,
              axis: int = -1) -> None:
    """RMSNormalization: x / sqrt(mean(x^2 over the dims from axis on) + eps) * gamma, in
    float32 (stash_type 1) as onnxruntime computes it."""
    eps = float(e.attrs.get("epsilon", eps_default))
    e.op("RMSNormalization", [x, gamma], "rms",
         {"axis": axis, "epsilon": eps, "stash_type": int(e.attrs.get("stash_type", 1))},
         out=out)


def _skip_sum(e: _Emit, bias_index: int, sum_output: str) -> str:
    """input + skip [+ bias]; the last Add writes the sum output when the model reads it."""
    bias = e.inputs[bias_index]
    s = e.op("Add", e.inputs[:2], "skip", out=None if bias else sum_output or None)
    if bias:
        s = e.op("Add", [s, bias], "skip_bias", out=sum_output or None)
    return s


def _skip_norm(onode, ctx, bias_index: int, rms: bool) -> None:
    """Skip(Simplified)LayerNormalization: outputs (y, mean, inv_std, input + skip + bias)."""
    e = _Emit(ctx, onode)
    outs = _outputs(onode)
    if outs[1] or outs[2]:
        e.refuse("mean / inverse std outputs")
    s = _skip_sum(e, bias_index, outs[3])
    if rms:      # onnxruntime's default epsilon of the Skip form
        _rms_norm(e, s, e.inputs[2], outs[0], 1e-12)
    else:
        _layer_norm(e, s, e.inputs[2], e.inputs[3], outs[0])


@converter("com.microsoft.SkipLayerNormalization")
def skip_layer_norm(onode, ctx):       # input, skip, gamma, beta, bias
    _skip_norm(onode, ctx, 4, rms=False)


@converter("com.microsoft.SkipSimplifiedLayerNormalization")
def skip_simplified_layer_norm(onode, ctx):     # input, skip, gamma, bias
    _skip_norm(onode, ctx, 3, rms=True)


@converter("com.microsoft.LayerNormalization")
def layer_norm(onode, ctx):
    e = _Emit(ctx, onode)
    if any(_outputs(onode)[1:3]) or int(e.attrs.get("axis", -1)) != -1:
        e.refuse("mean / inverse std outputs or an axis other than -1")
    _layer_norm(e, e.inputs[0], e.inputs[1], e.inputs[2], onode.output[0])


@converter("SimplifiedLayerNormalization")   # onnxruntime registers it in the ONNX domain
@converter("com.microsoft.SimplifiedLayerNormalization")
def simplified_layer_norm(onode, ctx):
    e = _Emit(ctx, onode)
    if any(_outputs(onode)[1:3]):
        e.refuse("inverse std output")
    _rms_norm(e, e.inputs[0], e.inputs[1], onode.output[0], 1e-5,
              int(e.attrs.get("axis", -1)))


@converter("com.microsoft.FusedMatMul")
def fused_matmul(onode, ctx):
    e = _Emit(ctx, onode)
    a_name, b_name = e.inputs[:2]
    if int(e.attrs.get("transBatchA", 0)) or int(e.attrs.get("transBatchB", 0)) or \
            int(e.attrs.get("transA", 0)):
        e.refuse("transA / transBatch")
    if int(e.attrs.get("transB", 0)):
        b = ctx.const(b_name)
        if b is None or b.ndim < 2:
            e.refuse("transB of a run-time B")
        b_name = e.c("b_t", np.ascontiguousarray(np.swapaxes(b, -1, -2)))
    alpha = float(e.attrs.get("alpha", 1.0))
    if alpha == 1.0:
        e.op("MatMul", [a_name, b_name], "mm", out=onode.output[0])
    else:
        y = e.op("MatMul", [a_name, b_name], "mm")
        e.op("Mul", [y, e.c("alpha", np.float32(alpha))], "y", out=onode.output[0])


@converter("com.microsoft.EmbedLayerNormalization")
def embed_layer_norm(onode, ctx):
    """inputs: input_ids, segment_ids, word_embedding, position_embedding,
    segment_embedding, gamma, beta, mask, position_ids; outputs: output, mask_index,
    embedding_sum."""
    e = _Emit(ctx, onode)
    ids, seg, word, pos, seg_emb, gamma, beta, mask, pos_ids = e.inputs[:9]
    out, mask_index, emb_sum = _outputs(onode)[:3]
    s = e.op("Gather", [word, ids], "word", {"axis": 0})
    if pos_ids:
        p = e.op("Gather", [pos, pos_ids], "pos", {"axis": 0})
    else:                        # positions 0 .. S-1, the same for every batch row
        length = e.op("Gather", [e.op("Shape", [ids], "shape"), e.c("one", np.int64(1))],
                      "seq_len", {"axis": 0})
        p = e.op("Slice", [pos, e.c("zero", np.array([0], np.int64)),
                           e.op("Unsqueeze", [length, e.c("ax0", np.array([0], np.int64))],
                                "end"),
                           e.c("axis", np.array([0], np.int64))], "pos")
    s = e.op("Add", [s, p], "word_pos")
    if seg and seg_emb:
        s = e.op("Add", [s, e.op("Gather", [seg_emb, seg], "seg", {"axis": 0})], "emb")
    if emb_sum:
        e.op("Identity", [s], "emb_sum", out=emb_sum)
    _layer_norm(e, s, gamma, beta, out)
    if mask_index:
        if not mask:
            e.refuse("mask_index without a mask")
        total = e.op("ReduceSum", [e.op("Cast", [mask], "mask_i64", {"to": 7}),
                                   e.c("axes", np.array([1], np.int64))], "lengths",
                     {"keepdims": 0})
        e.op("Cast", [total], "mask_index", {"to": 6}, out=mask_index)


@converter("com.microsoft.Attention")
def attention(onode, ctx):
    """input (B, S, H_in), weights (H_in, Hq + Hk + Hv), bias (Hq + Hk + Hv,), mask_index
    -> output (B, S, Hv)."""
    e = _Emit(ctx, onode)
    x, weights, bias, mask = e.inputs[:4]
    if any(e.inputs[4:8]) or any(_outputs(onode)[1:]):
        e.refuse("past / present state or attention bias")
    if any(int(e.attrs.get(a, 0)) for a in ("do_rotary", "past_present_share_buffer")):
        e.refuse("rotary embedding / shared past buffer")
    heads = int(e.attrs["num_heads"])
    w = ctx.const(weights)
    if w is None or w.ndim != 2:
        e.refuse("run-time weights")
    sizes = [int(v) for v in e.attrs.get("qkv_hidden_sizes") or [w.shape[1] // 3] * 3]
    if sum(sizes) != w.shape[1] or any(v % heads for v in sizes) or sizes[0] != sizes[1]:
        e.refuse(f"qkv_hidden_sizes {sizes} for weights {w.shape} and {heads} heads")
    qkv = e.op("MatMul", [x, weights], "qkv")
    if bias:
        qkv = e.op("Add", [qkv, bias], "qkv_bias")
    q, k, v = (e.t(n) for n in ("q", "k", "v"))
    ctx.emit("Split", [qkv, e.c("sizes", np.array(sizes, np.int64))], [q, k, v], {"axis": -1},
             e.t("split"))

    def heads_first(t, size, perm, tag):        # (B, S, n*h) -> (B, n, S, h) / (B, n, h, S)
        r = e.op("Reshape", [t, e.c(f"{tag}_shape", np.array([0, 0, heads, size // heads],
                                                              np.int64))], f"{tag}_heads")
        return e.op("Transpose", [r], f"{tag}_t", {"perm": perm})
    qh = heads_first(q, sizes[0], [0, 2, 1, 3], "q")
    kt = heads_first(k, sizes[1], [0, 2, 3, 1], "k")
    vh = heads_first(v, sizes[2], [0, 2, 1, 3], "v")
    scale = e.attrs.get("scale")
    scale = float(scale) if scale else 1.0 / float(np.sqrt(sizes[0] // heads))
    scores = e.op("Mul", [e.op("MatMul", [qh, kt], "qk"), e.c("scale", np.float32(scale))],
                  "scores")
    fill = float(e.attrs.get("mask_filter_value", -10000.0))
    bias = None
    if mask:
        bias = e.op("AttentionMaskBias", [mask, x], "mask_bias", {"filter_value": fill})
    if int(e.attrs.get("unidirectional", 0)):   # key j > query i masked, with the same fill
        ones = e.op("ConstantOfShape", [e.op("Shape", [scores], "s_shape")], "ones",
                    {"value": np.ones(1, np.float32)})
        keep = e.op("Trilu", [ones], "causal", {"upper": 0})
        causal = e.op("Mul", [e.op("Sub", [e.c("one_f", np.float32(1)), keep], "drop"),
                              e.c("fill_f", np.float32(fill))], "causal_bias")
        # a key masked twice is masked once (onnxruntime sets the fill, it does not add it)
        bias = causal if bias is None else e.op("Min", [bias, causal], "both_masks")
    if bias is not None:
        scores = e.op("Add", [scores, bias], "masked")
    probs = e.op("Softmax", [scores], "probs", {"axis": -1})
    ctx_h = e.op("Transpose", [e.op("MatMul", [probs, vh], "pv")], "merge", {"perm": [0, 2, 1, 3]})
    e.op("Reshape", [ctx_h, e.c("out_shape", np.array([0, 0, sizes[2]], np.int64))], "out",
         out=onode.output[0])
