"""Reference kernels of the quant family: the ONNX quantization ops and QConv / QGemm.

Integer products are exact: operands are 8-bit (|x - zp| <= 255, |w| <= 128), so every
product and every partial sum of a dot product over K < 2**30 terms is an integer below
2**53 and float64 BLAS computes it exactly; the result is converted to int32/int64.

The requantization epilogue of QConv / QGemm (`requantize`) follows the int8 spec step by
step in float32 numpy (one rounding per operation, in the spec's order), so C kernels
compiled with -ffp-contract=off agree with it bit for bit.

Plain functions for kernel tests:
  qconv_reference(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias, z, z_scale,
                  z_zp, fbias, **attrs) -> y          (attrs: strides, pads, dilations, group,
                                                activation, activation_params, ...)
  qgemm_reference(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp, bias, z, z_scale,
                  z_zp, fbias, **attrs) -> y
  conv_accumulate / gemm_accumulate -> int32 accumulators;  requantize(acc, ...) -> y
"""
from __future__ import annotations

import numpy as np

from ...registry import reference
from . import nn

F32 = np.float32


def _f32(v) -> np.float32:
    """A scalar (shape () or (1,)) as a numpy float32."""
    return F32(np.asarray(v).reshape(-1)[0])


def _channels(v, axis: int, ndim: int, dtype) -> np.ndarray:
    """A per-tensor scalar or per-channel vector shaped to broadcast along `axis`."""
    v = np.asarray(v, dtype=dtype).reshape(-1)
    shape = [1] * ndim
    if v.size > 1:
        shape[axis] = v.size
    return v.reshape(shape)


def _int32(acc_exact: np.ndarray) -> np.ndarray:
    """float64 holding exact integers -> int32 (wrapping, as 32-bit accumulators do)."""
    return acc_exact.astype(np.int64).astype(np.int32)


# -- integer accumulation --------------------------------------------------------------------

def conv_accumulate(x, x_zp, w, w_zp=None, bias=None, attrs=None) -> np.ndarray:
    """acc[n, m, oh, ow] = sum (x - x_zp) * (w - w_zp) + bias[m], exact, int32.

    x (N, C, H, W) u8/i8; w (M, C/group, KH, KW) u8/i8; x_zp scalar; w_zp scalar or (M,);
    padding reads x_zp (a zero after the subtraction). attrs: Conv's geometry.
    """
    geometry = {k: v for k, v in (attrs or {}).items()
                if k in ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape")}
    xs = x.astype(np.float64) - float(np.asarray(x_zp).reshape(-1)[0] if x_zp is not None
                                      and np.asarray(x_zp).size else 0)
    ws = w.astype(np.float64)
    if w_zp is not None and np.asarray(w_zp).size:
        ws = ws - _channels(w_zp, 0, w.ndim, np.float64)
    acc = nn.conv(geometry, [xs, ws])[0]
    if bias is not None:
        acc = acc + _channels(bias, 1, acc.ndim, np.float64)
    return _int32(acc)


def gemm_accumulate(a, a_zp, b, b_zp=None, bias=None) -> np.ndarray:
    """acc[..., n] = sum_k (a[..., k] - a_zp) * (b[k, n] - b_zp[n]) + bias[n], exact, int32.
    b may also be batched (..., K, N) (MatMul broadcasting)."""
    az = a.astype(np.float64) - float(np.asarray(a_zp).reshape(-1)[0] if a_zp is not None
                                      and np.asarray(a_zp).size else 0)
    bz = b.astype(np.float64)
    if b_zp is not None and np.asarray(b_zp).size:
        bz = bz - _channels(b_zp, b.ndim - 1, b.ndim, np.float64)
    acc = np.matmul(az, bz)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.float64).reshape(-1)
    return _int32(acc)


# -- requantization epilogue (the int8 spec, step by step) -------------------------------------

INTEGER_PATH_ACTIVATIONS = ("", "Relu", "Clip")


