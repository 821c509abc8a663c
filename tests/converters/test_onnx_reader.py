"""edgenn's own ONNX reader (converters/onnx/proto.py) and schema table (schemas.py)
against the onnx package: every message field the importer reads, every tensor encoding,
external data, and hostile bytes (truncated, absurd lengths, wrong wire types, deep
nesting), which must end in a ModelFormatError (or a named UnsupportedOpError)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.nodecases import all_cases

from edgenn.converters.onnx import proto, schemas
from edgenn.errors import EdgennError, ModelFormatError, UnsupportedOpError


def _same_value(got, want) -> bool:
    if isinstance(want, onnx.TensorProto):
        want = numpy_helper.to_array(want)
    if isinstance(want, list) and want and isinstance(want[0], onnx.TensorProto):
        want = [numpy_helper.to_array(t) for t in want]
        return len(got) == len(want) and all(_same_value(g, w) for g, w in zip(got, want))
    if isinstance(want, np.ndarray):
        if got.dtype != want.dtype:
            return False
        if want.dtype.kind == "V" or want.dtype.kind == "f" and want.dtype.itemsize < 2:
            got, want = got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")  # ml_dtypes
        return got.dtype == want.dtype and got.shape == want.shape and \
            np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")
    if isinstance(want, float):
        return got == want or (np.isnan(got) and np.isnan(want))
    if isinstance(want, list) and want and isinstance(want[0], float):
        return np.array_equal(np.array(got), np.array(want), equal_nan=True)
    return got == want


def _check_graph(got: proto.Graph, want: onnx.GraphProto):
    assert got.name == want.name
    assert [t.name for t in got.initializer] == [t.name for t in want.initializer]
    for g, w in zip(got.initializer, want.initializer):
        if w.data_location == TensorProto.EXTERNAL or w.data_type in proto.UNSUPPORTED_DTYPES:
            continue
        assert _same_value(g.array(), numpy_helper.to_array(w)), w.name
    for gv, wv in [(got.input, want.input), (got.output, want.output)]:
        assert [v.name for v in gv] == [v.name for v in wv]
        for g, w in zip(gv, wv):
            has_tensor = w.type.HasField("tensor_type")
            assert (g.type.kind == "tensor") == has_tensor
            if has_tensor:
                t = w.type.tensor_type
                assert g.type.elem_type == t.elem_type
                if t.HasField("shape"):
                    assert [(d.dim_value if d.HasField("dim_value") else None, d.dim_param)
                            for d in t.shape.dim] == g.type.shape
                else:
                    assert g.type.shape is None
    assert len(got.node) == len(want.node)
    for g, w in zip(got.node, want.node):
        assert (g.name, g.op_type, g.domain) == (w.name, w.op_type, w.domain)
        assert g.input == list(w.input) and g.output == list(w.output)
        assert [a.name for a in g.attribute] == [a.name for a in w.attribute]
        for ga, wa in zip(g.attribute, w.attribute):
            assert ga.type == wa.type, (w.name, wa.name)
            if wa.type == onnx.AttributeProto.GRAPH:
                _check_graph(ga.g, wa.g)
            elif wa.type == onnx.AttributeProto.GRAPHS:
                for gg, wg in zip(ga.graphs, wa.graphs):
                    _check_graph(gg, wg)
            elif wa.type not in (onnx.AttributeProto.SPARSE_TENSOR,
                                 onnx.AttributeProto.SPARSE_TENSORS,
                                 onnx.AttributeProto.TYPE_PROTO,
                                 onnx.AttributeProto.TYPE_PROTOS):
                want_value = helper.get_attribute_value(wa)
                if isinstance(want_value, onnx.TensorProto) and \
                        want_value.data_type in proto.UNSUPPORTED_DTYPES:
                    continue
                assert _same_value(ga.value(), want_value), (w.name, wa.name)


def test_every_backend_node_model_reads_as_onnx_reads_it():
    """The ONNX backend's node cases (over a thousand models: every op, attribute kind and
    tensor type the standard exercises), field by field against onnx's own parse."""
    cases = all_cases()
    assert len(cases) > 1000
    for case in cases:
        data = case.model.SerializeToString()
        model = proto.parse(data)
        want = onnx.load_from_string(data)
        assert model.opset_import == [(o.domain, o.version) for o in want.opset_import]
        assert model.ir_version == want.ir_version
        _check_graph(model.graph, want.graph)


