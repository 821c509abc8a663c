"""Pruning masks on a PyTorch module that stay through the user's fine-tuning: retraining
with masks, what wins back the accuracy that pruning a trained model costs (the chain in
chain.py prunes without retraining). torch is an optional dependency, imported here only.

    from edgenn.compress import torch_masks
    zeros = torch_masks.apply(module, sparse=0.8, pattern=4, connectivity=0.5)
    ...fine-tune as usual: the masked weights stay zero...
    torch_masks.finalize(module)      # weight = weight * mask, plain parameters again
    # or, without labels: torch_masks.distill(module, original, inputs) (the dense
    # original as the teacher)
    edgenn.from_torch(module, example) / torch.onnx.export(...)

The masks are edgenn's own (prune.py), chosen from the weights as they are when apply()
runs: magnitude for group-1 1x1 convs (`sparse`; the first one kept dense, as sparsify
does) and Linear layers (`sparse_fc`), PatDNN pattern + connectivity pruning by output-
channel pairs for group-1 3x3 convs that read more than IMAGE_CHANNELS channels
(`pattern` taps of 9). They are held by torch.nn.utils.prune's reparametrisation (weight =
weight_orig * weight_mask on every forward), so the optimiser may move a masked weight's
weight_orig but the layer never sees it. The exported model's pruned layers then run on
edgenn's sparse kernels wherever those are faster (the tuner decides per layer).
"""
from __future__ import annotations

import numpy as np

from .prune import IMAGE_CHANNELS, magnitude_mask, pattern_mask


def _torch():
    from ..errors import MissingDependencyError
    try:
        import torch
        from torch.nn.utils import prune
    except ImportError as exc:
        raise MissingDependencyError("torch_masks needs PyTorch: pip install torch") from exc
    return torch, prune


def apply(module, sparse: float | None = None, sparse_fc: float | None = None,
          pattern: int | None = None, patterns: int = 8, connectivity: float = 0.5,
          skip_first: bool = True) -> dict[str, float]:
    """Mask the module's layers in place (see the module doc) -> {layer name: fraction of
    its weights masked}."""
    torch, prune = _torch()
    if _quantized(module):
        raise ValueError("apply the masks before torch_quant.apply (the quantized weights "
                         "are computed from the masked ones)")
    masked: dict[str, float] = {}
    first_pointwise = skip_first
    for name, m in module.named_modules():
        w = getattr(m, "weight", None)
        if w is None or prune.is_pruned(m) and hasattr(m, "weight_mask"):
            continue
        w = w.detach().cpu().numpy()
        mask = None
        if isinstance(m, torch.nn.Conv2d) and m.groups == 1:
            if tuple(m.kernel_size) == (1, 1) and sparse:
                if first_pointwise:
                    first_pointwise = False
                    continue
                mask = magnitude_mask(w, sparse)
            elif tuple(m.kernel_size) == (3, 3) and pattern and w.shape[1] > IMAGE_CHANNELS:
                mask = pattern_mask(w, pattern, patterns, connectivity, pairs=True)[0]
        elif isinstance(m, torch.nn.Linear) and sparse_fc:
            mask = magnitude_mask(w, sparse_fc)
        if mask is not None:
            prune.custom_from_mask(m, "weight", torch.from_numpy(
                np.ascontiguousarray(mask)).to(m.weight.device))
            masked[name] = float(1.0 - mask.mean())
    return masked


def finalize(module) -> None:
    """Fold every mask apply() set into its weight (weight = weight * mask), leaving plain
    parameters for export or saving."""
    _, prune = _torch()
    if _quantized(module):
        raise ValueError("torch_quant.finalize first: it writes the quantized weights the "
                         "masks then fold")
    for m in module.modules():
        if prune.is_pruned(m) and hasattr(m, "weight_mask"):
            prune.remove(m, "weight")


def _quantized(module) -> bool:
    """Whether torch_quant's hooks are on any layer of `module`."""
    return any(hasattr(m, "_edgenn_fq") for m in module.modules())


def distill(student, teacher, inputs: np.ndarray, epochs: int = 4, lr: float = 3e-4,
            batch: int = 64, loss: str = "soft_ce", seed: int = 0, progress=None) -> list:
    """Fine-tune `student` (masked by apply(), or not) to reproduce `teacher` on unlabeled
    `inputs` (N, ...) float32: knowledge distillation, so no labels are needed. loss
    "soft_ce": cross-entropy to the teacher's output probabilities (classifiers ending in a
    softmax); "mse": the outputs' squared error (logits, embeddings). Adam with a cosine
    decay over all steps. progress(epoch, last batch loss) after each epoch.
    -> the last batch loss of each epoch. Both modules end in eval mode."""
    torch, _ = _torch()
    if loss not in ("soft_ce", "mse"):
        raise ValueError(f"loss must be 'soft_ce' or 'mse', not {loss!r}")
    x = torch.from_numpy(np.ascontiguousarray(inputs, np.float32))
    if len(x) == 0:
        raise ValueError("distill needs inputs")
    device = next(student.parameters()).device
    x = x.to(device)
    teacher.eval()
    with torch.no_grad():
        target = torch.cat([teacher(x[i:i + 256]) for i in range(0, len(x), 256)])
    gen = torch.Generator().manual_seed(seed)
    steps = epochs * -(-len(x) // batch)
    opt = torch.optim.Adam(student.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    losses = []
    for epoch in range(epochs):
        student.train()
        for b in torch.randperm(len(x), generator=gen).split(batch):
            b = b.to(device)
            opt.zero_grad()
            out = student(x[b])
            value = (-(target[b] * torch.log(out + 1e-8)).sum(1).mean() if loss == "soft_ce"
                     else torch.nn.functional.mse_loss(out, target[b]))
            value.backward()
            opt.step()
            sched.step()
        losses.append(value.item())
        if progress:
            progress(epoch, losses[-1])
    student.eval()
    return losses