def integer_path_bounds(act: str, params, y_scale, y_zp) -> tuple[np.float32, np.float32]:
    """The uint8 clamp [lo, hi] that applies Relu / Clip(a, b) after quantization (float32:
    quantization is monotone, so clamping there equals activating first)."""
    ys, zp = F32(y_scale), F32(y_zp)
    lo, hi = F32(0), F32(255)
    if act == "Relu":
        lo = max(lo, zp)
    elif act == "Clip":
        a, b = (F32(p) for p in params)
        lo = max(lo, np.rint(a / ys) + zp)
        hi = min(hi, np.rint(b / ys) + zp)
    return lo, hi


def requantize(acc, axis: int, x_scale, w_scale, y_scale=None, y_zp=None, z=None,
               z_scale=None, z_zp=None, activation: str = "", activation_params=(),
               fbias=None, post_affine=None):
    """int32 accumulators (channel axis `axis`) -> uint8 y (y_scale given) or float32 y.
    fbias: a float32 per-channel bias added right after the scaling; post_affine (s, b):
    v * s + b after the activation (float path only, both)."""
    act = activation or ""
    accf = acc.astype(np.int32).astype(F32)
    ws = _channels(w_scale, axis, acc.ndim, F32)
    xs = _f32(x_scale)
    if y_scale is not None and z is None and act in INTEGER_PATH_ACTIVATIONS \
            and not post_affine:
        ys, zp = _f32(y_scale), F32(np.asarray(y_zp).reshape(-1)[0])
        mult = xs * ws / ys                                   # float32, per channel
        q = np.rint(accf * mult) + zp
        lo, hi = integer_path_bounds(act, activation_params, ys, zp)
        return np.clip(q, lo, hi).astype(np.uint8)
    v = accf * (xs * ws)
    if fbias is not None:
        v = v + _channels(fbias, axis, acc.ndim, F32)
    if z is not None:
        v = v + (z.astype(np.int32) - np.int32(np.asarray(z_zp).reshape(-1)[0])).astype(F32) \
            * _f32(z_scale)
    v = nn.apply_activation(v.astype(F32, copy=False), act, activation_params)
    if post_affine:
        v = v * F32(post_affine[0])
        v = v + F32(post_affine[1])
    if y_scale is None:
        return v.astype(F32, copy=False)
    inv = F32(1) / _f32(y_scale)
    q = np.rint(v * inv) + F32(np.asarray(y_zp).reshape(-1)[0])
    return np.clip(q, F32(0), F32(255)).astype(np.uint8)


# -- QConv / QGemm ------------------------------------------------------------------------------

def qconv_reference(x, x_scale, x_zp, w, w_scale, w_zp=None, y_scale=None, y_zp=None,
                    bias=None, z=None, z_scale=None, z_zp=None, fbias=None,
                    **attrs) -> np.ndarray:
    """QConv (see graph/shapes/quant.py and the int8 spec) on plain arrays."""
    acc = conv_accumulate(x, x_zp, w, None, bias, attrs)   # w_zp is zero by definition
    return requantize(acc, 1, x_scale, w_scale, y_scale, y_zp, z, z_scale, z_zp,
                      attrs.get("activation", ""), attrs.get("activation_params", ()), fbias,
                      attrs.get("post_affine"))


def qgemm_reference(a, a_scale, a_zp, b, b_scale, b_zp=None, y_scale=None, y_zp=None,
                    bias=None, z=None, z_scale=None, z_zp=None, fbias=None,
                    **attrs) -> np.ndarray:
    """QGemm on plain arrays: a (..., K) u8, b (K, N) i8 -> y (..., N)."""
    acc = gemm_accumulate(a, a_zp, b, None, bias)
    return requantize(acc, acc.ndim - 1, a_scale, b_scale, y_scale, y_zp, z, z_scale, z_zp,
                      attrs.get("activation", ""), attrs.get("activation_params", ()), fbias,
                      attrs.get("post_affine"))


