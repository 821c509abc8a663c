"""Memory limits, checked before allocation.

Every planned tensor, the kernels' scratch and one execution context as a whole are sized
at plan time; a plan over the limit is refused with a ResourceLimitError naming the node
that asks for how much. The default limit is half the machine's physical memory (or of
the address-space limit, when one is set); InferenceSession(max_memory=...) or
EDGENN_MAX_MEMORY (bytes, or with a K/M/G suffix) override it.
"""
from __future__ import annotations

import os

from ..errors import ResourceLimitError

_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def physical_memory() -> int:
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            total = min(total, soft)
    except (ImportError, ValueError, OSError):
        pass
    return total


def parse_bytes(value) -> int:
    """An int, or a string like '512M', '2G' -> bytes."""
    if isinstance(value, str):
        v = value.strip().upper().removesuffix("B")
        mult = _SUFFIX.get(v[-1:], 1)
        try:
            n = float(v[:-1] if v[-1:] in _SUFFIX else v)
        except ValueError:
            raise ValueError(f"not a size in bytes: {value!r}") from None
        return int(n * mult)
    return int(value)


def resolve(max_memory) -> int:
    """The limit in bytes: the argument, else EDGENN_MAX_MEMORY, else half the memory."""
    if max_memory is None:
        max_memory = os.environ.get("EDGENN_MAX_MEMORY") or physical_memory() // 2
    limit = parse_bytes(max_memory)
    if limit <= 0:
        raise ValueError(f"max_memory must be > 0, got {max_memory!r}")
    return limit


def fmt(nbytes: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} B"


def check_tensor(what: str, nbytes: int, limit: int) -> None:
    if nbytes > limit:
        raise ResourceLimitError(f"{what} needs {fmt(nbytes)}, more than the memory limit "
                                 f"{fmt(limit)} (InferenceSession(max_memory=...) or "
                                 f"EDGENN_MAX_MEMORY)")
