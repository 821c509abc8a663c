"""The .enn file: one safetensors container holding the optimized graph and its tensors.

Layout (safetensors: u64 header length, JSON header, raw little-endian tensor bytes):
  header["__metadata__"] = {
    "format": "edgenn", "format_version": "1",
    "graph": JSON text of the graph (nodes, inputs, outputs, meta, tensor table),
    "graph_crc32": crc32 of that text }
  each stored blob is a safetensors tensor; the graph's tensor table maps a constant name
  to {"codec": "raw", "blobs": {"data": <blob key>}, "crc32": {<blob key>: crc}}, so later
  codecs add blob roles without a format change: "qblock" (weight-only int8/int4, see
  graph/codecs.py) stores {"q": codes, "scale": scales} and is decoded at load; "sparse"
  (a constant with >= half its entries zero: pruned weights) stores {"mask": nonzero
  bits, "values": the nonzeros} and is scattered back at load. An entry
  may also carry "entropy": {role: {"coder": "zstd", "dtype", "shape"}}: that role's blob
  is stored entropy-coded (graph/entropy.py; graph.meta["entropy_coding"] asks for it) and
  decoded first. Checksums are of the stored bytes.

That is the plain layout (format version 1). An entropy-coded file uses the compact
layout (version 2, graph/compact.py): the graph description and every blob under 16 KB in
one zstd frame, larger blobs under short keys; the same tensor table and codecs.

Reading memory-maps the file and wraps raw blobs with np.frombuffer: zero copies. Every
length, offset, dtype and checksum is verified before use; nothing is unpickled or run.
"""
from __future__ import annotations

import json
import math
import mmap
import os
import struct
import zlib

import numpy as np

from ..errors import ModelFormatError
from . import compact
from .ir import Graph, Node, ValueInfo

FORMAT = "edgenn"
FORMAT_VERSION = 2        # the newest this edgenn reads; plain files are still written as 1
PLAIN_VERSION = 1         # the layout above; 2 is graph/compact.py's (entropy-coded files)
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16",
              "U32": "uint32", "U64": "uint64", "BOOL": "bool"}
MAX_HEADER = 256 << 20
_ATTR_DTYPES = frozenset(_ST_DTYPES.values())   # numeric and bool: attribute arrays


# -- graph <-> JSON --------------------------------------------------------------------------
def _attr_to_json(value):
    if isinstance(value, Graph):            # a control-flow body (graph/ir.py BODY_ATTRS)
        if value.consts:
            raise ValueError("a body graph keeps no constants (the importer hoists them)")
        return {"__graph__": _body_doc(value)}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.dtype.name, "shape": list(value.shape),
                "data": value.ravel().tolist()}
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_attr_to_json(v) for v in value]
    return value


def _attr_from_json(value):
    if isinstance(value, dict) and "__graph__" in value:
        doc = value["__graph__"]
        _check_body(doc)
        return _graph_of(doc, {}, {})
    if isinstance(value, dict) and "__ndarray__" in value:
        if value["__ndarray__"] not in _ATTR_DTYPES:     # "U25000000": 100 MB an element
            raise ValueError(f"attribute array of dtype {str(value['__ndarray__'])[:20]!r}")
        return np.array(value["data"], dtype=value["__ndarray__"]).reshape(value["shape"])
    if isinstance(value, list):
        return [_attr_from_json(v) for v in value]
    return value


def _body_doc(graph: Graph) -> dict:
    return {
        "nodes": [{"op": n.op, "name": n.name, "inputs": n.inputs, "outputs": n.outputs,
                   "attrs": {k: _attr_to_json(v) for k, v in n.attrs.items()}}
                  for n in graph.nodes],
        "inputs": [[v.name, v.dtype, _shape_json(v.shape)] for v in graph.inputs],
        "outputs": [[v.name, v.dtype, _shape_json(v.shape)] for v in graph.outputs],
    }