def _padded(inputs, n: int) -> list:
    return list(inputs) + [None] * (n - len(inputs))


@reference("QConv")
def qconv(attrs, inputs):
    return [qconv_reference(*_padded(inputs, 13), **attrs)]


@reference("QGemm")
def qgemm(attrs, inputs):
    return [qgemm_reference(*_padded(inputs, 13), **attrs)]


# -- ONNX QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear ------------------------------

def _along(v, axis: int, ndim: int, dtype=None) -> np.ndarray:
    """A scale / zero point: scalar as is; 1-D shaped to broadcast along `axis`."""
    v = np.asarray(v) if dtype is None else np.asarray(v, dtype=dtype)
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis] = v.size
    return v.reshape(shape)


def quantize_values(x, scale, zp, axis: int = 1, dtype="uint8") -> np.ndarray:
    """ONNX QuantizeLinear: saturate(rint(x / scale) + zp), rint = round half to even.
    The division is one float32 operation (float16 inputs are widened to float32)."""
    dtype = np.dtype(zp.dtype if zp is not None else dtype)
    info = np.iinfo(dtype)
    xf = x.astype(F32, copy=False)
    q = np.rint(xf / _along(scale, axis % max(x.ndim, 1), x.ndim, F32))
    if zp is not None:
        q = q + _along(zp, axis % max(x.ndim, 1), x.ndim, F32)
    return np.clip(q, F32(info.min), F32(info.max)).astype(dtype)


def dequantize_values(x, scale, zp=None, axis: int = 1) -> np.ndarray:
    """ONNX DequantizeLinear: (x - zp) * scale; the difference is exact (int64), converted
    to float32, times the float32 scale; a float16 scale gives a float16 result."""
    scale = np.asarray(scale)
    ax = axis % max(x.ndim, 1)
    d = x.astype(np.int64)
    if zp is not None:
        d = d - _along(zp, ax, x.ndim, np.int64)
    y = d.astype(F32) * _along(scale, ax, x.ndim, F32)
    return y.astype(scale.dtype, copy=False)


