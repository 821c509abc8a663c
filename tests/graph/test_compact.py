"""The compact .enn layout (format version 2, graph/compact.py): the graph description and
the small blobs in one zstd frame, written for entropy-coded files.

- round trips: every dtype, blobs on both sides of PACK_BYTES, large raw blobs still
  memory-mapped, large int8 blobs still coded alone; re-saves byte-identically;
- what it is for: an int8 model's structure no longer outweighs its weights;
- hostile files: every flipped byte, truncation, a payload "bomb", inconsistent sizes,
  checksums and packed indices: all ModelFormatError, nothing allocated for the bomb.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from support.quant_data import digits

import edgenn
from edgenn.demo import DEMO_MODEL
from edgenn.errors import ModelFormatError
from edgenn.graph import compact, entropy
from edgenn.graph import format as enn
from edgenn.graph.ir import Graph, Node, ValueInfo

RNG = np.random.default_rng(11)


def _graph(consts: dict) -> Graph:
    nodes = [Node("Identity", ["x"], ["y"], {"note": np.array([1.5, 2.5], np.float32)}, "id")]
    return Graph(nodes, [ValueInfo("x", "float32", ("batch", 3))],
                 [ValueInfo("y", "float32", ("batch", 3))], dict(consts),
                 {"opset": 17, "entropy_coding": "zstd"})


CONSTS = {
    "scale": np.array(0.125, np.float32),
    "zero_point": np.array(128, np.uint8),
    "bias": RNG.integers(-1 << 20, 1 << 20, 64).astype(np.int32),
    "ids": np.arange(7, dtype=np.int64),
    "flags": np.array([True, False, True]),
    "half": RNG.standard_normal(33).astype(np.float16),
    "empty": np.zeros((0, 5), np.float32),
    "small int8": np.clip(RNG.laplace(0, 9, 3000), -127, 127).astype(np.int8),
    "large int8": np.clip(RNG.laplace(0, 9, 60_000), -127, 127).astype(np.int8).reshape(
        60, 1000),
    "large float": RNG.standard_normal((64, 64)).astype(np.float32),
    "just under": RNG.standard_normal(compact.PACK_BYTES // 4 - 1).astype(np.float32),
    "just at": RNG.standard_normal(compact.PACK_BYTES // 4).astype(np.float32),
}


def _header(data: bytes) -> dict:
    (n,) = struct.unpack_from("<Q", data, 0)
    return json.loads(data[8:8 + n])


def test_round_trip_every_dtype_on_both_sides_of_the_pack_limit(tmp_path):
    path = str(tmp_path / "m.enn")
    enn.save(_graph(CONSTS), path)
    data = open(path, "rb").read()
    header = _header(data)
    assert header["__metadata__"]["format_version"] == str(compact.VERSION)
    doc = enn.description(data)
    g = enn.load(path)
    for name, a in CONSTS.items():
        assert g.consts[name].dtype == a.dtype and np.array_equal(g.consts[name], a), name
        keys = set(doc["tensors"][name]["blobs"].values())
        assert (keys <= set(doc["packed"])) == (a.nbytes < compact.PACK_BYTES), name
        assert not keys & set(doc["packed"]) or not doc["tensors"][name]["crc32"], name
    assert set(header) == {"__metadata__", compact.GRAPH_KEY, *(
        k for n in ("large int8", "large float", "just at")
        for k in doc["tensors"][n]["blobs"].values())}
    assert doc["tensors"]["large int8"].get("entropy")          # coded alone, as before
    big = g.consts["large float"]
    assert not big.flags.owndata and not big.flags.writeable   # still a view of the map
    np.testing.assert_array_equal(g.nodes[0].attrs["note"], [1.5, 2.5])
    assert g.meta == _graph({}).meta
    again = str(tmp_path / "again.enn")
    enn.save(g, again)
    assert open(again, "rb").read() == data


def test_an_int8_model_is_no_longer_mostly_structure(tmp_path):
    calib, held, _ = digits()
    g = edgenn.quantize(DEMO_MODEL, [calib[i:i + 20] for i in range(0, 100, 20)])
    edgenn.save(g, str(tmp_path / "plain.enn"))
    edgenn.save(g, str(tmp_path / "coded.enn"), entropy=True)
    plain, coded = (tmp_path / "plain.enn").read_bytes(), (tmp_path / "coded.enn").read_bytes()
    weights = sum(a.nbytes for a in g.consts.values())
    # plain: 42.5 KB for 12 KB of constants (30 KB of header); compact: under 16 KB
    assert len(plain) > 3 * weights and len(coded) < 0.4 * len(plain), (len(plain), len(coded))
    assert len(struct.pack("<Q", 0)) + struct.unpack_from("<Q", coded)[0] < 400
    a = edgenn.InferenceSession(str(tmp_path / "plain.enn")).run(None, {"image": held})[0]
    b = edgenn.InferenceSession(str(tmp_path / "coded.enn")).run(None, {"image": held})[0]
    assert np.array_equal(a, b)


def _small() -> bytes:
    return enn.to_bytes(_graph({k: CONSTS[k] for k in ("scale", "bias", "small int8",
                                                       "just at")}))


def test_every_flipped_byte_is_caught():
    data = _small()
    n = struct.unpack_from("<Q", data)[0]
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x5A
        try:
            enn.from_buffer(bytes(bad))
        except ModelFormatError:
            continue
        # only harmless places may load: the header's JSON whitespace padding
        assert 8 <= pos < 8 + n and data[pos:pos + 1] == b" ", pos


@pytest.mark.parametrize("cut", [4, 8, 20, -1, -9, -100])
def test_truncated(cut):
    with pytest.raises(ModelFormatError):
        enn.from_buffer(_small()[:cut])


def _edited(meta_edit=None, doc_edit=None, payload_edit=None, frame=None) -> bytes:
    """_small() with its metadata, description or payload edited, the payload's checksum
    and sizes fixed after the edit unless meta_edit changes them."""
    from safetensors.numpy import save
    data = _small()
    header = _header(data)
    meta = header.pop("__metadata__")
    (n,) = struct.unpack_from("<Q", data, 0)
    body = data[8 + n:]
    lo, hi = header[compact.GRAPH_KEY]["data_offsets"]
    payload = entropy.decompress(body[lo:hi], int(meta["payload_bytes"]))
    text, packed = payload[:int(meta["graph_bytes"])], payload[int(meta["graph_bytes"]):]
    doc = json.loads(text)
    if doc_edit:
        doc_edit(doc)
    text = json.dumps(doc).encode()
    text += b" " * (-len(text) % compact.ALIGN)
    payload = text + packed
    if payload_edit:
        payload = payload_edit(payload)
    meta.update(graph_bytes=str(len(text)), payload_bytes=str(len(payload)),
                payload_crc32=str(enn._crc(payload)))
    if meta_edit:
        meta_edit(meta)
    blobs = {k: np.frombuffer(body[slice(*v["data_offsets"])], _DTYPES[v["dtype"]])
             for k, v in header.items() if k != compact.GRAPH_KEY}
    blobs[compact.GRAPH_KEY] = np.frombuffer(
        frame if frame is not None else entropy.compress(payload), np.uint8)
    return save(blobs, metadata=meta)


_DTYPES = {"F32": np.float32, "U8": np.uint8}


def test_a_payload_bomb_is_refused_before_anything_is_allocated(monkeypatch):
    monkeypatch.setattr(entropy, "SLACK", 1 << 20)    # small here, so the test allocates little
    bomb = entropy.compress(b"\0" * (8 << 20))         # 8 MB of zeros in a few hundred bytes
    data = _edited(frame=bomb, meta_edit=lambda m: m.update(payload_bytes=str(8 << 20)))
    with pytest.raises(ModelFormatError, match="implausible expansion"):
        enn.from_buffer(data)
    data = _edited(meta_edit=lambda m: m.update(payload_bytes=str(1 << 60)))
    with pytest.raises(ModelFormatError, match="implausible expansion"):
        enn.from_buffer(data)


def _key(doc, name):
    return doc["tensors"][name]["blobs"]["data"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(meta_edit=lambda m: m.update(payload_bytes=str(int(m["payload_bytes"]) - 1))),
     "declared"),
    (dict(meta_edit=lambda m: m.update(payload_bytes=str(int(m["payload_bytes"]) + 1))),
     "declared"),
    (dict(meta_edit=lambda m: m.update(graph_bytes=str(int(m["payload_bytes"]) + 1))),
     "larger than its payload"),
    (dict(meta_edit=lambda m: m.update(graph_bytes="ten")), "not integers"),
    (dict(meta_edit=lambda m: m.pop("payload_crc32")), "not integers"),
    (dict(meta_edit=lambda m: m.update(payload_crc32="12")), "checksum"),
    (dict(frame=b"\x28\xb5\x2f\xfd" + bytes(40)), "graph frame"),
    (dict(payload_edit=lambda p: b"\xff" + p[1:]), "corrupt graph description"),
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(2, 1 << 40)),
     "outside"),
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(2, 4)), "outside"),
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(1, [1 << 62, 4])),
     "bad shape"),
    # a product of 300 4300-digit dims: refused before multiplying (it would take seconds)
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(1, [10 ** 4299] * 300)),
     "bad shape"),
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(0, "object")),
     "bad entry"),
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(1, [-1])),
     "bad shape"),
    (dict(doc_edit=lambda d: d["packed"][_key(d, "bias")].__setitem__(
        2, d["packed"][_key(d, "scale")][2])), "overlap"),
    (dict(doc_edit=lambda d: d["tensors"]["small int8"].update(
        entropy={"data": {"coder": "zstd", "dtype": "uint8", "shape": [64]}})),
     "packed in the graph frame"),
    (dict(meta_edit=lambda m: m.update(payload_bytes="1e999")), "not integers"),
    (dict(meta_edit=lambda m: m.update(graph_bytes=str(int(m["graph_bytes"]) - 1))),
     "not padded"),
    (dict(doc_edit=lambda d: d.update(packed=[1])), "not an object"),
    (dict(doc_edit=lambda d: d["packed"].pop(_key(d, "bias"))), "corrupt graph"),
    (dict(doc_edit=lambda d: d["packed"].update(
        {_key(d, "just at"): ["uint8", [0], 0]})), "shares its key"),
])
def test_inconsistent_compact_files_are_format_errors(kwargs, message):
    with pytest.raises(ModelFormatError, match=message):
        enn.from_buffer(_edited(**kwargs))


def test_a_packed_index_in_a_plain_file_is_refused():
    g = _graph({"scale": CONSTS["scale"]})
    g.meta.pop("entropy_coding")
    data = enn.to_bytes(g)
    header = _header(data)
    meta = header["__metadata__"]
    assert meta["format_version"] == str(enn.PLAIN_VERSION)
    doc = json.loads(meta["graph"])
    doc["packed"] = {}
    meta["graph"] = json.dumps(doc)
    meta["graph_crc32"] = str(enn._crc(meta["graph"].encode()))
    text = json.dumps(header).encode()
    (n,) = struct.unpack_from("<Q", data, 0)
    with pytest.raises(ModelFormatError, match="packed index outside"):
        enn.from_buffer(struct.pack("<Q", len(text)) + text + data[8 + n:])