DTYPES = [TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16,
          TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL,
          TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT32, TensorProto.UINT64,
          TensorProto.COMPLEX64, TensorProto.COMPLEX128, TensorProto.BFLOAT16,
          TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.INT4,
          TensorProto.UINT4]


def _values(dtype: int, n: int, rng) -> np.ndarray:
    """n values spanning the type's range: its extremes, zero, -1 where signed."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    if dtype in (TensorProto.INT4, TensorProto.UINT4):
        lo, hi = (-8, 7) if dtype == TensorProto.INT4 else (0, 15)
        v = rng.integers(lo, hi, n, endpoint=True)
        v[:2] = [lo, hi]
        return v.astype(np_dtype)
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
        v = rng.integers(info.min, info.max, n, dtype=np_dtype, endpoint=True)
        extremes = [info.min, info.max, 0] + ([-1] if info.min < 0 else [])
        v[:len(extremes)] = extremes
        return v
    if np_dtype.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if np_dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np_dtype)
    v = rng.standard_normal(n).astype(np_dtype)
    if np_dtype.kind == "f":
        v[:4] = [np.inf, -np.inf, np.finfo(np_dtype).max, -0.0]
    return v


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: TensorProto.DataType.Name(d))
@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_fields"])
@pytest.mark.parametrize("dims", [(), (0,), (7,), (2, 3, 5)])
def test_tensor_encodings(dtype, raw, dims):
    rng = np.random.default_rng(dtype)
    values = _values(dtype, max(int(np.prod(dims)), 4), rng)[:int(np.prod(dims))]
    t = helper.make_tensor("t", dtype, dims, values.reshape(dims) if raw else values.tolist(),
                           raw=raw) if dtype not in (TensorProto.COMPLEX64,
                                                     TensorProto.COMPLEX128) or not raw \
        else numpy_helper.from_array(values.reshape(dims), "t")
    got = proto.Tensor(proto.Reader(t.SerializeToString(), None),
                       (0, t.ByteSize()), "t").array()
    assert _same_value(got, numpy_helper.to_array(t))
    assert got.flags.writeable and got.flags.c_contiguous


def test_unpacked_repeated_fields_read_as_packed():
    """proto2 writers may emit repeated scalars one field each (unpacked): same values."""
    def varint(v):
        out = bytearray()
        v &= (1 << 64) - 1
        while True:
            out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not out[-1] & 0x80:
                return bytes(out)
    ints = [3, -1, 1 << 40]
    body = b"".join(varint(1 << 3) + varint(d) for d in (3,))          # dims, unpacked
    body += varint(2 << 3) + varint(TensorProto.INT64)
    body += b"".join(varint(7 << 3) + varint(v) for v in ints)          # int64_data
    t = proto.Tensor(proto.Reader(body, None), (0, len(body)), "t")
    assert t.array().tolist() == ints
    floats = np.array([1.5, -2.25], np.float32)
    body = varint(1 << 3) + varint(2) + varint(2 << 3) + varint(TensorProto.FLOAT)
    body += b"".join(varint(4 << 3 | 5) + f.tobytes() for f in floats)  # float_data, I32
    assert proto.Tensor(proto.Reader(body, None), (0, len(body)), "t").array().tolist() \
        == floats.tolist()


def _small_model(n_init: int = 2) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8) * i,
                                     f"w{i}") for i in range(n_init)]
    nodes, prev = [], "x"
    for i in range(n_init):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], f"mm{i}"))
        prev = f"h{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"], "relu"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 8])],
                          [helper.make_tensor_value_info("y", 1, [1, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_external_data_is_read_from_the_models_folder(tmp_path):
    import edgenn
    model = _small_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True,
              location="m.data", size_threshold=0)
    x = np.ones((1, 8), np.float32)
    want = np.maximum(x @ (np.arange(64, dtype=np.float32).reshape(8, 8) * 0) @
                      (np.arange(64, dtype=np.float32).reshape(8, 8)), 0)
    got = edgenn.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # the same bytes given directly have no folder to read the data from
    with pytest.raises(ModelFormatError, match="external"):
        edgenn.InferenceSession(path.read_bytes())


@pytest.mark.parametrize("location", ["../outside.data", "/etc/passwd", "sub/../../x.data",
                                      "", "missing.data"])
def test_external_data_outside_the_folder_or_missing_is_refused(tmp_path, location):
    import edgenn
    (tmp_path / "outside.data").write_bytes(b"\0" * 1024)
    model = _small_model(1)
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    d = tmp_path / "models"
    d.mkdir()
    (d / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelFormatError):
        edgenn.InferenceSession(str(d / "m.onnx"))


def test_external_data_shorter_than_its_tensor_is_refused(tmp_path):
    import edgenn
    model = _small_model(1)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.data",
              size_threshold=0)
    data = tmp_path / "m.data"
    data.write_bytes(data.read_bytes()[:-4])
    with pytest.raises(ModelFormatError, match="external data"):
        edgenn.InferenceSession(str(path))


def test_every_truncation_of_a_model_is_a_model_format_error():
    data = _small_model().SerializeToString()
    for n in range(len(data)):
        try:
            model = proto.parse(data[:n])
            for t in model.graph.initializer:
                t.array()
        except ModelFormatError:
            pass


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not out[-1] & 0x80:
            return bytes(out)


@pytest.mark.parametrize("data, match", [
    (_varint(7 << 3 | 2) + _varint(1 << 60), "truncated"),          # absurd length
    (_varint(7 << 3 | 2) + b"\xff" * 11, "varint"),                  # overlong varint
    (_varint(7 << 3 | 3), "wire type 3"),                            # group start
    (_varint(7 << 3 | 6), "wire type 6"),                            # no such wire type
    (_varint(0 << 3 | 0) + b"\0", "field number 0"),
    (_varint(7 << 3 | 2) + _varint(4) + _varint(1 << 3 | 2) + _varint(9) + b"ab",
     "truncated"),                                                    # node past its graph
])
def test_malformed_wire_format_is_named(data, match):
    with pytest.raises(ModelFormatError, match=match):
        proto.parse(data)


def test_invalid_utf8_names_are_refused():
    node = _varint(3 << 3 | 2) + _varint(2) + b"\xc3\x28"            # name: invalid UTF-8
    graph = _varint(1 << 3 | 2) + _varint(len(node)) + node
    with pytest.raises(ModelFormatError, match="UTF-8"):
        proto.parse(_varint(7 << 3 | 2) + _varint(len(graph)) + graph)


def test_deep_nesting_is_refused_in_bounded_depth():
    """If inside If inside If ...: refused past MAX_DEPTH, not a RecursionError."""
    body = b""
    for _ in range(proto.MAX_DEPTH + 5):
        attr = _varint(1 << 3 | 2) + _varint(8) + b"then_bra" + \
            _varint(20 << 3) + _varint(proto.GRAPH) + _varint(6 << 3 | 2) + \
            _varint(len(body)) + body
        node = _varint(4 << 3 | 2) + _varint(2) + b"If" + _varint(5 << 3 | 2) + \
            _varint(len(attr)) + attr
        body = _varint(1 << 3 | 2) + _varint(len(node)) + node
    with pytest.raises(ModelFormatError, match="nested"):
        proto.parse(_varint(7 << 3 | 2) + _varint(len(body)) + body)


def test_tensor_data_of_the_wrong_length_is_refused():
    t = numpy_helper.from_array(np.zeros((4, 4), np.float32), "w")
    t.dims[0] = 1 << 40                 # declares 2^42 floats, holds 16
    with pytest.raises(ModelFormatError, match="bytes of data"):
        proto.Tensor(proto.Reader(t.SerializeToString(), None), (0, t.ByteSize()),
                     "t").array()


def test_random_corruption_ends_in_named_errors():
    """Bytes flipped at random in a real model: a named error or a model, never another
    exception (the fuzzer, fuzz/run.py onnx, does this at scale)."""
    import edgenn
    data = bytearray(_small_model(3).SerializeToString())
    rng = np.random.default_rng(0)
    for _ in range(300):
        bad = bytearray(data)
        for i in rng.integers(0, len(bad), 3):
            bad[i] = rng.integers(0, 256)
        try:
            edgenn.InferenceSession(bytes(bad))
        except EdgennError:
            pass


def test_unsupported_tensor_types_are_named():
    t = helper.make_tensor("s", TensorProto.STRING, [1], [b"x"])
    with pytest.raises(UnsupportedOpError, match="string tensor"):
        proto.Tensor(proto.Reader(t.SerializeToString(), None), (0, t.ByteSize()),
                     "t").array()


def test_schema_table_matches_the_installed_onnx():
    """The shipped table is onnx's schemas: regenerate it with
    `python -m edgenn.converters.onnx.schemas` when onnx changes."""
    built = schemas.build_table()
    shipped = schemas._table()
    limit = min(shipped["max_opset"], built["max_opset"])

    def upto(table):
        return {op: [v for v in versions if v[0] <= limit]
                for op, versions in table["ops"].items()
                if any(v[0] <= limit for v in versions)}
    assert upto(shipped) == upto(built)


@pytest.mark.parametrize("op, opset", [("Conv", 11), ("MaxPool", 7), ("MaxPool", 12),
                                       ("Resize", 13), ("LSTM", 14), ("Softmax", 11),
                                       ("Softmax", 13), ("ReduceMean", 18), ("NoSuchOp", 13)])
def test_schema_lookup_is_onnx_get_schema(op, opset):
    from edgenn.converters.onnx.importer import schema_defaults
    got = schemas.get(op, opset)
    try:
        want = onnx.defs.get_schema(op, opset)
    except onnx.defs.SchemaError:
        assert got is None
        return
    assert got.since_version == want.since_version
    assert set(got.attributes) == set(want.attributes)
    defaults = schema_defaults(op, opset)
    for name, a in want.attributes.items():
        if a.default_value is not None and a.default_value.type:
            value = helper.get_attribute_value(a.default_value)
            value = value.decode() if isinstance(value, bytes) else value
            if isinstance(value, list):
                value = [v.decode() if isinstance(v, bytes) else v for v in value]
            assert _same_value(defaults[name], value), (op, name)
        else:
            assert name not in defaults


def test_reading_a_model_does_not_import_onnx(tmp_path):
    """Loading .onnx costs no `import onnx` (tested in a child process that refuses it)."""
    import subprocess
    import sys
    path = tmp_path / "m.onnx"
    path.write_bytes(_small_model().SerializeToString())
    code = f"""
