"""Entropy coding of the integer blobs of .enn files (int8 weights of quantized layers,
the int8 / int4 codes of weight-only "qblock" weights): one zstd frame per blob, decoded
once at load.

Why zstd (Python 3.14's compression.zstd; backports.zstd before): on real trained
per-channel int8 weights, zstd level 19 codes large tensors close to their empirical
order-0 entropy (its Huffman literals) and decodes fast; constriction's ANS and LZMA
reach the entropy as closely on large tensors but decode an order of magnitude slower,
and ANS's frequency table costs more on small tensors (tools/entropy_report.py
measures the coders on a model's weights).

A coded blob is stored as uint8 bytes; its table entry says {"coder": "zstd", "dtype",
"shape"}. Decoding is bounded: the frame must expand to exactly the declared size, and a
file may not expand past EXPANSION x its coded bytes + SLACK (a hostile "zip bomb" that
declares a huge tensor is refused before anything is allocated). A coded blob read from a
file is remembered with its decoded array, so saving that graph again writes the same
bytes whatever the zstd version.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

CODER = "zstd"
LEVEL = 19
MIN_BYTES = 1024               # smaller blobs stay raw: the frame and table cost too much
EXPANSION, SLACK = 64, 256 << 20
CODED_DTYPES = ("int8", "uint8")
_FROM_FILE: dict[int, tuple[weakref.ref, bytes]] = {}   # id(decoded) -> (ref, its frame)


def _zstd():
    """The zstd module (looked up once: a failed import of compression.zstd is not cheap,
    and would otherwise be paid per coded blob)."""
    global _ZSTD
    if _ZSTD is None:
        try:
            from compression import zstd      # Python >= 3.14
        except ImportError:
            try:
                from backports import zstd    # a dependency below 3.14
            except ImportError:
                from ..errors import MissingDependencyError
                raise MissingDependencyError(
                    "entropy-coded weights need zstd: a Python with compression.zstd "
                    "(3.14+) or pip install backports.zstd") from None
        _ZSTD = zstd
    return _ZSTD


_ZSTD = None


def codable(array: np.ndarray) -> bool:
    return array.dtype.name in CODED_DTYPES and array.nbytes >= MIN_BYTES


def encode(array: np.ndarray) -> bytes | None:
    """The zstd frame of `array`'s bytes, or None when coding would not make it smaller.
    A decoded array read from a file gets back the very frame it was read from."""
    hit = _FROM_FILE.get(id(array))
    if hit is not None and hit[0]() is array:
        return hit[1]
    frame = compress(np.ascontiguousarray(array).tobytes())
    return frame if len(frame) < array.nbytes else None


def compress(data: bytes) -> bytes:
    """One zstd frame of `data` (level LEVEL, no frame checksum: the stored bytes have
    their CRC-32)."""
    return compress_blocks([data])


def compress_blocks(parts: list[bytes]) -> bytes:
    """One zstd frame of the parts joined, a block flushed after each but the last (so no
    block mixes two parts' statistics); options as compress. The size is pledged, so the
    frame is single-segment with its content size, as a one-shot frame (without it the
    header's window byte is free to change: a flipped bit there would go unnoticed)."""
    zstd = _zstd()
    c = zstd.ZstdCompressor(options={zstd.CompressionParameter.compression_level: LEVEL,
                                     zstd.CompressionParameter.checksum_flag: 0})
    c.set_pledged_input_size(sum(len(p) for p in parts))
    out = [c.compress(p, mode=c.FLUSH_BLOCK) for p in parts[:-1]]
    out.append(c.compress(parts[-1] if parts else b"", mode=c.FLUSH_FRAME))
    return b"".join(out)


def decompress(data: bytes, n: int) -> bytes:
    """The `n` bytes one zstd frame holds; ValueError if it is corrupt, holds another
    size or is followed by anything."""
    zstd = _zstd()
    try:
        dec = zstd.ZstdDecompressor()
        out = dec.decompress(data, max_length=n)
        complete = dec.eof and not dec.unused_data
    except (zstd.ZstdError, EOFError) as exc:
        raise ValueError(f"corrupt zstd frame ({exc})") from None
    if len(out) != n or not complete:
        raise ValueError(f"zstd frame does not decode to the declared {n} bytes")
    return out


MAX_DIMS, MAX_DIM = 32, 1 << 40


def element_count(shape) -> int:
    """The number of elements of a declared shape; ValueError unless it is a list of at
    most MAX_DIMS integers in [0, MAX_DIM] (checked before multiplying: a product of
    hundreds of 4000-digit integers, a few hundred bytes once compressed, takes minutes)."""
    dims = list(shape)
    if len(dims) > MAX_DIMS or not all(type(d) is int and 0 <= d <= MAX_DIM for d in dims):
        raise ValueError(f"bad shape (of {len(dims)} dims; at most {MAX_DIMS}, each an "
                         f"integer in [0, 2^40])")
    return math.prod(dims)


class Budget:
    """How many decoded bytes one file may still produce (see module doc)."""

    def __init__(self, coded_bytes: int, slack: int | None = None):
        self.left = EXPANSION * coded_bytes + (SLACK if slack is None else slack)

    def take(self, n: int) -> None:
        if n > self.left:
            raise ValueError(f"implausible expansion: {n} decoded bytes declared, the file "
                             f"allows {max(self.left, 0)} more")
        self.left -= n


def decode(frame: np.ndarray, spec: dict, budget: Budget) -> np.ndarray:
    """One coded blob -> the array it codes. ValueError for anything inconsistent."""
    if spec.get("coder") != CODER:
        raise ValueError(f"unknown entropy coder {spec.get('coder')!r} (newer edgenn?)")
    dtype = np.dtype(str(spec["dtype"]))
    if dtype.name not in CODED_DTYPES:
        raise ValueError(f"entropy-coded blobs are int8 / uint8, not {dtype}")
    shape = tuple(spec["shape"])
    n = element_count(shape) * dtype.itemsize
    budget.take(n)
    data = frame.tobytes()
    array = np.frombuffer(decompress(data, n), dtype=dtype).reshape(shape)  # read-only
    _FROM_FILE[id(array)] = (weakref.ref(array), data)
    weakref.finalize(array, _FROM_FILE.pop, id(array), None)
    return array


def entropy_bits(array: np.ndarray, symbol_bits: int = 8) -> float:
    """Empirical order-0 entropy of `array`'s symbols, in bits for the whole array: bytes
    as symbols (symbol_bits=8), or the two nibbles of each byte (symbol_bits=4, int4)."""
    b = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    if symbol_bits == 4:
        b = np.concatenate([b & 0x0F, b >> 4])
    counts = np.bincount(b, minlength=256)
    p = counts[counts > 0] / b.size
    return float(-(p * np.log2(p)).sum() * b.size) if b.size else 0.0
