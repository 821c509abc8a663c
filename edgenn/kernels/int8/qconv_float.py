"""QConv / QGemm computed by the fp32 kernels: candidates the autotuner weighs against the
integer kernels, so a layer stays in float where float is faster on this CPU (a 3x3 conv
through fp32 Winograd F(4,3) does 4x fewer multiplies than any int8 GEMM, and without VNNI
an int8 multiply-add is no faster than an fp32 FMA).

    xf = float32(x - x_zp)                        one C pass (dequantize, scale folded below)
    yf = act(conv(xf, w * x_scale * w_scale) + bias * x_scale * w_scale [+ zf])   fp32 kernel
    yf = yf * s + b                               post_affine (s, b), if any (NumPy, in place)
    y  = clamp(rint(yf * (1 / y_scale)) + y_zp)  one C pass, or yf itself (float output)

The float accumulation rounds differently from the exact int32 one, so an output may land
one quantization step away from the reference on rare elements: these kernels declare
lsb_tolerance=1 and the tuner checks them with it.
"""
from __future__ import annotations

import numpy as np

from ...graph.ir import Node
from ...registry import KERNELS, KernelSpec, TensorInfo, kernel
from .. import scratch
from ..rowops import _rowops
from .quantize import scalar

GEOMETRY = ("kernel_shape", "strides", "pads", "dilations", "group", "auto_pad")
EPILOGUE = ("activation", "activation_params")
# (id(weights), id(node), x shape, y shape) -> (weights, fp32 node, fp32 input infos), shared
# by the candidates of one node; the stored weights and node make a recycled id harmless
_cache: dict = {}


def _opt(ins, i):
    return ins[i] if i < len(ins) else None


def _consts_ok(ins) -> bool:
    """Scales and zero points constant and per tensor (weights' scale may be per channel)."""
    for i in (1, 2, 6, 7, 10, 11):
        info = _opt(ins, i)
        if info is not None and scalar(info) is None:
            return False
    return ins[3].value is not None and ins[4].value is not None and \
        (_opt(ins, 8) is None or ins[8].value is not None) and _opt(ins, 12) is None


def _float_problem(node, ins, outs, op: str):
    """The fp32 node and input infos equivalent to this QConv / QGemm (cached per weights)."""
    w = ins[3].value
    key = (id(w), id(node), tuple(ins[0].shape), tuple(outs[0].shape))
    hit = _cache.get(key)
    if hit is not None and hit[0] is w and hit[1].attrs.get("_of") is node:
        return hit[1], hit[2]
    xs = np.float32(scalar(ins[1]))
    ws = np.asarray(ins[4].value, np.float32).reshape(-1)
    channel_axis = 0 if op == "Conv" else 1
    shape = [1] * w.ndim
    shape[channel_axis] = -1
    scale = (xs * ws).reshape(shape) if ws.size > 1 else xs * ws.reshape(())
    wf = (w.astype(np.float32) * scale).astype(np.float32)
    channels = w.shape[channel_axis]
    bias = _opt(ins, 8)
    bf = (np.zeros(channels, np.float32) if bias is None else
          (bias.value.astype(np.float32) * (xs * ws)).astype(np.float32).reshape(channels))
    x = ins[0]
    if op == "Conv":
        attrs = {k: v for k, v in node.attrs.items() if k in GEOMETRY + EPILOGUE}
        xi = TensorInfo("float32", x.shape)
    else:
        attrs = {k: v for k, v in node.attrs.items() if k in EPILOGUE}
        attrs.update(transA=0, transB=0, alpha=1.0, beta=1.0)
        xi = TensorInfo("float32", (int(np.prod(x.shape[:-1])), x.shape[-1]))
    infos = [xi, TensorInfo.of(wf), TensorInfo.of(bf)]
    if _opt(ins, 9) is not None:
        infos.append(TensorInfo("float32", outs[0].shape))
    attrs["_of"] = node
    fnode = Node(op, ["x", "w", "b", "z"][:len(infos)], ["y"], attrs, node.name)
    if len(_cache) > 64:
        _cache.clear()
    _cache[key] = (w, fnode, infos)
    return fnode, infos