import sys
class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("onnx", "ml_dtypes", "google"):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, _Refuse())
import numpy as np, edgenn
out = edgenn.InferenceSession({str(path)!r}).run(None, {{"x": np.ones((1, 8), np.float32)}})
assert out[0].shape == (1, 8)
assert not any(m.split(".")[0] in ("onnx", "ml_dtypes") for m in sys.modules)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "EDGENN_TUNE": "off"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_lists_and_dims_past_their_bounds_are_refused_before_they_are_made():
    """A packed list of millions of ints, or a tensor of 100 dims: refused by count, not
    decoded into millions of Python objects first."""
    ints = _varint(8 << 3 | 2) + _varint(proto.MAX_ITEMS + 10) + b"\x01" * (proto.MAX_ITEMS + 10)
    attr = _varint(1 << 3 | 2) + _varint(1) + b"a" + _varint(20 << 3) + _varint(7) + ints
    node = _varint(5 << 3 | 2) + _varint(len(attr)) + attr
    graph = _varint(1 << 3 | 2) + _varint(len(node)) + node
    with pytest.raises(ModelFormatError, match="items"):
        proto.parse(_varint(7 << 3 | 2) + _varint(len(graph)) + graph)
    t = helper.make_tensor("t", TensorProto.FLOAT, [1] * 100, [1.0])
    with pytest.raises(ModelFormatError, match="dims"):
        proto.Tensor(proto.Reader(t.SerializeToString(), None), (0, t.ByteSize()), "t")