def _shape_json(shape):
    return None if shape is None else list(shape)


def graph_to_json(graph: Graph, tensors: dict, packed: dict | None = None) -> str:
    doc = dict(_body_doc(graph), meta=graph.meta, tensors=tensors)
    if packed is not None:
        doc["packed"] = packed                 # the compact layout's small blobs
    return json.dumps(doc, separators=(",", ":"), default=_attr_to_json)


def _check_body(doc) -> None:
    """A body's description (nodes, inputs, outputs) has the types the reader relies on
    (a body's value may have an unknown rank: shape null)."""
    _check_doc(dict(doc, meta={}, tensors={}) if isinstance(doc, dict) else doc, body=True)


def _check_doc(doc, body: bool = False) -> None:
    """The graph description has the types the reader relies on (TypeError if not)."""
    def strs(v):
        return isinstance(v, list) and all(isinstance(x, str) for x in v)

    def shape_ok(s):
        if s is None:
            return body
        return isinstance(s, list) and all(isinstance(d, (int, str)) and
                                           not isinstance(d, bool) for d in s)

    def rows(v):
        return isinstance(v, list) and all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], str)
            and isinstance(r[1], str) and shape_ok(r[2]) for r in v)
    ok = (isinstance(doc, dict) and isinstance(doc.get("nodes"), list)
          and isinstance(doc.get("tensors"), dict) and isinstance(doc.get("meta"), dict)
          and rows(doc.get("inputs")) and rows(doc.get("outputs"))
          and all(isinstance(n, dict) and isinstance(n.get("op"), str)
                  and isinstance(n.get("name"), str) and strs(n.get("inputs"))
                  and strs(n.get("outputs")) and isinstance(n.get("attrs"), dict)
                  for n in doc["nodes"])
          and all(isinstance(e, dict) and isinstance(e.get("crc32"), dict)
                  and isinstance(e.get("blobs"), dict) for e in doc["tensors"].values()))
    if not ok:
        raise TypeError("unexpected structure")


def _graph_of(doc: dict, consts: dict, meta: dict) -> Graph:
    nodes = [Node(n["op"], list(n["inputs"]), list(n["outputs"]),
                  {k: _attr_from_json(v) for k, v in n["attrs"].items()}, n["name"])
             for n in doc["nodes"]]
    vi = lambda rows: [ValueInfo(name, dtype, None if shape is None else tuple(shape))
                       for name, dtype, shape in rows]
    return Graph(nodes, vi(doc["inputs"]), vi(doc["outputs"]), consts, meta)


def graph_from_json(doc: dict, consts: dict) -> Graph:
    """The Graph of a parsed, checked (_check_doc) graph description."""
    return _graph_of(doc, consts, doc["meta"])


# -- write -----------------------------------------------------------------------------------
def _crc(buf) -> int:
    return zlib.crc32(buf) & 0xFFFFFFFF


def encode_raw(name: str, array: np.ndarray) -> tuple[dict, dict]:
    """-> (tensor table entry, {blob key: array})."""
    array = np.require(array, requirements="C")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    key = f"t:{name}"
    return ({"codec": "raw", "blobs": {"data": key}, "crc32": {key: _crc(array.tobytes())}},
            {key: array})


def encode_qblock(name: str, array: np.ndarray, codec: dict) -> tuple[dict, dict]:
    """Weight-only int8/int4 (compress/weights.py): codes + per-block scales."""
    from .codecs import coded_form
    coded = coded_form(array, int(codec["bits"]), int(codec["axis"]), codec.get("block"))
    keys = {"q": f"q:{name}", "scale": f"s:{name}"}
    arrays = {keys["q"]: coded["q"], keys["scale"]: coded["scale"]}
    return ({"codec": "qblock", "blobs": keys, "params": coded["meta"],
             "crc32": {k: _crc(a.tobytes()) for k, a in arrays.items()}}, arrays)


