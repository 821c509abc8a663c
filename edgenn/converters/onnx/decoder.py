"""ONNX converters of the decoder family (graph/shapes/decoder.py): onnxruntime's
com.microsoft RotaryEmbedding and GroupQueryAttention (1.32 definitions) and the ONNX
opset-23 RotaryEmbedding, each onto edgenn's op of the same name.

Refused by name (UnsupportedOpError naming the node): RotaryEmbedding's is_packed_batching
(ragged batches, a CUDA-only form); GroupQueryAttention's quantized KV cache (k_scale /
v_scale, kv_cache_bit_width, k_quant_type / v_quant_type), per-head Q / K RMS norms
(q_norm_weight / k_norm_weight: onnxruntime's CPU kernel refuses them too), right-padded
query chunks (query_seqlens), the window-sized cache (sliding_window_cache = 1),
bidirectional attention (causal = 0) and the output_qk output (qk_output).
"""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...registry import converter
from .importer import attribute_values

ROTARY_ATTRS = ("interleaved", "num_heads", "rotary_embedding_dim")
GQA_ATTRS = ("num_heads", "kv_num_heads", "scale", "softcap", "local_window_size",
             "do_rotary", "rotary_interleaved", "smooth_softmax")
# com.microsoft.GroupQueryAttention inputs 12.. that edgenn refuses, by index
GQA_REFUSED_INPUTS = {12: "k_scale (quantized KV cache)", 13: "v_scale (quantized KV cache)",
                      14: "q_norm_weight (per-head RMS norm)",
                      15: "k_norm_weight (per-head RMS norm)",
                      16: "query_seqlens (right-padded query chunks)"}


def _refuse(onode, why: str):
    domain = f"{onode.domain}." if onode.domain not in ("", "ai.onnx") else ""
    raise UnsupportedOpError({f"{domain}{onode.op_type} ({why})": [onode.name]})


def _ints(attrs: dict, keys) -> dict:
    return {k: int(attrs[k]) for k in keys if k in attrs}


@converter("com.microsoft.RotaryEmbedding")
def ms_rotary_embedding(onode, ctx):
    """inputs input, position_ids ((B, S) or one offset), cos_cache, sin_cache. The scale
    attribute only rescales a cache onnxruntime would grow on CUDA: its CPU kernel ignores
    it, and so does edgenn."""
    attrs = attribute_values(onode)
    if int(attrs.get("is_packed_batching", 0)):
        _refuse(onode, "is_packed_batching")
    x, pos, cos, sin = (list(onode.input) + [""] * 4)[:4]
    ctx.emit("RotaryEmbedding", [x, cos, sin, pos], list(onode.output[:1]),
             _ints(attrs, ROTARY_ATTRS), onode.name)


@converter("RotaryEmbedding")
def rotary_embedding(onode, ctx):
    """ONNX opset 23: inputs X, cos_cache, sin_cache[, position_ids]."""
    attrs = attribute_values(onode)
    ins = list(onode.input)
    while ins and not ins[-1]:
        ins.pop()
    ctx.emit("RotaryEmbedding", ins, list(onode.output[:1]), _ints(attrs, ROTARY_ATTRS),
             onode.name)


@converter("com.microsoft.GroupQueryAttention")
def group_query_attention(onode, ctx):
    attrs = attribute_values(onode)
    ins = list(onode.input)
    outs = list(onode.output)
    for i, why in GQA_REFUSED_INPUTS.items():
        if i < len(ins) and ins[i]:
            _refuse(onode, why)
    if int(attrs.get("kv_cache_bit_width", 0)) or any(
            str(attrs.get(k, "NONE")).upper() not in ("NONE", "") for k in
            ("k_quant_type", "v_quant_type")):
        _refuse(onode, "quantized KV cache")
    if int(attrs.get("sliding_window_cache", 0)):
        _refuse(onode, "sliding_window_cache")
    if int(attrs.get("causal", 1)) != 1:
        _refuse(onode, "causal = 0")
    if int(attrs.get("qk_output", 0)) or (len(outs) > 3 and outs[3]):
        _refuse(onode, "qk_output")
    node_attrs = _ints(attrs, GQA_ATTRS)
    for key in ("scale", "softcap"):
        if key in attrs:
            node_attrs[key] = float(attrs[key])
    ins = ins[:12]
    while ins and not ins[-1]:
        ins.pop()
    ctx.emit("GroupQueryAttention", ins, outs[:3], node_attrs, onode.name)
