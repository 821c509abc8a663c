"""The "qblock" weight codec of .enn files: weight-only int8 / int4 codes with one scale
per block of one output channel, decoded to float32 at load (compress/weights.py fits the
scales and marks which weights to code; this file is only the format).

Blocks run along the reduction axes of one output channel: int8 uses one block per channel
(per-channel scales), int4 blocks of 32 values (as llama.cpp's q4 formats). In the file
such a tensor has codec "qblock": blobs "q" (int8 codes, or two int4 codes per uint8, low
nibble first) and "scale" ((channels, blocks) float32, or float16 for int4: half a bit per
weight instead of one at 32 values a block, as llama.cpp's q4_0; the codes are rounded
against the float16 scales, so nothing is lost in storing them), plus its shape, channel
axis, bits and block size; every blob is CRC-checked like any other.
"""
from __future__ import annotations

import weakref

import numpy as np

QMAX = {8: 127, 4: 7}
INT4_BLOCK = 32
# id(decoded array) -> (weak ref to it, its codes): saving writes exactly these codes, so a
# compressed graph saved, loaded and saved again never drifts; entries die with the array
_CODED: dict[int, tuple[weakref.ref, dict]] = {}


def remember(w: np.ndarray, coded: dict) -> None:
    _CODED[id(w)] = (weakref.ref(w), coded)
    weakref.finalize(w, _CODED.pop, id(w), None)


# scales(rows (n, block) float64, qmax) -> (n,) : the fitter compress/weights.py registers
# (ADMM); without one, max-abs
FIT_SCALES = None


def _rows(w: np.ndarray, axis: int, block: int | None):
    """(channels, K) float64 view of w with the channel axis first, padded to whole
    blocks -> (rows (channels * blocks, block), block)."""
    wc = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    k = wc.shape[1]
    block = k if block is None else block
    pad = (-k) % block
    if pad:
        wc = np.concatenate([wc, np.zeros((wc.shape[0], pad))], axis=1)
    return wc.reshape(-1, block), block


def encode(w: np.ndarray, axis: int, bits: int, fit: str = "admm",
           block: int | None = None) -> dict:
    """-> {"q": codes, "scale": (channels, blocks) f32, "meta": {...}} for one weight.
    fit: "admm" (FIT_SCALES, when registered: scales fitted, never worse than max-abs;
    ~2 s for a 2.4M-value weight) or "maxabs" (instant). block: values per scale along a
    channel (default: INT4_BLOCK for int4, the whole channel for int8)."""
    if bits not in QMAX:
        raise ValueError(f"weight-only bits must be 8 or 4, got {bits}")
    axis %= w.ndim
    rows, block = _rows(w, axis, block or (INT4_BLOCK if bits == 4 else None))
    qmax = QMAX[bits]
    scales = FIT_SCALES(rows, qmax) if fit == "admm" and FIT_SCALES is not None else \
        np.max(np.abs(rows), axis=1) / qmax
    scales = stored_scales(np.where(scales > 0, scales, 1.0), bits)
    q = np.clip(np.rint(rows / scales[:, None]), -qmax, qmax).astype(np.int8)
    channels = w.shape[axis]
    return pack(q.reshape(channels, -1), scales.reshape(channels, -1), axis, bits, block,
                w.shape)


# float16 normal numbers: int4 scales in this range are stored as float16
F16_RANGE = (float(np.finfo(np.float16).tiny), float(np.finfo(np.float16).max))


def stored_scales(scales: np.ndarray, bits: int) -> np.ndarray:
    """The scales as they will be stored and decoded (float32 values): int4 scales rounded
    to float16 when all of them are normal float16 numbers, so the codes are chosen
    against exactly the scales decoding multiplies by."""
    s = np.asarray(scales, np.float32)
    if bits == 4 and s.size and F16_RANGE[0] <= s.min() and s.max() <= F16_RANGE[1]:
        return s.astype(np.float16).astype(np.float32)
    return s


def pack(q: np.ndarray, scales: np.ndarray, axis: int, bits: int, block: int, shape) -> dict:
    """Codes (channels, blocks * block) int8 with |q| <= QMAX[bits] and their scales
    (channels, blocks) -> the coded form encode() returns (int4: two codes per byte, low
    nibble first)."""
    q = np.asarray(q, np.int8).reshape(-1)
    if bits == 4:
        nib = (q & 0x0F).astype(np.uint8)
        q = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
    s = np.asarray(scales, np.float32)
    half = s.astype(np.float16)
    if bits == 4 and np.array_equal(half.astype(np.float32), s) and np.all(np.isfinite(half)):
        s = half                                  # stored_scales' values: exact in float16
    return {"q": q, "scale": s,
            "meta": {"bits": bits, "axis": axis, "block": block, "shape": list(shape)}}


