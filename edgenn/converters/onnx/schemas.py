"""ONNX operator schemas as the importer needs them, without the onnx package: for every
op of the default domain, each version's `since_version`, attribute names and defaults.

The table (schemas.json beside this file) is generated from onnx's own schemas by
`python -m edgenn.converters.onnx.schemas` and checked against the installed onnx by
tests/converters/test_onnx_reader.py. `get(op, opset)` is onnx.defs.get_schema's answer: the newest
version whose since_version <= opset.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

import numpy as np

TABLE = os.path.join(os.path.dirname(__file__), "schemas.json")


@dataclass(frozen=True)
class Schema:
    op: str
    since_version: int
    attributes: dict          # name -> default value, or None where the schema has none


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    with open(TABLE) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def get(op: str, opset: int) -> Schema | None:
    """The schema of `op` at `opset`, or None where the op does not exist at that opset."""
    best = None
    for since, attrs in _table()["ops"].get(op, ()):
        if since <= opset and (best is None or since > best[0]):
            best = (since, attrs)
    if best is None:
        return None
    return Schema(op, best[0], {k: _decode(v) for k, v in best[1].items()})


def _decode(value):
    """JSON -> the value onnx.helper gives a default attribute (strings as str)."""
    if isinstance(value, dict) and "tensor" in value:
        return np.array(value["data"], dtype=value["tensor"]).reshape(value["shape"])
    return value


def _encode(value):
    if isinstance(value, np.ndarray):
        return {"tensor": value.dtype.name, "shape": list(value.shape),
                "data": value.reshape(-1).tolist()}
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def build_table() -> dict:
    """The table from the installed onnx package (its every default-domain schema)."""
    import onnx
    from onnx import helper, numpy_helper
    ops: dict[str, list] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx"):
            continue
        attrs = {}
        for name, a in sorted(schema.attributes.items()):
            default = None
            if a.default_value is not None and a.default_value.type:
                default = helper.get_attribute_value(a.default_value)
                if isinstance(default, onnx.TensorProto):
                    default = numpy_helper.to_array(default)
                default = _encode(default)
            attrs[name] = default
        ops.setdefault(schema.name, []).append([schema.since_version, attrs])
    for versions in ops.values():
        versions.sort(key=lambda v: v[0])
    return {"onnx": onnx.__version__, "max_opset": onnx.defs.onnx_opset_version(),
            "ops": dict(sorted(ops.items()))}


if __name__ == "__main__":
    with open(TABLE, "w") as f:
        json.dump(build_table(), f, indent=0, sort_keys=False)
        f.write("\n")
    print(f"wrote {TABLE}")
