"""Where edgenn keeps what it learns on a machine: $EDGENN_CACHE_DIR, default
~/.cache/edgenn (tuning results under tune/, converted graphs under graphs/)."""
from __future__ import annotations

import os


def base() -> str:
    return os.environ.get("EDGENN_CACHE_DIR",
                          os.path.join(os.path.expanduser("~"), ".cache", "edgenn"))
