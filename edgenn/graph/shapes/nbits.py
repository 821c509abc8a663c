"""Shape rules of the nbits family: weights stored as 2- to 8-bit block-quantized codes
(onnxruntime's MatMulNBits and GatherBlockQuantized, as decoder exports write them), and
the code layouts they share (unpacking is plain NumPy, used by the reference kernels and
by graph/passes/nbits.py).

MatMulNBits(A f32|f16 (..., K), B u8 (N, k_blocks, blob), scales (N * k_blocks) or
            (N, k_blocks), [zero_points], [g_idx i32 (K) or (k_blocks * block_size)],
            [bias (N,)]) -> Y (..., N), A's dtype (computed in float32)
  attrs K, N, bits (2, 4, 8), block_size (a power of 2, >= 16), accuracy_level (0-4: how
  far onnxruntime may round A; edgenn's reference computes in float32 whatever it is).
  k_blocks = ceil(K / block_size), blob = block_size * bits / 8. Row n of B holds the K
  codes of output n along K (padded to k_blocks * block_size), 8 / bits codes a byte, the
  first in the lowest bits. zero_points: uint8 codes packed the same way,
  (N, ceil(k_blocks * bits / 8)) or flat; or float (scales' dtype and shape), in code
  units. Absent: 2^(bits-1). W[n, k] = (code[n, k] - zp[n, b]) * scale[n, b] with
  b = g_idx[k] (act-order) or k // block_size; Y = A @ W^T + bias.

GatherBlockQuantized(data, indices int32|int64, scales f32|f16, [zero_points]) -> y
      (data.shape[:gather_axis] + indices.shape + data.shape[gather_axis+1:], unpacked),
      scales' dtype
  attrs bits, block_size (a power of 2, >= 16), gather_axis, quantize_axis. Two forms:
  - data uint8 (onnxruntime's): gather_axis 0, quantize_axis the last axis, bits 2, 4
    or 8; below 8 bits the codes are packed along the last axis as in MatMulNBits (so the
    unpacked last dim is data's * 8 / bits). zero_points uint8 packed the same way along
    the last axis; absent: 2^(bits-1).
  - data int8: one code per element, as ONNX int4 / uint4 tensors hold them (the converter
    widens those), any gather / quantize axes; zero_points int8 of scales' shape; absent: 0.
  scales has data's (unpacked) shape but ceil(dim / block_size) along quantize_axis.
  y = (code - zp) * scale of the code's block. Indices count from the end when negative;
  out of range is an error (as Gather here).
"" marks an omitted optional input.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError, UnsupportedOpError
from ...registry import TensorInfo, shape_rule
from .quant import _check, _dtype, _input, _where  # noqa: F401 - the quant family's checks

OPS = ("MatMulNBits", "GatherBlockQuantized")
CONST_INPUTS: dict = {}

MATMUL_BITS = (2, 4, 8)
GATHER_BITS = (2, 4, 8)
FLOATS = ("float32", "float16")


# -- code layouts -----------------------------------------------------------------------------

def unpack_codes(packed: np.ndarray, bits: int, count: int | None = None) -> np.ndarray:
    """uint8 (..., n) with 8 / bits codes a byte, the first in the lowest bits ->
    uint8 (..., n * 8 / bits), cut to `count` codes along the last axis when given."""
    packed = np.asarray(packed, np.uint8)
    if bits == 8:
        out = packed
    else:
        per, mask = 8 // bits, (1 << bits) - 1
        out = np.empty(packed.shape + (per,), np.uint8)
        for i in range(per):
            np.bitwise_and(np.right_shift(packed, bits * i), mask, out=out[..., i])
        out = out.reshape(packed.shape[:-1] + (packed.shape[-1] * per,))
    return out if count is None else out[..., :count]


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of unpack_codes: uint8 codes (..., n), n a multiple of 8 / bits, each
    < 2^bits -> uint8 (..., n * bits / 8)."""
    codes = np.asarray(codes, np.uint8)
    if bits == 8:
        return codes.copy()
    per = 8 // bits
    c = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // per, per))
    out = np.zeros(c.shape[:-1], np.uint8)
    for i in range(per):
        out |= np.left_shift(c[..., i], bits * i).astype(np.uint8)
    return out


def matmul_zero_points(zero_points, n: int, k_blocks: int, bits: int) -> np.ndarray:
    """MatMulNBits' zero points -> float32 (N, k_blocks) in code units (default
    2^(bits-1))."""
    if zero_points is None:
        return np.full((n, k_blocks), float(1 << (bits - 1)), np.float32)
    zp = np.asarray(zero_points)
    if zp.dtype == np.uint8:
        return unpack_codes(zp.reshape(n, -1), bits, k_blocks).astype(np.float32)
    return zp.reshape(n, k_blocks).astype(np.float32)


# -- checks -----------------------------------------------------------------------------------

def _shape_in(node, info, what: str, shapes) -> None:
    _check(node, tuple(info.shape) in [tuple(s) for s in shapes],
           f"{what} has shape {tuple(info.shape)}, expected "
           f"{' or '.join(str(tuple(s)) for s in shapes)}")


def _int_attr(node, key: str, default=None) -> int:
    value = node.attrs.get(key, default)
    _check(node, value is not None, f"attribute {key} is required")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise GraphError(f"{_where(node)}: attribute {key}={value!r} is not an integer") \
            from None


def check_block_size(node, block: int) -> None:
    _check(node, block >= 16 and block & (block - 1) == 0,
           f"block_size {block} must be a power of 2 and at least 16")


