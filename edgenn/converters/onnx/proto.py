"""A bounded reader of ONNX files: the part of onnx.proto the importer uses, read from the
protobuf wire format with no dependency beyond NumPy (so the runtime-only install loads
.onnx, and loading does not pay for `import onnx`).

Messages become small Python objects whose fields carry onnx.proto's names (`node.input`,
`attr.ints`, `model.graph.initializer`), so the converters read them as they read
onnx's own classes. Tensors become NumPy arrays directly (`Tensor.array`).

Hostile input ends in a ModelFormatError, in memory bounded by the file's size:
every length is checked against the bytes that remain, varints stop at 10 bytes,
sub-graphs and types nest at most MAX_DEPTH deep, the objects made are counted
(MAX_ITEMS), a tensor's data must be exactly as long as its dims say, and external data
is read only from files inside the model's folder, within their size.
"""
from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from ...errors import ModelFormatError, ModelNotFoundError, UnsupportedOpError

MAX_DEPTH = 64             # nested graphs (If / Loop bodies) and nested types
MAX_ITEMS = 1 << 22        # nodes, names, attributes, dims, list values ... in one file
MAX_RANK = 64              # dims of a tensor (NumPy's own limit)

# wire types
VARINT, I64, LEN, I32 = 0, 1, 2, 5

# TensorProto.DataType -> little-endian NumPy dtype
TENSOR_DTYPES = {1: "<f4", 2: "u1", 3: "i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8",
                 9: "?", 10: "<f2", 11: "<f8", 12: "<u4", 13: "<u8", 14: "<c8", 15: "<c16"}
# the types NumPy lacks, read as ml_dtypes' (their bits in raw_data or int32_data) where
# ml_dtypes is installed, as onnx.numpy_helper reads them
ML_DTYPES = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
             20: "float8_e5m2fnuz", 21: "uint4", 22: "int4"}
PACKED_4BIT = (21, 22)      # two values a byte, the first in the low nibble
UNSUPPORTED_DTYPES = {8: "string", 23: "float4e2m1"}

# AttributeProto.AttributeType
FLOAT, INT, STRING, TENSOR, GRAPH, FLOATS, INTS, STRINGS, TENSORS, GRAPHS = range(1, 11)
SPARSE_TENSOR, SPARSE_TENSORS, TYPE_PROTO, TYPE_PROTOS = range(11, 15)
EXTERNAL = 1               # TensorProto.DataLocation


class Reader:
    """The bytes of one protobuf message tree and the budget of what reading it may make.
    `base`: the folder external data is read from (None: refused)."""

    def __init__(self, data, base: str | None):
        self.data = data
        self.base = base
        self.items = 0
        self.depth = 0

    def count(self, n: int = 1) -> None:
        self.items += n
        if self.items > MAX_ITEMS:
            raise ModelFormatError(f"the ONNX model has more than {MAX_ITEMS} items")

    def fields(self, start: int, end: int, what: str):
        """(field number, wire type, value) of each field in data[start:end]; value: the
        int of a varint, the (start, end) span of a length-delimited field, the offset of
        a fixed 32 / 64-bit one."""
        pos = start
        while pos < end:
            key, pos = self.varint(pos, end, what)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise ModelFormatError(f"{what}: field number 0 at byte {pos}")
            if wire == VARINT:
                value, pos = self.varint(pos, end, what)
            elif wire == LEN:
                n, pos = self.varint(pos, end, what)
                if n > end - pos:
                    raise ModelFormatError(f"{what}: a field of {n} bytes where "
                                           f"{end - pos} remain (truncated?)")
                value, pos = (pos, pos + n), pos + n
            elif wire in (I32, I64):
                size = 4 if wire == I32 else 8
                if size > end - pos:
                    raise ModelFormatError(f"{what}: truncated at byte {pos}")
                value, pos = pos, pos + size
            else:
                raise ModelFormatError(f"{what}: wire type {wire} (field {number}) at "
                                       f"byte {pos}")
            yield number, wire, value

    def varint(self, pos: int, end: int, what: str) -> tuple[int, int]:
        data = self.data
        result = shift = 0
        while True:
            if pos >= end or shift >= 70:
                raise ModelFormatError(f"{what}: truncated or overlong varint at byte {pos}")
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result & 0xFFFFFFFFFFFFFFFF, pos
            shift += 7

    def text(self, span, what: str) -> str:
        self.count()
        try:
            return bytes(self.data[span[0]:span[1]]).decode("utf-8")
        except UnicodeDecodeError:
            raise ModelFormatError(f"{what}: a name is not valid UTF-8: "
                                   f"{bytes(self.data[span[0]:span[1]])[:40]!r}") from None

    def blob(self, span) -> bytes:
        self.count()
        return bytes(self.data[span[0]:span[1]])

    def f32(self, pos: int) -> float:
        return struct.unpack_from("<f", self.data, pos)[0]

    def nested(self, what: str):
        return _Nested(self, what)