@reference("QuantizeLinear")
def quantize_linear(attrs, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    return [quantize_values(x, scale, zp, int(attrs.get("axis", 1)),
                            attrs.get("output_dtype", "uint8"))]


@reference("DequantizeLinear")
def dequantize_linear(attrs, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    return [dequantize_values(x, scale, zp, int(attrs.get("axis", 1)))]


def dynamic_range_params(x: np.ndarray) -> tuple[np.float32, np.float32]:
    """DynamicQuantizeLinear's uint8 parameters over the range [min(x, 0), max(x, 0)]:
    scale = range / 255 (1/255 for an all-zero x), zero point = rint(clip(-min / scale,
    0, 255)); float32 arithmetic, one rounding per operation."""
    hi = F32(max(F32(0), x.max())) if x.size else F32(0)
    lo = F32(min(F32(0), x.min())) if x.size else F32(0)
    scale = (F32(1) if hi == lo else hi - lo) / F32(255)
    return scale, np.rint(np.clip(F32(0) - lo / scale, F32(0), F32(255)))


@reference("DynamicQuantizeLinear")
def dynamic_quantize_linear(attrs, inputs):
    """y = saturate(rint(x / scale) + zero point), uint8 (see dynamic_range_params)."""
    x = inputs[0].astype(F32, copy=False)
    scale, zp = dynamic_range_params(x)
    y = np.clip(np.rint(x / scale) + zp, F32(0), F32(255)).astype(np.uint8)
    return [y, np.array(scale, dtype=F32), np.array(zp, dtype=np.uint8)]


# -- ONNX integer products -----------------------------------------------------------------------

def _opt(inputs, i):
    return inputs[i] if len(inputs) > i else None


@reference("ConvInteger")
def conv_integer(attrs, inputs):
    x, w = inputs[0], inputs[1]
    return [conv_accumulate(x, _opt(inputs, 2), w, _opt(inputs, 3), None, attrs)]


@reference("MatMulInteger")
def matmul_integer(attrs, inputs):
    a, b = inputs[0], inputs[1]
    a_zp, b_zp = _opt(inputs, 2), _opt(inputs, 3)
    az = a.astype(np.float64)
    if a_zp is not None:
        a_zp = np.asarray(a_zp, dtype=np.float64).reshape(-1)
        # scalar, or per row of a (..., M, K): one value per M
        az = az - (a_zp[0] if a_zp.size == 1 else a_zp.reshape(-1, 1))
    bz = b.astype(np.float64)
    if b_zp is not None:
        bz = bz - _channels(b_zp, b.ndim - 1, b.ndim, np.float64)
    return [_int32(np.matmul(az, bz))]


def _requantize_linear(acc, axis: int, x_scale, w_scale, y_scale, y_zp) -> np.ndarray:
    """QLinearConv / QLinearMatMul output: saturate(rint(acc * (x_s * w_s / y_s)) + y_zp),
    the multiplier and the product in float32 (as onnxruntime's MLAS), any 8-bit type."""
    dtype = np.dtype(y_zp.dtype)
    info = np.iinfo(dtype)
    mult = _f32(x_scale) * _channels(w_scale, axis, acc.ndim, F32) / _f32(y_scale)
    q = np.rint(acc.astype(F32) * mult) + F32(np.asarray(y_zp).reshape(-1)[0])
    return np.clip(q, F32(info.min), F32(info.max)).astype(dtype)


@reference("QLinearConv")
def qlinear_conv(attrs, inputs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = _padded(inputs, 8)[:8]
    acc = conv_accumulate(x, x_zp, w, w_zp, _opt(inputs, 8), attrs)
    return [_requantize_linear(acc, 1, x_scale, w_scale, y_scale, y_zp)]


@reference("QLinearMatMul")
def qlinear_matmul(attrs, inputs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = _padded(inputs, 8)[:8]
    acc = gemm_accumulate(a, a_zp, b, b_zp)
    return [_requantize_linear(acc, acc.ndim - 1, a_scale, b_scale, y_scale, y_zp)
            .reshape(acc.shape)]


@reference("QAdd")
def qadd(attrs, inputs):
    """Q([Relu](DQ(a) + DQ(b))): each step the float32 operation the QDQ graph does."""
    a, sa, za, b, sb, zb, sy, zy = inputs[:8]
    v = dequantize_values(a, sa, za) + dequantize_values(b, sb, zb)
    if attrs.get("activation", "") == "Relu":
        v = np.maximum(v, F32(0))
    return [quantize_values(v, sy, zy)]


def qgather_rows(codes: np.ndarray, scale: np.ndarray, rows: np.ndarray, bits: int,
                 block: int, dim: int) -> np.ndarray:
    """The float32 rows `rows` (1-D, in range) of a QGather table -> (len(rows), dim)."""
    c = codes[rows]
    if bits == 4:    # two codes per byte, low nibble first, in two's complement
        q = np.empty((len(rows), c.shape[1] * 2), np.int8)
        q[:, 0::2] = (c & 0x0F).astype(np.int8)
        q[:, 1::2] = (c >> 4).astype(np.int8)
        c = np.where(q > 7, q - 16, q)
    blocks = scale.shape[1]
    w = c.reshape(len(rows), blocks, block).astype(np.float32) * scale[rows][:, :, None]
    return w.reshape(len(rows), blocks * block)[:, :dim]


@reference("QGather")
def qgather(attrs, inputs):
    from ...graph.shapes.tensor_geometry import _wrap_indices
    codes, scale, idx = inputs
    rows = _wrap_indices(idx, codes.shape[0], "QGather").reshape(-1)
    y = qgather_rows(codes, scale, rows, int(attrs["bits"]), int(attrs["block"]),
                     int(attrs["dim"]))
    return [y.reshape(tuple(np.shape(idx)) + (int(attrs["dim"]),))]