def refuse_bits(node, bits: int, allowed) -> None:
    """bits outside what onnxruntime defines (e.g. 3): an UnsupportedOpError naming the
    node, so the importer lists it with the other gaps."""
    if bits not in allowed:
        raise UnsupportedOpError({f"{node.op} (bits {bits})": [node.name]},
                                 f"{_where(node)}: bits={bits} is not supported (supported: "
                                 f"{', '.join(map(str, allowed))})")


def matmul_geometry(attrs) -> tuple[int, int, int, int, int, int]:
    """-> (K, N, bits, block_size, k_blocks, blob_size) of a MatMulNBits node's attrs."""
    k, n, bits, block = (int(attrs[a]) for a in ("K", "N", "bits", "block_size"))
    k_blocks = (k + block - 1) // block
    return k, n, bits, block, k_blocks, block * bits // 8


# -- MatMulNBits ------------------------------------------------------------------------------

@shape_rule("MatMulNBits")
def matmul_nbits_shape(node, ins):
    k, n = _int_attr(node, "K"), _int_attr(node, "N")
    bits, block = _int_attr(node, "bits", 4), _int_attr(node, "block_size")
    refuse_bits(node, bits, MATMUL_BITS)
    check_block_size(node, block)
    level = _int_attr(node, "accuracy_level", 0)
    _check(node, 0 <= level <= 4, f"accuracy_level {level} must be 0 to 4")
    _check(node, k > 0 and n > 0, f"K={k} and N={n} must be positive")
    k_blocks, blob = (k + block - 1) // block, block * bits // 8
    a, b, scales = (_input(ins, i) for i in range(3))
    _dtype(node, a, "A", FLOATS)
    _check(node, len(a.shape) >= 1 and a.shape[-1] == k,
           f"A of shape {tuple(a.shape)} must end in K={k}")
    _dtype(node, b, "B", ("uint8",))
    _shape_in(node, b, "B (N, k_blocks, block_size * bits / 8)", [(n, k_blocks, blob)])
    _dtype(node, scales, "scales", FLOATS)
    _shape_in(node, scales, "scales", [(n * k_blocks,), (n, k_blocks)])
    zp = _input(ins, 3)
    if zp is not None:
        if zp.dtype == "uint8":
            zb = (k_blocks * bits + 7) // 8
            _shape_in(node, zp, "uint8 zero_points", [(n * zb,), (n, zb)])
        else:
            _check(node, zp.dtype == scales.dtype, f"float zero_points have dtype "
                   f"{zp.dtype}, expected uint8 or the scales' {scales.dtype}")
            _shape_in(node, zp, "float zero_points", [(n * k_blocks,), (n, k_blocks)])
    g_idx = _input(ins, 4)
    if g_idx is not None:
        _dtype(node, g_idx, "g_idx", ("int32",))
        _shape_in(node, g_idx, "g_idx", [(k,), (k_blocks * block,)])
        if g_idx.value is not None and g_idx.value.size:
            v = np.asarray(g_idx.value)
            _check(node, int(v.min()) >= 0 and int(v.max()) < k_blocks,
                   f"g_idx values must be in [0, {k_blocks}), got {int(v.min())}.."
                   f"{int(v.max())}")
    bias = _input(ins, 5)
    if bias is not None:
        _dtype(node, bias, "bias", FLOATS)
        _shape_in(node, bias, "bias", [(n,)])
    return [TensorInfo(a.dtype, tuple(a.shape[:-1]) + (n,))]


# -- GatherBlockQuantized ---------------------------------------------------------------------

def gather_axes(node, rank: int) -> tuple[int, int]:
    """(gather_axis, quantize_axis) of a GatherBlockQuantized node, made non-negative."""
    axes = []
    for key, default in (("gather_axis", 0), ("quantize_axis", 1)):
        a = _int_attr(node, key, default)
        _check(node, -rank <= a < rank, f"{key} {a} is out of range for data of rank {rank}")
        axes.append(a % rank)
    return axes[0], axes[1]


@shape_rule("GatherBlockQuantized")
def gather_block_quantized_shape(node, ins):
    data, idx, scales = (_input(ins, i) for i in range(3))
    bits, block = _int_attr(node, "bits", 4), _int_attr(node, "block_size", 128)
    check_block_size(node, block)
    _dtype(node, data, "data", ("uint8", "int8"))
    _dtype(node, idx, "indices", ("int32", "int64"))
    _dtype(node, scales, "scales", FLOATS)
    rank = len(data.shape)
    _check(node, rank >= 1, "data must have at least one axis")
    g, q = gather_axes(node, rank)
    shape = list(data.shape)
    if data.dtype == "uint8":
        refuse_bits(node, bits, GATHER_BITS)
        _check(node, g == 0 and q == rank - 1 and g != q, f"uint8 data needs gather_axis 0 "
               f"and quantize_axis the last axis (different axes), got {g} and {q}")
        shape[-1] *= 8 // bits
    else:
        _check(node, bits == 4, f"int8 data (int4 / uint4 codes) needs bits 4, got {bits}")
    blocks = (shape[q] + block - 1) // block
    want = tuple(blocks if i == q else d for i, d in enumerate(shape))
    _shape_in(node, scales, "scales", [want])
    zp = _input(ins, 3)
    if zp is not None:
        _dtype(node, zp, "zero_points", (data.dtype,))
        if data.dtype == "uint8":
            per = 8 // bits
            zwant = want[:-1] + ((want[-1] + per - 1) // per,)
        else:
            zwant = want
        _shape_in(node, zp, "zero_points", [zwant])
    out = tuple(shape[:g]) + tuple(idx.shape) + tuple(shape[g + 1:])
    return [TensorInfo(scales.dtype, out)]
