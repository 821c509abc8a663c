"""The key / value cache of a decoder graph.

A decoder export (onnxruntime-genai's builder) has, per layer, graph inputs
past_key_values.{i}.key / .value (batch, kv_heads, past_length, head_size) and outputs
present.{i}.key / .value, both wired to one GroupQueryAttention node (inputs 3 and 4,
outputs 1 and 2). Fed a past buffer of fixed capacity and an attention mask padded with
zeros to that capacity, every decode step has the same input shapes, so one plan serves
every step; with the node's kv_in_place set and its present outputs dropped, the kernel
writes each step's keys and values into the caller's cache arrays (no copy of the cache
per token).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from ..graph.ir import Graph, Node, ValueInfo

ATTENTION_OPS = ("GroupQueryAttention",)
SEQLENS = 5                    # GroupQueryAttention's seqlens_k: valid length - 1 per entry
# the graph input the Generator feeds seqlens_k through (int32 (batch,)), in place of the
# attention-mask arithmetic that computes it in the export
SEQLENS_INPUT = "edgenn.seqlens_k"
# the output projections whose input rows are positions: sliced to the last one
PROJECTIONS = ("MatMulNBits", "Gemm", "MatMul")
PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE = 3, 4, 1, 2


@dataclass
class CacheSlot:
    """One layer's cache: the graph inputs and outputs of its keys and values."""
    node: str
    key_input: str
    value_input: str
    key_output: str
    value_output: str


@dataclass
class DecoderIO:
    """What the generation loop feeds and reads."""
    ids: str                       # token ids (batch, sequence) int64
    mask: str | None               # attention mask (batch, capacity) int64
    positions: str | None          # position ids (batch, sequence), when the graph has one
    logits: str                    # (batch, sequence, vocabulary)
    slots: list[CacheSlot]
    kv_heads: int
    head_size: int
    dtype: str


def find_decoder_io(graph: Graph, head_size: int | None = None) -> DecoderIO:
    """The decoder interface of `graph`; GraphError when it is not one (no attention over
    a past cache, or inputs that are not recognised)."""
    inputs = {v.name: v for v in graph.inputs}
    slots, kv_heads, dtype = [], set(), set()
    for node in graph.nodes:
        if node.op not in ATTENTION_OPS or len(node.inputs) <= PAST_VALUE:
            continue
        pk, pv = node.inputs[PAST_KEY], node.inputs[PAST_VALUE]
        if pk not in inputs or pv not in inputs:
            continue
        outs = list(node.outputs) + ["", "", ""]
        slots.append(CacheSlot(node.name, pk, pv, outs[PRESENT_KEY], outs[PRESENT_VALUE]))
        kv_heads.add(int(node.attrs["kv_num_heads"]))
        dtype.add(inputs[pk].dtype)
    if not slots:
        raise GraphError("not a decoder with a key / value cache: no GroupQueryAttention "
                         "node reads its past keys and values from graph inputs (a "
                         "standard-op export, e.g. torch.onnx's, runs as an "
                         "InferenceSession; for generation, export it with "
                         "onnxruntime-genai's model builder)")
    if len(kv_heads) != 1 or len(dtype) != 1:
        raise GraphError("layers differ in key / value heads or cache dtype")
    names = [v.name for v in graph.inputs]
    ids = _one_of(names, ("input_ids",), "token ids")
    mask = next((n for n in names if n == "attention_mask"), None)
    positions = next((n for n in names if n == "position_ids"), None)
    fed = {ids, mask, positions} | {s.key_input for s in slots} | \
        {s.value_input for s in slots}
    extra = [n for n in names if n not in fed]
    if extra:
        raise GraphError(f"decoder inputs not understood: {extra}")
    logits = _one_of([v.name for v in graph.outputs], ("logits",), "logits")
    size = head_size or _head_size(graph, slots[0], inputs)
    return DecoderIO(ids, mask, positions, logits, slots, kv_heads.pop(), size, dtype.pop())


def bind_in_place(graph: Graph, io: DecoderIO) -> Graph:
    """A copy of `graph` whose attention nodes update the past arrays they are fed
    (kv_in_place = 1), read seqlens_k from the input SEQLENS_INPUT (the Generator knows
    the lengths: the mask arithmetic that derives them is left unused), and whose present
    outputs are gone: the graph's only output is the logits, of the last position only
    (the next token's; a prompt's other rows would cost the output projection once per
    prompt token)."""
    out = copy.copy(graph)
    out.consts = dict(graph.consts)
    names = {s.node for s in io.slots}
    nodes = []
    for node in graph.nodes:
        if node.name in names:
            node = copy.copy(node)
            node.attrs = {**node.attrs, "kv_in_place": 1}
            node.inputs = [SEQLENS_INPUT if i == SEQLENS else x
                           for i, x in enumerate(node.inputs)]
            node.outputs = [node.outputs[0]]
        elif io.logits in node.outputs and node.op in PROJECTIONS:
            last = out.unique_name(f"{node.name}/last_position")
            bounds = [out.add_const(f"last/{k}", np.array([v], np.int64))
                      for k, v in (("start", -1), ("end", 1 << 62), ("axis", -2))]
            nodes.append(Node("Slice", [node.inputs[0], *bounds], [last], {}, last))
            node = copy.copy(node)
            node.inputs = [last] + list(node.inputs[1:])
        nodes.append(node)
    out.nodes = nodes
    out.inputs = list(graph.inputs) + [ValueInfo(SEQLENS_INPUT, "int32", ("batch",))]
    out.outputs = [v for v in graph.outputs if v.name == io.logits]
    return out


def _one_of(names: list[str], wanted: tuple[str, ...], what: str) -> str:
    for n in wanted:
        if n in names:
            return n
    raise GraphError(f"decoder: no {what} ({' / '.join(wanted)}) among {names}")


def _head_size(graph: Graph, slot: CacheSlot, inputs: dict) -> int:
    """The cache's last dim: from the input's shape when it is a number, else from the
    width of the projection that feeds the attention node."""
    last = (inputs[slot.key_input].shape or (None,))[-1]
    if isinstance(last, int) and last > 0:
        return last
    node = next(n for n in graph.nodes if n.name == slot.node)
    heads, kv = int(node.attrs["num_heads"]), int(node.attrs["kv_num_heads"])
    packed = len(node.inputs) < 2 or not node.inputs[1]
    width = _width(graph, node.inputs[1] if not packed else node.inputs[0])
    if width is None:
        raise GraphError(f"decoder: the head size of {slot.node!r} is not known; pass "
                         "head_size")
    return width // (heads + 2 * kv) if packed else width // kv


def _width(graph: Graph, tensor: str) -> int | None:
    """The last dim a projection gives `tensor`: MatMulNBits' N, a MatMul's or Gemm's
    constant weight, through a bias Add."""
    producers = graph.producers()
    for _ in range(4):
        node = producers.get(tensor)
        if node is None:
            return None
        if node.op == "MatMulNBits":
            return int(node.attrs["N"])
        if node.op in ("MatMul", "Gemm") and node.inputs[1] in graph.consts:
            w = graph.consts[node.inputs[1]]
            return int(w.shape[0] if node.attrs.get("transB") else w.shape[-1])
        if node.op != "Add":
            return None
        tensor = node.inputs[0] if node.inputs[0] in producers else node.inputs[1]
    return None