def encode_sparse(name: str, array: np.ndarray) -> tuple[dict, dict] | None:
    """A mostly-zero tensor as its nonzeros' bit mask and values (graph/codecs.py), or
    None when it is not one."""
    from .codecs import sparse_encode
    coded = sparse_encode(array)
    if coded is None:
        return None
    keys = {"mask": f"m:{name}", "values": f"v:{name}"}
    arrays = {keys["mask"]: coded["mask"], keys["values"]: coded["values"]}
    return ({"codec": "sparse", "blobs": keys, "params": coded["meta"],
             "crc32": {k: _crc(a.tobytes()) for k, a in arrays.items()}}, arrays)


def entropy_code(entry: dict, arrays: dict, min_bytes: int = 0) -> None:
    """Store each integer blob of one entry (of at least min_bytes) as a zstd frame where
    that makes it smaller."""
    from . import entropy
    for role, key in entry["blobs"].items():
        a = arrays[key]
        frame = entropy.encode(a) if entropy.codable(a) and a.nbytes >= min_bytes else None
        if frame is not None:
            arrays[key] = np.frombuffer(frame, np.uint8)
            entry.setdefault("entropy", {})[role] = {"coder": entropy.CODER,
                                                     "dtype": a.dtype.name,
                                                     "shape": list(a.shape)}
            entry["crc32"][key] = _crc(arrays[key].tobytes())


def stored_entries(graph: Graph, min_coded: int = 0):
    """-> (name, table entry, {blob key: stored array}) per constant, as to_bytes writes
    them (codec, then entropy coding of the blobs of at least min_coded bytes when
    graph.meta["entropy_coding"] asks for it)."""
    codecs = graph.meta.get("weight_codecs", {})
    coding = graph.meta.get("entropy_coding")
    if coding not in (None, "zstd"):
        raise ValueError(f"unknown entropy coding {coding!r}")
    for name, array in graph.consts.items():
        if name in codecs:
            entry, entry_blobs = encode_qblock(name, array, codecs[name])
        else:
            entry, entry_blobs = encode_sparse(name, array) or encode_raw(name, array)
        if coding:
            entropy_code(entry, entry_blobs, min_coded)
        yield name, entry, entry_blobs


def to_bytes(graph: Graph) -> bytes:
    """The .enn bytes of `graph`: the compact layout (graph/compact.py) when it asks for
    entropy coding, else the plain one."""
    from safetensors.numpy import save
    if graph.meta.get("entropy_coding"):
        return _compact_bytes(graph)
    table, blobs = {}, {}
    for name, entry, entry_blobs in stored_entries(graph):
        table[name] = entry
        blobs.update(entry_blobs)
    text = graph_to_json(graph, table)
    meta = {"format": FORMAT, "format_version": str(PLAIN_VERSION), "graph": text,
            "graph_crc32": str(_crc(text.encode()))}
    return _canonical(save(blobs, metadata=meta))


def _compact_bytes(graph: Graph) -> bytes:
    """Version 2: the graph description and the small blobs in one zstd frame, large
    blobs coded one by one (graph/compact.py)."""
    from safetensors.numpy import save
    table, blobs = {}, {}
    for name, entry, entry_blobs in stored_entries(graph, min_coded=compact.PACK_BYTES):
        table[name] = entry
        blobs.update(entry_blobs)
    index, rest, packed, int_start = compact.pack(*compact.short_keys(table, blobs))
    text = graph_to_json(graph, table, index).encode()
    text += b" " * (-len(text) % compact.ALIGN)     # packed blobs aligned in memory
    payload = text + packed
    rest[compact.GRAPH_KEY] = np.frombuffer(
        compact.encode_payload(payload, len(text) + int_start), np.uint8)
    meta = {"format": FORMAT, "format_version": str(compact.VERSION),
            "graph_bytes": str(len(text)), "payload_bytes": str(len(payload)),
            "payload_crc32": str(_crc(payload))}
    return _canonical(save(rest, metadata=meta))


