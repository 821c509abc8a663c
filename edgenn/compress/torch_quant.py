"""Quantization-aware fine-tuning for weight-only codes: the layers of a PyTorch module see
their weights as edgenn's int8 / int4 "qblock" codec will decode them (graph/codecs.py:
symmetric codes, one max-abs scale per block of a row, int4 scales rounded to float16), so
fine-tuning learns around the rounding; gradients pass the rounding unchanged (the
straight-through estimator). Composes with torch_masks (apply the masks first: zeros stay
zero, they round to code 0). torch is an optional dependency, imported here only.

    from edgenn.compress import torch_masks, torch_quant
    torch_masks.apply(module, sparse=0.8)
    torch_quant.apply(module, bits=4, block=64)
    ...fine-tune (or torch_masks.distill)...
    torch_quant.finalize(module); torch_masks.finalize(module)
    export, then compress_weights(graph, 4, block=64, fit="maxabs"): the codes are the grid
    the module trained on (the max-abs scale of quantized weights is their own scale)

Export what you trained: the codes are exact only for weights that reach the .enn as the
module held them. Fold into the layers, before apply(), what would be folded later:
BatchNorm (torch.onnx folds it at export) and a constant scale right after a conv (edgenn's
load folds it into the weights: a HardSigmoid written as x * 0.2 + 0.5). Measured:
tests/compress/test_torch_quant.py, every layer's codes decode to the trained weights bit for bit;
PP-OCR cls (examples/compress_ppocr_cls.py) 43 of its 52 coded weights: its classifier (a
MatMul constant in onnx2torch's graph, not a layer) was coded after training, and its 8
squeeze-excite expand convs reached the .enn times the 0.2 of the HardSigmoid after them,
their scales no longer exact in float16 (up to 8.5e-5 apart).
"""
from __future__ import annotations

from ..graph.codecs import F16_RANGE, QMAX
from .weights import INT4_BLOCK, row_block


def _torch():
    from ..errors import MissingDependencyError
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError("torch_quant needs PyTorch: pip install torch") from exc
    return torch


def fake_quant(w, bits: int, block: int):
    """w (out, ...) as the codec decodes it: rows of w.size / out values in blocks of
    row_block(k, block, bits), scale = max |block| / qmax (int4: rounded to float16 where
    all are normal float16 numbers, as codecs.stored_scales), codes clipped to +-qmax.
    The gradient is the identity (straight-through)."""
    torch = _torch()
    out = w.shape[0]
    rows = w.reshape(out, -1)
    k = rows.shape[1]
    size = row_block(k, block, bits)
    pad = -k % size
    padded = torch.nn.functional.pad(rows, (0, pad)).reshape(out, -1, size)
    qmax = QMAX[bits]
    scale = padded.detach().abs().amax(dim=2, keepdim=True) / qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    if bits == 4 and F16_RANGE[0] <= float(scale.min()) and float(scale.max()) <= F16_RANGE[1]:
        scale = scale.half().float()
    q = torch.clamp(torch.round(padded / scale), -qmax, qmax) * scale
    q = q.reshape(out, -1)[:, :k].reshape(w.shape)
    return w + (q - w).detach()


def _pruned(m) -> bool:
    """Whether torch_masks (torch.nn.utils.prune) holds this layer's weight."""
    return hasattr(m, "weight_orig") and hasattr(m, "weight_mask")


def _source(m):
    """The weight the layer computes with before quantization (a pruned one's masked)."""
    return m.weight_orig * m.weight_mask if _pruned(m) else m.weight_float


def apply(module, bits: int = 4, block: int | None = None, min_elements: int = 64) -> list:
    """Quantize the weights of every Conv2d / Linear of >= min_elements values on each
    forward (see the module doc). -> the names of those layers."""
    torch = _torch()
    if bits not in QMAX:
        raise ValueError(f"bits must be 8 or 4, got {bits}")
    if block is not None and (block < 1 or bits == 4 and block % 2):
        raise ValueError(f"block must be a positive (for int4: even) count, got {block}")
    block = block or (INT4_BLOCK if bits == 4 else 1 << 30)
    names = []
    for name, m in module.named_modules():
        if not isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) or hasattr(m, "_edgenn_fq"):
            continue
        if m.weight.numel() < min_elements:
            continue
        if not _pruned(m):
            w = m._parameters.pop("weight")          # trained as weight_float from now on
            m.register_parameter("weight_float", w)
            m.weight = w.detach()

        def hook(mod, _inputs, bits=bits, block=block):
            mod.weight = fake_quant(_source(mod), bits, block)
        m._edgenn_fq = m.register_forward_pre_hook(hook)
        m._edgenn_fq_args = (bits, block)
        names.append(name)
    return names


def finalize(module) -> None:
    """Remove the hooks, leaving each layer's weight at its quantized value (a pruned
    layer's weight_orig takes the quantized values, its mask stays for
    torch_masks.finalize to fold)."""
    torch = _torch()
    for m in module.modules():
        handle = getattr(m, "_edgenn_fq", None)
        if handle is None:
            continue
        handle.remove()
        with torch.no_grad():
            q = fake_quant(_source(m), *m._edgenn_fq_args).detach()
        del m._edgenn_fq, m._edgenn_fq_args
        if "weight_float" in m._parameters:
            del m._parameters["weight_float"]
            m.weight = torch.nn.Parameter(q)
        else:                                        # pruned: masked entries round to 0
            with torch.no_grad():
                m.weight_orig.copy_(q)
