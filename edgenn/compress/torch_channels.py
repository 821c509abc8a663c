"""Channel pruning of a PyTorch module, for the user's own fine-tuning (the other entry of
compress/channels.py; torch is an optional dependency, imported here only).

prune_module(module, ratio) traces the module with torch.fx, finds the
same dependency-aware groups as the ONNX analysis (a group-1 Conv2d whose output, through
BatchNorm2d and elementwise activations only, reaches one depthwise Conv2d then one
group-1 Conv2d, or one group-1 Conv2d directly; every tensor on the way read once), ranks
the producer's filters by L1 / L2 / FPGM and returns a copy of the module with the least
important `ratio` of each group's channels removed from the producer, its BatchNorm, the
depthwise conv and its BatchNorm, and the consumer's input side. Fine-tune it, then
export it (torch.onnx) and convert it like any model: edgenn.from_torch or convert.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .channels import importance as filter_importance

# modules and functions that keep every channel independent (pass-through for a group)
ELEMENTWISE = ("ReLU", "ReLU6", "Hardswish", "Hardsigmoid", "SiLU", "GELU", "LeakyReLU",
               "Sigmoid", "Tanh", "Identity", "Dropout")


@dataclass
class TorchGroup:
    producer: str                 # qualified module names
    producer_bn: str | None
    depthwise: str | None
    depthwise_bn: str | None
    consumer: str


def _elementwise_fn(target) -> bool:
    import torch
    import torch.nn.functional as F
    return target in (torch.relu, F.relu, F.relu6, F.hardswish, F.silu, F.gelu, torch.sigmoid,
                      torch.tanh, F.leaky_relu, F.hardsigmoid)


def torch_groups(module) -> list[TorchGroup]:
    """The prunable groups of `module` (see the module doc), in graph order."""
    import torch.fx as fx
    import torch.nn as nn
    traced = fx.symbolic_trace(module)
    mods = dict(traced.named_modules())

    def kind(node):
        if node.op == "call_module":
            m = mods[node.target]
            if isinstance(m, nn.Conv2d):
                return "conv"
            if isinstance(m, nn.BatchNorm2d):
                return "bn"
            if type(m).__name__ in ELEMENTWISE:
                return "elementwise"
        if node.op == "call_function" and _elementwise_fn(node.target):
            return "elementwise"
        if node.op == "call_method" and node.target in ("relu", "sigmoid", "tanh"):
            return "elementwise"
        return None

    def follow(node):
        """The next conv after bn / elementwise nodes each read once -> (conv, bn seen)."""
        bn = None
        while len(node.users) == 1:
            node = next(iter(node.users))
            k = kind(node)
            if k == "conv":
                return node, bn
            if k == "bn" and bn is None:
                bn = node.target
            elif k != "elementwise":
                return None, None
        return None, None

    found = []
    for node in traced.graph.nodes:
        if kind(node) != "conv":
            continue
        p = mods[node.target]
        if p.groups != 1 or p.out_channels < 2:
            continue
        nxt, p_bn = follow(node)
        if nxt is None:
            continue
        m = mods[nxt.target]
        dw = dw_bn = None
        if m.groups == m.in_channels == m.out_channels == p.out_channels and m.groups > 1:
            dw = nxt.target
            nxt, dw_bn = follow(nxt)
            if nxt is None:
                continue
            m = mods[nxt.target]
        if m.groups == 1 and m.in_channels == p.out_channels:
            found.append(TorchGroup(node.target, p_bn, dw, dw_bn, nxt.target))
    return found


def _slice_conv(conv, out_keep=None, in_keep=None):
    import torch
    import torch.nn as nn
    w = conv.weight.detach()
    if out_keep is not None:
        w = w[out_keep]
    if in_keep is not None and conv.groups == 1:
        w = w[:, in_keep]
    out_c = w.shape[0]
    groups = out_c if conv.groups > 1 else 1
    new = nn.Conv2d(w.shape[1] * groups, out_c, conv.kernel_size, conv.stride, conv.padding,
                    conv.dilation, groups, conv.bias is not None, conv.padding_mode)
    with torch.no_grad():
        new.weight.copy_(w)
        if conv.bias is not None:
            new.bias.copy_(conv.bias.detach() if out_keep is None else conv.bias.detach()[out_keep])
    return new


def _slice_bn(bn, keep):
    import torch
    import torch.nn as nn
    new = nn.BatchNorm2d(len(keep), bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
    with torch.no_grad():
        if bn.affine:
            new.weight.copy_(bn.weight.detach()[keep])
            new.bias.copy_(bn.bias.detach()[keep])
        if bn.track_running_stats:
            new.running_mean.copy_(bn.running_mean[keep])
            new.running_var.copy_(bn.running_var[keep])
            new.num_batches_tracked.copy_(bn.num_batches_tracked)
    return new


def _set(root, name: str, value) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, value)


def prune_module(module, ratio: float = 0.3, importance: str = "l1",
                 per_layer: dict | None = None):
    """-> (a pruned copy of `module`, {producer: (channels, kept)}); `module` unchanged.
    per_layer: {producer module name: ratio} overrides."""
    import torch
    pruned = copy.deepcopy(module)
    per_layer = dict(per_layer or {})
    report = {}
    for g in torch_groups(pruned):
        r = float(per_layer.pop(g.producer, ratio))
        prod = pruned.get_submodule(g.producer)
        m = prod.out_channels
        kept = max(1, int(round(m * (1 - r))))
        if kept == m:
            continue
        score = filter_importance(prod.weight.detach().cpu().numpy(), importance)
        keep = torch.as_tensor(np.sort(np.argsort(-score, kind="stable")[:kept]))
        _set(pruned, g.producer, _slice_conv(prod, out_keep=keep))
        for bn in (g.producer_bn, g.depthwise_bn):
            if bn:
                _set(pruned, bn, _slice_bn(pruned.get_submodule(bn), keep))
        if g.depthwise:
            _set(pruned, g.depthwise, _slice_conv(pruned.get_submodule(g.depthwise),
                                                  out_keep=keep))
        _set(pruned, g.consumer, _slice_conv(pruned.get_submodule(g.consumer), in_keep=keep))
        report[g.producer] = (m, kept)
    if per_layer:
        raise ValueError(f"not the producer of a prunable group: {sorted(per_layer)}")
    return pruned, report