def _canonical(data: bytes) -> bytes:
    """The same container with its JSON header's keys sorted: safetensors writes the
    metadata map in a random order per process, so the same graph would give different
    bytes; with this a model saves byte-identically every time (data offsets are relative
    to the end of the header, so only the header changes; padded to 8 bytes as safetensors)."""
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.dumps(json.loads(data[8:8 + n]), separators=(",", ":"), sort_keys=True)
    raw = header.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


def save(graph: Graph, path: str) -> None:
    write_atomic(path, to_bytes(graph))


def write_atomic(path: str, data: bytes) -> None:
    """`data` to `path` through a temporary file: never a half-written file behind."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# -- read ------------------------------------------------------------------------------------
def looks_like_enn(head: bytes) -> bool:
    return len(head) >= 10 and head[8:10] == b'{"'


def _fail(what: str, source: str) -> ModelFormatError:
    return ModelFormatError(f"{source}: {what}")


def from_buffer(buf, source: str = "<bytes>") -> Graph:
    """Parse a .enn held in `buf` (bytes or mmap); raw tensors are zero-copy views into it."""
    meta, blobs = read_container(buf, source, FORMAT, ())
    if int(meta["format_version"]) < compact.VERSION:
        if not all(isinstance(meta.get(k), str) for k in ("graph", "graph_crc32")):
            raise _fail("corrupt header: metadata fields of the wrong type", source)
        return decode_graph(meta["graph"], meta["graph_crc32"], blobs, source)
    text, packed = _unpack(meta, blobs, source)
    return decode_graph(text, None, blobs, source, packed)


def _unpack(meta: dict, blobs: dict, source: str) -> tuple[str, np.ndarray]:
    """A compact file's (graph description, packed bytes), checked; the graph frame is
    taken out of `blobs`."""
    fields = [meta.get(k) for k in ("graph_bytes", "payload_bytes", "payload_crc32")]
    if not all(isinstance(v, str) and v.isascii() and v.isdigit() and len(v) <= 20
               for v in fields):
        raise _fail("corrupt header: compact layout fields missing or not integers",
                    source)
    n, size, crc = (int(v) for v in fields)
    frame = blobs.pop(compact.GRAPH_KEY, None)
    if frame is None or n > size or n % compact.ALIGN:
        raise _fail("corrupt header: no graph frame, or a graph larger than its payload "
                    "or not padded", source)
    try:
        payload = compact.decode_payload(frame, size)
    except ValueError as exc:
        raise _fail(f"graph frame: {exc}", source) from None
    if _crc(payload) != crc:
        raise _fail("graph description checksum mismatch (file corrupted)", source)
    try:
        text = payload[:n].tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(f"corrupt graph description ({exc})", source) from None
    return text, payload[n:]


def description(buf) -> dict:
    """The graph description (nodes, tensor table, meta, ...) of a .enn held in `buf`,
    parsed from either layout; for tools and tests that look inside files."""
    meta, blobs = read_container(buf, "<bytes>", FORMAT, ())
    text = meta.get("graph") if int(meta["format_version"]) < compact.VERSION else \
        _unpack(meta, blobs, "<bytes>")[0]
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _fail(f"corrupt graph description ({exc})", "<bytes>") from None


def read_container(buf, source: str, fmt: str, fields,
                   what: str = "edgenn model") -> tuple[dict, dict]:
    """The checked metadata (format `fmt`, a readable format_version, the string `fields`)
    and the blobs {key: zero-copy array} of a safetensors container in `buf`."""
    size = len(buf)
    if size < 8:
        raise _fail(f"truncated: {size} bytes, not even a header length", source)
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n < 2 or n > MAX_HEADER or 8 + n > size:
        raise _fail(f"truncated or corrupt: header length {n} does not fit in {size} bytes",
                    source)
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (ValueError, RecursionError) as exc:     # bad UTF-8 or JSON, absurd nesting
        raise _fail(f"corrupt header ({exc})", source) from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise _fail(f"not an {what} (a safetensors file without edgenn metadata?)", source)
    meta = header.pop("__metadata__")
    if meta.get("format") != fmt:
        raise _fail(f"not an {what} (format {meta.get('format')!r})", source)
    if not all(isinstance(meta.get(k), str) for k in ("format_version", *fields)):
        raise _fail("corrupt header: metadata fields of the wrong type", source)
    try:
        version = int(meta["format_version"])
    except ValueError:
        raise _fail("corrupt header: bad format_version", source) from None
    if version > FORMAT_VERSION:
        raise _fail(f"written by a newer edgenn (format version {version}; this edgenn "
                    f"{_version()} reads up to {FORMAT_VERSION}): upgrade edgenn", source)
    return meta, _read_blobs(buf, header, 8 + n, size - 8 - n, source)


def decode_graph(text: str, crc: str | None, blobs: dict, source: str,
                 packed: np.ndarray | None = None) -> Graph:
    """The Graph of a graph description `text` (checked against `crc`; None: a checksum
    covering more than `text` was checked already) whose tensor table names blobs of
    `blobs` (entropy-coded ones are replaced in `blobs` by their decoding) and, in the
    compact layout, of the `packed` bytes its "packed" index places."""
    if crc is not None and str(_crc(text.encode())) != crc:
        raise _fail("graph description checksum mismatch (file corrupted)", source)
    try:
        doc = json.loads(text)
        _check_doc(doc)
        in_frame = set()
        if packed is not None or "packed" in doc:
            in_frame = _add_packed(doc.get("packed"), packed, blobs)
        checked = _entropy_decode(doc["tensors"], blobs, source, in_frame)
        consts = {name: _decode(name, entry, blobs, source, name in checked)
                  for name, entry in doc["tensors"].items()}
        graph = graph_from_json(doc, consts)
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError,
            OverflowError) as exc:
        raise _fail(f"corrupt graph description ({type(exc).__name__}: {exc})", source) from None
    graph.validate()
    return graph


def _add_packed(index, packed: np.ndarray | None, blobs: dict) -> set:
    """The compact layout's packed blobs added to `blobs` (ValueError if malformed).
    -> their keys."""
    if packed is None:
        raise ValueError("a packed index outside the compact layout")
    unpacked = compact.unpacked(index if index is not None else {}, packed,
                                set(_ST_DTYPES.values()))
    if set(unpacked) & set(blobs):
        raise ValueError("a packed blob shares its key with a stored one")
    blobs.update(unpacked)
    return set(unpacked)


def _read_blobs(buf, header: dict, start: int, size: int, source: str) -> dict:
    blobs, spans = {}, []
    for key, info in header.items():
        try:
            dtype = np.dtype(_ST_DTYPES[info["dtype"]])
            shape = tuple(int(d) for d in info["shape"])
            lo, hi = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError, OverflowError):   # OverflowError: 1e999
            raise _fail(f"corrupt entry for tensor {key!r}", source) from None
        count = math.prod(shape)            # exact (no int64 wrap-around)
        if min(shape, default=0) < 0 or not 0 <= lo <= hi <= size \
                or hi - lo != count * dtype.itemsize:
            raise _fail(f"tensor {key!r}: offsets [{lo}, {hi}) do not match shape {shape} "
                        f"{dtype} in {size} data bytes (truncated?)", source)
        spans.append((lo, hi))
        blobs[key] = np.frombuffer(buf, dtype=dtype, count=count, offset=start + lo).reshape(shape)
    spans.sort()
    end = 0
    for lo, hi in spans:
        if lo != end:
            raise _fail("tensor data overlaps or has gaps (corrupt)", source)
        end = hi
    if end != size:
        raise _fail(f"{size - end} bytes of trailing data (corrupt or truncated)", source)
    return blobs


def _check_crcs(name: str, entry: dict, blobs: dict, source: str) -> None:
    for key, crc in entry["crc32"].items():
        if key not in blobs:
            raise _fail(f"tensor {name!r}: blob {key!r} is missing", source)
        if _crc(blobs[key]) != crc:
            raise _fail(f"tensor {name!r}: checksum mismatch (file corrupted)", source)


def _entropy_decode(table: dict, blobs: dict, source: str, in_frame: set = frozenset()) -> set:
    """Replace every entropy-coded blob by its decoded array (checksums first), within
    one expansion budget for the whole file. -> the names whose checksums were checked.
    Each coded blob belongs to exactly one (tensor, role): a blob named twice would count
    twice in the budget (a bomb could multiply it) or be decoded twice. Blobs packed in
    the compact layout's frame (`in_frame`) are never coded: their size is already a
    decoded one, a frame inside would expand it twice."""
    coded = {name: e["entropy"] for name, e in table.items() if e.get("entropy")}
    if not coded:
        return set()
    from . import entropy
    if not all(isinstance(c, dict) for c in coded.values()):
        raise TypeError("entropy entries must be objects")
    uses: dict[str, int] = {}
    for entry in table.values():
        for key in entry["blobs"].values():
            uses[key] = uses.get(key, 0) + 1
    keys = {}
    for name, roles in coded.items():
        entry = table[name]
        _check_crcs(name, entry, blobs, source)
        for role in roles:
            key = entry["blobs"][role]
            if uses.get(key) != 1 or key not in blobs:
                raise _fail(f"tensor {name!r}: coded blob {key!r} is missing or shared", source)
            if key in in_frame:
                raise _fail(f"tensor {name!r}: blob {key!r} is packed in the graph frame "
                            f"and cannot be entropy-coded", source)
            if blobs[key].dtype != np.uint8 or blobs[key].ndim != 1:
                raise _fail(f"tensor {name!r}: coded blob {key!r} is not a byte string", source)
            if key not in entry["crc32"]:
                raise _fail(f"tensor {name!r}: coded blob {key!r} has no checksum", source)
            keys[key] = (name, roles[role])
    budget = entropy.Budget(sum(blobs[k].nbytes for k in keys))
    for key, (name, spec) in keys.items():
        try:
            blobs[key] = entropy.decode(blobs[key], spec, budget)
        except ValueError as exc:
            raise _fail(f"tensor {name!r}: {exc}", source) from None
    return set(coded)


# codec -> (its blob roles, the graph/codecs.py function decoding them, what it holds)
_CODECS = {"qblock": (("q", "scale"), "load_coded", "int8/int4 weights"),
           "sparse": (("mask", "values"), "sparse_decode", "sparse tensor")}


def _decode(name: str, entry: dict, blobs: dict, source: str,
            checked: bool = False) -> np.ndarray:
    if not checked:
        _check_crcs(name, entry, blobs, source)
    codec = entry["codec"]
    if codec in _CODECS:
        roles, decoder, what = _CODECS[codec]
        from . import codecs
        try:
            return getattr(codecs, decoder)(*(blobs[entry["blobs"][r]] for r in roles),
                                            entry["params"])
        except ValueError as exc:
            raise _fail(f"tensor {name!r}: corrupt {what} ({exc})", source) from None
    if codec != "raw":
        raise _fail(f"tensor {name!r}: unknown codec {codec!r} (newer edgenn?)", source)
    return blobs[entry["blobs"]["data"]]


def _version() -> str:
    from ..version import __version__
    return __version__


def load(path: str) -> Graph:
    """Memory-map and parse a .enn file."""
    return from_buffer(map_file(path), path)


def map_file(path: str) -> mmap.mmap:
    """The file memory-mapped read-only; an empty or unreadable file is a ModelFormatError."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise _fail("empty file", path)
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ModelFormatError(f"cannot read {path!r}: {exc}") from exc
