"""Entropy-coded weights in .enn (graph/entropy.py, compress/entropy_report.py).

- round trips: int8 / uint8 constants of many distributions and shapes come back exactly,
  are coded only where that shrinks them, and a coded file re-saves byte-identically;
- the coder's size against the empirical entropy, bounded by Huffman's redundancy (zstd
  codes literals with Huffman: at most p_max + 0.086 bits per symbol above the entropy,
  Gallager 1978) plus its per-block tables;
- models: weight-only int8 / int4 and int8-quantized digits CNN coded, outputs identical;
- hostile files: corrupt frames, a declared size the frame does not have, a "zip bomb"
  declaring a huge tensor, an unknown coder, a float dtype: all ModelFormatError, nothing
  allocated for the bomb.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from support.quant_data import digits

import edgenn
from edgenn.compress.entropy_report import entropy_report
from edgenn.compress.weights import compress_weights
from edgenn.demo import DEMO_MODEL
from edgenn.errors import ModelFormatError
from edgenn.graph import compact, entropy
from edgenn.graph import format as enn
from edgenn.graph.ir import Graph, Node, ValueInfo

RNG = np.random.default_rng(7)


def _graph(consts: dict) -> Graph:
    """A graph that keeps every constant: y = Identity(x), the constants ride along."""
    nodes = [Node("Identity", ["x"], ["y"], {}, "id")]
    g = Graph(nodes, [ValueInfo("x", "float32", (1,))], [ValueInfo("y", "float32", (1,))],
              dict(consts), {})
    return g


def _laplace_int8(n, scale):
    return np.clip(np.rint(RNG.laplace(0, scale, n)), -127, 127).astype(np.int8)


CASES = {
    "laplace narrow": _laplace_int8(50_000, 3.0).reshape(50, 1000),
    "laplace wide": _laplace_int8(300_000, 25.0).reshape(300, 10, 100),
    "sparse 90%": np.where(RNG.random(400_000) < 0.9, 0, _laplace_int8(400_000, 20)).astype(
        np.int8).reshape(400, 10, 10, 10),
    "all zero": np.zeros((64, 64), np.int8),
    "uniform int8": RNG.integers(-128, 128, 20_000).astype(np.int8),
    "uint8 zero points": RNG.integers(120, 136, 4096).astype(np.uint8),
    "odd shape": _laplace_int8(3 * 7 * 11 * 13, 8.0).reshape(3, 7, 11, 13),
    "too small": _laplace_int8(500, 3.0),
}


def _saved(tmp_path, consts, name="m.enn", entropy_on=True):
    path = tmp_path / name
    edgenn.save(_graph(consts), str(path), entropy=entropy_on)
    return path


def _table(path) -> dict:
    return enn.description(open(path, "rb").read())["tensors"]


def test_round_trip_every_distribution_and_shape(tmp_path):
    consts = dict(CASES, floats=RNG.standard_normal((32, 32)).astype(np.float32))
    path = _saved(tmp_path, consts)
    back = edgenn.load(str(path)).consts
    doc = enn.description(path.read_bytes())
    table = doc["tensors"]
    for name, a in consts.items():
        assert back[name].dtype == a.dtype and np.array_equal(back[name], a), name
        if table[name]["codec"] != "raw":
            continue                                # mostly zeros: the sparse codec's blobs
        coded = bool(table[name].get("entropy"))
        packed = table[name]["blobs"]["data"] in doc["packed"]
        # small blobs ride in the graph frame (coded with it), large ones are coded alone
        assert packed == (a.nbytes < compact.PACK_BYTES), name
        should = not packed and entropy.codable(a) and entropy.encode(a) is not None
        assert coded == should, name
    assert table["laplace narrow"].get("entropy")
    assert table["all zero"]["codec"] == table["sparse 90%"]["codec"] == "sparse"
    assert table["sparse 90%"].get("entropy")      # its mask and int8 values, zstd-coded
    assert not table["uniform int8"].get("entropy")     # incompressible: stays raw
    assert not table["too small"].get("entropy") and not table["floats"].get("entropy")


def test_coded_file_resaves_byte_identically(tmp_path):
    first = _saved(tmp_path, CASES, "a.enn")
    again = tmp_path / "b.enn"
    edgenn.save(edgenn.load(str(first)), str(again))           # entropy=None: as loaded
    assert first.read_bytes() == again.read_bytes()
    plain = tmp_path / "c.enn"
    edgenn.save(edgenn.load(str(first)), str(plain), entropy=False)
    assert not any(e.get("entropy") for e in _table(plain).values())
    assert plain.stat().st_size > first.stat().st_size


@pytest.mark.parametrize("scale", [1.5, 6.0, 25.0])
def test_size_within_the_huffman_bound_of_the_entropy(scale):
    a = _laplace_int8(400_000, scale)
    frame = entropy.encode(a)
    h = entropy.entropy_bits(a)
    p_max = np.bincount(a.view(np.uint8)).max() / a.size
    blocks = -(-a.nbytes // (128 << 10))                 # zstd blocks of <= 128 KB
    bound = h + a.size * (p_max + 0.086) + 8 * (blocks * 256 + 64)
    assert 8 * len(frame) <= bound, (8 * len(frame) / a.size, h / a.size)
    # and zstd does not beat the order-0 entropy by much on i.i.d. symbols
    assert 8 * len(frame) >= 0.98 * h


@pytest.mark.parametrize("bits", [8, 4])
def test_weight_only_models_coded_run_identically(tmp_path, bits):
    x = digits()[1][:16]
    g = edgenn.load(DEMO_MODEL)
    compress_weights(g, bits)
    edgenn.save(g, str(tmp_path / "raw.enn"))
    edgenn.save(g, str(tmp_path / "coded.enn"), entropy=True)
    assert (tmp_path / "coded.enn").stat().st_size < (tmp_path / "raw.enn").stat().st_size
    a = edgenn.InferenceSession(str(tmp_path / "raw.enn")).run(None, {"image": x})[0]
    b = edgenn.InferenceSession(str(tmp_path / "coded.enn")).run(None, {"image": x})[0]
    assert np.array_equal(a, b)
    rep = entropy_report(g)
    # this model's tensors are all small: coded together in the graph frame (near-uniform
    # int8 codes gain nothing there, and cost at most zstd's raw-block framing)
    assert not rep.tensors and rep.group and rep.symbols == rep.group.symbols > 8000
    assert rep.group.coded_bytes < 1.02 * rep.group.raw_bytes
    assert "bits/weight vs entropy" in rep.table() and "in the graph frame" in rep.table()


def test_entropy_report_separates_tensors_coded_alone_from_the_frame():
    big = _laplace_int8(100_000, 9.0).reshape(100, 1000)
    g = _graph({"big": big, "small": _laplace_int8(5000, 9.0), "f": np.ones(9, np.float32)})
    rep = entropy_report(g)
    assert [t.name for t in rep.tensors] == ["big"] and rep.group.raw_bytes == 5000
    frame = entropy.encode(big)
    assert rep.tensors[0].coded_bytes == len(frame)
    assert rep.symbols == 105_000 and rep.coded_bytes < rep.raw_bytes


def test_int8_quantized_model_coded_runs_identically(tmp_path):
    calib, held, _ = digits()
    g = edgenn.quantize(DEMO_MODEL, [calib[i:i + 20] for i in range(0, 100, 20)])
    edgenn.save(g, str(tmp_path / "q.enn"))
    edgenn.save(g, str(tmp_path / "qc.enn"), entropy=True)
    doc = enn.description((tmp_path / "qc.enn").read_bytes())
    int8 = [e for n, e in doc["tensors"].items() if g.consts[n].dtype == np.int8]
    # small int8 weights: coded together in the graph frame
    assert int8 and all(set(e["blobs"].values()) <= set(doc["packed"]) for e in int8)
    assert (tmp_path / "qc.enn").stat().st_size < 0.5 * (tmp_path / "q.enn").stat().st_size
    a = edgenn.InferenceSession(str(tmp_path / "q.enn")).run(None, {"image": held})[0]
    b = edgenn.InferenceSession(str(tmp_path / "qc.enn")).run(None, {"image": held})[0]
    assert np.array_equal(a, b)


# -- hostile files ---------------------------------------------------------------------------

def _rewrite(path, edit_table=None, edit_blob=None):
    """Edit a saved .enn's tensor table and/or one stored blob's bytes, fixing the
    checksums so only the coding is wrong (either layout)."""
    data = bytearray(open(path, "rb").read())
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    body = data[8 + n:]
    compact_layout = meta["format_version"] == "2"
    if compact_layout:
        lo, hi = header.pop(compact.GRAPH_KEY)["data_offsets"]
        payload = compact.decode_payload(np.frombuffer(bytes(body[lo:hi]), np.uint8),
                                         int(meta["payload_bytes"])).tobytes()
        doc = json.loads(payload[:int(meta["graph_bytes"])])
        packed = payload[int(meta["graph_bytes"]):]
    else:
        doc = json.loads(meta["graph"])
    if edit_blob:
        key, fn = edit_blob
        lo, hi = header[key]["data_offsets"]
        body[lo:hi] = fn(bytes(body[lo:hi]))
        for e in doc["tensors"].values():
            if key in e["crc32"]:
                e["crc32"][key] = enn._crc(bytes(body[lo:hi]))
    if edit_table:
        edit_table(doc["tensors"])
    text = json.dumps(doc, separators=(",", ":"))
    if compact_layout:
        from safetensors.numpy import save
        blobs = {k: np.frombuffer(bytes(body[slice(*v["data_offsets"])]), np.uint8)
                 for k, v in header.items()}       # every stored blob as its bytes
        text = text.encode() + b" " * (-len(text.encode()) % compact.ALIGN)
        payload = text + packed
        blobs[compact.GRAPH_KEY] = np.frombuffer(entropy.compress(payload), np.uint8)
        meta.update(graph_bytes=str(len(text)), payload_bytes=str(len(payload)),
                    payload_crc32=str(enn._crc(payload)))
        data = save(blobs, metadata=meta)
        # the blobs' dtypes as they were (saved above as bytes)
        (n,) = struct.unpack_from("<Q", data, 0)
        new = json.loads(data[8:8 + n])
        for k, v in header.items():
            new[k]["dtype"], new[k]["shape"] = v["dtype"], v["shape"]
        raw = json.dumps(new, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        open(path, "wb").write(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
        return
    meta["graph"] = text
    meta["graph_crc32"] = str(enn._crc(meta["graph"].encode()))
    header["__metadata__"] = meta
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    open(path, "wb").write(struct.pack("<Q", len(raw)) + raw + bytes(body))


def _coded_file(tmp_path):
    path = _saved(tmp_path, {"w": CASES["laplace wide"]})
    entry = _table(path)["w"]
    return path, entry["blobs"]["data"]


def _spec(fn):
    def edit(table):
        fn(table["w"]["entropy"]["data"])
    return edit


@pytest.mark.parametrize("edit", [
    lambda key: (key, lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:]),   # a flipped byte
    lambda key: (key, lambda b: b[:-9] + b"\0" * 9),                         # a cut tail
], ids=["flipped-byte", "cut-tail"])
def test_corrupt_frames_are_format_errors(tmp_path, edit):
    path, key = _coded_file(tmp_path)
    _rewrite(path, edit_blob=edit(key))
    with pytest.raises(ModelFormatError, match="tensor 'w'"):
        edgenn.load(str(path))


@pytest.mark.parametrize("edit, message", [
    (_spec(lambda s: s.update(shape=[300, 10, 99])), "declared"),        # fewer bytes
    (_spec(lambda s: s.update(shape=[300, 10, 101])), "declared"),       # more bytes
    (_spec(lambda s: s.update(shape=[1 << 20, 1 << 20, 1 << 10])), "implausible expansion"),
    (_spec(lambda s: s.update(coder="ans")), "unknown entropy coder"),
    (_spec(lambda s: s.update(dtype="float32")), "int8 / uint8"),
    (_spec(lambda s: s.update(shape=[-1, 3])), "bad shape"),
])
def test_inconsistent_coding_is_a_format_error(tmp_path, edit, message):
    path, _ = _coded_file(tmp_path)
    _rewrite(path, edit_table=edit)
    with pytest.raises(ModelFormatError, match=message):
        edgenn.load(str(path))


def test_expansion_budget_is_for_the_whole_file(tmp_path, monkeypatch):
    """Each constant tensor alone fits the budget; together they pass it (SLACK made
    small here so the test allocates little; sevens, not zeros: those go sparse)."""
    monkeypatch.setattr(entropy, "SLACK", 1 << 20)
    path = _saved(tmp_path, {f"z{i}": np.full(600_000, 7, np.int8) for i in range(3)})
    edgenn.load(str(_saved(tmp_path, {"z": np.full(600_000, 7, np.int8)}, "one.enn")))
    with pytest.raises(ModelFormatError, match="implausible expansion"):
        edgenn.load(str(path))


def test_a_coded_blob_named_by_many_tensors_is_refused(tmp_path):
    """A bomb that points hundreds of tensor entries at one small frame (each would add
    the frame's size to the budget again) is refused before anything is decoded."""
    path, key = _coded_file(tmp_path)

    def share(table):
        for i in range(300):
            table[f"copy{i}"] = json.loads(json.dumps(table["w"]))
    _rewrite(path, edit_table=share)
    with pytest.raises(ModelFormatError, match="missing or shared"):
        edgenn.load(str(path))


def test_a_coded_blob_without_a_checksum_is_refused(tmp_path):
    path, key = _coded_file(tmp_path)
    _rewrite(path, edit_table=lambda t: t["w"]["crc32"].clear())
    with pytest.raises(ModelFormatError, match="no checksum"):
        edgenn.load(str(path))


# -- the "sparse" codec: pruned tensors as a nonzero mask and values --------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int32"])
def test_sparse_codec_round_trip(tmp_path, dtype):
    dense = RNG.standard_normal((64, 48)) * 10
    consts = {}
    for z in (0.0, 0.49, 0.5, 0.8, 0.99, 1.0):
        a = dense.astype(dtype)
        a[RNG.random(a.shape) < z] = 0
        consts[f"z{z}"] = a
    consts["nan"] = np.where(RNG.random((40, 40)) < 0.7, 0, np.nan).astype(np.float32) \
        if dtype == "float32" else np.zeros((40, 40), dtype)
    path = _saved(tmp_path, consts, entropy_on=False)
    table = _table(path)
    back = edgenn.load(str(path)).consts
    for name, a in consts.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape
        assert np.array_equal(back[name], a, equal_nan=True), name
        zeros = 1 - np.count_nonzero(a) / a.size
        assert (table[name]["codec"] == "sparse") == (zeros >= 0.5), (name, zeros)
    again = tmp_path / "again.enn"
    edgenn.save(edgenn.load(str(path)), str(again))
    assert again.read_bytes() == path.read_bytes()


def test_pruned_model_file_shrinks_with_the_sparse_codec(tmp_path):
    from edgenn.compress.prune import sparsify
    g = edgenn.load(DEMO_MODEL)
    edgenn.save(g, str(tmp_path / "dense.enn"))
    sparsify(g, 0.8, skip_first=False)
    edgenn.save(g, str(tmp_path / "sparse.enn"))
    edgenn.save(g, str(tmp_path / "sparse_coded.enn"), entropy=True)
    sizes = [(tmp_path / f).stat().st_size for f in ("dense.enn", "sparse.enn", "sparse_coded.enn")]
    # the masks of this small model gain little from zstd (its header entries cost bytes)
    assert sizes[1] < 0.8 * sizes[0] and sizes[2] < 1.01 * sizes[1], sizes
    x = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))["images"][:8]
    a = edgenn.InferenceSession(g).run(None, {"image": x})[0]
    b = edgenn.InferenceSession(str(tmp_path / "sparse_coded.enn")).run(None, {"image": x})[0]
    assert np.array_equal(a, b)


