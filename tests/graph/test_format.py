"""The .enn container: round trip, zero-copy load, and every kind of corruption rejected."""
import json
import struct

import numpy as np
import pytest

from edgenn.errors import ModelFormatError
from edgenn.graph import format as enn
from edgenn.graph.ir import Graph, Node, ValueInfo


def small_graph():
    rng = np.random.default_rng(0)
    consts = {"w": rng.standard_normal((4, 3)).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32),
              "scalar": np.array(7, np.int64), "empty": np.zeros((0, 2), np.float32),
              "mask": np.array([True, False])}
    nodes = [Node("Gemm", ["x", "w", "b"], ["h"], {"transB": 1, "alpha": 0.5,
                                                  "v": np.array([1.5, np.inf], np.float32)},
                  "gemm"),
             Node("Relu", ["h"], ["y"], {}, "relu")]
    return Graph(nodes, [ValueInfo("x", "float32", ("batch", 3))],
                 [ValueInfo("y", "float32", ("batch", 4))], consts,
                 {"opset": 17, "fusions": {"x": 1}})


def test_round_trip_is_exact_and_zero_copy(tmp_path):
    g = small_graph()
    path = str(tmp_path / "m.enn")
    enn.save(g, path)
    h = enn.load(path)
    assert [(n.op, n.name, n.inputs, n.outputs) for n in h.nodes] == \
        [(n.op, n.name, n.inputs, n.outputs) for n in g.nodes]
    assert h.nodes[0].attrs["transB"] == 1 and h.nodes[0].attrs["alpha"] == 0.5
    np.testing.assert_array_equal(h.nodes[0].attrs["v"], g.nodes[0].attrs["v"])
    assert h.inputs == g.inputs and h.outputs == g.outputs and h.meta == g.meta
    for name, v in g.consts.items():
        assert h.consts[name].dtype == v.dtype and h.consts[name].shape == v.shape
        np.testing.assert_array_equal(h.consts[name], v)
    w = h.consts["w"]
    assert not w.flags.owndata and not w.flags.writeable  # a view into the memory map


def _bytes():
    return bytearray(enn.to_bytes(small_graph()))


def test_every_flipped_byte_is_caught():
    data = _bytes()
    caught = 0
    for pos in range(0, len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x5A
        try:
            enn.from_buffer(bytes(bad))
        except ModelFormatError:
            caught += 1
        else:  # only harmless places may load: JSON whitespace padding of the header
            n = struct.unpack_from("<Q", data)[0]
            assert 8 <= pos < 8 + n and data[pos:pos + 1] == b" ", pos
    assert caught >= len(data) - 8


@pytest.mark.parametrize("cut", [0, 4, 8, 20, -1, -9, -200])
def test_truncated(cut):
    data = bytes(_bytes())
    with pytest.raises(ModelFormatError):
        enn.from_buffer(data[:cut] if cut else b"")


def test_trailing_garbage():
    with pytest.raises(ModelFormatError, match="trailing"):
        enn.from_buffer(bytes(_bytes()) + b"\0" * 4)


def _rewrite_meta(edit):
    data = bytes(_bytes())
    n = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8:8 + n])
    edit(header["__metadata__"])
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


def test_future_version_says_upgrade():
    data = _rewrite_meta(lambda m: m.update(format_version="99"))
    with pytest.raises(ModelFormatError, match="newer edgenn"):
        enn.from_buffer(data)


def test_wrong_magic():
    data = _rewrite_meta(lambda m: m.update(format="something-else"))
    with pytest.raises(ModelFormatError, match="not an edgenn model"):
        enn.from_buffer(data)
    from safetensors.numpy import save
    with pytest.raises(ModelFormatError, match="not an edgenn model"):
        enn.from_buffer(save({"a": np.zeros(3, np.float32)}))


def test_graph_checksum():
    def tamper(m):
        m["graph"] = m["graph"].replace('"relu"', '"RELU"')
    with pytest.raises(ModelFormatError, match="checksum"):
        enn.from_buffer(_rewrite_meta(tamper))


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ModelFormatError):
        enn.load(str(tmp_path / "nope.enn"))
    (tmp_path / "empty.enn").write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty"):
        enn.load(str(tmp_path / "empty.enn"))


@pytest.mark.parametrize("edit", [
    lambda m: m.update(format_version=["1"]),          # a fuzz finding: a list, not a str
    lambda m: m.update(graph={"nodes": []}),
    lambda m: m.update(graph_crc32=12),
])
def test_metadata_of_the_wrong_type(edit):
    with pytest.raises(ModelFormatError, match="wrong type"):
        enn.from_buffer(_rewrite_meta(edit))


@pytest.mark.parametrize("doc_edit", [
    lambda d: d.update(nodes=[1, 2]),
    lambda d: d["nodes"][0].update(inputs=[3]),
    lambda d: d["nodes"][0].update(attrs=[]),
    lambda d: d.update(inputs=[["x", "float32", "batch"]]),
    lambda d: d.update(tensors=[]),
    lambda d: d["tensors"].update(w={"codec": "raw", "blobs": [], "crc32": {}}),
    lambda d: d.update(meta=None),
    # a string dtype of 25M characters an element: 100 MB from a 400-byte file
    lambda d: d["nodes"][0]["attrs"].update(
        v={"__ndarray__": "U25000000", "shape": [1], "data": ["a"]}),
])
def test_hostile_graph_description_with_a_valid_checksum(doc_edit):
    """A crafted file whose graph text has the right CRC but the wrong structure."""
    def tamper(m):
        doc = json.loads(m["graph"])
        doc_edit(doc)
        m["graph"] = json.dumps(doc)
        m["graph_crc32"] = str(enn._crc(m["graph"].encode()))
    with pytest.raises(ModelFormatError, match="corrupt graph description"):
        enn.from_buffer(_rewrite_meta(tamper))
