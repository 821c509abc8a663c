"""Encrypted .enn files (model protection): AES-256-GCM over the whole .enn container.

Layout: MAGIC (8 bytes) | version (u8) | nonce (12 bytes) | ciphertext + 16-byte tag.
The magic, version and nonce are authenticated too (GCM associated data), so any change
to any byte of the file, or a wrong key, fails the tag check: SealedModelError, before a
byte of the model is parsed. The key (32 bytes; given as bytes, hex or base64) comes from
the caller or EDGENN_MODEL_KEY; it is never written to the file, a log or an error
message. `cryptography` is an optional extra: pip install 'edgenn[crypto]'.

Cost: a sealed model is decrypted into memory at load (no memory map); AES-GCM runs at
several GB/s with AES-NI, so the load-time cost is that of one copy of the file.
"""
from __future__ import annotations

import base64
import binascii
import os
import struct

from ..errors import ModelFormatError

MAGIC = b"ENNSEAL\x00"
VERSION = 1
KEY_ENV = "EDGENN_MODEL_KEY"
_HEAD = struct.Struct("<8sB12s")     # magic, version, nonce


class SealedModelError(ModelFormatError):
    """A sealed model cannot be opened: no key, a wrong key, or a tampered file."""


def looks_sealed(head: bytes) -> bool:
    return head[:len(MAGIC)] == MAGIC


def generate_key() -> str:
    """A new random 256-bit key, hex (keep it out of the model's directory)."""
    return os.urandom(32).hex()


def _aead(key):
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise SealedModelError("sealed (encrypted) models need the optional "
                               "'cryptography' package: pip install 'edgenn[crypto]'") from exc
    return AESGCM(_key_bytes(key))


def _key_bytes(key) -> bytes:
    """bytes, or a str of hex or base64, or None for $EDGENN_MODEL_KEY -> 32 key bytes."""
    if key is None:
        key = os.environ.get(KEY_ENV)
        if not key:
            raise SealedModelError(f"this model is sealed: give key=... or set ${KEY_ENV}")
    if isinstance(key, str):
        text = key.strip()
        try:
            key = bytes.fromhex(text)
        except ValueError:
            try:
                key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
            except (binascii.Error, ValueError):
                raise SealedModelError("the key is neither hex nor base64") from None
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        size = len(key) if isinstance(key, (bytes, bytearray)) else "?"
        raise SealedModelError(f"the key must be 32 bytes (AES-256), got {size}")
    return bytes(key)


def seal(data: bytes, key=None) -> bytes:
    """The .enn bytes `data` encrypted and authenticated under `key`."""
    nonce = os.urandom(12)
    head = _HEAD.pack(MAGIC, VERSION, nonce)
    return head + _aead(key).encrypt(nonce, bytes(data), head)


def unseal(blob, key=None, source: str = "<bytes>") -> bytes:
    """The .enn bytes inside a sealed file; SealedModelError on a wrong key or tampering."""
    if len(blob) < _HEAD.size + 16:
        raise SealedModelError(f"{source}: sealed model truncated ({len(blob)} bytes)")
    magic, version, nonce = _HEAD.unpack_from(blob)
    if magic != MAGIC or version != VERSION:
        raise SealedModelError(f"{source}: not a sealed edgenn model of version {VERSION}")
    aead = _aead(key)
    from cryptography.exceptions import InvalidTag
    try:
        return aead.decrypt(nonce, bytes(blob[_HEAD.size:]), bytes(blob[:_HEAD.size]))
    except InvalidTag:
        raise SealedModelError(f"{source}: wrong key, or the file was modified") from None