@pytest.mark.parametrize("edit, message", [
    (lambda e: e["params"].update(shape=[64, 47]), "mask of"),
    (lambda e: e["params"].update(dtype="float64"), "values"),
    (lambda e: e["params"].update(dtype="object"), "bad sparse"),
    (lambda e: e["params"].update(shape=[-64, 48]), "bad sparse"),
])
def test_inconsistent_sparse_tensors_are_format_errors(tmp_path, edit, message):
    a = RNG.standard_normal((64, 48)).astype(np.float32)
    a[RNG.random(a.shape) < 0.8] = 0
    path = _saved(tmp_path, {"w": a}, entropy_on=False)
    _rewrite(path, edit_table=lambda t: edit(t["w"]))
    with pytest.raises(ModelFormatError, match=message):
        edgenn.load(str(path))


def test_sparse_mask_and_values_disagreeing_is_a_format_error(tmp_path):
    a = RNG.standard_normal((64, 48)).astype(np.float32)
    a[RNG.random(a.shape) < 0.8] = 0
    path = _saved(tmp_path, {"w": a}, entropy_on=False)
    mask_key = _table(path)["w"]["blobs"]["mask"]
    _rewrite(path, edit_blob=(mask_key, lambda b: bytes([b[0] ^ 0x01]) + b[1:]))
    with pytest.raises(ModelFormatError, match="mask bits set"):
        edgenn.load(str(path))