def _out_info(op, outs):
    y = outs[0]
    return [TensorInfo("float32", y.shape if op == "Conv" else
                       (int(np.prod(y.shape[:-1])), y.shape[-1]))]


def _wrap(op: str, qop: str, spec: KernelSpec) -> None:
    """Register QConv (QGemm) candidate `<spec.name>_f32` running fp32 kernel `spec`
    (`<base>_f32_mt` for a multi-thread `<base>_mt`)."""

    def usable(node, ins, outs) -> bool:
        if ins[0].dtype != "uint8" or not _consts_ok(ins) or len(ins[0].shape) < 2:
            return False
        if op == "Gemm" and _opt(ins, 9) is not None:
            return False   # the fp32 Gemm kernels take no same-shape residual
        fnode, finfos = _float_problem(node, ins, outs, op)
        return spec.supports(fnode, finfos, _out_info(op, outs))

    def cost(node, ins, outs):
        fnode, finfos = _float_problem(node, ins, outs, op)
        return spec.cost(fnode, finfos, _out_info(op, outs))

    name = spec.name[:-3] + "_f32_mt" if spec.name.endswith("_mt") else spec.name + "_f32"

    @kernel(qop, name, supports=usable,
            cost=cost if spec.cost is not None else None, lsb_tolerance=1, pool=spec.pool,
            isa=spec.isa, priority=spec.priority, requires=spec.requires,
            family=spec.family, fallback=spec.fallback)
    def prepare(node, ins, outs):
        fnode, finfos = _float_problem(node, ins, outs, op)
        fout = _out_info(op, outs)
        frun = spec.prepare(fnode, finfos, fout)
        wf, bf = finfos[1].value, finfos[2].value
        x_zp = int(scalar(ins[2]))
        xf_h = scratch.array(finfos[0].shape, np.float32)
        has_z = _opt(ins, 9) is not None
        zf_h = scratch.array(outs[0].shape, np.float32) if has_z else None
        z_scale = np.float32(scalar(ins[10])) if has_z else None
        z_zp = int(scalar(ins[11])) if has_z else 0
        quantized = outs[0].dtype == "uint8"
        post = node.attrs.get("post_affine") or None
        if post:
            ps, pb = np.float32(post[0]), np.float32(post[1])
        yf_h = scratch.array(fout[0].shape, np.float32) if quantized else None
        inv = np.float32(1) / np.float32(scalar(ins[6])) if quantized else None
        y_zp = int(scalar(ins[7])) if quantized else 0
        dequantize, quantize = _rowops.dequantize_u8, _rowops.quantize_u8
        yshape = fout[0].shape

        def run(inputs, outputs):
            xf = xf_h.get()
            dequantize(inputs[0].reshape(-1), xf.reshape(-1), 1.0, x_zp)
            fin = [xf, wf, bf]
            if has_z:
                zf = zf_h.get()
                dequantize(inputs[9].reshape(-1), zf.reshape(-1), z_scale, z_zp)
                fin.append(zf)
            yf = yf_h.get() if quantized else None
            y = yf if quantized else outputs[0].reshape(yshape)
            frun(fin, [y])
            if post:
                np.multiply(y, ps, out=y)
                np.add(y, pb, out=y)
            if quantized:
                quantize(yf.reshape(-1), outputs[0].reshape(-1), inv, y_zp, False)
        return run


def register() -> None:
    """One candidate per fp32 Conv / Gemm kernel registered so far (import this module last)."""
    for op, qop in (("Conv", "QConv"), ("Gemm", "QGemm")):
        for spec in list(KERNELS.get(op, [])):
            if "numba" not in spec.requires:   # priced out of every plan anyway
                _wrap(op, qop, spec)


register()