class _Nested:
    def __init__(self, reader: Reader, what: str):
        self.reader, self.what = reader, what

    def __enter__(self):
        self.reader.depth += 1
        if self.reader.depth > MAX_DEPTH:
            raise ModelFormatError(f"{self.what}: nested more than {MAX_DEPTH} deep")

    def __exit__(self, *exc):
        self.reader.depth -= 1


def signed(v: int) -> int:
    """A varint's 64 bits as the int64 they encode."""
    return v - (1 << 64) if v >= 1 << 63 else v


def packed_varints(r: Reader, span, what: str) -> np.ndarray:
    """A packed repeated varint field as uint64 (two's complement for negative int32 /
    int64), decoded with NumPy: byte i ends a number when its top bit is clear."""
    raw = np.frombuffer(r.data, np.uint8, span[1] - span[0], span[0])
    if raw.size == 0:
        return np.zeros(0, np.uint64)
    ends = np.flatnonzero(raw < 0x80)
    if ends.size == 0 or ends[-1] != raw.size - 1:
        raise ModelFormatError(f"{what}: a packed varint runs past its field")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise ModelFormatError(f"{what}: an overlong varint")
    r.count(int(ends.size) // 64)
    group = np.repeat(np.arange(ends.size), lengths)
    shift = (np.arange(raw.size) - starts[group]) * 7
    parts = (raw & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts)


class Repeated:
    """A repeated scalar field that may come packed (one LEN field) or not (one field a
    value), in any mix, as protobuf allows. Short runs are decoded in Python, long packed
    ones (tensor data) with NumPy."""

    SHORT = 128            # bytes of a packed varint run decoded in Python

    def __init__(self):
        self.values: list = []     # Python numbers, in order, before any chunk
        self.chunks: list = []     # NumPy arrays (values flushed into one first)

    def _flush(self, dtype) -> None:
        if self.values:
            self.chunks.append(np.array(self.values, dtype))
            self.values = []

    def add_varint(self, r: Reader, wire: int, value, what: str) -> None:
        if wire == VARINT:
            r.count()
            self.values.append(value)
        elif wire == LEN and value[1] - value[0] <= self.SHORT:
            pos, end = value
            while pos < end:
                v, pos = r.varint(pos, end, what)
                self.values.append(v)
            r.count()
        elif wire == LEN:
            self._flush(np.uint64)
            self.chunks.append(packed_varints(r, value, what))
        else:
            raise ModelFormatError(f"{what}: wire type {wire} for an integer list")

    def add_fixed(self, r: Reader, wire: int, value, dtype: str, what: str) -> None:
        size = np.dtype(dtype).itemsize
        if wire == (I32 if size == 4 else I64):
            r.count()
            self.values.append(struct.unpack_from("<f" if size == 4 else "<d", r.data,
                                                  value)[0])
        elif wire == LEN:
            n = value[1] - value[0]
            if n % size:
                raise ModelFormatError(f"{what}: {n} bytes of {dtype} values")
            r.count(n // size // 64 + 1)
            self._flush(dtype)
            self.chunks.append(np.frombuffer(r.data, dtype, n // size, value[0]))
        else:
            raise ModelFormatError(f"{what}: wire type {wire} for a {dtype} list")

    def array(self, dtype) -> np.ndarray:
        self._flush(dtype)
        if not self.chunks:
            return np.zeros(0, dtype)
        if len(self.chunks) == 1:
            return self.chunks[0].astype(dtype)
        return np.concatenate(self.chunks).astype(dtype, copy=False)

    def ints(self) -> list[int]:
        """The values as int64 (two's complement), as a list."""
        if not self.chunks:
            return [signed(v) for v in self.values]
        return self.array(np.uint64).view(np.int64).tolist()

    def floats(self) -> list[float]:
        if not self.chunks:
            return list(self.values)
        return self.array(np.float32).tolist()


class Tensor:
    """TensorProto: name, dims, data_type, and `array()`, the NumPy value (a copy the
    caller owns; external data read from the model's folder)."""

    __slots__ = ("name", "dims", "data_type", "raw", "typed", "location", "external",
                 "doc_string", "reader")

    def __init__(self, r: Reader, span, what: str):
        self.name, self.data_type, self.doc_string = "", 0, ""
        self.raw, self.location, self.external, self.reader = None, 0, {}, r
        dims, self.typed = Repeated(), {}
        for number, wire, value in r.fields(*span, what):
            if number == 1:
                if wire == LEN and value[1] - value[0] > 10 * MAX_RANK:
                    raise ModelFormatError(f"{what}: more than {MAX_RANK} dims")
                dims.add_varint(r, wire, value, what)
            elif number == 2 and wire == VARINT:
                self.data_type = value
            elif number == 8 and wire == LEN:
                self.name = r.text(value, what)
            elif number == 9 and wire == LEN:
                self.raw = value
            elif number in (4, 5, 7, 10, 11):      # float, int32, int64, double, uint64
                rep = self.typed.setdefault(number, Repeated())
                if number == 4:
                    rep.add_fixed(r, wire, value, "<f4", what)
                elif number == 10:
                    rep.add_fixed(r, wire, value, "<f8", what)
                else:
                    rep.add_varint(r, wire, value, what)
            elif number == 6:
                self.typed[6] = True               # string_data
            elif number == 13 and wire == LEN:
                key, val = _entry(r, value, what)
                self.external[key] = val
            elif number == 14 and wire == VARINT:
                self.location = value
            elif number == 12 and wire == LEN:
                self.doc_string = r.blob(value).decode("utf-8", "replace")
        self.dims = dims.ints()
        if len(self.dims) > MAX_RANK:
            raise ModelFormatError(f"{what}: more than {MAX_RANK} dims")
        if any(d < 0 for d in self.dims):
            raise ModelFormatError(f"tensor {self.name!r}: negative dims {self.dims}")

    def array(self) -> np.ndarray:
        what = f"tensor {self.name!r}"
        if self.data_type in UNSUPPORTED_DTYPES or 6 in self.typed:
            kind = UNSUPPORTED_DTYPES.get(self.data_type, "string")
            raise UnsupportedOpError({f"{kind} tensor": [self.name]},
                                     f"{kind} tensors are not supported")
        count = 1
        for d in self.dims:
            count *= d
        if self.data_type in ML_DTYPES:
            return self._ml_dtype(count, what)
        if self.data_type not in TENSOR_DTYPES:
            raise ModelFormatError(f"{what}: unknown data type {self.data_type}")
        dtype = np.dtype(TENSOR_DTYPES[self.data_type])
        if self.location == EXTERNAL:
            flat = self._external(dtype, count, what)
        elif self.raw is not None:
            n = self.raw[1] - self.raw[0]
            if n != count * dtype.itemsize:
                raise ModelFormatError(f"{what}: {n} bytes of data for dims {self.dims} "
                                       f"({count * dtype.itemsize} expected)")
            flat = np.frombuffer(self.reader.data, dtype, count, self.raw[0])
        else:
            flat = self._typed(dtype, count, what)
        return flat.astype(dtype.newbyteorder("="), copy=True).reshape(self.dims)

    def _ml_dtype(self, count: int, what: str) -> np.ndarray:
        """bfloat16 / float8: the bits read as unsigned integers, viewed as ml_dtypes'."""
        name = ML_DTYPES[self.data_type]
        try:
            import ml_dtypes
        except ImportError:
            raise UnsupportedOpError({f"{name} tensor": [self.name]},
                                     f"{name} tensors need the ml_dtypes package") from None
        target = np.dtype(getattr(ml_dtypes, name))
        packed = self.data_type in PACKED_4BIT
        bits = np.dtype(f"<u{target.itemsize}")
        saved, dims = (self.data_type, self.dims)
        self.data_type = 4 if target.itemsize == 2 else 2
        if packed:
            self.dims = [(count + 1) // 2]
        try:
            raw = self.array().astype(bits.newbyteorder("="))
        finally:
            self.data_type, self.dims = saved, dims
        if not packed:
            return raw.view(target)
        nibbles = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(-1)[:count]
        if name == "int4":
            nibbles = nibbles.astype(np.int8)
            nibbles[nibbles > 7] -= 16
        return nibbles.astype(target).reshape(dims)

    def _typed(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        """The value from the typed fields: float_data (float, complex64), double_data
        (double, complex128), int64_data, uint64_data (uint32, uint64), and int32_data for
        every narrower type (float16 as its bits)."""
        kind = dtype.kind + str(dtype.itemsize)
        field = {"f4": 4, "c8": 4, "f8": 10, "c16": 10, "i8": 7, "u4": 11, "u8": 11}.get(kind, 5)
        rep = self.typed.get(field)
        values = rep.array(np.float32 if field == 4 else np.float64 if field == 10
                           else np.uint64) if rep else np.zeros(0)
        want = count * (2 if dtype.kind == "c" else 1)
        if values.size != want:
            raise ModelFormatError(f"{what}: {values.size} values for dims {self.dims} "
                                   f"({want} expected)")
        if dtype.kind == "c":
            return values.view(dtype.newbyteorder("="))
        if dtype == np.float16:
            return values.astype(np.uint16).view(np.float16)
        if dtype.kind in "iu?b":
            return values.view(np.int64).astype(dtype) if dtype.kind != "b" else values != 0
        return values.astype(dtype)

    def _external(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        """Data kept beside the model: `location` a file in the model's folder (no absolute
        path, no way out of it), `offset` and `length` within that file."""
        location = self.external.get("location", "")
        if self.reader.base is None:
            raise ModelFormatError(f"{what}: its data is in an external file "
                                   f"({location!r}); load the model from its path")
        base = os.path.realpath(self.reader.base)
        path = os.path.realpath(os.path.join(base, location))
        if not location or os.path.isabs(location) or os.path.commonpath([base, path]) != base:
            raise ModelFormatError(f"{what}: external data location {location!r} is not "
                                   f"a file inside the model's folder")
        try:
            offset = int(self.external.get("offset", "0") or 0)
            length = int(self.external.get("length", "-1") or -1)
        except ValueError:
            raise ModelFormatError(f"{what}: bad external data offset / length") from None
        nbytes = count * dtype.itemsize
        if length not in (-1, nbytes) or offset < 0:
            raise ModelFormatError(f"{what}: external data of {length} bytes at {offset} "
                                   f"for dims {self.dims} ({nbytes} expected)")
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if offset + nbytes > size:
                    raise ModelFormatError(f"{what}: external data {location!r} holds "
                                           f"{size} bytes, {offset + nbytes} needed")
                if nbytes == 0:
                    return np.zeros(0, dtype)
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    return np.frombuffer(mm, dtype, count, offset).copy()
        except OSError as exc:
            raise ModelFormatError(f"{what}: cannot read external data {location!r}: "
                                   f"{exc}") from exc


class Attribute:
    """AttributeProto: name, type, ref_attr_name and the value fields of onnx.proto
    (f, i, s, t, g, floats, ints, strings, tensors, graphs); `value()` is the one its
    type names, as onnx.helper.get_attribute_value gives it (tensors as arrays)."""

    __slots__ = ("name", "type", "ref_attr_name", "f", "i", "s", "t", "g", "floats",
                 "ints", "strings", "tensors", "graphs")

    def __init__(self, r: Reader, span, what: str):
        self.name = self.ref_attr_name = ""
        self.type, self.f, self.i, self.s, self.t, self.g = 0, 0.0, 0, b"", None, None
        self.strings, self.tensors, self.graphs = [], [], []
        floats, ints = Repeated(), Repeated()
        for number, wire, value in r.fields(*span, what):
            if number == 1 and wire == LEN:
                self.name = r.text(value, what)
            elif number == 20 and wire == VARINT:
                self.type = value
            elif number == 21 and wire == LEN:
                self.ref_attr_name = r.text(value, what)
            elif number == 2 and wire == I32:
                self.f = r.f32(value)
            elif number == 3 and wire == VARINT:
                self.i = signed(value)
            elif number == 4 and wire == LEN:
                self.s = r.blob(value)
            elif number == 5 and wire == LEN:
                self.t = Tensor(r, value, f"{what}, attribute {self.name!r}")
            elif number == 6 and wire == LEN:
                self.g = Graph(r, value, f"{what}, attribute {self.name!r}")
            elif number in (7, 8):          # lists of Python numbers: counted first
                if wire == LEN:
                    r.count((value[1] - value[0]) // (4 if number == 7 else 1))
                if number == 7:
                    floats.add_fixed(r, wire, value, "<f4", what)
                else:
                    ints.add_varint(r, wire, value, what)
            elif number == 9 and wire == LEN:
                self.strings.append(r.blob(value))
            elif number == 10 and wire == LEN:
                self.tensors.append(Tensor(r, value, f"{what}, attribute {self.name!r}"))
            elif number == 11 and wire == LEN:
                self.graphs.append(Graph(r, value, f"{what}, attribute {self.name!r}"))
            elif number in (22, 23) and self.type in (0, SPARSE_TENSOR, SPARSE_TENSORS):
                self.type = self.type or SPARSE_TENSOR
        self.floats = floats.floats()
        self.ints = ints.ints()

    def value(self):
        kind = self.type
        if kind == FLOAT:
            return self.f
        if kind == INT:
            return self.i
        if kind == STRING:
            return self.s
        if kind == TENSOR:
            if self.t is None:
                raise ModelFormatError(f"attribute {self.name!r} has no tensor")
            return self.t.array()
        if kind == FLOATS:
            return self.floats
        if kind == INTS:
            return self.ints
        if kind == STRINGS:
            return list(self.strings)
        if kind == TENSORS:
            return [t.array() for t in self.tensors]
        if kind in (SPARSE_TENSOR, SPARSE_TENSORS, TYPE_PROTO, TYPE_PROTOS):
            raise UnsupportedOpError({f"attribute of type {kind}": [self.name]},
                                     "sparse-tensor and type attributes are not supported")
        raise ModelFormatError(f"attribute {self.name!r} has no valid type ({kind})")


class Node:
    """NodeProto: input, output, name, op_type, domain, attribute."""

    __slots__ = ("input", "output", "name", "op_type", "domain", "attribute")

    def __init__(self, r: Reader, span, what: str):
        self.input, self.output, self.attribute = [], [], []
        self.name = self.op_type = self.domain = ""
        for number, wire, value in r.fields(*span, what):
            if wire != LEN:
                continue
            if number == 1:
                self.input.append(r.text(value, what))
            elif number == 2:
                self.output.append(r.text(value, what))
            elif number == 3:
                self.name = r.text(value, what)
            elif number == 4:
                self.op_type = r.text(value, what)
            elif number == 7:
                self.domain = r.text(value, what)
            elif number == 5:
                label = f"node {self.name or self.op_type or '?'!r}"
                self.attribute.append(Attribute(r, value, label))
        r.count()


class TensorType:
    """TypeProto, reduced to what the importer asks: `kind` ('tensor', 'sequence', 'map',
    'optional', 'sparse_tensor' or None when unset), and for a tensor its elem_type and
    shape (None when the shape field is absent; else a list of (dim_value or None,
    dim_param))."""

    __slots__ = ("kind", "elem_type", "shape")

    KINDS = {1: "tensor", 4: "sequence", 5: "map", 8: "sparse_tensor", 9: "optional"}

    def __init__(self, r: Reader, span, what: str):
        self.kind, self.elem_type, self.shape = None, 0, None
        with r.nested(what):
            for number, wire, value in r.fields(*span, what):
                if number in self.KINDS and wire == LEN:
                    self.kind = self.KINDS[number]
                    if number == 1:
                        self._tensor(r, value, what)
                    else:       # walked for its bounds only: the importer refuses these
                        for _ in r.fields(*value, what):
                            pass

    def _tensor(self, r: Reader, span, what: str) -> None:
        for number, wire, value in r.fields(*span, what):
            if number == 1 and wire == VARINT:
                self.elem_type = value
            elif number == 2 and wire == LEN:
                self.shape = []
                for n2, w2, v2 in r.fields(*value, what):
                    if n2 == 1 and w2 == LEN:
                        self.shape.append(self._dim(r, v2, what))

    @staticmethod
    def _dim(r: Reader, span, what: str):
        dim_value, dim_param = None, ""
        for number, wire, value in r.fields(*span, what):
            if number == 1 and wire == VARINT:
                dim_value = signed(value)
            elif number == 2 and wire == LEN:
                dim_param = r.text(value, what)
        r.count()
        return dim_value, dim_param


class ValueInfo:
    """ValueInfoProto: name and type (a TensorType; kind None when the type is absent)."""

    __slots__ = ("name", "type")

    def __init__(self, r: Reader, span, what: str):
        self.name, self.type = "", None
        for number, wire, value in r.fields(*span, what):
            if number == 1 and wire == LEN:
                self.name = r.text(value, what)
            elif number == 2 and wire == LEN:
                self.type = TensorType(r, value, f"{what} value {self.name!r}")
        if self.type is None:
            self.type = TensorType(r, (0, 0), what)


class Graph:
    """GraphProto: name, node, initializer, input, output, value_info, doc_string, and
    sparse_initializer (names only: the importer refuses them)."""

    __slots__ = ("name", "node", "initializer", "input", "output", "value_info",
                 "doc_string", "sparse_initializer")

    def __init__(self, r: Reader, span, what: str = "graph"):
        self.name = self.doc_string = ""
        self.node, self.initializer, self.input, self.output = [], [], [], []
        self.value_info, self.sparse_initializer = [], []
        with r.nested(what):
            for number, wire, value in r.fields(*span, what):
                if wire != LEN:
                    continue
                if number == 1:
                    self.node.append(Node(r, value, what))
                elif number == 2:
                    self.name = r.text(value, what)
                elif number == 5:
                    self.initializer.append(Tensor(r, value, f"{what} initializer"))
                elif number == 11:
                    self.input.append(ValueInfo(r, value, f"{what} input"))
                elif number == 12:
                    self.output.append(ValueInfo(r, value, f"{what} output"))
                elif number == 13:
                    self.value_info.append(ValueInfo(r, value, f"{what} value_info"))
                elif number == 10:
                    self.doc_string = r.blob(value).decode("utf-8", "replace")
                elif number == 15:
                    self.sparse_initializer.append(_sparse_name(r, value, what))


def _entry(r: Reader, span, what: str) -> tuple[str, str]:
    """A StringStringEntryProto: (key, value)."""
    key = val = ""
    for number, wire, value in r.fields(*span, what):
        if number == 1 and wire == LEN:
            key = r.text(value, what)
        elif number == 2 and wire == LEN:
            val = r.text(value, what)
    return key, val


def _sparse_name(r: Reader, span, what: str) -> str:
    """A SparseTensorProto's name: that of its values tensor (field 1)."""
    for number, wire, value in r.fields(*span, what):
        if number == 1 and wire == LEN:
            return Tensor(r, value, what).name
    return "?"


class Model:
    """ModelProto: ir_version, opset_import [(domain, version)], producer_name, domain,
    model_version, doc_string, metadata_props {key: value}, graph."""

    __slots__ = ("ir_version", "opset_import", "producer_name", "producer_version",
                 "domain", "model_version", "doc_string", "metadata_props", "graph",
                 "functions")

    def __init__(self, r: Reader):
        self.ir_version = self.model_version = 0
        self.producer_name = self.producer_version = self.domain = self.doc_string = ""
        self.opset_import, self.metadata_props, self.graph = [], {}, None
        self.functions = 0
        what = "model"
        for number, wire, value in r.fields(0, len(r.data), what):
            if number == 1 and wire == VARINT:
                self.ir_version = signed(value)
            elif number == 5 and wire == VARINT:
                self.model_version = signed(value)
            elif wire != LEN:
                continue
            elif number == 7:
                self.graph = Graph(r, value)
            elif number == 8:
                domain, version = "", 0
                for n2, w2, v2 in r.fields(*value, what):
                    if n2 == 1 and w2 == LEN:
                        domain = r.text(v2, what)
                    elif n2 == 2 and w2 == VARINT:
                        version = signed(v2)
                self.opset_import.append((domain, version))
            elif number in (2, 3, 4):
                text = r.text(value, what)
                if number == 2:
                    self.producer_name = text
                elif number == 3:
                    self.producer_version = text
                else:
                    self.domain = text
            elif number == 6:
                self.doc_string = r.blob(value).decode("utf-8", "replace")
            elif number == 14:
                key, val = _entry(r, value, what)
                self.metadata_props[key] = val
            elif number == 25:
                self.functions += 1
        if self.graph is None:
            self.graph = Graph(r, (0, 0))


def parse(data, base: str | None = None) -> Model:
    """A Model from the bytes of an ONNX file; `base`: the folder of the file, where
    external data may be read (None: bytes given directly, external data refused)."""
    try:
        return Model(Reader(data, base))
    except RecursionError:
        raise ModelFormatError("the ONNX model is nested too deeply") from None


def read(path: str) -> Model:
    """A Model from an ONNX file, memory-mapped while it is read (tensors copy their data
    out of the mapping, which closes when the Model is dropped)."""
    try:
        with open(path, "rb") as f:
            base = os.path.dirname(os.path.abspath(path))
            if os.fstat(f.fileno()).st_size == 0:
                return parse(b"", base)
            return parse(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), base)
    except FileNotFoundError as exc:
        raise ModelNotFoundError(f"no such model file: {path!r}") from exc
    except OSError as exc:
        raise ModelFormatError(f"cannot read {path!r}: {exc}") from exc
