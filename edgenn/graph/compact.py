"""The compact .enn layout (format version 2), written when a file is entropy-coded.

Why: in a plain .enn (version 1) the graph description is JSON text in the safetensors
header and every constant, however small, is a header entry of its own. For small and
int8 models that structure outweighs the weights: PP-OCR mobile cls int8 was 271 KB of
which 138 KB header (327 blobs: each QConv's scales, zero points and int32 bias), the
digits CNN int8 38.5 KB of which 30.5 KB header.

Layout: one safetensors container whose header lists the blob GRAPH_KEY plus the large
blobs under short keys ("0", "1", ...):
  header["__metadata__"] = {"format": "edgenn", "format_version": "2",
      "graph_bytes": n, "payload_bytes": m, "payload_crc32": crc32 of the payload}
  GRAPH_KEY: a zstd frame of the payload = the graph description (JSON text, n bytes) then
      the packed blobs: every blob of fewer than PACK_BYTES (16 KB), raw, each at an offset
      aligned to ALIGN, listed in the description's "packed": {key: [dtype, shape, offset]}
      (offset from the end of the text; the writer puts the int8 / uint8 blobs last, after
      a flushed block: any order reads the same)
The payload's CRC-32 covers the packed blobs: their table entries carry no checksum of
their own. Larger blobs are stored as in version 1 (raw and memory-mapped, or int8 / uint8
zstd-coded one frame each: graph/entropy.py). Decoding the payload is bounded like any
coded blob: exactly its declared size, at most 64x its frame + PAYLOAD_SLACK (16 MB).
Packed blobs may not overlap, nor be entropy-coded (their size is a decoded one already).
"""
from __future__ import annotations

import hashlib
import math
from collections import OrderedDict

import numpy as np

from . import entropy

VERSION = 2
GRAPH_KEY = "graph"
# blobs below this ride in the payload frame, coded together: a zstd frame of its own
# costs a small tensor its Huffman table, a visible share of a few KB; inside the frame
# the small integer tensors share a block (and its table) of their own (encode_payload)
PACK_BYTES = 16384
ALIGN = 8                 # the text is padded to it, so packed offsets are aligned in memory
PAYLOAD_SLACK = 16 << 20  # the payload may expand to 64 x its frame + this (graph/entropy.py)
_FRAMES: OrderedDict[bytes, bytes] = OrderedDict()   # digest(payload) -> frame read
_REMEMBERED = 8


def short_keys(table: dict, blobs: dict) -> tuple[dict, dict]:
    """The table and blobs with every blob key replaced by a short one ("0", "1", ...)."""
    rename = {key: str(i) for i, key in enumerate(blobs)}
    for entry in table.values():
        entry["blobs"] = {role: rename[k] for role, k in entry["blobs"].items()}
        entry["crc32"] = {rename[k]: crc for k, crc in entry["crc32"].items()}
    return table, {rename[k]: a for k, a in blobs.items()}


def entropy_per_byte(a: np.ndarray) -> float:
    """The order pack() gives the integer blobs (rising)."""
    return entropy.entropy_bits(a) / max(a.nbytes, 1)


def pack(table: dict, blobs: dict) -> tuple[dict, dict, bytes, int]:
    """Split blobs into the packed ones (small, not entropy-coded) and the rest.
    -> (packed index {key: [dtype, shape, offset]}, the remaining blobs, packed bytes, the
    offset where the integer blobs start). Packed blobs lose their per-blob checksum (the
    payload's covers them). Order: the other blobs (float scales, int32 biases) first,
    then the int8 / uint8 ones by rising entropy per byte, so that the frame's blocks
    after the one flushed there (encode_payload) hold like weights only."""
    coded = {k for e in table.values() for role, k in e["blobs"].items()
             if role in e.get("entropy", {})}
    small = {k: a for k, a in blobs.items() if a.nbytes < PACK_BYTES and k not in coded}
    rest = {k: a for k, a in blobs.items() if k not in small}
    integer = [k for k, a in small.items() if a.dtype.name in entropy.CODED_DTYPES]
    integer.sort(key=lambda k: entropy_per_byte(small[k]))
    index, parts, offset, int_start = {}, [], 0, None
    for key in [k for k in small if k not in set(integer)] + integer:
        a = small[key]
        pad = -offset % ALIGN
        parts.append(b"\0" * pad)
        offset += pad
        if int_start is None and key in integer:
            int_start = offset
        index[key] = [a.dtype.name, list(a.shape), offset]
        parts.append(np.ascontiguousarray(a).tobytes())
        offset += a.nbytes
    for entry in table.values():
        entry["crc32"] = {k: c for k, c in entry["crc32"].items() if k not in index}
    return index, rest, b"".join(parts), offset if int_start is None else int_start


def encode_payload(payload: bytes, split: int | None = None) -> bytes:
    """The payload's zstd frame (the very frame it was read from, when it was); split:
    a block flushed before that offset (the integer blobs: their literals then get
    Huffman tables of their own, not shared with the graph text and the floats, whose
    byte statistics differ and would cost the integers bits in a shared table)."""
    digest = hashlib.blake2b(payload, digest_size=16).digest()
    frame = _FRAMES.get(digest)
    if frame is not None:
        return frame
    parts = [payload] if split is None or not 0 < split < len(payload) else \
        [payload[:split], payload[split:]]
    return entropy.compress_blocks(parts)


def decode_payload(frame: np.ndarray, size: int) -> np.ndarray:
    """The payload of a frame declared to hold `size` bytes: an aligned, read-only array.
    ValueError if the frame is corrupt, another size, or implausibly large."""
    if frame.dtype != np.uint8 or frame.ndim != 1:
        raise ValueError("the graph frame is not a byte string")
    entropy.Budget(frame.nbytes, min(PAYLOAD_SLACK, entropy.SLACK)).take(size)
    coded = frame.tobytes()
    data = entropy.decompress(coded, size)
    _FRAMES[hashlib.blake2b(data, digest_size=16).digest()] = coded
    while len(_FRAMES) > _REMEMBERED:
        _FRAMES.popitem(last=False)
    out = np.frombuffer(data, np.uint8).copy()      # numpy's allocation: aligned
    out.flags.writeable = False
    return out


def unpacked(index, data: np.ndarray, dtypes: set) -> dict:
    """The packed blobs {key: read-only view of `data`}; ValueError for an entry that is
    malformed, of another dtype than `dtypes`, outside `data` or overlapping another."""
    if not isinstance(index, dict):
        raise ValueError("packed index is not an object")
    out, spans = {}, []
    for key, spec in index.items():
        if not (isinstance(spec, list) and len(spec) == 3 and spec[0] in dtypes
                and isinstance(spec[1], list) and type(spec[2]) is int):
            raise ValueError(f"packed blob {key!r}: bad entry")
        dtype, offset = np.dtype(spec[0]), spec[2]
        size = entropy.element_count(spec[1]) * dtype.itemsize
        if offset < 0 or offset % ALIGN or offset + size > data.size:
            raise ValueError(f"packed blob {key!r}: [{offset}, +{size}) outside the "
                             f"{data.size} packed bytes")
        out[key] = data[offset:offset + size].view(dtype).reshape(spec[1])
        spans.append((offset, offset + size, key))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise ValueError(f"packed blobs {a!r} and {b!r} overlap")
    return out
