"""Shape rules of the quant family: the ONNX quantization ops and edgenn's fused QConv/QGemm.

The scheme (see the int8 spec): activations are uint8 per tensor with a zero point,
weights int8 symmetric per output channel (zero point 0), biases int32 at scale
x_scale * w_scale. ONNX ops keep their ONNX semantics (opset <= 21).

Internal ops (produced by graph/passes/qdq.py, never imported):

QConv(x u8 (N,C,H,W), x_scale f32, x_zp u8, w i8 (M,C/g,KH,KW) const, w_scale f32 () or (M,),
      w_zp i8 zeros () or (M,), [y_scale f32, y_zp u8], [B i32 (M,)],
      [z u8 (N,M,OH,OW), z_scale, z_zp], [D f32 (M,)])
      -> y u8 (N,M,OH,OW), or float32 without y_scale (D, x_scale / x_zp at run time: as
      QGemm's).
  attrs: Conv's geometry (kernel_shape, strides, pads, dilations, group) and the fused
  epilogue (activation, activation_params) as the fp32 Conv has them; post_affine [s, b]:
  v * s + b after the activation (float32, two roundings), before requantization.
QGemm(a u8 (..., K), a_scale, a_zp, b i8 (K, N) const, b_scale () or (N,), b_zp zeros,
      [y_scale, y_zp], [C i32 (N,)], [z u8 (..., N), z_scale, z_zp], [D f32 (N,)])
      -> y (..., N). D (float output only) is added after the scaling:
      y = act(float(acc) * (a_scale * b_scale) + D [+ residual]). a_scale / a_zp may be
      run-time scalars (DynamicQuantizeLinear's outputs: onnxruntime's quantize_dynamic).
QGather(codes const, scale f32 (V, B) const, indices int (any shape)) -> y f32
      (indices.shape + (dim,)): an embedding table of V rows stored quantized
      (compress/embeddings.py), rows dequantized only when gathered. attrs bits 8: codes
      int8 (V, B * block), one scale per block of `block` values of a row (block = the
      padded row for per-row scales); bits 4: codes uint8 (V, B * block / 2), two per
      byte, low nibble first, each in [-7, 7] (graph/codecs.py's qblock layout). `dim`
      <= B * block: the row length (the rest is padding). Indices as Gather's (axis 0).
"" marks an omitted optional input.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...registry import TensorInfo, shape_rule
from .nn import ACTIVATIONS, matmul_shape, window_geometry

OPS = ("QAdd", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
       "QLinearMatMul", "ConvInteger", "MatMulInteger", "QConv", "QGemm", "QGather")

# the integer types QuantizeLinear / DequantizeLinear handle; ONNX also has int4, uint4,
# float8 and (opset 23+) int2/uint2/float4: refused
QUANT_DTYPES = ("uint8", "int8", "uint16", "int16")
# DequantizeLinear also reads int32 (bias tensors)
DEQUANT_DTYPES = QUANT_DTYPES + ("int32",)
FLOAT_DTYPES = ("float32", "float16")
# fused activations of QConv / QGemm (QGemm also Gelu, on the float path)
QCONV_ACTIVATIONS = tuple(a for a in ACTIVATIONS if a != "Gelu")


def _where(node) -> str:
    return f"{node.op} node {node.name!r}"


def _check(node, ok: bool, msg: str) -> None:
    if not ok:
        raise GraphError(f"{_where(node)}: {msg}")


def _input(ins, i):
    return ins[i] if i < len(ins) else None


def _dtype(node, info, what: str, allowed) -> None:
    _check(node, info is not None, f"missing input {what}")
    _check(node, info.dtype in allowed,
           f"{what} has dtype {info.dtype}, expected {' or '.join(allowed)}")


def _scalar(node, info, what: str, allowed) -> None:
    _dtype(node, info, what, allowed)
    _check(node, int(np.prod(info.shape)) == 1 and len(info.shape) <= 1,
           f"{what} must be a scalar (per-tensor), got shape {info.shape}")


def _per_channel(node, info, what: str, allowed, channels: int) -> None:
    """A scalar or a (channels,) vector."""
    _dtype(node, info, what, allowed)
    _check(node, len(info.shape) == 0 or tuple(info.shape) in ((1,), (channels,)),
           f"{what} of shape {info.shape} must be a scalar or ({channels},)")


def refuse_dtype(node, dtype: str, what: str, allowed) -> None:
    """Low-bit and float8 types exist in ONNX but not here: an UnsupportedOpError."""
    if dtype not in allowed:
        raise UnsupportedOpError({node.op: [node.name]},
                                 f"{_where(node)}: {what} dtype {dtype} is not supported "
                                 f"(supported: {', '.join(allowed)}; int4/uint4/int2/uint2, "
                                 f"float8 and float4 are not)")


# -- fused internal ops -----------------------------------------------------------------------

def _check_epilogue(node, ins, y_shape, channels: int, allowed_acts) -> str:
    """Inputs 6.. (y_scale, y_zp, bias, z, z_scale, z_zp) and the activation -> out dtype."""
    act = node.attrs.get("activation", "") or ""
    params = list(node.attrs.get("activation_params", []) or [])
    _check(node, act in allowed_acts,
           f"unknown fused activation {act!r} (known: {sorted(a for a in allowed_acts if a)})")
    _check(node, len(params) in ACTIVATIONS[act],
           f"fused activation {act!r} takes {' or '.join(map(str, ACTIVATIONS[act]))} "
           f"params, got {params}")
    post = node.attrs.get("post_affine")
    _check(node, not post or len(post) == 2,
           f"post_affine must be [scale, bias], got {post}")
    y_scale, y_zp = _input(ins, 6), _input(ins, 7)
    _check(node, (y_scale is None) == (y_zp is None),
           "y_scale and y_zero_point must be given together")
    if y_scale is not None:
        _scalar(node, y_scale, "y_scale", ("float32",))
        _scalar(node, y_zp, "y_zero_point", ("uint8",))
    bias = _input(ins, 8)
    if bias is not None:
        _dtype(node, bias, "bias", ("int32",))
        _check(node, tuple(bias.shape) == (channels,),
               f"bias of shape {bias.shape} must be ({channels},)")
    z = _input(ins, 9)
    if z is not None:
        _dtype(node, z, "residual z", ("uint8",))
        _check(node, tuple(z.shape) == tuple(y_shape),
               f"residual z of shape {z.shape} must have the output shape {tuple(y_shape)}")
        _scalar(node, _input(ins, 10), "z_scale", ("float32",))
        _scalar(node, _input(ins, 11), "z_zero_point", ("uint8",))
    else:
        _check(node, _input(ins, 10) is None and _input(ins, 11) is None,
               "z_scale / z_zero_point given without a residual z")
    return "float32" if y_scale is None else "uint8"


def _check_weight_zero_point(node, info, what: str) -> None:
    if info.value is not None:
        _check(node, not np.any(np.asarray(info.value)),
               f"{what} must be all zeros (symmetric int8 weights)")


@shape_rule("QConv")
def qconv(node, ins):
    x, w = ins[0], _input(ins, 3)
    _dtype(node, x, "x", ("uint8",))
    _check(node, len(x.shape) == 4, f"x of shape {x.shape} must be (N, C, H, W)")
    _scalar(node, _input(ins, 1), "x_scale", ("float32",))
    _scalar(node, _input(ins, 2), "x_zero_point", ("uint8",))
    _dtype(node, w, "w", ("int8",))
    group = int(node.attrs.get("group", 1))
    n, c = x.shape[:2]
    _check(node, len(w.shape) == 4, f"w of shape {w.shape} must be (M, C/group, KH, KW)")
    m, cg = w.shape[:2]
    _check(node, group >= 1 and c % group == 0 and m % group == 0 and cg * group == c,
           f"input channels {c}, weight shape {w.shape} and group {group} do not agree")
    kernel = list(w.shape[2:])
    ks = node.attrs.get("kernel_shape")
    _check(node, ks is None or len(ks) == 0 or list(map(int, ks)) == kernel,
           f"kernel_shape {ks} != weight shape {w.shape}")
    _per_channel(node, _input(ins, 4), "w_scale", ("float32",), m)
    _per_channel(node, _input(ins, 5), "w_zero_point", ("int8",), m)
    _check_weight_zero_point(node, ins[5], "w_zero_point")
    out, *_ = window_geometry(node, node.attrs, x.shape[2:], kernel)
    y = (n, m, *out)
    dtype = _check_epilogue(node, ins, y, m, QCONV_ACTIVATIONS)
    _check_float_bias(node, ins, m, dtype)
    return [TensorInfo(dtype, y)]


@shape_rule("QGemm")
def qgemm(node, ins):
    a, b = ins[0], _input(ins, 3)
    _dtype(node, a, "a", ("uint8",))
    _check(node, len(a.shape) >= 1, "a must have rank >= 1")
    _scalar(node, _input(ins, 1), "a_scale", ("float32",))
    _scalar(node, _input(ins, 2), "a_zero_point", ("uint8",))
    _dtype(node, b, "b", ("int8",))
    _check(node, len(b.shape) == 2 and b.shape[0] == a.shape[-1],
           f"b of shape {b.shape} must be (K, N) with K = {a.shape[-1]} (a is {a.shape})")
    n = b.shape[1]
    _per_channel(node, _input(ins, 4), "b_scale", ("float32",), n)
    _per_channel(node, _input(ins, 5), "b_zero_point", ("int8",), n)
    _check_weight_zero_point(node, ins[5], "b_zero_point")
    y = (*a.shape[:-1], n)
    out = _check_epilogue(node, ins, y, n, tuple(ACTIVATIONS))
    _check_float_bias(node, ins, n, out)
    return [TensorInfo(out, y)]


def _check_float_bias(node, ins, channels: int, out_dtype: str) -> None:
    """Input 12, D: float32 (channels,), added after the scaling; float output only."""
    d = _input(ins, 12)
    if d is not None:
        _dtype(node, d, "float bias D", ("float32",))
        _check(node, tuple(d.shape) == (channels,),
               f"float bias D of shape {d.shape} must be ({channels},)")
        _check(node, out_dtype == "float32", "float bias D needs a float output (no y_scale)")


# -- ONNX ops ----------------------------------------------------------------------------------

def quant_axis(node, rank: int) -> int:
    axis = int(node.attrs.get("axis", 1))
    _check(node, -rank <= axis < max(rank, 1), f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def _check_scale_shape(node, x, scale, zp, what: str) -> None:
    """Per-tensor (scalar) or per-axis (1-D, one value per slice along `axis`)."""
    if int(node.attrs.get("block_size", 0) or 0):
        raise UnsupportedOpError({node.op: [node.name]},
                                 f"{_where(node)}: blocked quantization (block_size) is not "
                                 f"supported")
    if len(scale.shape) == 0 or tuple(scale.shape) == (1,):
        pass
    else:
        _check(node, len(scale.shape) == 1,
               f"{what} of shape {scale.shape} must be a scalar or 1-D (per axis)")
        axis = quant_axis(node, len(x.shape))
        _check(node, len(x.shape) > 0 and scale.shape[0] == x.shape[axis],
               f"{what} of shape {scale.shape} does not match axis {axis} of input {x.shape}")
    if zp is not None:
        same = tuple(zp.shape) == tuple(scale.shape) or \
            (int(np.prod(zp.shape)) == 1 and int(np.prod(scale.shape)) == 1)
        _check(node, same and len(zp.shape) <= 1,
               f"zero point of shape {zp.shape} must have the scale's shape {scale.shape}")


@shape_rule("QuantizeLinear")
def quantize_linear(node, ins):
    x, scale, zp = ins[0], ins[1], _input(ins, 2)
    _dtype(node, x, "x", FLOAT_DTYPES + ("int32",))
    _dtype(node, scale, "y_scale", FLOAT_DTYPES + ("int32",))
    out = zp.dtype if zp is not None else node.attrs.get("output_dtype", "uint8")
    refuse_dtype(node, out, "output", QUANT_DTYPES)
    _check_scale_shape(node, x, scale, zp, "y_scale")
    return [TensorInfo(out, tuple(x.shape))]


@shape_rule("DequantizeLinear")
def dequantize_linear(node, ins):
    x, scale, zp = ins[0], ins[1], _input(ins, 2)
    refuse_dtype(node, x.dtype, "input", DEQUANT_DTYPES)
    _dtype(node, scale, "x_scale", FLOAT_DTYPES)
    if zp is not None:
        _check(node, zp.dtype == x.dtype,
               f"zero point dtype {zp.dtype} differs from input dtype {x.dtype}")
    _check_scale_shape(node, x, scale, zp, "x_scale")
    return [TensorInfo(scale.dtype, tuple(x.shape))]


@shape_rule("DynamicQuantizeLinear")
def dynamic_quantize_linear(node, ins):
    x = ins[0]
    _dtype(node, x, "x", ("float32",))
    return [TensorInfo("uint8", tuple(x.shape)), TensorInfo("float32", ()),
            TensorInfo("uint8", ())]


INT8_TYPES = ("uint8", "int8")


def _zero_point(node, info, what: str, dtype: str, sizes: tuple[int, ...]) -> None:
    """An optional zero point of `dtype`: a scalar or a 1-D vector of one of `sizes`."""
    if info is None:
        return
    _check(node, info.dtype == dtype, f"{what} has dtype {info.dtype}, expected {dtype}")
    ok = len(info.shape) == 0 or (len(info.shape) == 1 and info.shape[0] in (1, *sizes))
    _check(node, ok, f"{what} of shape {info.shape} must be a scalar or 1-D of size "
                     f"{' or '.join(map(str, sizes))}")


def _conv_out(node, x, w) -> tuple[int, ...]:
    _check(node, len(x.shape) >= 3 and len(w.shape) == len(x.shape),
           f"x {x.shape} and w {w.shape} must be (N, C, spatial...) and (M, C/group, k...)")
    group = int(node.attrs.get("group", 1))
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    _check(node, group >= 1 and c % group == 0 and m % group == 0 and cg * group == c,
           f"input channels {c}, weight shape {w.shape} and group {group} do not agree")
    ks = node.attrs.get("kernel_shape")
    _check(node, ks is None or len(ks) == 0 or list(map(int, ks)) == list(w.shape[2:]),
           f"kernel_shape {ks} != weight shape {w.shape}")
    out, *_ = window_geometry(node, node.attrs, x.shape[2:], list(w.shape[2:]))
    return (n, m, *out)


@shape_rule("ConvInteger")
def conv_integer(node, ins):
    x, w = ins[0], ins[1]
    _dtype(node, x, "x", INT8_TYPES)
    _dtype(node, w, "w", INT8_TYPES)
    y = _conv_out(node, x, w)
    _zero_point(node, _input(ins, 2), "x_zero_point", x.dtype, ())
    _zero_point(node, _input(ins, 3), "w_zero_point", w.dtype, (w.shape[0],))
    return [TensorInfo("int32", y)]


@shape_rule("MatMulInteger")
def matmul_integer(node, ins):
    a, b = ins[0], ins[1]
    _dtype(node, a, "A", INT8_TYPES)
    _dtype(node, b, "B", INT8_TYPES)
    y = matmul_shape(node, a.shape, b.shape)
    rows = a.shape[-2] if len(a.shape) > 1 else 1
    _zero_point(node, _input(ins, 2), "a_zero_point", a.dtype, (rows,))
    _zero_point(node, _input(ins, 3), "b_zero_point", b.dtype, (b.shape[-1],))
    return [TensorInfo("int32", y)]


def _linear_scale(node, info, what: str, sizes: tuple[int, ...] = ()) -> None:
    _check(node, info is not None, f"missing input {what}")
    _check(node, info.dtype in FLOAT_DTYPES,
           f"{what} has dtype {info.dtype}, expected {' or '.join(FLOAT_DTYPES)}")
    ok = len(info.shape) == 0 or (len(info.shape) == 1 and info.shape[0] in (1, *sizes))
    _check(node, ok, f"{what} of shape {info.shape} must be a scalar"
                     + (f" or 1-D of size {sizes[0]}" if sizes else ""))


def _linear_output(node, ins):
    """QLinearConv / QLinearMatMul inputs 6, 7 (y_scale, y_zero_point) -> the y_zp info."""
    _linear_scale(node, _input(ins, 6), "y_scale")
    y_zp = _input(ins, 7)
    _check(node, y_zp is not None and y_zp.dtype in INT8_TYPES,
           "y_zero_point (uint8 or int8) is required")
    _zero_point(node, y_zp, "y_zero_point", y_zp.dtype, ())
    return y_zp


@shape_rule("QLinearConv")
def qlinear_conv(node, ins):
    x, w = ins[0], _input(ins, 3)
    _dtype(node, x, "x", INT8_TYPES)
    _dtype(node, w, "w", INT8_TYPES)
    y = _conv_out(node, x, w)
    m = w.shape[0]
    _linear_scale(node, ins[1], "x_scale")
    _zero_point(node, ins[2], "x_zero_point", x.dtype, ())
    _linear_scale(node, ins[4], "w_scale", (m,))
    _zero_point(node, ins[5], "w_zero_point", w.dtype, (m,))
    y_zp = _linear_output(node, ins)
    bias = _input(ins, 8)
    if bias is not None:
        _dtype(node, bias, "B", ("int32",))
        _check(node, tuple(bias.shape) == (m,), f"B of shape {bias.shape} must be ({m},)")
    return [TensorInfo(y_zp.dtype, y)]


@shape_rule("QLinearMatMul")
def qlinear_matmul(node, ins):
    a, b = ins[0], _input(ins, 3)
    _dtype(node, a, "a", INT8_TYPES)
    _dtype(node, b, "b", INT8_TYPES)
    y = matmul_shape(node, a.shape, b.shape)
    n = b.shape[-1]
    _linear_scale(node, ins[1], "a_scale")
    _zero_point(node, ins[2], "a_zero_point", a.dtype, ())
    _linear_scale(node, ins[4], "b_scale", (n,))
    _zero_point(node, ins[5], "b_zero_point", b.dtype, (n,))
    y_zp = _linear_output(node, ins)
    return [TensorInfo(y_zp.dtype, y)]



@shape_rule("QAdd")
def qadd(node, ins):
    """QAdd(a u8, a_scale, a_zp, b u8, b_scale, b_zp, y_scale, y_zp) -> y u8, a and b of one
    shape; attrs activation "" | "Relu". The QDQ arithmetic of Q([Relu](DQ(a) + DQ(b))),
    op for op (graph/passes/qdq.py makes it)."""
    a, b = ins[0], _input(ins, 3)
    _dtype(node, a, "a", ("uint8",))
    _dtype(node, b, "b", ("uint8",))
    _check(node, tuple(a.shape) == tuple(b.shape),
           f"a {a.shape} and b {b.shape} must have one shape (no broadcasting)")
    for i, what, dtype in ((1, "a_scale", "float32"), (2, "a_zero_point", "uint8"),
                           (4, "b_scale", "float32"), (5, "b_zero_point", "uint8"),
                           (6, "y_scale", "float32"), (7, "y_zero_point", "uint8")):
        _scalar(node, _input(ins, i), what, (dtype,))
    act = node.attrs.get("activation", "") or ""
    _check(node, act in ("", "Relu"), f"activation {act!r} must be '' or 'Relu'")
    return [TensorInfo("uint8", tuple(a.shape))]


@shape_rule("QGather")
def qgather_shape(node, ins):
    codes, scale, idx = (_input(ins, i) for i in range(3))
    bits, block, dim = (int(node.attrs.get(k, 0)) for k in ("bits", "block", "dim"))
    _check(node, bits in (8, 4) and block > 0 and dim > 0, f"bad bits / block / dim "
           f"{bits} / {block} / {dim}")
    _dtype(node, codes, "codes", ("int8",) if bits == 8 else ("uint8",))
    _dtype(node, scale, "scale", ("float32", "float16"))      # float16: int4 tables
    _dtype(node, idx, "indices", ("int64", "int32"))
    _check(node, len(codes.shape) == 2 and len(scale.shape) == 2, "codes and scale are 2-D")
    rows, blocks = scale.shape
    width = blocks * block
    _check(node, tuple(codes.shape) == (rows, width if bits == 8 else width // 2)
           and dim <= width and (bits == 8 or block % 2 == 0),
           f"codes {codes.shape} do not match scale {scale.shape}, block {block}, dim {dim}")
    return [TensorInfo("float32", tuple(idx.shape) + (dim,))]


CONST_INPUTS: dict = {}
