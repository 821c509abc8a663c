"""The .ennf file: the members of a scalable model family in one safetensors container,
each tensor stored once however many members hold it.

Layout (the .enn container, graph/format.py, with content-addressed blobs):
  header["__metadata__"] = {
    "format": "edgenn-family", "format_version": "1",
    "family": JSON text {"members": [{"graph": <a member's graph description, as in a
              .enn>, ...figures...}], ...}, "family_crc32": crc32 of that text }
  every stored blob is keyed "h:<sha256 of dtype, shape and bytes>", so a blob that two
  members hold (the weights a resolution member shares with its source, the layers a
  pruning left alone) is written once. Each member's tensor table names those keys; a
  member reads as a .enn does (codecs, entropy coding, checksums, zero-copy views).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from . import format as enn
from .ir import Graph

FORMAT = "edgenn-family"
MAX_MEMBERS = 64
FAMILY_VERSION = 1


def _key(array: np.ndarray) -> str:
    h = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    h.update(memoryview(np.ascontiguousarray(array)).cast("B"))
    return "h:" + h.hexdigest()[:40]


def to_bytes(graphs: list[Graph], members: list[dict], doc: dict) -> bytes:
    """The family file of `graphs`, member i described by members[i] (JSON-able figures;
    its "graph" is written here) and the family by `doc` (JSON-able)."""
    from safetensors.numpy import save
    blobs: dict[str, np.ndarray] = {}
    described = []
    for graph, member in zip(graphs, members):
        table, mine = {}, set()
        for name, entry, entry_blobs in enn.stored_entries(graph):
            rename = {}
            for key, array in entry_blobs.items():
                k = _key(array)
                # a coded blob is decoded once per member: two uses in one member get two keys
                n, base = 1, k
                while k in mine:
                    k, n = f"{base}#{n}", n + 1
                mine.add(k)
                blobs[k] = array
                rename[key] = k
            entry["blobs"] = {role: rename[key] for role, key in entry["blobs"].items()}
            entry["crc32"] = {rename[key]: crc for key, crc in entry["crc32"].items()}
            table[name] = entry
        described.append({**member, "graph": enn.graph_to_json(graph, table)})
    text = json.dumps({**doc, "members": described}, sort_keys=True)
    meta = {"format": FORMAT, "format_version": str(FAMILY_VERSION), "family": text,
            "family_crc32": str(enn._crc(text.encode()))}
    return enn._canonical(save(blobs, metadata=meta))


def read(buf, source: str) -> tuple[dict, dict]:
    """-> (the family description, checked; the blobs as zero-copy views of `buf`)."""
    meta, blobs = enn.read_container(buf, source, FORMAT, ("family", "family_crc32"),
                                     what="edgenn model family")
    text = meta["family"]
    if str(enn._crc(text.encode())) != meta["family_crc32"]:
        raise enn._fail("family description checksum mismatch (file corrupted)", source)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise enn._fail(f"corrupt family description ({exc})", source) from None
    members = doc.get("members") if isinstance(doc, dict) else None
    if not isinstance(members, list) or not 0 < len(members) <= MAX_MEMBERS or not all(
            isinstance(m, dict) and isinstance(m.get("graph"), str) for m in members):
        raise enn._fail("corrupt family description: no member list", source)
    return doc, blobs


def member_graph(doc: dict, blobs: dict, index: int, source: str) -> Graph:
    """Member `index` of a family read by `read`, decoded as a .enn would be."""
    return enn.decode_graph(doc["members"][index]["graph"], None, dict(blobs),
                            f"{source} member {index}")     # family_crc32 covered it


def load(path: str) -> tuple[dict, dict]:
    """Memory-map and read a .ennf file (members decoded on demand: member_graph)."""
    return read(enn.map_file(path), path)
