"""Sealed (encrypted, authenticated) .enn files: graph/sealed.py."""
from __future__ import annotations

import numpy as np
import pytest

import edgenn
from edgenn.demo import DEMO_MODEL
from edgenn.graph import sealed
from edgenn.graph.sealed import SealedModelError

X = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))["images"][:4]


@pytest.fixture(scope="module")
def key():
    return edgenn.generate_key()


@pytest.fixture(scope="module")
def plain_out():
    return edgenn.InferenceSession(DEMO_MODEL).run(None, {"image": X})


@pytest.fixture()
def sealed_path(tmp_path, key):
    path = tmp_path / "digits.sealed.enn"
    edgenn.convert(DEMO_MODEL, str(path), key=key)
    return path


def test_round_trip_runs_identically(sealed_path, key, plain_out):
    got = edgenn.InferenceSession(str(sealed_path), key=key).run(None, {"image": X})
    for a, b in zip(got, plain_out):
        np.testing.assert_array_equal(a, b)


def test_key_forms_and_env(sealed_path, key, plain_out, monkeypatch):
    raw = bytes.fromhex(key)
    import base64
    for form in (raw, key.upper(), base64.b64encode(raw).decode()):
        edgenn.load(str(sealed_path), key=form)
    monkeypatch.setenv(sealed.KEY_ENV, key)
    got = edgenn.InferenceSession(str(sealed_path)).run(None, {"image": X})
    np.testing.assert_array_equal(got[0], plain_out[0])
    data = sealed_path.read_bytes()
    edgenn.InferenceSession(data)               # bytes work too


def test_key_never_in_the_file(sealed_path, key):
    data = sealed_path.read_bytes()
    raw = bytes.fromhex(key)
    assert raw not in data and key.encode() not in data and key.upper().encode() not in data
    assert b"Conv" not in data and b"edgenn" not in data    # the graph is not readable


def test_wrong_or_missing_key(sealed_path, key, monkeypatch):
    monkeypatch.delenv(sealed.KEY_ENV, raising=False)
    with pytest.raises(SealedModelError, match="sealed"):
        edgenn.load(str(sealed_path))
    other = edgenn.generate_key()
    with pytest.raises(SealedModelError, match="wrong key") as info:
        edgenn.load(str(sealed_path), key=other)
    assert other not in str(info.value) and key not in str(info.value)
    for bad in ("00" * 16, "not a key!", b"\0" * 31):
        with pytest.raises(SealedModelError) as info:
            edgenn.load(str(sealed_path), key=bad)
        assert (bad if isinstance(bad, str) else bad.hex()) not in str(info.value)


@pytest.mark.parametrize("where", ["magic", "version", "nonce", "body", "tag", "truncate",
                                   "extend"])
def test_tampered_file_is_refused(sealed_path, key, where):
    data = bytearray(sealed_path.read_bytes())
    at = {"magic": 2, "version": 8, "nonce": 12, "body": len(data) // 2, "tag": len(data) - 3}
    if where == "truncate":
        data = data[:-1]
    elif where == "extend":
        data += b"\0"
    else:
        data[at[where]] ^= 0x01
    sealed_path.write_bytes(bytes(data))
    with pytest.raises(edgenn.ModelFormatError):
        edgenn.load(str(sealed_path), key=key)


def test_cli_convert_encrypt(tmp_path, key, monkeypatch, plain_out):
    from edgenn.cli import main
    monkeypatch.setenv(sealed.KEY_ENV, key)
    out = tmp_path / "c.enn"
    assert main(["convert", DEMO_MODEL, "-o", str(out), "--encrypt"]) == 0
    assert sealed.looks_sealed(out.read_bytes()[:16])
    got = edgenn.InferenceSession(str(out)).run(None, {"image": X})
    np.testing.assert_array_equal(got[0], plain_out[0])
    monkeypatch.delenv(sealed.KEY_ENV)
    assert main(["inspect", str(out)]) != 0             # a clean refusal, no traceback