def decode(q: np.ndarray, scale: np.ndarray, meta: dict) -> np.ndarray:
    """Inverse of encode (float32 weights). Raises ValueError on inconsistent sizes."""
    bits, axis, block = int(meta["bits"]), int(meta["axis"]), int(meta["block"])
    shape = tuple(int(d) for d in meta["shape"])
    if bits not in QMAX or not 0 <= axis < len(shape) or block < 1:
        raise ValueError(f"bad qblock parameters {meta}")
    channels = shape[axis]
    k = int(np.prod(shape, dtype=np.int64)) // max(channels, 1)
    blocks = -(-k // block)
    n = channels * blocks * block
    if scale.shape != (channels, blocks) or scale.dtype not in (np.float32, np.float16):
        raise ValueError(f"scale {scale.shape} {scale.dtype} != ({channels}, {blocks}) "
                         f"float32 / float16")
    if not np.all(np.isfinite(scale)):
        raise ValueError("qblock scales are not all finite")
    if bits == 4:
        if q.dtype != np.uint8 or q.size * 2 != n:
            raise ValueError(f"int4 codes: {q.size} bytes for {n} values")
        codes = np.empty(n, np.int8)
        codes[0::2] = (q & 0x0F).astype(np.int8)
        codes[1::2] = (q >> 4).astype(np.int8)
        codes = np.where(codes > 7, codes - 16, codes).astype(np.int8)
    else:
        if q.dtype != np.int8 or q.size != n:
            raise ValueError(f"int8 codes: {q.size} values for {n}")
        codes = q
    w = codes.reshape(channels, blocks, block).astype(np.float32) * \
        scale.astype(np.float32)[:, :, None]
    w = w.reshape(channels, -1)[:, :k]
    moved = (channels,) + tuple(d for i, d in enumerate(shape) if i != axis)
    return np.ascontiguousarray(np.moveaxis(w.reshape(moved), 0, axis), dtype=np.float32)


def coded_form(w: np.ndarray, bits: int, axis: int, block: int | None = None) -> dict:
    """The codes of a weight marked by compress_weights (the very codes it was decoded from
    when `w` is that decoded array and they have these bits, axis and block (None: any),
    else a fresh encoding)."""
    hit = _CODED.get(id(w))
    if hit is not None and hit[0]() is w:
        meta = hit[1]["meta"]
        if meta["bits"] == bits and meta["axis"] == axis % w.ndim and \
                block in (None, meta["block"]):
            return hit[1]
    return encode(w, axis, bits, block=block)


def load_coded(q: np.ndarray, scale: np.ndarray, meta: dict) -> np.ndarray:
    """decode() for the file reader; remembers the codes so a re-save writes them as read."""
    w = decode(q, scale, meta)
    remember(w, {"q": q, "scale": scale, "meta": dict(meta)})
    return w


# -- "sparse": the nonzeros of a mostly-zero tensor ------------------------------------------
# A constant with at least SPARSE_MIN_ZEROS of its entries zero (pruned weights) is stored
# as a bit mask of its nonzeros (uint8, np.packbits little-endian) and their values in
# order, and scattered back at load. With entropy coding on, both blobs may be zstd-coded
# (the mask is the "sparse indices" the entropy coder sees). -0.0 is stored as a zero.
SPARSE_MIN_ZEROS = 0.5
SPARSE_MIN_SIZE = 1024
SPARSE_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64")


def sparse_encode(array: np.ndarray) -> dict | None:
    """-> {"mask", "values", "meta"} for a mostly-zero tensor, None when it is not one."""
    a = np.asarray(array)
    if a.dtype.name not in SPARSE_DTYPES or a.size < SPARSE_MIN_SIZE:
        return None
    flat = a.reshape(-1)
    nz = flat != 0
    if 1 - np.count_nonzero(nz) / flat.size < SPARSE_MIN_ZEROS:
        return None
    return {"mask": np.packbits(nz, bitorder="little"), "values": np.ascontiguousarray(flat[nz]),
            "meta": {"shape": list(a.shape), "dtype": a.dtype.name}}


def sparse_decode(mask: np.ndarray, values: np.ndarray, meta: dict) -> np.ndarray:
    """Inverse of sparse_encode. Raises ValueError on inconsistent sizes or types."""
    shape = tuple(int(d) for d in meta["shape"])
    dtype = str(meta["dtype"])
    if dtype not in SPARSE_DTYPES or min(shape, default=0) < 0:
        raise ValueError(f"bad sparse parameters {meta}")
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if mask.dtype != np.uint8 or mask.ndim != 1 or mask.size != -(-n // 8):
        raise ValueError(f"mask of {mask.size} bytes for {n} values")
    if values.dtype.name != dtype or values.ndim != 1:
        raise ValueError(f"values {values.dtype}{list(values.shape)}, expected {dtype}")
    keep = np.unpackbits(mask, count=n, bitorder="little").astype(bool)
    if int(np.count_nonzero(keep)) != values.size:
        raise ValueError(f"{np.count_nonzero(keep)} mask bits set for {values.size} values")
    out = np.zeros(n, dtype)
    out[keep] = values
    return out.reshape(shape)
